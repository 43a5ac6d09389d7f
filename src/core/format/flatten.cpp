// SPDX-License-Identifier: MIT
// flatten(): an iterative walk of the pickle graph into keyed tensor and value entries.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/flatten.hpp>
#include <ckptfs/format/value_json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace ckptfs {
namespace {

using pickle::Graph;
using pickle::Kind;
using pickle::NodeId;
using pickle::no_node;

using Children = std::vector<std::pair<std::string, NodeId>>;

class Flattener {
 public:
  Flattener(const Graph& g, const Interpretation& in, const ReadLimits& limits)
      : g_(g), in_(in), limits_(limits) {}

  std::vector<Entry> run() {
    NodeId root = g_.root();
    if (root == no_node) return {};
    mark_nodes_holding_tensors();
    if (is_tensor(root)) {
      emit_tensor("tensor", root);
    } else if (Kind k = g_.kind(root);
               k == Kind::dict || k == Kind::list || k == Kind::tuple || has_tensor_[root]) {
      walk(root);
    } else {
      emit_value("value", root);
    }
    return std::move(entries_);
  }

 private:
  bool is_tensor(NodeId id) const { return in_.tensor_of[id] >= 0; }

  void add_object_parts(const pickle::Object& obj, Children* labeled, std::vector<NodeId>* plain) {
    auto add = [&](std::string label, NodeId child) {
      if (child == no_node) return;
      if (labeled) labeled->emplace_back(std::move(label), child);
      if (plain) plain->push_back(child);
    };
    auto add_dict = [&](NodeId dict) {
      for (const auto& [key, value] : g_.dict_items(dict)) {
        add(labeled ? key_text(g_, key) : std::string(), value);
      }
    };
    if (obj.state != no_node) {
      Kind sk = g_.kind(obj.state);
      const auto* pair = sk == Kind::tuple ? &g_.items(obj.state) : nullptr;
      if (sk == Kind::dict) {
        add_dict(obj.state);
      } else if (pair && pair->size() == 2 &&
                 (g_.kind((*pair)[0]) == Kind::dict || g_.kind((*pair)[0]) == Kind::none) &&
                 (g_.kind((*pair)[1]) == Kind::dict || g_.kind((*pair)[1]) == Kind::none)) {
        // (__dict__, __slots__ state), as pickle writes for classes with slots
        for (NodeId part : *pair) {
          if (g_.kind(part) == Kind::dict) add_dict(part);
        }
      } else {
        add("__state__", obj.state);
      }
    }
    for (const auto& [key, value] : obj.dict_items) {
      add(labeled ? key_text(g_, key) : std::string(), value);
    }
    for (std::size_t i = 0; i < obj.list_items.size(); ++i) {
      add(labeled ? std::to_string(i) : std::string(), obj.list_items[i]);
    }
    // Construction arguments are shown only when they hold tensors; otherwise they are noise
    // (an empty tuple for every NEWOBJ).
    for (auto [label, part] : {std::pair{"__args__", obj.args}, {"__kwargs__", obj.kwargs}}) {
      if (part != no_node && (plain || has_tensor_[part])) add(label, part);
    }
  }

  // The children the walk descends into; `labeled` gets their key components.
  void children(NodeId id, Children* labeled, std::vector<NodeId>* plain) {
    if (is_tensor(id)) return;
    if (auto it = in_.composites.find(id); it != in_.composites.end()) {
      for (const auto& [name, child] : it->second) {
        if (labeled) labeled->emplace_back(name, child);
        if (plain) plain->push_back(child);
      }
      return;
    }
    switch (g_.kind(id)) {
      case Kind::dict:
        for (const auto& [key, value] : g_.dict_items(id)) {
          if (labeled) labeled->emplace_back(key_text(g_, key), value);
          if (plain) plain->push_back(value);
        }
        break;
      case Kind::tuple:
      case Kind::list:
      case Kind::set:
      case Kind::frozenset: {
        const auto& items = g_.items(id);
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (labeled) labeled->emplace_back(std::to_string(i), items[i]);
          if (plain) plain->push_back(items[i]);
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

  // Python dict semantics: a repeated key keeps its first position and takes the last value.
  static void merge_repeated_labels(Children& kids) {
    if (kids.size() < 2) return;
    std::unordered_map<std::string_view, std::size_t> first;  // views into `kids`, unchanged here
    std::vector<bool> repeated(kids.size(), false);
    bool any = false;
    for (std::size_t i = 0; i < kids.size(); ++i) {
      auto [it, inserted] = first.emplace(kids[i].first, i);
      if (!inserted) {
        kids[it->second].second = kids[i].second;
        repeated[i] = any = true;
      }
    }
    if (!any) return;
    Children kept;
    for (std::size_t i = 0; i < kids.size(); ++i) {
      if (!repeated[i]) kept.push_back(std::move(kids[i]));
    }
    kids = std::move(kept);
  }

  struct Frame {
    NodeId node;
    std::string prefix;  // the key of this node ("" for the root)
    Children kids;
    std::size_t next = 0;
  };

  void push_frame(NodeId id, std::string prefix) {
    Frame f{id, std::move(prefix), {}, 0};
    children(id, &f.kids, nullptr);
    if (g_.kind(id) == Kind::dict || g_.kind(id) == Kind::object) merge_repeated_labels(f.kids);
    on_path_.insert(id);
    stack_.push_back(std::move(f));
  }

  void walk(NodeId root) {
    push_frame(root, "");
    while (!stack_.empty()) {
      Frame& top = stack_.back();
      if (top.next == top.kids.size()) {
        on_path_.erase(top.node);
        stack_.pop_back();
        continue;
      }
      auto [label, child] = top.kids[top.next++];
      std::string key = top.prefix.empty() && stack_.size() == 1 ? label
                                                                 : top.prefix + "." + label;
      if (key.size() > limits_.max_key_bytes) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("nesting too deep: a flattened key is longer than {} bytes",
                                limits_.max_key_bytes));
      }
      if (is_tensor(child)) {
        emit_tensor(std::move(key), child);
      } else if (has_tensor_[child]) {
        // A container inside itself is walked once per path: the repeat is skipped.
        if (!on_path_.contains(child)) push_frame(child, std::move(key));
      } else {
        emit_value(std::move(key), child);
      }
    }
  }

  std::string unique_key(std::string key) {
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
    charge(key.size());
    if (keys_.insert(key).second) return key;
    for (std::size_t n = 2;; ++n) {
      std::string candidate = fmt::format("{}#{}", key, n);
      if (keys_.insert(candidate).second) return candidate;
    }
  }

  void emit_tensor(std::string key, NodeId id) {
    Entry e;
    e.key = unique_key(std::move(key));
    e.kind = Entry::Kind::tensor;
    e.tensor = static_cast<std::size_t>(in_.tensor_of[id]);
    entries_.push_back(std::move(e));
  }

  void emit_value(std::string key, NodeId id) {
    Entry e;
    e.key = unique_key(std::move(key));
    e.kind = Entry::Kind::value;
    e.value_json = value_json(g_, id, limits_.max_value_json);
    charge(e.value_json.size());
    entries_.push_back(std::move(e));
  }

  // Counts the bytes of keys and values against limits_.max_flattened_bytes, or 64 bytes per
  // pickle object when that is more: a checkpoint of a million tensors has long keys legitimately,
  // and its pickle grows with them, while a hostile DAG multiplies them without growing.
  void charge(std::size_t bytes) {
    flattened_bytes_ += bytes;
    const std::uint64_t allowed = std::max<std::uint64_t>(limits_.max_flattened_bytes, 64 * g_.size());
    if (flattened_bytes_ > allowed) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("the keys and values of its {} entries take more than {} bytes",
                              entries_.size(), allowed));
    }
  }

  const Graph& g_;
  const Interpretation& in_;
  const ReadLimits& limits_;
  std::vector<bool> has_tensor_;
  std::vector<Frame> stack_;
  std::unordered_set<NodeId> on_path_;
  std::unordered_set<std::string> keys_;
  std::vector<Entry> entries_;
  std::uint64_t flattened_bytes_ = 0;
};

}  // namespace

std::vector<Entry> flatten(const pickle::Graph& graph, const Interpretation& interpretation,
                           const ReadLimits& limits) {
  return Flattener(graph, interpretation, limits).run();
}

}  // namespace ckptfs
