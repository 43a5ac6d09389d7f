// SPDX-License-Identifier: MIT
// Text forms of pickled values: Python's str() of a dict key, and the JSON of a value entry.
#pragma once

#include <ckptfs/base/text.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>

#include <string>
#include <string_view>

namespace ckptfs {

// What Python's str() gives for a dict key, the text of its part of a flattened key: a str as
// is, an int in decimal, True/False/None, a float's repr() ("nan", "1e+16"), bytes and tuples as
// their repr() ("b'x\\xff'", "(1, 'a')", quotes and escapes as Python writes them).
std::string key_text(const pickle::Graph& graph, pickle::NodeId id);

// A dict key as JSON for a key path (index.json's "key_path"): a str as a string, an int or an
// integral big int as a number, true/false/null, a float as a number or {"__float__": "nan"},
// bytes as {"__bytes__": "<hex>"}, a tuple as {"__tuple__": "<its repr>"}, anything else as
// {"__key__": "<its text>"}.
std::string key_json(const pickle::Graph& graph, pickle::NodeId id);

// What makes two keys equal as Python compares them in a dict (1 == 1.0 == True, b"x" != "x",
// (1, 2) == (1.0, 2)), as a string: equal keys have equal identities. Empty for a key compared by
// object identity (instances, nan, nested tuples here), which equals no other node.
std::string key_identity(const pickle::Graph& graph, pickle::NodeId id);

// Compact JSON of a subtree: null, bools, numbers, strings, arrays (list, tuple, set), objects
// (dict, keys as key_text). What JSON cannot hold is an object with a "__class__" (a call or
// instance: args, kwargs, state, items), "__global__" (a bare class or function), "__bytes__"
// (hex), "__float__" ("nan", "inf", "-inf": JSON has no such numbers, and null is None) or
// "__recursion__" (a container inside itself). numpy scalars become numbers and
// torch.Size a list. Iterative; a result longer than `max_bytes` is replaced by
// {"__truncated__": true, "bytes_limit": max_bytes}; containers nested deeper than
// max_value_depth are replaced by {"__truncated__": true, "depth_limit": max_value_depth}.
inline constexpr std::size_t max_value_depth = 200;
std::string value_json(const pickle::Graph& graph, pickle::NodeId id, std::size_t max_bytes);

}  // namespace ckptfs
