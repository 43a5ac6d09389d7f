// SPDX-License-Identifier: MIT
// JSON descriptions of a checkpoint's entries: meta.json, `inspect --json` and index.json share them.
#pragma once

#include <ckptfs/checkpoint.hpp>

#include <nlohmann/json.hpp>

#include <vector>

namespace ckptfs {

// For each storage, the entries whose tensors use it (for meta.json's shared_with).
class SharingIndex {
 public:
  explicit SharingIndex(const Checkpoint& checkpoint);
  const std::vector<std::size_t>& entries_of_storage(std::size_t storage) const {
    return by_storage_[storage];
  }

 private:
  std::vector<std::vector<std::size_t>> by_storage_;
};

// At most this many keys are listed in shared_with; shared_with_count has the full number.
inline constexpr std::size_t max_shared_with = 100;

// meta.json of tensor entry `entry_index`: key, dtype, shape, stride, storage_offset,
// contiguous, nbytes, file_offset, numpy, byteorder, requires_grad, storage, shared_with,
// shared_with_count, broken.
nlohmann::ordered_json describe_tensor(const Checkpoint& checkpoint, std::size_t entry_index,
                                       const SharingIndex& sharing);

// `inspect --json`: {"format", "byteorder", "entries": [...]}, tensors as describe_tensor() with
// "kind": "tensor", values as {"key", "kind": "value", "value"}.
nlohmann::ordered_json describe_checkpoint(const Checkpoint& checkpoint);

std::string_view byteorder_name(const Checkpoint& checkpoint);

}  // namespace ckptfs
