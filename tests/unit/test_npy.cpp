// SPDX-License-Identifier: MIT
// Unit tests of npy_header(): byte-exact headers, 64-byte alignment, version 2.0.
#include <ckptfs/view/npy.hpp>

#include <doctest/doctest.h>

using ckptfs::npy_header;
using ckptfs::npy_shape;
using Shape = std::vector<std::int64_t>;

namespace {
std::size_t header_length(const std::string& h) {
  if (h[6] == 1) return static_cast<unsigned char>(h[8]) | static_cast<unsigned char>(h[9]) << 8;
  std::size_t n = 0;
  for (int i = 3; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(h[8 + i]);
  return n;
}
}  // namespace

TEST_SUITE_BEGIN("npy");

TEST_CASE("a 2-d float32 header is byte for byte what numpy 1.24 writes") {
  // np.save(f, np.zeros((4, 3), "<f4")): 128 bytes before the data.
  std::string expected("\x93NUMPY\x01\x00v\x00", 10);
  expected += "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }";
  expected.append(128 - expected.size() - 1, ' ');
  expected += '\n';
  std::string h = npy_header("<f4", {4, 3});
  CHECK(h == expected);
  CHECK(header_length(h) == 118);
}

TEST_CASE("shapes: 0-d, 1-d with a trailing comma, empty dimensions") {
  CHECK(npy_header("|b1", {}).find("'shape': (), }") != std::string::npos);
  CHECK(npy_header("<i8", {5}).find("'shape': (5,), }") != std::string::npos);
  CHECK(npy_header("<f2", {2, 0, 3}).find("'shape': (2, 0, 3), }") != std::string::npos);
}

TEST_CASE("npy_shape: the tensor's, but the stored bytes of a dtype packed below a byte") {
  using ckptfs::DType;
  CHECK(npy_shape(DType::float32, {3, 5}) == Shape{3, 5});
  CHECK(npy_shape(DType::quint8, {}) == Shape{});
  CHECK(npy_shape(DType::quint4x2, {3, 5}) == Shape{9});
  CHECK(npy_shape(DType::quint4x2, {}) == Shape{1});
  CHECK(npy_shape(DType::quint4x2, {0, 4}) == Shape{0});
  CHECK(npy_shape(DType::quint2x4, {2, 3, 5}) == Shape{12});
}

TEST_CASE("the data always starts at a multiple of 64") {
  for (std::size_t dims = 0; dims < 40; ++dims) {
    std::vector<std::int64_t> shape(dims, 123456789);
    std::string h = npy_header(">c16", shape);
    CHECK(h.size() % 64 == 0);
    CHECK(h.size() == (h[6] == 1 ? 10 : 12) + header_length(h));
  }
}

TEST_CASE("a header longer than 65535 bytes uses version 2.0") {
  std::vector<std::int64_t> shape(7000, 1234567890);
  std::string h = npy_header("<f4", shape);
  CHECK(h[6] == 2);
  CHECK(h.size() % 64 == 0);
  CHECK(h.size() == 12 + header_length(h));
}

TEST_SUITE_END();
