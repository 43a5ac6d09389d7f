// SPDX-License-Identifier: MIT
// Flattening: the checkpoint's object tree as a list of dotted keys, each a tensor or a value.
#pragma once

#include <ckptfs/format/torch_reader.hpp>
#include <ckptfs/format/torch_interpreter.hpp>

#include <vector>

namespace ckptfs {

// Walks the root: a dict, list, tuple, set, object (its state, items, args) or composite that
// holds at least one tensor somewhere below is walked, each child keyed `parent + "." + child`
// (dict keys as key_text(), indices in decimal, object parts by their state's keys, "__state__"
// when the state is not a dict, "__args__" and "__kwargs__" when the arguments hold tensors). Every tensor is a tensor entry (a
// tensor reached twice, as tied weights are, is an entry under each key); every subtree without
// a tensor is one value entry. A root tensor is the entry "tensor"; a root dict, list or tuple is
// always walked; any other root without a tensor is the value entry "value". Order is the
// pickle's. Duplicate keys (a dict with both 1 and "1", or "a.b" beside "a" -> "b") get "#2",
// "#3"... Entry::tensor indexes interpretation.tensors.
// Throws Error(bad_checkpoint) past limits.max_entries entries or limits.max_key_bytes of key.
std::vector<Entry> flatten(const pickle::Graph& graph, const Interpretation& interpretation,
                           const ReadLimits& limits);

}  // namespace ckptfs
