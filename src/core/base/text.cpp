// SPDX-License-Identifier: MIT
// UTF-8 validation and the escaping of untrusted text for JSON, messages and listings.
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

namespace ckptfs {
namespace {

// `prefix` and the byte's two hex digits: "\\u0001", "\\udcff" (a hostile key may hold millions).
void append_escape(std::string& out, std::string_view prefix, unsigned char byte) {
  constexpr std::string_view hex = "0123456789abcdef";
  out += prefix;
  out += hex[byte >> 4];
  out += hex[byte & 15];
}

}  // namespace

std::size_t utf8_sequence_length(std::string_view text, std::size_t at) noexcept {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned c = byte(at);
  if (c < 0x80) return 1;
  const std::size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                          : c >= 0xe0 && c <= 0xef ? 3
                          : c >= 0xf0 && c <= 0xf4 ? 4
                                                   : 0;
  if (len == 0 || at + len > text.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((byte(at + k) & 0xc0) != 0x80) return 0;
  }
  const unsigned c1 = byte(at + 1);
  // Overlong three- and four-byte forms, surrogates, and code points past U+10FFFF.
  if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) ||
      (c == 0xf4 && c1 >= 0x90)) {
    return 0;
  }
  return len;
}

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  append_json_escaped(out, text);
  out += '"';
}

void append_json_escaped(std::string& out, std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    // Printable ASCII other than quote and backslash is copied in runs: keys are mostly that.
    std::size_t run = i;
    while (run < text.size() && text[run] >= 0x20 && text[run] < 0x7f && text[run] != '"' &&
           text[run] != '\\') {
      ++run;
    }
    out.append(text.substr(i, run - i));
    i = run;
    if (i == text.size()) break;
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      switch (c) {
        case '\n':
          out += "\\n";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\r':
          out += "\\r";
          break;
        default:
          append_escape(out, "\\u00", c);
      }
      ++i;
    } else if (std::size_t len = utf8_sequence_length(text, i); len != 0) {
      out.append(text.substr(i, len));  // DEL, or a well-formed multi-byte sequence
      i += len;
    } else {
      append_escape(out, "\\udc", c);
      ++i;
    }
  }
}

std::size_t json_escaped_size(std::string_view text) noexcept {
  std::size_t size = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      size += c == '"' || c == '\\' ? 2 : 1;
      ++i;
    } else if (c == '\n' || c == '\t' || c == '\r') {
      size += 2;
      ++i;
    } else if (std::size_t len = c < 0x20 ? 0 : utf8_sequence_length(text, i); len != 0) {
      size += len;
      i += len;
    } else {
      size += 6;  // "\u00XX" for another control character, "\udcXX" for a stray byte
      ++i;
    }
  }
  return size;
}

std::size_t utf8_piece_end(std::string_view piece) noexcept {
  const std::size_t n = piece.size();
  for (std::size_t i = n < 3 ? 0 : n - 3; i < n; ++i) {
    const auto c = static_cast<unsigned char>(piece[i]);
    const std::size_t len = c >= 0xc2 && c <= 0xdf   ? 2
                            : c >= 0xe0 && c <= 0xef ? 3
                            : c >= 0xf0 && c <= 0xf4 ? 4
                                                     : 1;
    if (i + len > n) return i;  // a lead byte whose sequence the piece's end would cut
  }
  return n;
}

std::string escape_for_terminal(std::string_view text, std::size_t max_bytes) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (out.size() >= max_bytes) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(text[i]);
    std::size_t len = utf8_sequence_length(text, i);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (c >= 0x80 && len != 0 &&
               !(c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0)) {
      out.append(text.substr(i, len));  // printable beyond ASCII (C1 controls are escaped)
      i += len;
    } else {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", c);
      ++i;
    }
  }
  return out;
}

std::string quote(std::string_view text, std::size_t max_bytes) {
  return '"' + escape_for_terminal(text, max_bytes) + '"';
}

std::string shell_quote(std::string_view path) {
  if (!path.empty() && path.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789/._-+,:@%=") == std::string_view::npos) {
    return std::string(path);
  }
  for (unsigned char c : path) {
    if (c < 0x20 || c == 0x7f) return quote(path);
  }
  std::string out = "'";
  for (char c : path) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

namespace {
bool ascii_digit(char c) { return c >= '0' && c <= '9'; }
}  // namespace

bool natural_less(std::string_view a, std::string_view b) noexcept {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (ascii_digit(a[i]) && ascii_digit(b[j])) {
      // Two numbers: without their leading zeros, the longer is the larger, else the first
      // digit that differs says.
      std::size_t ei = i, ej = j;
      while (ei < a.size() && ascii_digit(a[ei])) ++ei;
      while (ej < b.size() && ascii_digit(b[ej])) ++ej;
      std::size_t si = i, sj = j;
      while (si + 1 < ei && a[si] == '0') ++si;
      while (sj + 1 < ej && b[sj] == '0') ++sj;
      const std::string_view x = a.substr(si, ei - si), y = b.substr(sj, ej - sj);
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ei;
      j = ej;
      continue;
    }
    // Text against text, or text against a number: Python compares the text runs, and a run of
    // text that ends where the other has a digit compares as the shorter string.
    if (a[i] != b[j]) {
      const bool da = ascii_digit(a[i]), db = ascii_digit(b[j]);
      if (da != db) return da;  // the text run that ends first is a prefix of the other
      return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]);
    }
    ++i;
    ++j;
  }
  if (i < a.size() || j < b.size()) return j < b.size() && !(i < a.size());
  return a < b;  // equal by their keys ("07" and "7"): by their bytes
}

}  // namespace ckptfs
