// SPDX-License-Identifier: MIT
// ChunkSource: the chunks of a chunked HDF5 dataset, each stored in another source as the HDF5
// filter pipeline left it (deflated, shuffled, checksummed with Fletcher-32, or as is), served
// decoded and one after the other, each chunk its full decoded size. The format reader places
// each chunk at its box of the tensor (model/assembly.hpp); this source only decodes.
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ckptfs {

// The filters ChunkSource decodes, as HDF5 numbers them (H5Z_FILTER_DEFLATE, ...).
enum class ChunkFilter : std::uint8_t {
  deflate = 1,     // zlib's format (a zlib header, as HDF5's deflate filter writes)
  shuffle = 2,     // the bytes of each element regrouped by significance
  fletcher32 = 3,  // a Fletcher-32 checksum appended (checked, then dropped)
};

struct ChunkSpec {
  // Where a chunk is in the file: `offset` and `size` of its stored (filtered) bytes, and which
  // filters its writer skipped (bit i: the i-th filter of `filters`). A chunk never written has
  // offset `missing`: it reads as `fill` repeated.
  struct Chunk {
    static constexpr std::uint64_t missing = ~std::uint64_t{0};
    std::uint64_t offset = missing;
    std::uint64_t size = 0;
    std::uint32_t filter_mask = 0;
  };
  std::uint64_t chunk_bytes = 0;     // of every chunk decoded (edge chunks are whole chunks too)
  std::vector<ChunkFilter> filters;  // in the order the writer applied them
  std::uint32_t shuffle_element_size = 1;  // the shuffle filter's element size
  // One element's bytes, repeated over a chunk never written; empty: zeros.
  std::string fill;
  std::vector<Chunk> chunks;  // in the source's order: chunk i is bytes [i, i + 1) × chunk_bytes
};

// The decoded chunks most recently read, by every ChunkSource of one model: at most
// `capacity` bytes of them (at least the chunks that reads in progress hold).
class ChunkCache {
 public:
  explicit ChunkCache(std::uint64_t capacity) : capacity_(capacity) {}
  using Block = std::shared_ptr<const std::string>;
  Block find(const void* owner, std::uint64_t index);
  void insert(const void* owner, std::uint64_t index, Block block);
  std::uint64_t size() const;  // bytes held now

 private:
  struct Key {
    const void* owner;
    std::uint64_t index;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept;
  };
  using Order = std::list<std::pair<Key, Block>>;  // most recent first
  mutable std::mutex mutex_;
  std::uint64_t capacity_;
  std::uint64_t size_ = 0;
  Order order_;
  std::unordered_map<Key, Order::iterator, KeyHash> index_;
};

// `spec.chunks.size() × spec.chunk_bytes` bytes: the chunks of `stored` (which must outlive it)
// decoded. A read decodes each chunk it touches once, into memory kept by `cache` (LRU, shared
// by the model's sources), and lends those bytes to a reply without copying them (lend()).
// Decoding reverses the filters in the writer's order, skipping those the chunk's mask names;
// the result must be exactly chunk_bytes. Throws Error(bad_checkpoint) naming the chunk when
// its bytes are corrupt (a deflate stream that fails or ends early or late, a Fletcher-32
// checksum that does not match), and what `stored` throws. Thread-safe; times(), remote() and
// unchanged() are `stored`'s.
class ChunkSource final : public ByteSource {
 public:
  ChunkSource(const ByteSource& stored, ChunkSpec spec, std::shared_ptr<ChunkCache> cache,
              std::string name);

  std::uint64_t size() const override { return size_; }
  const std::string& name() const noexcept override { return name_; }
  SourceTimes times() const noexcept override { return stored_.times(); }
  bool remote() const noexcept override { return stored_.remote(); }
  bool unchanged(bool check_path) const noexcept override { return stored_.unchanged(check_path); }
  const ChunkSpec& spec() const noexcept { return spec_; }

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override;
  bool lend_in_range(std::uint64_t offset, std::size_t length,
                     std::vector<std::span<const std::byte>>& spans,
                     std::vector<Pin>& pins) const override;
  ChunkCache::Block chunk(std::uint64_t index) const;
  std::string decode(std::uint64_t index) const;

  const ByteSource& stored_;
  ChunkSpec spec_;
  std::shared_ptr<ChunkCache> cache_;
  std::string name_;
  std::uint64_t size_ = 0;
};

// The Fletcher-32 checksum as HDF5 computes it (H5_checksum_fletcher32: big-endian 16-bit
// words, an odd last byte as the high byte of a word).
std::uint32_t hdf5_fletcher32(std::span<const std::byte> bytes) noexcept;

}  // namespace ckptfs
