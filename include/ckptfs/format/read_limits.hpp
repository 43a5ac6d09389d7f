// SPDX-License-Identifier: MIT
// ReadLimits: how much of a hostile file the readers build before they refuse it.
#pragma once

#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>

#include <cstddef>
#include <cstdint>

namespace ckptfs {

struct ReadLimits {
  pickle::Limits pickle;
  ZipLimits zip;  // defer_local_headers for remote sources: see Storage::locator
  std::uint64_t max_entries = 4'000'000;  // flattened entries (a DAG can multiply them)
  // Entries may outnumber the pickle's nodes only up to this: more means that objects shared
  // along many paths multiply them (a DAG of dicts: 2^n entries from n small dicts).
  std::uint64_t min_entries_per_graph = 65'536;
  // All keys (as JSON: a control character counts six bytes, as index.json writes it) and
  // value.json texts together, or 64 bytes per pickle object when that is more: a
  // shared value reached along many paths would otherwise be copied into every entry. It bounds
  // a single key too: there is no other limit on a key's length.
  std::uint64_t max_flattened_bytes = 64ull << 20;
  std::size_t max_value_json = 1 << 20;  // a longer value.json is cut (valid JSON says so)
  // The values kept exactly (Entry::value, for pack and the RFC layout), in nodes of all of them
  // (~100 bytes each), or the pickle's node count if less: past it, a value is read back from its
  // value.json, which says it up to the types of equal values.
  std::uint64_t max_plain_value_nodes = 2'000'000;
  std::size_t max_dims = 64;  // torch's own limit on tensor dimensions
  // Not a limit: the root is one entry whatever it is, as in the RFC layout's <name>.pt files
  // (torch.save of one key's tensor or value): a root without a tensor is the value entry
  // "value" even when it is a dict, list or tuple, which are otherwise walked (flatten.hpp).
  bool root_is_one_entry = false;
};

}  // namespace ckptfs
