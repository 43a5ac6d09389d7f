// SPDX-License-Identifier: MIT
// A value entry's JSON (value_json(), what value.json holds) read back into the value it
// describes, to be written as a pickle: the <key>.pt of the RFC layout, the values `ckptfs pack`
// writes from a split directory.
#pragma once

#include <ckptfs/format/pickle/pickle_writer.hpp>

#include <optional>
#include <string_view>

namespace ckptfs {

// The value `value_json` describes, when value_json() wrote it whole:
//   null, true, false                      None, True, False
//   an integer (any size)                  int
//   a number with '.' or 'e', {"__float__": "nan" | "inf" | "-inf"}        float
//   a string (bytes that are not UTF-8 as base/text.hpp escapes them)      str
//   {"__bytes__": "<hex>"}                 bytes
//   an array                               list (what was a list, a tuple or a set)
//   any other object                       dict, str keys (a key's text, as value_json() wrote)
// nullopt for what value_json() only describes: an object whose first key is "__class__",
// "__global__", "__persistent_id__", "__recursion__" or "__truncated__" anywhere inside; also for
// text that is not such JSON. Iterative; the nesting value_json() allows (max_value_depth) and no
// more. The result is not checked for what a pickle cannot hold (a str that is not UTF-8 with
// surrogates): pickle::write_value() throws for those.
std::optional<pickle::Value> plain_value(std::string_view value_json);

}  // namespace ckptfs
