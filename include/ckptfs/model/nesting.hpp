// SPDX-License-Identifier: MIT
// The containers a checkpoint nests its entries in: what torch.load of it gives around each
// tensor and value (a dict, an OrderedDict, a list...), kept per entry beside its key path so
// that `ckptfs pack` can write the nesting back and a split directory copied out of a mount
// still says it (index.json and meta.json: "key_path" and "containers", docs/TREE.md).
//
//   {"model": OrderedDict(fc.weight=T), "optimizer": {"state": {0: {"exp_avg": T}}}}
//   model.fc.weight            key_path ["model", "fc.weight"]     containers "do"
//   optimizer.state.0.exp_avg  key_path ["optimizer", "state", 0, "exp_avg"]  containers "dddd"
#pragma once

#include <ckptfs/model/plain_value.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// The kind of a container along an entry's key path: what holds the key or position at that
// level of the path.
enum class ContainerKind : std::uint8_t {
  dict,
  ordered_dict,  // collections.OrderedDict (a state_dict())
  list,
  tuple,
  set,
  frozenset,
  // Anything else ckptfs walks into but never builds: an object of some class (its state's
  // keys: a pickled nn.Module, an argparse.Namespace), a TorchScript module, a sparse tensor's
  // parts, a quantized tensor's scales, a part ckptfs names ("constants"). pack writes what is
  // below it under its flattened keys.
  object,
};

// The BUILD state of a container (its attributes): which container, by the key path and
// containers that lead to it as Entry::key_path and Entry::containers say them ("[]" and one
// kind for the root), and the state, a plain value.
struct ContainerState {
  std::string key_path;    // compact JSON: ["model"]
  std::string containers;  // the codes of key_path's containers, then the container's own: "do"
  std::shared_ptr<const PlainValue> state;
};

// The name index.json and meta.json give it: "dict", "OrderedDict", "list", "tuple", "set",
// "frozenset", "object".
std::string_view container_name(ContainerKind kind) noexcept;
std::optional<ContainerKind> container_from_name(std::string_view name) noexcept;

// One character per kind, as Entry::containers holds them: d o l t s f x.
char container_code(ContainerKind kind) noexcept;
std::optional<ContainerKind> container_from_code(char code) noexcept;

}  // namespace ckptfs
