// SPDX-License-Identifier: MIT
// The protobuf wire format read from a ByteSource that is not trusted: tags, varints (at most 10
// bytes), fixed 32- and 64-bit values and length-delimited fields, each checked to end inside
// the message that holds it, through a buffer of bounded size. Nothing is read that the caller
// does not ask for: a length-delimited field of 1 GB (an ONNX raw_data) is located and skipped,
// never read. No recursion: a caller walking nested messages keeps its own stack.
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ckptfs::protobuf {

enum class WireType : std::uint8_t {
  varint = 0,
  fixed64 = 1,
  length = 2,  // length-delimited: bytes, strings, messages, packed repeated scalars
  group_start = 3,
  group_end = 4,
  fixed32 = 5,
};

struct Tag {
  std::uint32_t field = 0;  // 1 to 2^29 - 1
  WireType type = WireType::varint;
};

// Groups (a deprecated encoding no ONNX writer uses) are skipped up to this nesting.
inline constexpr std::size_t max_group_depth = 64;

// Reads fields front to back from `begin`. Every read is checked against the limit (the end of
// the message being read, which the caller sets as it enters and leaves messages) and throws
// Error(bad_checkpoint) with the byte offset when the bytes are not there or are no valid
// encoding: a varint of more than 10 bytes, field number 0, wire type 6 or 7, an end-group tag
// without its start, a length that runs past the limit ("past the end of the file ... looks
// truncated" when the limit is the file's end). A buffer of at most `chunk` bytes (or the
// largest bytes() asked) is read at a time. Not thread-safe; one per walk.
class WireReader {
 public:
  static constexpr std::size_t default_chunk = 1 << 16;

  WireReader(const ByteSource& source, std::uint64_t begin, std::uint64_t limit,
             std::size_t chunk = default_chunk);

  std::uint64_t position() const noexcept { return position_; }
  std::uint64_t limit() const noexcept { return limit_; }
  // The end of the message being read, at most the source's size.
  void set_limit(std::uint64_t limit) noexcept;
  bool at_limit() const noexcept { return position_ >= limit_; }
  // Moves to `position` (at most the limit): back to a field read before, or past one.
  void seek(std::uint64_t position);

  Tag tag();
  std::uint64_t varint();
  std::uint32_t fixed32();
  std::uint64_t fixed64();
  // The length of a length-delimited field, checked to end inside the limit; the reader is left
  // at the field's first byte.
  std::uint64_t length();
  // The next `n` bytes (checked against the limit), valid until the next call.
  std::string_view bytes(std::size_t n);
  void skip_bytes(std::uint64_t n);
  // Skips the value of a field whose tag was just read (a length-delimited one unread; a group up
  // to its end tag, nested groups counted up to max_group_depth).
  void skip(Tag tag);

  const ByteSource& source() const noexcept { return source_; }

 private:
  [[noreturn]] void past_limit(std::uint64_t needed) const;
  // Makes bytes [position_, position_ + n) available in the buffer (n within the limit).
  const std::uint8_t* need(std::size_t n);

  const ByteSource& source_;
  std::uint64_t position_;
  std::uint64_t limit_;
  std::size_t chunk_;
  std::vector<std::uint8_t> buffer_;
  std::uint64_t buffer_start_ = 0;
};

// Counts the varints of packed repeated varints fed a piece at a time (each varint ends at a byte
// below 0x80; one may span two pieces): valid while every one is at most 10 bytes, and complete
// when the last one ended.
class VarintCounter {
 public:
  void feed(std::string_view bytes) noexcept;
  std::uint64_t count() const noexcept { return count_; }
  bool valid() const noexcept { return valid_; }
  bool complete() const noexcept { return valid_ && pending_ == 0; }

 private:
  std::uint64_t count_ = 0;
  unsigned pending_ = 0;  // bytes of the varint begun and not ended
  bool valid_ = true;
};

}  // namespace ckptfs::protobuf
