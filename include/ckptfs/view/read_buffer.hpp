// SPDX-License-Identifier: MIT
// What a read of a virtual file is made of: bytes held in memory, ranges of a source to be read
// from there (spliced by the FUSE adapter, never staged), and bytes staged for this one read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ckptfs {

class ByteSource;
// The sources of a model, by Storage::source index.
using Sources = std::span<const ByteSource* const>;

struct ReadPiece {
  static constexpr std::uint32_t generated = 0xffffffff;  // `source` of bytes made in memory
  // When non-null: `length` bytes here (kept by the tree, or staged in the ReadBuffer), which
  // came from `source` or were generated (a header, a JSON file).
  const char* memory = nullptr;
  std::uint32_t source = generated;  // the source the bytes come from
  std::uint64_t source_offset = 0;   // when memory is null: where they are in it
  std::size_t length = 0;
};

// The pieces of one read, in order. Reused across reads by one thread (nothing is freed), never
// shared between threads.
class ReadBuffer {
 public:
  void clear() noexcept {
    pieces_.clear();
    staged_.clear();
    arena_.clear();
    size_ = 0;
  }

  // Bytes that outlive the read (the tree's own strings).
  void add_memory(const char* bytes, std::size_t length,
                  std::uint32_t source = ReadPiece::generated);

  // A range of a source; joined to the previous piece when it continues it.
  void add_source(std::uint32_t source, std::uint64_t offset, std::size_t length);

  // Room for `length` bytes that the caller writes now (gathered from `source`, converted,
  // computed): valid until the next add_*.
  std::span<char> add_staged(std::size_t length, std::uint32_t source = ReadPiece::generated);

  // The pieces, staged ones pointing into this buffer: called once, after the last add_*; valid
  // until clear().
  const std::vector<ReadPiece>& pieces();

  std::size_t size() const noexcept { return size_; }  // bytes in all pieces

 private:
  std::vector<ReadPiece> pieces_;
  std::vector<std::size_t> staged_;  // indices of the pieces whose bytes are in arena_
  std::vector<char> arena_;
  std::size_t size_ = 0;
};

}  // namespace ckptfs
