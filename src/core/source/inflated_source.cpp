// SPDX-License-Identifier: MIT
// InflatedSource: zlib's raw inflate over a range of another source, resumed from the nearest idle
// inflater or access point (zran's: a block boundary, to the bit, and the 32 KiB window before
// it), the access points and the CRC-32 carried on as the stream is first inflated.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/source/inflated_source.hpp>
#include <ckptfs/source/record_checks.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>

namespace ckptfs {
namespace {

// The idle states kept between reads, by every InflatedSource of the process.
std::atomic<int> kept_states{0};

constexpr std::size_t window_bytes = 32768;  // deflate's largest distance back
constexpr std::size_t input_bytes = 1 << 16;
constexpr std::size_t skip_bytes = 1 << 16;

// The windows of every source's access points, at most InflatedSource::max_windows: past it the
// least recently used one is dropped (its point can no longer be resumed from).
class WindowPool {
 public:
  struct Handle {
    std::size_t slot = 0;
    std::uint64_t generation = 0;
  };

  static WindowPool& instance() {
    static WindowPool pool;
    return pool;
  }

  Handle store(const unsigned char* bytes, std::size_t length) {
    const std::lock_guard lock(mutex_);
    std::size_t slot = slots_.size();
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else if (slots_.size() < InflatedSource::max_windows) {
      slots_.emplace_back();
    } else {
      slot = static_cast<std::size_t>(
          std::min_element(slots_.begin(), slots_.end(),
                           [](const Slot& a, const Slot& b) { return a.used < b.used; }) -
          slots_.begin());
    }
    Slot& s = slots_[slot];
    if (!s.bytes) s.bytes = std::make_unique<unsigned char[]>(window_bytes);
    std::copy(bytes, bytes + length, s.bytes.get());
    s.length = length;
    s.used = ++clock_;
    return {slot, ++s.generation};
  }

  // Sets the window as `z`'s dictionary; false when it was dropped.
  bool apply(const Handle& h, z_stream& z) {
    const std::lock_guard lock(mutex_);
    Slot& s = slots_[h.slot];
    if (s.generation != h.generation) return false;
    s.used = ++clock_;
    return inflateSetDictionary(&z, s.bytes.get(), static_cast<uInt>(s.length)) == Z_OK;
  }

  void release(const Handle& h) {
    const std::lock_guard lock(mutex_);
    Slot& s = slots_[h.slot];
    if (s.generation != h.generation) return;
    ++s.generation;
    s.bytes.reset();
    free_.push_back(h.slot);
  }

 private:
  struct Slot {
    std::unique_ptr<unsigned char[]> bytes;
    std::size_t length = 0;
    std::uint64_t generation = 0;
    std::uint64_t used = 0;
  };
  std::mutex mutex_;
  std::vector<Slot> slots_;
  std::vector<std::size_t> free_;
  std::uint64_t clock_ = 0;
};

}  // namespace

struct InflatedSource::Point {
  std::uint64_t out = 0;  // output bytes before it
  std::uint64_t in = 0;   // compressed bytes before it, the last `bits` bits of one excepted
  int bits = 0;
  WindowPool::Handle window;
};

struct InflatedSource::State {
  z_stream z{};
  bool open = false;
  std::uint64_t position = 0;  // output bytes given out so far
  std::uint64_t consumed = 0;  // compressed bytes read into `in` so far
  std::array<unsigned char, input_bytes> in{};
  std::array<std::byte, skip_bytes> skip{};

  State() {
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();  // raw, as zip stores it
    open = true;
  }
  ~State() {
    if (open) inflateEnd(&z);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

InflatedSource::InflatedSource(const ByteSource& compressed, std::uint64_t offset,
                               std::uint64_t compressed_size, std::uint64_t size, std::string name,
                               std::optional<std::uint32_t> crc32)
    : compressed_(compressed),
      offset_(offset),
      compressed_size_(compressed_size),
      size_(size),
      name_(std::move(name)),
      crc32_(crc32),
      span_(std::max(min_span, size / max_points + 1)) {
  if (size_ == 0) verdict_ = !crc32_ || *crc32_ == 0 ? Verdict::good : Verdict::corrupt;
}

InflatedSource::~InflatedSource() {
  kept_states -= static_cast<int>(idle_.size());
  for (const Point& p : points_) WindowPool::instance().release(p.window);
}

std::size_t InflatedSource::access_points() const {
  const std::lock_guard lock(mutex_);
  return points_.size();
}

void InflatedSource::fail_crc() const {
  throw Error(ExitCode::bad_checkpoint,
              fmt::format("{}: its {} inflated bytes do not match the CRC-32 its zip records "
                          "({:08x}, they give {:08x}): {}",
                          name_, size_, crc32_.value_or(0), found_crc_, corrupt_file_advice));
}

std::unique_ptr<InflatedSource::State> InflatedSource::state_for(std::uint64_t offset) const {
  // The idle state nearest before `offset`, and the access point.
  std::unique_ptr<State>* best = nullptr;
  for (auto& s : idle_) {
    if (s->position <= offset && (!best || s->position > (*best)->position)) best = &s;
  }
  auto point = std::upper_bound(points_.begin(), points_.end(), offset,
                                [](std::uint64_t at, const Point& p) { return at < p.out; });
  if (best && (point == points_.begin() || (*best)->position >= std::prev(point)->out)) {
    std::unique_ptr<State> s = std::move(*best);
    idle_.erase(idle_.begin() + (best - idle_.data()));
    --kept_states;
    return s;
  }
  auto s = std::make_unique<State>();
  // From the nearest point whose window is still kept; else from the stream's start.
  while (point != points_.begin()) {
    const Point& p = *--point;
    unsigned char byte = 0;
    if (p.bits != 0) {
      compressed_.read(offset_ + p.in - 1, std::as_writable_bytes(std::span(&byte, 1)));
    }
    if ((p.bits == 0 || inflatePrime(&s->z, p.bits, byte >> (8 - p.bits)) == Z_OK) &&
        WindowPool::instance().apply(p.window, s->z)) {
      s->position = p.out;
      s->consumed = p.in;
      return s;
    }
    s = std::make_unique<State>();  // its window was dropped: a fresh state for the point before
  }
  return s;
}

void InflatedSource::passed(State& s, const std::byte* bytes, std::uint64_t from) const {
  if (s.position <= frontier_.load(std::memory_order_relaxed)) return;
  const std::lock_guard lock(mutex_);
  const std::uint64_t frontier = frontier_.load(std::memory_order_relaxed);
  if (s.position <= frontier || from > frontier) return;  // another state got further first
  crc_ = crc32(crc_, bytes + (frontier - from), static_cast<std::size_t>(s.position - frontier));
  frontier_.store(s.position, std::memory_order_relaxed);
  if (s.position == size_ && verdict_ == Verdict::unknown) {
    found_crc_ = crc_;
    verdict_ = !crc32_ || crc_ == *crc32_ ? Verdict::good : Verdict::corrupt;
  }
  // At a block's end (not the last block's), far enough past the last point: a new point.
  const int type = s.z.data_type;
  if ((type & 128) != 0 && (type & 64) == 0 &&
      s.position >= (points_.empty() ? 0 : points_.back().out) + span_ &&
      points_.size() < max_points) {
    std::array<unsigned char, window_bytes> window;
    uInt length = 0;
    if (inflateGetDictionary(&s.z, window.data(), &length) != Z_OK) return;
    Point p;
    p.out = s.position;
    p.in = s.consumed - s.z.avail_in;
    p.bits = type & 7;
    p.window = WindowPool::instance().store(window.data(), length);
    points_.push_back(p);
  }
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
    // Z_BLOCK: back at each block's end, where an access point can be made.
    const int status = inflate(&s.z, Z_BLOCK);
    const std::size_t produced = step - s.z.avail_out;
    const std::uint64_t from = s.position;
    s.position += produced;
    inflated_ += produced;
    passed(s, out + (length - left), from);
    left -= produced;
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

void InflatedSource::keep(std::unique_ptr<State> s) const {
  const std::lock_guard lock(mutex_);
  if (s->position == size_) return;  // at the end: nothing more to read with it
  if (idle_.size() == states_per_source) {
    idle_.erase(idle_.begin());  // the least recently used
    --kept_states;
  }
  if (kept_states >= max_kept_states) return;  // freed: too many kept in the process
  idle_.push_back(std::move(s));
  ++kept_states;
}

void InflatedSource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  if (verdict_ == Verdict::corrupt) fail_crc();
  std::unique_ptr<State> s;
  {
    const std::lock_guard lock(mutex_);
    s = state_for(offset);
  }
  // Skip to `offset` through the state's scratch buffer, then inflate straight into `out`.
  while (s->position < offset) {
    inflate_into(
        *s, s->skip.data(),
        static_cast<std::size_t>(std::min<std::uint64_t>(s->skip.size(), offset - s->position)));
  }
  inflate_into(*s, out.data(), out.size());
  keep(std::move(s));
  if (verdict_ == Verdict::corrupt) fail_crc();
}

void InflatedSource::verify(std::uint64_t offset, std::uint64_t length) const {
  require_range(offset, length);
  if (verdict_ == Verdict::unknown) {
    std::byte last{};
    read_in_range(size_ - 1, std::span(&last, 1));  // inflates to the end, from the furthest point
  }
  if (verdict_ == Verdict::corrupt) fail_crc();
}

}  // namespace ckptfs
