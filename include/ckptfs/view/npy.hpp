// SPDX-License-Identifier: MIT
// The header of a .npy file (NPY format 1.0, or 2.0 when the header needs it).
#pragma once

#include <ckptfs/model/dtype.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

// The bytes that precede the array data: magic, version, header length, and the header dict
// {'descr': ..., 'fortran_order': False, 'shape': (...), } padded with spaces and ended with
// '\n' so that the data starts at a multiple of 64 bytes (numpy's ARRAY_ALIGN).
std::string npy_header(std::string_view descr, const std::vector<std::int64_t>& shape);

// The shape tensor.npy gives a tensor of `dtype` and `shape`: its own, but for a dtype packed
// below a byte (quint4x2, quint2x4), whose bytes numpy cannot index by element, one dimension
// of its bytes as torch stores them (tensor_nbytes(), model/dtype.hpp; 0 if it overflows).
std::vector<std::int64_t> npy_shape(DType dtype, const std::vector<std::int64_t>& shape);

}  // namespace ckptfs
