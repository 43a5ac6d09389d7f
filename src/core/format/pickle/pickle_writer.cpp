// SPDX-License-Identifier: MIT
// The protocol-2 pickle writer and the value tree written with it.
#include <ckptfs/format/pickle/pickle_writer.hpp>

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

#include <bit>
#include <utility>

namespace ckptfs::pickle {
namespace {

// What Python's UTF-8 decoder accepts with errors='surrogatepass': UTF-8, plus the three-byte
// forms of U+D800-U+DFFF.
bool decodes_with_surrogatepass(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t length = utf8_sequence_length(text, i);
    if (length == 0 && i + 3 <= text.size() && static_cast<unsigned char>(text[i]) == 0xed) {
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      const auto c2 = static_cast<unsigned char>(text[i + 2]);
      if (c1 >= 0xa0 && c1 <= 0xbf && (c2 & 0xc0) == 0x80) length = 3;
    }
    if (length == 0) return false;
    i += length;
  }
  return true;
}

// The fewest little-endian two's complement bytes of the same number (encode_long of pickle):
// drop a top byte that only repeats the sign of the byte below it. Empty stays empty (zero).
std::string shortest_twos_complement(std::string_view bytes) {
  std::string out(bytes);
  while (out.size() > 1) {
    const auto top = static_cast<unsigned char>(out.back());
    const bool below_negative = (static_cast<unsigned char>(out[out.size() - 2]) & 0x80) != 0;
    if (!((top == 0x00 && !below_negative) || (top == 0xff && below_negative))) break;
    out.pop_back();
  }
  if (out.size() == 1 && out[0] == 0) out.clear();  // encode_long(0) is b''
  return out;
}

}  // namespace

Writer::Writer() {
  op(0x80);  // PROTO
  op(2);
}

void Writer::op(std::uint8_t code) { out_.push_back(static_cast<char>(code)); }

void Writer::le(std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void Writer::none() { op('N'); }

void Writer::boolean(bool value) { op(value ? 0x88 : 0x89); }

void Writer::integer(std::int64_t value) {
  if (value >= 0 && value <= 0xff) {
    op('K');  // BININT1
    le(static_cast<std::uint64_t>(value), 1);
  } else if (value >= 0 && value <= 0xffff) {
    op('M');  // BININT2
    le(static_cast<std::uint64_t>(value), 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX) {
    op('J');  // BININT
    le(static_cast<std::uint32_t>(static_cast<std::int32_t>(value)), 4);
  } else {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) {
      bytes[static_cast<std::size_t>(i)] =
          static_cast<char>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff);
    }
    big_integer(bytes);
  }
}

void Writer::big_integer(std::string_view twos_complement_le) {
  const std::string bytes = shortest_twos_complement(twos_complement_le);
  // What fits in an int32 takes the shorter opcodes, as integer() does.
  if (bytes.size() <= 4) {
    std::uint32_t bits = 0;
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      bits |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
    }
    if (!bytes.empty() && bytes.size() < 4 && (bytes.back() & 0x80) != 0) {
      bits |= ~std::uint32_t{0} << (8 * bytes.size());  // sign extension
    }
    integer(static_cast<std::int32_t>(bits));
    return;
  }
  if (bytes.size() < 256) {
    op(0x8a);  // LONG1
    le(bytes.size(), 1);
  } else {
    op(0x8b);  // LONG4
    le(bytes.size(), 4);
  }
  out_ += bytes;
}

void Writer::floating(double value) {
  op('G');  // BINFLOAT: big-endian, unlike every other number in a pickle
  const auto bits = std::bit_cast<std::uint64_t>(value);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

MemoSlot Writer::string(std::string_view utf8) {
  if (!decodes_with_surrogatepass(utf8)) {
    throw Error(
        ExitCode::bad_checkpoint,
        fmt::format("string {} is not UTF-8 (with surrogates): it cannot be pickled as a str",
                    quote(utf8)));
  }
  if (utf8.size() > 0xffffffffu) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("a string of {} bytes is too long for pickle protocol 2", utf8.size()));
  }
  op('X');  // BINUNICODE
  le(utf8.size(), 4);
  out_ += utf8;
  return put();
}

MemoSlot Writer::bytes(std::string_view data) {
  global("_codecs", "encode");
  // Each byte becomes the code point of the same value, UTF-8 encoded in the str.
  std::string text;
  text.reserve(data.size() * 2);
  for (const char c : data) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x80) {
      text.push_back(static_cast<char>(b));
    } else {
      text.push_back(static_cast<char>(0xc0 | (b >> 6)));
      text.push_back(static_cast<char>(0x80 | (b & 0x3f)));
    }
  }
  string(text);
  // CPython's 'latin1' is one constant object: memoized once, got after.
  if (latin1_ == no_slot) {
    latin1_ = string("latin1");
  } else {
    get(latin1_);
  }
  op(0x86);  // TUPLE2
  put();
  reduce();
  return put();
}

MemoSlot Writer::global(std::string_view module, std::string_view name) {
  std::string key;
  key.reserve(module.size() + name.size() + 1);
  key.append(module).append("\n").append(name);
  if (const auto found = globals_.find(key); found != globals_.end()) {
    get(found->second);
    return found->second;
  }
  op('c');  // GLOBAL
  out_ += key;
  out_ += '\n';
  const MemoSlot slot = put();
  globals_.emplace(std::move(key), slot);
  return slot;
}

MemoSlot Writer::put() {
  const MemoSlot slot = next_slot_++;
  if (slot < 256) {
    op('q');  // BINPUT
    le(slot, 1);
  } else {
    op('r');  // LONG_BINPUT
    le(slot, 4);
  }
  return slot;
}

void Writer::get(MemoSlot slot) {
  if (slot < 256) {
    op('h');  // BINGET
    le(slot, 1);
  } else {
    op('j');  // LONG_BINGET
    le(slot, 4);
  }
}

MemoSlot Writer::int_tuple(std::span<const std::int64_t> values) {
  return tuple(values.size(), [&](std::size_t i) { integer(values[i]); });
}

MemoSlot Writer::torch_size(std::span<const std::int64_t> values) {
  global("torch", "Size");
  tuple(1, [&](std::size_t) { int_tuple(values); });
  reduce();
  return put();
}

MemoSlot Writer::begin_dict() {
  op('}');  // EMPTY_DICT
  return put();
}

MemoSlot Writer::begin_list() {
  op(']');  // EMPTY_LIST
  return put();
}

MemoSlot Writer::begin_ordered_dict() {
  global("collections", "OrderedDict");
  op(')');  // EMPTY_TUPLE: OrderedDict()
  reduce();
  return put();
}

void Writer::begin_tuple(std::size_t count) {
  if (count > 3) mark();
}

MemoSlot Writer::end_tuple(std::size_t count) {
  if (count == 0) {
    op(')');  // EMPTY_TUPLE
    return no_slot;
  }
  static constexpr std::uint8_t small[] = {0, 0x85, 0x86, 0x87};  // TUPLE1, TUPLE2, TUPLE3
  op(count <= 3 ? small[count] : std::uint8_t{'t'});
  return put();
}

void Writer::begin_set(bool frozen) {
  global("__builtin__", frozen ? "frozenset" : "set");
  begin_list();  // the one argument, in a tuple of one: (list,)
}

void Writer::end_set() {
  end_tuple(1);
  reduce();
  put();
}

void Writer::mark() { op('('); }
void Writer::reduce() { op('R'); }
void Writer::build() { op('b'); }
void Writer::binpersid() { op('Q'); }

std::string Writer::finish() && {
  op('.');  // STOP
  return std::move(out_);
}

// CPython's batching (see appends(), setitems(), iterated_setitems()): batches of batch_size
// items; one item alone is APPEND or SETITEM without a MARK (appends() and setitems(): only when
// it is the whole container; iterated_setitems(): any last batch of one), and setitems() ends a
// container whose last batch is full with an empty MARK SETITEMS.
bool Batches::marked(std::size_t start) const noexcept {
  const std::size_t n = std::min(Writer::batch_size, count_ - start);
  if (style_ == Style::iterated_setitems) return n != 1;
  return count_ != 1;
}

void Batches::before_item(Writer& w) {
  if (next_ % Writer::batch_size == 0 && marked(next_)) w.mark();
}

void Batches::after_item(Writer& w) {
  const std::size_t start = next_ - next_ % Writer::batch_size;
  ++next_;
  if (next_ % Writer::batch_size != 0 && next_ != count_) return;  // inside a batch
  if (style_ == Style::appends) {
    w.op(marked(start) ? 'e' : 'a');  // APPENDS, APPEND
  } else {
    w.op(marked(start) ? 'u' : 's');  // SETITEMS, SETITEM
  }
}

void Batches::finish(Writer& w) {
  if (style_ == Style::setitems && count_ > 1 && count_ % Writer::batch_size == 0) {
    w.mark();
    w.op('u');  // the empty batch after a full one
  }
}

namespace {

void write_value_at(Writer& w, const Value& v, std::size_t depth) {
  if (depth > max_value_depth_written) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("a value nested deeper than {} levels cannot be written",
                            max_value_depth_written));
  }
  auto item = [&](std::size_t i) { write_value_at(w, v.items[i], depth + 1); };
  auto entry = [&](std::size_t i) {
    write_value_at(w, v.entries[i].first, depth + 1);
    write_value_at(w, v.entries[i].second, depth + 1);
  };
  switch (v.kind) {
    case Value::Kind::none:
      w.none();
      return;
    case Value::Kind::boolean:
      w.boolean(v.flag);
      return;
    case Value::Kind::integer:
      w.integer(v.number);
      return;
    case Value::Kind::big_integer:
      w.big_integer(v.text);
      return;
    case Value::Kind::real:
      w.floating(v.real_value);
      return;
    case Value::Kind::string:
      w.string(v.text);
      return;
    case Value::Kind::bytes:
      w.bytes(v.text);
      return;
    case Value::Kind::list:
      w.list(v.items.size(), item);
      return;
    case Value::Kind::tuple:
      w.tuple(v.items.size(), item);
      return;
    case Value::Kind::dict:
      w.dict(v.entries.size(), entry);
      return;
    case Value::Kind::ordered_dict:
      w.ordered_dict(v.entries.size(), entry);
      return;
    case Value::Kind::bytearray:
      w.global("__builtin__", "bytearray");
      if (v.text.empty()) {
        w.tuple(0, item);
      } else {
        w.tuple(1, [&](std::size_t) { w.bytes(v.text); });
      }
      w.reduce();
      w.put();
      return;
    case Value::Kind::set:
    case Value::Kind::frozenset:
      w.global("__builtin__", v.kind == Value::Kind::set ? "set" : "frozenset");
      w.tuple(1, [&](std::size_t) { w.list(v.items.size(), item); });
      w.reduce();
      w.put();
      return;
    case Value::Kind::call:
      if (!is_plain_call(v.call_module(), v.call_name()) || v.items.empty() ||
          v.items[0].kind != Value::Kind::tuple) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("{}.{} is no constructor of plain data: it is not written",
                                v.call_module(), v.call_name()));
      }
      w.global(v.call_module(), v.call_name());
      write_value_at(w, v.items[0], depth + 1);
      w.reduce();
      w.put();
      if (v.flag && v.items.size() > 1) {
        write_value_at(w, v.items[1], depth + 1);
        w.build();
      }
      return;
  }
}

TorchVersion later(TorchVersion a, TorchVersion b) {
  if (a.major == 0 || b.major == 0) return {};
  return std::pair(a.major, a.minor) < std::pair(b.major, b.minor) ? b : a;
}

TorchVersion since_at(const Value& v, std::size_t depth) {
  if (depth > max_value_depth_written) return {};
  TorchVersion version{1, 13};
  switch (v.kind) {
    case Value::Kind::real:
      return {2, 0};
    case Value::Kind::bytes:
      return {2, 5};
    case Value::Kind::bytearray:
    case Value::Kind::set:
    case Value::Kind::frozenset:
      return {};
    case Value::Kind::call:
      if (v.call_module() != "torch" || v.call_name() != "Size" || v.items.empty()) return {};
      return later(version, since_at(v.items[0], depth + 1));
    case Value::Kind::big_integer:
      return shortest_twos_complement(v.text).size() < 256 ? version : TorchVersion{};
    case Value::Kind::list:
    case Value::Kind::tuple:
      for (const Value& item : v.items) version = later(version, since_at(item, depth + 1));
      return version;
    case Value::Kind::dict:
    case Value::Kind::ordered_dict:
      for (const auto& [key, value] : v.entries) {
        version = later(version, since_at(key, depth + 1));
        version = later(version, since_at(value, depth + 1));
      }
      return version;
    default:
      return version;
  }
}

}  // namespace

void write_value(Writer& writer, const Value& value) { write_value_at(writer, value, 0); }

TorchVersion weights_only_since(const Value& value) { return since_at(value, 0); }

}  // namespace ckptfs::pickle
