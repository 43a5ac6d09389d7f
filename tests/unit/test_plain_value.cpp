// SPDX-License-Identifier: MIT
// plain_value(): a value entry's pickle graph, and its value.json, back to the value, checked by
// round trips through the real parts: a value pickled (pickle::write_value), run by the pickle
// machine, read by plain_value() from the graph (or rendered by value_json() and read by
// plain_value() from that), pickled again: the same bytes.
#include "support/pickle_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/format/pickle/pickle_writer.hpp>
#include <ckptfs/format/pickle/read_plain_value.hpp>
#include <ckptfs/format/pickle/value_json.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

using namespace ckptfs;
using Value = PlainValue;
using ckptfs::test::PickleBuilder;

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

// plain_value() of the graph of the pickle `bytes`, with `budget` nodes.
std::optional<Value> from_graph(const std::string& bytes, std::uint64_t budget = 1'000'000) {
  MemorySource source(bytes);
  auto parsed = pickle::parse(source, 0, source.size());
  return plain_value(parsed.graph, parsed.graph.root(), budget);
}

// Every kind of plain value, in containers of every kind.
std::vector<Value> every_kind() {
  const Value betas = Value::tuple({Value::real(0.9), Value::real(0.999)});
  return {
      Value::tuple({}),
      Value::tuple({Value::integer(1)}),
      betas,
      Value::tuple({Value::integer(1), Value::str("a"), Value::none_value(), betas}),
      Value::list({betas, Value::list({})}),
      Value::set({}),
      Value::set({Value::integer(3), Value::str("x"), betas}),
      Value::frozenset({}),
      Value::frozenset({Value::bytes_value("k")}),
      Value::list({Value::set({Value::frozenset({Value::integer(1)})})}),
      Value::bytearray_value(""),
      Value::bytearray_value(std::string("\x00\xff"
                                         "ab",
                                         4)),
      // id2label: int keys stay ints.
      Value::dict({{Value::integer(0), Value::str("cat")}, {Value::integer(1), Value::str("dog")}}),
      // Keys of every hashable kind, and str keys that look like value.json's markers.
      Value::dict({{Value::str("0"), Value::integer(0)},
                   {Value::integer(0), Value::integer(1)},
                   {Value::real(0.5), Value::none_value()},
                   {Value::boolean(true), Value::str("t")},
                   {Value::none_value(), Value::str("n")},
                   {Value::bytes_value("b"), Value::str("b")},
                   {betas, Value::str("tuple key")},
                   {Value::frozenset({Value::integer(2)}), Value::str("f")}}),
      Value::dict({{Value::str("__float__"), Value::str("nan")}}),
      Value::dict({{Value::str("__bytes__"), Value::str("00ff")}}),
      Value::dict({{Value::str("__class__"), Value::str("os.system")},
                   {Value::str("args"), Value::list({Value::str("rm -rf /")})}}),
      Value::dict(
          {{Value::str("a"), Value::integer(1)}, {Value::str("__tuple__"), Value::list({})}}),
      Value::dict({{Value::str("__"), Value::integer(1)}, {Value::str("___"), Value::integer(2)}}),
      Value::big_integer(std::string(1024, '\x7f')),           // a JSON number still
      Value::big_integer(std::string(1025, '\x7f')),           // {"__int__": "0x7f7f..."}
      Value::big_integer(std::string(4999, '\x01') + '\xf0'),  // and negative
      Value::list(
          {Value::dict({{Value::str("betas"), betas}, {Value::str("lr"), Value::real(1e-3)}})}),
  };
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

TEST_CASE("plain_value: tuples, sets, bytearrays, any dict keys, keys like markers: exact") {
  // From value.json (value_json()'s rule read back) and from the graph, the very same pickle.
  for (const Value& v : every_kind()) {
    const std::string want = pickled(v);
    CAPTURE(json_of_pickle(want));
    const auto got = round_trip(v);
    REQUIRE(got);
    CHECK(*got == want);
    const auto graph = from_graph(want);
    REQUIRE(graph);
    CHECK(pickled(*graph) == want);
  }
  // value.json's forms, as the rule says them.
  CHECK(json_of_pickle(pickled(every_kind()[2])) == R"({"__tuple__":[0.9,0.999]})");
  CHECK(json_of_pickle(pickled(every_kind()[12])) == R"({"__dict__":[[0,"cat"],[1,"dog"]]})");
  CHECK(json_of_pickle(pickled(every_kind()[14])) == R"({"__dict__":[["__float__","nan"]]})");
  CHECK(json_of_pickle(pickled(every_kind()[11])) == R"({"__bytearray__":"00ff6162"})");
  CHECK(json_of_pickle(pickled(every_kind()[18])) == R"({"__":1,"___":2})");
  CHECK(json_of_pickle(pickled(every_kind()[19])).find_first_not_of("0123456789") ==
        std::string::npos);  // 1024 bytes: a number
  CHECK(json_of_pickle(pickled(every_kind()[20])).starts_with(R"({"__int__":"0x7f7f)"));
  CHECK(json_of_pickle(pickled(every_kind()[6])) ==
        R"({"__set__":[3,"x",{"__tuple__":[0.9,0.999]}]})");
}

TEST_CASE("plain_value: from the graph, OrderedDicts, torch.Size and numpy scalars stay so") {
  // These come back exactly from the graph; value.json says them up to type (a dict, a tuple,
  // a number), equal as Python compares them.
  const Value dtype =
      Value::call("numpy", "dtype",
                  Value::tuple({Value::str("f8"), Value::boolean(false), Value::boolean(true)}),
                  Value::tuple({Value::integer(3), Value::str("<"), Value::none_value(),
                                Value::none_value(), Value::none_value(), Value::integer(-1),
                                Value::integer(-1), Value::integer(0)}));
  const std::string half(std::string("\0\0\0\0\0\0\xe0?", 8));  // 0.5
  const Value scalar = Value::call("numpy.core.multiarray", "scalar",
                                   Value::tuple({dtype, Value::bytes_value(half)}));
  const Value size = Value::call(
      "torch", "Size", Value::tuple({Value::tuple({Value::integer(2), Value::integer(3)})}));
  const Value ordered =
      Value::ordered_dict({{Value::str("a"), Value::integer(1)}, {Value::integer(2), scalar}});
  for (const auto& [v, json] : {std::pair{scalar, std::string("0.5")},
                                {size, std::string(R"({"__tuple__":[2,3]})")},
                                {ordered, std::string(R"({"__dict__":[["a",1],[2,0.5]]})")}}) {
    const std::string want = pickled(v);
    const auto graph = from_graph(want);
    REQUIRE(graph);
    CHECK(pickled(*graph) == want);
    CHECK(json_of_pickle(want) == json);
  }
  // As CPython pickles numpy.float64(0.5) at protocol 2 (what torch.save runs).
  CHECK(pickled(scalar).starts_with(
      std::string("\200\002cnumpy.core.multiarray\nscalar\nq\000cnumpy\ndtype\nq\001X\002\000\000"
                  "\000f8q\002\211\210\207q\003Rq\004(K\003X\001\000\000\000<q\005NNNJ\377\377"
                  "\377\377J\377\377\377\377K\000tq\006b",
                  96)));
}

TEST_CASE("plain_value: what is no plain data is none, from the graph as from value.json") {
  // Each is not plain from the graph; value_json() of it reads as not plain either, so that no
  // reader makes up a value the pickle did not hold.
  using P = PickleBuilder;
  const std::string cases[] = {
      // An object of another class, a global, a persistent id.
      P().proto(2).global("argparse", "Namespace").empty_tuple().reduce().stop().bytes(),
      P().proto(2).empty_list().global("torch", "float32").append().stop().bytes(),
      P().proto(2).mark().binunicode("storage").tuple().binpersid().stop().bytes(),
      // A list inside itself.
      P().proto(2).empty_list().binput(0).binget(0).append().stop().bytes(),
      // A list as a dict key, a list in a set, a dict as a dict key.
      P().proto(2).empty_dict().empty_list().integer(1).setitem().stop().bytes(),
      P().proto(4).empty_set().mark().empty_list().additems().stop().bytes(),
      P().proto(2).empty_dict().empty_dict().integer(1).setitem().stop().bytes(),
      // A dict with a BUILD state (attributes on it).
      P().proto(2)
          .empty_dict()
          .empty_dict()
          .binunicode("x")
          .integer(1)
          .setitem()
          .build()
          .stop()
          .bytes(),
      // torch.Size of something else than ints; a call of another constructor of numpy.
      P().proto(2).global("torch", "Size").empty_list().tuple1().reduce().stop().bytes(),
      P().proto(2).global("numpy", "load").binunicode("x").tuple1().reduce().stop().bytes(),
  };
  for (const std::string& bytes : cases) {
    CAPTURE(json_of_pickle(bytes));
    CHECK(!from_graph(bytes));
    CHECK(!plain_value(json_of_pickle(bytes)));
  }
  // Keys Python finds equal are one key: the first position, the last value.
  const std::string merged = P().proto(2)
                                 .empty_dict()
                                 .mark()
                                 .integer(1)
                                 .binunicode("a")
                                 .newtrue()
                                 .binunicode("b")
                                 .float_text("1.0")
                                 .binunicode("c")
                                 .integer(2)
                                 .binunicode("d")
                                 .setitems()
                                 .stop()
                                 .bytes();
  CHECK(json_of_pickle(merged) == R"({"__dict__":[[1,"c"],[2,"d"]]})");
  CHECK(pickled(*from_graph(merged)) ==
        pickled(Value::dict(
            {{Value::integer(1), Value::str("c")}, {Value::integer(2), Value::str("d")}})));
  // The budget: each node taken from it; a value sharing one list many times takes it each time.
  const std::string shared = P().proto(2)
                                 .empty_list()
                                 .binput(0)
                                 .mark()
                                 .integer(1)
                                 .integer(2)
                                 .appends()
                                 .mark()
                                 .binget(0)
                                 .binget(0)
                                 .binget(0)
                                 .tuple()
                                 .stop()
                                 .bytes();
  CHECK(from_graph(shared, 10));  // 1 tuple + 3 lists of 2: 10 nodes
  CHECK(!from_graph(shared, 9));
}

TEST_CASE("plain_value: what value_json() only describes, and text that is not its JSON") {
  for (
      const char* described :
      {R"({"__class__": "argparse.Namespace", "kwargs": {}})",
       R"([{"__global__": "torch.float32"}])", R"({"a": [{"__recursion__": true}]})",
       R"([{"__persistent_id__": ["storage", {"__global__": "torch.FloatStorage"}, "0", "cpu", 4]}])",
       R"({"__truncated__": true, "bytes_limit": 5})", R"({"__float__": "nan", "b": 1})",
       R"({"__float__": "0.5"})", R"({"__bytes__": "abc"})", R"({"__bytes__": "ZZ"})",
       R"({"__float__": 1})", "", "[1,", "nan", "[1] 2", R"({"a": 1, "a": 2})",
       // A marker not first, one of no known kind, markers with more than their one key.
       R"({"a": 1, "__class__": "x"})", R"({"__whatever__": 1})", R"({"__tuple__": [1], "x": 2})",
       R"({"__int__": "12"})", R"({"__tuple__": 1})", R"({"__dict__": {"a": 1}})",
       // Pairs that are no pairs; keys and set items Python cannot hash.
       R"({"__dict__": [[1]]})", R"({"__dict__": [[1, 2, 3]]})", R"({"__dict__": [1]})",
       R"({"__dict__": [[[1], 2]]})", R"({"__dict__": [[{"a": 1}, 2]]})", R"({"__set__": [[1]]})",
       R"({"__frozenset__": [{"__bytearray__": "00"}]})"}) {
    CAPTURE(described);
    CHECK(!plain_value(described));
  }
  // The nesting value_json() allows ({"__dict__": [[...]]} takes three levels a value), and no
  // more.
  const std::size_t most = 3 * max_value_depth + 2;
  CHECK(plain_value(std::string(most, '[') + std::string(most, ']')));
  CHECK(!plain_value(std::string(most + 1, '[') + std::string(most + 1, ']')));
}
