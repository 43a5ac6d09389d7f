// SPDX-License-Identifier: MIT
// Unit tests of the dtype table.
#include <ckptfs/model/dtype.hpp>

#include <doctest/doctest.h>

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

TEST_SUITE_END();
