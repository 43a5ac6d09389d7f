// SPDX-License-Identifier: MIT
// A PyTorch Distributed Checkpoint's `.metadata` (torch.distributed.checkpoint's Metadata, as
// FileSystemWriter pickles it) read with the restricted pickle machine, never executed, into
// plain structures: each state_dict key's tensor (dtype, size, chunks) or bytes item, the path
// planner_data nests it at, and where each item is (file, offset, length).
#pragma once

#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/model/dtype.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ckptfs {

struct DcpLimits {
  std::uint64_t max_metadata_bytes = 1ull << 30;  // the .metadata file
  std::uint64_t max_files = 65'536;               // distinct files the items are in
  std::uint64_t max_chunks = 16'000'000;          // tensor chunks in all
  std::uint64_t max_path_parts = 64;              // parts of one planner_data path
  std::uint64_t max_list_index = 1 << 20;         // a list position in a planner_data path
};

// Where an item's bytes are: a torch.save zip (a tensor chunk, or a BYTE_IO value) at [offset,
// offset + length) of file `file` (an index into DcpMetadata::files).
struct DcpItem {
  std::uint32_t file = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  // The storage writer's transforms of the item (compression extensions); none when stored.
  std::vector<std::string> transforms;
};

// One part of a planner_data path: a dict key (a str, or an int) or a list position.
struct DcpPathPart {
  bool is_int = false;
  std::string text;        // a str key
  std::int64_t value = 0;  // an int key or position
};

struct DcpEntry {
  enum class Kind : std::uint8_t { tensor, bytes };
  std::string fqn;  // the flattened key, as state_dict_metadata has it
  Kind kind = Kind::tensor;
  // Where dcp_to_torch_save puts the value: planner_data's path, or [fqn] when it has none.
  std::vector<DcpPathPart> path;
  // Tensors: the dtype, the global size, and the chunks: per chunk, rank offsets then rank
  // sizes in `chunk_numbers`, and its item (an index into DcpMetadata::items) if storage_data
  // has one.
  DType dtype = DType::float32;
  std::vector<std::int64_t> size;
  std::vector<std::int64_t> chunk_numbers;
  std::vector<std::optional<std::uint32_t>> chunk_items;
  // Bytes: the item, if storage_data has it.
  std::optional<std::uint32_t> item;
  // Why the entry's tensor cannot be served although the metadata is readable (a dtype torch
  // has that ckptfs does not know, a layout that is not strided); empty when fine.
  std::string broken;

  std::size_t chunks() const noexcept { return chunk_items.size(); }
  std::span<const std::int64_t> chunk_offsets(std::size_t i) const {
    return {chunk_numbers.data() + i * 2 * size.size(), size.size()};
  }
  std::span<const std::int64_t> chunk_sizes(std::size_t i) const {
    return {chunk_numbers.data() + (i * 2 + 1) * size.size(), size.size()};
  }
};

struct DcpMetadata {
  std::vector<DcpEntry> entries;  // state_dict_metadata's order
  std::vector<DcpItem> items;
  // The files items are in, as .metadata names them (relative to its directory), each once.
  std::vector<std::string> files;
  // Why a file name cannot be opened (it leaves the directory), per file; empty when fine.
  std::vector<std::string> refused;
};

// Reads `.metadata`. The root must be an object of a class named *Metadata (torch's Metadata,
// or a subclass such as Megatron's MCoreMetadata) whose state holds state_dict_metadata (a
// dict); fields other than state_dict_metadata, planner_data and storage_data are ignored, and
// so are unknown fields of the objects within. Throws Error(bad_checkpoint), its message
// starting ".metadata: ", for a pickle that is not this, a value of the wrong kind, or past
// `limits` (the pickle's or the DCP's). A file name that leaves the directory (absolute, "",
// "." or ".." components, a NUL) is not an error here: DcpMetadata::refused says why.
DcpMetadata read_dcp_metadata(const ByteSource& metadata, const ReadLimits& limits = {},
                              const DcpLimits& dcp = {});

}  // namespace ckptfs
