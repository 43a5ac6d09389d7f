// SPDX-License-Identifier: MIT
// key_text() and value_json(): Python-like and JSON renderings of inert pickle values.
#include <ckptfs/format/value_json.hpp>

#include <fmt/format.h>

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
using pickle::NodeId;
using pickle::no_node;

// Python's repr() of a float: the shortest text that reads back the same, with ".0" on integers.
std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

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

std::string quoted_repr(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

const pickle::Global* global_of(const Graph& g, NodeId id) {
  return id != no_node && g.kind(id) == Kind::global ? &g.global(id) : nullptr;
}

// numpy.core.multiarray.scalar(dtype('f8'), b'...') as a JSON number, when it is a plain
// little-endian number.
std::optional<std::string> numpy_scalar(const Graph& g, const pickle::Object& obj) {
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
  auto integer = [&](auto v) { if (auto x = load(v)) out = fmt::format("{}", *x); };
  if (code == "f8") {
    if (auto x = load(double{})) out = std::isfinite(*x) ? float_repr(*x) : "null";
  } else if (code == "f4") {
    if (auto x = load(float{})) out = std::isfinite(*x) ? float_repr(*x) : "null";
  } else if (code == "i8") { integer(std::int64_t{});
  } else if (code == "i4") { integer(std::int32_t{});
  } else if (code == "i2") { integer(std::int16_t{});
  } else if (code == "i1") { integer(std::int8_t{});
  } else if (code == "u8") { integer(std::uint64_t{});
  } else if (code == "u4") { integer(std::uint32_t{});
  } else if (code == "u2") { integer(std::uint16_t{});
  } else if (code == "u1") { integer(std::uint8_t{});
  } else if (code == "b1" && raw.size() == 1) {
    out = raw[0] ? "true" : "false";
  }
  return out;
}

// A frame of the iterative writer: literal text and child nodes, emitted in order.
using Token = std::variant<std::string, NodeId>;
struct Frame {
  NodeId node;
  std::vector<Token> tokens;
  std::size_t next = 0;
};

void add_sequence(const Graph& g, std::vector<Token>& t, const std::vector<NodeId>& items) {
  t.emplace_back(std::string("["));
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) t.emplace_back(std::string(","));
    t.emplace_back(items[i]);
  }
  t.emplace_back(std::string("]"));
  (void)g;
}

void add_key(const Graph& g, std::vector<Token>& t, NodeId key, bool first) {
  std::string s = first ? "" : ",";
  append_json_string(s, key_text(g, key));
  s += ':';
  t.emplace_back(std::move(s));
}

void add_dict(const Graph& g, std::vector<Token>& t,
              const std::vector<std::pair<NodeId, NodeId>>& items) {
  t.emplace_back(std::string("{"));
  for (std::size_t i = 0; i < items.size(); ++i) {
    add_key(g, t, items[i].first, i == 0);
    t.emplace_back(items[i].second);
  }
  t.emplace_back(std::string("}"));
}

// The tokens of a container or object node; scalars are written directly by the caller.
std::vector<Token> tokens_of(const Graph& g, NodeId id) {
  std::vector<Token> t;
  switch (g.kind(id)) {
    case Kind::tuple:
    case Kind::list:
    case Kind::set:
    case Kind::frozenset:
      add_sequence(g, t, g.items(id));
      break;
    case Kind::dict:
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
      if (auto number = numpy_scalar(g, obj)) {
        t.emplace_back(*number);
        break;
      }
      const auto* cls = global_of(g, obj.callable);
      if (cls && cls->dotted() == "torch.Size" && obj.args != no_node &&
          g.kind(obj.args) == Kind::tuple && g.items(obj.args).size() == 1) {
        t.emplace_back(g.items(obj.args)[0]);
        break;
      }
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
      field("args", obj.args);
      field("kwargs", obj.kwargs);
      field("state", obj.state);
      if (!obj.list_items.empty()) {
        t.emplace_back(std::string(",\"items\":"));
        add_sequence(g, t, obj.list_items);
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
    case Kind::none: out += "null"; return true;
    case Kind::boolean: out += g.boolean(id) ? "true" : "false"; return true;
    case Kind::integer: out += std::to_string(g.integer(id)); return true;
    case Kind::big_integer: {
      std::string text = big_integer_text(g.big_integer(id));
      if (text.starts_with("0x")) {
        append_json_string(out, text);
      } else {
        out += text;
      }
      return true;
    }
    case Kind::floating: {
      double v = g.floating(id);
      out += std::isfinite(v) ? float_repr(v) : "null";
      return true;
    }
    case Kind::string: append_json_string(out, g.text(id)); return true;
    case Kind::bytes: {
      const std::string& b = g.text(id);
      out += "{\"__bytes__\":\"";
      for (unsigned char c : b) out += fmt::format("{:02x}", c);
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

std::string key_text(const Graph& g, NodeId id) {
  switch (g.kind(id)) {
    case Kind::string:
    case Kind::bytes: return g.text(id);
    case Kind::integer: return std::to_string(g.integer(id));
    case Kind::big_integer: return big_integer_text(g.big_integer(id));
    case Kind::boolean: return g.boolean(id) ? "True" : "False";
    case Kind::none: return "None";
    case Kind::floating: return float_repr(g.floating(id));
    case Kind::global: return g.global(id).dotted();
    case Kind::tuple: {
      // One level deep, like repr(): nested containers are not expanded.
      const auto& items = g.items(id);
      std::string s = "(";
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) s += ", ";
        Kind k = g.kind(items[i]);
        if (k == Kind::string) {
          s += quoted_repr(g.text(items[i]));
        } else if (k == Kind::tuple || k == Kind::list || k == Kind::dict || k == Kind::set ||
                   k == Kind::frozenset || k == Kind::object) {
          s += "...";
        } else {
          s += key_text(g, items[i]);
        }
      }
      if (items.size() == 1) s += ',';
      return s + ")";
    }
    case Kind::object: {
      const auto* cls = global_of(g, g.object(id).callable);
      return fmt::format("<{} object>", cls ? cls->dotted() : "?");
    }
    default: return "?";
  }
}

std::string value_json(const Graph& g, NodeId root, std::size_t max_bytes) {
  std::string out;
  std::unordered_set<NodeId> on_path;  // a set, not a bitmap: most values are tiny
  std::vector<Frame> stack;
  auto visit = [&](NodeId id) {
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
  while (!stack.empty()) {
    if (out.size() > max_bytes) {
      return fmt::format("{{\"__truncated__\":true,\"bytes_limit\":{}}}", max_bytes);
    }
    Frame& top = stack.back();
    if (top.next == top.tokens.size()) {
      on_path.erase(top.node);
      stack.pop_back();
      continue;
    }
    Token token = std::move(top.tokens[top.next++]);
    if (auto* text = std::get_if<std::string>(&token)) {
      out += *text;
    } else {
      visit(std::get<NodeId>(token));  // may reallocate the stack: `top` is not used after
    }
  }
  if (out.size() > max_bytes) {
    return fmt::format("{{\"__truncated__\":true,\"bytes_limit\":{}}}", max_bytes);
  }
  return out;
}

}  // namespace ckptfs
