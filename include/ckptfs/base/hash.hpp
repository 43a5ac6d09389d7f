// SPDX-License-Identifier: MIT
// Hash tables keyed by text that comes from a file: zip entry names, pickle keys, storage keys,
// safetensors names, the mount's file names.
//
// std::hash<std::string> has no key (libstdc++: MurmurHash2 under a fixed seed), so whoever
// writes the file can choose names that all fall into one bucket: each insert then scans every
// earlier name and reading a checkpoint of n keys costs n^2 comparisons (hash flooding). The
// tables here hash with SipHash-1-3, a keyed function made for this, under a key drawn once per
// process from the kernel: the bucket of a name cannot be known to the file's author.
//
//   ckptfs::TextMap<std::size_t> index;        // std::unordered_map<std::string, ...>
//   index.find(std::string_view{"a.b"});       // looked up by view, no string built
//
// Every unordered container of the core keyed by text uses these (tests/lint/keyed_hashes.py
// checks it). Tables keyed by numbers the reader assigns itself (node ids) need none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace ckptfs {

// SipHash-c-d of `bytes` under the 128-bit key (k0, k1), as its authors define it: c
// compression rounds per 8-byte word, d finalization rounds. siphash(2, 4, ...) is the
// reference SipHash-2-4, siphash(1, 3, ...) the faster variant hash tables use.
std::uint64_t siphash(int c_rounds, int d_rounds, std::uint64_t k0, std::uint64_t k1,
                      std::string_view bytes) noexcept;

// SipHash-1-3 under this process's key (drawn on first use from getrandom()).
struct KeyedHash {
  using is_transparent = void;  // find(std::string_view) on a table of std::string
  std::size_t operator()(std::string_view text) const noexcept;
};

template <class Value>
using TextMap = std::unordered_map<std::string, Value, KeyedHash, std::equal_to<>>;
template <class Value>
using TextViewMap = std::unordered_map<std::string_view, Value, KeyedHash, std::equal_to<>>;
using TextSet = std::unordered_set<std::string, KeyedHash, std::equal_to<>>;
using TextViewSet = std::unordered_set<std::string_view, KeyedHash, std::equal_to<>>;

}  // namespace ckptfs
