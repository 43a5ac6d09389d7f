// SPDX-License-Identifier: MIT
// InflatedSource: the bytes of a deflated range of another source (a zip member compressed with
// DEFLATE: numpy.savez_compressed's .npy members), inflated on read, with access points to resume
// from (zlib's zran example) and the member's CRC-32 checked at its end.
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ckptfs {

// `size` bytes, the raw DEFLATE stream (no zlib header, as zip stores it) of `compressed_size`
// bytes at `offset` of `compressed`, which must outlive it.
//
// A read inflates from the nearest place at or before its offset it can resume from: one of the
// source's idle inflaters (up to states_per_source are kept between reads, and
// max_kept_states in the whole process), or an access point. Access points are made as the
// stream is first inflated, every span() bytes of output at a deflate block's end: where the
// block begins in the compressed bytes (to the bit) and the 32 KiB of output before it (what the
// next blocks may refer back to), zran's way. So a read costs the inflation of at most span()
// bytes before it once the stream has been inflated past it, and the first read past all that
// was inflated costs what lies between; whatever the order of the reads and their number, the
// stream is inflated from its start once. Readers in parallel each inflate with their own state
// (the source's lock is held to choose and return one, and when a read passes the furthest point
// inflated, never while inflating).
//
// Memory: span() is max(min_span, size / max_points) so a source makes at most max_points points
// (a 64 GiB member: points every 256 MiB); their windows (32 KiB each) live in one pool of the
// process, at most max_windows of them (64 MiB): past it the least recently used window is
// dropped, and its point with it (reads there resume from the point before). The states: about
// 170 KiB each, max_kept_states kept idle in the process, plus one per read in progress.
//
// `crc32`, when given, is the member's CRC-32 as its zip records it: the first time the stream
// is inflated to its end the CRC of all its bytes is compared with it, and on a mismatch that
// read and every read after it throw Error(bad_checkpoint) ("its bytes do not match"), as Python's
// zipfile raises "Bad CRC-32". Throws Error(bad_checkpoint) when the stream is corrupt or ends
// before `size` bytes, std::bad_alloc, and what `compressed` throws. times(), remote() and
// unchanged() are `compressed`'s.
class InflatedSource final : public ByteSource {
 public:
  static constexpr int max_kept_states = 16;
  static constexpr std::size_t states_per_source = 4;
  static constexpr std::uint64_t min_span = std::uint64_t{1} << 20;
  static constexpr std::uint64_t max_points = 256;
  static constexpr std::size_t max_windows = 2048;

  InflatedSource(const ByteSource& compressed, std::uint64_t offset, std::uint64_t compressed_size,
                 std::uint64_t size, std::string name,
                 std::optional<std::uint32_t> crc32 = std::nullopt);
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
  // Inflates the stream to its end if it has not been yet, and throws when its CRC-32 does not
  // match (the whole member is checked, whatever the range).
  void verify(std::uint64_t offset, std::uint64_t length) const override;

  // The output bytes between access points.
  std::uint64_t span() const noexcept { return span_; }
  // For tests: the bytes inflated so far by every read (skipped ones too), and the access
  // points made.
  std::uint64_t inflated_bytes() const noexcept { return inflated_.load(); }
  std::size_t access_points() const;

 private:
  struct State;
  struct Point;
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override;
  // An inflater to read from `offset` with: an idle one, one set at an access point, or a new
  // one at the stream's start. Called locked.
  std::unique_ptr<State> state_for(std::uint64_t offset) const;
  // Inflates `length` bytes into `out` (which may be a scratch buffer: skipped bytes).
  void inflate_into(State& state, std::byte* out, std::size_t length) const;
  // Bytes [from, state.position) were just inflated into `bytes`: the CRC and the access points
  // are carried on when they pass the furthest place inflated.
  void passed(State& state, const std::byte* bytes, std::uint64_t from) const;
  void keep(std::unique_ptr<State> state) const;
  [[noreturn]] void fail_crc() const;

  const ByteSource& compressed_;
  std::uint64_t offset_;
  std::uint64_t compressed_size_;
  std::uint64_t size_;
  std::string name_;
  std::optional<std::uint32_t> crc32_;
  std::uint64_t span_;

  mutable std::mutex mutex_;
  mutable std::vector<std::unique_ptr<State>> idle_;  // most recently used last
  mutable std::vector<Point> points_;                 // by output offset
  // The furthest output byte inflated so far (every read that passes it carries the CRC of the
  // bytes before it on), and that CRC. Written locked; frontier_ also read without the lock.
  mutable std::atomic<std::uint64_t> frontier_{0};
  mutable std::uint32_t crc_ = 0;
  enum class Verdict : std::uint8_t { unknown, good, corrupt };
  mutable std::atomic<Verdict> verdict_{Verdict::unknown};
  mutable std::uint32_t found_crc_ = 0;
  mutable std::atomic<std::uint64_t> inflated_{0};
};

}  // namespace ckptfs
