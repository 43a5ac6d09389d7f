// SPDX-License-Identifier: MIT
// The restricted pickle machine: runs protocol 0-5 opcodes from a ByteSource into an inert Graph.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

namespace ckptfs::pickle {
namespace {

// clang-format off
// One list gives both the opcode enum and the names used in messages. The names are pickle.py's
// (and pickletools'), upper case, so a message can be matched against `pickletools.dis` output.
#define CKPTFS_PICKLE_OPCODES(X)                                                               \
  X(MARK, '(') X(STOP, '.') X(POP, '0') X(POP_MARK, '1') X(DUP, '2') X(FLOAT, 'F')              \
  X(INT, 'I') X(BININT, 'J') X(BININT1, 'K') X(LONG, 'L') X(BININT2, 'M') X(NONE, 'N')          \
  X(PERSID, 'P') X(BINPERSID, 'Q') X(REDUCE, 'R') X(STRING, 'S') X(BINSTRING, 'T')              \
  X(SHORT_BINSTRING, 'U') X(UNICODE, 'V') X(BINUNICODE, 'X') X(APPEND, 'a') X(BUILD, 'b')       \
  X(GLOBAL, 'c') X(DICT, 'd') X(EMPTY_DICT, '}') X(APPENDS, 'e') X(GET, 'g') X(BINGET, 'h')     \
  X(INST, 'i') X(LONG_BINGET, 'j') X(LIST, 'l') X(EMPTY_LIST, ']') X(OBJ, 'o') X(PUT, 'p')      \
  X(BINPUT, 'q') X(LONG_BINPUT, 'r') X(SETITEM, 's') X(TUPLE, 't') X(EMPTY_TUPLE, ')')          \
  X(SETITEMS, 'u') X(BINFLOAT, 'G') X(BINBYTES, 'B') X(SHORT_BINBYTES, 'C') X(PROTO, 0x80)      \
  X(NEWOBJ, 0x81) X(EXT1, 0x82) X(EXT2, 0x83) X(EXT4, 0x84) X(TUPLE1, 0x85) X(TUPLE2, 0x86)     \
  X(TUPLE3, 0x87) X(NEWTRUE, 0x88) X(NEWFALSE, 0x89) X(LONG1, 0x8a) X(LONG4, 0x8b)              \
  X(SHORT_BINUNICODE, 0x8c) X(BINUNICODE8, 0x8d) X(BINBYTES8, 0x8e) X(EMPTY_SET, 0x8f)          \
  X(ADDITEMS, 0x90) X(FROZENSET, 0x91) X(NEWOBJ_EX, 0x92) X(STACK_GLOBAL, 0x93)                 \
  X(MEMOIZE, 0x94) X(FRAME, 0x95) X(BYTEARRAY8, 0x96) X(NEXT_BUFFER, 0x97)                      \
  X(READONLY_BUFFER, 0x98)

enum Opcode : std::uint8_t {
#define CKPTFS_OPCODE_ENUM(name, code) name = code,  // NOLINT(bugprone-macro-parentheses): a name
  CKPTFS_PICKLE_OPCODES(CKPTFS_OPCODE_ENUM)
#undef CKPTFS_OPCODE_ENUM
};

std::string_view opcode_name(std::uint8_t code) {
  switch (code) {
#define CKPTFS_OPCODE_NAME(name, code) \
  case name:                           \
    return #name;
    CKPTFS_PICKLE_OPCODES(CKPTFS_OPCODE_NAME)
#undef CKPTFS_OPCODE_NAME
  }
  return "unknown opcode";
}
#undef CKPTFS_PICKLE_OPCODES
// clang-format on

constexpr std::size_t first_chunk = 64 * 1024;  // small pickles (legacy headers) read little
constexpr std::size_t max_chunk = 1024 * 1024;
constexpr std::size_t max_short_line = 8192;  // names and numbers of the text opcodes
constexpr std::int64_t small_int_min = -5;    // CPython's cache of small ints
constexpr std::int64_t small_int_max = 256;
constexpr std::size_t any_length = std::numeric_limits<std::size_t>::max() / 2;
// Copies made by the machine itself (set(list), OrderedDict(pairs), latin-1 strings, BUILD
// merges, STACK_GLOBAL names) may not exceed the bytes read so far plus this: a pickle written
// by Python copies each source once, while a hostile one could copy one memoized list forever.
constexpr std::uint64_t copy_slack = 1024 * 1024;

void append_utf8(std::string& out, std::uint32_t code_point) {
  // Surrogates are encoded like any other code point (Python's surrogatepass).
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xc0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xe0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  } else {
    out.push_back(static_cast<char>(0xf0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3f)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3f)));
  }
}

// BINFLOAT is the one big-endian field of the format.
std::uint64_t reverse_bytes(std::uint64_t value) {
  std::uint64_t reversed = 0;
  for (int i = 0; i < 8; ++i, value >>= 8) reversed = (reversed << 8) | (value & 0xff);
  return reversed;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// str.encode("latin-1") of UTF-8 text: nullopt when a code point is >= 256 (or the text is not
// UTF-8), as Python would raise.
std::optional<std::string> latin1_from_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c == 0xc2 || c == 0xc3) && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xc0) == 0x80) {
      out.push_back(static_cast<char>(((c & 0x1f) << 6) | (text[++i] & 0x3f)));
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// The minimal little-endian two's complement bytes of a decimal number (digits only).
std::string twos_complement_from_decimal(std::string_view digits, bool negative) {
  std::vector<std::uint32_t> limbs;  // the magnitude, least significant first
  // Nine digits at a time keeps the quadratic cost of an 8 KiB number small.
  for (std::size_t at = 0; at < digits.size(); at += 9) {
    const std::string_view group = digits.substr(at, 9);
    std::uint64_t scale = 1;
    std::uint64_t carry = 0;
    for (const char digit : group) {
      scale *= 10;
      carry = carry * 10 + static_cast<std::uint64_t>(digit - '0');
    }
    for (auto& limb : limbs) {
      const std::uint64_t value = std::uint64_t{limb} * scale + carry;
      limb = static_cast<std::uint32_t>(value);
      carry = value >> 32;
    }
    if (carry != 0) limbs.push_back(static_cast<std::uint32_t>(carry));
  }
  std::string bytes;
  for (const auto limb : limbs) {
    for (int shift = 0; shift < 32; shift += 8) bytes.push_back(static_cast<char>(limb >> shift));
  }
  bytes.push_back('\0');  // room for the sign bit
  if (negative) {
    unsigned carry = 1;
    for (char& byte : bytes) {
      const unsigned value =
          (~static_cast<unsigned>(static_cast<unsigned char>(byte)) & 0xff) + carry;
      byte = static_cast<char>(value);
      carry = value >> 8;
    }
  }
  while (bytes.size() > 1) {
    const auto last = static_cast<unsigned char>(bytes.back());
    const auto sign = static_cast<unsigned char>(bytes[bytes.size() - 2]) & 0x80;
    if (!((last == 0x00 && sign == 0) || (last == 0xff && sign != 0))) break;
    bytes.pop_back();
  }
  return bytes;
}

}  // namespace

std::string_view a_kind(Kind kind) noexcept {
  switch (kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "a bool";
    case Kind::integer:
    case Kind::big_integer:
      return "an int";
    case Kind::floating:
      return "a float";
    case Kind::string:
      return "a str";
    case Kind::bytes:
      return "a bytes";
    case Kind::bytearray:
      return "a bytearray";
    case Kind::tuple:
      return "a tuple";
    case Kind::list:
      return "a list";
    case Kind::dict:
      return "a dict";
    case Kind::set:
      return "a set";
    case Kind::frozenset:
      return "a frozenset";
    case Kind::global:
      return "a global";
    case Kind::object:
      return "an object";
    case Kind::persistent_id:
      return "a persistent id";
  }
  return "a value";
}

// Runs one pickle. Nodes go straight into the graph's flat tables; the stack, the marks and the
// memo hold node ids, so nothing recurses and nothing is copied when a value is pushed twice.
class Machine {
 public:
  Machine(const ByteSource& source, std::uint64_t offset, std::uint64_t max_length,
          const Limits& limits)
      : source_(source),
        start_(offset),
        end_(offset + (offset > source.size() ? 0 : std::min(max_length, source.size() - offset))),
        max_nodes_(std::min<std::uint64_t>(limits.max_nodes, no_node)),
        max_stack_(limits.max_stack),
        max_memo_(limits.max_memo),
        buf_offset_(offset) {
    small_ints_.fill(no_node);
  }

  ParseResult run();

 private:
  // --- Reading: a buffer of up to max_chunk bytes over [start_, end_).
  std::uint64_t position() const noexcept { return buf_offset_ + buf_pos_; }
  std::uint64_t left() const noexcept { return end_ - position(); }
  void refill();
  template <class T>
  T read_le();
  std::uint64_t read_signed_length();
  std::string read_counted(std::uint64_t length);
  void read_line(std::string& out, std::size_t max_bytes);

  [[noreturn]] void fail(std::string_view what) const;
  // Out of line, so that the hot paths that may end in them stay small enough to inline.
  [[noreturn, gnu::cold]] void fail_truncated(std::size_t needed) const;
  // Throws Truncated: the bytes ended before what the pickle says is there.
  [[noreturn, gnu::cold]] void fail_short(std::string_view what) const;
  [[noreturn, gnu::cold]] void fail_limit(std::uint64_t limit, std::string_view what) const;
  std::string_view op_name() const { return opcode_name(op_); }

  // --- The stack, its marks and the memo.
  std::size_t mark_base() const noexcept { return marks_.empty() ? 0 : marks_.back(); }
  void check_room() const;
  void push(NodeId id) {
    check_room();
    stack_.push_back(id);
  }
  [[noreturn, gnu::cold]] void underflow() const;
  NodeId pop();
  NodeId top() const;
  std::size_t pop_mark();
  NodeId target_below(std::size_t base) const;
  std::vector<NodeId> take_from(std::size_t base);
  void memo_put(std::uint64_t index);
  NodeId memo_get(std::uint64_t index) const;
  std::uint64_t read_decimal_index();

  // --- Building nodes.
  Kind kind(NodeId id) const { return graph_.nodes_[id].kind; }
  std::uint32_t index(NodeId id) const { return graph_.nodes_[id].index; }
  NodeId add_node(Kind kind, std::size_t index);
  NodeId add_integer(std::int64_t value);
  NodeId add_boolean(bool value);
  NodeId add_none();
  NodeId add_empty_tuple();
  NodeId add_float(double value);
  NodeId add_text(Kind kind, std::string text);
  NodeId add_sequence(Kind kind, std::vector<NodeId> items);
  NodeId add_dict(std::vector<std::pair<NodeId, NodeId>> items, bool ordered = false);
  NodeId add_global(std::string module, std::string name);
  NodeId add_decimal(std::string_view text);
  NodeId add_long(std::string bytes);
  NodeId add_call(NodeId callable, NodeId args, NodeId kwargs);
  std::optional<NodeId> construct_builtin(NodeId callable, NodeId args, NodeId kwargs);
  std::optional<NodeId> latin1_bytes(NodeId text, NodeId encoding, Kind result = Kind::bytes);
  void charge_copy(std::uint64_t amount);
  void build(NodeId target, NodeId state);
  double parse_float(std::string_view text) const;
  std::string decode_string_literal(std::string_view line) const;
  std::string decode_raw_unicode_escape(std::string_view line) const;

  const ByteSource& source_;
  const std::uint64_t start_;
  const std::uint64_t end_;
  const std::uint64_t max_nodes_;
  const std::uint64_t max_stack_;
  const std::uint64_t max_memo_;

  std::unique_ptr<unsigned char[]> buf_;
  std::size_t buf_len_ = 0;
  std::size_t buf_pos_ = 0;
  std::uint64_t buf_offset_;  // absolute offset of buf_[0]
  std::size_t chunk_ = first_chunk;

  std::uint64_t op_offset_ = 0;
  std::uint8_t op_ = 0;
  int protocol_ = 0;
  std::vector<NodeId> stack_;
  std::vector<std::size_t> marks_;  // stack_.size() when each MARK ran
  // Pickles number the memo 0, 1, 2...: those indices live in a vector that grows only with
  // what was stored, so a huge index lands in the map instead of allocating slots.
  std::vector<NodeId> memo_dense_;
  std::unordered_map<std::uint64_t, NodeId> memo_sparse_;
  std::uint64_t memo_count_ = 0;
  std::uint64_t copied_ = 0;
  NodeId none_ = no_node;
  NodeId true_ = no_node;
  NodeId false_ = no_node;
  NodeId empty_tuple_ = no_node;
  std::array<NodeId, small_int_max - small_int_min + 1> small_ints_;
  std::string line_;
  std::string line2_;
  Graph graph_;
};

// Reads the next chunk after the unread bytes. Callers keep fewer than 8 unread bytes and need
// less than a chunk, so one allocation serves the whole parse: the pickle itself when it is
// small, else a chunk.
void Machine::refill() {
  const std::size_t kept = buf_len_ - buf_pos_;
  const std::uint64_t next = buf_offset_ + buf_len_;
  const auto fresh = static_cast<std::size_t>(std::min<std::uint64_t>(chunk_, end_ - next));
  if (!buf_) {
    buf_ = std::make_unique_for_overwrite<unsigned char[]>(
        static_cast<std::size_t>(std::min<std::uint64_t>(max_chunk, end_ - start_)) + 8);
  }
  if (kept > 0) std::memmove(buf_.get(), buf_.get() + buf_pos_, kept);
  source_.read(next, std::as_writable_bytes(std::span(buf_.get() + kept, fresh)));
  buf_offset_ = next - kept;
  buf_pos_ = 0;
  buf_len_ = kept + fresh;
  chunk_ = std::min(chunk_ * 2, max_chunk);
}

void Machine::fail(std::string_view what) const {
  throw Error(ExitCode::bad_checkpoint,
              fmt::format("invalid pickle at byte {}: {}", op_offset_, what));
}

void Machine::fail_truncated(std::size_t needed) const {
  fail_short(
      fmt::format("truncated pickle: {} needs {} bytes, {} left", op_name(), needed, left()));
}

void Machine::fail_short(std::string_view what) const {
  throw Truncated(ExitCode::bad_checkpoint,
                  fmt::format("invalid pickle at byte {}: {}", op_offset_, what));
}

void Machine::underflow() const { fail(fmt::format("stack underflow in {}", op_name())); }

void Machine::fail_limit(std::uint64_t limit, std::string_view what) const {
  fail(fmt::format("more than {} {}", limit, what));
}

template <class T>
T Machine::read_le() {
  if (buf_len_ - buf_pos_ < sizeof(T)) {
    if (left() < sizeof(T)) fail_truncated(sizeof(T));
    refill();
  }
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= std::uint64_t{buf_[buf_pos_ + i]} << (8 * i);
  buf_pos_ += sizeof(T);
  return static_cast<T>(value);
}

std::uint64_t Machine::read_signed_length() {
  const auto length = static_cast<std::int32_t>(read_le<std::uint32_t>());
  if (length < 0) fail(fmt::format("{} has a negative length {}", op_name(), length));
  return static_cast<std::uint64_t>(length);
}

std::string Machine::read_counted(std::uint64_t length) {
  // Checked before anything is allocated: a length prefix is the cheapest lie to tell.
  if (length > left()) {
    fail_short(fmt::format("{} length {} exceeds the {} bytes left", op_name(), length, left()));
  }
  std::string out(length, '\0');
  const std::size_t buffered = std::min<std::uint64_t>(length, buf_len_ - buf_pos_);
  if (buffered > 0) std::memcpy(out.data(), buf_.get() + buf_pos_, buffered);
  buf_pos_ += buffered;
  const std::size_t rest = length - buffered;
  if (rest >= chunk_) {  // a large payload goes straight into the string
    const std::uint64_t at = buf_offset_ + buf_len_;
    source_.read(at, std::as_writable_bytes(std::span(out.data() + buffered, rest)));
    buf_offset_ = at + rest;
    buf_pos_ = buf_len_ = 0;
  } else if (rest > 0) {
    refill();
    std::memcpy(out.data() + buffered, buf_.get(), rest);
    buf_pos_ = rest;
  }
  return out;
}

void Machine::read_line(std::string& out, std::size_t max_bytes) {
  out.clear();
  for (;;) {
    const std::size_t scan = std::min(buf_len_ - buf_pos_, max_bytes + 1 - out.size());
    if (scan > 0) {
      const unsigned char* begin = buf_.get() + buf_pos_;
      const auto* newline = static_cast<const unsigned char*>(std::memchr(begin, '\n', scan));
      const std::size_t length = newline ? static_cast<std::size_t>(newline - begin) : scan;
      out.append(reinterpret_cast<const char*>(begin), length);
      buf_pos_ += length;
      if (newline) {
        ++buf_pos_;
        return;
      }
    }
    if (out.size() > max_bytes)
      fail(fmt::format("{} line is longer than {} bytes", op_name(), max_bytes));
    if (left() == 0) {
      fail_short(fmt::format("truncated pickle: {} line has no newline", op_name()));
    }
    refill();
  }
}

void Machine::check_room() const {
  if (stack_.size() + marks_.size() >= max_stack_) {
    fail_limit(max_stack_, "stack entries and marks (the stack limit)");
  }
}

NodeId Machine::pop() {
  // As in pickle.py, what lies below the last MARK is out of reach until POP_MARK.
  if (stack_.size() <= mark_base()) underflow();
  const NodeId id = stack_.back();
  stack_.pop_back();
  return id;
}

NodeId Machine::top() const {
  if (stack_.size() <= mark_base()) underflow();
  return stack_.back();
}

std::size_t Machine::pop_mark() {
  if (marks_.empty()) fail(fmt::format("{} without a MARK", op_name()));
  const std::size_t base = marks_.back();
  marks_.pop_back();
  return base;
}

// The container under the items of a popped mark (APPENDS, SETITEMS, ADDITEMS).
NodeId Machine::target_below(std::size_t base) const {
  if (base <= mark_base()) underflow();
  return stack_[base - 1];
}

std::vector<NodeId> Machine::take_from(std::size_t base) {
  std::vector<NodeId> items(stack_.begin() + static_cast<std::ptrdiff_t>(base), stack_.end());
  stack_.resize(base);
  return items;
}

void Machine::memo_put(std::uint64_t index) {
  const NodeId value = top();
  if (index >= memo_dense_.size() && index < 2 * memo_count_ + 1024) {
    memo_dense_.resize(2 * memo_count_ + 1024, no_node);
  }
  bool is_new;
  if (index < memo_dense_.size()) {
    // A dense slot may shadow an older sparse entry of the same index: count the index once.
    is_new = memo_dense_[index] == no_node && !memo_sparse_.contains(index);
    memo_dense_[index] = value;
  } else {
    is_new = memo_sparse_.insert_or_assign(index, value).second;
  }
  if (is_new && ++memo_count_ > max_memo_) {
    fail_limit(max_memo_, "memo entries (the memo limit)");
  }
}

NodeId Machine::memo_get(std::uint64_t index) const {
  if (index < memo_dense_.size() && memo_dense_[index] != no_node) return memo_dense_[index];
  if (const auto it = memo_sparse_.find(index); it != memo_sparse_.end()) return it->second;
  fail(fmt::format("{} of memo index {} that was never stored", op_name(), index));
}

std::uint64_t Machine::read_decimal_index() {
  read_line(line_, max_short_line);
  std::uint64_t index = 0;
  const auto [end, ec] = std::from_chars(line_.data(), line_.data() + line_.size(), index);
  if (ec != std::errc{} || end != line_.data() + line_.size() || line_.empty()) {
    fail(fmt::format("{} argument {} is not a memo index", op_name(), quote(line_)));
  }
  return index;
}

NodeId Machine::add_node(Kind node_kind, std::size_t table_index) {
  if (graph_.nodes_.size() >= max_nodes_) {
    fail_limit(max_nodes_, "nodes (the node limit)");
  }
  graph_.nodes_.push_back({node_kind, static_cast<std::uint32_t>(table_index)});
  return static_cast<NodeId>(graph_.nodes_.size() - 1);
}

// Immutable values CPython shares (None, the bools, (), the ints -5..256) are one node each here
// too: identity stays as in Python, and a state_dict needs a third fewer nodes.
NodeId Machine::add_integer(std::int64_t value) {
  const bool cached = value >= small_int_min && value <= small_int_max;
  NodeId* const slot =
      cached ? &small_ints_[static_cast<std::size_t>(value - small_int_min)] : nullptr;
  if (slot && *slot != no_node) return *slot;
  graph_.integers_.push_back(value);
  const NodeId id = add_node(Kind::integer, graph_.integers_.size() - 1);
  if (slot) *slot = id;
  return id;
}

NodeId Machine::add_boolean(bool value) {
  NodeId& slot = value ? true_ : false_;
  if (slot == no_node) {
    graph_.integers_.push_back(value ? 1 : 0);
    slot = add_node(Kind::boolean, graph_.integers_.size() - 1);
  }
  return slot;
}

NodeId Machine::add_none() {
  if (none_ == no_node) none_ = add_node(Kind::none, 0);
  return none_;
}

NodeId Machine::add_empty_tuple() {
  if (empty_tuple_ == no_node) empty_tuple_ = add_sequence(Kind::tuple, {});
  return empty_tuple_;
}

NodeId Machine::add_float(double value) {
  graph_.floats_.push_back(value);
  return add_node(Kind::floating, graph_.floats_.size() - 1);
}

NodeId Machine::add_text(Kind text_kind, std::string text) {
  graph_.texts_.push_back(std::move(text));
  return add_node(text_kind, graph_.texts_.size() - 1);
}

NodeId Machine::add_sequence(Kind sequence_kind, std::vector<NodeId> items) {
  graph_.sequences_.push_back(std::move(items));
  return add_node(sequence_kind, graph_.sequences_.size() - 1);
}

NodeId Machine::add_dict(std::vector<std::pair<NodeId, NodeId>> items, bool ordered) {
  graph_.dicts_.push_back(std::move(items));
  graph_.dict_states_.push_back(no_node);
  graph_.dict_ordered_.push_back(ordered);
  return add_node(Kind::dict, graph_.dicts_.size() - 1);
}

NodeId Machine::add_global(std::string module, std::string name) {
  // Python 2 names (pickle's _compat_pickle) and torch's own rename (torch.serialization).
  if (module == "__builtin__") {
    module = "builtins";
  } else if (module == "copy_reg") {
    module = "copyreg";
  } else if (module == "torch.tensor") {
    module = "torch._tensor";
  }
  graph_.globals_.push_back({std::move(module), std::move(name)});
  return add_node(Kind::global, graph_.globals_.size() - 1);
}

NodeId Machine::add_decimal(std::string_view text) {
  std::string_view digits = text;
  const bool negative = digits.starts_with('-');
  if (negative || digits.starts_with('+')) digits.remove_prefix(1);
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    fail(fmt::format("{} argument {} is not a decimal integer", op_name(), quote(text)));
  }
  std::int64_t value = 0;
  const char* first = negative ? text.data() : digits.data();  // from_chars takes '-', not '+'
  if (std::from_chars(first, text.data() + text.size(), value).ec == std::errc{}) {
    return add_integer(value);
  }
  return add_text(Kind::big_integer, twos_complement_from_decimal(digits, negative));
}

NodeId Machine::add_long(std::string bytes) {
  const std::size_t size = bytes.size();
  if (size == 0) return add_integer(0);
  const std::size_t low = std::min<std::size_t>(size, 8);
  const unsigned char fill = (static_cast<unsigned char>(bytes[low - 1]) & 0x80) ? 0xff : 0x00;
  for (std::size_t i = low; i < size; ++i) {
    if (static_cast<unsigned char>(bytes[i]) != fill) {
      return add_text(Kind::big_integer, std::move(bytes));  // kept as written
    }
  }
  std::uint64_t value = fill ? ~std::uint64_t{0} : 0;
  for (std::size_t i = 0; i < low; ++i) {
    value &= ~(std::uint64_t{0xff} << (8 * i));
    value |= std::uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  }
  return add_integer(std::bit_cast<std::int64_t>(value));
}

void Machine::charge_copy(std::uint64_t amount) {
  copied_ += amount;
  if (copied_ > position() - start_ + copy_slack) {
    fail(
        fmt::format("{} copies more than the pickle holds ({} items or bytes copied so far): "
                    "memoized data reused to amplify memory",
                    op_name(), copied_));
  }
}

NodeId Machine::add_call(NodeId callable, NodeId args, NodeId kwargs) {
  if (const auto native = construct_builtin(callable, args, kwargs)) return *native;
  graph_.objects_.push_back({callable, args, kwargs, no_node, {}, {}});
  return add_node(Kind::object, graph_.objects_.size() - 1);
}

std::optional<NodeId> Machine::latin1_bytes(NodeId text, NodeId encoding, Kind result) {
  if (kind(text) != Kind::string || kind(encoding) != Kind::string) return std::nullopt;
  const std::string& codec = graph_.texts_[index(encoding)];
  if (codec != "latin1" && codec != "latin-1") return std::nullopt;
  auto bytes = latin1_from_utf8(graph_.texts_[index(text)]);
  if (!bytes) return std::nullopt;
  charge_copy(bytes->size());
  return add_text(result, std::move(*bytes));
}

// The inert built-in constructions torch writes all the time become plain data, as pickle would
// have made them; any other call (os.system included) stays an Object that nothing runs.
std::optional<NodeId> Machine::construct_builtin(NodeId callable, NodeId args, NodeId kwargs) {
  if (kind(callable) != Kind::global || kind(args) != Kind::tuple) return std::nullopt;
  if (kwargs != no_node && (kind(kwargs) != Kind::dict || !graph_.dicts_[index(kwargs)].empty())) {
    return std::nullopt;
  }
  // Both are read before any node is added below: adding one may reallocate their tables.
  const Global& callee = graph_.globals_[index(callable)];
  const std::vector<NodeId>& arguments = graph_.sequences_[index(args)];
  const auto is_sequence = [this](NodeId id) {
    return kind(id) == Kind::list || kind(id) == Kind::tuple;
  };

  if (callee.module == "collections" && callee.name == "OrderedDict") {
    if (arguments.empty()) return add_dict({}, true);
    if (arguments.size() != 1) return std::nullopt;
    if (kind(arguments[0]) == Kind::dict) {
      auto items = graph_.dicts_[index(arguments[0])];
      charge_copy(items.size());
      return add_dict(std::move(items), true);
    }
    if (!is_sequence(arguments[0])) return std::nullopt;
    std::vector<std::pair<NodeId, NodeId>> items;
    for (const NodeId pair : graph_.sequences_[index(arguments[0])]) {
      if (!is_sequence(pair) || graph_.sequences_[index(pair)].size() != 2) return std::nullopt;
      const auto& key_value = graph_.sequences_[index(pair)];
      items.emplace_back(key_value[0], key_value[1]);
    }
    charge_copy(items.size());
    return add_dict(std::move(items), true);
  }
  if (callee.module == "_codecs" && callee.name == "encode" && arguments.size() == 2) {
    return latin1_bytes(arguments[0], arguments[1]);
  }
  if (callee.module != "builtins") return std::nullopt;
  if (callee.name == "set" || callee.name == "frozenset") {
    const Kind result = callee.name == "set" ? Kind::set : Kind::frozenset;
    if (arguments.empty()) return add_sequence(result, {});
    const Kind source = arguments.size() == 1 ? kind(arguments[0]) : Kind::none;
    if (source != Kind::list && source != Kind::tuple && source != Kind::set &&
        source != Kind::frozenset) {
      return std::nullopt;
    }
    auto items = graph_.sequences_[index(arguments[0])];
    charge_copy(items.size());
    return add_sequence(result, std::move(items));
  }
  if (callee.name == "bytearray" || callee.name == "bytes") {
    const Kind result = callee.name == "bytes" ? Kind::bytes : Kind::bytearray;
    if (arguments.empty()) return add_text(result, {});
    if (arguments.size() == 2) return latin1_bytes(arguments[0], arguments[1], result);
    if (arguments.size() != 1 ||
        (kind(arguments[0]) != Kind::bytes && kind(arguments[0]) != Kind::bytearray)) {
      return std::nullopt;
    }
    auto bytes = graph_.texts_[index(arguments[0])];
    charge_copy(bytes.size());
    return add_text(result, std::move(bytes));
  }
  return std::nullopt;
}

void Machine::build(NodeId target, NodeId state) {
  const Kind target_kind = kind(target);
  if (target_kind != Kind::object && target_kind != Kind::dict) {
    fail(fmt::format("BUILD on {}", a_kind(target_kind)));
  }
  const auto slot = [&]() -> NodeId& {
    return target_kind == Kind::object ? graph_.objects_[index(target)].state
                                       : graph_.dict_states_[index(target)];
  };
  const NodeId previous = slot();
  if (previous != no_node && kind(previous) == Kind::dict && kind(state) == Kind::dict) {
    // Like instance.__dict__.update(state): a fresh dict, since both may be shared via the memo.
    auto items = graph_.dicts_[index(previous)];
    const auto& more = graph_.dicts_[index(state)];
    items.insert(items.end(), more.begin(), more.end());
    charge_copy(items.size());
    state = add_dict(std::move(items));
  }
  slot() = state;
}

double Machine::parse_float(std::string_view text) const {
  std::string_view number = text;
  if (number.starts_with('+') && !number.substr(1).starts_with('-')) number.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc{} || end != number.data() + number.size()) {
    fail(fmt::format("FLOAT argument {} is not a number", quote(text)));
  }
  return value;
}

// A STRING argument: a quoted Python 2 str literal, decoded like codecs.escape_decode.
std::string Machine::decode_string_literal(std::string_view line) const {
  if (line.size() < 2 || line.front() != line.back() ||
      (line.front() != '\'' && line.front() != '"')) {
    fail(fmt::format("STRING argument {} is not quoted", quote(line)));
  }
  const std::string_view body = line.substr(1, line.size() - 2);
  std::string out;
  out.reserve(body.size());
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\') {
      out.push_back(body[i]);
      continue;
    }
    if (++i == body.size()) fail("STRING argument ends with a lone backslash");
    const char c = body[i];
    switch (c) {
      case '\n':
        break;  // a line continuation
      case '\\':
      case '\'':
      case '"':
        out.push_back(c);
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x': {
        const int high = i + 1 < body.size() ? hex_value(body[i + 1]) : -1;
        const int low = i + 2 < body.size() ? hex_value(body[i + 2]) : -1;
        if (high < 0 || low < 0) fail("STRING argument has an invalid \\x escape");
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          unsigned value = static_cast<unsigned>(c - '0');
          for (int digits = 1;
               digits < 3 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++digits) {
            value = value * 8 + static_cast<unsigned>(body[++i] - '0');
          }
          out.push_back(static_cast<char>(value & 0xff));
        } else {  // an unknown escape keeps its backslash
          out.push_back('\\');
          out.push_back(c);
        }
    }
  }
  return out;
}

// A UNICODE argument, decoded like raw-unicode-escape: \uXXXX and \UXXXXXXXX escape only after an
// odd run of backslashes; every other byte is a Latin-1 code point. The result is UTF-8.
std::string Machine::decode_raw_unicode_escape(std::string_view line) const {
  std::string out;
  out.reserve(line.size());
  for (std::size_t i = 0; i < line.size();) {
    if (line[i] != '\\') {
      append_utf8(out, static_cast<unsigned char>(line[i++]));
      continue;
    }
    std::size_t run = 0;
    for (; i < line.size() && line[i] == '\\'; ++i, ++run) out.push_back('\\');
    if (run % 2 == 0 || i == line.size() || (line[i] != 'u' && line[i] != 'U')) continue;
    out.pop_back();
    const std::size_t digits = line[i] == 'u' ? 4 : 8;
    std::uint32_t code_point = 0;
    for (std::size_t d = 1; d <= digits; ++d) {
      const int value = i + d < line.size() ? hex_value(line[i + d]) : -1;
      if (value < 0) fail(fmt::format("UNICODE argument has a truncated \\{} escape", line[i]));
      code_point = code_point * 16 + static_cast<std::uint32_t>(value);
    }
    if (code_point > 0x10ffff) fail("UNICODE argument has a \\U escape beyond U+10FFFF");
    append_utf8(out, code_point);
    i += digits + 1;
  }
  return out;
}

ParseResult Machine::run() {
  for (;;) {
    op_offset_ = position();
    if (buf_pos_ == buf_len_) {
      if (left() == 0) {
        fail_short(fmt::format("truncated pickle: no STOP opcode in its {} bytes", end_ - start_));
      }
      refill();
    }
    op_ = buf_[buf_pos_++];
    switch (op_) {
      case MARK:
        check_room();
        marks_.push_back(stack_.size());
        break;
      case STOP: {
        ParseResult result;
        graph_.root_ = pop();
        result.graph = std::move(graph_);
        result.end_offset = position();
        result.protocol = protocol_;
        return result;
      }
      case POP:
        if (stack_.size() > mark_base()) {
          stack_.pop_back();
        } else if (!marks_.empty()) {
          marks_.pop_back();  // pickle.py pops the mark when nothing is above it
        } else {
          underflow();
        }
        break;
      case POP_MARK:
        stack_.resize(pop_mark());
        break;
      case DUP:
        push(top());
        break;

      // Numbers.
      case INT:
        read_line(line_, max_short_line);
        push(line_ == "00" || line_ == "01" ? add_boolean(line_ == "01") : add_decimal(line_));
        break;
      case LONG:
        read_line(line_, max_short_line);
        if (line_.ends_with('L')) line_.pop_back();
        push(add_decimal(line_));
        break;
      case BININT:
        push(add_integer(static_cast<std::int32_t>(read_le<std::uint32_t>())));
        break;
      case BININT1:
        push(add_integer(read_le<std::uint8_t>()));
        break;
      case BININT2:
        push(add_integer(read_le<std::uint16_t>()));
        break;
      case LONG1:
        push(add_long(read_counted(read_le<std::uint8_t>())));
        break;
      case LONG4:
        push(add_long(read_counted(read_signed_length())));
        break;
      case FLOAT:
        read_line(line_, max_short_line);
        push(add_float(parse_float(line_)));
        break;
      case BINFLOAT:
        push(add_float(std::bit_cast<double>(reverse_bytes(read_le<std::uint64_t>()))));
        break;
      case NONE:
        push(add_none());
        break;
      case NEWTRUE:
      case NEWFALSE:
        push(add_boolean(op_ == NEWTRUE));
        break;

      // Strings: raw bytes, never validated.
      case STRING:
        read_line(line_, any_length);
        push(add_text(Kind::string, decode_string_literal(line_)));
        break;
      case BINSTRING:
        push(add_text(Kind::string, read_counted(read_signed_length())));
        break;
      case SHORT_BINSTRING:
        push(add_text(Kind::string, read_counted(read_le<std::uint8_t>())));
        break;
      case UNICODE:
        read_line(line_, any_length);
        push(add_text(Kind::string, decode_raw_unicode_escape(line_)));
        break;
      case SHORT_BINUNICODE:
        push(add_text(Kind::string, read_counted(read_le<std::uint8_t>())));
        break;
      case BINUNICODE:
        push(add_text(Kind::string, read_counted(read_le<std::uint32_t>())));
        break;
      case BINUNICODE8:
        push(add_text(Kind::string, read_counted(read_le<std::uint64_t>())));
        break;
      case SHORT_BINBYTES:
        push(add_text(Kind::bytes, read_counted(read_le<std::uint8_t>())));
        break;
      case BINBYTES:
        push(add_text(Kind::bytes, read_counted(read_le<std::uint32_t>())));
        break;
      case BINBYTES8:
        push(add_text(Kind::bytes, read_counted(read_le<std::uint64_t>())));
        break;
      case BYTEARRAY8:
        push(add_text(Kind::bytearray, read_counted(read_le<std::uint64_t>())));
        break;

      // Containers.
      case EMPTY_TUPLE:
        push(add_empty_tuple());
        break;
      case TUPLE1: {
        const NodeId a = pop();
        push(add_sequence(Kind::tuple, {a}));
        break;
      }
      case TUPLE2: {
        const NodeId b = pop();
        const NodeId a = pop();
        push(add_sequence(Kind::tuple, {a, b}));
        break;
      }
      case TUPLE3: {
        const NodeId c = pop();
        const NodeId b = pop();
        const NodeId a = pop();
        push(add_sequence(Kind::tuple, {a, b, c}));
        break;
      }
      case TUPLE:
        push(add_sequence(Kind::tuple, take_from(pop_mark())));
        break;
      case EMPTY_LIST:
        push(add_sequence(Kind::list, {}));
        break;
      case LIST:
        push(add_sequence(Kind::list, take_from(pop_mark())));
        break;
      case EMPTY_SET:
        push(add_sequence(Kind::set, {}));
        break;
      case FROZENSET:
        push(add_sequence(Kind::frozenset, take_from(pop_mark())));
        break;
      case EMPTY_DICT:
        push(add_dict({}));
        break;
      case DICT: {
        const std::size_t base = pop_mark();
        if ((stack_.size() - base) % 2 != 0) fail("DICT with an odd number of items");
        std::vector<std::pair<NodeId, NodeId>> items;
        items.reserve((stack_.size() - base) / 2);
        for (std::size_t i = base; i < stack_.size(); i += 2)
          items.emplace_back(stack_[i], stack_[i + 1]);
        stack_.resize(base);
        push(add_dict(std::move(items)));
        break;
      }
      case APPEND: {
        const NodeId value = pop();
        const NodeId target = top();
        if (kind(target) == Kind::list) {
          graph_.sequences_[index(target)].push_back(value);
        } else if (kind(target) == Kind::object) {
          graph_.objects_[index(target)].list_items.push_back(value);
        } else {
          fail(fmt::format("APPEND to {}", a_kind(kind(target))));
        }
        break;
      }
      case APPENDS:
      case ADDITEMS: {
        const std::size_t base = pop_mark();
        const NodeId target = target_below(base);
        const Kind wanted = op_ == APPENDS ? Kind::list : Kind::set;
        std::vector<NodeId>* items = nullptr;
        if (kind(target) == wanted) {
          items = &graph_.sequences_[index(target)];
        } else if (kind(target) == Kind::object) {
          items = &graph_.objects_[index(target)].list_items;
        } else {
          fail(fmt::format("{} to {}", op_name(), a_kind(kind(target))));
        }
        items->insert(items->end(), stack_.begin() + static_cast<std::ptrdiff_t>(base),
                      stack_.end());
        stack_.resize(base);
        break;
      }
      case SETITEM:
      case SETITEMS: {
        std::size_t base = stack_.size();
        if (op_ == SETITEM) {
          if (base < mark_base() + 2) underflow();
          base -= 2;
        } else {
          base = pop_mark();
          if ((stack_.size() - base) % 2 != 0) fail("SETITEMS with an odd number of items");
        }
        const NodeId target = target_below(base);
        std::vector<std::pair<NodeId, NodeId>>* items = nullptr;
        if (kind(target) == Kind::dict) {
          items = &graph_.dicts_[index(target)];
        } else if (kind(target) == Kind::object) {
          items = &graph_.objects_[index(target)].dict_items;
        } else {
          fail(fmt::format("{} on {}", op_name(), a_kind(kind(target))));
        }
        for (std::size_t i = base; i < stack_.size(); i += 2)
          items->emplace_back(stack_[i], stack_[i + 1]);
        stack_.resize(base);
        break;
      }

      // The memo.
      case PUT:
        memo_put(read_decimal_index());
        break;
      case BINPUT:
        memo_put(read_le<std::uint8_t>());
        break;
      case LONG_BINPUT:
        memo_put(read_le<std::uint32_t>());
        break;
      case MEMOIZE:
        memo_put(memo_count_);
        break;
      case GET:
        push(memo_get(read_decimal_index()));
        break;
      case BINGET:
        push(memo_get(read_le<std::uint8_t>()));
        break;
      case LONG_BINGET:
        push(memo_get(read_le<std::uint32_t>()));
        break;

      // Globals and calls: recorded, never resolved or run.
      case GLOBAL:
      case INST: {
        read_line(line_, max_short_line);
        read_line(line2_, max_short_line);
        const NodeId cls = add_global(line_, line2_);
        if (op_ == GLOBAL) {
          push(cls);
        } else {
          const NodeId args = add_sequence(Kind::tuple, take_from(pop_mark()));
          push(add_call(cls, args, no_node));
        }
        break;
      }
      case STACK_GLOBAL: {
        const NodeId name = pop();
        const NodeId module = pop();
        if (kind(module) != Kind::string || kind(name) != Kind::string) {
          fail(fmt::format("STACK_GLOBAL of {} and {} (needs two str)", a_kind(kind(module)),
                           a_kind(kind(name))));
        }
        const std::string& module_text = graph_.texts_[index(module)];
        const std::string& name_text = graph_.texts_[index(name)];
        if (module_text.size() > max_short_line || name_text.size() > max_short_line) {
          fail(fmt::format("STACK_GLOBAL name is longer than {} bytes", max_short_line));
        }
        charge_copy(module_text.size() + name_text.size());
        push(add_global(module_text, name_text));
        break;
      }
      case OBJ: {
        std::vector<NodeId> items = take_from(pop_mark());
        if (items.empty()) fail("OBJ without a class after its MARK");
        const NodeId cls = items.front();
        items.erase(items.begin());
        const NodeId args = add_sequence(Kind::tuple, std::move(items));
        push(add_call(cls, args, no_node));
        break;
      }
      case REDUCE:
      case NEWOBJ: {
        const NodeId args = pop();
        const NodeId callable = pop();
        push(add_call(callable, args, no_node));
        break;
      }
      case NEWOBJ_EX: {
        const NodeId kwargs = pop();
        const NodeId args = pop();
        const NodeId cls = pop();
        push(add_call(cls, args, kwargs));
        break;
      }
      case BUILD: {
        const NodeId state = pop();
        build(top(), state);
        break;
      }
      case PERSID: {
        read_line(line_, any_length);
        if (!std::all_of(line_.begin(), line_.end(), [](char c) { return (c & 0x80) == 0; })) {
          fail(fmt::format("PERSID argument {} is not ASCII", quote(line_)));
        }
        const NodeId pid = add_text(Kind::string, line_);
        graph_.persistent_ids_.push_back(pid);
        push(add_node(Kind::persistent_id, graph_.persistent_ids_.size() - 1));
        break;
      }
      case BINPERSID: {
        const NodeId pid = pop();
        graph_.persistent_ids_.push_back(pid);
        push(add_node(Kind::persistent_id, graph_.persistent_ids_.size() - 1));
        break;
      }

      // Framing and protocol.
      case PROTO: {
        const auto version = read_le<std::uint8_t>();
        if (version > 5) fail(fmt::format("unsupported pickle protocol {}", version));
        protocol_ = version;
        break;
      }
      case FRAME: {
        const auto length = read_le<std::uint64_t>();
        if (length > left()) {
          fail_short(fmt::format("FRAME length {} exceeds the {} bytes left", length, left()));
        }
        break;  // frames only group opcodes for buffered writers: nothing to do
      }

      case EXT1:
      case EXT2:
      case EXT4:
        fail(fmt::format("{}: the extension registry (copyreg codes) is not supported", op_name()));
      case NEXT_BUFFER:
      case READONLY_BUFFER:
        fail(fmt::format("{}: out-of-band buffers are not supported", op_name()));
      default:
        fail(fmt::format("unknown opcode 0x{:02x}", op_));
    }
  }
}

ParseResult parse(const ByteSource& source, std::uint64_t offset, std::uint64_t max_length,
                  const Limits& limits) {
  return Machine(source, offset, max_length, limits).run();
}

// --- Graph accessors.

namespace {

constexpr std::uint32_t bit(Kind kind) { return std::uint32_t{1} << static_cast<unsigned>(kind); }

std::uint32_t checked_index(const std::vector<Graph::Node>& nodes, NodeId id, std::uint32_t kinds,
                            std::string_view accessor) {
  if (id >= nodes.size()) {
    throw std::logic_error(fmt::format("pickle::Graph::{}: node {} out of range ({} nodes)",
                                       accessor, id, nodes.size()));
  }
  const Graph::Node node = nodes[id];
  if ((bit(node.kind) & kinds) == 0) {
    throw std::logic_error(
        fmt::format("pickle::Graph::{}: node {} is {}", accessor, id, a_kind(node.kind)));
  }
  return node.index;
}

}  // namespace

Kind Graph::kind(NodeId id) const {
  if (id >= nodes_.size()) {
    throw std::logic_error(
        fmt::format("pickle::Graph::kind: node {} out of range ({} nodes)", id, nodes_.size()));
  }
  return nodes_[id].kind;
}

bool Graph::boolean(NodeId id) const {
  return integers_[checked_index(nodes_, id, bit(Kind::boolean), "boolean")] != 0;
}

std::int64_t Graph::integer(NodeId id) const {
  return integers_[checked_index(nodes_, id, bit(Kind::integer), "integer")];
}

const std::string& Graph::big_integer(NodeId id) const {
  return texts_[checked_index(nodes_, id, bit(Kind::big_integer), "big_integer")];
}

double Graph::floating(NodeId id) const {
  return floats_[checked_index(nodes_, id, bit(Kind::floating), "floating")];
}

const std::string& Graph::text(NodeId id) const {
  return texts_[checked_index(nodes_, id,
                              bit(Kind::string) | bit(Kind::bytes) | bit(Kind::bytearray), "text")];
}

const std::vector<NodeId>& Graph::items(NodeId id) const {
  return sequences_[checked_index(
      nodes_, id, bit(Kind::tuple) | bit(Kind::list) | bit(Kind::set) | bit(Kind::frozenset),
      "items")];
}

const std::vector<std::pair<NodeId, NodeId>>& Graph::dict_items(NodeId id) const {
  return dicts_[checked_index(nodes_, id, bit(Kind::dict), "dict_items")];
}

bool Graph::ordered(NodeId id) const {
  return dict_ordered_[checked_index(nodes_, id, bit(Kind::dict), "ordered")];
}

const Global& Graph::global(NodeId id) const {
  return globals_[checked_index(nodes_, id, bit(Kind::global), "global")];
}

const Object& Graph::object(NodeId id) const {
  return objects_[checked_index(nodes_, id, bit(Kind::object), "object")];
}

NodeId Graph::persistent_id(NodeId id) const {
  return persistent_ids_[checked_index(nodes_, id, bit(Kind::persistent_id), "persistent_id")];
}

NodeId Graph::build_state(NodeId id) const {
  switch (kind(id)) {
    case Kind::dict:
      return dict_states_[nodes_[id].index];
    case Kind::object:
      return objects_[nodes_[id].index].state;
    default:
      return no_node;
  }
}

}  // namespace ckptfs::pickle
