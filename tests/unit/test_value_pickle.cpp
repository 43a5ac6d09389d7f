// SPDX-License-Identifier: MIT
// Unit tests of plain_value(): value_json's forms back to plain values, checked by the pickle the
// writer makes of them against the pickle of the value built by hand; and what is no plain value.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/value_pickle.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

using namespace ckptfs;
using pickle::Value;

namespace {

std::string pickled(const Value& v) {
  pickle::Writer w;
  write_value(w, v);
  return std::move(w).finish();
}

Value plain(std::string_view json) {
  std::string why;
  auto v = plain_value(json, why);
  REQUIRE_MESSAGE(v, why);
  return *v;
}

}  // namespace

TEST_SUITE_BEGIN("value_pickle");

TEST_CASE("JSON scalars and containers as the Python values they describe") {
  CHECK(pickled(plain("null")) == pickled(Value::none_value()));
  CHECK(pickled(plain("true")) == pickled(Value::boolean(true)));
  CHECK(pickled(plain("7")) == pickled(Value::integer(7)));
  CHECK(pickled(plain("-9223372036854775808")) ==
        pickled(Value::integer(std::numeric_limits<std::int64_t>::min())));
  CHECK(pickled(plain("7.0")) == pickled(Value::real(7.0)));
  CHECK(pickled(plain("1e-05")) == pickled(Value::real(1e-05)));
  CHECK(pickled(plain("\"r\\u00e9\"")) == pickled(Value::str("r\xc3\xa9")));
  CHECK(pickled(plain(R"({"lr":0.5,"betas":[0.9,0.999],"n":{}})")) ==
        pickled(Value::dict({{Value::str("lr"), Value::real(0.5)},
                             {Value::str("betas"), Value::list({Value::real(0.9),
                                                                Value::real(0.999)})},
                             {Value::str("n"), Value::dict({})}})));
}

TEST_CASE("integers past 64 bits, bytes and floats JSON has no number for") {
  // 2^64 and -(2^64) + 1 as little-endian two's complement.
  CHECK(pickled(plain("18446744073709551616")) ==
        pickled(Value::big_integer(std::string("\0\0\0\0\0\0\0\0\1", 9))));
  CHECK(pickled(plain("-18446744073709551615")) ==
        pickled(Value::big_integer(std::string("\1\0\0\0\0\0\0\0\xff", 9))));
  CHECK(pickled(plain(R"({"__bytes__":"00ff41"})")) ==
        pickled(Value::bytes_value(std::string("\0\xff" "A", 3))));
  CHECK(pickled(plain(R"({"__float__":"-inf"})")) ==
        pickled(Value::real(-std::numeric_limits<double>::infinity())));
  const Value nan = plain(R"([{"__float__":"nan"}])");
  REQUIRE(nan.items.size() == 1);
  CHECK(std::isnan(nan.items[0].real_value));
  // Not the special forms: a dict of two members, or one whose value is no hex.
  CHECK(plain(R"({"__bytes__":"zz"})").kind == Value::Kind::dict);
  CHECK(plain(R"({"__bytes__":"00","x":1})").kind == Value::Kind::dict);
}

TEST_CASE("what value_json() could not evaluate is no plain value") {
  for (const char* json : {R"({"__class__":"argparse.Namespace","state":{"lr":1}})",
                           R"([1,{"__global__":"os.system"}])",
                           R"({"a":{"__truncated__":true,"bytes_limit":1048576}})",
                           R"({"__recursion__":true})", R"({"__persistent_id__":["x"]})"}) {
    CAPTURE(json);
    std::string why;
    CHECK_FALSE(plain_value(json, why));
    CHECK_FALSE(why.empty());
  }
  std::string why;
  plain_value(R"({"__class__":"argparse.Namespace"})", why);
  CHECK(why == "an instance of argparse.Namespace, which ckptfs never builds");
  // A key of that name anywhere but first is a dict's key like any other.
  CHECK(plain(R"({"a":1,"__class__":2})").entries.size() == 2);
}

TEST_CASE("text that is not strict JSON, or too deep, is refused") {
  std::string why;
  CHECK_THROWS_AS(plain_value("[1,]", why), Error);
  CHECK_THROWS_AS(plain_value("{'a': 1}", why), Error);
  const std::string deep(max_plain_value_depth + 1, '[');
  CHECK_THROWS_AS(plain_value(deep + std::string(max_plain_value_depth + 1, ']'), why), Error);
  const std::string ok(max_plain_value_depth, '[');
  CHECK(plain_value(ok + std::string(max_plain_value_depth, ']'), why));
}

TEST_SUITE_END();
