// SPDX-License-Identifier: MIT
// GGUF's block-quantized values dequantized, bit for bit as gguf-py's gguf.quants.dequantize.
// Read through view/read_dequantized.hpp, which serves them (-o dtype conversion included).
#pragma once

#include <ckptfs/model/block_format.hpp>

#include <cstddef>
#include <cstdint>

namespace ckptfs {

// Whether dequantize() handles `format`: every block format gguf-py dequantizes (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, Q2_K-Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL,
// IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4); not Q8_1, Q8_K, Q1_0, Q2_0 (BlockFormatInfo says why).
bool dequantizable(BlockFormat format) noexcept;

// Dequantizes `blocks` whole blocks of `format` at `in` (info(format).block_bytes each, little-
// endian fields, as GGUF stores them) into blocks × block_elements float32 values at `out`,
// little-endian; any alignment, not overlapping. Precondition: dequantizable(format).
// Thread-safe, allocation-free.
//
// The values are those of gguf-py 0.19's gguf.quants.dequantize (numpy, float32) of the same
// blocks, bit for bit, on every machine and with either code path below: each value is computed
// with numpy's float32 operations in numpy's order (Q4_K: (d × sc) × q − (dmin × m); IQ2_XXS:
// ((d × (0.5 + s)) × 0.25 × grid) × sign...), without fused multiply-adds, and a NaN in a block's
// scale gives the NaN numpy gives (quieted, its payload kept). One choice: a Q4_1 or Q5_1 block
// whose d and m are both NaN gives d's NaN, as numpy does for any array of two blocks or more
// (numpy itself gives m's for an array of one block).
// Assumes the default floating-point environment (no flush-to-zero), as numpy does.
void dequantize(BlockFormat format, const std::byte* in, std::byte* out,
                std::size_t blocks) noexcept;

// Big-endian blocks (of a GGUF file written big-endian): the formats whose layout is known, those
// gguf-py's gguf-convert-endian converts, swapping each block's float16 fields (Q4_0, Q8_0, Q4_K,
// Q6_K, TQ2_0) or nothing (MXFP4, NVFP4, whose fields are bytes).
bool big_endian_dequantizable(BlockFormat format) noexcept;
// Makes `count` big-endian blocks of `format` at `blocks` little-endian in place: the inverse of
// gguf-convert-endian. Precondition: big_endian_dequantizable(format).
void swap_block_fields(BlockFormat format, std::byte* blocks, std::size_t count) noexcept;

namespace detail {

// The code paths of dequantize(), for the tests and the benchmark, which run each one on the
// same blocks; dequantize() takes the fastest one this CPU has. All give the same bits.
enum class DequantizePath : std::uint8_t {
  scalar,  // portable C++ (any CPU)
  avx2,    // AVX2 + F16C for the formats where it pays (x86-64 with both; else scalar)
};
bool dequantize_path_available(DequantizePath path) noexcept;
DequantizePath dequantize_best_path() noexcept;
// dequantize() through `path`; precondition: dequantize_path_available(path).
void dequantize_with(DequantizePath path, BlockFormat format, const std::byte* in, std::byte* out,
                     std::size_t blocks) noexcept;

}  // namespace detail
}  // namespace ckptfs
