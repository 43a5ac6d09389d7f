// SPDX-License-Identifier: MIT
// dequantize()'s AVX2 kernels: the block's small integers widened 8 at a time to float32, then
// the same float32 operations as the scalar kernels, in the same order (a product, then a
// difference or a sum), so that every value has the same bits. The formats most files use (the
// K-quants, Q8_0, Q4_0...; IQ4_NL, IQ4_XS, MXFP4); the rest go to the scalar kernels.
#include "dequantize_kernels.hpp"

#if defined(__x86_64__)

#include <immintrin.h>

#include <cmath>

// Only these functions are compiled for AVX2 (see convert_x86.cpp for why not the whole file).
#define CKPTFS_AVX2 __attribute__((target("avx2,f16c")))

namespace ckptfs::detail {
namespace {

using u8 = std::uint8_t;

CKPTFS_AVX2 inline __m256i load32(const u8* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
CKPTFS_AVX2 inline __m128i load16(const u8* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Bytes >> shift, each byte on its own (shift < 8), masked.
CKPTFS_AVX2 inline __m256i shift_mask(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                          _mm256_set1_epi8(static_cast<char>(mask)));
}

// 16 bytes' low nibbles (values 0-15), then their high nibbles (16-31), as 32 bytes.
CKPTFS_AVX2 inline __m256i nibbles(const u8* p) {
  const __m128i v = load16(p);
  const __m128i low = _mm_and_si128(v, _mm_set1_epi8(0x0f));
  const __m128i high = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0f));
  return _mm256_set_m128i(high, low);
}

// 32 bits as 32 bytes, 0xff where the bit is set (byte j: bit j).
CKPTFS_AVX2 inline __m256i bit_bytes(std::uint32_t bits) {
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i mask = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

// The 4 groups of 8 bytes of `v` widened to float32, signed or not.
struct Widened {
  __m256 f[4];
};
CKPTFS_AVX2 inline Widened widen(__m256i v, bool is_signed) {
  const __m128i lo = _mm256_castsi256_si128(v);
  const __m128i hi = _mm256_extracti128_si256(v, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  Widened w;
  for (int i = 0; i < 4; ++i) {
    w.f[i] = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(parts[i])
                                          : _mm256_cvtepu8_epi32(parts[i]));
  }
  return w;
}

CKPTFS_AVX2 inline void store(float* y, __m256 v) { _mm256_storeu_ps(y, v); }

// 32 values: s × q, the first 16 with s0, the next with s1 (q signed bytes).
CKPTFS_AVX2 inline void scaled(__m256i q, float s0, float s1, float* y) {
  const Widened w = widen(q, true);
  const __m256 a = _mm256_set1_ps(s0), b = _mm256_set1_ps(s1);
  store(y, _mm256_mul_ps(a, w.f[0]));
  store(y + 8, _mm256_mul_ps(a, w.f[1]));
  store(y + 16, _mm256_mul_ps(b, w.f[2]));
  store(y + 24, _mm256_mul_ps(b, w.f[3]));
}

// 32 values: s × q − m, per 16 (q unsigned bytes).
CKPTFS_AVX2 inline void scaled_minus(__m256i q, float s0, float s1, float m0, float m1, float* y) {
  const Widened w = widen(q, false);
  const __m256 a = _mm256_set1_ps(s0), b = _mm256_set1_ps(s1);
  const __m256 ma = _mm256_set1_ps(m0), mb = _mm256_set1_ps(m1);
  store(y, _mm256_sub_ps(_mm256_mul_ps(a, w.f[0]), ma));
  store(y + 8, _mm256_sub_ps(_mm256_mul_ps(a, w.f[1]), ma));
  store(y + 16, _mm256_sub_ps(_mm256_mul_ps(b, w.f[2]), mb));
  store(y + 24, _mm256_sub_ps(_mm256_mul_ps(b, w.f[3]), mb));
}

// 32 values: (d × q) + m, a NaN product kept as numpy keeps it (scaled_plus()).
CKPTFS_AVX2 inline void scaled_plus32(__m256i q, float d, float m, float* y) {
  const Widened w = widen(q, false);
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  for (int i = 0; i < 4; ++i) {
    const __m256 p = _mm256_mul_ps(dv, w.f[i]);
    store(y + 8 * i, _mm256_blendv_ps(_mm256_add_ps(p, mv), p, _mm256_cmp_ps(p, p, _CMP_UNORD_Q)));
  }
}

// The 16 values of a table, looked up by 32 nibbles (bytes 0-15).
CKPTFS_AVX2 inline __m256i lookup(const std::array<std::int8_t, 16>& table, __m256i nibbles) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table.data()));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles);
}

CKPTFS_AVX2 void q4_0(const u8* x, float* y) {
  const float d = half_at(x);
  scaled(_mm256_sub_epi8(nibbles(x + 2), _mm256_set1_epi8(8)), d, d, y);
}

CKPTFS_AVX2 void q4_1(const u8* x, float* y) {
  scaled_plus32(nibbles(x + 4), half_at(x), half_at(x + 2), y);
}

CKPTFS_AVX2 void q5_0(const u8* x, float* y) {
  const __m256i high = _mm256_and_si256(bit_bytes(le32(x + 2)), _mm256_set1_epi8(0x10));
  const float d = half_at(x);
  scaled(_mm256_sub_epi8(_mm256_or_si256(nibbles(x + 6), high), _mm256_set1_epi8(16)), d, d, y);
}

CKPTFS_AVX2 void q5_1(const u8* x, float* y) {
  const __m256i high = _mm256_and_si256(bit_bytes(le32(x + 4)), _mm256_set1_epi8(0x10));
  scaled_plus32(_mm256_or_si256(nibbles(x + 8), high), half_at(x), half_at(x + 2), y);
}

CKPTFS_AVX2 void q8_0(const u8* x, float* y) {
  // numpy's x × d; a product has one NaN operand at most, so the order gives the same bits.
  const float d = half_at(x);
  scaled(load32(x + 2), d, d, y);
}

CKPTFS_AVX2 void q2_k(const u8* x, float* y) {
  const u8* scales = x;
  const float d = half_at(x + 80);
  const float dmin = half_at(x + 82);
  float dl[16], ml[16];
  for (int g = 0; g < 16; ++g) {
    dl[g] = d * static_cast<float>(scales[g] & 0xf);
    ml[g] = dmin * static_cast<float>(scales[g] >> 4);
  }
  for (int c = 0; c < 2; ++c) {
    const __m256i qs = load32(x + 16 + 32 * c);
    for (int s = 0; s < 4; ++s) {
      const int g = c * 8 + s * 2;
      scaled_minus(shift_mask(qs, 2 * s, 3), dl[g], dl[g + 1], ml[g], ml[g + 1],
                   y + c * 128 + s * 32);
    }
  }
}

CKPTFS_AVX2 void q3_k(const u8* x, float* y) {
  const u8* sc = x + 96;
  const float d = half_at(x + 108);
  float dl[16];
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? sc[g] & 0xf : sc[g - 8] >> 4;
    const int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    dl[g] = d * static_cast<float>(static_cast<std::int8_t>(low | high << 4) - 32);
  }
  const __m256i hmask = load32(x);
  for (int c = 0; c < 2; ++c) {
    const __m256i qs = load32(x + 32 + 32 * c);
    for (int s = 0; s < 4; ++s) {
      const __m256i low = shift_mask(qs, 2 * s, 3);
      // 4 where hmask's bit is clear: the offset is zero when it is set.
      const __m256i clear =
          _mm256_andnot_si256(shift_mask(hmask, c * 4 + s, 1), _mm256_set1_epi8(1));
      const __m256i q = _mm256_sub_epi8(low, _mm256_slli_epi16(clear, 2));
      const int g = c * 8 + s * 2;
      scaled(q, dl[g], dl[g + 1], y + c * 128 + s * 32);
    }
  }
}

CKPTFS_AVX2 void k_scales8(const u8* x, float d, float dmin, float* dd, float* dm) {
  const u8* s = x + 4;
  for (unsigned j = 0; j < 8; ++j) {
    unsigned scale = 0, min = 0;
    if (j < 4) {
      scale = s[j] & 63u;
      min = s[j + 4] & 63u;
    } else {
      scale = (s[j + 4] & 0xfu) | ((s[j - 4] >> 2) & 0x30u);
      min = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30u);
    }
    dd[j] = d * static_cast<float>(scale);
    dm[j] = dmin * static_cast<float>(min);
  }
}

CKPTFS_AVX2 void q4_k(const u8* x, float* y) {
  float dd[8], dm[8];
  k_scales8(x, half_at(x), half_at(x + 2), dd, dm);
  for (int g = 0; g < 8; ++g) {
    const __m256i q = shift_mask(load32(x + 16 + (g / 2) * 32), 4 * (g % 2), 0xf);
    scaled_minus(q, dd[g], dd[g], dm[g], dm[g], y + g * 32);
  }
}

CKPTFS_AVX2 void q5_k(const u8* x, float* y) {
  float dd[8], dm[8];
  k_scales8(x, half_at(x), half_at(x + 2), dd, dm);
  const __m256i qh = load32(x + 16);
  for (int g = 0; g < 8; ++g) {
    const __m256i low = shift_mask(load32(x + 48 + (g / 2) * 32), 4 * (g % 2), 0xf);
    const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(shift_mask(qh, g, 1), 4));
    scaled_minus(q, dd[g], dd[g], dm[g], dm[g], y + g * 32);
  }
}

CKPTFS_AVX2 void q6_k(const u8* x, float* y) {
  const u8* sc = x + 192;
  const float d = half_at(x + 208);
  float dl[16];
  for (int g = 0; g < 16; ++g) dl[g] = d * static_cast<float>(static_cast<std::int8_t>(sc[g]));
  for (int c = 0; c < 2; ++c) {
    const __m256i qh = load32(x + 128 + c * 32);
    for (int r = 0; r < 128; r += 32) {
      const __m256i low = shift_mask(load32(x + c * 64 + r % 64), 4 * (r / 64), 0xf);
      const __m256i high = _mm256_slli_epi16(shift_mask(qh, 2 * (r / 32), 3), 4);
      const __m256i q = _mm256_sub_epi8(_mm256_or_si256(low, high), _mm256_set1_epi8(32));
      const int g = (c * 128 + r) / 16;
      scaled(q, dl[g], dl[g + 1], y + c * 128 + r);
    }
  }
}

CKPTFS_AVX2 void iq4_nl(const u8* x, float* y) {
  const float d = half_at(x);
  scaled(lookup(iq4nl_values, nibbles(x + 2)), d, d, y);
}

CKPTFS_AVX2 void iq4_xs(const u8* x, float* y) {
  const float d = half_at(x);
  const std::uint16_t scales_h = le16(x + 2);
  for (unsigned g = 0; g < 8; ++g) {
    const unsigned low = (x[4 + g / 2] >> (4 * (g % 2))) & 0xfu;
    const unsigned high = (scales_h >> (2 * g)) & 3u;
    const float dl = d * static_cast<float>(static_cast<std::int8_t>(low | high << 4) - 32);
    scaled(lookup(iq4nl_values, nibbles(x + 8 + g * 16)), dl, dl, y + g * 32);
  }
}

CKPTFS_AVX2 void mxfp4(const u8* x, float* y) {
  const std::uint32_t e = x[0];
  const float d = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  scaled(lookup(e2m1_values, nibbles(x + 1)), d, d, y);
}

using Kernel = void (*)(const u8*, float*);

Kernel avx2_kernel(BlockFormat format) noexcept {
  switch (format) {
    case BlockFormat::q4_0:
      return q4_0;
    case BlockFormat::q4_1:
      return q4_1;
    case BlockFormat::q5_0:
      return q5_0;
    case BlockFormat::q5_1:
      return q5_1;
    case BlockFormat::q8_0:
      return q8_0;
    case BlockFormat::q2_k:
      return q2_k;
    case BlockFormat::q3_k:
      return q3_k;
    case BlockFormat::q4_k:
      return q4_k;
    case BlockFormat::q5_k:
      return q5_k;
    case BlockFormat::q6_k:
      return q6_k;
    case BlockFormat::iq4_nl:
      return iq4_nl;
    case BlockFormat::iq4_xs:
      return iq4_xs;
    case BlockFormat::mxfp4:
      return mxfp4;
    default:
      return nullptr;
  }
}

}  // namespace

void dequantize_avx2(BlockFormat format, const std::byte* in, std::byte* out,
                     std::size_t blocks) noexcept {
  const Kernel kernel = avx2_kernel(format);
  if (kernel == nullptr) return dequantize_scalar(format, in, out, blocks);
  const BlockFormatInfo& b = info(format);
  // x86 is little-endian: the values are written where they go, as float32.
  for (std::size_t i = 0; i < blocks; ++i) {
    kernel(reinterpret_cast<const u8*>(in) + i * b.block_bytes,
           reinterpret_cast<float*>(out + i * b.block_elements * sizeof(float)));
  }
}

}  // namespace ckptfs::detail

#endif
