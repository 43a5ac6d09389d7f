// SPDX-License-Identifier: MIT
// numpy's .npz files (numpy.savez, savez_compressed) read into a Model: a zip of .npy members,
// each a key; stored members' arrays spliced from the file, their .npy headers read and checked.
#pragma once

#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ckptfs {

struct NpzLimits {
  ZipLimits zip;
  std::size_t max_dims = 64;  // torch's own limit on dimensions
  // The keys (members' names) as JSON, together, as index.json lists them (a control character
  // is six bytes): what pickle checkpoints allow their keys (ReadLimits::max_flattened_bytes).
  std::uint64_t max_keys_json_bytes = 64ull << 20;
};

// A deflated member whose array is served by inflating it on read: the caller opens an
// InflatedSource (source/inflated_source.hpp) of these bytes of the .npz as Model::sources[i + 1]
// for the i-th of them.
struct DeflatedMember {
  std::uint64_t offset = 0;  // of its compressed bytes in the .npz
  std::uint64_t compressed_size = 0;
  std::uint64_t size = 0;   // inflated
  std::uint32_t crc32 = 0;  // of the inflated bytes, as the zip records it
};

// Whether the source is a zip whose first member is named *.npy (what numpy.savez writes).
bool looks_like_npz(const ByteSource& source);

// Reads an .npz: every member, in the zip's order, is an entry keyed as numpy.load's NpzFile
// keys it (its name without ".npy"), with its own storage (its payload past the .npy header):
//   - a stored .npy member: a tensor of its dtype and shape (read_npy_header(): C or Fortran
//     order, the latter as a strided view served in C order; big-endian arrays as big-endian
//     storages); bytes after the array's are ignored, as numpy ignores them;
//   - a stored member without the .npy magic: what numpy.load gives for it, its bytes (a uint8
//     tensor of its size);
//   - a broken tensor saying why, for an array ckptfs cannot serve: an object array (pickled
//     Python objects, never loaded), a structured or other dtype torch has no dtype for, a
//     member shorter than its array, another compression than DEFLATE, or encryption;
//   - a deflated member (numpy.savez_compressed): its .npy header inflated; with `deflated`, its
//     array as above, in a source of its own: Model::sources[1 + i] ("<source_name>/<member>")
//     for (*deflated)[i], which the caller opens; without, a broken tensor saying so (inspect
//     shows its dtype and shape).
// A stored member's storage has its record_check (its CRC-32 checked as it is read, numpy's
// "Bad CRC-32"); a deflated member's InflatedSource checks its CRC-32 (DeflatedMember::crc32).
// A shape whose size overflows is a broken tensor (size_problem()).
// Throws what ZipArchive throws for an invalid zip (Error(bad_zip)), and Error(bad_checkpoint)
// for a stored member whose .npy header is invalid (read_npy_header()), naming the member;
// Error(unsupported) past limits.max_keys_json_bytes. The file is named for what it is when it
// is no zip (read_or_name_impostor(): a gzip, an HTML page...).
Model read_npz(const ByteSource& source, const std::string& source_name,
               const NpzLimits& limits = {}, std::vector<DeflatedMember>* deflated = nullptr);

}  // namespace ckptfs
