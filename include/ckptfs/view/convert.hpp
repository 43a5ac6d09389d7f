// SPDX-License-Identifier: MIT
// Floating-point dtype conversion on read, bit for bit as torch 1.13's Tensor.to(dtype) on CPU.
#pragma once

#include <ckptfs/model/dtype.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <utility>

namespace ckptfs {

// Whether convert() handles `from` -> `to`: `from` is float16, bfloat16, float32 or float64 and
// `to` is float16, bfloat16 or float32 (identity pairs included). Every other dtype (integers,
// bool, complex, float8...) is served as stored, never converted.
bool convertible(DType from, DType to) noexcept;
// convert() also handles what stored_convertible() (model/dtype.hpp) allows a tensor stored in
// another dtype than it is served in: integers and bool to float32, as torch's .float()
// converts them. -o dtype never converts those.

// Converts `count` elements of dtype `from` at `in` to dtype `to` at `out`, which is always
// little-endian; `source_big_endian`: the elements at `in` are big-endian (swapped on the way in).
// Precondition: stored_convertible(from, to); `in` holds count * size(from) bytes and `out` room
// for count * size(to), any alignment, not overlapping. Thread-safe, allocation-free.
//
// The result is torch 1.13's `.to(to)` of the same tensor on an AVX2 CPU (torch's default
// there), on every machine and with either code path below:
//  - finite values round to nearest, ties to even; a value too large for `to` becomes +-inf;
//    subnormals are kept (in and out); +-0 keeps its sign.
//  - float64 -> float16 and float64 -> bfloat16 round twice, through float32, as torch does
//    (1 + 2^-11 + 2^-40 gives float16 1.0, not 1 + 2^-10).
//  - NaN, as torch writes it:
//      float32 or float64 -> bfloat16         0xffff, whatever the sign and payload
//      float16 -> bfloat16                    0x7fc0, whatever the sign and payload
//      float32, float64, bfloat16 -> float16  sign | 0x7e00 (payload dropped)
//      float16 -> float32                     sign | 0x7fc00000 | payload << 13 (quieted)
//      float64 -> float32                     sign | 0x7fc00000 | top 23 payload bits (quieted)
//      bfloat16 -> float32                    its bits << 16 (a signalling NaN stays signalling)
//      identity pairs                         the same bits (swapped from a big-endian source)
//    One choice: torch 1.13 itself converts a float64 NaN to bfloat16 as 0xffff in its vector
//    loop but 0x7fc0 in its scalar remainder (the last count % 16 elements of a contiguous
//    tensor, or every element of a tensor under 16); we always give 0xffff, what most elements
//    of any real tensor get and what float32 -> bfloat16 gives at every size.
// Assumes the default floating-point environment (no flush-to-zero or denormals-are-zero), as
// torch does; nothing in ckptfs changes it.
void convert(DType from, DType to, bool source_big_endian, const std::byte* in, std::byte* out,
             std::size_t count) noexcept;

// A conversion from `from` to `to`, through `via` when set (each step rounding as convert()
// does: torch's x.float().to(to) of a tensor stored as `from`).
struct Conversion {
  DType from = DType::float32;
  DType to = DType::float32;
  std::optional<DType> via;
  bool source_big_endian = false;
  // convert() of `count` elements, through `via` a few thousand at a time (a buffer on the
  // stack). Preconditions: convert()'s for each step.
  void run(const std::byte* in, std::byte* out, std::size_t count) const noexcept;
};

// The byte size of a converted tensor whose source is `source_nbytes` bytes of dtype `from`.
std::uint64_t converted_size(DType from, DType to, std::uint64_t source_nbytes) noexcept;

// What a read of converted bytes [offset, offset + length) needs from the source: the whole
// elements it touches. Offsets are relative to the tensor's first byte, in the source and in
// the converted tensor. length 0 gives count 0.
//   float32 -> float16, offset 3, length 4: elements 1..3 (count 3), source bytes [4, 16),
//   skip 1 (converted bytes [2, 8) hold them; the read starts 1 byte into that).
struct ConvertWindow {
  std::uint64_t first = 0;          // index of the first element touched
  std::uint64_t count = 0;          // elements touched
  std::uint64_t source_offset = 0;  // first * size(from)
  std::uint64_t source_length = 0;  // count * size(from)
  std::uint32_t skip = 0;           // offset - first * size(to): bytes of element `first` before
                                    // the read starts
};
ConvertWindow convert_window(DType from, DType to, std::uint64_t offset,
                             std::uint64_t length) noexcept;

// The staging buffer of read_converted(): this thread's, convert_staging_bytes long, 64-byte
// aligned, allocated on the thread's first call (throws std::bad_alloc if it cannot be) and
// freed when the thread ends. It bounds the memory a converted read uses whatever the tensor's
// size; 64 KiB stays in L2 and costs one pread per 64 KiB of source (larger buffers measured no
// faster).
inline constexpr std::size_t convert_staging_bytes = 64 * 1024;
std::span<std::byte, convert_staging_bytes> convert_staging();

// Fills `out` with the converted bytes [offset, offset + out.size()) of a tensor, reading its
// source elements with `read_source(source_offset, std::span<std::byte> into)` (source_offset
// relative to the tensor's first source byte; it fills `into` or throws) a staging buffer at a
// time: at most convert_staging_bytes of source bytes per call. Precondition: `conversion`'s
// steps are stored_convertible() and the range lies inside the converted tensor. Throws what
// read_source throws, and std::bad_alloc if the staging buffer cannot be allocated. Not
// reentrant within one thread (read_source must not call it): it uses convert_staging().
template <class ReadSource>
void read_converted(const Conversion& conversion, std::uint64_t offset, std::span<std::byte> out,
                    ReadSource&& read_source) {
  if (out.empty()) return;
  const DType from = conversion.from, to = conversion.to;
  const std::size_t in_size = info(from).element_size;
  const std::size_t out_size = info(to).element_size;
  const ConvertWindow window = convert_window(from, to, offset, out.size());
  const std::span<std::byte, convert_staging_bytes> staging = convert_staging();
  std::uint64_t element = window.first;
  std::byte* dst = out.data();
  std::size_t left = out.size();
  // A partial element at either end is converted into `one` and only its wanted bytes copied.
  auto partial = [&](std::size_t skip) {
    std::array<std::byte, 8> one{};
    read_source(element * in_size, staging.first(in_size));
    conversion.run(staging.data(), one.data(), 1);
    const std::size_t n = std::min(out_size - skip, left);
    std::memcpy(dst, one.data() + skip, n);
    dst += n;
    left -= n;
    ++element;
  };
  if (window.skip != 0 || left < out_size) partial(window.skip);
  const std::size_t per_step = convert_staging_bytes / in_size;
  while (left >= out_size) {
    const std::size_t n = std::min(per_step, left / out_size);
    read_source(element * in_size, staging.first(n * in_size));
    conversion.run(staging.data(), dst, n);
    dst += n * out_size;
    left -= n * out_size;
    element += n;
  }
  if (left != 0) partial(0);
}

// The same for one conversion step.
template <class ReadSource>
void read_converted(DType from, DType to, bool source_big_endian, std::uint64_t offset,
                    std::span<std::byte> out, ReadSource&& read_source) {
  read_converted(Conversion{from, to, std::nullopt, source_big_endian}, offset, out,
                 std::forward<ReadSource>(read_source));
}

namespace detail {

// The code paths of convert(), for the tests and the benchmark, which run each one on the same
// input; convert() takes the fastest one this CPU has. All give the same bits.
enum class ConvertPath : std::uint8_t {
  scalar,  // portable C++, integer arithmetic (any CPU)
  avx2,    // AVX2 + F16C, 8 elements a step (x86-64 with both; else falls back to scalar)
};
// Whether `path` runs on this CPU (scalar always does).
bool convert_path_available(ConvertPath path) noexcept;
// The path convert() uses: the fastest available.
ConvertPath convert_best_path() noexcept;
// convert() through `path`; precondition: convert_path_available(path).
void convert_with(ConvertPath path, DType from, DType to, bool source_big_endian,
                  const std::byte* in, std::byte* out, std::size_t count) noexcept;

}  // namespace detail
}  // namespace ckptfs
