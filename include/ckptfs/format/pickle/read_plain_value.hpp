// SPDX-License-Identifier: MIT
// The plain value (model/plain_value.hpp) a value entry holds, read from its pickle graph
// (exactly) or from its JSON (value_json(), what value.json holds: as exactly as value.json's
// rule says it), to be written as a pickle: by `ckptfs pack`, and as the <key>.pt of the RFC
// layout.
#pragma once

#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/model/plain_value.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

namespace ckptfs {

// The value node `id` of `graph` holds, exactly, when every part of it is plain data: None,
// bool, int, float, str, bytes, bytearray, list, tuple, set, frozenset (items hashable), dict
// and OrderedDict (keys hashable; keys Python finds equal merged as Python merges them: the first
// position, the last value), and calls of the constructors is_plain_call() names with plain
// arguments (torch.Size, numpy scalars and their dtypes). nullopt for anything else: an object of
// another class, a global, a persistent id, a value inside itself, an unhashable key, a dict with
// a BUILD state, nesting past pickle::max_value_depth_written; and when building it would take
// more than `budget` nodes (each node built is taken from it, a node reached twice counted
// twice: what bounds a value whose parts are shared many times). Iterative.
// Whenever this gives nullopt but for the budget, value_json() of the same node says something
// plain_value(std::string_view) reads as not plain: readers of value.json never make up a value
// the pickle did not hold.
std::optional<PlainValue> plain_value(const pickle::Graph& graph, pickle::NodeId id,
                                      std::uint64_t& budget);

// The value `value_json` describes (value_json.hpp's rule, read back):
//   null, true, false                        None, True, False
//   an integer (any size), {"__int__": "0x<hex>"}                             int
//   a number with '.' or 'e', {"__float__": "nan" | "inf" | "-inf"}          float
//   a string (bytes that are not UTF-8 as base/text.hpp escapes them)        str
//   {"__bytes__": "<hex>"}, {"__bytearray__": "<hex>"}                       bytes, bytearray
//   an array                                 list
//   {"__tuple__": [...]}, {"__set__": [...]}, {"__frozenset__": [...]}       tuple, set, frozenset
//   an object none of whose keys starts and ends with "__"                  dict (str keys)
//   {"__dict__": [[key, value], ...]}        dict (keys of any plain kind: 0 is the int)
// What value_json() only describes is nullopt: an object with a "__"-key other than these
// ("__class__", "__global__", "__persistent_id__", "__recursion__", "__truncated__", and any
// other), an unhashable key or set item; also text that is not such JSON. What compares equal
// but is of another type comes back as the type JSON says: an OrderedDict as a dict, a numpy
// scalar as an int, float or bool, a torch.Size as a tuple. Iterative; the nesting value_json()
// allows (max_value_depth) and no more. The result is not checked for what a pickle cannot hold
// (a str that is not UTF-8 with surrogates): pickle::write_value() throws for those.
std::optional<PlainValue> plain_value(std::string_view value_json);

// The plain value entry `e` holds: e.value when the reader kept it, else what its value_json
// says; null for a tensor and for a value that is not plain.
std::shared_ptr<const PlainValue> entry_value(const Entry& e);

}  // namespace ckptfs
