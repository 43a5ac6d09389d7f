// SPDX-License-Identifier: MIT
// The table of torch dtypes: names, element sizes, storage classes and numpy descrs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ckptfs {

enum class DType : std::uint8_t {
  float32,
  float64,
  float16,
  bfloat16,
  float8_e5m2,
  float8_e4m3fn,
  float8_e5m2fnuz,
  float8_e4m3fnuz,
  float8_e8m0fnu,
  float4_e2m1fn_x2,
  int8,
  int16,
  int32,
  int64,
  uint8,
  uint16,
  uint32,
  uint64,
  boolean,
  complex32,
  complex64,
  complex128,
  qint8,
  quint8,
  qint32,
  quint4x2,
  quint2x4,
  bits8,
  bits16,
  bits1x8,
  bits2x4,
  bits4x2,
  bcomplex32,  // complex of two bfloat16 (torch 2.x; written by torch 2.14, see tests/interop)
};

struct DTypeInfo {
  DType dtype;
  std::string_view name;        // torch's name without "torch.": "float32", "bool", ...
  std::uint8_t element_size;    // bytes per element as stored
  std::string_view numpy_kind;  // descr without the byte order: "f4", "b1", "u2" (bits of bfloat16)
  std::string_view storage_class;  // legacy typed storage class ("FloatStorage"), "" if none
  std::string_view safetensors;    // safetensors' name ("F32", "BF16"), "" if it has none
};

const DTypeInfo& info(DType dtype);
std::optional<DType> dtype_from_name(std::string_view torch_name);     // "float32", "half", ...
std::optional<DType> dtype_from_storage_class(std::string_view name);  // "FloatStorage", ...
// The legacy tensor classes of torch <= 0.4: "FloatTensor", "cuda.HalfTensor"'s "HalfTensor"...
std::optional<DType> dtype_from_tensor_class(std::string_view name);

std::optional<DType> dtype_from_safetensors(std::string_view name);  // "F32", "F8_E4M3", ...

// Whether a tensor stored as `from` may be served as `to` (Tensor::stored_dtype), converted on
// read (view/convert.hpp's convert()): float16, bfloat16, float32 or float64 to float16,
// bfloat16 or float32; integers and bool (int8 to int64, uint8 to uint64, bool) to float32, as
// torch's .float() converts them (exact up to 2^24, then rounded to nearest, ties to even; bool
// 0 or 1).
bool stored_convertible(DType from, DType to) noexcept;

// torch's quantized dtypes (qint8, quint8, qint32, quint4x2, quint2x4): their integers mean
// something only with their quantization (Tensor::quantization).
bool is_quantized(DType dtype) noexcept;

// Elements one byte holds: 2 for quint4x2, 4 for quint2x4, 1 for every other dtype. torch packs
// those two "sub-byte" dtypes flat over the tensor's elements in C order, element i in bits
// (i % k) * 8/k up of byte i / k (its int_repr() is those ceil(numel / k) bytes), in a storage of
// one whole row of bytes per row of the last dimension (tensor_nbytes()); the bytes past the
// packed elements are padding (torch leaves them uninitialized).
unsigned elements_per_byte(DType dtype) noexcept;
inline bool is_packed(DType dtype) noexcept { return elements_per_byte(dtype) > 1; }

// The bytes a C-order tensor of `dtype` and `shape` takes as torch stores it: numel × the element
// size, or for a packed dtype torch's rows of ceil(last dimension / k) bytes: prod(shape[:-1]) ×
// ceil(shape[-1] / k), 1 for a 0-d tensor (torch 1.13 to 2.14: (3,5) quint4x2 9 bytes, (3,5)
// quint2x4 6). The one place sizes are counted from shapes. nullopt when a dimension is negative
// or the product overflows 64 bits.
std::optional<std::uint64_t> tensor_nbytes(DType dtype,
                                           std::span<const std::int64_t> shape) noexcept;

// The numpy descr of a dtype in a byte order ("<f4", ">f4"; "|u1" for one-byte types).
std::string numpy_descr(DType dtype, bool big_endian);

}  // namespace ckptfs
