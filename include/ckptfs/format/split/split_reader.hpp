// SPDX-License-Identifier: MIT
// Split directories: key directories copied out of a mount (`rsync -a /mnt/model/decoder.*
// dest/`), each holding meta.json and data (a tensor) or value.json (a value), with or without
// the mount's index.json, read into a Model in which every tensor is its own data file.
//
//   dest/
//     .ckptfs/index.json         optional: the mount's (index.json at the root in copies made
//                                before the views moved into .ckptfs); only its order and value
//                                keys are used
//     decoder.weight/meta.json   {"key", "key_path"?, "dtype", "shape", "nbytes", ...}
//     decoder.weight/data        the tensor's nbytes bytes in C order
//     epoch/value.json           a value
//
// Everything in the directory is untrusted: each meta.json is read by the strict JSON reader
// within limits, every number it gives is checked against the others and against its data file,
// and every file is opened beneath the directory (source/directory.hpp), so that a symbolic
// link leading out of it ("data -> /etc/shadow") is refused rather than read.
#pragma once

#include <ckptfs/format/directory_model.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckptfs {

struct SplitLimits {
  std::uint64_t max_entries = 4'000'000;           // key directories (and root entries)
  std::uint64_t max_index_bytes = 1'000'000'000;   // index.json: ~150 bytes an entry
  std::uint64_t max_meta_json_bytes = 1u << 20;    // one meta.json (the mount's: ~1 KiB + key)
  std::uint64_t max_value_json_bytes = 16u << 20;  // one value.json (the mount's: <= ~1 MiB)
  std::uint64_t max_json_bytes = 1ull << 30;       // every meta.json and value.json together
  std::size_t max_depth = 32;  // JSON nesting of meta.json, and of index.json but its values
  // JSON nesting of a value.json (and of a value in index.json): value_json()'s, whose
  // {"__dict__": [[key, value]]} takes three levels a value level, 200 levels deep.
  std::size_t max_value_depth = 3 * 200 + 2;
  std::size_t max_dims = 64;  // torch's own limit on dimensions
};

// Reads the split directory `directory`.
//
// index.json: .ckptfs/index.json when there is one, else index.json at the root.
// Entries: every subdirectory of the root but .ckptfs is a key directory and must hold meta.json
// (a tensor) or value.json (a value), not both. A tensor's key is meta.json's "key" (and
// "key_path"); a value's key is what index.json says for its directory, else the key whose name
// (the mount's naming rule, base/names.hpp) is the directory's, which a cut or suffixed name
// ("%~", "%#2") does not say: such a value needs index.json. .ckptfs's other files and regular
// files of the root (model.safetensors of an older mount, map.pt) are ignored.
// Order: index.json's, for the directories it names (it may name more: a subset copied with it);
// the other directories after them, and all of them without index.json, sorted by key (its
// UTF-8 bytes), then key path.
//
// Every JSON file is read as the mount writes it: a \udcXX escape (alone, not a surrogate pair)
// is the byte 0xXX of a key or string that is not UTF-8 (a str with a lone surrogate), so that
// such a key reads back as the very bytes the mount had.
// meta.json: "key" a string; "dtype" a torch dtype name; "shape" at most max_dims integers in
// [0, 2^63); "nbytes" their product times the element size, which must not overflow; "data" a
// regular file of exactly nbytes bytes. Optional: "key_path" (an array of strings, numbers,
// booleans, nulls, and objects of one string member such as {"__bytes__": "ff"}), "byteorder"
// ("little", "big"), "requires_grad" (a boolean), "quantization" (for qint8, quint8, qint32,
// quint4x2, quint2x4 only, and required for them: per tensor {"qscheme", "scale", "zero_point"},
// per channel {"qscheme", "axis", "scales", "zero_points"} naming the entries that hold them),
// "broken" (null, or why the mount could not serve it: the tensor is broken, no data needed).
// Other members (stride, storage, file_offset...) describe the checkpoint it came from and are
// ignored: data is the tensor alone, in C order. The data file's bytes are never read here.
//
// Throws Error, its message naming the file relative to the directory ("decoder.weight/meta.json:
// ..."): io when a file cannot be opened or read (a missing data file, "No such file or
// directory"); bad_checkpoint for a meta.json, value.json or index.json that is not strict JSON
// or not of this schema, a dtype torch does not name, numbers that disagree (nbytes and shape,
// nbytes and the data file's size), a key claimed by two directories (the same key and key
// path), a subdirectory that is no key directory, a path that leads out of the directory (a
// symbolic link to elsewhere); unsupported past `limits`.
DirectoryModel read_split_directory(const std::string& directory, const SplitLimits& limits = {});

// Whether `directory` looks like a split directory: it holds .ckptfs/index.json or index.json,
// or a subdirectory holding meta.json or value.json. Never throws (false when it cannot be
// listed).
bool looks_like_split_directory(const std::string& directory);

}  // namespace ckptfs
