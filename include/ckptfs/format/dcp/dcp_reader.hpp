// SPDX-License-Identifier: MIT
// A PyTorch Distributed Checkpoint directory (torch.distributed.checkpoint's FileSystemWriter:
// `.metadata` and `__<rank>_<n>.distcp` files) read into one Model: the tree ckptfs shows for
// the file dcp_to_torch_save writes from it, every tensor assembled from its chunks on read.
#pragma once

#include <ckptfs/format/dcp/dcp_metadata.hpp>
#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs {

// Opens a file of the checkpoint by the name .metadata gives it (relative to its directory,
// checked not to leave it). Throws Error when it cannot.
using DcpOpener = std::function<std::unique_ptr<ByteSource>(const std::string& name)>;

struct DcpModel {
  Model model;
  // The sources of Model::sources, in order: the files that hold items, each opened once.
  std::vector<std::unique_ptr<ByteSource>> sources;
};

// Reads the checkpoint whose `.metadata` is `metadata` (read_dcp_metadata()), its files opened
// with `open` as their items are needed. The entries are those of the state dict
// dcp_to_torch_save builds and saves: each state_dict_metadata key set at its planner_data path
// (dicts and lists made along the way, a list padded with None, as torch's set_element does),
// in .metadata's order, then flattened as a torch.save file is (flatten.hpp: a container
// without tensors is one value entry). Each tensor is assembled (Model::assemblies) from its
// chunks: each chunk's item is a torch.save zip at (offset, length) of its file, read through a
// window of it, whose tensor must have the chunk's sizes and the tensor's dtype; its bytes stay
// where they are. Chunks of no elements (FSDP's ranks without rows) need no item. A tensor
// whose chunk has no item, whose item is missing, damaged, transformed (compressed) or of
// another shape or dtype, whose file cannot be opened or leaves the directory, or whose chunks
// overlap or leave a gap (index_assembly()) is kept and marked broken with the reason. A
// BYTE_IO item (a torch.save'd value) is read the same way and its value nested whole: its
// tensors, if any, are its own zip's. Throws Error (one line) for a .metadata that cannot be
// read, planner_data paths that collide, and a BYTE_IO item that cannot be read.
// Format::dcp; Model::sources are the files' names as .metadata gives them.
DcpModel read_dcp(const ByteSource& metadata, const DcpOpener& open, const ReadLimits& limits = {},
                  const DcpLimits& dcp = {});

}  // namespace ckptfs
