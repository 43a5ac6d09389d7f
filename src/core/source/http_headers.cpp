// SPDX-License-Identifier: MIT
// Parsing of the HTTP status line, header fields, Content-Range and Retry-After.
#include <ckptfs/source/http_headers.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace ckptfs::http {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// A decimal number that is the whole of `text` (digits only, no sign, no overflow).
std::optional<std::uint64_t> number(std::string_view text) noexcept {
  if (text.empty() || text.size() > 20) return std::nullopt;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<int> parse_status_line(std::string_view line) noexcept {
  if (!line.starts_with("HTTP/")) return std::nullopt;
  const auto space = line.find(' ');
  if (space == std::string_view::npos || line.size() < space + 4) return std::nullopt;
  auto code = number(line.substr(space + 1, 3));
  if (!code || *code < 100 || *code > 599) return std::nullopt;
  if (line.size() > space + 4 && line[space + 4] != ' ' && line[space + 4] != '\r' &&
      line[space + 4] != '\n') {
    return std::nullopt;
  }
  return static_cast<int>(*code);
}

std::optional<HeaderField> parse_header_line(std::string_view line) {
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  HeaderField field;
  field.name = std::string(trim(line.substr(0, colon)));
  for (char& c : field.name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  field.value = std::string(trim(line.substr(colon + 1)));
  return field;
}

std::optional<ContentRange> parse_content_range(std::string_view value) noexcept {
  value = trim(value);
  if (!value.starts_with("bytes ")) return std::nullopt;
  value.remove_prefix(6);
  const auto slash = value.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  ContentRange range;
  const std::string_view span = trim(value.substr(0, slash));
  const std::string_view total = trim(value.substr(slash + 1));
  if (total != "*") {
    range.total = number(total);
    if (!range.total) return std::nullopt;
  }
  if (span != "*") {
    const auto dash = span.find('-');
    if (dash == std::string_view::npos) return std::nullopt;
    range.first = number(span.substr(0, dash));
    range.last = number(span.substr(dash + 1));
    if (!range.first || !range.last || *range.last < *range.first) return std::nullopt;
    if (range.total && *range.last >= *range.total) return std::nullopt;
  } else if (!range.total) {
    return std::nullopt;  // "bytes */*" says nothing
  }
  return range;
}

std::optional<std::uint64_t> parse_content_length(std::string_view value) noexcept {
  return number(trim(value));
}

std::optional<std::uint64_t> parse_retry_after(std::string_view value, std::int64_t now,
                                               std::optional<std::int64_t> date_seconds) noexcept {
  value = trim(value);
  if (auto seconds = number(value)) return seconds;
  if (!date_seconds) return std::nullopt;
  return *date_seconds > now ? static_cast<std::uint64_t>(*date_seconds - now) : 0;
}

std::variant<RangeAnswer, std::string> judge_range(int status,
                                                   const std::optional<ContentRange>& content_range,
                                                   std::optional<std::uint64_t> content_length,
                                                   const RangeRequest& request,
                                                   std::uint64_t whole_limit) {
  const std::uint64_t last_asked = request.first + request.length - 1;
  RangeAnswer answer;
  std::uint64_t first = 0;
  if (status == 206) {
    if (!content_range) return std::string("a 206 answer without a valid Content-Range");
    const ContentRange& r = *content_range;
    if (!r.total || !r.first) return std::string("a 206 answer with an unknown size");
    first = *r.first;
    answer.total = *r.total;
    answer.declared = *r.last - *r.first + 1;
  } else {
    // The server ignored the range: the body is the whole object, from byte 0.
    if (!content_length) {
      return std::string(
          "the server ignores Range requests (it answered 200 without a Content-Length)");
    }
    answer.total = answer.declared = *content_length;
    if (request.probe && answer.total > whole_limit) {
      return fmt::format(
          "the server ignores Range requests (it answered 200 with the whole object, {} bytes): "
          "ckptfs reads remote objects by range",
          answer.total);
    }
  }
  // What must come: the bytes asked; at the probe, up to the object's end (all of it, when the
  // server ignores ranges).
  answer.take = !request.probe  ? request.length
                : status == 200 ? answer.total
                                : std::min(request.length, answer.total);
  if (first != request.first || answer.declared < answer.take) {
    const std::uint64_t want_last = request.probe ? answer.take - 1 : last_asked;
    if (status == 200) {
      return fmt::format(
          "the server answered 200 (the whole object) to a request for bytes {}-{}: it ignores "
          "ranges, and ckptfs reads remote objects by range",
          request.first, want_last);
    }
    return fmt::format("the server answered bytes {}-{} to a request for {}-{}", first,
                       first + answer.declared - 1, request.first, want_last);
  }
  return answer;
}

}  // namespace ckptfs::http
