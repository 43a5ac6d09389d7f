// SPDX-License-Identifier: MIT
// ReadBuffer: the pieces of one read and the bytes staged for it.
#include <ckptfs/view/read_buffer.hpp>

namespace ckptfs {

void ReadBuffer::add_memory(const char* bytes, std::size_t length, std::uint32_t source) {
  if (length == 0) return;
  pieces_.push_back({bytes, source, 0, length});
  size_ += length;
}

void ReadBuffer::add_source(std::uint32_t source, std::uint64_t offset, std::size_t length) {
  if (length == 0) return;
  size_ += length;
  if (!pieces_.empty()) {
    ReadPiece& last = pieces_.back();
    if (last.memory == nullptr && last.source == source &&
        last.source_offset + last.length == offset) {
      last.length += length;
      return;
    }
  }
  pieces_.push_back({nullptr, source, offset, length});
}

std::span<char> ReadBuffer::add_staged(std::size_t length, std::uint32_t source) {
  const std::size_t at = arena_.size();
  arena_.resize(at + length);
  if (length != 0) {
    staged_.push_back(pieces_.size());
    // source_offset holds the arena offset until pieces() makes it a pointer: the arena may
    // still move.
    pieces_.push_back({nullptr, source, at, length});
    size_ += length;
  }
  return {arena_.data() + at, length};
}

const std::vector<ReadPiece>& ReadBuffer::pieces() {
  for (std::size_t i : staged_) {
    ReadPiece& p = pieces_[i];
    p.memory = arena_.data() + p.source_offset;
    p.source_offset = 0;
  }
  staged_.clear();
  return pieces_;
}

}  // namespace ckptfs
