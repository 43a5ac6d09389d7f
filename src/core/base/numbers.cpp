// SPDX-License-Identifier: MIT
// decimal(), float_repr(), float_json() and the checked products of sizes.
#include <ckptfs/base/numbers.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ckptfs {

std::string decimal(uint128 value) {
  std::string digits;
  do {
    digits += static_cast<char>('0' + static_cast<int>(value % 10));
    value /= 10;
  } while (value != 0);
  std::reverse(digits.begin(), digits.end());
  return digits;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string float_json(double v) {
  if (std::isfinite(v)) return float_repr(v);
  return fmt::format("{{\"__float__\":\"{}\"}}", float_repr(v));
}

std::optional<std::uint64_t> checked_product(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

std::optional<std::uint64_t> element_count(std::span<const std::int64_t> shape) noexcept {
  std::uint64_t count = 1;
  for (const std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(count, static_cast<std::uint64_t>(d), &count)) {
      return std::nullopt;
    }
  }
  return count;
}

std::optional<std::uint64_t> element_count(std::span<const std::uint64_t> shape) noexcept {
  std::uint64_t count = 1;
  for (const std::uint64_t d : shape) {
    if (__builtin_mul_overflow(count, d, &count)) return std::nullopt;
  }
  return count;
}

}  // namespace ckptfs
