// SPDX-License-Identifier: MIT
// plain_value(): a value entry's pickle graph, or value_json()'s text, read into a PlainValue,
// each with an explicit stack.
#include <ckptfs/format/pickle/read_plain_value.hpp>

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/format/pickle/pickle_writer.hpp>
#include <ckptfs/format/pickle/value_json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace ckptfs {
namespace {

using Value = PlainValue;
using VKind = PlainValue::Kind;

// A magnitude's little-endian bytes as pickle's LONG two's complement: a sign byte (the
// magnitude's top bit is clear), then the whole negated when the number is negative.
std::string with_sign(std::string magnitude, bool negative) {
  magnitude += '\0';
  if (negative) {
    unsigned carry = 1;
    for (char& b : magnitude) {
      const unsigned v = static_cast<unsigned char>(~static_cast<unsigned char>(b)) + carry;
      b = static_cast<char>(v & 0xff);
      carry = v >> 8;
    }
  }
  return magnitude;
}

// Little-endian two's complement bytes of a decimal integer ("-123"), as pickle::Value's
// big_integer takes them (the writer drops the bytes it does not need).
std::string twos_complement_le(std::string_view text) {
  const bool negative = text.starts_with('-');
  std::vector<std::uint32_t> limbs;  // the magnitude, least significant first
  for (char c : text.substr(negative ? 1 : 0)) {
    std::uint64_t carry = static_cast<std::uint64_t>(c - '0');
    for (auto& limb : limbs) {
      const std::uint64_t v = std::uint64_t{limb} * 10 + carry;
      limb = static_cast<std::uint32_t>(v);
      carry = v >> 32;
    }
    if (carry != 0) limbs.push_back(static_cast<std::uint32_t>(carry));
  }
  std::string out;
  for (const std::uint32_t limb : limbs) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((limb >> (8 * i)) & 0xff);
  }
  return with_sign(std::move(out), negative);
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;  // value_json() writes lower case only
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

// Whether Python can hash `v` (a dict key, a set item): no list, dict, set or bytearray in it.
// Iterative over nested tuples.
bool hashable(const Value& v) {
  std::vector<const Value*> todo{&v};
  while (!todo.empty()) {
    const Value* x = todo.back();
    todo.pop_back();
    switch (x->kind) {
      case VKind::list:
      case VKind::dict:
      case VKind::ordered_dict:
      case VKind::set:
      case VKind::bytearray:
        return false;
      case VKind::tuple:
        for (const Value& item : x->items) todo.push_back(&item);
        break;
      default:
        break;
    }
  }
  return true;
}

Value number(const JsonReader& json) {
  if (auto n = json.int64()) return Value::integer(*n);
  const std::string_view text = json.number_text();
  if (text.find_first_of(".eE") == std::string_view::npos) {
    return Value::big_integer(twos_complement_le(text));
  }
  return Value::real(json.floating());
}

// The int of {"__int__": "0x<hex>"} or "-0x<hex>" (value_json()'s form of ints past 1024
// bytes), as little-endian two's complement bytes.
std::optional<std::string> hex_integer(std::string_view text) {
  const bool negative = text.starts_with('-');
  if (negative) text.remove_prefix(1);
  if (!text.starts_with("0x") || text.size() < 3) return std::nullopt;
  text.remove_prefix(2);
  std::string digits(text.size() % 2 ? "0" : "");
  digits += text;
  auto big_endian = from_hex(digits);
  if (!big_endian) return std::nullopt;
  std::string out(big_endian->rbegin(), big_endian->rend());
  return with_sign(std::move(out), negative);
}

// The scalar of a marker object whose key `marker` was just read, up to its '}': nullopt when it
// is not exactly {"__float__": "nan" | "inf" | "-inf"}, {"__bytes__": "<hex>"},
// {"__bytearray__": "<hex>"} or {"__int__": "0x<hex>"}.
std::optional<Value> marked_scalar(JsonReader& json, std::string_view marker) {
  using Token = JsonReader::Token;
  if (json.next() != Token::string) return std::nullopt;
  const std::string_view s = json.string();
  std::optional<Value> out;
  if (marker == "__float__") {
    if (s == "nan") out = Value::real(std::numeric_limits<double>::quiet_NaN());
    if (s == "inf") out = Value::real(std::numeric_limits<double>::infinity());
    if (s == "-inf") out = Value::real(-std::numeric_limits<double>::infinity());
  } else if (marker == "__int__") {
    if (auto bytes = hex_integer(s)) out = Value::big_integer(std::move(*bytes));
  } else if (auto bytes = from_hex(s)) {
    out = marker == "__bytes__" ? Value::bytes_value(std::move(*bytes))
                                : Value::bytearray_value(std::move(*bytes));
  }
  if (json.next() != Token::end_object) return std::nullopt;
  return out;
}

bool is_marker_key(std::string_view key) {
  return key.size() >= 4 && key.starts_with("__") && key.ends_with("__");
}

}  // namespace

std::optional<PlainValue> plain_value(std::string_view value_json) {
  using Token = JsonReader::Token;
  JsonLimits limits;
  // value_json()'s containers (a {"__dict__": [[k, v]]} takes three levels per value level),
  // and its scalar markers in them.
  limits.max_depth = 3 * max_value_depth + 2;
  limits.max_number_chars = 10'000;  // value_json() writes ints of up to 1024 bytes as numbers
  limits.surrogate_escapes = true;
  // An open container: what it is building and what JSON closes it.
  enum class Role : std::uint8_t {
    list,    // [ ... ]
    marked,  // {"__tuple__": [ ... ]} and __set__, __frozenset__: the array, then a '}'
    object,  // { "key": value, ... }: a dict of str keys
    items,   // {"__dict__": [ ... ]}: the array of pairs, then a '}'
    pair,    // [key, value] inside items
  };
  struct Frame {
    Role role;
    Value value;
    std::string key;  // an object's current key
  };
  std::vector<Frame> open;
  std::optional<Value> result;
  // Puts a finished value into the container it is in; false when it cannot be there.
  auto complete = [&](Value v) {
    if (open.empty()) {
      result = std::move(v);
      return true;
    }
    Frame& f = open.back();
    switch (f.role) {
      case Role::object:
        f.value.entries.push_back({Value::str(std::move(f.key)), std::move(v)});
        return true;
      case Role::items:
        return false;  // only [key, value] arrays, which end as pairs
      case Role::pair:
        if (f.value.items.size() == 2) return false;
        if (f.value.items.empty() && !hashable(v)) return false;
        f.value.items.push_back(std::move(v));
        return true;
      case Role::marked:
        if ((f.value.kind == VKind::set || f.value.kind == VKind::frozenset) && !hashable(v)) {
          return false;
        }
        f.value.items.push_back(std::move(v));
        return true;
      case Role::list:
        f.value.items.push_back(std::move(v));
        return true;
    }
    return false;
  };
  try {
    JsonReader json(value_json, limits);
    for (Token t = json.next(); t != Token::end; t = json.next()) {
      switch (t) {
        case Token::begin_array:
          if (!open.empty() && open.back().role == Role::items) {
            open.push_back({Role::pair, Value::tuple({}), {}});
          } else {
            open.push_back({Role::list, Value::list({}), {}});
          }
          break;
        case Token::begin_object: {
          const Token first = json.next();
          if (first == Token::end_object) {
            if (!complete(Value::dict({}))) return std::nullopt;
            break;
          }
          const std::string key(json.string());  // first == Token::key
          if (!is_marker_key(key)) {
            open.push_back({Role::object, Value::dict({}), key});
          } else if (key == "__float__" || key == "__bytes__" || key == "__bytearray__" ||
                     key == "__int__") {
            auto scalar = marked_scalar(json, key);
            if (!scalar || !complete(std::move(*scalar))) return std::nullopt;
          } else if (key == "__tuple__" || key == "__set__" || key == "__frozenset__" ||
                     key == "__dict__") {
            if (json.next() != Token::begin_array) return std::nullopt;
            Value v = key == "__tuple__"  ? Value::tuple({})
                      : key == "__set__"  ? Value::set({})
                      : key == "__dict__" ? Value::dict({})
                                          : Value::frozenset({});
            open.push_back({key == "__dict__" ? Role::items : Role::marked, std::move(v), {}});
          } else {
            return std::nullopt;  // described, not written whole (an object, a cut value...)
          }
          break;
        }
        case Token::key:
          if (is_marker_key(json.string())) return std::nullopt;  // value_json() never writes it
          open.back().key = json.string();
          break;
        case Token::end_array: {
          Frame done = std::move(open.back());
          open.pop_back();
          if (done.role == Role::pair) {
            if (done.value.items.size() != 2) return std::nullopt;
            Frame& dict = open.back();  // a pair is always inside items
            dict.value.entries.push_back(
                {std::move(done.value.items[0]), std::move(done.value.items[1])});
            break;
          }
          if (done.role == Role::marked || done.role == Role::items) {
            if (json.next() != Token::end_object) return std::nullopt;
          }
          if (!complete(std::move(done.value))) return std::nullopt;
          break;
        }
        case Token::end_object: {
          Value done = std::move(open.back().value);
          open.pop_back();
          if (!complete(std::move(done))) return std::nullopt;
          break;
        }
        case Token::string:
          if (!complete(Value::str(std::string(json.string())))) return std::nullopt;
          break;
        case Token::number:
          if (!complete(number(json))) return std::nullopt;
          break;
        case Token::true_value:
        case Token::false_value:
          if (!complete(Value::boolean(t == Token::true_value))) return std::nullopt;
          break;
        case Token::null:
          if (!complete(Value::none_value())) return std::nullopt;
          break;
        case Token::end:
          break;
      }
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  return result;
}

namespace {

using pickle::Graph;
using pickle::no_node;
using pickle::NodeId;
using GKind = pickle::Kind;

// graph -> PlainValue, iteratively: a frame per container being built.
class GraphReader {
 public:
  GraphReader(const Graph& g, std::uint64_t& budget) : g_(g), budget_(budget) {}

  std::optional<Value> read(NodeId root) {
    if (!visit(root)) return std::nullopt;
    while (!stack_.empty()) {
      Frame& f = stack_.back();
      if (f.next < f.children.size()) {
        const NodeId child = f.children[f.next++];
        if (!visit(child)) return std::nullopt;  // may grow the stack: `f` not used after
        continue;
      }
      Frame done = std::move(stack_.back());
      stack_.pop_back();
      on_path_.erase(done.node);
      if (!finish(done)) return std::nullopt;
    }
    return std::move(result_);
  }

 private:
  enum class Role : std::uint8_t { sequence, dict, call };
  struct Frame {
    NodeId node;
    Role role;
    Value value;
    std::vector<NodeId> children;  // in order; a dict's are key, value, key, value...
    std::size_t next = 0;
    std::vector<Value> built;  // the children built so far
  };

  bool take_one() {
    if (budget_ == 0) return false;
    --budget_;
    return true;
  }

  // Builds a scalar at once, or opens a frame for a container; false when `id` is not plain.
  bool visit(NodeId id) {
    if (!take_one()) return false;
    switch (g_.kind(id)) {
      case GKind::none:
        return add(Value::none_value());
      case GKind::boolean:
        return add(Value::boolean(g_.boolean(id)));
      case GKind::integer:
        return add(Value::integer(g_.integer(id)));
      case GKind::big_integer:
        return add(Value::big_integer(g_.big_integer(id)));
      case GKind::floating:
        return add(Value::real(g_.floating(id)));
      case GKind::string:
        return add(Value::str(g_.text(id)));
      case GKind::bytes:
        return add(Value::bytes_value(g_.text(id)));
      case GKind::bytearray:
        return add(Value::bytearray_value(g_.text(id)));
      case GKind::tuple:
        return open(id, Role::sequence, Value::tuple({}), g_.items(id));
      case GKind::list:
        return open(id, Role::sequence, Value::list({}), g_.items(id));
      case GKind::set:
        return open(id, Role::sequence, Value::set({}), g_.items(id));
      case GKind::frozenset:
        return open(id, Role::sequence, Value::frozenset({}), g_.items(id));
      case GKind::dict: {
        if (g_.build_state(id) != no_node) return false;  // attributes on a dict: not data
        std::vector<NodeId> children;
        for (const auto& [key, value] : merged_items(id)) {
          children.push_back(key);
          children.push_back(value);
        }
        return open(id, Role::dict, g_.ordered(id) ? Value::ordered_dict({}) : Value::dict({}),
                    std::move(children));
      }
      case GKind::object:
        return open_call(id);
      case GKind::global:
      case GKind::persistent_id:
        return false;
    }
    return false;
  }

  // A dict's items as Python keeps them: a key equal to an earlier one (1 == 1.0 == True) keeps
  // the earlier position and takes the later value.
  std::vector<std::pair<NodeId, NodeId>> merged_items(NodeId id) const {
    const auto& items = g_.dict_items(id);
    std::vector<std::pair<NodeId, NodeId>> out;
    out.reserve(items.size());
    TextMap<std::size_t> first;
    for (const auto& [key, value] : items) {
      std::string identity = key_identity(g_, key);
      if (!identity.empty()) {
        auto [it, fresh] = first.emplace(std::move(identity), out.size());
        if (!fresh) {
          out[it->second].second = value;
          continue;
        }
      }
      out.emplace_back(key, value);
    }
    return out;
  }

  // A call of a plain constructor with plain arguments: its args tuple, then its state.
  bool open_call(NodeId id) {
    const pickle::Object& o = g_.object(id);
    if (o.callable == no_node || g_.kind(o.callable) != GKind::global) return false;
    const pickle::Global& fn = g_.global(o.callable);
    if (!is_plain_call(fn.module, fn.name) || o.args == no_node ||
        g_.kind(o.args) != GKind::tuple || o.kwargs != no_node || !o.list_items.empty() ||
        !o.dict_items.empty()) {
      return false;
    }
    // Exactly the numpy scalars value.json writes as numbers (so that both agree on what is
    // plain), and a dtype only as such a scalar's first argument.
    if (fn.name == "scalar" && !numpy_scalar_json(g_, o)) return false;
    if (fn.name == "dtype" && (stack_.size() < 2 || stack_[stack_.size() - 2].role != Role::call ||
                               stack_[stack_.size() - 2].value.call_name() != "scalar" ||
                               stack_.back().built.size() != 0)) {
      return false;
    }
    std::vector<NodeId> children{o.args};
    if (o.state != no_node) children.push_back(o.state);
    return open(id, Role::call, Value::call(fn.module, fn.name, Value::tuple({})),
                std::move(children));
  }

  bool open(NodeId id, Role role, Value value, std::vector<NodeId> children) {
    if (stack_.size() >= pickle::max_value_depth_written) return false;
    if (!on_path_.insert(id).second) return false;  // inside itself
    stack_.push_back({id, role, std::move(value), std::move(children), 0, {}});
    return true;
  }

  bool add(Value v) {
    if (stack_.empty()) {
      result_ = std::move(v);
    } else {
      stack_.back().built.push_back(std::move(v));
    }
    return true;
  }

  // A container whose children are all built: checked (hashable keys and items, the arguments
  // each constructor takes) and added to its parent.
  bool finish(Frame& f) {
    Value v = std::move(f.value);
    switch (f.role) {
      case Role::sequence:
        if (v.kind == VKind::set || v.kind == VKind::frozenset) {
          for (const Value& item : f.built) {
            if (!hashable(item)) return false;
          }
        }
        v.items = std::move(f.built);
        break;
      case Role::dict:
        for (std::size_t i = 0; i + 1 < f.built.size(); i += 2) {
          if (!hashable(f.built[i])) return false;
          v.entries.push_back({std::move(f.built[i]), std::move(f.built[i + 1])});
        }
        break;
      case Role::call:
        if (!plain_arguments(v, f.built)) return false;
        v.items = std::move(f.built);
        v.flag = v.items.size() > 1;
        break;
    }
    return add(std::move(v));
  }

  // The arguments each constructor of is_plain_call() takes (a numpy scalar's raw bytes as a
  // Python 2 str made bytes).
  static bool plain_arguments(const Value& call, std::vector<Value>& built) {
    const Value& args = built[0];
    const std::string_view name = call.call_name();
    if (call.call_module() == "torch") {  // torch.Size((int, ...)), no state
      if (built.size() != 1 || args.items.size() != 1 || args.items[0].kind != VKind::tuple) {
        return false;
      }
      for (const Value& d : args.items[0].items) {
        if (d.kind != VKind::integer) return false;
      }
      return true;
    }
    if (name == "dtype") {  // numpy.dtype(str, bool, bool), a state tuple of scalars
      if (args.items.empty() || args.items[0].kind != VKind::string) return false;
      return built.size() == 1 || built[1].kind == VKind::tuple;
    }
    // numpy's scalar(dtype, bytes)
    if (built.size() != 1 || args.items.size() != 2 || args.items[0].kind != VKind::call ||
        args.items[0].call_name() != "dtype") {
      return false;
    }
    Value& raw = built[0].items[1];
    if (raw.kind == VKind::string) raw.kind = VKind::bytes;  // a Python 2 str: the raw bytes
    return raw.kind == VKind::bytes;
  }

  const Graph& g_;
  std::uint64_t& budget_;
  std::vector<Frame> stack_;
  std::unordered_set<NodeId> on_path_;
  std::optional<Value> result_;
};

}  // namespace

std::optional<PlainValue> plain_value(const pickle::Graph& graph, pickle::NodeId id,
                                      std::uint64_t& budget) {
  return GraphReader(graph, budget).read(id);
}

std::shared_ptr<const PlainValue> entry_value(const Entry& e) {
  if (e.kind != Entry::Kind::value) return nullptr;
  if (e.value) return e.value;
  auto value = plain_value(e.value_json);
  return value ? std::make_shared<const PlainValue>(std::move(*value)) : nullptr;
}

}  // namespace ckptfs
