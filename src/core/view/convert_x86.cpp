// SPDX-License-Identifier: MIT
// convert()'s AVX2 + F16C kernels: 8 elements a step, the same bits as the scalar kernels.
#include "convert_kernels.hpp"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

// Only these functions are compiled for AVX2: a per-file -mavx2 would let the compiler emit AVX2
// in inline functions from headers too, and the linker might keep those copies for callers
// that run on CPUs without it.
#define CKPTFS_AVX2 __attribute__((target("avx2,f16c")))

namespace ckptfs::detail {
namespace {

// pshufb masks reversing each element's bytes (within 128-bit lanes, as elements never cross).
CKPTFS_AVX2 inline __m128i swap_mask16_128() {
  return _mm_setr_epi8(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
}
CKPTFS_AVX2 inline __m256i swap_mask(int element_size) {
  switch (element_size) {
    case 2:
      return _mm256_setr_epi8(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14,  //
                              1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    case 4:
      return _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12,  //
                              3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
    default:
      return _mm256_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8,  //
                              7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8);
  }
}

// Loads of 8 elements as 8 float32 lanes. `swap`: the source is big-endian.

CKPTFS_AVX2 inline __m128i load8_16bit(const std::byte* p, bool swap) {
  __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return swap ? _mm_shuffle_epi8(v, swap_mask16_128()) : v;
}

// F16C widening is exact; a NaN is quieted with its payload kept, as f16_to_f32 does.
CKPTFS_AVX2 inline __m256 load8_f16(const std::byte* p, bool swap) {
  return _mm256_cvtph_ps(load8_16bit(p, swap));
}

CKPTFS_AVX2 inline __m256 load8_bf16(const std::byte* p, bool swap) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load8_16bit(p, swap)), 16));
}

CKPTFS_AVX2 inline __m256 load8_f32(const std::byte* p, bool swap) {
  __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm256_castsi256_ps(swap ? _mm256_shuffle_epi8(v, swap_mask(4)) : v);
}

// cvtpd2ps rounds to nearest even (the default MXCSR) and converts a NaN the way f64_to_f32
// does: quieted, top payload bits kept.
CKPTFS_AVX2 inline __m256 load8_f64(const std::byte* p, bool swap) {
  __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  if (swap) {
    a = _mm256_shuffle_epi8(a, swap_mask(8));
    b = _mm256_shuffle_epi8(b, swap_mask(8));
  }
  return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_castsi256_pd(b)),
                         _mm256_cvtpd_ps(_mm256_castsi256_pd(a)));
}

// Stores of 8 float32 lanes as 8 elements.

// F16C rounds to nearest even, with subnormals and overflow to inf; only NaN needs care: torch
// writes sign | 0x7e00, which is what F16C makes of a NaN whose payload is cleared.
CKPTFS_AVX2 inline void store8_f16(std::byte* p, __m256 f) {
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  const __m256 quiet = _mm256_or_ps(
      _mm256_and_ps(f, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)))),
      _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)));
  const __m128i h = _mm256_cvtps_ph(_mm256_blendv_ps(f, quiet, nan), _MM_FROUND_TO_NEAREST_INT);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}

// bits + 0x7fff + (bit 16) rounds to nearest even in integer arithmetic; NaN gives `nan_bits`.
CKPTFS_AVX2 inline void store8_bf16(std::byte* p, __m256 f, int nan_bits) {
  const __m256i x = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(nan_bits), _mm256_castps_si256(nan));
  // Every lane is <= 0xffff, so the unsigned saturating pack is a plain narrowing.
  const __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}

CKPTFS_AVX2 inline void store8_f32(std::byte* p, __m256 f) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_castps_si256(f));
}

enum class Kind { f16, bf16, f32, f64 };

// One pair, 8 elements a step; returns how many it converted (the rest is left to the caller).
template <Kind From, Kind To>
CKPTFS_AVX2 std::size_t run(const std::byte* in, std::byte* out, std::size_t count, bool swap) {
  constexpr std::size_t in_size = From == Kind::f64 ? 8 : From == Kind::f32 ? 4 : 2;
  constexpr std::size_t out_size = To == Kind::f32 ? 4 : 2;
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const std::byte* src = in + i * in_size;
    __m256 f;
    if constexpr (From == Kind::f16) f = load8_f16(src, swap);
    if constexpr (From == Kind::bf16) f = load8_bf16(src, swap);
    if constexpr (From == Kind::f32) f = load8_f32(src, swap);
    if constexpr (From == Kind::f64) f = load8_f64(src, swap);
    std::byte* dst = out + i * out_size;
    if constexpr (To == Kind::f16) store8_f16(dst, f);
    // torch's NaN: 0x7fc0 from float16 (its scalar code), 0xffff otherwise (its vector code).
    if constexpr (To == Kind::bf16) store8_bf16(dst, f, From == Kind::f16 ? 0x7fc0 : 0xffff);
    if constexpr (To == Kind::f32) store8_f32(dst, f);
  }
  return i;
}

// Identity pairs from a big-endian source: reverse each element's bytes, 32 bytes a step.
CKPTFS_AVX2 std::size_t swap_bytes(const std::byte* in, std::byte* out, std::size_t count,
                                   int element_size) {
  const std::size_t per_step = 32 / static_cast<std::size_t>(element_size);
  const __m256i mask = swap_mask(element_size);
  std::size_t i = 0;
  for (; i + per_step <= count; i += per_step) {
    const std::size_t at = i * static_cast<std::size_t>(element_size);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + at));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + at), _mm256_shuffle_epi8(v, mask));
  }
  return i;
}

}  // namespace

void convert_avx2(DType from, DType to, bool big, const std::byte* in, std::byte* out,
                  std::size_t count) noexcept {
  std::size_t done = 0;
  if (from == to) {
    const int size = info(from).element_size;
    if (!big) {
      std::memcpy(out, in, count * static_cast<std::size_t>(size));
      return;
    }
    done = swap_bytes(in, out, count, size);
  } else {
    // Dispatch on the pair; the identity pairs were handled above.
    auto kind = [](DType d) {
      return d == DType::float16    ? Kind::f16
             : d == DType::bfloat16 ? Kind::bf16
             : d == DType::float32  ? Kind::f32
                                    : Kind::f64;
    };
    const Kind f = kind(from);
    const Kind t = kind(to);
#define CKPTFS_PAIR(F, T) \
  if (f == Kind::F && t == Kind::T) done = run<Kind::F, Kind::T>(in, out, count, big)
    CKPTFS_PAIR(f16, bf16);
    CKPTFS_PAIR(f16, f32);
    CKPTFS_PAIR(bf16, f16);
    CKPTFS_PAIR(bf16, f32);
    CKPTFS_PAIR(f32, f16);
    CKPTFS_PAIR(f32, bf16);
    CKPTFS_PAIR(f64, f16);
    CKPTFS_PAIR(f64, bf16);
    CKPTFS_PAIR(f64, f32);
#undef CKPTFS_PAIR
  }
  const std::size_t in_size = info(from).element_size;
  const std::size_t out_size = info(to).element_size;
  convert_scalar(from, to, big, in + done * in_size, out + done * out_size, count - done);
}

}  // namespace ckptfs::detail

#endif  // __x86_64__
