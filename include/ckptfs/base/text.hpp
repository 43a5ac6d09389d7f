// SPDX-License-Identifier: MIT
// Untrusted text made safe to show: one UTF-8 rule for JSON strings, messages and listings.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ckptfs {

// The length of the well-formed UTF-8 sequence that starts at text[at] (1 to 4), or 0 when the
// byte there starts none: a continuation byte, an overlong form, a surrogate (U+D800-U+DFFF), a
// code point past U+10FFFF, or a sequence cut by the end of the text.
std::size_t utf8_sequence_length(std::string_view text, std::size_t at) noexcept;

// Appends `text` as a JSON string literal. Well-formed UTF-8 is copied; a byte that starts no
// well-formed sequence is written as the lone surrogate U+DC00+byte ("\udcff" for 0xff), as
// Python's surrogateescape decodes it: os.listdir() shows a directory of that name as the very
// same str, and the bytes are recovered with os.fsencode(). Control characters, '"' and '\'
// are escaped.
void append_json_string(std::string& out, std::string_view text);

// `text` for a terminal: well-formed printable UTF-8 as is, '"' and '\' behind a backslash,
// anything else as \xNN; cut at `max_bytes` with "..." (SIZE_MAX: never).
std::string escape_for_terminal(std::string_view text, std::size_t max_bytes);

// An untrusted string made safe for a one-line message: escape_for_terminal() in double quotes.
std::string quote(std::string_view text, std::size_t max_bytes = 120);

// `path` as a shell word, for a command a message suggests: as it is when it holds only
// characters no shell treats specially, else in single quotes. Control characters are shown
// escaped (quote()): such a name is copied by hand anyway.
std::string shell_quote(std::string_view path);

}  // namespace ckptfs
