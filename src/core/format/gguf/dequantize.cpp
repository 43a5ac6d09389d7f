// SPDX-License-Identifier: MIT
// dequantize(): the portable kernels, one per block format, each value computed with numpy's
// float32 operations in gguf-py's order; the choice of code path; big-endian blocks' fields.
//
// Built with -ffp-contract=off (CMakeLists.txt): a multiply and an add fused into one rounding
// would change bits that numpy rounds twice.
#include "dequantize_kernels.hpp"

#include <ckptfs/base/cpu_features.hpp>
#include <ckptfs/format/gguf/dequantize.hpp>

#include <cmath>
#include <optional>
#include <utility>

namespace ckptfs {
namespace detail {
namespace {

using u8 = std::uint8_t;

// The IQ formats' values are (db × grid) × ±1, the sign from bit j of a sign byte. numpy's
// product by -1 is exact: the sign flipped, except for a NaN, returned as it is (quiet: the
// product of two floats). Written out as a flip of the sign bit (the compiler would make × -1 a
// negation, which flips a NaN's sign too). The grids' values are positive, so db × grid is NaN
// only when db is: `flip` is sign_flip(db), once per scale.
inline std::uint32_t sign_flip(float db) noexcept { return std::isnan(db) ? 0u : 0x80000000u; }
inline float signed_by(float x, unsigned byte, unsigned j, std::uint32_t flip) noexcept {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) ^ ((byte >> j & 1u) * flip));
}

// (d × q) + m as numpy adds them when both may be NaN: its add returns the first NaN operand, so
// a NaN product is the sum (see dequantize()).
inline float scaled_plus(float product, float m) noexcept {
  return std::isnan(product) ? product : product + m;
}

// The 4-bit scale and min pairs of Q4_K and Q5_K, 6 bits each, packed in 12 bytes.
inline void k_scales(const u8* s, unsigned j, unsigned& scale, unsigned& min) noexcept {
  if (j < 4) {
    scale = s[j] & 63u;
    min = s[j + 4] & 63u;
  } else {
    scale = (s[j + 4] & 0xfu) | ((s[j - 4] >> 2) & 0x30u);
    min = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30u);
  }
}

// One kernel per format: a block at x, its values into y.

void q4_0(const u8* x, float* y) {
  const float d = half_at(x);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((x[2 + j] & 0xf) - 8);
    y[j + 16] = d * static_cast<float>((x[2 + j] >> 4) - 8);
  }
}

void q4_1(const u8* x, float* y) {
  const float d = half_at(x);
  const float m = half_at(x + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = scaled_plus(d * static_cast<float>(x[4 + j] & 0xf), m);
    y[j + 16] = scaled_plus(d * static_cast<float>(x[4 + j] >> 4), m);
  }
}

void q5_0(const u8* x, float* y) {
  const float d = half_at(x);
  const std::uint32_t qh = le32(x + 2);
  for (int j = 0; j < 16; ++j) {
    const int low = (x[6 + j] & 0xf) | static_cast<int>((qh >> j & 1u) << 4);
    const int high = (x[6 + j] >> 4) | static_cast<int>((qh >> (j + 16) & 1u) << 4);
    y[j] = d * static_cast<float>(low - 16);
    y[j + 16] = d * static_cast<float>(high - 16);
  }
}

void q5_1(const u8* x, float* y) {
  const float d = half_at(x);
  const float m = half_at(x + 2);
  const std::uint32_t qh = le32(x + 4);
  for (int j = 0; j < 16; ++j) {
    const unsigned low = (x[8 + j] & 0xfu) | (qh >> j & 1u) << 4;
    const unsigned high = (x[8 + j] >> 4) | (qh >> (j + 16) & 1u) << 4;
    y[j] = scaled_plus(d * static_cast<float>(low), m);
    y[j + 16] = scaled_plus(d * static_cast<float>(high), m);
  }
}

void q8_0(const u8* x, float* y) {
  const float d = half_at(x);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(x[2 + j])) * d;
}

void q2_k(const u8* x, float* y) {
  const u8* scales = x;
  const u8* qs = x + 16;
  const float d = half_at(x + 80);
  const float dmin = half_at(x + 82);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * static_cast<float>(scales[g] & 0xf);
    const float ml = dmin * static_cast<float>(scales[g] >> 4);
    for (int k = 0; k < 16; ++k) {
      const int i = g * 16 + k;
      const int q = (qs[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
      y[i] = dl * static_cast<float>(q) - ml;
    }
  }
}

void q3_k(const u8* x, float* y) {
  const u8* hmask = x;
  const u8* qs = x + 32;
  const u8* sc = x + 96;
  const float d = half_at(x + 108);
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? sc[g] & 0xf : sc[g - 8] >> 4;
    const int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    const float dl = d * static_cast<float>(static_cast<std::int8_t>(low | high << 4) - 32);
    for (int k = 0; k < 16; ++k) {
      const int i = g * 16 + k;
      const int ql = (qs[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
      const int qh = (hmask[i % 32] >> (i / 32)) & 1;
      y[i] = dl * static_cast<float>(ql - ((qh ^ 1) << 2));
    }
  }
}

void q4_k(const u8* x, float* y) {
  const float d = half_at(x);
  const float dmin = half_at(x + 2);
  const u8* qs = x + 16;
  for (unsigned g = 0; g < 8; ++g) {
    unsigned scale = 0, min = 0;
    k_scales(x + 4, g, scale, min);
    const float dd = d * static_cast<float>(scale);
    const float dm = dmin * static_cast<float>(min);
    const u8* q = qs + (g / 2) * 32;
    const unsigned shift = 4 * (g % 2);
    for (int l = 0; l < 32; ++l) y[g * 32 + l] = dd * static_cast<float>(q[l] >> shift & 0xf) - dm;
  }
}

void q5_k(const u8* x, float* y) {
  const float d = half_at(x);
  const float dmin = half_at(x + 2);
  const u8* qh = x + 16;
  const u8* qs = x + 48;
  for (unsigned g = 0; g < 8; ++g) {
    unsigned scale = 0, min = 0;
    k_scales(x + 4, g, scale, min);
    const float dd = d * static_cast<float>(scale);
    const float dm = dmin * static_cast<float>(min);
    const u8* q = qs + (g / 2) * 32;
    const unsigned shift = 4 * (g % 2);
    for (int l = 0; l < 32; ++l) {
      const unsigned v = (q[l] >> shift & 0xfu) | (qh[l] >> g & 1u) << 4;
      y[g * 32 + l] = dd * static_cast<float>(v) - dm;
    }
  }
}

void q6_k(const u8* x, float* y) {
  const u8* ql = x;
  const u8* qh = x + 128;
  const u8* sc = x + 192;
  const float d = half_at(x + 208);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * static_cast<float>(static_cast<std::int8_t>(sc[g]));
    for (int k = 0; k < 16; ++k) {
      const int i = g * 16 + k;
      const int c = i / 128, r = i % 128;
      const int low = (ql[c * 64 + r % 64] >> (4 * (r / 64))) & 0xf;
      const int high = (qh[c * 32 + r % 32] >> (2 * (r / 32))) & 3;
      y[i] = dl * static_cast<float>(static_cast<std::int8_t>(low | high << 4) - 32);
    }
  }
}

void tq1_0(const u8* x, float* y) {
  const u8* qs = x;
  const u8* qh = x + 48;
  const float d = half_at(x + 52);
  constexpr u8 pow3[5] = {1, 3, 9, 27, 81};
  auto trit = [](unsigned byte, unsigned power) {
    const auto v = static_cast<u8>(byte * power);  // numpy's uint8 product wraps
    return static_cast<int>((v * 3u) >> 8) - 1;
  };
  for (int i = 0; i < 160; ++i) y[i] = d * static_cast<float>(trit(qs[i % 32], pow3[i / 32]));
  for (int r = 0; r < 80; ++r) {
    y[160 + r] = d * static_cast<float>(trit(qs[32 + r % 16], pow3[r / 16]));
  }
  for (int r = 0; r < 16; ++r) y[240 + r] = d * static_cast<float>(trit(qh[r % 4], pow3[r / 4]));
}

void tq2_0(const u8* x, float* y) {
  const float d = half_at(x + 64);
  for (int i = 0; i < 256; ++i) {
    const int q = (x[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3;
    y[i] = d * static_cast<float>(q - 1);
  }
}

void mxfp4(const u8* x, float* y) {
  // E8M0 halved: 2^(e - 128), as bits (subnormal for e < 2).
  const std::uint32_t e = x[0];
  const float d = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(e2m1_values[x[1 + j] & 0xf]);
    y[j + 16] = d * static_cast<float>(e2m1_values[x[1 + j] >> 4]);
  }
}

// NVFP4's unsigned E4M3 scale (bias 7), halved; 0 and 0x7f are 0. Every step is exact.
float ue4m3_half(unsigned v) {
  if (v == 0 || v == 0x7f) return 0.0f;
  const int exponent = static_cast<int>((v >> 3) & 0xf);
  const auto mantissa = static_cast<float>(v & 7);
  const float raw = exponent == 0 ? mantissa * 0x1p-9f
                                  : (1.0f + mantissa / 8.0f) * std::ldexp(1.0f, exponent - 7);
  return raw * 0.5f;
}

void nvfp4(const u8* x, float* y) {
  for (int s = 0; s < 4; ++s) {
    const float d = ue4m3_half(x[s]);
    const u8* q = x + 4 + s * 8;
    for (int l = 0; l < 8; ++l) {
      y[s * 16 + l] = d * static_cast<float>(e2m1_values[q[l] & 0xf]);
      y[s * 16 + 8 + l] = d * static_cast<float>(e2m1_values[q[l] >> 4]);
    }
  }
}

void iq4_nl(const u8* x, float* y) {
  const float d = half_at(x);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(iq4nl_values[x[2 + j] & 0xf]);
    y[j + 16] = d * static_cast<float>(iq4nl_values[x[2 + j] >> 4]);
  }
}

void iq4_xs(const u8* x, float* y) {
  const float d = half_at(x);
  const std::uint16_t scales_h = le16(x + 2);
  const u8* scales_l = x + 4;
  const u8* qs = x + 8;
  for (unsigned g = 0; g < 8; ++g) {
    const unsigned low = (scales_l[g / 2] >> (4 * (g % 2))) & 0xfu;
    const unsigned high = (scales_h >> (2 * g)) & 3u;
    const float dl = d * static_cast<float>(static_cast<std::int8_t>(low | high << 4) - 32);
    for (int l = 0; l < 16; ++l) {
      y[g * 32 + l] = dl * static_cast<float>(iq4nl_values[qs[g * 16 + l] & 0xf]);
      y[g * 32 + 16 + l] = dl * static_cast<float>(iq4nl_values[qs[g * 16 + l] >> 4]);
    }
  }
}

// The IQ2 formats' scale of a group of 16 values: (d × (0.5 + s)) × 0.25.
inline float iq2_scale(float d, unsigned s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }

// Eight values of a grid row, scaled and signed: (db × grid) × sign.
inline void grid8(float db, const std::array<std::int8_t, 8>& row, unsigned signs, float* y) {
  const std::uint32_t flip = sign_flip(db);
  for (unsigned j = 0; j < 8; ++j) {
    y[j] = signed_by(db * static_cast<float>(row[j]), signs, j, flip);
  }
}

void iq2_xxs(const u8* x, float* y) {
  const float d = half_at(x);
  for (int g = 0; g < 8; ++g) {
    const std::uint32_t rows = le32(x + 2 + 8 * g);
    const std::uint32_t aux = le32(x + 6 + 8 * g);
    const float db = iq2_scale(d, aux >> 28);
    for (unsigned l = 0; l < 4; ++l) {
      grid8(db, iq2xxs_grid[(rows >> (8 * l)) & 0xff], ksigns[(aux >> (7 * l)) & 0x7f],
            y + g * 32 + l * 8);
    }
  }
}

void iq2_xs(const u8* x, float* y) {
  const float d = half_at(x);
  const u8* scales = x + 66;
  for (unsigned i = 0; i < 32; ++i) {
    const std::uint16_t v = le16(x + 2 + 2 * i);
    const float db = iq2_scale(d, (scales[i / 4] >> (4 * (i / 2 % 2))) & 0xfu);
    grid8(db, iq2xs_grid[v & 511u], ksigns[v >> 9], y + i * 8);
  }
}

void iq2_s(const u8* x, float* y) {
  const float d = half_at(x);
  const u8* qs = x + 2;
  const u8* signs = x + 34;
  const u8* qh = x + 66;
  const u8* scales = x + 74;
  for (unsigned i = 0; i < 32; ++i) {
    const unsigned row = qs[i] | ((qh[i / 4] >> (2 * (i % 4))) & 3u) << 8;
    const float db = iq2_scale(d, (scales[i / 4] >> (4 * (i / 2 % 2))) & 0xfu);
    grid8(db, iq2s_grid[row], signs[i], y + i * 8);
  }
}

void iq3_xxs(const u8* x, float* y) {
  const float d = half_at(x);
  const u8* qs = x + 2;
  for (int g = 0; g < 8; ++g) {
    const std::uint32_t aux = le32(x + 66 + 4 * g);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    const std::uint32_t flip = sign_flip(db);
    for (unsigned l = 0; l < 4; ++l) {
      const unsigned signs = ksigns[(aux >> (7 * l)) & 0x7f];
      for (unsigned j = 0; j < 8; ++j) {
        const std::int8_t value = iq3xxs_grid[qs[g * 8 + l * 2 + j / 4]][j % 4];
        y[g * 32 + l * 8 + j] = signed_by(db * static_cast<float>(value), signs, j, flip);
      }
    }
  }
}

void iq3_s(const u8* x, float* y) {
  const float d = half_at(x);
  const u8* qs = x + 2;
  const u8* qh = x + 66;
  const u8* signs = x + 74;
  const u8* scales = x + 106;
  for (unsigned g = 0; g < 8; ++g) {
    const unsigned s = (scales[g / 2] >> (4 * (g % 2))) & 0xfu;
    const float db = d * static_cast<float>(1 + 2 * s);
    const std::uint32_t flip = sign_flip(db);
    for (unsigned r = 0; r < 8; ++r) {
      const unsigned i = g * 8 + r;  // the grid row's index in the block
      const unsigned row = qs[i] | ((qh[i / 8] >> (i % 8)) & 1u) << 8;
      for (unsigned c = 0; c < 4; ++c) {
        const unsigned v = i * 4 + c;
        y[v] = signed_by(db * static_cast<float>(iq3s_grid[row][c]), signs[v / 8], v % 8, flip);
      }
    }
  }
}

// (dl × (grid + delta)) for eight values of an IQ1 grid row.
inline void iq1_grid8(float dl, unsigned row, float delta, float* y) {
  for (unsigned j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(iq1s_grid[row][j]) + delta);
}

void iq1_s(const u8* x, float* y) {
  const float d = half_at(x);
  const u8* qs = x + 2;
  for (unsigned g = 0; g < 8; ++g) {
    const std::uint16_t h = le16(x + 34 + 2 * g);
    const float dl = d * static_cast<float>(2 * ((h >> 12) & 7u) + 1);
    const float delta = (h & 0x8000u) == 0 ? 0.125f : -0.125f;
    for (unsigned l = 0; l < 4; ++l) {
      iq1_grid8(dl, qs[g * 4 + l] | ((h >> (3 * l)) & 7u) << 8, delta, y + g * 32 + l * 8);
    }
  }
}

void iq1_m(const u8* x, float* y) {
  const u8* qs = x;
  const u8* qh = x + 32;
  std::uint16_t sc[4];
  for (int u = 0; u < 4; ++u) sc[u] = le16(x + 48 + 2 * u);
  // The block's half is spread over the top nibbles of the four scale words.
  const float d = half_to_float(
      static_cast<std::uint16_t>(((sc[0] & 0xf000u) >> 12) | ((sc[1] & 0xf000u) >> 8) |
                                 ((sc[2] & 0xf000u) >> 4) | (sc[3] & 0xf000u)));
  for (unsigned i = 0; i < 32; ++i) {
    const unsigned k = i / 2;  // the scale of these 8 values
    const float dl = d * static_cast<float>(2 * ((sc[k / 4] >> (3 * (k % 4))) & 7u) + 1);
    const unsigned nibble = qh[i / 2] >> (4 * (i % 2));
    const float delta = (nibble & 8u) == 0 ? 0.125f : -0.125f;
    iq1_grid8(dl, qs[i] | (nibble & 7u) << 8, delta, y + i * 8);
  }
}

using Kernel = void (*)(const u8*, float*);

Kernel kernel_of(BlockFormat format) noexcept {
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
    case BlockFormat::iq2_xxs:
      return iq2_xxs;
    case BlockFormat::iq2_xs:
      return iq2_xs;
    case BlockFormat::iq3_xxs:
      return iq3_xxs;
    case BlockFormat::iq1_s:
      return iq1_s;
    case BlockFormat::iq4_nl:
      return iq4_nl;
    case BlockFormat::iq3_s:
      return iq3_s;
    case BlockFormat::iq2_s:
      return iq2_s;
    case BlockFormat::iq4_xs:
      return iq4_xs;
    case BlockFormat::iq1_m:
      return iq1_m;
    case BlockFormat::tq1_0:
      return tq1_0;
    case BlockFormat::tq2_0:
      return tq2_0;
    case BlockFormat::mxfp4:
      return mxfp4;
    case BlockFormat::nvfp4:
      return nvfp4;
    default:
      return nullptr;
  }
}

// The values of a block as little-endian float32 bytes.
inline void store_values(const float* values, std::size_t count, std::byte* out) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, values, count * sizeof(float));
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint32_t bits = __builtin_bswap32(std::bit_cast<std::uint32_t>(values[i]));
      std::memcpy(out + 4 * i, &bits, 4);
    }
  }
}

}  // namespace

void dequantize_scalar(BlockFormat format, const std::byte* in, std::byte* out,
                       std::size_t blocks) noexcept {
  const Kernel kernel = kernel_of(format);
  if (kernel == nullptr) return;  // not dequantizable(): a precondition violation
  const BlockFormatInfo& b = info(format);
  alignas(64) float values[256];
  for (std::size_t i = 0; i < blocks; ++i) {
    kernel(reinterpret_cast<const u8*>(in) + i * b.block_bytes, values);
    store_values(values, b.block_elements, out + i * b.block_elements * sizeof(float));
  }
}

bool dequantize_path_available(DequantizePath path) noexcept {
  return path == DequantizePath::scalar || cpu_has_avx2_f16c();
}

DequantizePath dequantize_best_path() noexcept {
  static const DequantizePath best = dequantize_path_available(DequantizePath::avx2)
                                         ? DequantizePath::avx2
                                         : DequantizePath::scalar;
  return best;
}

void dequantize_with(DequantizePath path, BlockFormat format, const std::byte* in, std::byte* out,
                     std::size_t blocks) noexcept {
#if defined(__x86_64__)
  if (path == DequantizePath::avx2) return dequantize_avx2(format, in, out, blocks);
#endif
  (void)path;
  dequantize_scalar(format, in, out, blocks);
}

}  // namespace detail

bool dequantizable(BlockFormat format) noexcept {
  return format != BlockFormat::none && info(format).not_dequantized.empty();
}

void dequantize(BlockFormat format, const std::byte* in, std::byte* out,
                std::size_t blocks) noexcept {
  detail::dequantize_with(detail::dequantize_best_path(), format, in, out, blocks);
}

namespace {

// The offsets of the 16-bit fields gguf-convert-endian swaps in a block, at most two.
struct SwappedFields {
  int count;
  std::size_t at[2];
};

std::optional<SwappedFields> swapped_fields(BlockFormat format) noexcept {
  switch (format) {
    case BlockFormat::q4_0:
    case BlockFormat::q8_0:
      return SwappedFields{1, {0, 0}};
    case BlockFormat::q4_k:
      return SwappedFields{2, {0, 2}};
    case BlockFormat::q6_k:
      return SwappedFields{1, {208, 0}};
    case BlockFormat::tq2_0:
      return SwappedFields{1, {64, 0}};
    case BlockFormat::mxfp4:
    case BlockFormat::nvfp4:
      return SwappedFields{0, {0, 0}};
    default:
      return std::nullopt;
  }
}

}  // namespace

bool big_endian_dequantizable(BlockFormat format) noexcept {
  return dequantizable(format) && swapped_fields(format).has_value();
}

void swap_block_fields(BlockFormat format, std::byte* blocks, std::size_t count) noexcept {
  const auto fields = swapped_fields(format);
  if (!fields) return;
  const std::size_t size = info(format).block_bytes;
  for (std::size_t i = 0; i < count; ++i) {
    for (int f = 0; f < fields->count; ++f) {
      std::byte* p = blocks + i * size + fields->at[f];
      std::swap(p[0], p[1]);
    }
  }
}

}  // namespace ckptfs
