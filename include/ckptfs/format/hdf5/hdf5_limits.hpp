// SPDX-License-Identifier: MIT
// The bounds of the HDF5 reader (format/hdf5/hdf5_reader.hpp), apart so that its internal
// modules (src/core/format/hdf5/) need not include the reader's header.
#pragma once

#include <ckptfs/format/zip/zip_reader.hpp>

#include <cstddef>
#include <cstdint>

namespace ckptfs {

struct Hdf5Limits {
  std::uint64_t max_objects = 1'000'000;         // object headers read (groups and datasets)
  std::uint64_t max_links = 4'000'000;           // links of all groups together
  std::uint64_t max_chunks = 1'000'000;          // chunks of all chunked datasets together
  std::uint64_t max_header_bytes = 16ull << 20;  // of one object header, continuations included
  // The structure read at mount (object headers, B-tree nodes, heaps), beyond the file's own size
  // once: more means that something is read over and over.
  std::uint64_t max_extra_metadata_bytes = 256ull << 20;
  std::uint64_t max_chunk_bytes = 64ull << 20;    // one chunk decoded; larger: broken tensor
  std::uint64_t chunk_cache_bytes = 64ull << 20;  // decoded chunks kept by a mount
  std::size_t max_dims = 32;                      // HDF5's own limit (H5S_MAX_RANK)
  // The keys as JSON, together, as index.json lists them: what pickle checkpoints allow
  // (ReadLimits::max_flattened_bytes).
  std::uint64_t max_keys_json_bytes = 64ull << 20;
  ZipLimits zip;  // a .keras archive
};

}  // namespace ckptfs
