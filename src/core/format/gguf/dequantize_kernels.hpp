// SPDX-License-Identifier: MIT
// What dequantize()'s code paths share, private to src/core/format/gguf: the fields of a block as
// numbers, the value tables of the formats, and one entry point per path.
#pragma once

#include "iq_grids.hpp"

#include <ckptfs/model/block_format.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ckptfs::detail {

// A little-endian 16- or 32-bit field of a block.
inline std::uint16_t le16(const std::uint8_t* p) noexcept {
  return static_cast<std::uint16_t>(p[0] | p[1] << 8);
}
inline std::uint32_t le32(const std::uint8_t* p) noexcept {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

// An IEEE half's value as float32, exactly, as numpy's astype(np.float32) gives it: a NaN keeps
// its payload (shifted) and is not quieted (the arithmetic after it quiets it, as numpy's does).
inline float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | mantissa << 13;
  } else if (exponent != 0) {
    bits = sign | (exponent + 112) << 23 | mantissa << 13;
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // A subnormal half is a normal float: shift its mantissa up to the implicit bit.
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | exponent << 23 | (mantissa & 0x3ffu) << 13;
  }
  return std::bit_cast<float>(bits);
}

inline float half_at(const std::uint8_t* p) noexcept { return half_to_float(le16(p)); }

// IQ2/IQ3's sign bytes: the 7 bits of an index and an 8th that makes the count of ones even.
inline constexpr std::array<std::uint8_t, 128> ksigns = [] {
  std::array<std::uint8_t, 128> t{};
  for (unsigned i = 0; i < 128; ++i) {
    t[i] = static_cast<std::uint8_t>(i | (std::popcount(i) & 1u) << 7);
  }
  return t;
}();

// The non-linear 4-bit values of IQ4_NL and IQ4_XS, and of MXFP4 and NVFP4 (E2M1, doubled).
inline constexpr std::array<std::int8_t, 16> iq4nl_values = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
inline constexpr std::array<std::int8_t, 16> e2m1_values = {0, 1,  2,  3,  4,  6,  8,  12,
                                                            0, -1, -2, -3, -4, -6, -8, -12};

// The lattices of the IQ formats, one row of values per index (iq_grids.hpp: gguf-py's grids).

template <std::size_t Rows, std::size_t Columns>
using Grid = std::array<std::array<std::int8_t, Columns>, Rows>;

template <std::size_t Rows, std::size_t Columns, std::size_t Values>
constexpr Grid<Rows, Columns> expand(const std::uint16_t (&rows)[Rows], const int (&map)[Values],
                                     unsigned bits) {
  Grid<Rows, Columns> g{};
  for (std::size_t r = 0; r < Rows; ++r) {
    for (std::size_t c = 0; c < Columns; ++c) {
      g[r][c] = static_cast<std::int8_t>(map[(rows[r] >> (bits * c)) & ((1u << bits) - 1)]);
    }
  }
  return g;
}

inline constexpr Grid<256, 8> iq2xxs_grid =
    expand<256, 8>(grids::iq2xxs_rows, grids::iq2xxs_map, grids::iq2xxs_bits);
inline constexpr Grid<512, 8> iq2xs_grid =
    expand<512, 8>(grids::iq2xs_rows, grids::iq2xs_map, grids::iq2xs_bits);
inline constexpr Grid<1024, 8> iq2s_grid =
    expand<1024, 8>(grids::iq2s_rows, grids::iq2s_map, grids::iq2s_bits);
inline constexpr Grid<256, 4> iq3xxs_grid =
    expand<256, 4>(grids::iq3xxs_rows, grids::iq3xxs_map, grids::iq3xxs_bits);
inline constexpr Grid<512, 4> iq3s_grid =
    expand<512, 4>(grids::iq3s_rows, grids::iq3s_map, grids::iq3s_bits);
inline constexpr Grid<2048, 8> iq1s_grid =
    expand<2048, 8>(grids::iq1s_rows, grids::iq1s_map, grids::iq1s_bits);

// Arguments and preconditions as for dequantize(); `blocks` may be 0.
void dequantize_scalar(BlockFormat format, const std::byte* in, std::byte* out,
                       std::size_t blocks) noexcept;

#if defined(__x86_64__)
// AVX2 + F16C; call only when the CPU has both. Formats it has no kernel for go to
// dequantize_scalar.
void dequantize_avx2(BlockFormat format, const std::byte* in, std::byte* out,
                     std::size_t blocks) noexcept;
#endif

}  // namespace ckptfs::detail
