// SPDX-License-Identifier: MIT
// plain_value(): value.json back to the value, checked by the round trip through the real
// parts: a Value pickled (pickle::write_value), run by the pickle machine, rendered by
// value_json(), read by plain_value(), pickled again: the same bytes.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/format/pickle/plain_value.hpp>
#include <ckptfs/format/pickle/value_json.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

using namespace ckptfs;
using pickle::Value;

namespace {

std::string pickled(const Value& v) {
  pickle::Writer w;
  pickle::write_value(w, v);
  return std::move(w).finish();
}

std::string json_of_pickle(const std::string& bytes) {
  MemorySource source(bytes);
  auto parsed = pickle::parse(source, 0, source.size());
  return value_json(parsed.graph, parsed.graph.root(), 1 << 20);
}

// value_json() of `v`, then plain_value() of that, pickled.
std::optional<std::string> round_trip(const Value& v) {
  auto back = plain_value(json_of_pickle(pickled(v)));
  if (!back) return std::nullopt;
  return pickled(*back);
}

}  // namespace

TEST_CASE("plain_value: what value_json() writes whole comes back as the same pickle") {
  const std::string not_utf8 = "a\xff\xfe";
  const Value values[] = {
      Value::none_value(),
      Value::boolean(true),
      Value::boolean(false),
      Value::integer(0),
      Value::integer(-7),
      Value::integer(std::numeric_limits<std::int64_t>::min()),
      Value::integer(std::numeric_limits<std::int64_t>::max()),
      Value::big_integer(std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x01", 9)),  // 2^64
      Value::big_integer(
          std::string("\xff\xff\xff\xff\xff\xff\xff\x7f\xff", 9)),  // a negative int past int64
      Value::big_integer(std::string(300, '\x5a')),
      Value::real(0.1),
      Value::real(-0.0),
      Value::real(1e300),
      Value::real(5e-324),
      Value::real(std::numeric_limits<double>::infinity()),
      Value::real(-std::numeric_limits<double>::infinity()),
      Value::str(""),
      Value::str("epoch \"quoted\" \\ \n\t é 层 \xf0\x9f\x98\x80"),
      Value::bytes_value(std::string("\x00\x01\xff", 3)),
      Value::bytes_value(""),
      Value::list({}),
      Value::list({Value::integer(1), Value::list({Value::str("x"), Value::none_value()})}),
      Value::dict({}),
      Value::dict({{Value::str("lr"), Value::real(0.001)},
                   {Value::str("betas"), Value::list({Value::real(0.9), Value::real(0.999)})},
                   {Value::str("nested"), Value::dict({{Value::str("a"), Value::dict({})}})}}),
  };
  for (const Value& v : values) {
    const std::string want = pickled(v);
    CAPTURE(json_of_pickle(want));
    const auto got = round_trip(v);
    REQUIRE(got);
    CHECK(*got == want);
  }
  // NaN: value_json() writes {"__float__": "nan"}; the NaN comes back (its payload is not kept).
  auto nan = plain_value(json_of_pickle(pickled(Value::real(std::nan("")))));
  REQUIRE(nan);
  CHECK(nan->kind == Value::Kind::real);
  CHECK(std::isnan(nan->real_value));
  // A str that is not UTF-8 comes back as its bytes (base/text.hpp's escapes read back).
  auto s = plain_value(R"(["a\udcff\udcfe"])");
  REQUIRE(s);
  CHECK(s->items.at(0).text == not_utf8);
}

TEST_CASE("plain_value: what JSON flattens comes back as value_json() shows it") {
  // Tuples and sets are arrays, so lists; dict keys are their text, so str.
  CHECK(pickled(*plain_value(R"j({"0": [1, 2], "(1, 2)": true})j")) ==
        pickled(Value::dict({{Value::str("0"), Value::list({Value::integer(1), Value::integer(2)})},
                             {Value::str("(1, 2)"), Value::boolean(true)}})));
}

TEST_CASE("plain_value: what value_json() only describes, and text that is not its JSON") {
  for (
      const char* described :
      {R"({"__class__": "argparse.Namespace", "kwargs": {}})",
       R"([{"__global__": "torch.float32"}])", R"({"a": [{"__recursion__": true}]})",
       R"([{"__persistent_id__": ["storage", {"__global__": "torch.FloatStorage"}, "0", "cpu", 4]}])",
       R"({"__truncated__": true, "bytes_limit": 5})", R"({"__float__": "nan", "b": 1})",
       R"({"__float__": "0.5"})", R"({"__bytes__": "abc"})", R"({"__bytes__": "ZZ"})",
       R"({"__float__": 1})", "", "[1,", "nan", "[1] 2", R"({"a": 1, "a": 2})"}) {
    CAPTURE(described);
    CHECK(!plain_value(described));
  }
  // The nesting value_json() allows, and no more.
  std::string deep = std::string(max_value_depth, '[') + std::string(max_value_depth, ']');
  CHECK(plain_value(deep));
  CHECK(
      !plain_value(std::string(max_value_depth + 2, '[') + std::string(max_value_depth + 2, ']')));
}
