// SPDX-License-Identifier: MIT
// GraphBuilder: nodes added one at a time, and whole graphs grafted with their ids shifted.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/pickle/graph_builder.hpp>

#include <fmt/format.h>

#include <stdexcept>

namespace ckptfs::pickle {
namespace {

NodeId shifted(NodeId id, NodeId by) { return id == no_node ? no_node : id + by; }

}  // namespace

NodeId GraphBuilder::add_node(Kind kind, std::size_t index) {
  if (graph_.nodes_.size() >= max_nodes_) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("more than {} pickle nodes in all (the node limit)", max_nodes_));
  }
  graph_.nodes_.push_back({kind, static_cast<std::uint32_t>(index)});
  return static_cast<NodeId>(graph_.nodes_.size() - 1);
}

NodeId GraphBuilder::none() { return add_node(Kind::none, 0); }

NodeId GraphBuilder::integer(std::int64_t value) {
  graph_.integers_.push_back(value);
  return add_node(Kind::integer, graph_.integers_.size() - 1);
}

NodeId GraphBuilder::string(std::string text) {
  graph_.texts_.push_back(std::move(text));
  return add_node(Kind::string, graph_.texts_.size() - 1);
}

NodeId GraphBuilder::dict() {
  graph_.dicts_.emplace_back();
  graph_.dict_states_.push_back(no_node);
  graph_.dict_ordered_.push_back(false);  // a plain dict (Graph::ordered())
  return add_node(Kind::dict, graph_.dicts_.size() - 1);
}

NodeId GraphBuilder::list() {
  graph_.sequences_.emplace_back();
  return add_node(Kind::list, graph_.sequences_.size() - 1);
}

void GraphBuilder::dict_append(NodeId dict, NodeId key, NodeId value) {
  graph_.dicts_.at(graph_.nodes_.at(dict).index).emplace_back(key, value);
}

void GraphBuilder::dict_replace(NodeId dict, std::size_t item, NodeId value) {
  graph_.dicts_.at(graph_.nodes_.at(dict).index).at(item).second = value;
}

void GraphBuilder::list_append(NodeId list, NodeId value) {
  graph_.sequences_.at(graph_.nodes_.at(list).index).push_back(value);
}

void GraphBuilder::list_replace(NodeId list, std::size_t index, NodeId value) {
  graph_.sequences_.at(graph_.nodes_.at(list).index).at(index) = value;
}

std::size_t GraphBuilder::list_size(NodeId list) const {
  return graph_.sequences_.at(graph_.nodes_.at(list).index).size();
}

NodeId GraphBuilder::graft(const Graph& other) {
  if (other.nodes_.size() >
      max_nodes_ - std::min<std::uint64_t>(max_nodes_, graph_.nodes_.size())) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("more than {} pickle nodes in all (the node limit)", max_nodes_));
  }
  const auto by = static_cast<NodeId>(graph_.nodes_.size());
  Graph& g = graph_;
  // Where each table of `other` starts in ours.
  const std::size_t integers = g.integers_.size(), floats = g.floats_.size(),
                    texts = g.texts_.size(), sequences = g.sequences_.size(),
                    dicts = g.dicts_.size(), globals = g.globals_.size(),
                    objects = g.objects_.size(), pids = g.persistent_ids_.size();
  g.integers_.insert(g.integers_.end(), other.integers_.begin(), other.integers_.end());
  g.floats_.insert(g.floats_.end(), other.floats_.begin(), other.floats_.end());
  g.texts_.insert(g.texts_.end(), other.texts_.begin(), other.texts_.end());
  g.globals_.insert(g.globals_.end(), other.globals_.begin(), other.globals_.end());
  for (const auto& items : other.sequences_) {
    auto& copy = g.sequences_.emplace_back(items);
    for (NodeId& id : copy) id = shifted(id, by);
  }
  for (const auto& items : other.dicts_) {
    auto& copy = g.dicts_.emplace_back(items);
    for (auto& [key, value] : copy) key = shifted(key, by), value = shifted(value, by);
  }
  for (const NodeId state : other.dict_states_) g.dict_states_.push_back(shifted(state, by));
  g.dict_ordered_.insert(g.dict_ordered_.end(), other.dict_ordered_.begin(),
                         other.dict_ordered_.end());
  for (const Object& o : other.objects_) {
    Object& copy = g.objects_.emplace_back(o);
    copy.callable = shifted(copy.callable, by);
    copy.args = shifted(copy.args, by);
    copy.kwargs = shifted(copy.kwargs, by);
    copy.state = shifted(copy.state, by);
    for (NodeId& id : copy.list_items) id = shifted(id, by);
    for (auto& [key, value] : copy.dict_items) key = shifted(key, by), value = shifted(value, by);
  }
  for (const NodeId pid : other.persistent_ids_) g.persistent_ids_.push_back(shifted(pid, by));
  for (const Graph::Node& n : other.nodes_) {
    std::size_t base = 0;
    switch (n.kind) {
      case Kind::none:
        break;
      case Kind::boolean:
      case Kind::integer:
        base = integers;
        break;
      case Kind::floating:
        base = floats;
        break;
      case Kind::big_integer:
      case Kind::string:
      case Kind::bytes:
      case Kind::bytearray:
        base = texts;
        break;
      case Kind::tuple:
      case Kind::list:
      case Kind::set:
      case Kind::frozenset:
        base = sequences;
        break;
      case Kind::dict:
        base = dicts;
        break;
      case Kind::global:
        base = globals;
        break;
      case Kind::object:
        base = objects;
        break;
      case Kind::persistent_id:
        base = pids;
        break;
    }
    g.nodes_.push_back({n.kind, static_cast<std::uint32_t>(base + n.index)});
  }
  return by;
}

Graph GraphBuilder::finish(NodeId root) && {
  if (root >= graph_.nodes_.size()) throw std::logic_error("GraphBuilder::finish: no such root");
  graph_.root_ = root;
  return std::move(graph_);
}

}  // namespace ckptfs::pickle
