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

// What append_json_string() writes for `text` between its quotes, and how many bytes that is,
// computed without writing it: a limit on JSON text is checked before the text is made (a
// control character takes 6 bytes, "\u0001").
void append_json_escaped(std::string& out, std::string_view text);
std::size_t json_escaped_size(std::string_view text) noexcept;

// Where to end a piece of a longer text so that no well-formed UTF-8 sequence straddles the cut:
// the size of `piece` (at least 4 bytes), less the bytes of a sequence its end cuts. Escaping a
// text piece by piece, each cut there, gives the same JSON as escaping it whole.
std::size_t utf8_piece_end(std::string_view piece) noexcept;

// `text` for a terminal: well-formed printable UTF-8 as is, '"' and '\' behind a backslash,
// anything else as \xNN; cut at `max_bytes` with "..." (SIZE_MAX: never).
std::string escape_for_terminal(std::string_view text, std::size_t max_bytes);

// Whether a comes before b in natural order (zero_to_fp32's, for its files; HDF5 groups' names):
// runs of ASCII digits compared as numbers, the rest as text ("rank_9" < "rank_10"); names equal
// that way by their bytes.
bool natural_less(std::string_view a, std::string_view b) noexcept;

// An untrusted string made safe for a one-line message: escape_for_terminal() in double quotes.
std::string quote(std::string_view text, std::size_t max_bytes = 120);

// `path` as a shell word, for a command a message suggests: as it is when it holds only
// characters no shell treats specially, else in single quotes. Control characters are shown
// escaped (quote()): such a name is copied by hand anyway.
std::string shell_quote(std::string_view path);

}  // namespace ckptfs
