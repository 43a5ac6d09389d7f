// SPDX-License-Identifier: MIT
// The CPU features the vector kernels need, asked once of this CPU: convert()'s (view) and
// dequantize()'s (format/gguf) AVX2 paths both need the same two.
#pragma once

namespace ckptfs {

// Whether this CPU runs AVX2 and F16C code, with the OS saving the AVX registers. False off
// x86-64. Thread-safe.
bool cpu_has_avx2_f16c() noexcept;

}  // namespace ckptfs
