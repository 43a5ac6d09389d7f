// SPDX-License-Identifier: MIT
// A pickle graph made by a reader instead of by running a pickle: the containers a format nests
// itself (a PyTorch DCP checkpoint's state dict, from its planner_data), with leaves of its own
// and whole graphs of other pickles grafted in. The result is a Graph like any other, which the
// flattener walks as it walks torch.save's.
#pragma once

#include <ckptfs/format/pickle/pickle_machine.hpp>

#include <cstdint>
#include <string>

namespace ckptfs::pickle {

class GraphBuilder {
 public:
  // Every call throws Error(bad_checkpoint) past `max_nodes` nodes.
  explicit GraphBuilder(std::uint64_t max_nodes = Limits{}.max_nodes) : max_nodes_(max_nodes) {}

  NodeId none();  // a new node each call: a leaf the caller may give a meaning (a tensor)
  NodeId integer(std::int64_t value);
  NodeId string(std::string text);
  NodeId dict();  // empty
  NodeId list();  // empty

  // Appends (key, value) to a dict: the caller keeps keys distinct.
  void dict_append(NodeId dict, NodeId key, NodeId value);
  // Replaces the value of the dict's item `item` (an index into its items).
  void dict_replace(NodeId dict, std::size_t item, NodeId value);
  // Appends to a list; replaces its item `index` (< its size).
  void list_append(NodeId list, NodeId value);
  void list_replace(NodeId list, std::size_t index, NodeId value);
  std::size_t list_size(NodeId list) const;

  // Copies every node of `other` here; node i of `other` is node i + the returned offset.
  NodeId graft(const Graph& other);

  const Graph& graph() const noexcept { return graph_; }
  // The graph, with `root` as its root.
  Graph finish(NodeId root) &&;

 private:
  NodeId add_node(Kind kind, std::size_t index);
  std::uint64_t max_nodes_;
  Graph graph_;
};

}  // namespace ckptfs::pickle
