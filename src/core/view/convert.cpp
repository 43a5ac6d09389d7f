// SPDX-License-Identifier: MIT
// convert(): the portable scalar kernels, the choice of code path, and the read-window helpers.
#include <ckptfs/view/convert.hpp>

#include <ckptfs/base/cpu_features.hpp>

#include "convert_kernels.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace ckptfs {
namespace {

bool is_float_source(DType d) {
  return d == DType::float16 || d == DType::bfloat16 || d == DType::float32 || d == DType::float64;
}
bool is_float_target(DType d) {
  return d == DType::float16 || d == DType::bfloat16 || d == DType::float32;
}

inline std::uint8_t byteswap(std::uint8_t v) { return v; }
inline std::uint16_t byteswap(std::uint16_t v) { return __builtin_bswap16(v); }
inline std::uint32_t byteswap(std::uint32_t v) { return __builtin_bswap32(v); }
inline std::uint64_t byteswap(std::uint64_t v) { return __builtin_bswap64(v); }

template <class U, bool big_endian>
U load(const std::byte* p) {
  U v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (big_endian != (std::endian::native == std::endian::big)) v = byteswap(v);
  return v;
}

template <class U>
void store_little(std::byte* p, U v) {
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  std::memcpy(p, &v, sizeof v);
}

// v / 2^shift rounded to nearest, ties to even; 0 < shift < 64.
inline std::uint64_t shift_round_even(std::uint64_t v, unsigned shift) {
  const std::uint64_t q = v >> shift;
  const std::uint64_t rem = v & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1) != 0)) ? 1 : 0);
}

// The element conversions, on bit patterns. Rounding by integer arithmetic, so that the result
// does not depend on the CPU or its floating-point environment. Inlined by force: GCC's -O2
// otherwise makes some of them a call per element.

[[gnu::always_inline]] inline std::uint32_t f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent - 1 < 30) return sign | ((exponent + 112) << 23) | (mantissa << 13);  // normal
  if (exponent == 0x1f) {  // inf, or NaN: quieted, payload kept (what F16C and torch do)
    return mantissa == 0 ? sign | 0x7f800000u : sign | 0x7fc00000u | (mantissa << 13);
  }
  if (mantissa == 0) return sign;
  // A subnormal m * 2^-24 is normal in float32: its leading bit p becomes the implicit one.
  const auto p = static_cast<std::uint32_t>(std::bit_width(mantissa)) - 1;
  return sign | ((p + 103) << 23) | ((mantissa << (23 - p)) & 0x7fffffu);
}

[[gnu::always_inline]] inline std::uint32_t bf16_to_f32(std::uint16_t b) {
  return std::uint32_t{b} << 16;
}

[[gnu::always_inline]] inline std::uint16_t f32_to_f16(std::uint32_t x) {
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN: torch drops the payload
  if (a >= 0x47800000u) return sign | 0x7c00u;  // >= 2^16 or inf
  if (a >= 0x38800000u) {                       // >= 2^-14: normal in float16
    // Rebias the exponent (127 -> 15) and round off 13 bits; a carry out of the mantissa
    // correctly bumps the exponent, up to inf for [65520, 65536).
    const std::uint32_t m = a - 0x38000000u;
    return static_cast<std::uint16_t>(sign | ((m + 0x0fffu + ((m >> 13) & 1u)) >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25, half the least subnormal: a tie goes to 0
  // A float16 subnormal: the value in units of 2^-24 is mantissa * 2^(e - 126).
  const std::uint32_t e = a >> 23;  // 102..112
  const std::uint64_t mantissa = (a & 0x7fffffu) | 0x800000u;
  return static_cast<std::uint16_t>(sign | shift_round_even(mantissa, 126 - e));
}

// float32 -> bfloat16, round to nearest even; NaN gives `nan` (torch: 0xffff from its vector
// code, 0x7fc0 from its scalar code, which float16 -> bfloat16 always takes).
[[gnu::always_inline]] inline std::uint16_t f32_to_bf16(std::uint32_t x, std::uint16_t nan) {
  if ((x & 0x7fffffffu) > 0x7f800000u) return nan;
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

[[gnu::always_inline]] inline std::uint32_t f64_to_f32(std::uint64_t d) {
  const auto sign = static_cast<std::uint32_t>((d >> 32) & 0x80000000u);
  const std::uint64_t a = d & 0x7fffffffffffffffu;
  if (a > 0x7ff0000000000000u) {  // NaN: quieted, the top 23 payload bits kept (as x86 does)
    return sign | 0x7fc00000u | static_cast<std::uint32_t>((d >> 29) & 0x7fffffu);
  }
  if (a >= 0x47f0000000000000u) return sign | 0x7f800000u;  // >= 2^128 or inf
  if (a >= 0x3810000000000000u) {  // >= 2^-126: normal in float32; rebias 1023 -> 127
    const std::uint64_t m = a - 0x3800000000000000u;
    return sign | static_cast<std::uint32_t>((m + 0x0fffffffu + ((m >> 29) & 1u)) >> 29);
  }
  if (a <= 0x3690000000000000u) return sign;  // <= 2^-150: a tie goes to 0
  // A float32 subnormal: the value in units of 2^-149 is mantissa * 2^(e - 926).
  const auto e = static_cast<unsigned>(a >> 52);  // 873..896
  const std::uint64_t mantissa = (a & 0xfffffffffffffu) | 0x10000000000000u;
  return sign | static_cast<std::uint32_t>(shift_round_even(mantissa, 926 - e));
}

// One loop per byte order, so that the order is not tested per element.
template <class In, class Out, class Fn>
void scalar_loop(const std::byte* in, std::byte* out, std::size_t count, bool big_endian, Fn fn) {
  if (big_endian) {
    for (std::size_t i = 0; i < count; ++i) {
      store_little<Out>(out + i * sizeof(Out), fn(load<In, true>(in + i * sizeof(In))));
    }
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      store_little<Out>(out + i * sizeof(Out), fn(load<In, false>(in + i * sizeof(In))));
    }
  }
}

constexpr std::uint16_t bf16_nan_vector = 0xffff;  // torch's NaN from float32 and float64
constexpr std::uint16_t bf16_nan_scalar = 0x7fc0;  // torch's NaN from float16

// Pairs are numbered from * 4 + to, by the index of each dtype in {f16, bf16, f32, f64}.
constexpr int float_index(DType d) {
  switch (d) {
    case DType::float16:
      return 0;
    case DType::bfloat16:
      return 1;
    case DType::float32:
      return 2;
    default:
      return 3;
  }
}
constexpr int pair(DType from, DType to) { return float_index(from) * 4 + float_index(to); }

bool is_integer_source(DType d) {
  switch (d) {
    case DType::int8:
    case DType::int16:
    case DType::int32:
    case DType::int64:
    case DType::uint8:
    case DType::uint16:
    case DType::uint32:
    case DType::uint64:
    case DType::boolean:
      return true;
    default:
      return false;
  }
}

// Integers and bool to float32 as torch's .float() gives them: the C++ conversion, which rounds
// to nearest, ties to even, in the default floating-point environment.
template <class I>
void integers_to_f32(const std::byte* in, std::byte* out, std::size_t n, bool big) {
  using U = std::make_unsigned_t<I>;
  scalar_loop<U, std::uint32_t>(in, out, n, big, [](U v) {
    return std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<I>(v)));
  });
}

void integer_to_f32(DType from, bool big, const std::byte* in, std::byte* out, std::size_t n) {
  switch (from) {
    case DType::int8:
      return integers_to_f32<std::int8_t>(in, out, n, big);
    case DType::int16:
      return integers_to_f32<std::int16_t>(in, out, n, big);
    case DType::int32:
      return integers_to_f32<std::int32_t>(in, out, n, big);
    case DType::int64:
      return integers_to_f32<std::int64_t>(in, out, n, big);
    case DType::uint8:
      return integers_to_f32<std::uint8_t>(in, out, n, big);
    case DType::uint16:
      return integers_to_f32<std::uint16_t>(in, out, n, big);
    case DType::uint32:
      return integers_to_f32<std::uint32_t>(in, out, n, big);
    case DType::uint64:
      return integers_to_f32<std::uint64_t>(in, out, n, big);
    case DType::boolean:
      return scalar_loop<std::uint8_t, std::uint32_t>(in, out, n, big, [](std::uint8_t v) {
        return std::bit_cast<std::uint32_t>(v != 0 ? 1.0f : 0.0f);
      });
    default:
      return;
  }
}

}  // namespace

namespace detail {

void convert_scalar(DType from, DType to, bool big, const std::byte* in, std::byte* out,
                    std::size_t n) noexcept {
  using U16 = std::uint16_t;
  using U32 = std::uint32_t;
  using U64 = std::uint64_t;
  constexpr DType f16 = DType::float16, bf16 = DType::bfloat16, f32 = DType::float32,
                  f64 = DType::float64;
  if (from == to && big == (std::endian::native == std::endian::big)) {
    std::memcpy(out, in, n * info(from).element_size);  // nothing to convert or swap
    return;
  }
  switch (pair(from, to)) {
    case pair(f16, f16):
    case pair(bf16, bf16):
      return scalar_loop<U16, U16>(in, out, n, big, [](U16 v) { return v; });
    case pair(f32, f32):
      return scalar_loop<U32, U32>(in, out, n, big, [](U32 v) { return v; });
    case pair(f16, bf16):
      return scalar_loop<U16, U16>(
          in, out, n, big, [](U16 v) { return f32_to_bf16(f16_to_f32(v), bf16_nan_scalar); });
    case pair(f16, f32):
      return scalar_loop<U16, U32>(in, out, n, big, [](U16 v) { return f16_to_f32(v); });
    case pair(bf16, f16):
      return scalar_loop<U16, U16>(in, out, n, big,
                                   [](U16 v) { return f32_to_f16(bf16_to_f32(v)); });
    case pair(bf16, f32):
      return scalar_loop<U16, U32>(in, out, n, big, [](U16 v) { return bf16_to_f32(v); });
    case pair(f32, f16):
      return scalar_loop<U32, U16>(in, out, n, big, [](U32 v) { return f32_to_f16(v); });
    case pair(f32, bf16):
      return scalar_loop<U32, U16>(in, out, n, big,
                                   [](U32 v) { return f32_to_bf16(v, bf16_nan_vector); });
    // float64 -> float16 and bfloat16 round twice, through float32, as torch does.
    case pair(f64, f16):
      return scalar_loop<U64, U16>(in, out, n, big,
                                   [](U64 v) { return f32_to_f16(f64_to_f32(v)); });
    case pair(f64, bf16):
      return scalar_loop<U64, U16>(
          in, out, n, big, [](U64 v) { return f32_to_bf16(f64_to_f32(v), bf16_nan_vector); });
    case pair(f64, f32):
      return scalar_loop<U64, U32>(in, out, n, big, [](U64 v) { return f64_to_f32(v); });
    default:
      return;  // not convertible(): a precondition violation, nothing written
  }
}

bool convert_path_available(ConvertPath path) noexcept {
  switch (path) {
    case ConvertPath::scalar:
      return true;
    case ConvertPath::avx2:
      return cpu_has_avx2_f16c();
  }
  return false;
}

ConvertPath convert_best_path() noexcept {
  static const ConvertPath best =
      convert_path_available(ConvertPath::avx2) ? ConvertPath::avx2 : ConvertPath::scalar;
  return best;
}

void convert_with(ConvertPath path, DType from, DType to, bool source_big_endian,
                  const std::byte* in, std::byte* out, std::size_t count) noexcept {
  if (is_integer_source(from) && to == DType::float32) {
    return integer_to_f32(from, source_big_endian, in, out, count);  // one path: scalar
  }
  if (!convertible(from, to)) return;
#if defined(__x86_64__)
  if (path == ConvertPath::avx2) return convert_avx2(from, to, source_big_endian, in, out, count);
#endif
  (void)path;
  convert_scalar(from, to, source_big_endian, in, out, count);
}

}  // namespace detail

bool convertible(DType from, DType to) noexcept {
  return is_float_source(from) && is_float_target(to);
}

void convert(DType from, DType to, bool source_big_endian, const std::byte* in, std::byte* out,
             std::size_t count) noexcept {
  detail::convert_with(detail::convert_best_path(), from, to, source_big_endian, in, out, count);
}

void Conversion::run(const std::byte* in, std::byte* out, std::size_t count) const noexcept {
  if (!via) return convert(from, to, source_big_endian, in, out, count);
  // Through `via`, a chunk at a time: 16 KiB of float32 (or of anything smaller) on the stack.
  constexpr std::size_t chunk_bytes = 16 * 1024;
  alignas(64) std::array<std::byte, chunk_bytes> between;
  const std::size_t in_size = info(from).element_size;
  const std::size_t via_size = info(*via).element_size;
  const std::size_t out_size = info(to).element_size;
  const std::size_t per_chunk = chunk_bytes / via_size;
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(per_chunk, count - done);
    convert(from, *via, source_big_endian, in + done * in_size, between.data(), n);
    convert(*via, to, false, between.data(), out + done * out_size, n);
    done += n;
  }
}

std::uint64_t converted_size(DType from, DType to, std::uint64_t source_nbytes) noexcept {
  return source_nbytes / info(from).element_size * info(to).element_size;
}

ConvertWindow convert_window(DType from, DType to, std::uint64_t offset,
                             std::uint64_t length) noexcept {
  ConvertWindow w;
  if (length == 0) return w;
  const std::uint64_t out_size = info(to).element_size;
  const std::uint64_t in_size = info(from).element_size;
  w.first = offset / out_size;
  w.skip = static_cast<std::uint32_t>(offset % out_size);
  // Written so that offset + length cannot overflow.
  w.count = (w.skip + length + out_size - 1) / out_size;
  w.source_offset = w.first * in_size;
  w.source_length = w.count * in_size;
  return w;
}

std::span<std::byte, convert_staging_bytes> convert_staging() {
  // Allocated on a thread's first use: a thread_local array would be static TLS, zeroed by the
  // C library for every thread of the process, converting or not.
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  thread_local std::unique_ptr<std::byte[], AlignedDelete> staging;
  if (!staging) staging.reset(new (std::align_val_t{64}) std::byte[convert_staging_bytes]);
  return std::span<std::byte, convert_staging_bytes>(staging.get(), convert_staging_bytes);
}

}  // namespace ckptfs
