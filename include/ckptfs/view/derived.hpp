// SPDX-License-Identifier: MIT
// Derived tensors' values (model.hpp's Derivation) computed on read: only the source elements a
// read needs, each source's values read as float32 as the view serves them (dequantized, or
// converted), in buffers the size of the read.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <cstdint>
#include <span>
#include <string_view>

namespace ckptfs {

// Why derived `tensor`'s values are not served: a source whose values are not served as
// float32 (values_not_served(), or a dtype convert() does not make float32 of); "" when they are.
std::string_view derived_values_not_served(const Model& model, const Tensor& tensor);

// Fills `out` with bytes [offset, offset + out.size()) of derived `tensor`'s values as served
// in `dtype` (float32, or float16 or bfloat16: converted from float32 as convert() converts),
// little-endian. Rows: one read of each run's part, its rows consecutive in the source when its
// step is 1, else one read per row. A transpose: for each row of the source, the elements of the
// columns the range touches (a block-quantized source dequantizes the blocks that hold them).
// Memory: about twice out.size(), and a read of at most 64 KiB of values at a time otherwise.
// Preconditions: check_derivation() passed and derived_values_not_served() is empty; the range
// lies inside the tensor. Throws Error(io) when a source cannot be read.
void read_derived(const Model& model, const Tensor& tensor, DType dtype, std::uint64_t offset,
                  Sources sources, std::span<char> out);

}  // namespace ckptfs
