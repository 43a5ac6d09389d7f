// SPDX-License-Identifier: MIT
// WireReader: protobuf's encodings read through a bounded buffer, every field checked against the
// end of the message holding it.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/onnx/protobuf_wire.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace ckptfs::protobuf {

WireReader::WireReader(const ByteSource& source, std::uint64_t begin, std::uint64_t limit,
                       std::size_t chunk)
    : source_(source),
      position_(begin),
      limit_(std::min(limit, source.size())),
      chunk_(std::max<std::size_t>(chunk, 16)) {}

void WireReader::set_limit(std::uint64_t limit) noexcept {
  limit_ = std::min(limit, source_.size());
}

void WireReader::seek(std::uint64_t position) {
  if (position > limit_) past_limit(position - position_);
  position_ = position;
}

void WireReader::past_limit(std::uint64_t needed) const {
  if (limit_ == source_.size()) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("protobuf: byte {} needs {} more bytes, past the end of the file ({} "
                            "bytes; or a length lies): {}",
                            position_, needed, source_.size(), looks_truncated));
  }
  throw Error(ExitCode::bad_checkpoint,
              fmt::format("protobuf: byte {} needs {} more bytes, past the end of its message "
                          "(byte {}): a length lies",
                          position_, needed, limit_));
}

const std::uint8_t* WireReader::need(std::size_t n) {
  if (n > limit_ - std::min(limit_, position_)) past_limit(n);
  if (position_ < buffer_start_ || position_ + n > buffer_start_ + buffer_.size()) {
    // Refill from here: a chunk, or what was asked when more, never past the source's end.
    const std::uint64_t end = source_.size();
    const std::uint64_t length = std::min<std::uint64_t>(std::max(n, chunk_), end - position_);
    buffer_.resize(static_cast<std::size_t>(length));
    source_.read(position_, std::as_writable_bytes(std::span(buffer_)));
    buffer_start_ = position_;
  }
  return buffer_.data() + (position_ - buffer_start_);
}

std::uint64_t WireReader::varint() {
  const std::uint64_t start = position_;
  std::uint64_t value = 0;
  for (unsigned i = 0; i < 10; ++i) {
    const std::uint8_t byte = *need(1);
    ++position_;
    value |= std::uint64_t{byte & 0x7fu} << (7 * i);
    if (byte < 0x80) return value;
  }
  throw Error(ExitCode::bad_checkpoint,
              fmt::format("protobuf: byte {}: a varint longer than 10 bytes", start));
}

std::uint32_t WireReader::fixed32() {
  const std::uint8_t* p = need(4);
  position_ += 4;
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

std::uint64_t WireReader::fixed64() {
  const std::uint64_t low = fixed32();
  return low | std::uint64_t{fixed32()} << 32;
}

Tag WireReader::tag() {
  const std::uint64_t start = position_;
  const std::uint64_t key = varint();
  const auto type = static_cast<unsigned>(key & 7);
  const std::uint64_t field = key >> 3;
  if (field == 0 || field >= (std::uint64_t{1} << 29) || type > 5) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("protobuf: byte {}: no field's tag (field {}, wire type {})", start,
                            field, type));
  }
  return {static_cast<std::uint32_t>(field), static_cast<WireType>(type)};
}

std::uint64_t WireReader::length() {
  const std::uint64_t n = varint();
  if (n > limit_ - std::min(limit_, position_)) past_limit(n);
  return n;
}

std::string_view WireReader::bytes(std::size_t n) {
  const std::uint8_t* p = need(n);
  position_ += n;
  return {reinterpret_cast<const char*>(p), n};
}

void WireReader::skip_bytes(std::uint64_t n) {
  if (n > limit_ - std::min(limit_, position_)) past_limit(n);
  position_ += n;
}

void WireReader::skip(Tag tag) {
  std::size_t depth = 0;  // groups open
  for (;;) {
    switch (tag.type) {
      case WireType::varint:
        varint();
        break;
      case WireType::fixed64:
        skip_bytes(8);
        break;
      case WireType::fixed32:
        skip_bytes(4);
        break;
      case WireType::length:
        skip_bytes(length());
        break;
      case WireType::group_start:
        if (++depth > max_group_depth) {
          throw Error(ExitCode::bad_checkpoint,
                      fmt::format("protobuf: byte {}: groups nested more than {} deep", position_,
                                  max_group_depth));
        }
        break;
      case WireType::group_end:
        if (depth == 0) {
          throw Error(
              ExitCode::bad_checkpoint,
              fmt::format("protobuf: byte {}: the end of a group that never began", position_));
        }
        --depth;
        break;
    }
    if (depth == 0) return;
    tag = this->tag();  // a field of the group being skipped (or its end)
  }
}

void VarintCounter::feed(std::string_view bytes) noexcept {
  for (const char c : bytes) {
    if (static_cast<unsigned char>(c) < 0x80) {
      ++count_;
      pending_ = 0;
    } else if (++pending_ >= 10) {
      valid_ = false;  // a tenth byte with its high bit set: longer than any varint
    }
  }
}

}  // namespace ckptfs::protobuf
