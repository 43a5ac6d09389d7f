// SPDX-License-Identifier: MIT
// DiskCache: remote blocks kept in files under -o cache_dir=DIR, one folder per object version
// (URL + ETag, else Last-Modified + size), so that a remount reads nothing twice. Private to the
// source layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>

namespace ckptfs::detail {

// Layout: DIR/ckptfs-blocks-v1/<16 hex digits of the key's hash>/key (the key's text) and
// <index as 16 hex digits>.blk: a 32-byte header ("CKPTFSB1", index, length, CRC-32 of the
// bytes) then the bytes. A block is written to a temporary file and renamed into place, so
// that a reader (this mount or another one on the same DIR) sees a whole file or none; the
// header and CRC make a file torn by a crash, or another object's, a miss, never wrong bytes.
// The folder's key file tells two keys with the same hash apart. Bounded: once the files of
// all objects exceed `limit` bytes, the least recently used blocks (file mtime, touched on each
// hit) are deleted until they take 90% of it. Two mounts on one DIR each trim; deleting a file
// another one has open is harmless. Thread-safe.
class DiskCache {
 public:
  // Creates DIR/ckptfs-blocks-v1 when needed. Throws Error(usage) when it cannot.
  DiskCache(const std::string& directory, std::uint64_t limit);

  // The folder for `key`, created with its key file; empty when it cannot be used (another key
  // with the same hash, a file system error).
  std::string object_folder(const std::string& key);

  // Fills `out` with block `index` of the object in `folder`; false when it is not there whole.
  bool load(const std::string& folder, std::uint64_t index, std::span<std::byte> out);

  // Writes block `index` (best effort: a failure leaves no file). Trims the cache when it grows
  // past its limit.
  void store(const std::string& folder, std::uint64_t index, std::span<const std::byte> bytes);

 private:
  void trim();

  std::string root_;
  std::uint64_t limit_;
  std::mutex trim_mutex_;
  std::atomic<std::uint64_t> estimate_{0};  // bytes of block files, as last counted plus written
  std::atomic<bool> counted_{false};
  std::atomic<std::uint64_t> sequence_{0};  // temporary file names
};

}  // namespace ckptfs::detail
