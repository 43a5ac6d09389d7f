// SPDX-License-Identifier: MIT
// Tests of the pickle machine: every opcode, real pickles from CPython and torch, hostile bytes.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "support/pickle_builder.hpp"

using ckptfs::Error;
using ckptfs::ExitCode;
using ckptfs::MemorySource;
using ckptfs::test::PickleBuilder;
using namespace ckptfs::pickle;

TEST_SUITE_BEGIN("pickle_machine");

namespace {

// Generated once with Debian's /usr/bin/python3 (CPython 3.11, torch 1.13):
//   state_dict_protocol{2,4}: data.pkl of torch.save(sd[, pickle_protocol=4]) where
//     sd = Sequential(Linear(3, 2)).state_dict(); sd['tied'] = sd['0.weight']
//   nested_protocol{0..5}: pickle.dumps(value, protocol) where shared = [1] and value =
//     {'a': [1, -2, 300, 70000, 2**31, 2**70, -(2**70), 3.5, -0.0, None, True, False],
//      'b': (b'\x00\xff', 'h\xe9llo \u20ac \U0001f600', 'a\\b\nc', frozenset([7])),
//      'c': {2, 3}, 'n': bytearray(b'xy'), 'e': (), 'l': [], 's': (shared, shared)}
//   legacy_file: torch.save({'x': torch.arange(3)}, f, _use_new_zipfile_serialization=False)

// clang-format off
// 324 bytes
const std::string state_dict_protocol2 = std::string(
    "\200\002ccollections\012OrderedDict\012q\000)Rq\001(X\010\000\000\0000.weightq\002ctorch._"
    "utils\012_rebuild_tensor_v2\012q\003((X\007\000\000\000storageq\004ctorch\012FloatStorage"
    "\012q\005X\001\000\000\0000q\006X\003\000\000\000cpuq\007K\006tq\010QK\000K\002K\003\206q"
    "\011K\003K\001\206q\012\211h\000)Rq\013tq\014Rq\015X\006\000\000\0000.biasq\016h\003((h"
    "\004h\005X\001\000\000\0001q\017h\007K\002tq\020QK\000K\002\205q\021K\001\205q\022\211h"
    "\000)Rq\023tq\024Rq\025X\004\000\000\000tiedq\026h\015u}q\027X\011\000\000\000_metadataq"
    "\030h\000)Rq\031(X\000\000\000\000q\032}q\033X\007\000\000\000versionq\034K\001sX\001\000"
    "\000\0000q\035}q\036h\034K\001susb."
    , 324);
// 281 bytes
const std::string state_dict_protocol4 = std::string(
    "\200\004\225\016\001\000\000\000\000\000\000\214\013collections\224\214\013OrderedDict\224"
    "\223\224)R\224(\214\0100.weight\224\214\014torch._utils\224\214\022_rebuild_tensor_v2\224"
    "\223\224((\214\007storage\224\214\005torch\224\214\014FloatStorage\224\223\224\214\0010"
    "\224\214\003cpu\224K\006t\224QK\000K\002K\003\206\224K\003K\001\206\224\211h\002)R\224t"
    "\224R\224\214\0060.bias\224h\007((h\010h\013\214\0011\224h\015K\002t\224QK\000K\002\205"
    "\224K\001\205\224\211h\002)R\224t\224R\224\214\004tied\224h\023u}\224\214\011_metadata\224"
    "h\002)R\224(\214\000\224}\224\214\007version\224K\001s\214\0010\224}\224h\"K\001susb."
    , 281);
// 471 bytes
const std::string nested_protocol0 = std::string(
    "(dp0\012Va\012p1\012(lp2\012I1\012aI-2\012aI300\012aI70000\012aL2147483648L\012aL118059162"
    "0717411303424L\012aL-1180591620717411303424L\012aF3.5\012aF-0.0\012aNaI01\012aI00\012asVb"
    "\012p3\012(c_codecs\012encode\012p4\012(V\\u0000\377\012p5\012Vlatin1\012p6\012tp7\012Rp8"
    "\012Vh\351llo \\u20ac \\U0001f600\012p9\012Va\\u005cb\\u000ac\012p10\012c__builtin__\012fr"
    "ozenset\012p11\012((lp12\012I7\012atp13\012Rp14\012tp15\012sVc\012p16\012c__builtin__\012s"
    "et\012p17\012((lp18\012I2\012aI3\012atp19\012Rp20\012sVn\012p21\012c__builtin__\012bytearr"
    "ay\012p22\012(g4\012(Vxy\012p23\012g6\012tp24\012Rp25\012tp26\012Rp27\012sVe\012p28\012(ts"
    "Vl\012p29\012(lp30\012sVs\012p31\012((lp32\012I1\012ag32\012tp33\012s."
    , 471);
// 400 bytes
const std::string nested_protocol1 = std::string(
    "}q\000(X\001\000\000\000aq\001]q\002(K\001J\376\377\377\377M,\001Jp\021\001\000L2147483648"
    "L\012L1180591620717411303424L\012L-1180591620717411303424L\012G@\014\000\000\000\000\000"
    "\000G\200\000\000\000\000\000\000\000NI01\012I00\012eX\001\000\000\000bq\003(c_codecs\012e"
    "ncode\012q\004(X\003\000\000\000\000\303\277q\005X\006\000\000\000latin1q\006tq\007Rq\010X"
    "\017\000\000\000h\303\251llo \342\202\254 \360\237\230\200q\011X\005\000\000\000a\\b\012cq"
    "\012c__builtin__\012frozenset\012q\013(]q\014K\007atq\015Rq\016tq\017X\001\000\000\000cq"
    "\020c__builtin__\012set\012q\021(]q\022(K\002K\003etq\023Rq\024X\001\000\000\000nq\025c__b"
    "uiltin__\012bytearray\012q\026(h\004(X\002\000\000\000xyq\027h\006tq\030Rq\031tq\032Rq\033"
    "X\001\000\000\000eq\034)X\001\000\000\000lq\035]q\036X\001\000\000\000sq\037(]q K\001ah tq"
    "!u."
    , 400);
// 355 bytes
const std::string nested_protocol2 = std::string(
    "\200\002}q\000(X\001\000\000\000aq\001]q\002(K\001J\376\377\377\377M,\001Jp\021\001\000"
    "\212\005\000\000\000\200\000\212\011\000\000\000\000\000\000\000\000@\212\011\000\000\000"
    "\000\000\000\000\000\300G@\014\000\000\000\000\000\000G\200\000\000\000\000\000\000\000N"
    "\210\211eX\001\000\000\000bq\003(c_codecs\012encode\012q\004X\003\000\000\000\000\303\277q"
    "\005X\006\000\000\000latin1q\006\206q\007Rq\010X\017\000\000\000h\303\251llo \342\202\254 "
    "\360\237\230\200q\011X\005\000\000\000a\\b\012cq\012c__builtin__\012frozenset\012q\013]q"
    "\014K\007a\205q\015Rq\016tq\017X\001\000\000\000cq\020c__builtin__\012set\012q\021]q\022(K"
    "\002K\003e\205q\023Rq\024X\001\000\000\000nq\025c__builtin__\012bytearray\012q\026h\004X"
    "\002\000\000\000xyq\027h\006\206q\030Rq\031\205q\032Rq\033X\001\000\000\000eq\034)X\001"
    "\000\000\000lq\035]q\036X\001\000\000\000sq\037]q K\001ah \206q!u."
    , 355);
// 292 bytes
const std::string nested_protocol3 = std::string(
    "\200\003}q\000(X\001\000\000\000aq\001]q\002(K\001J\376\377\377\377M,\001Jp\021\001\000"
    "\212\005\000\000\000\200\000\212\011\000\000\000\000\000\000\000\000@\212\011\000\000\000"
    "\000\000\000\000\000\300G@\014\000\000\000\000\000\000G\200\000\000\000\000\000\000\000N"
    "\210\211eX\001\000\000\000bq\003(C\002\000\377q\004X\017\000\000\000h\303\251llo \342\202"
    "\254 \360\237\230\200q\005X\005\000\000\000a\\b\012cq\006cbuiltins\012frozenset\012q\007]q"
    "\010K\007a\205q\011Rq\012tq\013X\001\000\000\000cq\014cbuiltins\012set\012q\015]q\016(K"
    "\002K\003e\205q\017Rq\020X\001\000\000\000nq\021cbuiltins\012bytearray\012q\022C\002xyq"
    "\023\205q\024Rq\025X\001\000\000\000eq\026)X\001\000\000\000lq\027]q\030X\001\000\000\000s"
    "q\031]q\032K\001ah\032\206q\033u."
    , 292);
// 206 bytes
const std::string nested_protocol4 = std::string(
    "\200\004\225\303\000\000\000\000\000\000\000}\224(\214\001a\224]\224(K\001J\376\377\377"
    "\377M,\001Jp\021\001\000\212\005\000\000\000\200\000\212\011\000\000\000\000\000\000\000"
    "\000@\212\011\000\000\000\000\000\000\000\000\300G@\014\000\000\000\000\000\000G\200\000"
    "\000\000\000\000\000\000N\210\211e\214\001b\224(C\002\000\377\224\214\017h\303\251llo \342"
    "\202\254 \360\237\230\200\224\214\005a\\b\012c\224(K\007\221\224t\224\214\001c\224\217\224"
    "(K\002K\003\220\214\001n\224\214\010builtins\224\214\011bytearray\224\223\224C\002xy\224"
    "\205\224R\224\214\001e\224)\214\001l\224]\224\214\001s\224]\224K\001ah\026\206\224u."
    , 206);
// 184 bytes
const std::string nested_protocol5 = std::string(
    "\200\005\225\255\000\000\000\000\000\000\000}\224(\214\001a\224]\224(K\001J\376\377\377"
    "\377M,\001Jp\021\001\000\212\005\000\000\000\200\000\212\011\000\000\000\000\000\000\000"
    "\000@\212\011\000\000\000\000\000\000\000\000\300G@\014\000\000\000\000\000\000G\200\000"
    "\000\000\000\000\000\000N\210\211e\214\001b\224(C\002\000\377\224\214\017h\303\251llo \342"
    "\202\254 \360\237\230\200\224\214\005a\\b\012c\224(K\007\221\224t\224\214\001c\224\217\224"
    "(K\002K\003\220\214\001n\224\226\002\000\000\000\000\000\000\000xy\224\214\001e\224)\214"
    "\001l\224]\224\214\001s\224]\224K\001ah\021\206\224u."
    , 184);
// 362 bytes
const std::string legacy_file = std::string(
    "\200\002\212\012l\374\234F\371 j\250P\031.\200\002M\351\003.\200\002}q\000(X\020\000\000"
    "\000protocol_versionq\001M\351\003X\015\000\000\000little_endianq\002\210X\012\000\000\000"
    "type_sizesq\003}q\004(X\005\000\000\000shortq\005K\002X\003\000\000\000intq\006K\004X\004"
    "\000\000\000longq\007K\004uu.\200\002}q\000X\001\000\000\000xq\001ctorch._utils\012_rebuil"
    "d_tensor_v2\012q\002((X\007\000\000\000storageq\003ctorch\012LongStorage\012q\004X\011\000"
    "\000\000789464848q\005X\003\000\000\000cpuq\006K\003Ntq\007QK\000K\003\205q\010K\001\205q"
    "\011\211ccollections\012OrderedDict\012q\012)Rq\013tq\014Rq\015s.\200\002]q\000X\011\000"
    "\000\000789464848q\001a.\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000"
    "\001\000\000\000\000\000\000\000\002\000\000\000\000\000\000\000"
    , 362);
// clang-format on

using P = PickleBuilder;

ParseResult run(const std::string& bytes, const Limits& limits = {}) {
  const MemorySource source(bytes);
  return parse(source, 0, bytes.size(), limits);
}

std::string error_of(const std::string& bytes, const Limits& limits = {}) {
  const MemorySource source(bytes);
  try {
    parse(source, 0, bytes.size(), limits);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_checkpoint);
    return e.what();
  }
  FAIL("parsed without an error");
  return {};
}

std::string hex_of(const std::string& data) {
  std::string out;
  for (const unsigned char c : data) out += fmt::format("{:02x}", c);
  return out;
}

std::string bytes_repr(const std::string& data) {
  std::string out = "b'";
  for (const unsigned char c : data) {
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out + "'";
}

// A Python-like repr of what hangs below `id`, to compare whole structures at once. Recursive, so
// only for the small graphs of these tests; a node already on the path prints as "<cycle>".
std::string render(const Graph& g, NodeId id, std::vector<NodeId>& path);

std::string render_all(const Graph& g, const std::vector<NodeId>& items,
                       std::vector<NodeId>& path) {
  std::string out;
  for (const NodeId item : items) out += (out.empty() ? "" : ", ") + render(g, item, path);
  return out;
}

std::string render_pairs(const Graph& g, const std::vector<std::pair<NodeId, NodeId>>& items,
                         std::vector<NodeId>& path) {
  std::string out;
  for (const auto& [key, value] : items) {
    out += (out.empty() ? "" : ", ") + render(g, key, path) + ": " + render(g, value, path);
  }
  return "{" + out + "}";
}

std::string render_state(const Graph& g, NodeId id, std::vector<NodeId>& path) {
  const NodeId state = g.build_state(id);
  return state == no_node ? "" : ".__setstate__(" + render(g, state, path) + ")";
}

std::string render(const Graph& g, NodeId id, std::vector<NodeId>& path) {
  if (std::find(path.begin(), path.end(), id) != path.end()) return "<cycle>";
  path.push_back(id);
  std::string out;
  switch (g.kind(id)) {
    case Kind::none:
      out = "None";
      break;
    case Kind::boolean:
      out = g.boolean(id) ? "True" : "False";
      break;
    case Kind::integer:
      out = std::to_string(g.integer(id));
      break;
    case Kind::big_integer:
      out = "long(" + hex_of(g.big_integer(id)) + ")";
      break;
    case Kind::floating:
      out = fmt::format("{}", g.floating(id));
      break;
    case Kind::string:
      out = "'" + g.text(id) + "'";
      break;
    case Kind::bytes:
      out = bytes_repr(g.text(id));
      break;
    case Kind::bytearray:
      out = "bytearray(" + bytes_repr(g.text(id)) + ")";
      break;
    case Kind::tuple:
      out = "(" + render_all(g, g.items(id), path) + (g.items(id).size() == 1 ? ",)" : ")");
      break;
    case Kind::list:
      out = "[" + render_all(g, g.items(id), path) + "]";
      break;
    case Kind::dict:
      out = render_pairs(g, g.dict_items(id), path) + render_state(g, id, path);
      break;
    case Kind::set:
      out = g.items(id).empty() ? "set()" : "{" + render_all(g, g.items(id), path) + "}";
      break;
    case Kind::frozenset:
      out = "frozenset({" + render_all(g, g.items(id), path) + "})";
      break;
    case Kind::global:
      out = g.global(id).dotted();
      break;
    case Kind::persistent_id:
      out = "pid(" + render(g, g.persistent_id(id), path) + ")";
      break;
    case Kind::object: {
      const Object& o = g.object(id);
      std::string args = g.kind(o.args) == Kind::tuple ? render_all(g, g.items(o.args), path)
                                                       : "*" + render(g, o.args, path);
      if (o.kwargs != no_node) args += (args.empty() ? "**" : ", **") + render(g, o.kwargs, path);
      out = render(g, o.callable, path) + "(" + args + ")" + render_state(g, id, path);
      if (!o.list_items.empty()) out += ".extend([" + render_all(g, o.list_items, path) + "])";
      if (!o.dict_items.empty()) out += ".update(" + render_pairs(g, o.dict_items, path) + ")";
      break;
    }
  }
  path.pop_back();
  return out;
}

std::string render(const Graph& g, NodeId id) {
  std::vector<NodeId> path;
  return render(g, id, path);
}

std::string root(const std::string& bytes) {
  const ParseResult result = run(bytes);
  CHECK(result.end_offset == bytes.size());
  return render(result.graph, result.graph.root());
}

std::string at_byte(std::uint64_t offset, std::string_view what) {
  return fmt::format("invalid pickle at byte {}: {}", offset, what);
}

// Zeros everywhere but `head` at offset 0, of any size, counting what the machine reads.
class CountingSource final : public ckptfs::ByteSource {
 public:
  CountingSource(std::string head, std::uint64_t size) : head_(std::move(head)), size_(size) {}
  std::uint64_t size() const override { return size_; }
  const std::string& name() const noexcept override { return name_; }
  std::uint64_t furthest() const noexcept { return furthest_; }

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override {
    furthest_ = std::max(furthest_, offset + out.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = offset + i < head_.size() ? static_cast<std::byte>(head_[offset + i]) : std::byte{0};
    }
  }
  std::string head_;
  std::uint64_t size_;
  mutable std::uint64_t furthest_ = 0;
  std::string name_ = "counting";
};

// How many sequences deep the first items go from the root.
std::size_t sequence_depth(const Graph& g) {
  std::size_t levels = 1;
  for (const auto* items = &g.items(g.root()); !items->empty(); ++levels)
    items = &g.items(items->front());
  return levels;
}

}  // namespace

TEST_CASE("constants and binary numbers") {
  CHECK(root(P().none().stop().bytes()) == "None");
  CHECK(root(P().newtrue().stop().bytes()) == "True");
  CHECK(root(P().newfalse().stop().bytes()) == "False");
  CHECK(root(P().binint(-1).stop().bytes()) == "-1");
  CHECK(root(P().binint(std::numeric_limits<std::int32_t>::min()).stop().bytes()) == "-2147483648");
  CHECK(root(P().binint1(255).stop().bytes()) == "255");
  CHECK(root(P().binint2(65535).stop().bytes()) == "65535");
  CHECK(root(P().binfloat(1.5).stop().bytes()) == "1.5");
  CHECK(root(P().binfloat(-0.25).stop().bytes()) == "-0.25");
  CHECK(root(P().long1("").stop().bytes()) == "0");
  CHECK(root(P().long1("\xff").stop().bytes()) == "-1");
  CHECK(root(P().long1(std::string(9, '\xff')).stop().bytes()) == "-1");  // not minimal, fits
  CHECK(root(P().long1(std::string("\x00\x80", 2)).stop().bytes()) == "-32768");
  CHECK(root(P().long1("\xff\xff\xff\xff\xff\xff\xff\x7f").stop().bytes()) ==
        "9223372036854775807");
  CHECK(root(P().long4("\x01\x02").stop().bytes()) == "513");
  CHECK(root(P().integer(-5'000'000'000).stop().bytes()) == "-5000000000");
  CHECK(root(P().long4(std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x80", 9)).stop().bytes()) ==
        "long(000000000000000080)");

  SUBCASE("torch's legacy magic number is a big integer with its bytes") {
    const std::string magic = "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";
    const ParseResult result = run(P().proto(2).long1(magic).stop().bytes());
    REQUIRE(result.graph.kind(result.graph.root()) == Kind::big_integer);
    CHECK(result.graph.big_integer(result.graph.root()) == magic);
    CHECK(result.protocol == 2);
  }
}

TEST_CASE("protocol 0 numbers") {
  CHECK(root(P().int_text("01").stop().bytes()) == "True");
  CHECK(root(P().int_text("00").stop().bytes()) == "False");
  CHECK(root(P().int_text("0").stop().bytes()) == "0");
  CHECK(root(P().int_text("-5").stop().bytes()) == "-5");
  CHECK(root(P().int_text("+7").stop().bytes()) == "7");
  CHECK(root(P().int_text("99999999999999999999").stop().bytes()) == "long(ffff0f632d5ec76b05)");
  CHECK(root(P().long_text("123L").stop().bytes()) == "123");
  CHECK(root(P().long_text("123").stop().bytes()) == "123");
  CHECK(root(P().long_text("-9223372036854775808L").stop().bytes()) == "-9223372036854775808");
  CHECK(root(P().long_text("-9223372036854775809L").stop().bytes()) == "long(ffffffffffffff7fff)");
  CHECK(root(P().long_text("1180591620717411303424L").stop().bytes()) ==
        "long(000000000000000040)");
  // the same bytes as pickle.encode_long
  CHECK(root(P().long_text("-1267650600228229401496703205376L").stop().bytes()) ==
        "long(000000000000000000000000f0)");
  CHECK(
      root(P().long_text("100000000000000000000000000000000000000000000000007L").stop().bytes()) ==
      "long(07000000000064b5fd3405c4d2876692f9153b6c44)");
  CHECK(root(P().long_text("9223372036854775808").stop().bytes()) == "long(000000000000008000)");
  CHECK(root(P().long_text("-18446744073709551616").stop().bytes()) == "long(0000000000000000ff)");
  CHECK(root(P().float_text("1.5").stop().bytes()) == "1.5");
  CHECK(root(P().float_text("+2.5").stop().bytes()) == "2.5");
  CHECK(root(P().float_text("-inf").stop().bytes()) == "-inf");
  CHECK(root(P().float_text("1e3").stop().bytes()) == "1000");

  CHECK(error_of(P().int_text("12a").stop().bytes()) ==
        at_byte(0, "INT argument \"12a\" is not a decimal integer"));
  CHECK(error_of(P().long_text("L").stop().bytes()) ==
        at_byte(0, "LONG argument \"\" is not a decimal integer"));
  CHECK(error_of(P().long_text("--1").stop().bytes()) ==
        at_byte(0, "LONG argument \"--1\" is not a decimal integer"));
  CHECK(error_of(P().float_text("abc").stop().bytes()) ==
        at_byte(0, "FLOAT argument \"abc\" is not a number"));
  CHECK(error_of(P().float_text("+-1").stop().bytes()) ==
        at_byte(0, "FLOAT argument \"+-1\" is not a number"));
}

TEST_CASE("strings and bytes keep their raw bytes") {
  const auto kind_and_text = [](const std::string& bytes) {
    const ParseResult result = run(bytes);
    return std::pair(result.graph.kind(result.graph.root()),
                     result.graph.text(result.graph.root()));
  };
  CHECK(kind_and_text(P().binunicode("h\xc3\xa9").stop().bytes()) ==
        std::pair(Kind::string, std::string("h\xc3\xa9")));
  CHECK(kind_and_text(P().short_binunicode("abc").stop().bytes()) ==
        std::pair(Kind::string, std::string("abc")));
  CHECK(kind_and_text(P().binunicode8("abcd").stop().bytes()) ==
        std::pair(Kind::string, std::string("abcd")));
  // surrogatepass output is not valid UTF-8 and stays as written
  CHECK(kind_and_text(P().binunicode("\xed\xa0\x80").stop().bytes()) ==
        std::pair(Kind::string, std::string("\xed\xa0\x80")));
  CHECK(kind_and_text(P().binstring("py2\xff").stop().bytes()) ==
        std::pair(Kind::string, std::string("py2\xff")));
  CHECK(kind_and_text(P().short_binstring("s").stop().bytes()) ==
        std::pair(Kind::string, std::string("s")));
  CHECK(kind_and_text(P().binbytes(std::string("\x00\x01", 2)).stop().bytes()) ==
        std::pair(Kind::bytes, std::string("\x00\x01", 2)));
  CHECK(kind_and_text(P().short_binbytes("b").stop().bytes()) ==
        std::pair(Kind::bytes, std::string("b")));
  CHECK(kind_and_text(P().binbytes8("b8").stop().bytes()) ==
        std::pair(Kind::bytes, std::string("b8")));
  CHECK(kind_and_text(P().bytearray8("ba").stop().bytes()) ==
        std::pair(Kind::bytearray, std::string("ba")));
  CHECK(kind_and_text(P().binunicode("").stop().bytes()) == std::pair(Kind::string, std::string()));

  SUBCASE("STRING: a quoted Python 2 literal with escapes") {
    CHECK(kind_and_text(P().string_text(R"('a\n\x41\101\q\'')").stop().bytes()) ==
          std::pair(Kind::string, std::string("a\nAA\\q'")));
    CHECK(root(P().string_text(R"("dq\\\"\t")").stop().bytes()) == "'dq\\\"\t'");
    CHECK(kind_and_text(P().string_text(R"('\0\377')").stop().bytes()).second ==
          std::string("\0\xff", 2));
    CHECK(root(P().string_text("''").stop().bytes()) == "''");
    CHECK(error_of(P().string_text("abc").stop().bytes()) ==
          at_byte(0, "STRING argument \"abc\" is not quoted"));
    CHECK(error_of(P().string_text("'abc\"").stop().bytes()) ==
          at_byte(0, "STRING argument \"'abc\\\"\" is not quoted"));
    CHECK(error_of(P().string_text("'").stop().bytes()) ==
          at_byte(0, "STRING argument \"'\" is not quoted"));
    CHECK(error_of(P().string_text(R"('ab\')").stop().bytes()) ==
          at_byte(0, "STRING argument ends with a lone backslash"));
    CHECK(error_of(P().string_text(R"('\x4')").stop().bytes()) ==
          at_byte(0, "STRING argument has an invalid \\x escape"));
  }
  SUBCASE("UNICODE: raw-unicode-escape to UTF-8") {
    CHECK(root(P().unicode_text("\\u00e9\\U0001f600x\xe9").stop().bytes()) ==
          "'\xc3\xa9\xf0\x9f\x98\x80x\xc3\xa9'");
    // an escape needs an odd run of backslashes
    CHECK(root(P().unicode_text(R"(\\u0041 \\\u0041 \x)").stop().bytes()) == R"('\\u0041 \\A \x')");
    CHECK(root(P().unicode_text("\\ud800").stop().bytes()) == "'\xed\xa0\x80'");
    CHECK(root(P().unicode_text("").stop().bytes()) == "''");
    CHECK(error_of(P().unicode_text("\\u12").stop().bytes()) ==
          at_byte(0, "UNICODE argument has a truncated \\u escape"));
    CHECK(error_of(P().unicode_text("\\U00110000").stop().bytes()) ==
          at_byte(0, "UNICODE argument has a \\U escape beyond U+10FFFF"));
  }
}

TEST_CASE("containers") {
  CHECK(root(P().empty_tuple().stop().bytes()) == "()");
  CHECK(root(P().binint1(1).tuple1().stop().bytes()) == "(1,)");
  CHECK(root(P().binint1(1).binint1(2).tuple2().stop().bytes()) == "(1, 2)");
  CHECK(root(P().binint1(1).binint1(2).binint1(3).tuple3().stop().bytes()) == "(1, 2, 3)");
  CHECK(root(P().mark().binint1(1).binint1(2).binint1(3).binint1(4).tuple().stop().bytes()) ==
        "(1, 2, 3, 4)");
  CHECK(root(P().mark().tuple().stop().bytes()) == "()");
  CHECK(root(P().empty_list()
                 .binint1(1)
                 .append()
                 .mark()
                 .binint1(2)
                 .binint1(3)
                 .appends()
                 .stop()
                 .bytes()) == "[1, 2, 3]");
  CHECK(root(P().empty_list().mark().appends().stop().bytes()) == "[]");
  CHECK(root(P().mark().binint1(1).binint1(2).list().stop().bytes()) == "[1, 2]");
  CHECK(root(P().empty_dict()
                 .binint1(1)
                 .binint1(2)
                 .setitem()
                 .mark()
                 .binint1(3)
                 .binint1(4)
                 .binint1(5)
                 .binint1(6)
                 .setitems()
                 .stop()
                 .bytes()) == "{1: 2, 3: 4, 5: 6}");
  CHECK(root(P().mark().binint1(1).binint1(2).dict().stop().bytes()) == "{1: 2}");
  CHECK(root(P().mark().dict().stop().bytes()) == "{}");
  // duplicate keys are all kept, in order: the consumer decides
  CHECK(root(P().empty_dict()
                 .mark()
                 .binint1(1)
                 .binint1(2)
                 .binint1(1)
                 .binint1(3)
                 .setitems()
                 .stop()
                 .bytes()) == "{1: 2, 1: 3}");
  CHECK(root(P().empty_set().mark().binint1(1).binint1(2).additems().stop().bytes()) == "{1, 2}");
  CHECK(root(P().empty_set().stop().bytes()) == "set()");
  CHECK(root(P().mark().binint1(1).binint1(2).frozenset().stop().bytes()) == "frozenset({1, 2})");
  CHECK(root(P().mark().binint1(1).mark().binint1(2).tuple().tuple().stop().bytes()) ==
        "(1, (2,))");
}

TEST_CASE("stack opcodes") {
  CHECK(root(P().binint1(1).binint1(2).pop().stop().bytes()) == "1");
  CHECK(root(P().binint1(1).mark().binint1(2).binint1(3).pop_mark().stop().bytes()) == "1");
  // POP with nothing above the MARK pops the MARK, as pickle.py does
  CHECK(root(P().binint1(1).mark().pop().tuple1().stop().bytes()) == "(1,)");

  const ParseResult dup = run(P().empty_list().dup().tuple2().stop().bytes());
  const auto& items = dup.graph.items(dup.graph.root());
  REQUIRE(items.size() == 2);
  CHECK(items[0] == items[1]);
  CHECK(dup.graph.size() == 2);
}

TEST_CASE("immutable values CPython shares are shared nodes") {
  const ParseResult r = run(P().mark()
                                .none()
                                .none()
                                .newtrue()
                                .newtrue()
                                .newfalse()
                                .newfalse()
                                .empty_tuple()
                                .empty_tuple()
                                .binint1(7)
                                .binint(7)
                                .integer(-5)
                                .binint(-5)
                                .integer(300)
                                .integer(300)
                                .empty_list()
                                .empty_list()
                                .tuple()
                                .stop()
                                .bytes());
  const auto& items = r.graph.items(r.graph.root());
  REQUIRE(items.size() == 16);
  for (std::size_t i = 0; i < 12; i += 2) CHECK(items[i] == items[i + 1]);
  CHECK(items[12] != items[13]);  // 300 is beyond CPython's small ints
  CHECK(items[14] != items[15]);  // lists are mutable: never shared
}

TEST_CASE("memo: GET pushes the same node") {
  SUBCASE("BINPUT / BINGET") {
    const ParseResult r = run(P().empty_list().binput(0).binget(0).tuple2().stop().bytes());
    CHECK(r.graph.items(r.graph.root())[0] == r.graph.items(r.graph.root())[1]);
  }
  SUBCASE("LONG_BINPUT / LONG_BINGET with a huge index") {
    const ParseResult r = run(P().empty_list()
                                  .long_binput(4'000'000'000)
                                  .long_binget(4'000'000'000)
                                  .tuple2()
                                  .stop()
                                  .bytes());
    CHECK(r.graph.items(r.graph.root())[0] == r.graph.items(r.graph.root())[1]);
  }
  SUBCASE("PUT / GET") {
    const ParseResult r = run(P().empty_list().put(0).get(0).tuple2().stop().bytes());
    CHECK(r.graph.items(r.graph.root())[0] == r.graph.items(r.graph.root())[1]);
  }
  SUBCASE("MEMOIZE numbers entries as the memo grows") {
    CHECK(root(P().empty_list()
                   .memoize()
                   .none()
                   .memoize()
                   .binget(1)
                   .binget(0)
                   .tuple3()
                   .stop()
                   .bytes()) == "(None, None, [])");
  }
  SUBCASE("a list that contains itself") {
    const ParseResult r = run(P().empty_list().binput(0).binget(0).append().stop().bytes());
    CHECK(r.graph.items(r.graph.root()) == std::vector<NodeId>{r.graph.root()});
    CHECK(render(r.graph, r.graph.root()) == "[<cycle>]");
  }
  SUBCASE("a sparse index later covered by the dense memo") {
    P p;
    p.binunicode("A").long_binput(5000).pop();
    for (std::uint32_t i = 0; i < 3000; ++i) p.none().long_binput(i).pop();
    p.long_binget(5000);                                          // still A
    p.binunicode("B").long_binput(5000).pop().long_binget(5000);  // now B
    p.binunicode("C").memoize().pop().long_binget(3001);          // len(memo) = 3001 entries
    p.tuple3().stop();
    CHECK(root(p.bytes()) == "('A', 'B', 'C')");
  }
  CHECK(error_of(P().empty_list().binget(7).stop().bytes()) ==
        at_byte(1, "BINGET of memo index 7 that was never stored"));
  CHECK(error_of(P().empty_list().long_binget(70000).stop().bytes()) ==
        at_byte(1, "LONG_BINGET of memo index 70000 that was never stored"));
  CHECK(error_of(P().empty_list().get(5).stop().bytes()) ==
        at_byte(1, "GET of memo index 5 that was never stored"));
  CHECK(error_of(P().empty_list().line('p', "-1").stop().bytes()) ==
        at_byte(1, "PUT argument \"-1\" is not a memo index"));
  CHECK(error_of(P().empty_list().line('g', "").stop().bytes()) ==
        at_byte(1, "GET argument \"\" is not a memo index"));
}

TEST_CASE("globals, calls and BUILD") {
  CHECK(root(P().global("torch._utils", "_rebuild_tensor_v2").stop().bytes()) ==
        "torch._utils._rebuild_tensor_v2");
  SUBCASE("Python 2 names and torch's rename") {
    CHECK(root(P().global("__builtin__", "eval").stop().bytes()) == "builtins.eval");
    CHECK(root(P().global("copy_reg", "_reconstructor").stop().bytes()) ==
          "copyreg._reconstructor");
    CHECK(root(P().global("torch.tensor", "_rebuild_from_type").stop().bytes()) ==
          "torch._tensor._rebuild_from_type");
    CHECK(root(P().global("torch.tensors", "x").stop().bytes()) == "torch.tensors.x");
  }
  SUBCASE("STACK_GLOBAL") {
    const ParseResult r = run(P().proto(4)
                                  .short_binunicode("collections")
                                  .short_binunicode("Counter")
                                  .stack_global()
                                  .stop()
                                  .bytes());
    CHECK(r.graph.global(r.graph.root()).module == "collections");
    CHECK(r.graph.global(r.graph.root()).name == "Counter");
    CHECK(error_of(
              P().short_binbytes("os").short_binunicode("system").stack_global().stop().bytes()) ==
          at_byte(12, "STACK_GLOBAL of a bytes and a str (needs two str)"));
  }
  SUBCASE("REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ record the call") {
    CHECK(root(P().global("argparse", "Namespace").binint1(1).tuple1().reduce().stop().bytes()) ==
          "argparse.Namespace(1)");
    CHECK(root(P().global("argparse", "Namespace").empty_tuple().newobj().stop().bytes()) ==
          "argparse.Namespace()");
    CHECK(root(P().global("argparse", "Namespace")
                   .binint1(1)
                   .tuple1()
                   .empty_dict()
                   .binunicode("k")
                   .none()
                   .setitem()
                   .newobj_ex()
                   .stop()
                   .bytes()) == "argparse.Namespace(1, **{'k': None})");
    CHECK(root(P().mark().binint1(1).inst("argparse", "Namespace").stop().bytes()) ==
          "argparse.Namespace(1)");
    CHECK(root(P().mark()
                   .global("argparse", "Namespace")
                   .binint1(1)
                   .binint1(2)
                   .obj()
                   .stop()
                   .bytes()) == "argparse.Namespace(1, 2)");
    CHECK(root(P().none().binint1(1).reduce().stop().bytes()) ==
          "None(*1)");  // anything may be "called"
    CHECK(error_of(P().mark().obj().stop().bytes()) ==
          at_byte(1, "OBJ without a class after its MARK"));
  }
  SUBCASE("BUILD sets, merges or replaces the state") {
    const std::string object = P().global("m", "C").empty_tuple().newobj().bytes();
    CHECK(root(P().raw(object)
                   .empty_dict()
                   .binunicode("a")
                   .binint1(1)
                   .setitem()
                   .build()
                   .stop()
                   .bytes()) == "m.C().__setstate__({'a': 1})");
    CHECK(root(P().raw(object)
                   .empty_dict()
                   .binunicode("a")
                   .binint1(1)
                   .setitem()
                   .binput(0)
                   .build()
                   .empty_dict()
                   .binunicode("b")
                   .binint1(2)
                   .setitem()
                   .build()
                   .binget(0)
                   .tuple2()
                   .stop()
                   .bytes()) ==
          "(m.C().__setstate__({'a': 1, 'b': 2}), {'a': 1})");  // merged into a new dict
    CHECK(root(P().raw(object)
                   .none()
                   .binint1(1)
                   .tuple2()
                   .build()
                   .empty_dict()
                   .build()
                   .stop()
                   .bytes()) == "m.C().__setstate__({})");
    // on a dict: an OrderedDict's attributes, e.g. a state_dict's _metadata
    CHECK(root(P().empty_dict()
                   .empty_dict()
                   .binunicode("_metadata")
                   .empty_dict()
                   .setitem()
                   .build()
                   .stop()
                   .bytes()) == "{}.__setstate__({'_metadata': {}})");
  }
  SUBCASE("APPEND(S), SETITEM(S) and ADDITEMS on an object") {
    const std::string object = P().global("m", "C").empty_tuple().newobj().bytes();
    CHECK(root(P().raw(object).binint1(1).append().mark().binint1(2).appends().stop().bytes()) ==
          "m.C().extend([1, 2])");
    CHECK(root(P().raw(object)
                   .binint1(1)
                   .binint1(2)
                   .setitem()
                   .mark()
                   .binint1(3)
                   .binint1(4)
                   .setitems()
                   .stop()
                   .bytes()) == "m.C().update({1: 2, 3: 4})");
    CHECK(root(P().raw(object).mark().binint1(5).additems().stop().bytes()) == "m.C().extend([5])");
  }
  SUBCASE("persistent ids") {
    CHECK(root(P().mark().binunicode("storage").binint1(2).tuple().binpersid().stop().bytes()) ==
          "pid(('storage', 2))");
    CHECK(root(P().persid("abc").stop().bytes()) == "pid('abc')");
    CHECK(error_of(P().persid("\xc3\xa9").stop().bytes()) ==
          at_byte(0, "PERSID argument \"\xc3\xa9\" is not ASCII"));
  }
}

TEST_CASE("inert built-in constructions become data") {
  const auto call = [](std::string_view module, std::string_view name, const std::string& args) {
    return root(P().global(module, name).raw(args).reduce().stop().bytes());
  };
  const std::string no_args = P().empty_tuple().bytes();
  CHECK(call("collections", "OrderedDict", no_args) == "{}");
  CHECK(call("collections", "OrderedDict",
             P().mark()
                 .binint1(1)
                 .binint1(2)
                 .tuple2()
                 .binint1(3)
                 .binint1(4)
                 .tuple2()
                 .list()
                 .tuple1()
                 .bytes()) == "{1: 2, 3: 4}");
  CHECK(call("collections", "OrderedDict",
             P().empty_list().mark().binint1(1).binint1(2).list().append().tuple1().bytes()) ==
        "{1: 2}");  // Python 2
  CHECK(call("collections", "OrderedDict",
             P().empty_dict().binint1(1).binint1(2).setitem().tuple1().bytes()) == "{1: 2}");
  CHECK(
      call("collections", "OrderedDict", P().mark().binint1(1).tuple1().list().tuple1().bytes()) ==
      "collections.OrderedDict([(1,)])");
  CHECK(root(P().global("collections", "OrderedDict")
                 .empty_tuple()
                 .empty_dict()
                 .newobj_ex()
                 .stop()
                 .bytes()) == "{}");
  CHECK(root(P().global("collections", "OrderedDict")
                 .empty_tuple()
                 .empty_dict()
                 .binint1(1)
                 .binint1(1)
                 .setitem()
                 .newobj_ex()
                 .stop()
                 .bytes()) == "collections.OrderedDict(**{1: 1})");
  CHECK(root(P().global("collections", "OrderedDict").empty_tuple().newobj().stop().bytes()) ==
        "{}");
  CHECK(root(P().mark().inst("collections", "OrderedDict").stop().bytes()) == "{}");

  CHECK(call("__builtin__", "set", no_args) == "set()");
  CHECK(call("__builtin__", "set", P().empty_list().binint1(2).append().tuple1().bytes()) == "{2}");
  CHECK(call("builtins", "frozenset", P().binint1(1).binint1(2).tuple2().tuple1().bytes()) ==
        "frozenset({1, 2})");
  CHECK(call("builtins", "set", P().binint1(1).tuple1().bytes()) == "builtins.set(1)");

  CHECK(call("_codecs", "encode",
             P().binunicode("\xc3\xbf\x01").binunicode("latin1").tuple2().bytes()) ==
        "b'\\xff\\x01'");
  CHECK(call("_codecs", "encode", P().binunicode("a").binunicode("latin-1").tuple2().bytes()) ==
        "b'a'");
  CHECK(call("_codecs", "encode", P().binunicode("a").binunicode("utf-8").tuple2().bytes()) ==
        "_codecs.encode('a', 'utf-8')");
  CHECK(call("_codecs", "encode",
             P().binunicode("\xe2\x82\xac").binunicode("latin1").tuple2().bytes()) ==
        "_codecs.encode('\xe2\x82\xac', 'latin1')");
  CHECK(call("_codecs", "set", no_args) == "_codecs.set()");

  CHECK(call("__builtin__", "bytearray", no_args) == "bytearray(b'')");
  CHECK(call("builtins", "bytearray", P().short_binbytes("ab").tuple1().bytes()) ==
        "bytearray(b'ab')");
  CHECK(call("builtins", "bytearray",
             P().binunicode("\xc3\xbf").binunicode("latin-1").tuple2().bytes()) ==
        "bytearray(b'\\xff')");
  CHECK(call("__builtin__", "bytes", no_args) == "b''");
  CHECK(call("builtins", "bytearray", P().binint1(3).tuple1().bytes()) == "builtins.bytearray(3)");
}

TEST_CASE("dangerous callables stay inert objects") {
  const auto marker =
      std::filesystem::temp_directory_path() / fmt::format("ckptfs_pickle_pwned_{}", ::getpid());
  std::filesystem::remove(marker);
  const std::string command = "touch " + marker.string();

  const ParseResult system =
      run(P().global("os", "system").mark().unicode_text(command).tuple().reduce().stop().bytes());
  const Graph& g = system.graph;
  const Object& call = g.object(g.root());
  CHECK(g.global(call.callable).dotted() == "os.system");
  CHECK(render(g, call.args) == "('" + command + "',)");
  CHECK(call.kwargs == no_node);
  CHECK(call.state == no_node);
  CHECK(g.size() == 4);  // the global, the string, the tuple, the object: nothing else
  CHECK_FALSE(std::filesystem::exists(marker));

  CHECK(root(P().proto(2)
                 .global("__builtin__", "eval")
                 .binunicode("__import__('os').system('id')")
                 .tuple1()
                 .reduce()
                 .stop()
                 .bytes()) == "builtins.eval('__import__('os').system('id')')");
  CHECK(root(P().proto(4)
                 .short_binunicode("builtins")
                 .short_binunicode("exec")
                 .stack_global()
                 .short_binunicode("x=1")
                 .tuple1()
                 .reduce()
                 .stop()
                 .bytes()) == "builtins.exec('x=1')");
  CHECK(root(P().global("subprocess", "Popen").binunicode("sh").tuple1().newobj().stop().bytes()) ==
        "subprocess.Popen('sh')");
}

TEST_CASE("framing and protocol") {
  for (int version = 0; version <= 5; ++version) {
    CHECK(run(P().proto(static_cast<std::uint8_t>(version)).none().stop().bytes()).protocol ==
          version);
  }
  CHECK(run(P().none().stop().bytes()).protocol == 0);
  CHECK(root(P().proto(4).frame(2).none().stop().bytes()) == "None");
  CHECK(error_of(P().proto(9).none().stop().bytes()) ==
        at_byte(0, "unsupported pickle protocol 9"));
  CHECK(error_of(P().proto(4).frame(3).none().stop().bytes()) ==
        at_byte(2, "FRAME length 3 exceeds the 2 bytes left"));
}

TEST_CASE("unsupported and unknown opcodes") {
  CHECK(error_of(P().proto(2).op(0x82).le(1, 1).stop().bytes()) ==
        at_byte(2, "EXT1: the extension registry (copyreg codes) is not supported"));
  CHECK(error_of(P().op(0x83).le(1, 2).stop().bytes()) ==
        at_byte(0, "EXT2: the extension registry (copyreg codes) is not supported"));
  CHECK(error_of(P().op(0x84).le(1, 4).stop().bytes()) ==
        at_byte(0, "EXT4: the extension registry (copyreg codes) is not supported"));
  CHECK(error_of(P().proto(5).op(0x97).stop().bytes()) ==
        at_byte(2, "NEXT_BUFFER: out-of-band buffers are not supported"));
  CHECK(error_of(P().proto(5).binbytes("x").op(0x98).stop().bytes()) ==
        at_byte(8, "READONLY_BUFFER: out-of-band buffers are not supported"));
  CHECK(error_of(P().proto(2).op(0xd3).stop().bytes()) == at_byte(2, "unknown opcode 0xd3"));
  CHECK(error_of(P().op('A').bytes()) == at_byte(0, "unknown opcode 0x41"));
  CHECK(error_of(P().op(0x99).bytes()) == at_byte(0, "unknown opcode 0x99"));
}

TEST_CASE("real pickles: torch.save state_dicts (protocols 2 and 4)") {
  for (const auto* bytes : {&state_dict_protocol2, &state_dict_protocol4}) {
    CAPTURE(bytes->size());
    const ParseResult result = run(*bytes);
    const Graph& g = result.graph;
    CHECK(result.end_offset == bytes->size());
    CHECK(result.protocol == (bytes == &state_dict_protocol2 ? 2 : 4));
    REQUIRE(g.kind(g.root()) == Kind::dict);
    const auto& items = g.dict_items(g.root());
    REQUIRE(items.size() == 3);
    CHECK(g.text(items[0].first) == "0.weight");
    CHECK(g.text(items[1].first) == "0.bias");
    CHECK(g.text(items[2].first) == "tied");
    CHECK(items[2].second == items[0].second);  // the same tensor object, through the memo

    const Object& weight = g.object(items[0].second);
    CHECK(g.global(weight.callable).dotted() == "torch._utils._rebuild_tensor_v2");
    const auto& args = g.items(weight.args);
    REQUIRE(args.size() == 6);
    REQUIRE(g.kind(args[0]) == Kind::persistent_id);
    CHECK(render(g, g.persistent_id(args[0])) == "('storage', torch.FloatStorage, '0', 'cpu', 6)");
    CHECK(render(g, weight.args) ==
          "(pid(('storage', torch.FloatStorage, '0', 'cpu', 6)), 0, (2, 3), (3, 1), False, {})");
    CHECK(render(g, items[1].second) ==
          "torch._utils._rebuild_tensor_v2(pid(('storage', torch.FloatStorage, '1', 'cpu', 2)), 0, "
          "(2,), (1,), False, {})");
    CHECK(render(g, g.build_state(g.root())) ==
          "{'_metadata': {'': {'version': 1}, '0': {'version': 1}}}");
  }
}

TEST_CASE("real pickles: one nested value in protocols 0 to 5") {
  const std::string expected =
      "{'a': [1, -2, 300, 70000, 2147483648, long(000000000000000040), long(0000000000000000c0), "
      "3.5, -0, None, True, False], "
      "'b': (b'\\x00\\xff', 'h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80', 'a\\b\nc', "
      "frozenset({7})), "
      "'c': {2, 3}, 'n': bytearray(b'xy'), 'e': (), 'l': [], 's': ([1], [1])}";
  const std::string* pickles[] = {&nested_protocol0, &nested_protocol1, &nested_protocol2,
                                  &nested_protocol3, &nested_protocol4, &nested_protocol5};
  for (int version = 0; version <= 5; ++version) {
    CAPTURE(version);
    const ParseResult result = run(*pickles[version]);
    const Graph& g = result.graph;
    CHECK(render(g, g.root()) == expected);
    CHECK(result.protocol == (version < 2 ? 0 : version));
    const auto& shared = g.items(g.dict_items(g.root()).back().second);
    CHECK(shared[0] == shared[1]);
  }
}

TEST_CASE("real pickles: a legacy torch.save stream, pickle after pickle") {
  const MemorySource source(legacy_file);
  std::uint64_t offset = 0;
  const auto next = [&] {
    ParseResult result = parse(source, offset, legacy_file.size() - offset);
    CHECK(result.end_offset > offset);
    offset = result.end_offset;
    return result;
  };
  const ParseResult magic = next();
  CHECK(magic.graph.big_integer(magic.graph.root()) == "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19");
  const ParseResult version = next();
  CHECK(version.graph.integer(version.graph.root()) == 1001);
  const ParseResult sys_info = next();
  CHECK(render(sys_info.graph, sys_info.graph.root()) ==
        "{'protocol_version': 1001, 'little_endian': True, 'type_sizes': {'short': 2, 'int': 4, "
        "'long': 4}}");
  const ParseResult main = next();
  CHECK(render(main.graph, main.graph.root()) ==
        "{'x': torch._utils._rebuild_tensor_v2(pid(('storage', torch.LongStorage, '789464848', "
        "'cpu', 3, None)), "
        "0, (3,), (1,), False, {})}");
  const ParseResult keys = next();
  CHECK(render(keys.graph, keys.graph.root()) == "['789464848']");
  CHECK(offset + 8 + 3 * 8 == legacy_file.size());  // then the count and the three int64
}

TEST_CASE("hostile: truncated at every byte") {
  const std::string* pickles[] = {&state_dict_protocol2, &state_dict_protocol4, &nested_protocol0,
                                  &nested_protocol1,     &nested_protocol2,     &nested_protocol3,
                                  &nested_protocol4,     &nested_protocol5};
  for (const std::string* bytes : pickles) {
    const MemorySource whole(*bytes);
    for (std::size_t length = 0; length < bytes->size(); ++length) {
      CAPTURE(length);
      // cut by max_length, and by the end of the source
      CHECK_THROWS_AS(parse(whole, 0, length), Error);
      const MemorySource prefix(bytes->substr(0, length));
      CHECK_THROWS_AS(parse(prefix, 0, length + 100), Error);
    }
  }
  CHECK(error_of("") == at_byte(0, "truncated pickle: no STOP opcode in its 0 bytes"));
  CHECK(error_of(P().proto(2).none().bytes()) ==
        at_byte(3, "truncated pickle: no STOP opcode in its 3 bytes"));
  CHECK(error_of(P().op('J').raw("ab").bytes()) ==
        at_byte(0, "truncated pickle: BININT needs 4 bytes, 2 left"));
  CHECK(error_of(P().op('X').le(5, 4).raw("ab").bytes()) ==
        at_byte(0, "BINUNICODE length 5 exceeds the 2 bytes left"));
}

TEST_CASE("hostile: every byte replaced never crashes") {
  const std::string* pickles[] = {&state_dict_protocol2, &state_dict_protocol4, &nested_protocol0,
                                  &nested_protocol1,     &nested_protocol5,     &legacy_file};
  const char replacements[] = {'\x00', '\x7f', '\x80', '\xff', '(', 'e', 'u', 'b', 'h', '0'};
  std::size_t parsed = 0;
  std::size_t rejected = 0;
  for (const std::string* original : pickles) {
    for (std::size_t i = 0; i < original->size(); ++i) {
      for (const char replacement : replacements) {
        std::string bytes = *original;
        bytes[i] = replacement;
        try {
          run(bytes);
          ++parsed;
        } catch (const Error& e) {
          CHECK(e.code() == ExitCode::bad_checkpoint);
          ++rejected;
        }
      }
    }
  }
  CHECK(parsed > 0);
  CHECK(rejected > 0);
}

TEST_CASE("hostile: length prefixes larger than the pickle allocate nothing") {
  const std::string padding(90, 'N');
  const auto huge = [&](std::uint8_t opcode, std::uint64_t length, int bytes) {
    return error_of(P().op(opcode).le(length, bytes).raw(padding).stop().bytes());
  };
  CHECK(huge('X', 0xffffffff, 4) ==
        at_byte(0, "BINUNICODE length 4294967295 exceeds the 91 bytes left"));
  CHECK(huge('B', 0xffffffff, 4) ==
        at_byte(0, "BINBYTES length 4294967295 exceeds the 91 bytes left"));
  CHECK(huge('T', 0x7fffffff, 4) ==
        at_byte(0, "BINSTRING length 2147483647 exceeds the 91 bytes left"));
  CHECK(huge('T', 0x80000000, 4) == at_byte(0, "BINSTRING has a negative length -2147483648"));
  CHECK(huge(0x8b, 0xfffffffe, 4) == at_byte(0, "LONG4 has a negative length -2"));
  CHECK(huge(0x8b, 0x7fffffff, 4) ==
        at_byte(0, "LONG4 length 2147483647 exceeds the 91 bytes left"));
  CHECK(huge('U', 0xff, 1) == at_byte(0, "SHORT_BINSTRING length 255 exceeds the 91 bytes left"));
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  CHECK(huge(0x8d, max, 8) ==
        at_byte(0, "BINUNICODE8 length 18446744073709551615 exceeds the 91 bytes left"));
  CHECK(huge(0x8e, max, 8) ==
        at_byte(0, "BINBYTES8 length 18446744073709551615 exceeds the 91 bytes left"));
  CHECK(huge(0x96, max, 8) ==
        at_byte(0, "BYTEARRAY8 length 18446744073709551615 exceeds the 91 bytes left"));
  CHECK(huge(0x95, max, 8) ==
        at_byte(0, "FRAME length 18446744073709551615 exceeds the 91 bytes left"));
}

TEST_CASE("hostile: stack underflow in each popping opcode") {
  const std::pair<std::string_view, std::string> popping[] = {
      {"POP", "0"},
      {"DUP", "2"},
      {"TUPLE1", "\x85"},
      {"TUPLE2", "\x86"},
      {"TUPLE3", "\x87"},
      {"APPEND", "a"},
      {"SETITEM", "s"},
      {"REDUCE", "R"},
      {"NEWOBJ", "\x81"},
      {"NEWOBJ_EX", "\x92"},
      {"BUILD", "b"},
      {"BINPERSID", "Q"},
      {"STACK_GLOBAL", "\x93"},
      {"STOP", "."},
      {"BINPUT", std::string("q\x00", 2)},
      {"LONG_BINPUT", std::string("r\x00\x00\x00\x00", 5)},
      {"PUT", "p0\n"},
      {"MEMOIZE", "\x94"}};
  for (const auto& entry : popping) {
    const std::string_view name = entry.first;  // not a structured binding: CAPTURE is a lambda
    const std::string& bytes = entry.second;
    CAPTURE(name);
    CHECK(error_of(bytes) == at_byte(0, fmt::format("stack underflow in {}", name)));
    if (name != "POP") {  // POP would take the MARK itself
      // what lies below a MARK is out of reach
      CHECK(error_of(P().none().none().none().mark().raw(bytes).bytes()) ==
            at_byte(4, fmt::format("stack underflow in {}", name)));
    }
  }
  CHECK(error_of(P().none().tuple2().bytes()) == at_byte(1, "stack underflow in TUPLE2"));
  CHECK(error_of(P().none().setitem().bytes()) == at_byte(1, "stack underflow in SETITEM"));
  CHECK(error_of(P().mark().appends().bytes()) == at_byte(1, "stack underflow in APPENDS"));
  CHECK(error_of(P().mark().none().none().setitems().bytes()) ==
        at_byte(3, "stack underflow in SETITEMS"));
  CHECK(error_of(P().mark().additems().bytes()) == at_byte(1, "stack underflow in ADDITEMS"));
}

TEST_CASE("hostile: opcodes that need a MARK") {
  const std::pair<std::string_view, std::string> marked[] = {
      {"TUPLE", "Nt"},        {"LIST", "Nl"},       {"DICT", "NNd"},
      {"APPENDS", "]Ne"},     {"SETITEMS", "}NNu"}, {"ADDITEMS", "\x8fN\x90"},
      {"FROZENSET", "N\x91"}, {"OBJ", "No"},        {"POP_MARK", "N1"},
      {"INST", "Nim\nC\n"}};
  for (const auto& entry : marked) {
    const std::string_view name = entry.first;  // not a structured binding: CAPTURE is a lambda
    const std::string& bytes = entry.second;
    CAPTURE(name);
    CHECK(error_of(bytes) ==
          at_byte(bytes.find_first_not_of("N]}\x8f"), fmt::format("{} without a MARK", name)));
  }
  CHECK(error_of(P().mark().none().dict().bytes()) ==
        at_byte(2, "DICT with an odd number of items"));
  CHECK(error_of(P().empty_dict().mark().none().setitems().bytes()) ==
        at_byte(3, "SETITEMS with an odd number of items"));
}

TEST_CASE("hostile: containers of the wrong kind") {
  CHECK(error_of(P().empty_list().empty_dict().build().stop().bytes()) ==
        at_byte(2, "BUILD on a list"));
  CHECK(error_of(P().binint1(1).empty_dict().build().stop().bytes()) ==
        at_byte(3, "BUILD on an int"));
  CHECK(error_of(P().none().empty_dict().build().stop().bytes()) == at_byte(2, "BUILD on None"));
  CHECK(error_of(P().global("os", "system").empty_dict().build().stop().bytes()) ==
        at_byte(12, "BUILD on a global"));
  CHECK(error_of(P().empty_dict().none().append().stop().bytes()) ==
        at_byte(2, "APPEND to a dict"));
  CHECK(error_of(P().empty_tuple().mark().none().appends().stop().bytes()) ==
        at_byte(3, "APPENDS to a tuple"));
  CHECK(error_of(P().empty_list().none().none().setitem().stop().bytes()) ==
        at_byte(3, "SETITEM on a list"));
  CHECK(error_of(P().empty_set().mark().none().none().setitems().stop().bytes()) ==
        at_byte(4, "SETITEMS on a set"));
  CHECK(error_of(P().mark().frozenset().mark().none().additems().stop().bytes()) ==
        at_byte(4, "ADDITEMS to a frozenset"));
  CHECK(error_of(P().empty_list().mark().none().additems().stop().bytes()) ==
        at_byte(3, "ADDITEMS to a list"));
}

TEST_CASE("hostile: text lines") {
  CHECK(error_of(P().raw("cos").bytes()) ==
        at_byte(0, "truncated pickle: GLOBAL line has no newline"));
  CHECK(error_of(P().raw("cos\nsystem").bytes()) ==
        at_byte(0, "truncated pickle: GLOBAL line has no newline"));
  CHECK(error_of(P().raw("I12").bytes()) ==
        at_byte(0, "truncated pickle: INT line has no newline"));
  CHECK(error_of(P().global(std::string(8193, 'm'), "x").stop().bytes()) ==
        at_byte(0, "GLOBAL line is longer than 8192 bytes"));
  CHECK(root(P().global(std::string(8192, 'm'), "x").stop().bytes()) ==
        std::string(8192, 'm') + ".x");
  CHECK(error_of(P().mark().inst("m", std::string(9000, 'n')).stop().bytes()) ==
        at_byte(1, "INST line is longer than 8192 bytes"));
  CHECK(error_of(
            P().binunicode(std::string(8193, 'm')).binunicode("x").stack_global().stop().bytes()) ==
        at_byte(8204, "STACK_GLOBAL name is longer than 8192 bytes"));
}

TEST_CASE("hostile: 2,000,000 levels of nesting parse without recursion") {
  constexpr std::size_t depth = 2'000'000;
  SUBCASE("lists") {
    const std::string bytes = std::string(depth, ']') + std::string(depth - 1, 'a') + ".";
    const ParseResult r = run(bytes);
    CHECK(sequence_depth(r.graph) == depth);
  }
  SUBCASE("tuples from marks") {
    const std::string bytes = std::string(depth, '(') + std::string(depth, 't') + ".";
    const ParseResult r = run(bytes);
    CHECK(sequence_depth(r.graph) == depth);
  }
  SUBCASE("tuples from TUPLE1") {
    const std::string bytes = ")" + std::string(depth, '\x85') + ".";
    const ParseResult r = run(bytes);
    CHECK(sequence_depth(r.graph) == depth + 1);
  }
  SUBCASE("dicts") {
    std::string bytes = "}";
    for (std::size_t i = 1; i < depth; ++i) bytes += std::string("K\x00}", 3);
    bytes += std::string(depth - 1, 's') + ".";
    const ParseResult r = run(bytes);
    std::size_t levels = 1;
    for (const auto* items = &r.graph.dict_items(r.graph.root()); !items->empty(); ++levels) {
      items = &r.graph.dict_items(items->front().second);
    }
    CHECK(levels == depth);
  }
}

TEST_CASE("hostile: limits") {
  Limits limits;
  limits.max_nodes = 10;
  CHECK(error_of(std::string(20, ']') + ".", limits) ==
        at_byte(10, "more than 10 nodes (the node limit)"));
  CHECK_NOTHROW(run(std::string(10, ']') + ".", limits));
  CHECK_NOTHROW(run("(" + std::string(20, 'N') + "t.", limits));  // None is one shared node

  limits = {};
  limits.max_stack = 5;
  CHECK(error_of("NN(((((", limits) ==
        at_byte(5, "more than 5 stack entries and marks (the stack limit)"));
  CHECK(error_of("NNNNNN", limits) ==
        at_byte(5, "more than 5 stack entries and marks (the stack limit)"));

  limits = {};
  limits.max_memo = 2;
  CHECK(error_of(P().none().binput(0).binput(1).binput(2).stop().bytes(), limits) ==
        at_byte(5, "more than 2 memo entries (the memo limit)"));
  CHECK(error_of(P().none().long_binput(7'000'000).long_binput(8'000'000).memoize().stop().bytes(),
                 limits) == at_byte(11, "more than 2 memo entries (the memo limit)"));
  CHECK(root(P().none().binput(0).binput(0).binput(1).binput(1).stop().bytes()) ==
        "None");  // rewrites do not count
}

TEST_CASE("hostile: memoized data reused to amplify memory") {
  P p;
  p.global("builtins", "set").binput(0).empty_list().binput(1).mark();
  for (int i = 0; i < 4096; ++i) p.none();
  p.appends().pop();
  for (int i = 0; i < 1000; ++i) p.binget(0).binget(1).tuple1().reduce().pop();
  const std::string message = error_of(p.none().stop().bytes());
  CHECK(message.find("REDUCE copies more than the pickle holds") != std::string::npos);
  CHECK(message.find("memoized data reused to amplify memory") != std::string::npos);
}

TEST_CASE("reading: offsets, chunks and bounds") {
  SUBCASE("a pickle inside a larger source") {
    const std::string pickle = P().proto(2).binint1(7).stop().bytes();
    const MemorySource source("garbage" + pickle + "trailing");
    const ParseResult r = parse(source, 7, 1000);
    CHECK(r.graph.integer(r.graph.root()) == 7);
    CHECK(r.end_offset == 7 + pickle.size());
    const MemorySource bad("garbage" + P().proto(2).op(0xd3).bytes());
    CHECK_THROWS_WITH_AS(parse(bad, 7, 100), at_byte(9, "unknown opcode 0xd3").c_str(), Error);
    CHECK_THROWS_WITH_AS(parse(source, 7, pickle.size() - 1),
                         at_byte(11, "truncated pickle: no STOP opcode in its 4 bytes").c_str(),
                         Error);
    CHECK_THROWS_WITH_AS(parse(source, 1000, 10),
                         at_byte(1000, "truncated pickle: no STOP opcode in its 0 bytes").c_str(),
                         Error);
  }
  SUBCASE("values across chunk boundaries, large payloads and long lines") {
    P p;
    p.proto(4).empty_list().mark();
    std::size_t count = 0;
    for (std::size_t i = 0; p.size() < 3 * 1024 * 1024; ++i, ++count) {
      p.binunicode(std::string(i % 37, static_cast<char>('a' + i % 26)))
          .binfloat(static_cast<double>(i));
    }
    p.appends();
    const std::string big(3 * 1024 * 1024 + 5, 'z');
    p.binbytes(big).append();
    p.unicode_text(std::string(2 * 1024 * 1024 + 3, 'u')).append().stop();
    const ParseResult r = run(p.bytes());
    const Graph& g = r.graph;
    const auto& items = g.items(g.root());
    REQUIRE(items.size() == 2 * count + 2);
    bool all_match = true;
    for (std::size_t i = 0; i < count; ++i) {
      all_match = all_match &&
                  g.text(items[2 * i]) == std::string(i % 37, static_cast<char>('a' + i % 26)) &&
                  g.floating(items[2 * i + 1]) == static_cast<double>(i);
    }
    CHECK(all_match);
    CHECK(g.text(items[2 * count]) == big);
    CHECK(g.text(items[2 * count + 1]) == std::string(2 * 1024 * 1024 + 3, 'u'));
  }
  SUBCASE("a small pickle at the start of a huge source reads one small chunk") {
    const CountingSource source(state_dict_protocol2, std::uint64_t{8} << 30);
    const ParseResult r = parse(source, 0, source.size());
    CHECK(r.end_offset == state_dict_protocol2.size());
    CHECK(source.furthest() <= 64 * 1024);
  }
  SUBCASE("a large pickle reads at most one chunk past its end") {
    P p;
    p.proto(2).empty_list().mark();
    while (p.size() < 5 * 1024 * 1024) p.binunicode("0123456789abcdef");
    p.appends().stop();
    const CountingSource source(p.bytes(), std::uint64_t{8} << 30);
    const ParseResult r = parse(source, 0, source.size());
    CHECK(r.end_offset == p.size());
    CHECK(source.furthest() <= p.size() + 1024 * 1024);
  }
}

TEST_CASE("graph accessors check the kind and the range") {
  const ParseResult r = run(P().binint1(1).empty_list().tuple2().stop().bytes());
  const Graph& g = r.graph;
  CHECK(g.integer(0) == 1);
  CHECK_THROWS_AS(g.kind(3), std::logic_error);
  CHECK_THROWS_AS(g.kind(no_node), std::logic_error);
  CHECK_THROWS_AS(g.items(0), std::logic_error);
  CHECK_THROWS_AS(g.text(1), std::logic_error);
  CHECK_THROWS_AS(g.boolean(0), std::logic_error);
  CHECK_THROWS_AS(g.dict_items(2), std::logic_error);
  CHECK_THROWS_AS(g.object(2), std::logic_error);
  CHECK_THROWS_AS(g.global(2), std::logic_error);
  CHECK_THROWS_AS(g.persistent_id(2), std::logic_error);
  CHECK_THROWS_AS(g.floating(0), std::logic_error);
  CHECK_THROWS_AS(g.big_integer(0), std::logic_error);
  CHECK_THROWS_WITH_AS(g.items(7), "pickle::Graph::items: node 7 out of range (3 nodes)",
                       std::logic_error);
  CHECK_THROWS_WITH_AS(g.items(0), "pickle::Graph::items: node 0 is an int", std::logic_error);
  CHECK(g.build_state(1) == no_node);
  CHECK_THROWS_AS(g.build_state(9), std::logic_error);
  CHECK(Graph().root() == no_node);
  CHECK(Graph().size() == 0);
}

TEST_CASE("a 10,000-tensor state_dict written like torch's") {
  P p;
  p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
  for (int i = 0; i < 10'000; ++i) {
    p.binunicode(fmt::format("layer{}.weight", i));
    p.tensor_v2("FloatStorage", std::to_string(i), "cpu", 2, 0, {2}, {1});
  }
  p.setitems().stop();
  const ParseResult r = run(p.bytes());
  const Graph& g = r.graph;
  const auto& items = g.dict_items(g.root());
  REQUIRE(items.size() == 10'000);
  CHECK(g.text(items.back().first) == "layer9999.weight");
  CHECK(render(g, items.back().second) ==
        "torch._utils._rebuild_tensor_v2(pid(('storage', torch.FloatStorage, '9999', 'cpu', 2)), "
        "0, (2,), (1,), False, {})");
}

TEST_SUITE_END();
