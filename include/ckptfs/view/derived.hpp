// SPDX-License-Identifier: MIT
// Derived tensors' values (model.hpp's Derivation) computed on read: only the source elements a
// read needs, each source's values read as float32 as the view serves them (dequantized, or
// converted), in buffers the size of the read.
#pragma once

#include <ckptfs/model/model.hpp>

#include <cstdint>
#include <functional>
#include <span>

namespace ckptfs {

// Fills `out` with bytes [offset, offset + out.size()) of source tensor `source`'s values as
// float32, little-endian (served.cpp gives them: dequantized, converted...).
using ReadSourceValues =
    std::function<void(const Tensor& source, std::uint64_t offset, std::span<char> out)>;

// Fills `out` with bytes [offset, offset + out.size()) of derived `tensor`'s values as served
// in `dtype` (float32, or float16 or bfloat16: converted from float32 as convert() converts),
// little-endian, its sources' values read with `read`. Rows: one read of each run's part, its
// rows consecutive in the source when its step is 1, else one read per row. A transpose: for each
// row of the source, the elements of the columns the range touches (a block-quantized source
// dequantizes the blocks that hold them). Memory: about twice out.size(), and a read of at most
// 64 KiB of values at a time otherwise. Preconditions: check_derivation() passed and its sources'
// values are served (values_not_served(), served.hpp); the range lies inside the tensor. Throws
// what `read` throws.
void read_derived(const Model& model, const Tensor& tensor, DType dtype, std::uint64_t offset,
                  std::span<char> out, const ReadSourceValues& read);

}  // namespace ckptfs
