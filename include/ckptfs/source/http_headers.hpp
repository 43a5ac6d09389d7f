// SPDX-License-Identifier: MIT
// The HTTP response lines a remote source trusts only after checking them: the status line,
// header fields, Content-Range and Retry-After. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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

}  // namespace ckptfs::http
