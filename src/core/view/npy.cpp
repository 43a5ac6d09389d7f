// SPDX-License-Identifier: MIT
// npy_header(): the .npy prelude and header dict, aligned to 64 bytes; npy_shape().
#include <ckptfs/view/npy.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

namespace ckptfs {

std::string npy_header(std::string_view descr, const std::vector<std::int64_t>& shape) {
  std::string shape_text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    shape_text += fmt::format("{}{}", i ? ", " : "", shape[i]);
  }
  shape_text += shape.size() == 1 ? ",)" : ")";
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape_text);
  constexpr std::size_t align = 64;
  for (int major : {1, 2}) {
    // Version 1.0 stores the header length in 2 bytes, 2.0 in 4.
    std::size_t prelude = major == 1 ? 10 : 12;
    std::size_t total = (prelude + dict.size() + 1 + align - 1) / align * align;
    std::size_t header_len = total - prelude;
    if (major == 1 && header_len > 0xffff) continue;
    std::string out("\x93NUMPY", 6);
    out += static_cast<char>(major);
    out += '\0';
    for (std::size_t i = 0; i < prelude - 8; ++i) {
      out += static_cast<char>((header_len >> (8 * i)) & 0xff);
    }
    out += dict;
    out.append(total - out.size() - 1, ' ');
    out += '\n';
    return out;
  }
  return {};  // unreachable: version 2.0 holds any header
}

std::vector<std::int64_t> npy_shape(DType dtype, const std::vector<std::int64_t>& shape) {
  if (!is_packed(dtype)) return shape;
  const std::uint64_t n = tensor_nbytes(dtype, shape).value_or(0);
  return {static_cast<std::int64_t>(std::min<std::uint64_t>(n, INT64_MAX))};
}

}  // namespace ckptfs
