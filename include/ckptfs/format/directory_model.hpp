// SPDX-License-Identifier: MIT
// What the readers of directories of files give (split and RFC directories): a model and the
// files its bytes are read from, each opened beneath the directory (source/directory.hpp).
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <memory>
#include <vector>

namespace ckptfs {

struct DirectoryModel {
  std::vector<std::unique_ptr<ByteSource>> sources;  // sources[i] holds Storage::source i
  Model model;                                       // Model::sources: paths in the directory
  // The newest mtime and ctime of the files read that are no sources (index.json, meta.json,
  // value.json, map.pt): with the sources' own, the times of a mounted tree.
  SourceTimes times;
  // The permission bits all those files have (permission_bits(), their modes ANDed).
  mode_t permissions = 0777;
};

}  // namespace ckptfs
