// SPDX-License-Identifier: MIT
// Tests of the pickle writer: the opcodes CPython writes (built independently with the test
// PickleBuilder), the memo, batches, and values read back through our pickle machine.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/format/pickle/pickle_writer.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/pickle_builder.hpp"

using ckptfs::Error;
using ckptfs::ExitCode;
using ckptfs::MemorySource;
using ckptfs::pickle::Kind;
using ckptfs::pickle::MemoSlot;
using ckptfs::pickle::Value;
using ckptfs::pickle::Writer;
using ckptfs::test::PickleBuilder;

TEST_SUITE_BEGIN("pickle_writer");

namespace {

ckptfs::pickle::ParseResult parse(const std::string& bytes) {
  const MemorySource source(bytes);
  return ckptfs::pickle::parse(source, 0, bytes.size());
}

// A pickle of one value written by `write`.
template <class Write>
std::string pickled(Write&& write) {
  Writer w;
  write(w);
  return std::move(w).finish();
}

PickleBuilder begin() {
  PickleBuilder p;
  p.proto(2);
  return p;
}

}  // namespace

TEST_CASE("ints take CPython's opcodes: BININT1, BININT2, BININT, then the shortest LONG1") {
  const std::int64_t values[] = {0,
                                 1,
                                 255,
                                 256,
                                 65535,
                                 65536,
                                 -1,
                                 -128,
                                 -129,
                                 std::numeric_limits<std::int32_t>::min(),
                                 std::numeric_limits<std::int32_t>::max(),
                                 std::int64_t{std::numeric_limits<std::int32_t>::max()} + 1,
                                 std::int64_t{std::numeric_limits<std::int32_t>::min()} - 1,
                                 std::int64_t{1} << 40,
                                 -(std::int64_t{1} << 40),
                                 std::numeric_limits<std::int64_t>::min(),
                                 std::numeric_limits<std::int64_t>::max()};
  for (const std::int64_t value : values) {
    CAPTURE(value);
    const std::string bytes = pickled([&](Writer& w) { w.integer(value); });
    CHECK(bytes == begin().integer(value).stop().bytes());
    const auto result = parse(bytes);
    REQUIRE(result.graph.kind(result.graph.root()) == Kind::integer);
    CHECK(result.graph.integer(result.graph.root()) == value);
  }
}

TEST_CASE("big ints: the fewest two's complement bytes, LONG4 from 256 bytes") {
  // 2^70 with redundant sign bytes: written as LONG1 of 9 bytes.
  std::string two_to_70(16, '\0');
  two_to_70[8] = 0x40;
  CHECK(pickled([&](Writer& w) { w.big_integer(two_to_70); }) ==
        begin().long1(two_to_70.substr(0, 9)).stop().bytes());
  // -2^70: ... 0xc0 then 0xff bytes that only repeat the sign.
  std::string minus(12, '\0');
  minus[8] = static_cast<char>(0xc0);
  minus[9] = minus[10] = minus[11] = static_cast<char>(0xff);
  CHECK(pickled([&](Writer& w) { w.big_integer(minus); }) ==
        begin().long1(minus.substr(0, 9)).stop().bytes());
  // Small numbers given as big integers take the int opcodes.
  CHECK(pickled([&](Writer& w) { w.big_integer(std::string("\x05\x00\x00", 3)); }) ==
        begin().binint1(5).stop().bytes());
  CHECK(pickled([&](Writer& w) { w.big_integer(std::string("\xff\xff", 2)); }) ==
        begin().binint(-1).stop().bytes());
  CHECK(pickled([&](Writer& w) { w.big_integer(""); }) == begin().binint1(0).stop().bytes());
  std::string huge(300, '\x11');
  CHECK(pickled([&](Writer& w) { w.big_integer(huge); }) == begin().long4(huge).stop().bytes());
  const auto result = parse(pickled([&](Writer& w) { w.big_integer(two_to_70); }));
  CHECK(result.graph.kind(result.graph.root()) == Kind::big_integer);
}

TEST_CASE("floats are BINFLOAT, big-endian") {
  for (const double x :
       {0.0, -0.0, 1.5, 1e-300, -3.25e10, std::numeric_limits<double>::infinity()}) {
    CAPTURE(x);
    const std::string bytes = pickled([&](Writer& w) { w.floating(x); });
    CHECK(bytes == begin().binfloat(x).stop().bytes());
    const auto result = parse(bytes);
    CHECK(std::signbit(result.graph.floating(result.graph.root())) == std::signbit(x));
    CHECK(result.graph.floating(result.graph.root()) == x);
  }
}

TEST_CASE("None and bools") {
  CHECK(pickled([](Writer& w) { w.none(); }) == begin().none().stop().bytes());
  CHECK(pickled([](Writer& w) { w.boolean(true); }) == begin().newtrue().stop().bytes());
  CHECK(pickled([](Writer& w) { w.boolean(false); }) == begin().newfalse().stop().bytes());
}

TEST_CASE("strs: BINUNICODE then BINPUT, encoded surrogates pass, other bad UTF-8 does not") {
  const std::string surrogate = "a\xed\xa0\x80z";  // 'a\ud800z' as surrogatepass encodes it
  const std::string bytes = pickled([&](Writer& w) {
    w.list(3, [&](std::size_t i) { w.string(i == 0 ? "" : i == 1 ? "h\xc3\xa9" : surrogate); });
  });
  CHECK(bytes == begin()
                     .empty_list()
                     .binput(0)
                     .mark()
                     .binunicode("")
                     .binput(1)
                     .binunicode("h\xc3\xa9")
                     .binput(2)
                     .binunicode(surrogate)
                     .binput(3)
                     .appends()
                     .stop()
                     .bytes());
  const auto result = parse(bytes);
  CHECK(result.graph.text(result.graph.items(result.graph.root())[2]) == surrogate);

  for (const std::string bad : {"\xff", "\xc0\x80", "\x80", "x\xed\xa0", "\xf4\x90\x80\x80"}) {
    CAPTURE(bad);
    Writer w;
    try {
      w.string(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::bad_checkpoint);
    }
  }
}

TEST_CASE("bytes: _codecs.encode(text, 'latin1'), the global and 'latin1' memoized once") {
  const std::string data("\x00\x7f\x80\xff", 4);
  const std::string bytes = pickled([&](Writer& w) {
    w.tuple(3, [&](std::size_t i) { w.bytes(i == 0 ? data : i == 1 ? std::string("b") : ""); });
  });
  PickleBuilder p = begin();
  p.global("_codecs", "encode").binput(0);
  p.binunicode(std::string("\x00\x7f\xc2\x80\xc3\xbf", 6)).binput(1);
  p.binunicode("latin1").binput(2).tuple2().binput(3).reduce().binput(4);
  p.binget(0).binunicode("b").binput(5).binget(2).tuple2().binput(6).reduce().binput(7);
  p.binget(0).binunicode("").binput(8).binget(2).tuple2().binput(9).reduce().binput(10);
  p.tuple3().binput(11).stop();
  CHECK(bytes == p.bytes());
  const auto result = parse(bytes);
  const auto& items = result.graph.items(result.graph.root());
  REQUIRE(items.size() == 3);
  CHECK(result.graph.kind(items[0]) == Kind::bytes);
  CHECK(result.graph.text(items[0]) == data);
  CHECK(result.graph.text(items[2]).empty());
}

TEST_CASE("globals: GLOBAL the first time, BINGET after, memo slots past 255 are LONG") {
  Writer w;
  w.list(300, [&](std::size_t i) {
    if (i == 0 || i == 299) {
      w.global("collections", "OrderedDict");
    } else {
      w.string("s");
    }
  });
  const std::string bytes = std::move(w).finish();
  PickleBuilder p = begin();
  p.empty_list().binput(0).mark().global("collections", "OrderedDict").binput(1);
  for (std::uint32_t slot = 2; slot < 300; ++slot) {
    p.binunicode("s");
    if (slot < 256) {
      p.binput(static_cast<std::uint8_t>(slot));
    } else {
      p.long_binput(slot);
    }
  }
  p.binget(1).appends().stop();
  CHECK(bytes == p.bytes());

  Writer late;
  for (int i = 0; i < 257; ++i) late.put();
  late.get(256);
  late.get(3);
  CHECK(late.bytes_so_far().substr(late.bytes_so_far().size() - 7) ==
        std::string("j\x00\x01\x00\x00h\x03", 7));
}

TEST_CASE("tuples: EMPTY_TUPLE, TUPLE1-3, MARK ... TUPLE") {
  for (std::size_t n = 0; n <= 5; ++n) {
    CAPTURE(n);
    const std::string bytes = pickled([&](Writer& w) {
      w.tuple(n, [&](std::size_t i) { w.integer(static_cast<std::int64_t>(i)); });
    });
    PickleBuilder p = begin();
    if (n == 0) {
      p.empty_tuple();
    } else {
      if (n > 3) p.mark();
      for (std::size_t i = 0; i < n; ++i) p.binint1(static_cast<std::uint8_t>(i));
      if (n == 1) p.tuple1();
      if (n == 2) p.tuple2();
      if (n == 3) p.tuple3();
      if (n > 3) p.tuple();
      p.binput(0);
    }
    CHECK(bytes == p.stop().bytes());
    const auto result = parse(bytes);
    CHECK(result.graph.items(result.graph.root()).size() == n);
  }
}

TEST_CASE("batches of 1000 as CPython's C pickler writes them (torch.save runs that one)") {
  for (const std::size_t n : {0u, 1u, 2u, 999u, 1000u, 1001u, 2000u, 2001u}) {
    CAPTURE(n);
    // A list: APPEND for a lone item, else MARK ... APPENDS per batch, a batch of one too.
    const std::string list = pickled([&](Writer& w) { w.list(n, [&](std::size_t) { w.none(); }); });
    PickleBuilder p = begin();
    p.empty_list().binput(0);
    if (n == 1) {
      p.none().append();
    } else {
      for (std::size_t start = 0; start < n; start += 1000) {
        p.mark();
        for (std::size_t i = start; i < std::min<std::size_t>(n, start + 1000); ++i) p.none();
        p.appends();
      }
    }
    CHECK(list == p.stop().bytes());
    auto result = parse(list);
    CHECK(result.graph.items(result.graph.root()).size() == n);

    // A dict: SETITEM for a lone item, else MARK ... SETITEMS per batch, and one empty batch
    // more after a full one.
    auto entry = [](Writer& w, std::size_t i) {
      w.integer(static_cast<std::int64_t>(i));
      w.none();
    };
    const std::string dict =
        pickled([&](Writer& w) { w.dict(n, [&](std::size_t i) { entry(w, i); }); });
    PickleBuilder d = begin();
    d.empty_dict().binput(0);
    if (n == 1) {
      d.binint1(0).none().setitem();
    } else if (n > 1) {
      std::size_t start = 0;
      std::size_t batch = 0;
      do {
        batch = std::min<std::size_t>(1000, n - start);
        d.mark();
        for (std::size_t i = start; i < start + batch; ++i)
          d.integer(static_cast<std::int64_t>(i)).none();
        d.setitems();
        start += batch;
      } while (batch == 1000);
    }
    CHECK(dict == d.stop().bytes());
    result = parse(dict);
    CHECK(result.graph.dict_items(result.graph.root()).size() == n);

    // An OrderedDict's items come from an iterator: a lone last item with SETITEM, no empty
    // batch.
    const std::string ordered =
        pickled([&](Writer& w) { w.ordered_dict(n, [&](std::size_t i) { entry(w, i); }); });
    PickleBuilder o = begin();
    o.global("collections", "OrderedDict").binput(0).empty_tuple().reduce().binput(1);
    for (std::size_t start = 0; start < n; start += 1000) {
      const std::size_t batch = std::min<std::size_t>(1000, n - start);
      if (batch > 1) o.mark();
      for (std::size_t i = start; i < start + batch; ++i)
        o.integer(static_cast<std::int64_t>(i)).none();
      if (batch > 1) {
        o.setitems();
      } else {
        o.setitem();
      }
    }
    CHECK(ordered == o.stop().bytes());
    result = parse(ordered);
    CHECK(result.graph.dict_items(result.graph.root()).size() == n);
  }
}

TEST_CASE("OrderedDict and torch.Size are calls") {
  const std::int64_t sizes[] = {2, 3};
  const std::string bytes = pickled([&](Writer& w) {
    w.ordered_dict(2, [&](std::size_t i) {
      w.string(i == 0 ? "a" : "b");
      if (i == 0) {
        w.torch_size(sizes);
      } else {
        w.ordered_dict(0, [](std::size_t) {});
      }
    });
  });
  PickleBuilder p = begin();
  p.global("collections", "OrderedDict").binput(0).empty_tuple().reduce().binput(1).mark();
  p.binunicode("a").binput(2);
  p.global("torch", "Size").binput(3).binint1(2).binint1(3).tuple2().binput(4).tuple1().binput(5);
  p.reduce().binput(6);
  p.binunicode("b").binput(7).binget(0).empty_tuple().reduce().binput(8);
  p.setitems().stop();
  CHECK(bytes == p.bytes());
  const auto result = parse(bytes);
  CHECK(result.graph.dict_items(result.graph.root()).size() == 2);
}

TEST_CASE("value trees read back as they were written") {
  std::string long_int(9, '\0');
  long_int[8] = 1;  // 2^64
  const Value value = Value::dict({
      {Value::str("epoch"), Value::integer(7)},
      {Value::str("lr"), Value::real(0.25)},
      {Value::str("ok"), Value::boolean(true)},
      {Value::str("none"), Value::none_value()},
      {Value::str("big"), Value::big_integer(long_int)},
      {Value::str("raw"), Value::bytes_value(std::string("\x00\xff", 2))},
      {Value::integer(3), Value::tuple({Value::integer(-1), Value::str("x")})},
      {Value::str("list"), Value::list({Value::list({}), Value::dict({})})},
      {Value::str("od"), Value::ordered_dict({{Value::str("k"), Value::integer(1)}})},
  });
  Writer w;
  ckptfs::pickle::write_value(w, value);
  const std::string bytes = std::move(w).finish();
  const auto result = parse(bytes);
  const auto& g = result.graph;
  const auto& items = g.dict_items(g.root());
  REQUIRE(items.size() == 9);
  CHECK(g.text(items[0].first) == "epoch");
  CHECK(g.integer(items[0].second) == 7);
  CHECK(g.floating(items[1].second) == 0.25);
  CHECK(g.boolean(items[2].second));
  CHECK(g.kind(items[3].second) == Kind::none);
  CHECK(g.kind(items[4].second) == Kind::big_integer);
  CHECK(g.text(items[5].second) == std::string("\x00\xff", 2));
  CHECK(g.integer(items[6].first) == 3);
  CHECK(g.items(items[6].second).size() == 2);
  CHECK(g.kind(items[8].second) == Kind::dict);  // OrderedDict reads as a dict
  CHECK(g.dict_items(items[8].second).size() == 1);

  CHECK(ckptfs::pickle::weights_only_since(value) == ckptfs::pickle::TorchVersion{2, 5});
  CHECK(ckptfs::pickle::weights_only_since(Value::list({Value::real(1)})) ==
        ckptfs::pickle::TorchVersion{2, 0});
  CHECK(ckptfs::pickle::weights_only_since(Value::list({Value::str("a"), Value::integer(1)})) ==
        ckptfs::pickle::TorchVersion{1, 13});
  CHECK(ckptfs::pickle::weights_only_since(Value::big_integer(std::string(300, 'x'))) ==
        ckptfs::pickle::TorchVersion{0, 0});
}

TEST_CASE("a value nested past the limit is refused, not a stack overflow") {
  Value deep = Value::none_value();
  for (std::size_t i = 0; i < ckptfs::pickle::max_value_depth_written + 5; ++i) {
    deep = Value::list({std::move(deep)});
  }
  Writer w;
  try {
    ckptfs::pickle::write_value(w, deep);
    FAIL("accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_checkpoint);
  }
  Value ok = Value::none_value();
  for (std::size_t i = 0; i < ckptfs::pickle::max_value_depth_written; ++i) {
    ok = Value::list({std::move(ok)});
  }
  Writer fine;
  ckptfs::pickle::write_value(fine, ok);
  CHECK(parse(std::move(fine).finish()).graph.size() > ckptfs::pickle::max_value_depth_written);
}

TEST_SUITE_END();
