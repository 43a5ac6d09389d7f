// SPDX-License-Identifier: MIT
// Unit tests of the dtype table.
#include <ckptfs/model/dtype.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace ckptfs;

TEST_SUITE_BEGIN("dtype");

TEST_CASE("the table is indexed by the enum and names round-trip") {
  for (int i = 0; i <= static_cast<int>(DType::bcomplex32); ++i) {
    auto d = static_cast<DType>(i);
    CHECK(info(d).dtype == d);
    CHECK(dtype_from_name(info(d).name) == d);
    if (!info(d).storage_class.empty()) CHECK(dtype_from_storage_class(info(d).storage_class) == d);
  }
}

TEST_CASE("torch aliases, storage and tensor classes") {
  CHECK(dtype_from_name("half") == DType::float16);
  CHECK(dtype_from_name("long") == DType::int64);
  CHECK(dtype_from_name("nonsense") == std::nullopt);
  CHECK(dtype_from_storage_class("BFloat16Storage") == DType::bfloat16);
  CHECK(dtype_from_storage_class("UntypedStorage") == std::nullopt);
  CHECK(dtype_from_tensor_class("FloatTensor") == DType::float32);
  CHECK(dtype_from_tensor_class("LongTensor") == DType::int64);
  CHECK(dtype_from_tensor_class("Tensor") == std::nullopt);
}

TEST_CASE("numpy descrs: byte order, one-byte types, stand-ins for types numpy lacks") {
  CHECK(numpy_descr(DType::float32, false) == "<f4");
  CHECK(numpy_descr(DType::float32, true) == ">f4");
  CHECK(numpy_descr(DType::boolean, true) == "|b1");
  CHECK(numpy_descr(DType::int8, false) == "|i1");
  CHECK(numpy_descr(DType::complex128, false) == "<c16");
  CHECK(numpy_descr(DType::bfloat16, false) == "<u2");
  CHECK(numpy_descr(DType::float8_e4m3fn, false) == "|u1");
  CHECK(numpy_descr(DType::complex32, false) == "<u4");
  CHECK(numpy_descr(DType::bcomplex32, false) == "<u4");
  CHECK(dtype_from_name("bcomplex32") == DType::bcomplex32);
  CHECK(numpy_descr(DType::uint64, false) == "<u8");
  CHECK(info(DType::bfloat16).safetensors == "BF16");
  CHECK(dtype_from_safetensors("F8_E4M3") == DType::float8_e4m3fn);
  CHECK(dtype_from_safetensors("C64") == DType::complex64);
  CHECK(dtype_from_safetensors("Q8") == std::nullopt);
  CHECK(info(DType::qint8).safetensors.empty());
}

TEST_CASE("tensor_nbytes: numel x element size, packed dtypes in torch's rows of bytes") {
  using Shape = std::vector<std::int64_t>;
  auto n = [](DType d, Shape shape) { return tensor_nbytes(d, shape); };
  CHECK(n(DType::float32, {3, 5}) == 60u);
  CHECK(n(DType::float32, {}) == 4u);
  CHECK(n(DType::complex128, {2, 0}) == 0u);
  // Measured with torch 2.14 and 1.13 (untyped_storage().nbytes() of quantize_per_tensor's).
  CHECK(n(DType::quint4x2, {3, 5}) == 9u);
  CHECK(n(DType::quint4x2, {2, 3, 5}) == 18u);
  CHECK(n(DType::quint4x2, {5}) == 3u);
  CHECK(n(DType::quint4x2, {4, 4}) == 8u);
  CHECK(n(DType::quint4x2, {2, 1}) == 2u);
  CHECK(n(DType::quint4x2, {}) == 1u);
  CHECK(n(DType::quint4x2, {0}) == 0u);
  CHECK(n(DType::quint4x2, {3, 0}) == 0u);
  CHECK(n(DType::quint2x4, {3, 5}) == 6u);
  CHECK(n(DType::quint2x4, {2, 3, 5}) == 12u);
  CHECK(n(DType::quint2x4, {5}) == 2u);
  CHECK(n(DType::quint2x4, {}) == 1u);
  // A last dimension too large for numel × 1 still counts its bytes, without wrapping.
  CHECK(n(DType::quint2x4, {std::int64_t{1} << 62, 4}) == (std::uint64_t{1} << 62));
  CHECK(n(DType::quint2x4, {std::int64_t{1} << 62, 8}) == (std::uint64_t{1} << 63));
  CHECK(n(DType::quint2x4, {std::int64_t{1} << 62, 32}) == std::nullopt);
  CHECK(n(DType::float64, {std::int64_t{1} << 61, 2}) == std::nullopt);
  CHECK(n(DType::quint4x2, {-1, 2}) == std::nullopt);
  CHECK(n(DType::int8, {2, -1}) == std::nullopt);
  CHECK(elements_per_byte(DType::quint4x2) == 2);
  CHECK(elements_per_byte(DType::quint2x4) == 4);
  CHECK(elements_per_byte(DType::bits4x2) == 1);  // torch's element: the byte
  CHECK(is_packed(DType::quint2x4));
  CHECK_FALSE(is_packed(DType::float4_e2m1fn_x2));  // one element a byte: a pair of float4
  CHECK(is_quantized(DType::quint4x2));
  CHECK(is_quantized(DType::qint32));
  CHECK_FALSE(is_quantized(DType::uint8));
}

TEST_SUITE_END();
