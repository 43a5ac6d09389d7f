// SPDX-License-Identifier: MIT
// Numbers as text: exact decimal totals past 64 bits, and floats as Python and JSON write them.
#pragma once

#include <string>

namespace ckptfs {

// Totals of bytes: many entries of up to 2^63 bytes each may pass 2^64, and a total never wraps.
// (__extension__: GCC's and Clang's 128-bit integer, which -Wpedantic would flag.)
__extension__ typedef unsigned __int128 uint128;

// The decimal digits of `value`.
std::string decimal(uint128 value);

// Python's repr() of a float: the shortest text that reads back the same, ".0" on integers,
// "nan", "inf", "-inf".
std::string float_repr(double value);

// A float as JSON: a number, or {"__float__": "nan"|"inf"|"-inf"}, which JSON has no number
// for (and null would say None).
std::string float_json(double value);

}  // namespace ckptfs
