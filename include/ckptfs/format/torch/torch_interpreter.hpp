// SPDX-License-Identifier: MIT
// Interprets the inert pickle graph the way torch.load would, without running anything: finds
// storage references (persistent ids) and the tensors that torch's _rebuild_* calls, Parameter
// and the legacy tensor classes would build from them.
#pragma once

#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/model/model.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckptfs {

// One persistent id ('storage', class, key, location, numel[, view]) of the pickle.
struct StorageRef {
  std::string key;
  std::optional<DType> dtype;  // the typed storage's dtype; nullopt for UntypedStorage (bytes)
  std::string class_name;      // "FloatStorage", "UntypedStorage", ...
  std::uint64_t declared_numel = 0;  // elements of `dtype` (bytes when untyped)
  // Legacy view metadata (view_key, offset, size): this storage is elements
  // [view_offset, view_offset + view_numel) of storage `key`.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> view;
  std::size_t element_size() const noexcept { return dtype ? info(*dtype).element_size : 1; }
};

// Named parts of a composite torch object (sparse and nested tensors): flattened as children.
using Composite = std::vector<std::pair<std::string, pickle::NodeId>>;

struct Interpretation {
  std::vector<StorageRef> storage_refs;
  // Tensors found; Tensor::storage holds an index into storage_refs (the checkpoint maps it to
  // a Storage), and `broken` is set when the rebuild call itself is malformed.
  std::vector<Tensor> tensors;
  std::vector<std::int32_t> tensor_of;  // per node: index into tensors, or -1
  std::unordered_map<pickle::NodeId, Composite> composites;
};

// One pass over the nodes in creation order: a call's arguments always exist before the call,
// so every nested rebuild (a Parameter around a tensor) is resolved without recursion.
Interpretation interpret(const pickle::Graph& graph, std::size_t max_dims);

}  // namespace ckptfs
