// SPDX-License-Identifier: MIT
// Flattened keys as names in the mount: one path component each, at most 255 bytes (252 before
// the RFC layout's ".pt"), unique, a key's name never another key's; and the way back,
// key_of_name().
#pragma once

#include <ckptfs/base/hash.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// The name of a key (its directory; in the RFC layout its file, before ".pt"): its UTF-8 bytes
// with '%' written "%25", '/' "%2F" and NUL "%00". A name that is not a key's to take gets a '%'
// in front: one starting with '.' (".", "..", ".ckptfs", ".hidden"), so that no key's name is
// hidden from a shell's `*` and a glob of key names (`model.*`) never matches the mount's
// .ckptfs folder; "" and "map" (map.pt, beside the keys in the RFC layout); and the names the
// root's views had before they moved into .ckptfs, "index.json", "model.safetensors",
// "model.safetensors.index.json" and "model-<digits>-of-<digits>.safetensors", kept so that a
// key's name is the same in every version (copies made before read alike). A name longer
// than `max_bytes` keeps its first 200 bytes (cut at a character boundary, never inside an
// escape), then "%~" and the 16 lower-case hex digits of the FNV-1a 64-bit hash of the whole key.
// Escaping never makes "%~" nor "%#": those names are never another key's. `max_bytes` is 255,
// NAME_MAX; 252 in the RFC layout, whose files add ".pt" (rfc_name_bytes).
inline constexpr std::size_t max_name_bytes = 255;

// The hidden folder at a mount's root that holds the whole-checkpoint views (index.json, the
// safetensors export), as ZFS keeps its snapshots in .zfs; a copy of a whole mount has it too.
// No key's name is this one, nor starts with '.' (below), so that the root's `*` and `P*` for a
// key prefix P match key directories only.
inline constexpr std::string_view views_folder = ".ckptfs";

inline constexpr std::size_t rfc_name_bytes = max_name_bytes - 3;
std::string directory_name(std::string_view key, std::size_t max_bytes = max_name_bytes);

// Whether directory_name(key, max_bytes) is `key` itself, without making it (most keys).
bool is_own_name(std::string_view key, std::size_t max_bytes = max_name_bytes) noexcept;

// The name of the n-th key (n >= 2) whose directory_name() an earlier key has: that name, then
// "%#n", cut as directory_name() cuts when it would pass `max_bytes`.
std::string suffixed_name(std::string_view key, std::uint64_t n,
                          std::size_t max_bytes = max_name_bytes);

// The key whose directory_name() is `name`, for a name the rule gives a key as it is: never one
// cut ("%~" and a hash) or suffixed ("%#2"), which do not say their key. nullopt for those and
// for any name the rule never makes ("a%zz"), including one longer than `max_bytes` (the rule
// would have cut it). An RFC directory's "<name>.pt" files give their <name> with rfc_name_bytes.
//   "decoder.weight" -> "decoder.weight", "a%2Fb" -> "a/b", "%index.json" -> "index.json",
//   "%.hidden" -> ".hidden", "%" -> "" (the empty key)
std::optional<std::string> key_of_name(std::string_view name,
                                       std::size_t max_bytes = max_name_bytes);

// Keys of equal text (the int 0 and the str "0" both flatten to "0"), one rule for the mount's
// names, the RFC layout's files and `ckptfs pack`'s keys: the first keeps its text; each later
// one is the n-th of that text, n the smallest from 2 up that is not taken and for which
// "<text>%#<n>" is no key's own text (so that pack's key "<text>%#<n>" is unique too). Its name
// is suffixed_name(key, n); pack writes it as the key "<text>%#<n>" and says so.
//
// Names for the keys of a mount, in order, by that rule: each key gets directory_name(); a key
// whose name an earlier key has gets "%#n" after it, cut as directory_name() cuts when it would
// pass max_bytes. Only keys that really collide get a suffix, and a suffixed name is no key's
// own name. `own_keys`, when given, are the texts of all the keys named (see above); it must
// outlive the allocator.
class NameAllocator {
 public:
  explicit NameAllocator(std::size_t max_bytes = max_name_bytes,
                         const TextViewSet* own_keys = nullptr)
      : max_bytes_(max_bytes), own_keys_(own_keys) {}
  std::string name(std::string_view key);

 private:
  std::size_t max_bytes_;
  const TextViewSet* own_keys_;
  TextSet taken_;
};

// Whether "<key>%#<n>" is one of `own_keys` (the texts of the keys named together): then n is
// skipped for a later key of the text `key` (see NameAllocator).
bool suffix_is_own_key(std::string_view key, std::uint64_t n, const TextViewSet& own_keys);

std::uint64_t fnv1a64(std::string_view bytes);

}  // namespace ckptfs
