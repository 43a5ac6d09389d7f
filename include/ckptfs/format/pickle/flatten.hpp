// SPDX-License-Identifier: MIT
// Flattening: the checkpoint's object tree as a list of dotted keys, each a tensor or a value.
#pragma once

#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/format/torch/torch_interpreter.hpp>

#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckptfs {

// How a reader that knows more than the pickle's shape steers the walk (TorchScript: a module's
// parameters, buffers and submodules are its state_dict, its other attributes are not).
struct WalkPlan {
  // Objects whose children are exactly these (key node, value node) pairs, in this order,
  // instead of the parts of their state. A key node is a str (its text is the key part).
  std::unordered_map<pickle::NodeId, std::vector<std::pair<pickle::NodeId, pickle::NodeId>>>
      children;
  // Nodes that stand for another node wherever they are reached (TorchScript's
  // build_tensorlist(list) is the list). Each target is final: it is not an alias itself.
  std::unordered_map<pickle::NodeId, pickle::NodeId> aliases;
};

struct FlattenOptions {
  const WalkPlan* plan = nullptr;
  // Tensors only: a child without a tensor below is left out instead of becoming a value entry,
  // and a root without a tensor gives no entry at all.
  bool tensors_only = false;
  // A part ckptfs names, put before every key ("constants" -> "constants.0"; a root tensor is
  // the key "constants" itself); every entry then has a key path starting {"__part__": it}.
  std::string root_part;
};

struct Flattened {
  std::vector<Entry> entries;
  // What holds the entries without a key path (Model::root): the root's container kind when it
  // is walked (ContainerKind::object below a root part), none when the root is one entry.
  std::optional<ContainerKind> root = ContainerKind::ordered_dict;
  // The BUILD states of the OrderedDicts walked that have one and hold plain data (Model::
  // container_states).
  std::vector<ContainerState> container_states;
};

// Walks the root: a dict, list, tuple, set, object (its state, items, args) or composite that
// holds at least one tensor somewhere below is walked, each child keyed `parent + "." + child`
// (dict keys as key_text(), indices in decimal, object parts by their state's keys, "__state__"
// when the state is not a dict, "__args__" and "__kwargs__" when the arguments hold tensors).
// Every tensor is a tensor entry (a tensor reached twice, as tied weights are, is an entry under
// each key), a per-channel quantized tensor followed by its `.q_per_channel_scales` and
// `.q_per_channel_zero_points`; every subtree without a tensor is one value entry. A root tensor
// is the entry "tensor"; a root dict, list or tuple is always walked (unless
// limits.root_is_one_entry); any other root without a tensor is the value entry "value". Order
// is the pickle's.
// Keys of one dict that Python finds equal are merged as Python would (the first position, the
// last value); keys that merely have the same text (1 and "1"; "a.b" beside "a" -> "b") all
// stay. Entry::key_path and Entry::containers say the Python keys and their containers along
// the way for every entry but one str key of the root whose text no other entry has ("[]" for
// a root that is one entry). `options` change this as they say. Entry::tensor indexes
// interpretation.tensors.
// Throws Error(bad_checkpoint) past limits.max_entries entries or when the keys and values
// together pass limits.max_flattened_bytes (or 64 bytes per pickle object, if more): the only
// bound on a key's length. Both bounds hold per call.
Flattened flatten(const pickle::Graph& graph, const Interpretation& interpretation,
                  const ReadLimits& limits, const FlattenOptions& options = {});

}  // namespace ckptfs
