// SPDX-License-Identifier: MIT
// A range of another source as a source of its own: a record inside a file read by a reader
// made for whole files (a PyTorch DCP item: a torch.save zip at an offset of a .distcp file).
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <cstdint>

namespace ckptfs {

class WindowSource final : public ByteSource {
 public:
  // Bytes [offset, offset + length) of `source`, at offsets [0, length) here. The caller keeps
  // the range inside `source` (contains()) and `source` alive while this is used. Reads,
  // lending, names, times and changes are `source`'s; fd() is -1: offsets here are not the
  // descriptor's, so nothing splices from a window.
  WindowSource(const ByteSource& source, std::uint64_t offset, std::uint64_t length) noexcept
      : source_(source), offset_(offset), length_(length) {}

  std::uint64_t size() const override { return length_; }
  const std::string& name() const noexcept override { return source_.name(); }
  SourceTimes times() const noexcept override { return source_.times(); }
  bool remote() const noexcept override { return source_.remote(); }
  bool unchanged(bool check_path) const noexcept override { return source_.unchanged(check_path); }
  std::uint64_t offset() const noexcept { return offset_; }  // of byte 0 in the whole source

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override {
    source_.read(offset_ + offset, out);
  }
  bool lend_in_range(std::uint64_t offset, std::size_t length,
                     std::vector<std::span<const std::byte>>& spans,
                     std::vector<Pin>& pins) const override {
    return source_.lend(offset_ + offset, length, spans, pins);
  }

  const ByteSource& source_;
  std::uint64_t offset_;
  std::uint64_t length_;
};

}  // namespace ckptfs
