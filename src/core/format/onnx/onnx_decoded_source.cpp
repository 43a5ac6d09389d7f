// SPDX-License-Identifier: MIT
// index_field() and OnnxDecodedSource: a typed field's values walked from a resume point, and
// sub-byte elements unpacked, into the bytes served.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/onnx/onnx_decoded_source.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace ckptfs {
namespace {

using protobuf::Tag;
using protobuf::WireReader;
using protobuf::WireType;

std::size_t wire_width(WireType wire) noexcept {
  return wire == WireType::fixed32 ? 4 : wire == WireType::fixed64 ? 8 : 0;
}

// The values of one field of a TensorProto, in order, from a resume point: packed runs and
// single values alike, other fields (and the field in another wire type) skipped.
class FieldValues {
 public:
  FieldValues(const ByteSource& source, const EncodedTensor& tensor, const FieldResume& from)
      : reader_(source, from.position, tensor.end),
        end_(tensor.end),
        field_(tensor.field),
        wire_(tensor.wire),
        run_end_(from.run_end) {
    if (run_end_ != 0) reader_.set_limit(run_end_);
  }

  // Where the next value is read from, as a resume point for value number `value`.
  FieldResume here(std::uint64_t value) const { return {reader_.position(), run_end_, value}; }

  // The next value; false after the last.
  bool next(std::uint64_t& value) {
    for (;;) {
      if (run_end_ != 0) {
        if (!reader_.at_limit()) {
          value = one();
          return true;
        }
        reader_.set_limit(end_);
        run_end_ = 0;
      }
      if (reader_.at_limit()) return false;
      const Tag tag = reader_.tag();
      if (tag.field == field_ && tag.type == WireType::length) {
        const std::uint64_t n = reader_.length();
        if (const std::size_t w = wire_width(wire_); w != 0 && n % w != 0) {
          throw Error(ExitCode::bad_checkpoint,
                      fmt::format("byte {}: a packed run of {} bytes of {}-byte values",
                                  reader_.position(), n, w));
        }
        if (n == 0) continue;
        run_end_ = reader_.position() + n;
        reader_.set_limit(run_end_);
        continue;
      }
      if (tag.field == field_ && tag.type == wire_) {
        value = one();
        return true;
      }
      reader_.skip(tag);
    }
  }

 private:
  std::uint64_t one() {
    switch (wire_) {
      case WireType::fixed32:
        return reader_.fixed32();
      case WireType::fixed64:
        return reader_.fixed64();
      default:
        return reader_.varint();
    }
  }

  WireReader reader_;
  std::uint64_t end_;
  std::uint32_t field_;
  WireType wire_;
  std::uint64_t run_end_;
};

// Writes the bytes of value number `v` (its low value_bytes, or its unpacked elements) that fall
// in [from, to) of the tensor's decoded bytes into out[... - from].
void emit(const EncodedTensor& t, std::uint64_t v, std::uint64_t value, std::uint64_t from,
          std::uint64_t to, std::byte* out) {
  if (t.sub_bits == 0) {
    const std::uint64_t first = v * t.value_bytes;
    for (unsigned k = 0; k < t.value_bytes; ++k) {
      const std::uint64_t at = first + k;
      if (at >= from && at < to) out[at - from] = static_cast<std::byte>(value >> (8 * k));
    }
    return;
  }
  const unsigned per_byte = 8 / t.sub_bits;
  const unsigned mask = (1u << t.sub_bits) - 1;
  const std::uint64_t first = v * per_byte;
  for (unsigned k = 0; k < per_byte; ++k) {
    const std::uint64_t at = first + k;
    if (at < from || at >= to) continue;
    unsigned element = static_cast<unsigned>(value >> (t.sub_bits * k)) & mask;
    if (t.sign_extend && (element & (1u << (t.sub_bits - 1))) != 0) element |= ~mask;
    out[at - from] = static_cast<std::byte>(element);
  }
}

// Bytes [from, to) of tensor t's decoded bytes into `out`.
void decode(const ByteSource& source, const EncodedTensor& t, std::uint64_t from, std::uint64_t to,
            std::byte* out) {
  const std::uint64_t per_value = t.sub_bits == 0 ? t.value_bytes : 8 / t.sub_bits;
  const std::uint64_t first = from / per_value;
  const std::uint64_t last = (to + per_value - 1) / per_value;  // one past the last value
  if (t.kind == EncodedTensor::Kind::packed) {
    std::array<std::uint8_t, 1 << 14> bytes;
    for (std::uint64_t v = first; v < last;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(bytes.size(), last - v));
      source.read(t.begin + v, std::as_writable_bytes(std::span(bytes.data(), n)));
      for (std::size_t i = 0; i < n; ++i, ++v) emit(t, v, bytes[i], from, to, out);
    }
    return;
  }
  // The last resume point at or before the first value, then the values from there.
  const auto after =
      std::upper_bound(t.resume.begin(), t.resume.end(), first,
                       [](std::uint64_t value, const FieldResume& r) { return value < r.value; });
  const FieldResume start = after == t.resume.begin() ? FieldResume{t.begin, 0, 0} : *(after - 1);
  FieldValues values(source, t, start);
  std::uint64_t value = 0;
  for (std::uint64_t v = start.value; v < last; ++v) {
    if (!values.next(value)) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("the TensorProto at byte {} holds {} values of field {}, no longer "
                              "the {} counted at mount",
                              t.begin, v, t.field, t.values));
    }
    if (v >= first) emit(t, v, value, from, to, out);
  }
}

}  // namespace

std::string index_field(const ByteSource& source, EncodedTensor& tensor) {
  tensor.resume.clear();
  tensor.values = 0;
  try {
    FieldValues values(source, tensor, {tensor.begin, 0, 0});
    std::uint64_t value = 0;
    for (;;) {
      const FieldResume here = values.here(tensor.values);
      if (!values.next(value)) break;
      if (tensor.values % field_resume_interval == 0 && tensor.values != 0) {
        tensor.resume.push_back(here);
      }
      ++tensor.values;
    }
  } catch (const Error& e) {
    if (e.code() != ExitCode::bad_checkpoint) throw;
    tensor.resume.clear();
    tensor.resume.shrink_to_fit();
    return e.what();
  }
  tensor.resume.shrink_to_fit();
  return {};
}

OnnxDecodedSource::OnnxDecodedSource(const ByteSource& encoded, std::vector<EncodedTensor> tensors,
                                     std::string name)
    : encoded_(encoded), tensors_(std::move(tensors)), name_(std::move(name)) {
  for (const EncodedTensor& t : tensors_) size_ = std::max(size_, t.offset + t.size);
}

void OnnxDecodedSource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  const std::uint64_t end = offset + out.size();
  // The first tensor ending after `offset`, then every one the range touches.
  auto it = std::upper_bound(
      tensors_.begin(), tensors_.end(), offset,
      [](std::uint64_t at, const EncodedTensor& t) { return at < t.offset + t.size; });
  std::uint64_t at = offset;
  for (; it != tensors_.end() && at < end; ++it) {
    if (it->size == 0) continue;
    const std::uint64_t from = std::max(at, it->offset) - it->offset;
    const std::uint64_t to = std::min(end, it->offset + it->size) - it->offset;
    if (it->offset > at) {
      // No tensor holds these bytes (never, as the reader lays them out): zeros.
      std::memset(out.data() + (at - offset), 0, static_cast<std::size_t>(it->offset - at));
    }
    decode(encoded_, *it, from, to, out.data() + (it->offset + from - offset));
    at = it->offset + to;
  }
  if (at < end) std::memset(out.data() + (at - offset), 0, static_cast<std::size_t>(end - at));
}

}  // namespace ckptfs
