// SPDX-License-Identifier: MIT
// InflatedSource: the bytes of a deflated range of another source (a zip member compressed with
// DEFLATE: numpy.savez_compressed's .npy members), inflated on read.
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace ckptfs {

// `size` bytes, the raw DEFLATE stream (no zlib header, as zip stores it) of `compressed_size`
// bytes at `offset` of `compressed`, which must outlive it. A read inflates from where the last
// one stopped when it starts there or after (skipping what lies between), else from the stream's
// start: sequential reads cost O(size) in all, a read behind the last one O(its offset). The
// inflater's state (~60 KiB) is allocated on the first read and kept between reads by at most
// max_kept_states sources of the process at once (the others free theirs after each read and
// start over on the next). Reads are serialized by a mutex. Throws Error(bad_checkpoint) when the
// stream is corrupt or ends before `size` bytes, std::bad_alloc, and what `compressed` throws.
// times(), remote() and unchanged() are `compressed`'s.
class InflatedSource final : public ByteSource {
 public:
  static constexpr int max_kept_states = 16;

  InflatedSource(const ByteSource& compressed, std::uint64_t offset, std::uint64_t compressed_size,
                 std::uint64_t size, std::string name);
  ~InflatedSource() override;
  InflatedSource(const InflatedSource&) = delete;
  InflatedSource& operator=(const InflatedSource&) = delete;

  std::uint64_t size() const override { return size_; }
  const std::string& name() const noexcept override { return name_; }
  SourceTimes times() const noexcept override { return compressed_.times(); }
  bool remote() const noexcept override { return compressed_.remote(); }
  bool unchanged(bool check_path) const noexcept override {
    return compressed_.unchanged(check_path);
  }

 private:
  struct State;
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override;
  void inflate_into(State& state, std::byte* out, std::size_t length) const;

  const ByteSource& compressed_;
  std::uint64_t offset_;
  std::uint64_t compressed_size_;
  std::uint64_t size_;
  std::string name_;
  mutable std::mutex mutex_;
  mutable std::unique_ptr<State> state_;
};

}  // namespace ckptfs
