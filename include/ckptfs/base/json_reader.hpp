// SPDX-License-Identifier: MIT
// Strict JSON for untrusted input: a bounded, iterative pull reader that streams its input, and
// a small document type built on it for small files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs {

// What one reader accepts at most. Every limit is checked before memory is used for it.
struct JsonLimits {
  // Arrays and objects open at once. The reader keeps one small frame per level and never
  // recurses, so this bounds memory, not the stack (serde_json, which the safetensors library
  // uses, refuses more than 128 levels; so does this by default).
  std::size_t max_depth = 128;
  // One key or string, decoded; a longer one is an error, not cut.
  std::size_t max_string_bytes = 64u << 20;
  // One number as written ("-12.5e3" is 7); RFC 8259 sets no limit, sane writers stay far below.
  std::size_t max_number_chars = 256;
  // Read a lone escape \udc80-\udcff as the single byte 0x80-0xff, as Python's surrogateescape
  // does: how ckptfs's own JSON (base/text.hpp) writes bytes that are not UTF-8, so that its
  // meta.json and value.json read back to the very bytes. Strings may then hold bytes that are
  // not UTF-8. Off, such an escape is an error, as the format says.
  bool surrogate_escapes = false;
};

// A pull reader of one JSON text (RFC 8259), strict in every way that matters for untrusted
// input:
//   - the grammar exactly: no comments, no trailing commas, no single quotes, no NaN or
//     Infinity, no leading zeros or '+' in numbers, no raw control characters in strings,
//     nothing but whitespace (space, tab, CR, LF) after the root value;
//   - strings are well-formed UTF-8 (base/text.hpp's rule: no overlong forms, no surrogates, no
//     code point past U+10FFFF) and their escapes are valid: a \uD800-\uDBFF escape must be
//     followed by a \uDC00-\uDFFF one, and a lone surrogate escape is an error;
//   - a key twice in one object is an error (see duplicate keys below);
//   - numbers are kept as written and converted exactly on request (uint64(), int64()), so that
//     offsets up to 2^64 - 1 are never rounded through a double, and a fraction, an exponent or
//     a minus sign is told apart from an integer.
//
// Usage: call next() until it returns Token::end; every call returns the next token:
//
//   JsonReader json(R"({"a": [1, 2], "b": null})");
//   json.next();  // begin_object
//   json.next();  // key, json.string() == "a"
//   json.next();  // begin_array ... number (json.uint64() == 1), number, end_array
//   ...           // key "b", null, end_object, then end
//
// The caller checks its schema as tokens come (an offset is a number, a shape an array...) and
// reports what does not fit with fail(), which gives the byte offset of the current token.
// skip_value() passes over a value the caller does not want, however deep, without recursion.
//
// Streaming: with an Input callback, the reader pulls the text in chunks and holds only the
// current token (a string or number being decoded, at most JsonLimits) and the keys of the
// objects that are open, never the whole text, and never a tree. A 100 MB text with millions of
// members is read in one pass with memory for its keys only.
//
// Duplicate keys: the reader copies the keys of every open object and, when the object closes,
// sorts them and compares neighbours, so a duplicate is reported at the object's end (before
// the caller sees Token::end_object). O(n log n) for n keys whatever they are: there is no hash
// an input could make collide. The copies of an object's keys are dropped when it closes.
//
// Errors: every failure throws Error(ExitCode::bad_checkpoint) with a one-line message
// "invalid JSON at byte N: what" (or fail()'s "at byte N: what"); N counts from the start of
// the text. The caller prefixes what the text was ("safetensors header: ..."). Once next() has
// thrown, the reader must not be used again.
//
// Not thread-safe; one reader per text.
class JsonReader {
 public:
  enum class Token : std::uint8_t {
    begin_object,
    end_object,
    begin_array,
    end_array,
    key,     // a member name: string() holds it decoded; its value's tokens follow
    string,  // string() holds it decoded
    number,  // number_text(), uint64(), int64(), floating()
    true_value,
    false_value,
    null,
    end,  // the root value is complete and only whitespace followed it
  };

  // Fills `buffer` with the next bytes of the text, at most buffer.size() of them; returns how
  // many, 0 only at the end of the text. May throw (the exception goes through next()).
  using Input = std::function<std::size_t(std::span<char> buffer)>;

  // Reads `text`, which must outlive the reader.
  explicit JsonReader(std::string_view text, JsonLimits limits = {});
  // Reads what `input` gives, `chunk_bytes` at a time.
  explicit JsonReader(Input input, JsonLimits limits = {}, std::size_t chunk_bytes = 64 * 1024);

  JsonReader(const JsonReader&) = delete;
  JsonReader& operator=(const JsonReader&) = delete;

  // The next token. After Token::end, returns Token::end again.
  Token next();
  Token token() const noexcept { return token_; }

  // The decoded text of the current key or string token; valid until the next call to next().
  std::string_view string() const noexcept { return string_; }

  // The current number token as written ("-0.5e3").
  std::string_view number_text() const noexcept { return string_; }
  // Its value when it is written as a non-negative integer (no minus sign, fraction or exponent:
  // "7", not "7.0", "7e0" or "-0") that fits 64 bits; otherwise nullopt.
  std::optional<std::uint64_t> uint64() const noexcept;
  // Its value when it is written as an integer (a minus sign allowed) that fits int64.
  std::optional<std::int64_t> int64() const noexcept;
  // The double nearest to it (±infinity past the range of doubles).
  double floating() const noexcept;

  // Arrays and objects open after the current token (0 after the root's last token).
  std::size_t depth() const noexcept { return frames_.size(); }
  // The byte offset in the text of the current token's first byte.
  std::uint64_t offset() const noexcept { return token_offset_; }

  // Consumes the rest of the value the current token starts: after begin_object or begin_array,
  // everything up to and including the matching end token (every rule above still applies);
  // after a scalar, nothing; after a key, the member's whole value.
  void skip_value();

  // Throws Error(bad_checkpoint, "at byte N: what"), N = offset(): for a token that is valid
  // JSON but not what the caller's schema allows there.
  [[noreturn]] void fail(std::string_view what) const;

 private:
  struct Frame {
    bool object = false;
    std::size_t first_key = 0;  // this object's first entry in keys_
    std::uint64_t offset = 0;   // where it begins, for messages
  };
  enum class Expect : std::uint8_t {
    value,         // the root value, or a value after ':' or an array's ','
    first_item,    // after '[': a value or ']'
    first_key,     // after '{': a key or '}'
    key,           // after an object's ',': a key
    after_item,    // after an array item: ',' or ']'
    after_member,  // after an object member: ',' or '}'
    done,          // the root value is complete
  };

  [[noreturn]] void syntax_error(std::string_view what) const;
  [[noreturn]] void syntax_error_at(std::uint64_t offset, std::string_view what) const;
  // Makes at least n bytes available at pos_ when the text has them; false at its end.
  bool available(std::size_t n);
  int peek();  // the next byte (0-255), or -1 at the end of the text
  std::uint64_t position() const noexcept { return dropped_ + pos_; }
  void skip_whitespace();
  Token value_token();
  Token begin(bool object);
  Token end_container(bool object);
  void read_string();
  std::uint32_t read_hex4();
  void read_number();
  void read_literal(std::string_view word);
  void check_duplicate_keys(const Frame& frame);

  // Input: the text itself (memory mode), or a window of it in own_ (streaming mode).
  Input input_;
  std::vector<char> own_;
  const char* data_ = nullptr;
  std::size_t size_ = 0;       // valid bytes at data_
  std::size_t pos_ = 0;        // next byte to read, within data_
  std::uint64_t dropped_ = 0;  // bytes of the text before data_[0]
  std::size_t chunk_ = 0;
  bool input_done_ = false;

  JsonLimits limits_;
  Token token_ = Token::null;
  bool started_ = false;
  Expect expect_ = Expect::value;
  std::uint64_t token_offset_ = 0;
  std::string string_;  // the current key, string or number text
  std::vector<Frame> frames_;
  // The keys of the open objects, each as (offset in key_bytes_, length).
  std::string key_bytes_;
  std::vector<std::pair<std::size_t, std::size_t>> keys_;
};

// A parsed JSON value, for small texts a caller wants whole (a config, a value.json): build it
// with parse_json(). Objects keep their members in the text's order, keys unique.
class JsonValue {
 public:
  enum class Kind : std::uint8_t { null, boolean, number, string, array, object };

  Kind kind() const noexcept { return kind_; }
  bool is(Kind k) const noexcept { return kind_ == k; }
  bool boolean() const noexcept { return boolean_; }
  // A string's decoded text, or a number as written.
  const std::string& text() const noexcept { return text_; }
  std::optional<std::uint64_t> uint64() const noexcept;  // as JsonReader::uint64()
  std::optional<std::int64_t> int64() const noexcept;    // as JsonReader::int64()
  double floating() const noexcept;                      // as JsonReader::floating()
  const std::vector<JsonValue>& items() const noexcept { return items_; }  // arrays
  const std::vector<std::pair<std::string, JsonValue>>& members() const noexcept {
    return members_;
  }  // objects
  // The member named `key` of an object; nullptr when there is none or this is no object.
  const JsonValue* find(std::string_view key) const noexcept;

 private:
  friend JsonValue parse_json(std::string_view, const JsonLimits&, std::size_t);
  Kind kind_ = Kind::null;
  bool boolean_ = false;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<std::pair<std::string, JsonValue>> members_;
};

// Parses `text` whole with JsonReader's rules. More than `max_values` values in all (every
// array item, member and scalar counts) is an error, so that a small text cannot become a large
// tree. The tree is built without recursion; destroying it recurses once per nesting level,
// which limits.max_depth bounds. Throws Error(bad_checkpoint) as JsonReader does.
JsonValue parse_json(std::string_view text, const JsonLimits& limits = {},
                     std::size_t max_values = 1'000'000);

// Writes the scalar `token` that `json` has just read (a string, a number as written, true,
// false, null) to `out`, as compact_json() writes it; false, writing nothing, for any other token.
class JsonWriter;
bool copy_json_scalar(JsonReader& json, JsonReader::Token token, JsonWriter& out);

// `text` read with JsonReader's rules and written back compact: no whitespace, strings escaped
// as append_json_string() writes them, numbers as written. Iterative: memory is the output and
// a frame per open container. Throws Error(bad_checkpoint) as JsonReader does.
std::string compact_json(std::string_view text, const JsonLimits& limits = {});

// The number rules of JsonReader on a number's text (as JsonReader::number_text() gives it).
std::optional<std::uint64_t> json_uint64(std::string_view number_text) noexcept;
std::optional<std::int64_t> json_int64(std::string_view number_text) noexcept;
double json_double(std::string_view number_text) noexcept;

}  // namespace ckptfs
