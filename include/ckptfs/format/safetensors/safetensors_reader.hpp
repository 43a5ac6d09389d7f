// SPDX-License-Identifier: MIT
// safetensors files read into a Model: the 8-byte header length, the JSON header (streamed, never
// held whole) and every check of the safetensors library and more, without reading tensor bytes.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckptfs {

struct SafetensorsLimits {
  // The header's length; the safetensors library refuses more (MAX_HEADER_SIZE).
  std::uint64_t max_header_bytes = 100'000'000;
  // Tensors in one file (the header's length bounds them too: about 50 bytes each at least).
  std::uint64_t max_tensors = 4'000'000;
  // __metadata__: its entries, and the bytes of its keys and values together. The library has
  // no limit but the header's; real files carry a few entries of up to some hundred KB.
  std::uint64_t max_metadata_entries = 65'536;
  std::uint64_t max_metadata_bytes = 64u << 20;
  std::size_t max_dims = 64;  // torch's own limit on dimensions
};

// Whether the first bytes look like a safetensors file: an 8-byte length, then '{'.
bool looks_like_safetensors(const ByteSource& source);

// Reads a safetensors file: a little-endian uint64 N, N bytes of JSON, then the tensors' bytes.
// Every tensor is one entry keyed by its name and one storage (the tensor's own bytes, in
// source 0, named `source_name`), in the order of the data: by data_offsets as the library
// sorts them, empty tensors at the same offset in header order. __metadata__ goes to
// Model::metadata in header order.
//
// Accepted as the library accepts: a header padded with trailing whitespace or not, a JSON
// `"__metadata__": null`, tensor descriptions with members besides dtype, shape and
// data_offsets (ignored), tensors described in any order (MLX writes them by name, its data in
// another order), 0-d and empty tensors, no tensor at all.
//
// Refused with Error(bad_checkpoint), as the library refuses them, and more:
//   - fewer than 8 bytes; a header length over limits.max_header_bytes (the library's 100 MB)
//     or past the end of the file;
//   - a header that is not strict JSON (JsonReader's rules: well-formed UTF-8, valid escapes, no
//     trailing garbage...), not an object, or with a key twice at any level (the library keeps
//     the last of two tensors of one name; this refuses the file);
//   - __metadata__ that is neither null nor an object of strings;
//   - a tensor description that is not an object, or lacks dtype, shape or data_offsets; a dtype
//     the format does not define; a shape that is not an array of non-negative integers;
//     data_offsets that are not exactly two non-negative integers; numbers with a fraction, an
//     exponent or a minus sign, or past 2^64 - 1;
//   - a shape whose element count or bit count overflows 64 bits, or whose bits do not fill
//     whole bytes (sub-byte dtypes); data_offsets whose length is not shape x element size;
//   - data that is not one run from offset 0: overlapping tensors, gaps, begin > end; data that
//     does not end exactly at the end of the file (bytes after it, or a file cut short).
// Refused with Error(unsupported): what the library accepts but torch cannot hold: F6_E2M3 and
// F6_E3M2 tensors (6-bit elements), F4 tensors whose last dimension is odd (torch's
// float4_e2m1fn_x2 packs element pairs along it, so F4 [..., 2n] is shown as [..., n]), more
// than limits.max_dims dimensions, a dimension or stride past 2^63 - 1; and files past the
// other limits.
//
// The errors found while reading the header start with "safetensors header: " (and the JSON's
// with the byte offset in the header); every message quotes the tensor names it gives.
Model read_safetensors(const ByteSource& source, std::string source_name,
                       const SafetensorsLimits& limits = {});

}  // namespace ckptfs
