// SPDX-License-Identifier: MIT
// A block-quantized tensor's values as served, read a range at a time: its blocks dequantized on
// read (format/gguf/dequantize.hpp), then converted to the served dtype (-o dtype).
#pragma once

#include <ckptfs/format/gguf/dequantize.hpp>
#include <ckptfs/model/block_format.hpp>
#include <ckptfs/model/dtype.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace ckptfs {

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
// copy for float32. Defined in read_dequantized.cpp, for read_dequantized().
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

}  // namespace ckptfs
