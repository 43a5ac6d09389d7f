// SPDX-License-Identifier: MIT
// The dtype table and lookups by torch name, storage class and legacy tensor class.
#include <ckptfs/model/dtype.hpp>

#include <array>
#include <string>

namespace ckptfs {
namespace {

// numpy has no bfloat16, float8, complex32, bcomplex32, quantized or bits types: those are shown as
// the unsigned integer of the same width, bit for bit, and meta.json carries the true dtype.
// safetensors has no complex32/128, bcomplex32, quantized, bits or float4 (sub-byte, counted
// otherwise).
constexpr std::array<DTypeInfo, 33> table{{
    {DType::float32, "float32", 4, "f4", "FloatStorage", "F32"},
    {DType::float64, "float64", 8, "f8", "DoubleStorage", "F64"},
    {DType::float16, "float16", 2, "f2", "HalfStorage", "F16"},
    {DType::bfloat16, "bfloat16", 2, "u2", "BFloat16Storage", "BF16"},
    {DType::float8_e5m2, "float8_e5m2", 1, "u1", "", "F8_E5M2"},
    {DType::float8_e4m3fn, "float8_e4m3fn", 1, "u1", "", "F8_E4M3"},
    {DType::float8_e5m2fnuz, "float8_e5m2fnuz", 1, "u1", "", "F8_E5M2FNUZ"},
    {DType::float8_e4m3fnuz, "float8_e4m3fnuz", 1, "u1", "", "F8_E4M3FNUZ"},
    {DType::float8_e8m0fnu, "float8_e8m0fnu", 1, "u1", "", "F8_E8M0"},
    {DType::float4_e2m1fn_x2, "float4_e2m1fn_x2", 1, "u1", "", ""},
    {DType::int8, "int8", 1, "i1", "CharStorage", "I8"},
    {DType::int16, "int16", 2, "i2", "ShortStorage", "I16"},
    {DType::int32, "int32", 4, "i4", "IntStorage", "I32"},
    {DType::int64, "int64", 8, "i8", "LongStorage", "I64"},
    {DType::uint8, "uint8", 1, "u1", "ByteStorage", "U8"},
    {DType::uint16, "uint16", 2, "u2", "", "U16"},
    {DType::uint32, "uint32", 4, "u4", "", "U32"},
    {DType::uint64, "uint64", 8, "u8", "", "U64"},
    {DType::boolean, "bool", 1, "b1", "BoolStorage", "BOOL"},
    {DType::complex32, "complex32", 4, "u4", "", ""},
    {DType::complex64, "complex64", 8, "c8", "ComplexFloatStorage", "C64"},
    {DType::complex128, "complex128", 16, "c16", "ComplexDoubleStorage", ""},
    {DType::qint8, "qint8", 1, "i1", "QInt8Storage", ""},
    {DType::quint8, "quint8", 1, "u1", "QUInt8Storage", ""},
    {DType::qint32, "qint32", 4, "i4", "QInt32Storage", ""},
    {DType::quint4x2, "quint4x2", 1, "u1", "QUInt4x2Storage", ""},
    {DType::quint2x4, "quint2x4", 1, "u1", "QUInt2x4Storage", ""},
    {DType::bits8, "bits8", 1, "u1", "", ""},
    {DType::bits16, "bits16", 2, "u2", "", ""},
    {DType::bits1x8, "bits1x8", 1, "u1", "", ""},
    {DType::bits2x4, "bits2x4", 1, "u1", "", ""},
    {DType::bits4x2, "bits4x2", 1, "u1", "", ""},
    {DType::bcomplex32, "bcomplex32", 4, "u4", "", ""},
}};

struct Alias {
  std::string_view alias;
  DType dtype;
};
// torch exposes these as module attributes too (torch.half is torch.float16), and old pickles
// name dtypes by them.
constexpr std::array<Alias, 10> aliases{{
    {"float", DType::float32},
    {"double", DType::float64},
    {"half", DType::float16},
    {"short", DType::int16},
    {"int", DType::int32},
    {"long", DType::int64},
    {"cfloat", DType::complex64},
    {"cdouble", DType::complex128},
    {"chalf", DType::complex32},
    {"uint8", DType::uint8},
}};

}  // namespace

const DTypeInfo& info(DType dtype) { return table[static_cast<std::size_t>(dtype)]; }

std::optional<DType> dtype_from_name(std::string_view torch_name) {
  for (const auto& entry : table) {
    if (entry.name == torch_name) return entry.dtype;
  }
  for (const auto& alias : aliases) {
    if (alias.alias == torch_name) return alias.dtype;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_storage_class(std::string_view name) {
  for (const auto& entry : table) {
    if (!entry.storage_class.empty() && entry.storage_class == name) return entry.dtype;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& entry : table) {
    if (!entry.safetensors.empty() && entry.safetensors == name) return entry.dtype;
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_tensor_class(std::string_view name) {
  // "FloatTensor" names the same dtype as "FloatStorage".
  constexpr std::string_view suffix = "Tensor";
  if (name.size() <= suffix.size() || !name.ends_with(suffix)) return std::nullopt;
  std::string storage(name.substr(0, name.size() - suffix.size()));
  storage += "Storage";
  return dtype_from_storage_class(storage);
}

bool stored_convertible(DType from, DType to) noexcept {
  auto is_float = [](DType d) {
    return d == DType::float16 || d == DType::bfloat16 || d == DType::float32;
  };
  switch (from) {
    case DType::float16:
    case DType::bfloat16:
    case DType::float32:
    case DType::float64:
      return is_float(to);
    case DType::int8:
    case DType::int16:
    case DType::int32:
    case DType::int64:
    case DType::uint8:
    case DType::uint16:
    case DType::uint32:
    case DType::uint64:
    case DType::boolean:
      return to == DType::float32;
    default:
      return false;
  }
}

bool is_quantized(DType dtype) noexcept {
  return dtype == DType::qint8 || dtype == DType::quint8 || dtype == DType::qint32 ||
         dtype == DType::quint4x2 || dtype == DType::quint2x4;
}

unsigned elements_per_byte(DType dtype) noexcept {
  return dtype == DType::quint4x2 ? 2 : dtype == DType::quint2x4 ? 4 : 1;
}

std::optional<std::uint64_t> tensor_nbytes(DType dtype,
                                           std::span<const std::int64_t> shape) noexcept {
  const unsigned k = elements_per_byte(dtype);
  std::uint64_t n = k > 1 ? 1 : info(dtype).element_size;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return std::nullopt;
    auto d = static_cast<std::uint64_t>(shape[i]);
    if (k > 1 && i + 1 == shape.size()) d = d / k + (d % k != 0);  // a row's bytes, rounded up
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::string numpy_descr(DType dtype, bool big_endian) {
  const auto& i = info(dtype);
  char order = i.element_size == 1 ? '|' : big_endian ? '>' : '<';
  return order + std::string(i.numpy_kind);
}

}  // namespace ckptfs
