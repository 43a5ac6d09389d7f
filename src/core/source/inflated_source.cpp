// SPDX-License-Identifier: MIT
// InflatedSource: zlib's raw inflate over a range of another source, resumed where the last read
// stopped, started over for a read behind it.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/inflated_source.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <atomic>

namespace ckptfs {
namespace {

// The states kept between reads, by every InflatedSource of the process.
std::atomic<int> kept_states{0};

}  // namespace

struct InflatedSource::State {
  z_stream z{};
  bool open = false;
  std::uint64_t position = 0;  // inflated bytes given out so far
  std::uint64_t consumed = 0;  // compressed bytes read into `in` so far
  std::array<unsigned char, 1 << 14> in{};

  State() {
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
    open = true;
  }
  ~State() {
    if (open) inflateEnd(&z);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

InflatedSource::InflatedSource(const ByteSource& compressed, std::uint64_t offset,
                               std::uint64_t compressed_size, std::uint64_t size, std::string name)
    : compressed_(compressed),
      offset_(offset),
      compressed_size_(compressed_size),
      size_(size),
      name_(std::move(name)) {}

InflatedSource::~InflatedSource() {
  if (state_) --kept_states;
}

void InflatedSource::inflate_into(State& s, std::byte* out, std::size_t length) const {
  s.z.next_out = reinterpret_cast<Bytef*>(out);
  std::size_t left = length;
  while (left != 0) {
    if (s.z.avail_in == 0 && s.consumed < compressed_size_) {
      const auto n = static_cast<std::size_t>(
          std::min<std::uint64_t>(s.in.size(), compressed_size_ - s.consumed));
      compressed_.read(offset_ + s.consumed, std::as_writable_bytes(std::span(s.in.data(), n)));
      s.consumed += n;
      s.z.next_in = s.in.data();
      s.z.avail_in = static_cast<uInt>(n);
    }
    const auto step = static_cast<uInt>(std::min<std::size_t>(left, 1u << 30));
    s.z.avail_out = step;
    const int status = inflate(&s.z, Z_NO_FLUSH);
    const std::size_t produced = step - s.z.avail_out;
    left -= produced;
    s.position += produced;
    if (left == 0) break;
    if (status == Z_STREAM_END ||
        (status == Z_BUF_ERROR && s.z.avail_in == 0 && s.consumed == compressed_size_)) {
      throw Error(
          ExitCode::bad_checkpoint,
          fmt::format("{}: the deflated data ends at byte {} of {}", name_, s.position, size_));
    }
    if (status != Z_OK && status != Z_BUF_ERROR) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("{}: corrupt deflated data at byte {} ({})", name_, s.position,
                              s.z.msg ? s.z.msg : "zlib error"));
    }
  }
}

void InflatedSource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  const std::lock_guard lock(mutex_);
  if (state_ && offset < state_->position) {
    state_.reset();  // behind the last read: from the start again
    --kept_states;
  }
  if (!state_) {
    state_ = std::make_unique<State>();
    ++kept_states;
  }
  try {
    // Skip to `offset` through a small buffer, then inflate straight into `out`.
    std::array<std::byte, 1 << 14> skip;
    while (state_->position < offset) {
      inflate_into(*state_, skip.data(),
                   static_cast<std::size_t>(
                       std::min<std::uint64_t>(skip.size(), offset - state_->position)));
    }
    inflate_into(*state_, out.data(), out.size());
  } catch (...) {
    state_.reset();
    --kept_states;
    throw;
  }
  if (state_->position == size_ || kept_states > max_kept_states) {
    state_.reset();  // done, or too many kept: the next read starts over
    --kept_states;
  }
}

}  // namespace ckptfs
