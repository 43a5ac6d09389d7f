// SPDX-License-Identifier: MIT
// ONNX models assembled in C++ for the reader, open_model and fuzz tests: protobuf's wire format
// written field by field (onnx.proto's numbers), valid or not: any field order, packed and
// unpacked repeated values, lengths that lie, messages nested as deep as asked.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ckptfs::test {

// One protobuf message's bytes, appended field by field.
class Proto {
 public:
  std::string bytes;

  static std::string varint_bytes(std::uint64_t v) {
    std::string out;
    while (v >= 0x80) {
      out += static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    out += static_cast<char>(v);
    return out;
  }
  Proto& tag(std::uint32_t field, unsigned wire) {
    bytes += varint_bytes(std::uint64_t{field} << 3 | wire);
    return *this;
  }
  Proto& varint(std::uint32_t field, std::uint64_t v) {
    tag(field, 0);
    bytes += varint_bytes(v);
    return *this;
  }
  // An int32 field's negative value, as protobuf writes it: sign-extended to 10 bytes.
  Proto& int32(std::uint32_t field, std::int32_t v) {
    return varint(field, static_cast<std::uint64_t>(static_cast<std::int64_t>(v)));
  }
  Proto& fixed32(std::uint32_t field, std::uint32_t v) {
    tag(field, 5);
    for (int i = 0; i < 4; ++i) bytes += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  Proto& fixed64(std::uint32_t field, std::uint64_t v) {
    tag(field, 1);
    for (int i = 0; i < 8; ++i) bytes += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  Proto& string(std::uint32_t field, const std::string& s) {
    tag(field, 2);
    bytes += varint_bytes(s.size());
    bytes += s;
    return *this;
  }
  Proto& message(std::uint32_t field, const Proto& m) { return string(field, m.bytes); }
  // A length-delimited field whose declared length is `length`, followed by `payload` (shorter or
  // longer: a lie).
  Proto& lying(std::uint32_t field, std::uint64_t length, const std::string& payload) {
    tag(field, 2);
    bytes += varint_bytes(length);
    bytes += payload;
    return *this;
  }
  Proto& packed_varints(std::uint32_t field, const std::vector<std::uint64_t>& values) {
    std::string payload;
    for (const std::uint64_t v : values) payload += varint_bytes(v);
    return string(field, payload);
  }
  Proto& packed_floats(std::uint32_t field, const std::vector<float>& values) {
    std::string payload(values.size() * 4, '\0');
    std::memcpy(payload.data(), values.data(), payload.size());  // little-endian hosts
    return string(field, payload);
  }
  Proto& packed_doubles(std::uint32_t field, const std::vector<double>& values) {
    std::string payload(values.size() * 8, '\0');
    std::memcpy(payload.data(), values.data(), payload.size());
    return string(field, payload);
  }
};

// TensorProto's fields (onnx.proto).
namespace tensor_field {
inline constexpr std::uint32_t dims = 1, data_type = 2, segment = 3, float_data = 4, int32_data = 5,
                               string_data = 6, int64_data = 7, name = 8, raw_data = 9,
                               double_data = 10, uint64_data = 11, external_data = 13,
                               data_location = 14;
}

// A TensorProto: name, data type and dims (as writers put them, first), the rest by the caller.
inline Proto onnx_tensor(const std::string& name, std::int32_t data_type,
                         const std::vector<std::int64_t>& dims) {
  Proto t;
  for (const std::int64_t d : dims) t.varint(tensor_field::dims, static_cast<std::uint64_t>(d));
  t.varint(tensor_field::data_type, static_cast<std::uint32_t>(data_type));
  t.string(tensor_field::name, name);
  return t;
}

// external_data entries and data_location EXTERNAL.
inline Proto& onnx_external(Proto& t, const std::vector<std::pair<std::string, std::string>>& kv) {
  for (const auto& [k, v] : kv) {
    Proto entry;
    entry.string(1, k).string(2, v);
    t.message(tensor_field::external_data, entry);
  }
  t.varint(tensor_field::data_location, 1);
  return t;
}

// A GraphProto of initializers (field 5), with nodes (field 1) before them as writers put them.
inline Proto onnx_graph(const std::vector<Proto>& initializers,
                        const std::vector<Proto>& nodes = {},
                        const std::vector<Proto>& sparse = {}) {
  Proto g;
  for (const Proto& n : nodes) g.message(1, n);
  g.string(2, "main_graph");
  for (const Proto& t : initializers) g.message(5, t);
  for (const Proto& s : sparse) g.message(15, s);
  return g;
}

// A NodeProto whose attribute `attribute` holds `graph` (an If's then_branch, a Loop's body).
inline Proto onnx_node_with_graph(const std::string& op, const std::string& attribute,
                                  const Proto& graph) {
  Proto a;
  a.string(1, attribute).message(6, graph).varint(20, 5);  // type GRAPH
  Proto n;
  n.string(3, op + "_0").string(4, op).message(5, a);
  return n;
}

// A ModelProto as torch.onnx.export writes one: ir_version first, producer, the graph, opsets.
inline std::string onnx_model(const Proto& graph, std::uint64_t ir_version = 8) {
  Proto m;
  m.varint(1, ir_version).string(2, "ckptfs-test").string(3, "1.0").message(7, graph);
  Proto opset;
  opset.string(1, "").varint(2, 17);
  m.message(8, opset);
  return m.bytes;
}

}  // namespace ckptfs::test
