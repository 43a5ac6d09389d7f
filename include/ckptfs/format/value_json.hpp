// SPDX-License-Identifier: MIT
// Text forms of pickled values: Python's str() of a dict key, and the JSON of a value entry.
#pragma once

#include <ckptfs/base/text.hpp>
#include <ckptfs/format/pickle_machine.hpp>

#include <string>
#include <string_view>

namespace ckptfs {

// What Python's str() gives for a dict key: str as is, int in decimal, True/False/None, a float's
// repr, a tuple as "(1, 'a')". Used to build flattened keys.
std::string key_text(const pickle::Graph& graph, pickle::NodeId id);

// Compact JSON of a subtree: null, bools, numbers, strings, arrays (list, tuple, set), objects
// (dict, keys as key_text). What JSON cannot hold is an object with a "__class__" (a call or
// instance: args, kwargs, state, items), "__global__" (a bare class or function), "__bytes__"
// (hex) or "__recursion__" (a container inside itself). numpy scalars become numbers and
// torch.Size a list. Iterative; a result longer than `max_bytes` is replaced by
// {"__truncated__": true, "bytes_limit": max_bytes}; containers nested deeper than
// max_value_depth are replaced by {"__truncated__": true, "depth_limit": max_value_depth}.
inline constexpr std::size_t max_value_depth = 200;
std::string value_json(const pickle::Graph& graph, pickle::NodeId id, std::size_t max_bytes);

}  // namespace ckptfs
