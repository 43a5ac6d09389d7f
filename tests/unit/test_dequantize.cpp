// SPDX-License-Identifier: MIT
// Unit tests of dequantize(): values of hand-made blocks, the scalar and AVX2 paths bit for bit
// on random blocks of every format (NaN and infinite scales included), and read_dequantized()
// over every range against the whole tensor dequantized at once. The comparison with gguf-py
// itself is tests/integration/test_gguf.py's.
#include <ckptfs/format/gguf/dequantize.hpp>
#include <ckptfs/view/convert.hpp>
#include <ckptfs/view/read_dequantized.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace ckptfs;
using detail::DequantizePath;

namespace {

constexpr BlockFormat dequantizable_formats[] = {
    BlockFormat::q4_0,    BlockFormat::q4_1,   BlockFormat::q5_0,    BlockFormat::q5_1,
    BlockFormat::q8_0,    BlockFormat::q2_k,   BlockFormat::q3_k,    BlockFormat::q4_k,
    BlockFormat::q5_k,    BlockFormat::q6_k,   BlockFormat::iq2_xxs, BlockFormat::iq2_xs,
    BlockFormat::iq3_xxs, BlockFormat::iq1_s,  BlockFormat::iq4_nl,  BlockFormat::iq3_s,
    BlockFormat::iq2_s,   BlockFormat::iq4_xs, BlockFormat::iq1_m,   BlockFormat::tq1_0,
    BlockFormat::tq2_0,   BlockFormat::mxfp4,  BlockFormat::nvfp4};

std::vector<float> values_of(BlockFormat format, const std::vector<std::uint8_t>& blocks,
                             DequantizePath path = detail::dequantize_best_path()) {
  const BlockFormatInfo& b = info(format);
  const std::size_t n = blocks.size() / b.block_bytes;
  std::vector<float> out(n * b.block_elements);
  detail::dequantize_with(path, format, reinterpret_cast<const std::byte*>(blocks.data()),
                          reinterpret_cast<std::byte*>(out.data()), n);
  return out;
}

void put16(std::vector<std::uint8_t>& b, std::size_t at, std::uint16_t v) {
  b[at] = static_cast<std::uint8_t>(v & 0xff);
  b[at + 1] = static_cast<std::uint8_t>(v >> 8);
}

constexpr std::uint16_t half_one = 0x3c00, half_half = 0x3800, half_two = 0x4000;

}  // namespace

TEST_SUITE_BEGIN("dequantize");

TEST_CASE("the formats gguf-py dequantizes, and those it does not") {
  for (BlockFormat f : dequantizable_formats) CHECK(dequantizable(f));
  for (BlockFormat f : {BlockFormat::none, BlockFormat::q8_1, BlockFormat::q8_k, BlockFormat::q1_0,
                        BlockFormat::q2_0}) {
    CHECK_FALSE(dequantizable(f));
  }
  CHECK(info(BlockFormat::q8_k).not_dequantized.find("gguf-py") != std::string_view::npos);
}

TEST_CASE("Q4_0: d x (q - 8), low nibbles first") {
  std::vector<std::uint8_t> b(18, 0);
  put16(b, 0, half_two);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<std::uint8_t>(j | (15 - j) << 4);
  const auto v = values_of(BlockFormat::q4_0, b);
  for (int j = 0; j < 16; ++j) {
    CHECK(v[j] == 2.0f * static_cast<float>(j - 8));
    CHECK(v[16 + j] == 2.0f * static_cast<float>(15 - j - 8));
  }
}

TEST_CASE("Q8_0 and Q5_1: signed bytes, the fifth bit from qh, then + m") {
  std::vector<std::uint8_t> q8(34, 0);
  put16(q8, 0, half_half);
  q8[2] = 0x80;  // -128
  q8[3] = 0x7f;
  const auto v8 = values_of(BlockFormat::q8_0, q8);
  CHECK(v8[0] == -64.0f);
  CHECK(v8[1] == 63.5f);
  std::vector<std::uint8_t> q5(24, 0);
  put16(q5, 0, half_one);
  put16(q5, 2, 0xbc00);  // m = -1
  q5[4] = 0x01;          // qh bit 0: element 0 gets 16
  q5[7] = 0x80;          // qh bit 31: element 31 gets 16
  q5[8] = 0x0f;          // element 0 low nibble 15; element 16 high nibble 0
  const auto v5 = values_of(BlockFormat::q5_1, q5);
  CHECK(v5[0] == 31.0f - 1.0f);
  CHECK(v5[16] == -1.0f);
  CHECK(v5[31] == 16.0f - 1.0f);
}

TEST_CASE("Q4_K: (d x sc) x q - dmin x m, scales and mins of 6 bits") {
  std::vector<std::uint8_t> b(144, 0);
  put16(b, 0, half_one);
  put16(b, 2, half_half);
  b[4] = 2;          // sc[0]
  b[8] = 3;          // m[0]
  b[12] = 0x54;      // sc[4] low 4 bits = 4, m[4] low 4 bits = 5
  b[4 + 0] |= 0x40;  // sc[4] bits 4-5 from sc[0]'s top bits: 1 << 4
  for (int l = 0; l < 32; ++l) b[16 + l] = static_cast<std::uint8_t>(l % 16);
  for (int l = 0; l < 32; ++l) b[16 + 64 + l] = static_cast<std::uint8_t>(l % 16);
  const auto v = values_of(BlockFormat::q4_k, b);
  for (int l = 0; l < 32; ++l) CHECK(v[l] == 2.0f * static_cast<float>(l % 16) - 1.5f);
  // Group 4: sc = 4 | 16 = 20, m = 5; its values are the low nibbles of qs[64..96).
  for (int l = 0; l < 32; ++l) CHECK(v[128 + l] == 20.0f * static_cast<float>(l % 16) - 2.5f);
}

TEST_CASE("IQ4_NL and MXFP4: table values times the scale") {
  std::vector<std::uint8_t> b(18, 0);
  put16(b, 0, half_one);
  b[2] = 0xf0;
  const auto v = values_of(BlockFormat::iq4_nl, b);
  CHECK(v[0] == -127.0f);
  CHECK(v[16] == 113.0f);
  std::vector<std::uint8_t> m(17, 0);
  m[0] = 128;   // 2^(128 - 128) = 1: the doubled E2M1 values as they are
  m[1] = 0x57;  // low nibble 7: 12, high nibble 5: 6
  const auto mv = values_of(BlockFormat::mxfp4, m);
  CHECK(mv[0] == 12.0f);
  CHECK(mv[16] == 6.0f);
  m[0] = 0;  // 2^-128: a subnormal scale
  CHECK(values_of(BlockFormat::mxfp4, m)[0] == std::ldexp(12.0f, -128));
}

TEST_CASE("NVFP4: an E4M3 scale per 16 values, 0x7f and 0 as zero") {
  std::vector<std::uint8_t> b(36, 0);
  b[0] = 0x38;  // exponent 7, mantissa 0: 1, halved
  b[1] = 0x7f;
  b[2] = 0x01;  // subnormal: 2^-9, halved
  b[4] = 0x17;  // values 0..7: low 7 (12), high 1 (1)
  b[12] = 0x07;
  b[20] = 0x07;
  const auto v = values_of(BlockFormat::nvfp4, b);
  CHECK(v[0] == 6.0f);
  CHECK(v[8] == 0.5f);
  CHECK(v[16] == 0.0f);
  CHECK(v[32] == std::ldexp(12.0f, -10));
}

TEST_CASE("IQ2_XXS: grid rows with the parity-completed signs") {
  std::vector<std::uint8_t> b(66, 0);
  put16(b, 0, half_one);
  // Group 0: grid row 0 for all four, scale 1: db = (0.5 + 1) x 0.25; signs index 1 for the
  // first eight values: 0x81, bits 0 and 7 negative.
  b[2 + 7] = 0x10;  // aux's top nibble (bits 28-31) = 1
  b[2 + 4] = 0x01;  // signs index of l = 0: 1
  const auto v = values_of(BlockFormat::iq2_xxs, b);
  const float db = 1.0f * 1.5f * 0.25f;
  CHECK(v[0] == db * 8.0f * -1.0f);
  CHECK(v[1] == db * 8.0f);
  CHECK(v[7] == db * 8.0f * -1.0f);
  CHECK(v[8] == db * 8.0f);
}

TEST_CASE("a NaN scale gives numpy's NaN: quieted, payload kept, Q4_1 keeps d's over m's") {
  std::vector<std::uint8_t> q8(34, 1);
  put16(q8, 0, 0x7c01);  // a signalling NaN half
  const auto v = values_of(BlockFormat::q8_0, q8);
  CHECK(std::bit_cast<std::uint32_t>(v[0]) == 0x7fc02000u);
  std::vector<std::uint8_t> q4(40, 0x35);  // two blocks, as numpy's rule needs
  for (int i = 0; i < 2; ++i) {
    put16(q4, 20 * i, 0x7c11);
    put16(q4, 20 * i + 2, 0xfe22);
  }
  for (float f : values_of(BlockFormat::q4_1, q4)) {
    CHECK(std::bit_cast<std::uint32_t>(f) == 0x7fc22000u);
  }
}

TEST_CASE("big-endian blocks: the halves gguf-convert-endian swaps, swapped back") {
  std::mt19937_64 random(3);
  for (BlockFormat f : {BlockFormat::q4_0, BlockFormat::q8_0, BlockFormat::q4_k, BlockFormat::q6_k,
                        BlockFormat::tq2_0, BlockFormat::mxfp4, BlockFormat::nvfp4}) {
    CAPTURE(info(f).name);
    REQUIRE(big_endian_dequantizable(f));
    std::vector<std::uint8_t> little(4 * info(f).block_bytes);
    for (auto& byte : little) byte = static_cast<std::uint8_t>(random() & 0x3f);
    std::vector<std::uint8_t> big = little;
    const std::size_t size = info(f).block_bytes;
    for (std::size_t b = 0; b < 4; ++b) {
      // What gguf-convert-endian swaps: d (and Q4_K's dmin), where the format has it.
      for (std::size_t at : f == BlockFormat::q4_k    ? std::vector<std::size_t>{0, 2}
                            : f == BlockFormat::q6_k  ? std::vector<std::size_t>{208}
                            : f == BlockFormat::tq2_0 ? std::vector<std::size_t>{64}
                            : f == BlockFormat::mxfp4 || f == BlockFormat::nvfp4
                                ? std::vector<std::size_t>{}
                                : std::vector<std::size_t>{0}) {
        std::swap(big[b * size + at], big[b * size + at + 1]);
      }
    }
    swap_block_fields(f, reinterpret_cast<std::byte*>(big.data()), 4);
    CHECK(big == little);
  }
  for (BlockFormat f : {BlockFormat::q5_k, BlockFormat::q2_k, BlockFormat::iq2_xxs}) {
    CHECK_FALSE(big_endian_dequantizable(f));
  }
}

TEST_CASE("scalar and AVX2 give the same bits on random blocks of every format") {
  if (!detail::dequantize_path_available(DequantizePath::avx2)) return;
  std::mt19937_64 random(7);
  for (BlockFormat f : dequantizable_formats) {
    CAPTURE(info(f).name);
    // 300 blocks of random bytes: some scales NaN, infinite or subnormal.
    std::vector<std::uint8_t> blocks(300 * info(f).block_bytes);
    for (auto& byte : blocks) byte = static_cast<std::uint8_t>(random());
    const auto a = values_of(f, blocks, DequantizePath::scalar);
    const auto b = values_of(f, blocks, DequantizePath::avx2);
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
  }
}

TEST_CASE("read_dequantized(): every range is the whole tensor's bytes, float32 and converted") {
  std::mt19937_64 random(11);
  for (BlockFormat f : {BlockFormat::q4_k, BlockFormat::q8_0, BlockFormat::iq4_nl}) {
    CAPTURE(info(f).name);
    const BlockFormatInfo& b = info(f);
    // 150 blocks: more than one staging buffer of values (64 blocks of 256, 512 of 32)...
    const std::size_t blocks = f == BlockFormat::q4_k ? 150 : 1100;
    std::vector<std::uint8_t> stored(blocks * b.block_bytes);
    for (auto& byte : stored) byte = static_cast<std::uint8_t>(random() & 0x3f);  // finite
    const std::vector<float> values = values_of(f, stored);
    for (DType to : {DType::float32, DType::float16, DType::bfloat16}) {
      CAPTURE(info(to).name);
      std::vector<std::byte> whole(values.size() * info(to).element_size);
      convert(DType::float32, to, false, reinterpret_cast<const std::byte*>(values.data()),
              whole.data(), values.size());
      int reads = 0;
      auto read_blocks = [&](std::uint64_t at, std::span<std::byte> into) {
        REQUIRE(at + into.size() <= stored.size());
        std::memcpy(into.data(), stored.data() + at, into.size());
        ++reads;
      };
      for (int trial = 0; trial < 200; ++trial) {
        const std::uint64_t offset = random() % whole.size();
        const std::uint64_t length =
            1 + random() % std::min<std::uint64_t>(whole.size() - offset, trial % 2 ? 300 : 400000);
        std::vector<std::byte> got(length);
        read_dequantized(f, false, to, offset, got, read_blocks);
        REQUIRE(std::memcmp(got.data(), whole.data() + offset, length) == 0);
      }
      std::vector<std::byte> all(whole.size());
      reads = 0;
      read_dequantized(f, false, to, 0, all, read_blocks);
      CHECK(all == whole);
      // Whole staging buffers: one read per 64 KiB of float32 values.
      CHECK(reads == static_cast<int>((values.size() * 4 + dequantize_staging_bytes - 1) /
                                      dequantize_staging_bytes));
    }
  }
}

TEST_SUITE_END();
