// SPDX-License-Identifier: MIT
// The HTTP response lines a remote source trusts only after checking them: the status line,
// header fields, Content-Range and Retry-After. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace ckptfs::http {

// The status code of a status line ("HTTP/1.1 206 Partial Content", "HTTP/2 200"), or nullopt
// when `line` is not one.
std::optional<int> parse_status_line(std::string_view line) noexcept;

// A header line split at its colon: the name lower-cased, the value without surrounding blanks
// and line ending. nullopt for a line without a colon (the status line, the final empty line).
struct HeaderField {
  std::string name;
  std::string value;
};
std::optional<HeaderField> parse_header_line(std::string_view line);

// Content-Range of a 206 ("bytes 0-1023/4096") or a 416 ("bytes */4096"). `total` is nullopt for
// "/*" (unknown); `first`/`last` are nullopt for "*". nullopt when malformed, when last < first,
// or when last >= total.
struct ContentRange {
  std::optional<std::uint64_t> first;
  std::optional<std::uint64_t> last;
  std::optional<std::uint64_t> total;
};
std::optional<ContentRange> parse_content_range(std::string_view value) noexcept;

// Content-Length: a decimal number of bytes, digits only (no sign, no blank inside), at most
// 2^64 - 1. nullopt when it is anything else (strtoull would take "-1" as 2^64 - 1, "abc" as 0).
std::optional<std::uint64_t> parse_content_length(std::string_view value) noexcept;

// Retry-After as a number of seconds from now: delta-seconds ("120"), or an HTTP date given
// `now` and the date already converted to seconds since the epoch by the caller's date parser
// (`date_seconds`; nullopt when the value is not a date either). A date in the past gives 0.
// nullopt when the value is neither.
std::optional<std::uint64_t> parse_retry_after(std::string_view value, std::int64_t now,
                                               std::optional<std::int64_t> date_seconds) noexcept;

// The one rule for what an answer to a range request holds (docs/SECURITY.md, "Ranges"): its
// body must begin with the first byte asked and hold at least the bytes asked. Those are taken
// and the transfer is cut there: what follows is never read. So a 206 whose Content-Range starts
// where asked and ends later (s3rver answers "bytes=0-0" with the whole object as a 206) gives
// the bytes asked; a 200 is the whole object from byte 0 (the server ignored the range), which
// gives the bytes asked of a request from byte 0 and nothing else. A 206 that starts elsewhere
// or ends short is refused; so is a 200 to a request from any other byte, since its bytes would
// have to be read from byte 0 to the ones asked.
//
// The probe (the first request, the object's size unknown) asks `length` bytes from 0 and takes
// up to the object's end. A 200 to it says that the server ignores ranges: usable only when
// the whole object fits in `whole_limit` bytes (one block: it is then all taken, and every
// later request is one from byte 0); a larger object is refused, since every block after the
// first would need the whole object again. Whether the probe asks one byte (a disk cache may
// hold block 0) or a block changes nothing of this.
struct RangeRequest {
  std::uint64_t first = 0;
  std::uint64_t length = 0;  // at least 1
  bool probe = false;        // first is then 0
};
struct RangeAnswer {
  std::uint64_t total = 0;     // the object's size, as the answer gives it
  std::uint64_t take = 0;      // bytes to take from the start of the body
  std::uint64_t declared = 0;  // bytes the body says it holds (>= take); a body longer is refused
};
// `status` is 200 or 206; the fields as parsed (nullopt: absent or malformed). Returns the
// answer, or why it cannot be used (a sentence without the URL).
std::variant<RangeAnswer, std::string> judge_range(int status,
                                                   const std::optional<ContentRange>& content_range,
                                                   std::optional<std::uint64_t> content_length,
                                                   const RangeRequest& request,
                                                   std::uint64_t whole_limit);

}  // namespace ckptfs::http
