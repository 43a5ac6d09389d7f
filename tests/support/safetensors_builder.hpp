// SPDX-License-Identifier: MIT
// safetensors files assembled in C++ for the reader and open_model tests: the format's layout
// written from its description, with any header the test wants, valid or not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ckptfs::test {

// 8 bytes of little-endian `header.size()` (or `declared_length`), the header, the data.
inline std::string safetensors_raw(const std::string& header, const std::string& data,
                                   std::optional<std::uint64_t> declared_length = {}) {
  std::uint64_t n = declared_length.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

struct SafetensorsTensor {
  std::string name;  // written as is inside quotes: escape it yourself if needed
  std::string dtype;
  std::vector<std::uint64_t> shape;
  std::string data;
};

// A valid file as the safetensors library writes one: the tensors' data in the order given,
// offsets counted from 0, the header padded with spaces to a multiple of 8 (unless `pad` is
// false), __metadata__ first when given.
inline std::string safetensors_file(
    const std::vector<SafetensorsTensor>& tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata = {}, bool pad = true) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (std::size_t i = 0; i < metadata.size(); ++i) {
      header += (i ? "," : "") + ("\"" + metadata[i].first + "\":\"" + metadata[i].second + "\"");
    }
    header += "}";
  }
  std::string data;
  for (const auto& t : tensors) {
    if (header.size() > 1) header += ',';
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      shape += (i ? "," : "") + std::to_string(t.shape[i]);
    }
    header += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t.data.size()) + "]}";
    data += t.data;
  }
  header += "}";
  while (pad && header.size() % 8 != 0) header += ' ';
  return safetensors_raw(header, data);
}

}  // namespace ckptfs::test
