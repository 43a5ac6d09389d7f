// SPDX-License-Identifier: MIT
// The kernels behind convert(), private to src/core/view: one function per code path.
#pragma once

#include <ckptfs/model/dtype.hpp>

#include <cstddef>

namespace ckptfs::detail {

// Arguments and preconditions as for convert(). Integer arithmetic only, on any host byte order:
// the same bits whatever the CPU and its floating-point environment.
void convert_scalar(DType from, DType to, bool source_big_endian, const std::byte* in,
                    std::byte* out, std::size_t count) noexcept;

#if defined(__x86_64__)
// AVX2 + F16C; call only when the CPU has both. Converts 8 elements a step (byte swaps: 32 bytes)
// and hands the remainder to convert_scalar.
void convert_avx2(DType from, DType to, bool source_big_endian, const std::byte* in, std::byte* out,
                  std::size_t count) noexcept;
#endif

}  // namespace ckptfs::detail
