// SPDX-License-Identifier: MIT
// PickleBuilder: assembles pickle bytes opcode by opcode, for hostile and torch-like test pickles.
//
//   PickleBuilder p;
//   p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().stop();
//   ckptfs::MemorySource source(p.bytes());
//
// Nothing is checked: any sequence can be written, valid or not. Method names are the opcode
// names of pickletools in snake case; text opcodes (protocol 0) take their argument without the
// trailing newline, which the builder adds.
#pragma once

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace ckptfs::test {

class PickleBuilder {
 public:
  const std::string& bytes() const noexcept { return bytes_; }
  std::size_t size() const noexcept { return bytes_.size(); }

  // Raw material: any bytes, one opcode byte, or an opcode followed by a text line.
  PickleBuilder& raw(std::string_view data) {
    bytes_.append(data);
    return *this;
  }
  PickleBuilder& op(std::uint8_t code) {
    bytes_.push_back(static_cast<char>(code));
    return *this;
  }
  PickleBuilder& line(char code, std::string_view text) {
    return op(static_cast<std::uint8_t>(code)).raw(text).raw("\n");
  }
  // `count` bytes of `value`, little-endian (length prefixes, integer arguments).
  PickleBuilder& le(std::uint64_t value, int count) {
    for (int i = 0; i < count; ++i) bytes_.push_back(static_cast<char>(value >> (8 * i)));
    return *this;
  }

  // Framing.
  PickleBuilder& proto(std::uint8_t version) { return op(0x80).le(version, 1); }
  PickleBuilder& frame(std::uint64_t length) { return op(0x95).le(length, 8); }
  PickleBuilder& stop() { return op('.'); }

  // Stack manipulation.
  PickleBuilder& mark() { return op('('); }
  PickleBuilder& pop() { return op('0'); }
  PickleBuilder& pop_mark() { return op('1'); }
  PickleBuilder& dup() { return op('2'); }

  // Constants and numbers.
  PickleBuilder& none() { return op('N'); }
  PickleBuilder& newtrue() { return op(0x88); }
  PickleBuilder& newfalse() { return op(0x89); }
  PickleBuilder& int_text(std::string_view decimal) { return line('I', decimal); }  // "01" = True
  PickleBuilder& long_text(std::string_view decimal) { return line('L', decimal); }
  PickleBuilder& float_text(std::string_view repr) { return line('F', repr); }
  PickleBuilder& binint(std::int32_t value) {
    return op('J').le(static_cast<std::uint32_t>(value), 4);
  }
  PickleBuilder& binint1(std::uint8_t value) { return op('K').le(value, 1); }
  PickleBuilder& binint2(std::uint16_t value) { return op('M').le(value, 2); }
  // LONG1 / LONG4 with the little-endian two's complement bytes given as is.
  PickleBuilder& long1(std::string_view le_bytes) {
    return op(0x8a).le(le_bytes.size(), 1).raw(le_bytes);
  }
  PickleBuilder& long4(std::string_view le_bytes) {
    return op(0x8b).le(le_bytes.size(), 4).raw(le_bytes);
  }
  // What pickle's save_long writes for `value`: BININT1, BININT2, BININT or a minimal LONG1.
  PickleBuilder& integer(std::int64_t value) {
    if (value >= 0 && value <= 0xff) return binint1(static_cast<std::uint8_t>(value));
    if (value >= 0 && value <= 0xffff) return binint2(static_cast<std::uint16_t>(value));
    if (value >= INT32_MIN && value <= INT32_MAX) return binint(static_cast<std::int32_t>(value));
    std::string le_bytes;
    const auto bits = static_cast<std::uint64_t>(value);
    for (int i = 0; i < 8; ++i) le_bytes.push_back(static_cast<char>(bits >> (8 * i)));
    // Drop the bytes that only repeat the sign.
    while (le_bytes.size() > 1) {
      const auto last = static_cast<unsigned char>(le_bytes.back());
      const bool sign = (static_cast<unsigned char>(le_bytes[le_bytes.size() - 2]) & 0x80) != 0;
      if (!((last == 0 && !sign) || (last == 0xff && sign))) break;
      le_bytes.pop_back();
    }
    return long1(le_bytes);
  }
  PickleBuilder& binfloat(double value) {  // big-endian, unlike everything else
    op('G');
    const auto bits = std::bit_cast<std::uint64_t>(value);
    for (int i = 7; i >= 0; --i) bytes_.push_back(static_cast<char>(bits >> (8 * i)));
    return *this;
  }

  // Strings (str) and bytes.
  PickleBuilder& binunicode(std::string_view utf8) { return op('X').le(utf8.size(), 4).raw(utf8); }
  PickleBuilder& short_binunicode(std::string_view utf8) {
    return op(0x8c).le(utf8.size(), 1).raw(utf8);
  }
  PickleBuilder& binunicode8(std::string_view utf8) {
    return op(0x8d).le(utf8.size(), 8).raw(utf8);
  }
  PickleBuilder& unicode_text(std::string_view raw_unicode_escape) {
    return line('V', raw_unicode_escape);
  }
  PickleBuilder& string_text(std::string_view quoted_literal) { return line('S', quoted_literal); }
  PickleBuilder& binstring(std::string_view data) { return op('T').le(data.size(), 4).raw(data); }
  PickleBuilder& short_binstring(std::string_view data) {
    return op('U').le(data.size(), 1).raw(data);
  }
  PickleBuilder& binbytes(std::string_view data) { return op('B').le(data.size(), 4).raw(data); }
  PickleBuilder& short_binbytes(std::string_view data) {
    return op('C').le(data.size(), 1).raw(data);
  }
  PickleBuilder& binbytes8(std::string_view data) { return op(0x8e).le(data.size(), 8).raw(data); }
  PickleBuilder& bytearray8(std::string_view data) { return op(0x96).le(data.size(), 8).raw(data); }

  // Containers.
  PickleBuilder& empty_tuple() { return op(')'); }
  PickleBuilder& tuple() { return op('t'); }  // from the last MARK
  PickleBuilder& tuple1() { return op(0x85); }
  PickleBuilder& tuple2() { return op(0x86); }
  PickleBuilder& tuple3() { return op(0x87); }
  PickleBuilder& empty_list() { return op(']'); }
  PickleBuilder& list() { return op('l'); }
  PickleBuilder& append() { return op('a'); }
  PickleBuilder& appends() { return op('e'); }
  PickleBuilder& empty_dict() { return op('}'); }
  PickleBuilder& dict() { return op('d'); }
  PickleBuilder& setitem() { return op('s'); }
  PickleBuilder& setitems() { return op('u'); }
  PickleBuilder& empty_set() { return op(0x8f); }
  PickleBuilder& additems() { return op(0x90); }
  PickleBuilder& frozenset() { return op(0x91); }

  // The memo.
  PickleBuilder& put(std::uint64_t index) { return line('p', std::to_string(index)); }
  PickleBuilder& get(std::uint64_t index) { return line('g', std::to_string(index)); }
  PickleBuilder& binput(std::uint8_t index) { return op('q').le(index, 1); }
  PickleBuilder& binget(std::uint8_t index) { return op('h').le(index, 1); }
  PickleBuilder& long_binput(std::uint32_t index) { return op('r').le(index, 4); }
  PickleBuilder& long_binget(std::uint32_t index) { return op('j').le(index, 4); }
  PickleBuilder& memoize() { return op(0x94); }

  // Globals, calls and persistent ids.
  PickleBuilder& global(std::string_view module, std::string_view name) {
    return op('c').raw(module).raw("\n").raw(name).raw("\n");
  }
  PickleBuilder& stack_global() { return op(0x93); }
  PickleBuilder& inst(std::string_view module, std::string_view name) {
    return op('i').raw(module).raw("\n").raw(name).raw("\n");
  }
  PickleBuilder& obj() { return op('o'); }
  PickleBuilder& reduce() { return op('R'); }
  PickleBuilder& build() { return op('b'); }
  PickleBuilder& newobj() { return op(0x81); }
  PickleBuilder& newobj_ex() { return op(0x92); }
  PickleBuilder& persid(std::string_view ascii_id) { return line('P', ascii_id); }
  PickleBuilder& binpersid() { return op('Q'); }

  // What torch.save writes for a dense tensor (§2.5 of the format notes), without the memo:
  //   _rebuild_tensor_v2(pid('storage', torch.<storage_class>, key, location, numel),
  //                      offset, size, stride, False, OrderedDict())
  PickleBuilder& tensor_v2(std::string_view storage_class, std::string_view key,
                           std::string_view location, std::int64_t numel,
                           std::int64_t storage_offset, std::initializer_list<std::int64_t> size,
                           std::initializer_list<std::int64_t> stride) {
    global("torch._utils", "_rebuild_tensor_v2").mark();
    mark().binunicode("storage").global("torch", storage_class).binunicode(key);
    binunicode(location).integer(numel).tuple().binpersid();
    integer(storage_offset).int_tuple(size).int_tuple(stride).newfalse();
    global("collections", "OrderedDict").empty_tuple().reduce();
    return tuple().reduce();
  }
  // A tuple of ints the way pickle writes it: EMPTY_TUPLE, TUPLE1-3 or MARK ... TUPLE.
  PickleBuilder& int_tuple(std::initializer_list<std::int64_t> values) {
    if (values.size() == 0) return empty_tuple();
    if (values.size() > 3) mark();
    for (const auto value : values) integer(value);
    if (values.size() == 1) return tuple1();
    if (values.size() == 2) return tuple2();
    if (values.size() == 3) return tuple3();
    return tuple();
  }

 private:
  std::string bytes_;
};

}  // namespace ckptfs::test
