// SPDX-License-Identifier: MIT
// GGUF files assembled in C++ for the reader, open_model and fuzz tests: the format's layout
// written from its description (ggml's docs/gguf.md), valid or not, in either byte order and
// any version.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace ckptfs::test {

// Appends values in the file's byte order; version 1 writes counts and lengths in 32 bits.
class GgufWriter {
 public:
  explicit GgufWriter(std::uint32_t version = 3, bool big_endian = false)
      : version_(version), big_(big_endian) {}

  std::string bytes;

  GgufWriter& number(std::uint64_t v, unsigned size) {
    for (unsigned i = 0; i < size; ++i) {
      const unsigned shift = 8 * (big_ ? size - 1 - i : i);
      bytes += static_cast<char>((v >> shift) & 0xff);
    }
    return *this;
  }
  GgufWriter& u8(std::uint64_t v) { return number(v, 1); }
  GgufWriter& u16(std::uint64_t v) { return number(v, 2); }
  GgufWriter& u32(std::uint64_t v) { return number(v, 4); }
  GgufWriter& u64(std::uint64_t v) { return number(v, 8); }
  GgufWriter& f32(float f) {
    std::uint32_t v = 0;
    std::memcpy(&v, &f, 4);
    return u32(v);
  }
  GgufWriter& f64(double f) {
    std::uint64_t v = 0;
    std::memcpy(&v, &f, 8);
    return u64(v);
  }
  GgufWriter& size(std::uint64_t v) { return version_ == 1 ? u32(v) : u64(v); }
  GgufWriter& string(const std::string& s) {
    size(s.size());
    bytes += s;
    return *this;
  }
  // The magic, the version and the two counts.
  GgufWriter& header(std::uint64_t tensors, std::uint64_t kvs) {
    bytes += "GGUF";
    u32(version_);
    size(tensors);
    return size(kvs);
  }
  // A key and its type (then write its value).
  GgufWriter& key(const std::string& name, std::uint32_t type) {
    string(name);
    return u32(type);
  }
  GgufWriter& tensor_info(const std::string& name, const std::vector<std::uint64_t>& ne,
                          std::uint32_t type, std::uint64_t offset) {
    string(name);
    u32(ne.size());
    for (auto n : ne) size(n);
    u32(type);
    return u64(offset);
  }
  // Zero bytes up to a multiple of `alignment`.
  GgufWriter& align(std::size_t alignment = 32) {
    bytes.append((alignment - bytes.size() % alignment) % alignment, '\0');
    return *this;
  }

 private:
  std::uint32_t version_;
  bool big_;
};

struct GgufTensor {
  std::string name;
  std::vector<std::uint64_t> ne;  // innermost first, as GGUF stores it
  std::uint32_t type;             // GGML type number
  std::string data;               // its bytes, as stored
};

// A valid file with tensors laid out in order, each at a multiple of `alignment` (written as
// general.alignment when not 32), after the key-value pairs `kv_bytes` (already written, their
// count `kv_count`).
inline std::string gguf_file(const std::vector<GgufTensor>& tensors, std::uint32_t version = 3,
                             bool big_endian = false, std::uint32_t alignment = 32,
                             const std::string& kv_bytes = "", std::uint64_t kv_count = 0) {
  GgufWriter w(version, big_endian);
  w.header(tensors.size(), kv_count + (alignment != 32 ? 1 : 0));
  w.bytes += kv_bytes;
  if (alignment != 32) w.key("general.alignment", 4).u32(alignment);
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    w.tensor_info(t.name, t.ne, t.type, offset);
    offset += (t.data.size() + alignment - 1) / alignment * alignment;
  }
  w.align(alignment);
  for (const auto& t : tensors) {
    w.bytes += t.data;
    w.align(alignment);
  }
  return w.bytes;
}

}  // namespace ckptfs::test
