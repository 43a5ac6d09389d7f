// SPDX-License-Identifier: MIT
// The RFC's split layout (transformers' RFC on split checkpoints): map.pt, torch.save of the list
// of keys in their order, and one <name>.pt per key, torch.save of that key's tensor or plain
// value, read into one Model. What `ckptfs -o layout=rfc` shows and what `ckptfs pack` packs.
//
//   dest/
//     map.pt                                   ["encoder.weight", "encoder.bias", "epoch"]
//     encoder.weight.pt encoder.bias.pt        torch.save(tensor)
//     epoch.pt                                 torch.save(7)
//
// <name> is the key's name by the mount's naming rule (base/names.hpp): "a/b" is "a%2Fb.pt", a
// key of the text an earlier key has gets "%#2"... as the mount names it (NameAllocator).
#pragma once

#include <ckptfs/format/directory_model.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>

#include <cstdint>
#include <string>

namespace ckptfs {

struct RfcLimits {
  std::uint64_t max_keys = 4'000'000;  // keys in map.pt
};

// Whether `directory` holds a regular file named map.pt. Never throws.
bool looks_like_rfc_directory(const std::string& directory);

// Reads the RFC directory `directory`: its entries are map.pt's keys in order, each the tensor
// or value of its <name>.pt, read by read_torch() with its root taken as one entry
// (ReadLimits::root_is_one_entry): a tensor (with, for a per-channel quantized one, its scales
// and zero points inside it, as torch saves them), or a plain value, whatever its kind (a dict
// of numbers is one value). A file holding anything else (a dict of tensors, a module) is
// refused. Files that map.pt does not name are ignored. Every file is opened beneath the
// directory (source/directory.hpp).
//
// Throws Error, its message naming the file ("encoder.weight.pt: ..."): io when a key's file
// is missing or cannot be read; bad_checkpoint when map.pt is not torch.save of a list (or
// tuple) of str, or a key's file does not hold one tensor or value, or a path leads out of the
// directory; unsupported for a map.pt in the legacy format (torch < 1.6), past `rfc` limits;
// and what read_torch() throws for each file.
DirectoryModel read_rfc_directory(const std::string& directory, const ReadLimits& limits = {},
                                  const RfcLimits& rfc = {});

}  // namespace ckptfs
