// SPDX-License-Identifier: MIT
// JsonReader: the grammar, strings and numbers of strict JSON, pulled a token at a time from a
// text in memory or a stream; and parse_json(), the small document built on it.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

namespace ckptfs {
namespace {

bool is_digit(int c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// RFC 8259's number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
bool valid_number(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i == s.size()) return false;
  if (s[i] == '0') {
    ++i;
  } else if (is_digit(s[i])) {
    while (i < s.size() && is_digit(s[i])) ++i;
  } else {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (i == s.size() || !is_digit(s[i])) return false;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (i == s.size() || !is_digit(s[i])) return false;
    while (i < s.size() && is_digit(s[i])) ++i;
  }
  return i == s.size();
}

}  // namespace

std::optional<std::uint64_t> json_uint64(std::string_view text) noexcept {
  if (text.empty()) return std::nullopt;
  std::uint64_t value = 0;
  for (char c : text) {
    if (!is_digit(c)) return std::nullopt;  // a sign, a fraction or an exponent
    if (__builtin_mul_overflow(value, 10u, &value) ||
        __builtin_add_overflow(value, static_cast<unsigned>(c - '0'), &value)) {
      return std::nullopt;
    }
  }
  if (text.size() > 1 && text[0] == '0') return std::nullopt;  // not JSON
  return value;
}

std::optional<std::int64_t> json_int64(std::string_view text) noexcept {
  const bool negative = !text.empty() && text[0] == '-';
  auto magnitude = json_uint64(negative ? text.substr(1) : text);
  if (!magnitude) return std::nullopt;
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!negative) {
    if (*magnitude > max) return std::nullopt;
    return static_cast<std::int64_t>(*magnitude);
  }
  if (*magnitude > max + 1) return std::nullopt;
  return *magnitude == max + 1 ? std::numeric_limits<std::int64_t>::min()
                               : -static_cast<std::int64_t>(*magnitude);
}

double json_double(std::string_view text) noexcept {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    const bool negative = !text.empty() && text[0] == '-';
    auto e = text.find_first_of("eE");
    const bool tiny = e != std::string_view::npos && e + 1 < text.size() && text[e + 1] == '-';
    if (tiny) return negative ? -0.0 : 0.0;
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  (void)end;
  return value;
}

// ---- JsonReader ------------------------------------------------------------------------

JsonReader::JsonReader(std::string_view text, JsonLimits limits)
    : data_(text.data()), size_(text.size()), input_done_(true), limits_(limits) {}

JsonReader::JsonReader(Input input, JsonLimits limits, std::size_t chunk_bytes)
    : input_(std::move(input)), chunk_(std::max<std::size_t>(chunk_bytes, 16)), limits_(limits) {
  own_.resize(chunk_ + 16);
  data_ = own_.data();
}

void JsonReader::syntax_error(std::string_view what) const { syntax_error_at(position(), what); }

void JsonReader::syntax_error_at(std::uint64_t offset, std::string_view what) const {
  throw Error(ExitCode::bad_checkpoint, fmt::format("invalid JSON at byte {}: {}", offset, what));
}

void JsonReader::fail(std::string_view what) const {
  throw Error(ExitCode::bad_checkpoint, fmt::format("at byte {}: {}", token_offset_, what));
}

bool JsonReader::available(std::size_t n) {
  if (size_ - pos_ >= n) return true;
  if (input_done_) return false;
  // Keep the unread bytes (fewer than n, a few at most) and read the next chunk behind them.
  std::memmove(own_.data(), own_.data() + pos_, size_ - pos_);
  dropped_ += pos_;
  size_ -= pos_;
  pos_ = 0;
  while (size_ < n && !input_done_) {
    if (own_.size() < size_ + chunk_) own_.resize(size_ + chunk_);
    data_ = own_.data();
    std::size_t got = input_(std::span<char>(own_.data() + size_, chunk_));
    if (got == 0) input_done_ = true;
    size_ += std::min(got, chunk_);
  }
  return size_ - pos_ >= n;
}

int JsonReader::peek() {
  if (pos_ == size_ && !available(1)) return -1;
  return static_cast<unsigned char>(data_[pos_]);
}

void JsonReader::skip_whitespace() {
  for (;;) {
    while (pos_ < size_) {
      char c = data_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
      ++pos_;
    }
    if (!available(1)) return;
  }
}

std::uint32_t JsonReader::read_hex4() {
  // At pos_: "\uXXXX", all six available.
  std::uint32_t v = 0;
  for (std::size_t k = 2; k < 6; ++k) {
    int h = hex_value(data_[pos_ + k]);
    if (h < 0) syntax_error("a \\u escape without four hex digits");
    v = v << 4 | static_cast<std::uint32_t>(h);
  }
  return v;
}

void JsonReader::read_string() {
  string_.clear();
  ++pos_;  // the opening quote
  for (;;) {
    if (pos_ == size_ && !available(1)) syntax_error("the text ends inside a string");
    // Runs of plain ASCII are copied at once: keys and most strings are nothing else.
    std::size_t run = pos_;
    while (run < size_) {
      auto c = static_cast<unsigned char>(data_[run]);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
      ++run;
    }
    if (run - pos_ > limits_.max_string_bytes - string_.size()) {
      syntax_error_at(token_offset_,
                      fmt::format("a string longer than {} bytes", limits_.max_string_bytes));
    }
    string_.append(data_ + pos_, run - pos_);
    pos_ = run;
    if (pos_ == size_) continue;
    auto c = static_cast<unsigned char>(data_[pos_]);
    if (c == '"') {
      ++pos_;
      return;
    }
    if (c < 0x20) syntax_error("a control character inside a string (it must be escaped)");
    std::size_t before = string_.size();
    if (c >= 0x80) {
      available(4);  // as many of the next 4 bytes as the text has
      std::size_t len = utf8_sequence_length(std::string_view(data_ + pos_, size_ - pos_), 0);
      if (len == 0) syntax_error("a string that is not well-formed UTF-8");
      string_.append(data_ + pos_, len);
      pos_ += len;
    } else {  // a backslash
      if (!available(2)) syntax_error("the text ends inside a string");
      char e = data_[pos_ + 1];
      const char* simple = std::strchr("\"\\/bfnrt", e);
      if (e != 'u' && (simple == nullptr || e == '\0')) syntax_error("an invalid escape");
      if (e != 'u') {
        static constexpr char decoded[] = "\"\\/\b\f\n\r\t";
        string_ += decoded[simple - "\"\\/bfnrt"];
        pos_ += 2;
      } else {
        if (!available(6)) syntax_error("the text ends inside a \\u escape");
        std::uint32_t cp = read_hex4();
        if (cp >= 0xdc80 && cp <= 0xdcff && limits_.surrogate_escapes) {
          string_ += static_cast<char>(cp - 0xdc00);  // a byte that is not UTF-8
        } else {
          if (cp >= 0xdc00 && cp <= 0xdfff) syntax_error("a lone low surrogate escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            // A high surrogate: the low one must follow as an escape.
            if (!available(12) || data_[pos_ + 6] != '\\' || data_[pos_ + 7] != 'u') {
              syntax_error("a high surrogate escape not followed by a low one");
            }
            pos_ += 6;
            std::uint32_t low = read_hex4();
            if (low < 0xdc00 || low > 0xdfff) {
              syntax_error("a high surrogate escape not followed by a low one");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(string_, cp);
        }
        pos_ += 6;
      }
    }
    if (string_.size() > limits_.max_string_bytes) {
      string_.resize(before);
      syntax_error_at(token_offset_,
                      fmt::format("a string longer than {} bytes", limits_.max_string_bytes));
    }
  }
}

void JsonReader::read_number() {
  string_.clear();
  for (;;) {
    if (pos_ == size_ && !available(1)) break;
    char c = data_[pos_];
    if (!is_digit(c) && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E') break;
    if (string_.size() == limits_.max_number_chars) {
      syntax_error(fmt::format("a number longer than {} characters", limits_.max_number_chars));
    }
    string_ += c;
    ++pos_;
  }
  if (!valid_number(string_)) syntax_error_at(token_offset_, "an invalid number");
}

void JsonReader::read_literal(std::string_view word) {
  if (!available(word.size()) || std::string_view(data_ + pos_, word.size()) != word) {
    syntax_error("an invalid literal (true, false and null are the only ones)");
  }
  pos_ += word.size();
}

JsonReader::Token JsonReader::begin(bool object) {
  if (frames_.size() >= limits_.max_depth) {
    syntax_error(fmt::format("arrays and objects nested deeper than {} levels", limits_.max_depth));
  }
  ++pos_;
  frames_.push_back({object, keys_.size(), token_offset_});
  expect_ = object ? Expect::first_key : Expect::first_item;
  return token_ = object ? Token::begin_object : Token::begin_array;
}

void JsonReader::check_duplicate_keys(const Frame& frame) {
  const std::size_t n = keys_.size() - frame.first_key;
  if (n < 2) return;
  auto key = [&](std::size_t i) {
    const auto& [at, length] = keys_[frame.first_key + i];
    return std::string_view(key_bytes_).substr(at, length);
  };
  std::vector<std::uint32_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = static_cast<std::uint32_t>(i);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return key(a) < key(b); });
  for (std::size_t i = 1; i < n; ++i) {
    if (key(order[i - 1]) == key(order[i])) {
      syntax_error_at(frame.offset, fmt::format("the object that starts here has the key {} twice",
                                                quote(key(order[i]))));
    }
  }
}

JsonReader::Token JsonReader::end_container(bool object) {
  ++pos_;
  const Frame frame = frames_.back();
  if (object) check_duplicate_keys(frame);
  if (frame.first_key < keys_.size()) {
    key_bytes_.resize(keys_[frame.first_key].first);
    keys_.resize(frame.first_key);
  }
  frames_.pop_back();
  expect_ = frames_.empty()         ? Expect::done
            : frames_.back().object ? Expect::after_member
                                    : Expect::after_item;
  return token_ = object ? Token::end_object : Token::end_array;
}

JsonReader::Token JsonReader::value_token() {
  started_ = true;
  Token t;
  switch (peek()) {
    case '{':
      return begin(true);
    case '[':
      return begin(false);
    case '"':
      read_string();
      t = Token::string;
      break;
    case 't':
      read_literal("true");
      t = Token::true_value;
      break;
    case 'f':
      read_literal("false");
      t = Token::false_value;
      break;
    case 'n':
      read_literal("null");
      t = Token::null;
      break;
    case '-':
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
    case '8':
    case '9':
      read_number();
      t = Token::number;
      break;
    case -1:
      syntax_error(started_ || !frames_.empty() ? "the text ends where a value should be"
                                                : "an empty text");
    default:
      syntax_error("expected a value");
  }
  expect_ = frames_.empty()         ? Expect::done
            : frames_.back().object ? Expect::after_member
                                    : Expect::after_item;
  return token_ = t;
}

JsonReader::Token JsonReader::next() {
  skip_whitespace();
  token_offset_ = position();
  int c = peek();
  switch (expect_) {
    case Expect::done:
      if (c != -1) syntax_error("more than whitespace after the root value");
      return token_ = Token::end;
    case Expect::value:
      if (c == -1 && !started_) syntax_error("an empty text");
      return value_token();
    case Expect::first_item:
      if (c == ']') return end_container(false);
      return value_token();
    case Expect::after_item:
      if (c == ']') return end_container(false);
      if (c != ',') syntax_error("expected ',' or ']' after an array item");
      ++pos_;
      skip_whitespace();
      token_offset_ = position();
      if (peek() == ']') syntax_error("a trailing comma in an array");
      return value_token();
    case Expect::first_key:
      if (c == '}') return end_container(true);
      break;
    case Expect::key:
      break;
    case Expect::after_member:
      if (c == '}') return end_container(true);
      if (c != ',') syntax_error("expected ',' or '}' after an object member");
      ++pos_;
      skip_whitespace();
      token_offset_ = position();
      c = peek();
      if (c == '}') syntax_error("a trailing comma in an object");
      break;
  }
  // A key, then its colon.
  if (c != '"') syntax_error("expected a key (a string)");
  read_string();
  keys_.emplace_back(key_bytes_.size(), string_.size());
  key_bytes_ += string_;
  skip_whitespace();
  if (peek() != ':') syntax_error("expected ':' after a key");
  ++pos_;
  expect_ = Expect::value;
  return token_ = Token::key;
}

void JsonReader::skip_value() {
  if (token_ == Token::key) next();
  if (token_ != Token::begin_object && token_ != Token::begin_array) return;
  const std::size_t depth = frames_.size();
  while (frames_.size() >= depth) next();
}

std::optional<std::uint64_t> JsonReader::uint64() const noexcept {
  return token_ == Token::number ? json_uint64(string_) : std::nullopt;
}

std::optional<std::int64_t> JsonReader::int64() const noexcept {
  return token_ == Token::number ? json_int64(string_) : std::nullopt;
}

double JsonReader::floating() const noexcept {
  return token_ == Token::number ? json_double(string_) : 0.0;
}

// ---- JsonValue -------------------------------------------------------------------------

std::optional<std::uint64_t> JsonValue::uint64() const noexcept {
  return kind_ == Kind::number ? json_uint64(text_) : std::nullopt;
}

std::optional<std::int64_t> JsonValue::int64() const noexcept {
  return kind_ == Kind::number ? json_int64(text_) : std::nullopt;
}

double JsonValue::floating() const noexcept {
  return kind_ == Kind::number ? json_double(text_) : 0.0;
}

const JsonValue* JsonValue::find(std::string_view key) const noexcept {
  for (const auto& [name, value] : members_) {
    if (name == key) return &value;
  }
  return nullptr;
}

JsonValue parse_json(std::string_view text, const JsonLimits& limits, std::size_t max_values) {
  using Token = JsonReader::Token;
  JsonReader json(text, limits);
  JsonValue root;
  // The open containers. Each is an element of its parent's vector, which does not grow while
  // the child is open, so these pointers stay valid.
  std::vector<JsonValue*> open;
  std::string key;
  std::size_t count = 0;
  auto place = [&]() -> JsonValue& {
    if (++count > max_values) json.fail(fmt::format("more than {} values", max_values));
    if (open.empty()) return root;
    JsonValue& parent = *open.back();
    if (parent.kind_ == JsonValue::Kind::array) return parent.items_.emplace_back();
    return parent.members_.emplace_back(std::move(key), JsonValue{}).second;
  };
  for (Token t = json.next(); t != Token::end; t = json.next()) {
    switch (t) {
      case Token::key:
        key.assign(json.string());
        break;
      case Token::begin_object:
      case Token::begin_array: {
        JsonValue& v = place();
        v.kind_ = t == Token::begin_object ? JsonValue::Kind::object : JsonValue::Kind::array;
        open.push_back(&v);
        break;
      }
      case Token::end_object:
      case Token::end_array:
        open.pop_back();
        break;
      case Token::string: {
        JsonValue& v = place();
        v.kind_ = JsonValue::Kind::string;
        v.text_.assign(json.string());
        break;
      }
      case Token::number: {
        JsonValue& v = place();
        v.kind_ = JsonValue::Kind::number;
        v.text_.assign(json.number_text());
        break;
      }
      case Token::true_value:
      case Token::false_value: {
        JsonValue& v = place();
        v.kind_ = JsonValue::Kind::boolean;
        v.boolean_ = t == Token::true_value;
        break;
      }
      case Token::null:
        place();
        break;
      case Token::end:
        break;
    }
  }
  return root;
}

bool copy_json_scalar(JsonReader& json, JsonReader::Token token, JsonWriter& out) {
  using Token = JsonReader::Token;
  switch (token) {
    case Token::string:
      out.string(json.string());
      return true;
    case Token::number:
      out.raw(json.number_text());
      return true;
    case Token::true_value:
      out.boolean(true);
      return true;
    case Token::false_value:
      out.boolean(false);
      return true;
    case Token::null:
      out.null();
      return true;
    default:
      return false;
  }
}

std::string compact_json(std::string_view text, const JsonLimits& limits) {
  using Token = JsonReader::Token;
  JsonReader json(text, limits);
  std::string out;
  out.reserve(text.size());
  JsonWriter w(out, 0);
  for (Token t = json.next(); t != Token::end; t = json.next()) {
    switch (t) {
      case Token::begin_object:
        w.begin_object();
        break;
      case Token::end_object:
        w.end_object();
        break;
      case Token::begin_array:
        w.begin_array();
        break;
      case Token::end_array:
        w.end_array();
        break;
      case Token::key:
        w.key(json.string());
        break;
      default:
        copy_json_scalar(json, t, w);  // every other token is a scalar
        break;
    }
  }
  return out;
}

}  // namespace ckptfs
