// SPDX-License-Identifier: MIT
// read_dequantized()'s out-of-line parts: its staging buffers and its conversion of the values.
#include <ckptfs/view/convert.hpp>
#include <ckptfs/view/read_dequantized.hpp>

#include <cstring>
#include <memory>
#include <new>

namespace ckptfs {

void convert_dequantized(DType to, const std::byte* in, std::byte* out,
                         std::size_t count) noexcept {
  if (to == DType::float32) {
    std::memcpy(out, in, count * sizeof(float));
  } else {
    convert(DType::float32, to, false, in, out, count);
  }
}

DequantizeStaging dequantize_staging() {
  struct AlignedDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  thread_local std::unique_ptr<std::byte[], AlignedDelete> staging;
  if (!staging) staging.reset(new (std::align_val_t{64}) std::byte[2 * dequantize_staging_bytes]);
  using Span = std::span<std::byte, dequantize_staging_bytes>;
  return {Span(staging.get(), dequantize_staging_bytes),
          Span(staging.get() + dequantize_staging_bytes, dequantize_staging_bytes)};
}

}  // namespace ckptfs
