// SPDX-License-Identifier: MIT
// A value entry's JSON (Entry::value_json, value_json.hpp's form) as the plain Python value it
// describes, to be pickled again (`ckptfs pack`): the way back from value_json().
#pragma once

#include <ckptfs/format/pickle_writer.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// The plain value `value_json` describes:
//   null, true, false          None, True, False
//   a number without '.', 'e'  an int (past 64 bits too)
//   any other number           a float
//   a string                   a str
//   an array                   a list (value_json writes tuples and sets as arrays too)
//   an object                  a dict of str keys (value_json writes every key as its text)
//   {"__bytes__": "<hex>"}     bytes
//   {"__float__": "nan"|"inf"|"-inf"}   a float
// What value_json() writes for what it could not evaluate is no plain value: an object whose
// first member is "__class__" (a call or instance, never run), "__global__" (a class or
// function), "__persistent_id__", "__truncated__" (cut at a limit) or "__recursion__".
// Returns nullopt for those, with `why_not` saying what it found ("an instance of
// argparse.Namespace"). Throws Error(bad_checkpoint) for text that is not strict JSON
// (base/json_reader.hpp's rules) or nests deeper than max_plain_value_depth.
inline constexpr std::size_t max_plain_value_depth = 512;
std::optional<pickle::Value> plain_value(std::string_view value_json, std::string& why_not);

}  // namespace ckptfs
