// SPDX-License-Identifier: MIT
// base/numbers' checked products and model's size_problem(): a shape's elements and bytes never
// wrap, to 0 (an "empty" tensor) or to a small count, whatever the order of its dimensions.
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/model/model.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace ckptfs;

namespace {

constexpr std::int64_t two_32 = std::int64_t{1} << 32;

std::optional<std::uint64_t> count(std::vector<std::int64_t> shape) { return element_count(shape); }

Tensor tensor(DType dtype, std::vector<std::int64_t> shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

}  // namespace

TEST_SUITE_BEGIN("numbers");

TEST_CASE("checked_product and element_count: exact, or none, never wrapped") {
  CHECK(checked_product(3, 4) == 12u);
  CHECK(checked_product(UINT64_MAX, 1) == UINT64_MAX);
  CHECK(checked_product(std::uint64_t{1} << 32, std::uint64_t{1} << 32) == std::nullopt);
  CHECK(checked_product((std::uint64_t{1} << 63) + 1, 2) == std::nullopt);  // would be 2

  CHECK(count({}) == 1u);  // a scalar
  CHECK(count({2, 3, 4}) == 24u);
  CHECK(count({0}) == 0u);
  CHECK(count({5, 0, 7}) == 0u);
  CHECK(count({-1}) == std::nullopt);
  CHECK(count({0, -1}) == std::nullopt);
  // Counts that wrap past 2^64: to 0, to 1, to a small number.
  CHECK(count({two_32, two_32}) == std::nullopt);               // 2^64: would be 0
  CHECK(count({two_32 + 1, two_32 - 1}) == UINT64_MAX);         // 2^64 - 1 fits...
  CHECK(count({two_32 + 1, two_32 - 1, 2}) == std::nullopt);    // ...twice it does not
  CHECK(count({two_32, two_32, 0}) == std::nullopt);            // the overflow comes first
  CHECK(count({std::int64_t{1} << 62, 4, 3}) == std::nullopt);  // would be 0, then 0
  CHECK(count({3, 6148914691236517206}) == std::nullopt);       // 2^64 + 2: would be 2
  CHECK(count({0, two_32, two_32}) == 0u);                      // torch's count: 0
  CHECK(count({INT64_MAX, 2}) == 2 * static_cast<std::uint64_t>(INT64_MAX));  // fits 64 bits

  const std::vector<std::uint64_t> unsigned_shape{std::uint64_t{1} << 32, std::uint64_t{1} << 32};
  CHECK(element_count(unsigned_shape) == std::nullopt);
  const std::vector<std::uint64_t> huge{std::uint64_t{1} << 63, 1};
  CHECK(element_count(huge) == std::uint64_t{1} << 63);
}

TEST_CASE("size_problem: elements, bytes served and stored, blocks, each checked") {
  CHECK(size_problem(tensor(DType::float32, {2, 3})).empty());
  CHECK(size_problem(tensor(DType::float32, {0, two_32, two_32})).empty());  // empty, fits
  CHECK(size_problem(tensor(DType::uint8, {-2})).find("negative dimension") != std::string::npos);
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{
           {two_32, two_32}, {two_32, two_32, 0}, {3, 6148914691236517206}}) {
    const Tensor t = tensor(DType::uint8, shape);
    CAPTURE(t.shape.size());
    CHECK(size_problem(t).find("has more elements than 64 bits count") != std::string::npos);
    CHECK(t.numel() == 0);  // 0 when refused: never taken for the bytes of a tensor
    CHECK(t.nbytes() == 0);
  }
  // Bytes past 2^64 (the element count fits), and past what a file holds.
  CHECK(size_problem(tensor(DType::float64, {std::int64_t{1} << 61}))
            .find("holds more bytes than a file can") != std::string::npos);
  CHECK(size_problem(tensor(DType::int16, {std::int64_t{1} << 62})).find("holds more bytes") !=
        std::string::npos);
  CHECK(size_problem(tensor(DType::uint8, {std::int64_t{1} << 62})).empty());
  // Served as float32 (a ZeRO buffer stored as float16): the served bytes count too.
  Tensor converted = tensor(DType::float32, {(std::int64_t{1} << 61) + 1});
  converted.stored_dtype = DType::float16;
  CHECK(size_problem(converted).find("holds more bytes") != std::string::npos);
  // Blocks: their float32 values must fit a file as well as their blocks.
  Tensor blocks = tensor(DType::float32, {std::int64_t{1} << 53, 256});
  blocks.blocks = BlockFormat::q4_k;
  CHECK(size_problem(blocks).find("holds more bytes than a file can") != std::string::npos);
  blocks.shape = {16, 256};
  CHECK(size_problem(blocks).empty());
  CHECK(blocks.stored_nbytes() == 16 * 144);
}

TEST_SUITE_END();
