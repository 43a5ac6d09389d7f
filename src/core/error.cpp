// SPDX-License-Identifier: MIT
// quote(): untrusted text made printable for one-line error messages.
#include <ckptfs/error.hpp>

#include <fmt/format.h>

namespace ckptfs {

std::string quote(std::string_view text, std::size_t max_bytes) {
  std::string out = "\"";
  std::size_t i = 0;
  while (i < text.size()) {
    if (out.size() >= max_bytes + 1) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
      ++i;
    } else if (c >= 0xc2 && c <= 0xf4) {
      // Copy a well-formed UTF-8 sequence as is; escape anything else byte by byte.
      std::size_t len = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
      bool ok = i + len <= text.size();
      for (std::size_t k = 1; ok && k < len; ++k) {
        ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      }
      if (ok) {
        out.append(text.substr(i, len));
        i += len;
      } else {
        out += fmt::format("\\x{:02x}", c);
        ++i;
      }
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  out += '"';
  return out;
}

}  // namespace ckptfs
