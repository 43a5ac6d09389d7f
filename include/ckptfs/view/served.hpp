// SPDX-License-Identifier: MIT
// A tensor's bytes as the mount serves them (in data, tensor.npy, tensor.pt, model.safetensors):
// its elements in C order, read as one range of a source, gathered from a strided view, taken
// piece by piece from an assembled tensor's pieces, converted to another floating-point dtype
// on the way (-o dtype), or dequantized from blocks.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <cstdint>
#include <optional>
#include <span>

namespace ckptfs {

struct ServedTensor {
  enum class Way : std::uint8_t {
    none,     // no bytes: empty, or broken
    range,    // one range of its storage: bytes [begin, begin + nbytes)
    gather,   // a strided view, gathered in C order on read
    pieces,   // assembled from pieces (assembly.hpp): each run of a piece spliced from its source
              // when the piece is contiguous there, gathered otherwise
    convert,  // converted from `stored` on read, from one range of its storage, gathered or
              // from its pieces
    swap,     // big-endian elements served little-endian: read as stored (one range, gathered
              // or from its pieces), each element's bytes reversed (a complex number's halves)
    dequantize,  // a block-quantized tensor's values: its blocks, from one range of its storage,
                 // dequantized on read (view/dequantize.hpp), then converted to `dtype`
    derive,      // a derived tensor's values (model.hpp's Derivation), computed on read from
                 // its sources' float32 values (view/derived.hpp), then converted to `dtype`
  };
  Way way = Way::none;
  DType dtype = DType::float32;   // of the bytes served
  DType stored = DType::float32;  // of the bytes in the source
  // Way::convert of a tensor stored in another dtype (Tensor::stored_dtype) to a third, -o
  // dtype's: the tensor's own dtype, converted through.
  std::optional<DType> via;
  bool big_endian = false;  // of the bytes served (converted ones are little-endian)
  bool contiguous = false;  // the stored bytes are one range of the storage, from `begin`
  std::uint64_t nbytes = 0;
  std::size_t storage = 0;  // contiguous: the storage (index into Model::storages)...
  std::uint64_t begin = 0;  // ...and where the tensor's bytes start in it
  BlockFormat blocks = BlockFormat::none;  // Way::dequantize: the blocks' format...
  bool blocks_big_endian = false;          // ...and byte order (the values are little-endian)
};

// The byte order a tensor's bytes must be served in: the checkpoint's (data, tensor.npy and
// tensor.pt say which), or little-endian whatever the checkpoint's (safetensors has no other).
enum class ByteOrder : std::uint8_t { as_stored, little };

// How `tensor` is served: as stored, or converted to `convert_to` when it is a floating-point
// tensor that convert() handles (a float16/bfloat16/float32/float64 tensor; not integers, bool,
// complex, float8 or quantized ones) and its converted bytes fit a file. An identity conversion
// of little-endian bytes is no conversion. ByteOrder::little: a big-endian tensor that is not
// converted is swapped (Way::swap; one-byte elements need nothing), and big_endian is false
// whatever the tensor. Way::none with nbytes 0 for a broken tensor. A tensor stored in another
// dtype (Tensor::stored_dtype) is always converted: to its dtype, or through it to `convert_to`
// as above (`via`).
//
// A block-quantized tensor (Tensor::blocks) is served as its values: Way::dequantize to float32,
// or to `convert_to` when convertible(float32, convert_to); Way::none with nbytes 0 when they
// are not served (values_not_served()). A derived tensor (Tensor::derivation) likewise, by
// Way::derive.
ServedTensor serve(const Model& model, const Tensor& tensor,
                   std::optional<DType> convert_to = std::nullopt,
                   ByteOrder order = ByteOrder::as_stored);

// What an entry's `data` file serves: serve()'s bytes, except for a block-quantized tensor: its
// blocks as stored (Way::range, dtype uint8, nbytes stored_nbytes()), its values or not. A
// derived tensor's `data` is its values (it has no bytes of its own).
ServedTensor serve_data(const Model& model, const Tensor& tensor,
                        std::optional<DType> convert_to = std::nullopt);

// The bytes a broken tensor's files stand for: serve()'s nbytes (with `data`, serve_data()'s)
// had the tensor been sound, as stored: its shape's elements × its dtype's size (a
// block-quantized tensor's data: its blocks), when every dimension is known and that is a size a
// file can have (max_tensor_bytes); 0 otherwise. A broken tensor's data, tensor.npy and tensor.pt
// keep the sizes they would have, and every read of them fails (Tree::refusal()).
std::uint64_t nominal_nbytes(const Tensor& tensor, bool data = false) noexcept;

// Why a servable tensor's values are not served although its `data` is: a block-quantized
// tensor of a format dequantize() does not handle, or whose blocks are big-endian, or a derived
// tensor one of whose sources' values are not served as float32; empty for every other tensor
// (a broken one too: Tensor::broken says why).
std::string_view values_not_served(const Model& model, const Tensor& tensor);

// The bytes that reverse together when an element of `dtype` changes byte order: its size, or
// half of it for a complex number (its real and imaginary parts).
std::size_t swap_unit(DType dtype) noexcept;

// Appends to `out` the pieces of bytes [offset, offset + length) of the served tensor (the caller
// keeps the range inside nbytes): source ranges, or staged bytes (gathered, converted, swapped).
// An assembled tensor's read touches only the pieces that hold the range. Throws Error(io) when
// a source cannot be read.
void read_served(const Model& model, const Tensor& tensor, const ServedTensor& served,
                 std::uint64_t offset, std::size_t length, Sources sources, ReadBuffer& out);

// Bytes [offset, offset + out.size()) of a servable tensor's C-order bytes as stored, read into
// `out`: one read of a contiguous tensor, gathered from a strided view with few large preads
// (never the whole storage at once), or piece by piece from an assembled tensor's pieces.
void read_stored(const Model& model, const Tensor& tensor, std::uint64_t offset, Sources sources,
                 std::span<char> out);

// A strided view of one storage: a tensor's, or a piece's of an assembled tensor.
struct StridedView {
  const Storage* storage = nullptr;
  std::int64_t storage_offset = 0;  // in elements
  std::span<const std::int64_t> shape;
  std::span<const std::int64_t> stride;  // in elements
  std::size_t element_size = 1;
};

// Bytes [offset, offset + out.size()) of a view's C-order bytes, gathered from its storage with
// few large preads (never the whole storage at once). The view lies inside its storage.
void gather_view(const StridedView& view, std::uint64_t offset, Sources sources,
                 std::span<char> out);

}  // namespace ckptfs
