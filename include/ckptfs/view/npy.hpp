// SPDX-License-Identifier: MIT
// The header of a .npy file (NPY format 1.0, or 2.0 when the header needs it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

// The bytes that precede the array data: magic, version, header length, and the header dict
// {'descr': ..., 'fortran_order': False, 'shape': (...), } padded with spaces and ended with
// '\n' so that the data starts at a multiple of 64 bytes (numpy's ARRAY_ALIGN).
std::string npy_header(std::string_view descr, const std::vector<std::int64_t>& shape);

}  // namespace ckptfs
