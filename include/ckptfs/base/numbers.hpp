// SPDX-License-Identifier: MIT
// Numbers as text: exact decimal totals past 64 bits, and floats as Python and JSON write them;
// products of sizes checked for overflow.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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

// a × b, or nullopt when it passes 2^64 - 1.
std::optional<std::uint64_t> checked_product(std::uint64_t a, std::uint64_t b) noexcept;

// The elements of a shape: the product of its dimensions, in order, each step checked, as torch
// (torch.empty) and the safetensors library count them; nullopt when a dimension is negative or
// a step passes 2^64 - 1. It never wraps: (2^32, 2^32) is nullopt, not 0; (2^32, 2^32, 0) is
// nullopt too (the overflow comes first), (0, 2^32, 2^32) is 0. Every reader goes from a shape to
// its elements through this, and to its bytes through size_problem() (model/model.hpp).
std::optional<std::uint64_t> element_count(std::span<const std::int64_t> shape) noexcept;
// The same for dimensions read as unsigned (safetensors' and GGUF's).
std::optional<std::uint64_t> element_count(std::span<const std::uint64_t> shape) noexcept;

}  // namespace ckptfs
