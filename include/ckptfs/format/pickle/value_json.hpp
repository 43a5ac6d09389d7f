// SPDX-License-Identifier: MIT
// Text forms of pickled values: Python's str() of a dict key, and the JSON of a value entry.
#pragma once

#include <ckptfs/base/text.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// What Python's str() gives for a dict key, the text of its part of a flattened key: a str as
// is, an int in decimal, True/False/None, a float's repr() ("nan", "1e+16"), bytes and tuples as
// their repr() ("b'x\\xff'", "(1, 'a')", quotes and escapes as Python writes them).
std::string key_text(const pickle::Graph& graph, pickle::NodeId id);

// Python's repr() of a bytes object (b'x\\xff'): key_text() of a bytes key.
std::string bytes_repr(std::string_view data);

// A dict key as JSON for a key path (index.json's "key_path"): a str as a string, an int or an
// integral big int as a number, true/false/null, a float as a number or {"__float__": "nan"},
// bytes as {"__bytes__": "<hex>"}, a tuple as {"__tuple__": "<its repr>"}, anything else as
// {"__key__": "<its text>"}.
std::string key_json(const pickle::Graph& graph, pickle::NodeId id);

// What makes two keys equal as Python compares them in a dict (1 == 1.0 == True, b"x" != "x",
// (1, 2) == (1.0, 2)), as a string: equal keys have equal identities. Empty for a key compared by
// object identity (instances, nan, nested tuples here), which equals no other node.
std::string key_identity(const pickle::Graph& graph, pickle::NodeId id);

// Compact JSON of a subtree (value.json), by a rule that says a plain value exactly, up to the
// type of values that compare equal (docs/VALUES.md; read back by read_plain_value.hpp):
//   None, True, False, int, float            null, true, false, numbers (a float always with
//                                            '.' or 'e'); {"__float__": "nan" | "inf" | "-inf"};
//                                            an int past 1024 bytes {"__int__": "0x<hex>"}
//   str                                      a string (bytes that are not UTF-8 as text.hpp)
//   bytes, bytearray                         {"__bytes__": "<hex>"}, {"__bytearray__": "<hex>"}
//   list                                     an array
//   tuple, set, frozenset                    {"__tuple__": [...]}, {"__set__": [...]},
//                                            {"__frozenset__": [...]}
//   dict, OrderedDict                        an object when every key is a str and none starts
//                                            and ends with "__"; else {"__dict__": [[key, value],
//                                            ...]}, keys written as values (0 the int, "0" the
//                                            str): real keys never pass for markers. Keys Python
//                                            finds equal are merged as Python merges them.
//   numpy scalars, torch.Size                numbers and bools; {"__tuple__": [ints]}
// What is no plain data is described by objects whose first key is a marker no reader takes for
// a value: "__class__" (a call or instance: args, kwargs, state, items, dict; also a dict with a
// BUILD state), "__global__" (a bare class or function), "__persistent_id__", "__recursion__" (a
// container inside itself). Iterative; a result longer than `max_bytes` is replaced by
// {"__truncated__": true, "bytes_limit": max_bytes}; containers nested deeper than
// max_value_depth are replaced by {"__truncated__": true, "depth_limit": max_value_depth}.
inline constexpr std::size_t max_value_depth = 200;
// numpy's scalar(dtype(code, False, True) with its BUILD state, raw bytes) as value_json()
// writes it: a JSON number or bool, for the codes f8 f4 i8 i4 i2 i1 u8 u4 u2 u1 b1 in little
// endian with raw bytes of their size; nullopt for any other object (described as an object).
std::optional<std::string> numpy_scalar_json(const pickle::Graph& graph,
                                             const pickle::Object& object);
std::string value_json(const pickle::Graph& graph, pickle::NodeId id, std::size_t max_bytes);

}  // namespace ckptfs
