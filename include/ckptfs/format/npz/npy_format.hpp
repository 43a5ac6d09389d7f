// SPDX-License-Identifier: MIT
// The header of a .npy array (numpy's format, versions 1.0-3.0) read and checked: the dtype,
// the byte order, the shape and the order of the data that follows it.
#pragma once

#include <ckptfs/model/dtype.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

struct NpyHeader {
  std::uint64_t size = 0;      // bytes before the data: magic, version, length, the dict
  std::string descr;           // as written: "<f4", "|b1", "[('a', '<i4')]"...
  std::optional<DType> dtype;  // none when torch has no such dtype (`unsupported` says why)
  bool big_endian = false;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
  // Why the array cannot be served: an object array (pickled Python objects, never loaded), a
  // structured, datetime, string or void dtype; empty when it can.
  std::string unsupported;
};

// The most header bytes read_npy_header() reads (numpy's own limit is 10,000 by default).
inline constexpr std::size_t max_npy_header_bytes = 1 << 16;

// Whether `bytes` starts with the .npy magic, "\x93NUMPY".
bool is_npy(std::string_view bytes) noexcept;

// Parses the header at the start of `bytes` (which holds at least all of it, or all there is):
// the magic, a version of 1.0, 2.0 or 3.0, the header length (16 bits in 1.0, 32 after), and
// the dict numpy writes, a Python literal: {'descr': ..., 'fortran_order': ..., 'shape': (...)},
// keys in any order, ', ' or a trailing comma, padded with spaces to a newline. descr maps to a
// dtype: b1, i1-i8, u1-u8, f2-f8, c8, c16, with byte order '<', '>', '|' or '='; 'O' (object),
// structured (a list), datetime, string and void dtypes are kept in `unsupported`. Throws
// Error(bad_checkpoint) naming the problem for anything else: no magic, an unknown version, a
// header longer than the bytes or than max_npy_header_bytes, a dict that is not those three keys
// with values of their kind, a negative dimension or one past 2^63 - 1, more than `max_dims`.
NpyHeader read_npy_header(std::string_view bytes, std::size_t max_dims = 64);

}  // namespace ckptfs
