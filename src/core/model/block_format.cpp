// SPDX-License-Identifier: MIT
// The block format table (GGML's types, as gguf-py's GGML_QUANT_SIZES sizes them) and GGML's
// plain types.
#include <ckptfs/model/block_format.hpp>

#include <array>

namespace ckptfs {
namespace {

// What a type without a reference dequantization says in meta.json.
constexpr std::string_view no_reference =
    "gguf-py (the reference ckptfs's values must match bit for bit) has no dequantization for "
    "this type: its blocks are served as data only";

constexpr std::array<BlockFormatInfo, 28> table{{
    {BlockFormat::none, "", 0, 1, 0, "not block-quantized"},
    {BlockFormat::q4_0, "Q4_0", 2, 32, 18, ""},
    {BlockFormat::q4_1, "Q4_1", 3, 32, 20, ""},
    {BlockFormat::q5_0, "Q5_0", 6, 32, 22, ""},
    {BlockFormat::q5_1, "Q5_1", 7, 32, 24, ""},
    {BlockFormat::q8_0, "Q8_0", 8, 32, 34, ""},
    {BlockFormat::q8_1, "Q8_1", 9, 32, 36, no_reference},
    {BlockFormat::q2_k, "Q2_K", 10, 256, 84, ""},
    {BlockFormat::q3_k, "Q3_K", 11, 256, 110, ""},
    {BlockFormat::q4_k, "Q4_K", 12, 256, 144, ""},
    {BlockFormat::q5_k, "Q5_K", 13, 256, 176, ""},
    {BlockFormat::q6_k, "Q6_K", 14, 256, 210, ""},
    {BlockFormat::q8_k, "Q8_K", 15, 256, 292, no_reference},
    {BlockFormat::iq2_xxs, "IQ2_XXS", 16, 256, 66, ""},
    {BlockFormat::iq2_xs, "IQ2_XS", 17, 256, 74, ""},
    {BlockFormat::iq3_xxs, "IQ3_XXS", 18, 256, 98, ""},
    {BlockFormat::iq1_s, "IQ1_S", 19, 256, 50, ""},
    {BlockFormat::iq4_nl, "IQ4_NL", 20, 32, 18, ""},
    {BlockFormat::iq3_s, "IQ3_S", 21, 256, 110, ""},
    {BlockFormat::iq2_s, "IQ2_S", 22, 256, 82, ""},
    {BlockFormat::iq4_xs, "IQ4_XS", 23, 256, 136, ""},
    {BlockFormat::iq1_m, "IQ1_M", 29, 256, 56, ""},
    {BlockFormat::tq1_0, "TQ1_0", 34, 256, 54, ""},
    {BlockFormat::tq2_0, "TQ2_0", 35, 256, 66, ""},
    {BlockFormat::mxfp4, "MXFP4", 39, 32, 17, ""},
    {BlockFormat::nvfp4, "NVFP4", 40, 64, 36, ""},
    {BlockFormat::q1_0, "Q1_0", 41, 128, 18, no_reference},
    {BlockFormat::q2_0, "Q2_0", 42, 64, 18, no_reference},
}};

constexpr std::array<GgmlPlainType, 8> plain{{
    {0, "F32", DType::float32},
    {1, "F16", DType::float16},
    {24, "I8", DType::int8},
    {25, "I16", DType::int16},
    {26, "I32", DType::int32},
    {27, "I64", DType::int64},
    {28, "F64", DType::float64},
    {30, "BF16", DType::bfloat16},
}};

}  // namespace

const BlockFormatInfo& info(BlockFormat format) { return table[static_cast<std::size_t>(format)]; }

std::optional<BlockFormat> block_format_from_ggml(std::uint32_t ggml_type) noexcept {
  for (std::size_t i = 1; i < table.size(); ++i) {
    if (table[i].ggml_type == ggml_type) return table[i].format;
  }
  return std::nullopt;
}

std::optional<GgmlPlainType> ggml_plain_type(std::uint32_t ggml_type) noexcept {
  for (const GgmlPlainType& p : plain) {
    if (p.ggml_type == ggml_type) return p;
  }
  return std::nullopt;
}

std::optional<GgmlPlainType> ggml_plain_type_of(DType dtype) noexcept {
  for (const GgmlPlainType& p : plain) {
    if (p.dtype == dtype) return p;
  }
  return std::nullopt;
}

}  // namespace ckptfs
