// SPDX-License-Identifier: MIT
// key_text() and value_json(): Python-like and JSON renderings of inert pickle values.
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/format/pickle/value_json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_set>
#include <variant>
#include <vector>

namespace ckptfs {
namespace {

using pickle::Graph;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;

// Decimal text of a little-endian two's complement integer.
std::string big_integer_text(const std::string& le) {
  if (le.size() > 4096) {
    std::string hex = "0x";
    for (auto it = le.rbegin(); it != le.rend(); ++it) {
      hex += fmt::format("{:02x}", static_cast<unsigned char>(*it));
    }
    return hex;
  }
  std::vector<unsigned char> mag(le.begin(), le.end());
  bool negative = !mag.empty() && (mag.back() & 0x80);
  if (negative) {  // two's complement: invert and add one
    unsigned carry = 1;
    for (auto& b : mag) {
      unsigned v = static_cast<unsigned char>(~b) + carry;
      b = static_cast<unsigned char>(v);
      carry = v >> 8;
    }
  }
  std::string digits;
  // Repeated division of the little-endian magnitude by 10.
  while (!mag.empty()) {
    while (!mag.empty() && mag.back() == 0) mag.pop_back();
    if (mag.empty()) break;
    unsigned rem = 0;
    for (auto it = mag.rbegin(); it != mag.rend(); ++it) {
      unsigned cur = (rem << 8) | *it;
      *it = static_cast<unsigned char>(cur / 10);
      rem = cur % 10;
    }
    digits += static_cast<char>('0' + rem);
  }
  if (digits.empty()) digits = "0";
  if (negative) digits += '-';
  return {digits.rbegin(), digits.rend()};
}

// The longest int value_json() writes as a JSON number, in the pickle's bytes (its minimal two's
// complement): 1024 bytes are at most 2467 decimal digits.
constexpr std::size_t max_json_integer_bytes = 1024;

// "0x<hex>" or "-0x<hex>" of a little-endian two's complement integer: its magnitude in
// hexadecimal, as {"__int__": ...} holds it.
std::string signed_hex(const std::string& le) {
  std::vector<unsigned char> mag(le.begin(), le.end());
  const bool negative = !mag.empty() && (mag.back() & 0x80);
  if (negative) {
    unsigned carry = 1;
    for (auto& b : mag) {
      const unsigned v = static_cast<unsigned char>(~b) + carry;
      b = static_cast<unsigned char>(v);
      carry = v >> 8;
    }
  }
  while (mag.size() > 1 && mag.back() == 0) mag.pop_back();
  std::string out = negative ? "-0x" : "0x";
  for (auto it = mag.rbegin(); it != mag.rend(); ++it) {
    fmt::format_to(std::back_inserter(out), "{:02x}", *it);
  }
  if (mag.empty()) out += "00";
  return out;
}

const pickle::Global* global_of(const Graph& g, NodeId id) {
  return id != no_node && g.kind(id) == Kind::global ? &g.global(id) : nullptr;
}

}  // namespace

std::optional<std::string> numpy_scalar_json(const Graph& g, const pickle::Object& obj) {
  const auto* fn = global_of(g, obj.callable);
  if (!fn || fn->name != "scalar" ||
      (fn->module != "numpy.core.multiarray" && fn->module != "numpy._core.multiarray")) {
    return std::nullopt;
  }
  if (obj.args == no_node || g.kind(obj.args) != Kind::tuple) return std::nullopt;
  const auto& args = g.items(obj.args);
  if (args.size() != 2 || g.kind(args[0]) != Kind::object) return std::nullopt;
  if (g.kind(args[1]) != Kind::bytes && g.kind(args[1]) != Kind::string) return std::nullopt;
  const auto& dtype = g.object(args[0]);
  if (dtype.args == no_node || g.kind(dtype.args) != Kind::tuple) return std::nullopt;
  const auto& dargs = g.items(dtype.args);
  if (dargs.empty() || g.kind(dargs[0]) != Kind::string) return std::nullopt;
  // The byte order is the second item of the dtype's BUILD state: '<', '|' or '>'.
  if (dtype.state != no_node && g.kind(dtype.state) == Kind::tuple) {
    const auto& st = g.items(dtype.state);
    if (st.size() > 1 && g.kind(st[1]) == Kind::string && g.text(st[1]) == ">") {
      return std::nullopt;
    }
  }
  const std::string& code = g.text(dargs[0]);
  const std::string& raw = g.text(args[1]);
  auto load = [&](auto value) -> std::optional<decltype(value)> {
    if (raw.size() != sizeof(value)) return std::nullopt;
    std::memcpy(&value, raw.data(), sizeof(value));
    return value;
  };
  if constexpr (std::endian::native != std::endian::little) return std::nullopt;
  std::optional<std::string> out;
  auto integer = [&](auto v) {
    if (auto x = load(v)) out = fmt::format("{}", *x);
  };
  if (code == "f8") {
    if (auto x = load(double{})) out = float_json(*x);
  } else if (code == "f4") {
    if (auto x = load(float{})) out = float_json(*x);
  } else if (code == "i8") {
    integer(std::int64_t{});
  } else if (code == "i4") {
    integer(std::int32_t{});
  } else if (code == "i2") {
    integer(std::int16_t{});
  } else if (code == "i1") {
    integer(std::int8_t{});
  } else if (code == "u8") {
    integer(std::uint64_t{});
  } else if (code == "u4") {
    integer(std::uint32_t{});
  } else if (code == "u2") {
    integer(std::uint16_t{});
  } else if (code == "u1") {
    integer(std::uint8_t{});
  } else if (code == "b1" && raw.size() == 1) {
    out = raw[0] ? "true" : "false";
  }
  return out;
}

namespace {

// A str key of a dict written as a JSON object, escaped only when its turn comes (after a
// comma unless it is the first): a value cut at max_bytes never escapes the keys past the cut.
struct ObjectKey {
  NodeId key;
  bool first;
};

// A frame of the iterative writer: literal text, child nodes and keys, emitted in order.
using Token = std::variant<std::string, NodeId, ObjectKey>;
struct Frame {
  NodeId node;
  std::vector<Token> tokens;
  std::size_t next = 0;
};

void add_sequence(std::vector<Token>& t, const std::vector<NodeId>& items) {
  t.emplace_back(std::string("["));
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) t.emplace_back(std::string(","));
    t.emplace_back(items[i]);
  }
  t.emplace_back(std::string("]"));
}

// A sequence inside a marker object: {"__tuple__":[...]}.
void add_marked_sequence(std::vector<Token>& t, const char* marker,
                         const std::vector<NodeId>& items) {
  t.emplace_back(fmt::format("{{\"{}\":", marker));
  add_sequence(t, items);
  t.emplace_back(std::string("}"));
}

// Whether a str key would read as one of value_json()'s markers: it starts and ends with "__".
bool marker_like(std::string_view key) {
  return key.size() >= 4 && key.starts_with("__") && key.ends_with("__");
}

// A dict as Python holds it: keys it finds equal (1 == 1.0 == True) merged, the first position
// keeping the last value; then as a JSON object when every key is a str that reads as no marker,
// else as {"__dict__":[[key,value],...]} with keys written as values are (0 stays the int 0).
void add_dict(const Graph& g, std::vector<Token>& t,
              const std::vector<std::pair<NodeId, NodeId>>& raw) {
  std::vector<std::pair<NodeId, NodeId>> items;
  items.reserve(raw.size());
  TextMap<std::size_t> first;
  for (const auto& [key, value] : raw) {
    if (std::string identity = key_identity(g, key); !identity.empty()) {
      auto [it, fresh] = first.emplace(std::move(identity), items.size());
      if (!fresh) {
        items[it->second].second = value;
        continue;
      }
    }
    items.emplace_back(key, value);
  }
  const bool object = std::all_of(items.begin(), items.end(), [&](const auto& item) {
    return g.kind(item.first) == Kind::string && !marker_like(g.text(item.first));
  });
  if (object) {
    t.emplace_back(std::string("{"));
    for (std::size_t i = 0; i < items.size(); ++i) {
      t.emplace_back(ObjectKey{items[i].first, i == 0});
      t.emplace_back(items[i].second);
    }
    t.emplace_back(std::string("}"));
    return;
  }
  t.emplace_back(std::string("{\"__dict__\":["));
  for (std::size_t i = 0; i < items.size(); ++i) {
    t.emplace_back(std::string(i == 0 ? "[" : ",["));
    t.emplace_back(items[i].first);
    t.emplace_back(std::string(","));
    t.emplace_back(items[i].second);
    t.emplace_back(std::string("]"));
  }
  t.emplace_back(std::string("]}"));
}

// torch.Size((int, ...)): the tuple of ints it holds, or nullptr.
const std::vector<NodeId>* torch_size_dims(const Graph& g, const pickle::Object& obj) {
  const auto* cls = global_of(g, obj.callable);
  if (!cls || cls->dotted() != "torch.Size" || obj.args == no_node ||
      g.kind(obj.args) != Kind::tuple || g.items(obj.args).size() != 1 || obj.state != no_node ||
      obj.kwargs != no_node) {
    return nullptr;
  }
  const NodeId dims = g.items(obj.args)[0];
  if (g.kind(dims) != Kind::tuple) return nullptr;
  for (NodeId d : g.items(dims)) {
    if (g.kind(d) != Kind::integer) return nullptr;
  }
  return &g.items(dims);
}

// The tokens of a container or object node; scalars are written directly by the caller.
std::vector<Token> tokens_of(const Graph& g, NodeId id) {
  std::vector<Token> t;
  switch (g.kind(id)) {
    case Kind::list:
      add_sequence(t, g.items(id));
      break;
    case Kind::tuple:
      add_marked_sequence(t, "__tuple__", g.items(id));
      break;
    case Kind::set:
      add_marked_sequence(t, "__set__", g.items(id));
      break;
    case Kind::frozenset:
      add_marked_sequence(t, "__frozenset__", g.items(id));
      break;
    case Kind::dict:
      if (const NodeId state = g.build_state(id); state != no_node) {
        // Attributes set on a dict (a hand-made pickle; an OrderedDict subclass): described as
        // an object, which no reader takes for plain data.
        t.emplace_back(fmt::format("{{\"__class__\":\"{}\",\"dict\":",
                                   g.ordered(id) ? "collections.OrderedDict" : "builtins.dict"));
        add_dict(g, t, g.dict_items(id));
        t.emplace_back(std::string(",\"state\":"));
        t.emplace_back(state);
        t.emplace_back(std::string("}"));
        break;
      }
      add_dict(g, t, g.dict_items(id));
      break;
    case Kind::persistent_id: {
      std::string s = "{\"__persistent_id__\":";
      t.emplace_back(std::move(s));
      t.emplace_back(g.persistent_id(id));
      t.emplace_back(std::string("}"));
      break;
    }
    case Kind::object: {
      const auto& obj = g.object(id);
      if (auto number = numpy_scalar_json(g, obj)) {
        t.emplace_back(*number);
        break;
      }
      if (const auto* dims = torch_size_dims(g, obj)) {  // a tuple, as torch.Size is one
        add_marked_sequence(t, "__tuple__", *dims);
        break;
      }
      const auto* cls = global_of(g, obj.callable);
      std::string head = "{\"__class__\":";
      if (cls) {
        append_json_string(head, cls->dotted());
        t.emplace_back(std::move(head));
      } else {
        t.emplace_back(std::move(head));
        t.emplace_back(obj.callable);
      }
      auto field = [&](const char* name, NodeId child) {
        if (child == no_node) return;
        t.emplace_back(fmt::format(",\"{}\":", name));
        t.emplace_back(child);
      };
      if (obj.args != no_node && g.kind(obj.args) == Kind::tuple) {
        // A call's arguments are always a tuple: shown as an array, this is a description.
        t.emplace_back(std::string(",\"args\":"));
        add_sequence(t, g.items(obj.args));
      } else {
        field("args", obj.args);
      }
      field("kwargs", obj.kwargs);
      field("state", obj.state);
      if (!obj.list_items.empty()) {
        t.emplace_back(std::string(",\"items\":"));
        add_sequence(t, obj.list_items);
      }
      if (!obj.dict_items.empty()) {
        t.emplace_back(std::string(",\"dict\":"));
        add_dict(g, t, obj.dict_items);
      }
      t.emplace_back(std::string("}"));
      break;
    }
    default:
      break;
  }
  return t;
}

// Writes a scalar node; false for containers and objects.
bool write_scalar(const Graph& g, NodeId id, std::string& out) {
  switch (g.kind(id)) {
    case Kind::none:
      out += "null";
      return true;
    case Kind::boolean:
      out += g.boolean(id) ? "true" : "false";
      return true;
    case Kind::integer:
      out += std::to_string(g.integer(id));
      return true;
    case Kind::big_integer:
      if (g.big_integer(id).size() > max_json_integer_bytes) {
        // Its hexadecimal digits: readers refuse numbers that long (Python's json past 4300
        // digits).
        out += "{\"__int__\":";
        append_json_string(out, signed_hex(g.big_integer(id)));
        out += '}';
      } else {
        out += big_integer_text(g.big_integer(id));
      }
      return true;
    case Kind::floating: {
      double v = g.floating(id);
      out += float_json(v);
      return true;
    }
    case Kind::string:
      append_json_string(out, g.text(id));
      return true;
    case Kind::bytes:
    case Kind::bytearray: {
      const std::string& b = g.text(id);
      out += g.kind(id) == Kind::bytes ? "{\"__bytes__\":\"" : "{\"__bytearray__\":\"";
      for (unsigned char c : b) fmt::format_to(std::back_inserter(out), "{:02x}", c);
      out += "\"}";
      return true;
    }
    case Kind::global:
      out += "{\"__global__\":";
      append_json_string(out, g.global(id).dotted());
      out += '}';
      return true;
    default:
      return false;
  }
}

}  // namespace

namespace {

// Whether Python's repr() shows code point `c` as it is (str.isprintable()): not the controls, the
// separators but ' ', the format characters, surrogates and private use. (Unassigned code points,
// which Python escapes too, are shown as they are.)
bool printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if (c >= 0xd800 && c <= 0xdfff) return false;  // surrogates
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
      (c >= 0x205f && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) || c == 0x3000 || c == 0xfeff ||
      (c >= 0xfff9 && c <= 0xfffb) || c == 0x110bd || c == 0x110cd ||
      (c >= 0x1bca0 && c <= 0x1bca3) || (c >= 0x1d173 && c <= 0x1d17a) || c == 0xe0001 ||
      (c >= 0xe0020 && c <= 0xe007f) || c == 0x061c || c == 0x180e || c == 0x0600 ||
      (c >= 0x0601 && c <= 0x0605) || c == 0x06dd || c == 0x070f || c == 0x08e2) {
    return false;  // Zs, Zl, Zp, Cf
  }
  if ((c >= 0xe000 && c <= 0xf8ff) || (c >= 0xf0000 && c <= 0xffffd) ||
      (c >= 0x100000 && c <= 0x10fffd)) {
    return false;  // private use
  }
  return true;
}

// Decodes the code point at text[i] as CPython's UTF-8 decoder with surrogatepass does (the way
// pickle stores str): a well-formed sequence, or a surrogate encoded in three bytes. Returns its
// length, 0 for a byte that starts neither.
std::size_t decode_surrogatepass(std::string_view text, std::size_t i, char32_t& c) {
  std::size_t len = utf8_sequence_length(text, i);
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  if (len == 0 && b(0) == 0xed && i + 2 < text.size() && b(1) >= 0xa0 && b(1) <= 0xbf &&
      (b(2) & 0xc0) == 0x80) {
    len = 3;  // U+D800..U+DFFF
  }
  switch (len) {
    case 1:
      c = b(0);
      break;
    case 2:
      c = (char32_t{b(0)} & 0x1f) << 6 | (b(1) & 0x3f);
      break;
    case 3:
      c = (char32_t{b(0)} & 0x0f) << 12 | (char32_t{b(1)} & 0x3f) << 6 | (b(2) & 0x3f);
      break;
    case 4:
      c = (char32_t{b(0)} & 0x07) << 18 | (char32_t{b(1)} & 0x3f) << 12 |
          (char32_t{b(2)} & 0x3f) << 6 | (b(3) & 0x3f);
      break;
    default:
      break;
  }
  return len;
}

// Python's repr() of a str (`bytes`: of a bytes object, b'...'): quotes chosen as Python
// chooses them, escapes as Python writes them.
void append_repr(std::string& out, std::string_view text, bool bytes) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const char quote = has_single && text.find('"') == std::string_view::npos ? '"' : '\'';
  if (bytes) out += 'b';
  out += quote;
  for (std::size_t i = 0; i < text.size();) {
    char32_t c = static_cast<unsigned char>(text[i]);
    std::size_t len = bytes || c < 0x80 ? 1 : decode_surrogatepass(text, i, c);
    if (len == 0) {
      // Not even surrogatepass decodes this byte (a hostile pickle): shown as the byte.
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned>(c));
      ++i;
      continue;
    }
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f || (bytes && c >= 0x80)) {  // NOLINT(bugprone-branch-clone)
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x7f || printable(c)) {
      out.append(text.substr(i, len));
    } else if (c <= 0xff) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xffff) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
    } else {
      fmt::format_to(std::back_inserter(out), "\\U{:08x}", static_cast<unsigned>(c));
    }
    i += len;
  }
  out += quote;
}

// A tuple key's text is cut past this many bytes or levels: such keys are not real (a hostile
// pickle can make a key of shared tuples that doubles at each level); a cut text can only make
// two keys look alike, which the mount's naming rule handles.
constexpr std::size_t max_tuple_text = 64 * 1024;
constexpr std::size_t max_tuple_depth = 100;

// Python's repr() of a key, or its str() at the top (`top`: a str is itself, not quoted).
// Iterative: a tuple's items are visited from an explicit stack.
std::string python_text(const Graph& g, NodeId root, bool top) {
  std::string out;
  struct TupleFrame {
    const std::vector<NodeId>* items;
    std::size_t next;
  };
  std::vector<TupleFrame> stack;
  auto scalar = [&](NodeId id, bool quoted) {
    switch (g.kind(id)) {
      case Kind::string:
        if (quoted) {
          append_repr(out, g.text(id), false);
        } else {
          out += g.text(id);
        }
        return;
      case Kind::bytes:
        append_repr(out, g.text(id), true);
        return;
      case Kind::integer:
        out += std::to_string(g.integer(id));
        return;
      case Kind::big_integer:
        out += big_integer_text(g.big_integer(id));
        return;
      case Kind::boolean:
        out += g.boolean(id) ? "True" : "False";
        return;
      case Kind::none:
        out += "None";
        return;
      case Kind::floating:
        out += float_repr(g.floating(id));
        return;
      case Kind::global:
        out += g.global(id).dotted();
        return;
      case Kind::object: {
        const auto* cls = global_of(g, g.object(id).callable);
        fmt::format_to(std::back_inserter(out), "<{} object>", cls ? cls->dotted() : "?");
        return;
      }
      case Kind::frozenset:
        out += "frozenset(...)";
        return;
      default:
        out += "?";
        return;
    }
  };
  auto open = [&](NodeId id) {
    if (g.kind(id) != Kind::tuple) return false;
    if (stack.size() >= max_tuple_depth) {
      out += "(...)";
      return true;
    }
    out += '(';
    stack.push_back({&g.items(id), 0});
    return true;
  };
  if (!open(root)) {
    scalar(root, !top);
    return out;
  }
  while (!stack.empty()) {
    TupleFrame& f = stack.back();
    if (out.size() > max_tuple_text) {
      out += "...";
      break;
    }
    if (f.next == f.items->size()) {
      if (f.items->size() == 1) out += ',';
      out += ')';
      stack.pop_back();
      continue;
    }
    if (f.next > 0) out += ", ";
    NodeId item = (*f.items)[f.next++];
    if (!open(item)) scalar(item, true);  // may grow the stack: `f` is not used after
  }
  return out;
}

}  // namespace

std::string key_text(const Graph& g, NodeId id) { return python_text(g, id, true); }

std::string bytes_repr(std::string_view data) {
  std::string out;
  append_repr(out, data, true);
  return out;
}

std::string key_json(const Graph& g, NodeId id) {
  std::string out;
  switch (g.kind(id)) {
    case Kind::string:
      append_json_string(out, g.text(id));
      break;
    case Kind::integer:
      out = std::to_string(g.integer(id));
      break;
    case Kind::big_integer:
      out = big_integer_text(g.big_integer(id));
      break;
    case Kind::boolean:
      out = g.boolean(id) ? "true" : "false";
      break;
    case Kind::none:
      out = "null";
      break;
    case Kind::floating:
      out = float_json(g.floating(id));
      break;
    case Kind::bytes:
      out = "{\"__bytes__\":\"";
      for (unsigned char c : g.text(id)) fmt::format_to(std::back_inserter(out), "{:02x}", c);
      out += "\"}";
      break;
    case Kind::tuple:
      out = "{\"__tuple__\":";
      append_json_string(out, python_text(g, id, false));
      out += '}';
      break;
    default:
      out = "{\"__key__\":";
      append_json_string(out, python_text(g, id, false));
      out += '}';
      break;
  }
  return out;
}

std::string key_identity(const Graph& g, NodeId id) {
  switch (g.kind(id)) {
    case Kind::none:
      return "N";
    case Kind::boolean:
      return g.boolean(id) ? "n1" : "n0";
    case Kind::integer:
      return "n" + std::to_string(g.integer(id));
    case Kind::big_integer:
      return "n" + big_integer_text(g.big_integer(id));
    case Kind::floating: {
      double v = g.floating(id);
      if (std::isnan(v)) return {};  // nan != nan: never equal to another key
      if (std::isfinite(v) && v == std::floor(v)) {
        // An integral float equals the int of the same value: its exact decimal digits.
        return "n" + fmt::format("{:.0f}", v + 0.0);  // + 0.0: -0.0 == 0
      }
      return "f" + float_repr(v);
    }
    case Kind::string:
      return "s" + g.text(id);
    case Kind::bytes:
      return "b" + g.text(id);
    case Kind::tuple: {
      // Equal tuples have equal items: their identities, each prefixed by its length. A tuple
      // holding something compared by object identity has none either.
      std::string out = "t";
      for (NodeId item : g.items(id)) {
        if (g.kind(item) == Kind::tuple) return {};  // nested tuples: compared by the node
        std::string part = key_identity(g, item);
        if (part.empty()) return {};
        out += std::to_string(part.size()) + ':' + part;
      }
      return out;
    }
    default:
      return {};
  }
}

std::string value_json(const Graph& g, NodeId root, std::size_t max_bytes) {
  auto truncated = [&] {
    return fmt::format("{{\"__truncated__\":true,\"bytes_limit\":{}}}", max_bytes);
  };
  std::string out;
  std::unordered_set<NodeId> on_path;  // a set, not a bitmap: most values are tiny
  std::vector<Frame> stack;
  // Whether `text` bytes, which write at least that many bytes of JSON, would pass max_bytes:
  // checked before a str or bytes is escaped (six bytes for a control character, two per byte
  // of hex), so that a value of any size costs at most a few times max_bytes to cut.
  auto too_long = [&](std::size_t text) {
    return text > max_bytes - std::min(out.size(), max_bytes);
  };
  bool cut = false;
  auto visit = [&](NodeId id) {
    const Kind kind = g.kind(id);
    if ((kind == Kind::string || kind == Kind::bytes || kind == Kind::bytearray) &&
        too_long(g.text(id).size())) {
      cut = true;
      return;
    }
    if (write_scalar(g, id, out)) return;
    if (stack.size() >= max_value_depth) {
      // Deeper values are cut so that JSON readers, which recurse, can read the result.
      out += "{\"__truncated__\":true,\"depth_limit\":" + std::to_string(max_value_depth) + "}";
      return;
    }
    if (!on_path.insert(id).second) {
      out += "{\"__recursion__\":true}";
      return;
    }
    stack.push_back({id, tokens_of(g, id), 0});
  };
  visit(root);
  while (!stack.empty() && !cut) {
    if (out.size() > max_bytes) return truncated();
    Frame& top = stack.back();
    if (top.next == top.tokens.size()) {
      on_path.erase(top.node);
      stack.pop_back();
      continue;
    }
    Token token = std::move(top.tokens[top.next++]);
    if (auto* text = std::get_if<std::string>(&token)) {
      out += *text;
    } else if (auto* key = std::get_if<ObjectKey>(&token)) {
      const std::string& name = g.text(key->key);
      if (too_long(name.size())) return truncated();
      if (!key->first) out += ',';
      append_json_string(out, name);
      out += ':';
    } else {
      visit(std::get<NodeId>(token));  // may reallocate the stack: `top` is not used after
    }
  }
  if (cut || out.size() > max_bytes) return truncated();
  return out;
}

}  // namespace ckptfs
