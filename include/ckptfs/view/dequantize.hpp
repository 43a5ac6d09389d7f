// SPDX-License-Identifier: MIT
// Block-quantized values dequantized on read, bit for bit as gguf-py's gguf.quants.dequantize.
#pragma once

#include <ckptfs/model/block_format.hpp>
#include <ckptfs/model/dtype.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

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

// The staging buffers of read_dequantized(): this thread's, dequantize_staging_bytes each,
// 64-byte aligned, allocated on the thread's first call (throws std::bad_alloc if they cannot
// be) and freed when the thread ends. The first holds stored blocks, the second their values
// (64 KiB: 16,384 float32 values, 64 blocks of 256), so that a read of any range and any size
// keeps 128 KiB of memory per thread.
inline constexpr std::size_t dequantize_staging_bytes = 64 * 1024;
struct DequantizeStaging {
  std::span<std::byte, dequantize_staging_bytes> blocks;
  std::span<std::byte, dequantize_staging_bytes> values;
};
DequantizeStaging dequantize_staging();

// Converts float32 values to `to` (float32, float16 or bfloat16) as convert() does; a plain
// copy for float32. Defined in dequantize.cpp, for read_dequantized().
void convert_dequantized(DType to, const std::byte* in, std::byte* out, std::size_t count) noexcept;

// Fills `out` with bytes [offset, offset + out.size()) of a block-quantized tensor's values as
// served: dequantized to float32, then converted to `to` (float32, float16 or bfloat16: -o
// dtype) as convert() converts float32. Only the blocks the range touches are read, with
// `read_blocks(stored_offset, std::span<std::byte> into)` (stored_offset relative to the
// tensor's first block; it fills `into` or throws), at most dequantize_staging_bytes at a time;
// `big_endian`: they are big-endian (swap_block_fields()). Precondition: dequantizable(format)
// (and big_endian_dequantizable() for big-endian blocks), the range inside the tensor. Throws
// what read_blocks throws and std::bad_alloc. Not reentrant within one thread (read_blocks must
// not call it).
template <class ReadBlocks>
void read_dequantized(BlockFormat format, bool big_endian, DType to, std::uint64_t offset,
                      std::span<std::byte> out, ReadBlocks&& read_blocks) {
  if (out.empty()) return;
  const BlockFormatInfo& b = info(format);
  const std::uint64_t value_size = info(to).element_size;
  const std::uint64_t served_block = b.block_elements * value_size;  // served bytes per block
  const std::uint64_t end = offset + out.size();
  const DequantizeStaging staging = dequantize_staging();
  const std::uint64_t per_step = dequantize_staging_bytes / (4 * b.block_elements);
  std::byte* dst = out.data();
  std::uint64_t at = offset;  // the served byte that dst stands for
  while (at < end) {
    const std::uint64_t block = at / served_block;
    const std::uint64_t chunk_begin = block * served_block;
    // A block the range holds part of goes alone through `values`; whole float32 blocks are
    // dequantized straight into `out`.
    const bool partial = at != chunk_begin || end - at < served_block;
    const std::uint64_t n = partial ? 1 : std::min(per_step, (end - at) / served_block);
    const bool through_values = partial || to != DType::float32;
    read_blocks(block * b.block_bytes,
                staging.blocks.first(static_cast<std::size_t>(n * b.block_bytes)));
    if (big_endian) swap_block_fields(format, staging.blocks.data(), n);
    const std::uint64_t chunk_end = std::min(end, chunk_begin + n * served_block);
    const auto length = static_cast<std::size_t>(chunk_end - at);
    if (through_values) {
      dequantize(format, staging.blocks.data(), staging.values.data(), n);
      const std::byte* values = staging.values.data();
      if (to != DType::float32) {
        // Converted values are at most half as large: they fit the blocks' buffer, free now.
        convert_dequantized(to, values, staging.blocks.data(), n * b.block_elements);
        values = staging.blocks.data();
      }
      std::memcpy(dst, values + (at - chunk_begin), length);
    } else {
      dequantize(format, staging.blocks.data(), dst, n);
    }
    dst += length;
    at = chunk_end;
  }
}

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
