// SPDX-License-Identifier: MIT
// A tensor's bytes as the mount serves them (in data, tensor.npy, tensor.pt, model.safetensors):
// its elements in C order, read as one range of a source, or gathered from a strided view.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <cstdint>
#include <span>

namespace ckptfs {

struct ServedTensor {
  enum class Way : std::uint8_t {
    none,    // no bytes: empty, or broken
    range,   // one range of a source: [offset, offset + nbytes) of `source`
    gather,  // a strided view, gathered in C order on read
  };
  Way way = Way::none;
  DType dtype = DType::float32;  // of the bytes served
  bool big_endian = false;       // their byte order
  std::uint64_t nbytes = 0;
  std::uint32_t source = 0;      // range: the source, and the offset in it
  std::uint64_t offset = 0;
};

// How `tensor` is served; Way::none with nbytes 0 for a broken tensor.
ServedTensor serve(const Model& model, const Tensor& tensor);

// Appends to `out` the pieces of bytes [offset, offset + length) of the served tensor (the caller
// keeps the range inside nbytes): a source range, or staged gathered bytes. Throws Error(io)
// when a source cannot be read.
void read_served(const Model& model, const Tensor& tensor, const ServedTensor& served,
                 std::uint64_t offset, std::size_t length, Sources sources, ReadBuffer& out);

// Bytes [offset, offset + out.size()) of a tensor's logical C-order bytes, gathered from its
// storage with few large preads (never the whole storage at once).
void gather_tensor(const Model& model, const Tensor& tensor, std::uint64_t offset,
                   Sources sources, std::span<char> out);

}  // namespace ckptfs
