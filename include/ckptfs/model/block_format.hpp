// SPDX-License-Identifier: MIT
// The table of block-quantized encodings (GGML's types, which GGUF files hold): each encodes a
// fixed number of values in a fixed number of bytes, a "block".
#pragma once

#include <ckptfs/model/dtype.hpp>

#include <cstdint>
#include <optional>
#include <string_view>

namespace ckptfs {

// A block-quantized encoding. GGML's plain types (F32, F16, BF16, F64, I8-I64) are no block
// format: their tensors have a DType (ggml_plain_dtype()).
enum class BlockFormat : std::uint8_t {
  none,  // not block-quantized
  q4_0,
  q4_1,
  q5_0,
  q5_1,
  q8_0,
  q8_1,
  q2_k,
  q3_k,
  q4_k,
  q5_k,
  q6_k,
  q8_k,
  iq2_xxs,
  iq2_xs,
  iq3_xxs,
  iq1_s,
  iq4_nl,
  iq3_s,
  iq2_s,
  iq4_xs,
  iq1_m,
  tq1_0,
  tq2_0,
  mxfp4,
  nvfp4,
  q1_0,
  q2_0,
};

struct BlockFormatInfo {
  BlockFormat format;
  std::string_view name;         // GGML's name: "Q4_K", "IQ2_XXS"...
  std::uint32_t ggml_type;       // GGML's number for it (GGUF's tensor type): Q4_K is 12
  std::uint32_t block_elements;  // values per block
  std::uint32_t block_bytes;     // bytes per block
  // Why its values are not served (only its blocks, as `data`), empty when they are: the
  // reference reader (gguf-py's gguf.quants.dequantize) has no dequantization for it.
  std::string_view not_dequantized;
};

const BlockFormatInfo& info(BlockFormat format);

// The block format of GGML type number `ggml_type`; nullopt for a plain type or an unknown number.
std::optional<BlockFormat> block_format_from_ggml(std::uint32_t ggml_type) noexcept;

// GGML's plain types (one value per "block") and the dtypes they are: F32 0, F16 1, I8 24, I16
// 25, I32 26, I64 27, F64 28, BF16 30.
struct GgmlPlainType {
  std::uint32_t ggml_type;
  std::string_view name;  // "F32"
  DType dtype;
};
// The plain type of GGML number `ggml_type`; nullopt for any other number.
std::optional<GgmlPlainType> ggml_plain_type(std::uint32_t ggml_type) noexcept;
// The plain GGML type of `dtype`; nullopt for a dtype GGML has no plain type for.
std::optional<GgmlPlainType> ggml_plain_type_of(DType dtype) noexcept;

}  // namespace ckptfs
