// SPDX-License-Identifier: MIT
// flatten(): an iterative walk of the pickle graph into keyed tensor and value entries.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/pickle/flatten.hpp>
#include <ckptfs/format/pickle/read_plain_value.hpp>
#include <ckptfs/format/pickle/value_json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>

namespace ckptfs {
namespace {

using pickle::Graph;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;

// One child the walk may descend into, and how its key part came about. Small, because a walk
// holds the children of every node on its path (two million, for a hostile nesting).
struct Child {
  enum class Part : std::uint8_t {
    key,        // a Python key of a dict (or of an object's state or items): `key` is its node
    index,      // a position in a list, tuple or set: `index`
    synthetic,  // a part ckptfs names (an object's "__state__", a sparse tensor's "indices")
  };
  Part part = Part::key;
  std::uint8_t namespace_id = 0;  // which of an object's dicts a key belongs to
  NodeId key = no_node;
  NodeId node = no_node;
  std::uint32_t index = 0;     // fits: a list has fewer items than the graph has nodes
  const char* name = nullptr;  // synthetic parts: a static or interpretation-owned string
};
using Children = std::vector<Child>;

class Flattener {
 public:
  Flattener(const Graph& g, const Interpretation& in, const ReadLimits& limits,
            const FlattenOptions& options)
      : g_(g),
        in_(in),
        limits_(limits),
        plan_(options.plan),
        tensors_only_(options.tensors_only),
        root_part_(options.root_part),
        allowed_bytes_(std::max<std::uint64_t>(limits.max_flattened_bytes, 64 * g.size())),
        value_nodes_left_(
            std::min<std::uint64_t>(limits.max_plain_value_nodes, g.size() + plain_value_slack)) {}

  Flattened run() {
    Flattened out;
    NodeId root = resolve(g_.root());
    if (root == no_node) return out;
    mark_nodes_holding_tensors();
    if (is_tensor(root)) {
      emit_tensor(synthetic(root_part_.empty() ? "tensor" : root_part_.c_str(), root));
      out.root = std::nullopt;
    } else if (tensors_only_ && !has_tensor_[root]) {
      // nothing to list
    } else if (Kind k = g_.kind(root); ((k == Kind::dict || k == Kind::list || k == Kind::tuple) &&
                                        !limits_.root_is_one_entry) ||
                                       has_tensor_[root]) {
      out.root = container_of(root);
      walk(root);
    } else {
      emit_value(synthetic(root_part_.empty() ? "value" : root_part_.c_str(), root));
      out.root = std::nullopt;
    }
    // Below a part ckptfs names, the checkpoint's root is one of its containers.
    if (!root_part_.empty()) out.root = ContainerKind::object;
    add_key_paths_of_shared_texts();
    out.entries = std::move(entries_);
    out.container_states = std::move(states_);
    return out;
  }

 private:
  bool is_tensor(NodeId id) const { return in_.tensor_of[id] >= 0; }

  // The node that `id` stands for (itself unless the plan makes it an alias).
  NodeId resolve(NodeId id) const {
    if (plan_ == nullptr || id == no_node || plan_->aliases.empty()) return id;
    auto it = plan_->aliases.find(id);
    return it == plan_->aliases.end() ? id : it->second;
  }

  static Child synthetic(const char* name, NodeId node) {
    return {Child::Part::synthetic, 0, no_node, node, 0, name};
  }
  static Child keyed(NodeId key, NodeId node, std::uint8_t namespace_id) {
    return {Child::Part::key, namespace_id, key, node, 0, nullptr};
  }
  static Child indexed(std::size_t index, NodeId node) {
    return {Child::Part::index, 0, no_node, node, static_cast<std::uint32_t>(index), nullptr};
  }

  // The child's part of a flattened key.
  std::string label(const Child& c) const {
    switch (c.part) {
      case Child::Part::key:
        return key_text(g_, c.key);
      case Child::Part::index:
        return std::to_string(c.index);
      case Child::Part::synthetic:
        return c.name;
    }
    return {};
  }

  // What node `id` is as a container of the children the walk finds in it: what torch.load
  // builds for it, or `object` for everything pack does not build (objects, the parts of a
  // composite, children a plan gives).
  ContainerKind container_of(NodeId id) const {
    id = resolve(id);
    if (in_.composites.contains(id)) return ContainerKind::object;
    if (plan_ != nullptr && plan_->children.contains(id)) return ContainerKind::object;
    switch (g_.kind(id)) {
      case Kind::dict:
        return g_.ordered(id) ? ContainerKind::ordered_dict : ContainerKind::dict;
      case Kind::list:
        return ContainerKind::list;
      case Kind::tuple:
        return ContainerKind::tuple;
      case Kind::set:
        return ContainerKind::set;
      case Kind::frozenset:
        return ContainerKind::frozenset;
      default:
        return ContainerKind::object;
    }
  }

  // ---- children -------------------------------------------------------------------------

  void add_dict(Children* labeled, std::vector<NodeId>* plain, NodeId dict, std::uint8_t ns) {
    for (const auto& [key, value] : g_.dict_items(dict)) {
      if (labeled) labeled->push_back(keyed(key, resolve(value), ns));
      if (plain) plain->push_back(resolve(value));
    }
  }

  void add_object_parts(const pickle::Object& obj, Children* labeled, std::vector<NodeId>* plain) {
    auto add = [&](const char* label, NodeId child) {
      if (child == no_node) return;
      child = resolve(child);
      if (labeled) labeled->push_back(synthetic(label, child));
      if (plain) plain->push_back(child);
    };
    if (obj.state != no_node) {
      Kind sk = g_.kind(obj.state);
      const auto* pair = sk == Kind::tuple ? &g_.items(obj.state) : nullptr;
      if (sk == Kind::dict) {
        add_dict(labeled, plain, obj.state, 1);
      } else if (pair && pair->size() == 2 &&
                 (g_.kind((*pair)[0]) == Kind::dict || g_.kind((*pair)[0]) == Kind::none) &&
                 (g_.kind((*pair)[1]) == Kind::dict || g_.kind((*pair)[1]) == Kind::none)) {
        // (__dict__, __slots__ state), as pickle writes for classes with slots
        for (std::uint8_t part = 0; part < 2; ++part) {
          NodeId d = (*pair)[part];
          if (g_.kind(d) == Kind::dict)
            add_dict(labeled, plain, d, static_cast<std::uint8_t>(2 + part));
        }
      } else {
        add("__state__", obj.state);
      }
    }
    for (const auto& [key, value] : obj.dict_items) {
      if (labeled) labeled->push_back(keyed(key, resolve(value), 4));
      if (plain) plain->push_back(resolve(value));
    }
    for (std::size_t i = 0; i < obj.list_items.size(); ++i) {
      if (labeled) labeled->push_back(indexed(i, resolve(obj.list_items[i])));
      if (plain) plain->push_back(resolve(obj.list_items[i]));
    }
    // Construction arguments are shown only when they hold tensors; otherwise they are noise
    // (an empty tuple for every NEWOBJ).
    for (auto [label, part] : {std::pair{"__args__", obj.args}, {"__kwargs__", obj.kwargs}}) {
      if (part != no_node && (plain || has_tensor_[part])) add(label, part);
    }
  }

  // The children the walk descends into; `labeled` gets their key parts.
  void children(NodeId id, Children* labeled, std::vector<NodeId>* plain) {
    id = resolve(id);
    if (is_tensor(id)) return;
    if (auto it = in_.composites.find(id); it != in_.composites.end()) {
      for (const auto& [name, child] : it->second) {
        if (labeled) labeled->push_back(synthetic(name.c_str(), resolve(child)));
        if (plain) plain->push_back(resolve(child));
      }
      return;
    }
    if (plan_ != nullptr) {
      if (auto it = plan_->children.find(id); it != plan_->children.end()) {
        for (const auto& [key, value] : it->second) {
          if (labeled) labeled->push_back(keyed(key, resolve(value), 1));
          if (plain) plain->push_back(resolve(value));
        }
        return;
      }
    }
    switch (g_.kind(id)) {
      case Kind::dict:
        add_dict(labeled, plain, id, 0);
        break;
      case Kind::tuple:
      case Kind::list:
      case Kind::set:
      case Kind::frozenset: {
        const auto& items = g_.items(id);
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (labeled) labeled->push_back(indexed(i, resolve(items[i])));
          if (plain) plain->push_back(resolve(items[i]));
        }
        break;
      }
      case Kind::object:
        add_object_parts(g_.object(id), labeled, plain);
        break;
      default:
        break;
    }
  }

  // has_tensor_[n]: a tensor is reachable from n. Found backwards from the tensors over the
  // reversed child edges, which is linear and indifferent to cycles and shared nodes.
  void mark_nodes_holding_tensors() {
    const std::size_t n = g_.size();
    std::vector<std::uint32_t> parent_count(n + 1, 0);
    std::vector<NodeId> kids;
    for (NodeId id = 0; id < n; ++id) {
      kids.clear();
      children(id, nullptr, &kids);
      for (NodeId k : kids) ++parent_count[k + 1];
    }
    for (std::size_t i = 1; i <= n; ++i) parent_count[i] += parent_count[i - 1];
    std::vector<NodeId> parents(parent_count[n]);
    std::vector<std::uint32_t> fill(parent_count.begin(), parent_count.end() - 1);
    for (NodeId id = 0; id < n; ++id) {
      kids.clear();
      children(id, nullptr, &kids);
      for (NodeId k : kids) parents[fill[k]++] = id;
    }
    has_tensor_.assign(n, false);
    std::vector<NodeId> queue;
    for (NodeId id = 0; id < n; ++id) {
      if (is_tensor(id)) {
        has_tensor_[id] = true;
        queue.push_back(id);
      }
    }
    while (!queue.empty()) {
      NodeId id = queue.back();
      queue.pop_back();
      for (std::uint32_t i = parent_count[id]; i < parent_count[id + 1]; ++i) {
        NodeId p = parents[i];
        if (!has_tensor_[p]) {
          has_tensor_[p] = true;
          queue.push_back(p);
        }
      }
    }
  }

  // Python dict semantics: a key equal to an earlier one of the same dict keeps the first
  // position and takes the last value. Equal as Python compares keys (1 == 1.0 == True, never
  // 1 == "1" nor b"x" == "x"), not as their texts: keys that only look alike all stay.
  void merge_equal_keys(Children& kids) {
    if (kids.size() < 2) return;
    TextMap<std::size_t> first;
    std::vector<bool> repeated(kids.size(), false);
    bool any = false;
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (kids[i].part != Child::Part::key) continue;
      std::string identity = key_identity(g_, kids[i].key);
      if (identity.empty()) continue;  // compares by object identity: never equal to another
      identity.insert(identity.begin(), static_cast<char>(kids[i].namespace_id));
      auto [it, inserted] = first.emplace(std::move(identity), i);
      if (!inserted) {
        kids[it->second].node = kids[i].node;
        repeated[i] = any = true;
      }
    }
    if (!any) return;
    Children kept;
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (!repeated[i]) kept.push_back(kids[i]);
    }
    kids = std::move(kept);
  }

  // ---- the walk -------------------------------------------------------------------------

  // A node being walked. Its children are kids_[first_kid, end_kid): one stack of children
  // shared by all frames, so that a frame costs no allocation of its own (a hostile pickle may
  // nest two million levels deep).
  struct Frame {
    NodeId node;
    std::uint32_t first_kid;  // kids_ has fewer items than the graph has edges: 32 bits
    std::uint32_t end_kid;
    std::uint32_t next;      // the next child to look at, in [first_kid, end_kid]
    std::size_t key_length;  // path_ holds this node's key in its first key_length bytes
    ContainerKind kind;      // container_of(node)
  };

  void push_frame(NodeId id) {
    keep_state(id);
    Children kids;
    children(id, &kids, nullptr);
    if (g_.kind(id) == Kind::dict || g_.kind(id) == Kind::object) merge_equal_keys(kids);
    const auto first = static_cast<std::uint32_t>(kids_.size());
    kids_.insert(kids_.end(), kids.begin(), kids.end());
    on_path_[id] = true;
    stack_.push_back({id, first, static_cast<std::uint32_t>(kids_.size()), first, path_.size(),
                      container_of(id)});
  }

  void walk(NodeId root) {
    root_kind_ = container_of(root);
    on_path_.assign(g_.size(), false);
    path_ = root_part_;  // the root's key: its children's keys start with it
    push_frame(root);
    while (!stack_.empty()) {
      Frame& top = stack_.back();
      if (top.next == top.end_kid) {
        on_path_[top.node] = false;
        kids_.resize(top.first_kid);
        stack_.pop_back();
        if (!stack_.empty()) path_.resize(stack_.back().key_length);
        continue;
      }
      const Child& child = kids_[top.next++];
      // The key of `child`: one path buffer shared by the whole walk, so that a key costs its
      // length once however deep it is; its length is bounded by the budget of all keys.
      path_.resize(top.key_length);
      if (stack_.size() > 1 || !root_part_.empty()) path_ += '.';
      path_ += label(child);
      if (path_.size() > allowed_bytes_) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("a flattened key is longer than {} bytes, the limit on all keys "
                                "and values together",
                                allowed_bytes_));
      }
      const NodeId node = child.node;  // push_frame() may move kids_ and stack_
      if (is_tensor(node)) {
        emit_tensor(child);
      } else if (has_tensor_[node]) {
        // A container inside itself is walked once per path: the repeat is skipped.
        if (!on_path_[node]) push_frame(node);
      } else if (!tensors_only_) {
        emit_value(child);
      }
    }
  }

  // The BUILD state of an OrderedDict about to be walked (a state_dict()'s {"_metadata":
  // ...}), when it is plain data, with the path that leads to it: what pack writes back.
  void keep_state(NodeId id) {
    if (!root_part_.empty() || container_of(id) != ContainerKind::ordered_dict) return;
    const NodeId state = g_.build_state(id);
    if (state == no_node || g_.kind(state) != Kind::dict) return;
    auto value = plain_value(g_, state, value_nodes_left_);
    if (!value) return;
    ContainerState s;
    s.key_path = "[";
    bool all_str = true;
    // The frames' current children lead here: every frame is the container of the next.
    for (std::size_t i = 0; i < stack_.size(); ++i) {
      if (i > 0) s.key_path += ',';
      s.key_path += part_json(kids_[stack_[i].next - 1], all_str);
      s.containers += container_code(stack_[i].kind);
    }
    s.key_path += ']';
    s.containers += container_code(ContainerKind::ordered_dict);
    charge(s.key_path.size() + s.containers.size());
    s.state = std::make_shared<const PlainValue>(std::move(*value));
    states_.push_back(std::move(s));
  }

  // ---- entries --------------------------------------------------------------------------

  // A child's part of a key path, as JSON; `all_str` becomes false unless it is a str key.
  std::string part_json(const Child& c, bool& all_str) const {
    if (c.part == Child::Part::key) {
      all_str = all_str && g_.kind(c.key) == Kind::string;
      return key_json(g_, c.key);
    }
    all_str = false;
    if (c.part == Child::Part::index) return std::to_string(c.index);
    std::string out = "{\"__part__\":";
    append_json_string(out, c.name);
    out += '}';
    return out;
  }

  // The key path of the entry being emitted, as compact JSON: each frame's current child, then
  // `leaf`; `containers` gets the kind of the container of each part (Entry::containers).
  // `all_str`: whether it is one part, a str key (then the text alone may say it).
  std::string key_path_json(const Child* leaf, bool& all_str, std::string& containers) const {
    std::string out = "[";
    all_str = true;
    containers.clear();
    if (!root_part_.empty()) {
      all_str = false;
      out += "{\"__part__\":";
      append_json_string(out, root_part_);
      out += '}';
      containers += container_code(ContainerKind::object);
    }
    auto add = [&](const Child& c, ContainerKind in) {
      if (out.size() > 1) out += ',';
      containers += container_code(in);
      out += part_json(c, all_str);
    };
    // Each frame but the top one is below the child of the frame before it that led there. A
    // root entry (no frame) has no part of its own beyond the root part.
    for (std::size_t i = 0; i + 1 < stack_.size(); ++i) {
      add(kids_[stack_[i].next - 1], stack_[i].kind);
    }
    if (leaf && !stack_.empty()) add(*leaf, stack_.back().kind);
    all_str = all_str && containers.size() == 1;
    out += ']';
    return out;
  }

  Entry& new_entry(const Child& leaf, Entry::Kind kind, std::string key) {
    if (entries_.size() >= limits_.max_entries) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("more than {} entries", limits_.max_entries));
    }
    if (entries_.size() >= std::max<std::uint64_t>(limits_.min_entries_per_graph, g_.size())) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("more than {} entries from a pickle of {} objects: objects shared "
                              "along many paths multiply them",
                              entries_.size(), g_.size()));
    }
    // As JSON, the form index.json and its key path give it (a control character takes six
    // bytes): charged before the key path is written.
    charge(json_escaped_size(key));
    bool all_str = true;
    std::string containers;
    std::string path = key_path_json(stack_.empty() ? nullptr : &leaf, all_str, containers);
    Entry& e = entries_.emplace_back();
    e.key = std::move(key);
    e.kind = kind;
    // The key path is kept when the text does not say it (a part that is not a str, or more or
    // fewer parts than one); for the others it is kept aside until the end, in case another
    // entry has the same text.
    if (!all_str) {
      charge(path.size() + containers.size());
      e.key_path = std::move(path);
      e.containers = std::move(containers);
    } else {
      pending_paths_.emplace_back(entries_.size() - 1, std::move(path));
    }
    return e;
  }

  void emit_tensor(const Child& leaf) {
    std::string key = stack_.empty() ? label(leaf) : path_;
    const auto tensor = static_cast<std::size_t>(in_.tensor_of[leaf.node]);
    new_entry(leaf, Entry::Kind::tensor, key).tensor = tensor;
    // A per-channel quantized tensor's scales and zero points are tensors too: entries of their
    // own beside it, so that its data can be dequantized from the mount alone.
    if (const auto& q = in_.tensors[tensor].quantization) {
      for (auto [name, part] : {std::pair{"q_per_channel_scales", q->scales},
                                {"q_per_channel_zero_points", q->zero_points}}) {
        if (part) emit_part(leaf, key + "." + name, name, *part);
      }
    }
  }

  // An entry that ckptfs adds below tensor `leaf`, named `name`: its key path is the tensor's
  // then {"__part__": name}, always kept (a part is not a str key).
  void emit_part(const Child& leaf, std::string key, std::string_view name, std::size_t tensor) {
    Entry& e = new_entry(leaf, Entry::Kind::tensor, std::move(key));
    e.tensor = tensor;
    if (e.key_path.empty()) {
      e.key_path = std::move(pending_paths_.back().second);
      e.containers = container_code(stack_.empty() ? ContainerKind::object : stack_.back().kind);
      pending_paths_.pop_back();
    }
    e.key_path.pop_back();  // the closing ']'
    if (e.key_path.size() > 1) e.key_path += ',';
    e.key_path += "{\"__part__\":";
    append_json_string(e.key_path, name);
    e.key_path += "}]";
    e.containers += container_code(ContainerKind::object);  // the tensor holds its parts
    charge(e.key_path.size() + e.containers.size());
  }

  void emit_value(const Child& leaf) {
    std::string key = stack_.empty() ? label(leaf) : path_;
    Entry& e = new_entry(leaf, Entry::Kind::value, std::move(key));
    e.value_json = value_json(g_, leaf.node, limits_.max_value_json);
    charge(e.value_json.size());
    // The value itself, for pack and the RFC layout, when it is plain data.
    if (auto value = plain_value(g_, leaf.node, value_nodes_left_)) {
      e.value = std::make_shared<const PlainValue>(std::move(*value));
    }
  }

  // Entries whose text another entry has too get their key path, so that index.json says which
  // Python key each came from ("0" the int, "0" the str; "a.b" one key, "a" then "b").
  void add_key_paths_of_shared_texts() {
    TextViewMap<std::uint32_t> count;  // views into entries_' keys
    count.reserve(entries_.size());
    for (const Entry& e : entries_) ++count[e.key];
    for (auto& [index, path] : pending_paths_) {
      Entry& e = entries_[index];
      if (count[e.key] > 1) {
        // One part, a str key of the root: the root's container.
        e.containers = container_code(root_kind_);
        charge(path.size() + e.containers.size());
        e.key_path = std::move(path);
      }
    }
    pending_paths_.clear();
  }

  // Counts the bytes of keys and values against limits_.max_flattened_bytes, or 64 bytes per
  // pickle object when that is more: a checkpoint of a million tensors has long keys legitimately,
  // and its pickle grows with them, while a hostile DAG multiplies them without growing.
  void charge(std::size_t bytes) {
    flattened_bytes_ += bytes;
    if (flattened_bytes_ > allowed_bytes_) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("the keys and values of its {} entries take more than {} bytes",
                              entries_.size(), allowed_bytes_));
    }
  }

  const Graph& g_;
  const Interpretation& in_;
  const ReadLimits& limits_;
  const WalkPlan* plan_;
  const bool tensors_only_;
  const std::string root_part_;
  const std::uint64_t allowed_bytes_;
  // Nodes the exact values may still take: the pickle's own count (values whose parts are shared
  // are built once per path) and some slack, at most limits.max_plain_value_nodes.
  static constexpr std::uint64_t plain_value_slack = 65'536;
  std::uint64_t value_nodes_left_;
  std::vector<bool> has_tensor_;
  std::vector<Frame> stack_;
  Children kids_;              // the children of every frame of stack_, in frame order
  std::string path_;           // the key of the current node, then of the child being looked at
  std::vector<bool> on_path_;  // the nodes of stack_
  std::vector<Entry> entries_;
  std::vector<std::pair<std::size_t, std::string>> pending_paths_;  // str-only key paths
  ContainerKind root_kind_ = ContainerKind::dict;                   // of the root walked
  std::vector<ContainerState> states_;
  std::uint64_t flattened_bytes_ = 0;
};

}  // namespace

Flattened flatten(const pickle::Graph& graph, const Interpretation& interpretation,
                  const ReadLimits& limits, const FlattenOptions& options) {
  return Flattener(graph, interpretation, limits, options).run();
}

}  // namespace ckptfs
