// SPDX-License-Identifier: MIT
// decimal(), float_repr() and float_json().
#include <ckptfs/base/numbers.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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

}  // namespace ckptfs
