// SPDX-License-Identifier: MIT
// nested_structure(): each selected entry's key path read and followed, containers made on the
// way, flattened keys renamed apart; write_structure(): the containers pickled by a walk with
// a stack of frames.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/pickle/value_json.hpp>
#include <ckptfs/pack/structure.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace ckptfs {
namespace {

using Token = JsonReader::Token;
using Node = Structure::Node;

// One part of a key path.
struct Part {
  bool exact = false;  // a key pack writes exactly: `key`, whose text is `label`
  StructureKey key;
  std::string label;  // its text in the flattened key (key_text()'s), for exact parts
};

// The bytes of a hex text (two digits a byte, either case), or nullopt.
std::optional<std::string> from_hex(std::string_view hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

[[noreturn]] void fail(const Entry& e, std::string_view what) {
  throw Error(ExitCode::bad_checkpoint,
              fmt::format("entry {}: its key_path {}", quote(e.key, 200), what));
}

// The parts of a key path as Entry::key_path holds it (flatten's or a split directory's JSON,
// value_json.hpp's key_json() forms): exact for a str, an int of 64 bits, a bool, None, a float
// and bytes; inexact for what JSON does not say exactly (a tuple's or another key's text, an int
// past 64 bits) and a part ckptfs names.
std::vector<Part> parse_key_path(const Entry& e) {
  JsonLimits limits;
  limits.max_depth = 2;  // the array, a part's object
  limits.max_number_chars = 4096;
  limits.surrogate_escapes = true;  // the bytes of a str that is not UTF-8
  std::vector<Part> parts;
  try {
    JsonReader json(e.key_path, limits);
    if (json.next() != Token::begin_array) json.fail("not an array");
    for (Token t = json.next(); t != Token::end_array; t = json.next()) {
      Part& p = parts.emplace_back();
      p.exact = true;
      switch (t) {
        case Token::string:
          p.key.kind = StructureKey::Kind::str;
          p.key.text = json.string();
          p.label = p.key.text;
          break;
        case Token::number: {
          const std::string_view text = json.number_text();
          if (text.find_first_of(".eE") != std::string_view::npos) {
            p.key.kind = StructureKey::Kind::real;
            p.key.real = json.floating();
            p.label = float_repr(p.key.real);
          } else if (const auto n = json.int64()) {
            p.key.kind = StructureKey::Kind::integer;
            p.key.number = *n;
            p.label = std::to_string(*n);
          } else {
            p.exact = false;  // an int past 64 bits
          }
          break;
        }
        case Token::true_value:
        case Token::false_value:
          p.key.kind = StructureKey::Kind::boolean;
          p.key.number = t == Token::true_value ? 1 : 0;
          p.label = t == Token::true_value ? "True" : "False";
          break;
        case Token::null:
          p.key.kind = StructureKey::Kind::none;
          p.label = "None";
          break;
        case Token::begin_object: {
          if (json.next() != Token::key) json.fail("an empty object");
          const std::string marker(json.string());
          if (json.next() != Token::string) json.fail("a part's member is not a string");
          const std::string value(json.string());
          if (json.next() != Token::end_object) json.fail("a part has several members");
          if (marker == "__float__" && (value == "nan" || value == "inf" || value == "-inf")) {
            p.key.kind = StructureKey::Kind::real;
            p.key.real = value == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                         : value == "inf" ? std::numeric_limits<double>::infinity()
                                          : -std::numeric_limits<double>::infinity();
            p.label = value;
          } else if (marker == "__bytes__") {
            auto bytes = from_hex(value);
            if (!bytes) json.fail("a __bytes__ part is no hex");
            p.key.kind = StructureKey::Kind::bytes;
            p.key.text = std::move(*bytes);
            p.label = bytes_repr(p.key.text);
          } else {
            p.exact = false;  // {"__tuple__": "(1, 2)"}, {"__key__": ...}, {"__part__": ...}
          }
          break;
        }
        default:
          json.fail("a part is not a key");
      }
    }
    json.next();
  } catch (const Error& err) {
    fail(e, fmt::format("is invalid ({})", err.what()));
  }
  return parts;
}

// What makes two dict keys one (value_json.hpp's key_identity(), for the kinds written): empty
// for a NaN, which equals no other key.
std::string identity(const StructureKey& k) {
  switch (k.kind) {
    case StructureKey::Kind::str:
      return "s" + k.text;
    case StructureKey::Kind::bytes:
      return "b" + k.text;
    case StructureKey::Kind::none:
      return "N";
    case StructureKey::Kind::integer:
    case StructureKey::Kind::boolean:
      return "n" + std::to_string(k.number);
    case StructureKey::Kind::real:
      if (std::isnan(k.real)) return {};
      if (std::isfinite(k.real) && k.real == std::floor(k.real)) {
        return "n" + fmt::format("{:.0f}", k.real + 0.0);  // 1.0 == 1, -0.0 == 0
      }
      return "f" + float_repr(k.real);
  }
  return {};
}

bool is_sequence(ContainerKind kind) {
  return kind == ContainerKind::list || kind == ContainerKind::tuple ||
         kind == ContainerKind::set || kind == ContainerKind::frozenset;
}

class Builder {
 public:
  Builder(const Model& model, const Selection& selection)
      : model_(model),
        selection_(selection),
        max_padding_(std::max<std::uint64_t>(std::uint64_t{1} << 20,
                                             16 * std::uint64_t{selection.entries.size()})) {}

  Structure run() {
    for (const ContainerState& cs : model_.container_states) {
      states_.emplace(cs.key_path + '\n' + cs.containers, cs.state);
    }
    if (!model_.root && selection_.entries.size() == 1 &&
        model_.entries[selection_.entries[0]].key_path == "[]") {
      Node root;
      root.is_entry = true;
      s_.nodes.push_back(std::move(root));
      return std::move(s_);
    }
    // A root that is one entry, whose parts alone are selected (a per-channel quantized
    // tensor's scales), holds them as an object's stand-in.
    root_kind_ = model_.root.value_or(ContainerKind::object);
    s_.nodes.push_back(container(root_kind_));
    s_.nodes[0].state = state_of("[]", std::string(1, container_code(root_kind_)));
    if (root_kind_ == ContainerKind::object) s_.flattened.emplace_back("", object_note);
    for (std::size_t i = 0; i < selection_.entries.size(); ++i) place(i);
    rename_flattened();
    for (Node& n : s_.nodes) {
      if (n.kind == ContainerKind::list || n.kind == ContainerKind::tuple) {
        std::sort(n.children.begin(), n.children.end(), [&](std::uint32_t a, std::uint32_t b) {
          return s_.nodes[a].position < s_.nodes[b].position;
        });
      }
    }
    return std::move(s_);
  }

 private:
  static constexpr const char* object_note =
      "not a container pack builds (an object of a class, a tensor's parts): written as an "
      "OrderedDict of the flattened keys below it";

  static Node container(ContainerKind kind) {
    Node n;
    n.kind = kind;
    return n;
  }

  // Puts selected entry `i` where its key path says.
  void place(std::size_t i) {
    const Entry& e = model_.entries[selection_.entries[i]];
    if (e.key_path.empty()) {
      // One str key of the root, whose text no other entry of a pickle has; a format without
      // key paths (an RFC directory's map.pt) may list a text twice: renamed apart, as --flat.
      flat(e, 0, e.key, entry_node(i), nullptr);
      return;
    }
    if (e.key_path == "[]") fail(e, "says it is the whole checkpoint, beside other entries");
    const std::vector<Part> parts = parse_key_path(e);
    if (e.containers.empty()) {
      // Copied from a mount that did not say the containers: its flattened key, at the root.
      flat(e, 0, e.key, entry_node(i), "a key path without containers (an older mount's copy)");
      return;
    }
    if (e.containers.size() != parts.size()) {
      fail(e, fmt::format("has {} parts, its containers {}", parts.size(), e.containers.size()));
    }
    std::vector<ContainerKind> kinds;
    for (const char code : e.containers) {
      const auto kind = container_from_code(code);
      if (!kind) fail(e, "has containers of no known kind");
      kinds.push_back(*kind);
    }
    if (kinds[0] != root_kind_) {
      fail(e, fmt::format("starts in {}, but the checkpoint's root is {}", container_name(kinds[0]),
                          container_name(root_kind_)));
    }
    std::uint32_t at = 0;
    std::size_t consumed = 0;  // bytes of e.key the levels above say
    std::string path = "[";  // the key path so far, as flatten writes it (Model::container_states)
    for (std::size_t level = 0; level < parts.size(); ++level) {
      const Part& p = parts[level];
      const ContainerKind kind = kinds[level];
      if (kind == ContainerKind::object || !p.exact || level >= max_rebuilt_depth) {
        if (consumed > e.key.size()) fail(e, "says more than its key");
        const char* why = kind == ContainerKind::object ? nullptr
                          : !p.exact ? "a key pack cannot write as it is (a tuple, an int past "
                                       "64 bits): written as its text"
                                     : "nested deeper than pack rebuilds";
        flat(e, at, e.key.substr(consumed), entry_node(i), why);
        return;
      }
      const bool last = level + 1 == parts.size();
      // The key's text must be this part's label, then "." and the rest.
      if (e.key.compare(consumed, p.label.size(), p.label) != 0 ||
          (!last && (consumed + p.label.size() >= e.key.size() ||
                     e.key[consumed + p.label.size()] != '.'))) {
        fail(e, "does not spell its key");
      }
      const std::string_view where = std::string_view(e.key).substr(0, consumed + p.label.size());
      if (last) {
        attach(e, at, p, kind, entry_node(i), nullptr, where);
        return;
      }
      if (level > 0) path += ',';
      path += part_json(p);
      const std::size_t before = s_.nodes.size();
      at = attach(e, at, p, kind, std::nullopt, &kinds[level + 1], where);
      if (s_.nodes.size() != before) {
        s_.nodes[at].state = state_of(path + ']', e.containers.substr(0, level + 2));
      }
      consumed += p.label.size() + 1;
    }
  }

  // An exact part as flatten writes it in a key path (value_json.hpp's key_json()).
  static std::string part_json(const Part& p) {
    switch (p.key.kind) {
      case StructureKey::Kind::str: {
        std::string out;
        append_json_string(out, p.key.text);
        return out;
      }
      case StructureKey::Kind::integer:
        return std::to_string(p.key.number);
      case StructureKey::Kind::boolean:
        return p.key.number != 0 ? "true" : "false";
      case StructureKey::Kind::none:
        return "null";
      case StructureKey::Kind::real:
        return float_json(p.key.real);
      case StructureKey::Kind::bytes: {
        std::string out = "{\"__bytes__\":\"";
        for (const char c : p.key.text) {
          fmt::format_to(std::back_inserter(out), "{:02x}", static_cast<unsigned char>(c));
        }
        return out + "\"}";
      }
    }
    return {};
  }

  // The attributes of the OrderedDict at this key path and containers, if it has some.
  std::shared_ptr<const PlainValue> state_of(const std::string& path,
                                             const std::string& containers) const {
    if (states_.empty() || containers.empty() ||
        containers.back() != container_code(ContainerKind::ordered_dict)) {
      return nullptr;
    }
    const auto it = states_.find(path + '\n' + containers);
    return it == states_.end() ? nullptr : it->second;
  }

  std::uint32_t entry_node(std::size_t selected) {
    Node n;
    n.is_entry = true;
    n.selected = selected;
    s_.nodes.push_back(std::move(n));
    return static_cast<std::uint32_t>(s_.nodes.size() - 1);
  }

  // Puts `child` (an entry node) at key `p` of container `at`, of kind `kind`; or, with no
  // child, finds or makes the container of kind `*made` there. Returns the node at that place.
  // `where`: the flattened key of that place.
  std::uint32_t attach(const Entry& e, std::uint32_t at, const Part& p, ContainerKind kind,
                       std::optional<std::uint32_t> child, const ContainerKind* made,
                       std::string_view where) {
    if (s_.nodes[at].kind != kind) {
      fail(e, fmt::format("says a {} where another entry's says a {}", container_name(kind),
                          container_name(s_.nodes[at].kind)));
    }
    std::string id;
    std::uint64_t position = 0;
    if (is_sequence(kind)) {
      if (p.key.kind != StructureKey::Kind::integer || p.key.number < 0) {
        fail(e, fmt::format("puts the key {} in a {}", quote(p.label), container_name(kind)));
      }
      position = static_cast<std::uint64_t>(p.key.number);
      id = "p" + std::to_string(position);
    } else {
      id = identity(p.key);
    }
    std::string slot = fmt::format("{}:{}", at, id);
    if (!id.empty()) {
      if (const auto it = slots_.find(slot); it != slots_.end()) {
        const Node& there = s_.nodes[it->second];
        if (child || there.is_entry || there.kind != *made) {
          fail(e, fmt::format("puts it where entry {} is too", quote(owner_of(it->second), 200)));
        }
        return it->second;
      }
    }
    std::uint32_t node = 0;
    if (child) {
      node = *child;
    } else {
      s_.nodes.push_back(container(*made));
      node = static_cast<std::uint32_t>(s_.nodes.size() - 1);
      if (*made == ContainerKind::object) s_.flattened.emplace_back(where, object_note);
    }
    owners_.emplace_back(node, &e);
    if (!id.empty()) slots_.emplace(std::move(slot), node);
    Node& n = s_.nodes[node];
    n.key = p.key;
    n.position = position;
    Node& parent = s_.nodes[at];
    if (kind == ContainerKind::list || kind == ContainerKind::tuple) {
      if (position >= parent.length) {
        padding_ += position - parent.length;  // Nones, unless an item comes there later
        if (padding_ > max_padding_) {
          fail(e,
               fmt::format("puts an item at position {} of a {}", position, container_name(kind)));
        }
        parent.length = position + 1;
      }
    }
    parent.children.push_back(node);
    return node;
  }

  // Entry `node` under its flattened key `text` in container `at` (an object's stand-in, a
  // dict holding a key pack cannot write): renamed apart from the container's other keys at
  // the end. `why` is told when given.
  void flat(const Entry& e, std::uint32_t at, std::string text, std::uint32_t node,
            const char* why) {
    if (is_sequence(s_.nodes[at].kind)) fail(e, "puts a flattened key in a list, tuple or set");
    if (why) s_.flattened.emplace_back(e.key, why);
    Node& n = s_.nodes[node];
    n.key.kind = StructureKey::Kind::str;
    n.key.text = std::move(text);
    flattened_.push_back(node);
    owners_.emplace_back(node, &e);
    s_.nodes[at].children.push_back(node);
  }

  // The key of the first entry at or below node `node`, for messages.
  std::string owner_of(std::uint32_t node) const {
    for (const auto& [n, e] : owners_) {
      if (n == node) return e->key;
    }
    return {};
  }

  // Flattened keys that another item of their container has get "%#<n>": the smallest n whose
  // "<key>%#<n>" no item of it has (base/names.hpp's rule).
  void rename_flattened() {
    if (flattened_.empty()) return;
    std::vector<std::uint32_t> parent(s_.nodes.size(), 0);
    for (std::uint32_t i = 0; i < s_.nodes.size(); ++i) {
      for (const std::uint32_t c : s_.nodes[i].children) parent[c] = i;
    }
    TextSet own;   // "<container>:<text>" of every str key
    TextSet used;  // of the str keys written so far
    for (std::uint32_t i = 0; i < s_.nodes.size(); ++i) {
      for (const std::uint32_t c : s_.nodes[i].children) {
        const StructureKey& k = s_.nodes[c].key;
        if (k.kind == StructureKey::Kind::str && !is_sequence(s_.nodes[i].kind)) {
          own.insert(fmt::format("{}:{}", i, k.text));
        }
      }
    }
    std::vector<bool> is_flat(s_.nodes.size(), false);
    for (const std::uint32_t n : flattened_) is_flat[n] = true;
    // Exact keys first: they keep theirs whatever comes before them.
    for (std::uint32_t i = 0; i < s_.nodes.size(); ++i) {
      for (const std::uint32_t c : s_.nodes[i].children) {
        if (!is_flat[c] && s_.nodes[c].key.kind == StructureKey::Kind::str) {
          used.insert(fmt::format("{}:{}", i, s_.nodes[c].key.text));
        }
      }
    }
    for (const std::uint32_t n : flattened_) {
      const std::uint32_t in = parent[n];
      std::string& text = s_.nodes[n].key.text;
      std::string key = text;
      for (std::uint64_t k = 2; used.contains(fmt::format("{}:{}", in, key)); ++k) {
        key = fmt::format("{}%#{}", text, k);
        if (own.contains(fmt::format("{}:{}", in, key))) key = text;
      }
      used.insert(fmt::format("{}:{}", in, key));
      if (key != text) {
        s_.renamed.emplace_back(model_.entries[selection_.entries[s_.nodes[n].selected]].key, key);
        text = std::move(key);
      }
    }
  }

  const Model& model_;
  const Selection& selection_;
  const std::uint64_t max_padding_;
  std::uint64_t padding_ = 0;
  ContainerKind root_kind_ = ContainerKind::ordered_dict;
  Structure s_;
  TextMap<std::uint32_t> slots_;  // "<container>:<identity>" -> the node there
  // Model::container_states by "<key path>\n<containers>".
  TextMap<std::shared_ptr<const PlainValue>> states_;
  std::vector<std::uint32_t> flattened_;  // entry nodes under flattened keys, in order
  std::vector<std::pair<std::uint32_t, const Entry*>> owners_;  // node -> first entry there
};

void write_key(pickle::Writer& w, const StructureKey& k) {
  switch (k.kind) {
    case StructureKey::Kind::str:
      w.string(k.text);
      return;
    case StructureKey::Kind::integer:
      w.integer(k.number);
      return;
    case StructureKey::Kind::boolean:
      w.boolean(k.number != 0);
      return;
    case StructureKey::Kind::none:
      w.none();
      return;
    case StructureKey::Kind::real:
      w.floating(k.real);
      return;
    case StructureKey::Kind::bytes:
      w.bytes(k.text);
      return;
  }
}

bool is_dict(ContainerKind kind) { return !is_sequence(kind); }

}  // namespace

Structure nested_structure(const Model& model, const Selection& selection) {
  return Builder(model, selection).run();
}

Structure flat_structure(const Selection& selection) {
  Structure s;
  Node root;
  root.kind = ContainerKind::ordered_dict;
  s.nodes.push_back(std::move(root));
  for (std::size_t i = 0; i < selection.entries.size(); ++i) {
    Node n;
    n.is_entry = true;
    n.selected = i;
    n.key.text = selection.keys[i];
    s.nodes.push_back(std::move(n));
    s.nodes[0].children.push_back(static_cast<std::uint32_t>(s.nodes.size() - 1));
  }
  return s;
}

void write_structure(pickle::Writer& w, const Structure& s,
                     const std::function<void(std::size_t selected)>& write_entry) {
  using pickle::Batches;
  struct Frame {
    std::uint32_t node;
    std::optional<Batches> batches;  // none for a tuple
    std::uint64_t next = 0;          // the next item: a child's index, or a position
    std::size_t cursor = 0;          // lists and tuples: the next child not yet written
  };
  std::vector<Frame> stack;

  // Writes what comes before a container's items and pushes its frame.
  auto open = [&](std::uint32_t id) {
    const Node& n = s.nodes[id];
    Frame f{id, std::nullopt};
    switch (n.kind) {
      case ContainerKind::dict:
        w.begin_dict();
        f.batches.emplace(Batches::Style::setitems, n.children.size());
        break;
      case ContainerKind::ordered_dict:
      case ContainerKind::object:  // an object's stand-in
        w.begin_ordered_dict();
        f.batches.emplace(Batches::Style::iterated_setitems, n.children.size());
        break;
      case ContainerKind::list:
        w.begin_list();
        f.batches.emplace(Batches::Style::appends, n.length);
        break;
      case ContainerKind::tuple:
        w.begin_tuple(n.length);
        break;
      case ContainerKind::set:
      case ContainerKind::frozenset:
        w.begin_set(n.kind == ContainerKind::frozenset);
        f.batches.emplace(Batches::Style::appends, n.children.size());
        break;
    }
    stack.push_back(std::move(f));
  };
  // The item at or after the top frame's cursor is written; after a container, when it closes.
  auto item_done = [&] {
    if (!stack.empty() && stack.back().batches) stack.back().batches->after_item(w);
  };

  if (s.nodes.empty()) return;
  if (s.nodes[0].is_entry) {
    write_entry(s.nodes[0].selected);
    return;
  }
  open(0);
  while (!stack.empty()) {
    Frame& top = stack.back();
    const Node& n = s.nodes[top.node];
    const bool by_position = n.kind == ContainerKind::list || n.kind == ContainerKind::tuple;
    const std::uint64_t count = by_position ? n.length : n.children.size();
    if (top.next == count) {
      if (top.batches) top.batches->finish(w);
      if (n.state && n.kind == ContainerKind::ordered_dict) {
        pickle::write_value(w, *n.state);  // its attributes, after its items, as CPython does
        w.build();
      }
      if (n.kind == ContainerKind::tuple) w.end_tuple(n.length);
      if (n.kind == ContainerKind::set || n.kind == ContainerKind::frozenset) w.end_set();
      stack.pop_back();
      item_done();
      continue;
    }
    if (top.batches) top.batches->before_item(w);
    std::optional<std::uint32_t> child;
    if (by_position) {
      if (top.cursor < n.children.size() && s.nodes[n.children[top.cursor]].position == top.next) {
        child = n.children[top.cursor++];
      }
    } else {
      child = n.children[top.next];
    }
    ++top.next;
    if (!child) {
      w.none();  // a position no entry is at
      item_done();
      continue;
    }
    const Node& c = s.nodes[*child];
    if (is_dict(n.kind)) write_key(w, c.key);
    if (c.is_entry) {
      write_entry(c.selected);
      item_done();
    } else {
      open(*child);  // `top` is not used after: the stack may move
    }
  }
}

}  // namespace ckptfs
