// SPDX-License-Identifier: MIT
// Flattening: the checkpoint's object tree as a list of dotted keys, each a tensor or a value.
#pragma once

#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/format/torch_interpreter.hpp>

#include <vector>

namespace ckptfs {

// Walks the root: a dict, list, tuple, set, object (its state, items, args) or composite that
// holds at least one tensor somewhere below is walked, each child keyed `parent + "." + child`
// (dict keys as key_text(), indices in decimal, object parts by their state's keys, "__state__"
// when the state is not a dict, "__args__" and "__kwargs__" when the arguments hold tensors).
// Every tensor is a tensor entry (a tensor reached twice, as tied weights are, is an entry under
// each key), a per-channel quantized tensor followed by its `.q_per_channel_scales` and
// `.q_per_channel_zero_points`; every subtree without a tensor is one value entry. A root tensor
// is the entry "tensor"; a root dict, list or tuple is always walked; any other root without a
// tensor is the value entry "value". Order is the pickle's.
// Keys of one dict that Python finds equal are merged as Python would (the first position, the
// last value); keys that merely have the same text (1 and "1"; "a.b" beside "a" -> "b") all
// stay, and their entries get Entry::key_path, as do entries with a key part that is not a str.
// Entry::tensor indexes interpretation.tensors.
// Throws Error(bad_checkpoint) past limits.max_entries entries or when the keys and values
// together pass limits.max_flattened_bytes (or 64 bytes per pickle object, if more): the only
// bound on a key's length.
std::vector<Entry> flatten(const pickle::Graph& graph, const Interpretation& interpretation,
                           const ReadLimits& limits);

}  // namespace ckptfs
