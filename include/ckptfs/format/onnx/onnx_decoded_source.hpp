// SPDX-License-Identifier: MIT
// ONNX tensors whose bytes are not in the file as served, decoded on read: values of a
// TensorProto's typed fields (int32_data holding float16, int8, bool...; int64_data; uint64_data
// holding uint32; float_data or double_data split into several runs), varints or fixed-width
// values with any other fields between them, and 4-bit and 2-bit elements packed two or four to
// a byte (raw_data, an external file, or int32_data), unpacked one to a byte. OnnxDecodedSource
// is a source of their decoded bytes, one tensor after another, so that every view serves them as
// any other tensor's (as InflatedSource serves a deflated .npz member).
#pragma once

#include <ckptfs/format/onnx/protobuf_wire.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ckptfs {

// Where the values of a typed field resume: a position in the TensorProto (at a tag, or inside a
// packed run ending at run_end), and the index of the next value there.
struct FieldResume {
  std::uint64_t position = 0;
  std::uint64_t run_end = 0;  // 0: at a tag
  std::uint64_t value = 0;
};

// One value in this many gets a FieldResume: a read decodes at most this many values it does
// not serve, and the index costs 24 bytes per this many values (a value is at least a byte of
// the file).
inline constexpr std::uint64_t field_resume_interval = 16384;

// How one tensor's decoded bytes are made from its source's.
struct EncodedTensor {
  enum class Kind : std::uint8_t {
    field,   // the values of `field` in the TensorProto [begin, end): packed runs or single
             // values, in order, whatever other fields lie between them
    packed,  // bytes [begin, end) of the source, one value each (a 4-bit or 2-bit raw_data)
  };
  Kind kind = Kind::field;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::uint32_t field = 0;
  protobuf::WireType wire = protobuf::WireType::varint;  // of a value: varint, fixed32, fixed64
  // The low bytes of each value served, little-endian (int32_data's FLOAT16: 2); a 4-bit or
  // 2-bit type's: its low byte holds 8 / sub_bits elements, low bits first, each served in a
  // byte of its own, sign-extended for INT4 and INT2.
  std::uint8_t value_bytes = 1;
  std::uint8_t sub_bits = 0;  // 0, 4 or 2
  bool sign_extend = false;
  std::uint64_t values = 0;  // in the stream (counted by index_field() for Kind::field)
  std::uint64_t size = 0;    // decoded bytes: values × value_bytes, or the elements unpacked
  std::uint64_t offset = 0;  // of the first decoded byte in the OnnxDecodedSource
  std::vector<FieldResume> resume;  // Kind::field: made by index_field()
};

// Counts the values of a Kind::field tensor's field in its TensorProto (in `source`), fills
// `values` and `resume`, and returns "" or what is wrong with the encoding (a varint of more than
// 10 bytes, a packed run of fixed-width values whose length is no multiple of their width, a
// field running past the TensorProto): the tensor is then broken. A field of another wire type is
// skipped, as protobuf skips it. Reads the TensorProto once, a buffer at a time; throws what
// `source` throws.
std::string index_field(const ByteSource& source, EncodedTensor& tensor);

// The decoded bytes of `tensors` (laid out by their offset and size, in order, without gaps),
// made on read from `encoded`, which must outlive it. Reads are positional and thread-safe (no
// state is kept between them): a field's values are decoded from the resume point before the
// read, a packed tensor's from its bytes. Throws Error(bad_checkpoint) when the encoding is no
// longer what index_field() counted (the file changed), and what `encoded` throws. times(),
// remote() and unchanged() are `encoded`'s.
class OnnxDecodedSource final : public ByteSource {
 public:
  OnnxDecodedSource(const ByteSource& encoded, std::vector<EncodedTensor> tensors,
                    std::string name);

  std::uint64_t size() const override { return size_; }
  const std::string& name() const noexcept override { return name_; }
  SourceTimes times() const noexcept override { return encoded_.times(); }
  bool remote() const noexcept override { return encoded_.remote(); }
  bool unchanged(bool check_path) const noexcept override { return encoded_.unchanged(check_path); }
  std::string change_reason() const override { return encoded_.change_reason(); }

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override;

  const ByteSource& encoded_;
  std::vector<EncodedTensor> tensors_;
  std::uint64_t size_ = 0;
  std::string name_;
};

}  // namespace ckptfs
