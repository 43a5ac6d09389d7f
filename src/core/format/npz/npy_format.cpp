// SPDX-License-Identifier: MIT
// read_npy_header(): the magic, the version, and the header dict parsed as the small Python
// literal numpy writes, one token at a time.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/npz/npy_format.hpp>

#include <fmt/format.h>

#include <charconv>
#include <limits>

namespace ckptfs {
namespace {

constexpr std::string_view magic("\x93NUMPY", 6);

[[noreturn]] void fail(const std::string& what) {
  throw Error(ExitCode::bad_checkpoint, ".npy header: " + what);
}

// The dict, read left to right.
class DictParser {
 public:
  explicit DictParser(std::string_view text) : text_(text) {}

  void space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t')) ++at_;
  }
  bool take(char c) {
    space();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* where) {
    if (!take(c)) fail(fmt::format("expected '{}' {} (at byte {} of the dict)", c, where, at_));
  }
  bool at_end() {
    space();
    return at_ == text_.size();
  }
  char peek() {
    space();
    return at_ < text_.size() ? text_[at_] : '\0';
  }

  // A quoted string without escapes (numpy's keys and simple descrs have none).
  std::string_view string() {
    space();
    if (at_ >= text_.size() || (text_[at_] != '\'' && text_[at_] != '"')) {
      fail(fmt::format("expected a string (at byte {} of the dict)", at_));
    }
    const char quote_char = text_[at_++];
    const std::size_t begin = at_;
    while (at_ < text_.size() && text_[at_] != quote_char) {
      if (text_[at_] == '\\') fail("a string with an escape");
      ++at_;
    }
    if (at_ >= text_.size()) fail("a string without its closing quote");
    return text_.substr(begin, at_++ - begin);
  }

  // A structured dtype's list, skipped whole: brackets and parentheses counted (not recursed
  // into), strings (with their escapes) jumped over. Returns its text.
  std::string_view skip_list() {
    space();
    const std::size_t begin = at_;
    std::size_t depth = 0;
    do {
      if (at_ >= text_.size()) fail("a structured dtype without its closing bracket");
      const char c = text_[at_++];
      if (c == '[' || c == '(') {
        ++depth;
      } else if (c == ']' || c == ')') {
        --depth;
      } else if (c == '\'' || c == '"') {
        while (at_ < text_.size() && text_[at_] != c) at_ += text_[at_] == '\\' ? 2 : 1;
        ++at_;
      }
    } while (depth != 0);
    return text_.substr(begin, at_ - begin);
  }

  std::string_view word() {
    space();
    const std::size_t begin = at_;
    while (at_ < text_.size() &&
           ((text_[at_] >= 'A' && text_[at_] <= 'Z') || (text_[at_] >= 'a' && text_[at_] <= 'z'))) {
      ++at_;
    }
    return text_.substr(begin, at_ - begin);
  }

  std::uint64_t integer() {
    space();
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(text_.data() + at_, text_.data() + text_.size(), v);
    if (ec != std::errc()) fail(fmt::format("expected a dimension (at byte {} of the dict)", at_));
    at_ = static_cast<std::size_t>(end - text_.data());
    if (at_ < text_.size() && text_[at_] == 'L') ++at_;  // Python 2's long
    return v;
  }

 private:
  std::string_view text_;
  std::size_t at_ = 0;
};

void set_dtype(NpyHeader& h) {
  std::string_view d = h.descr;
  char order = '|';
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) {
    order = d[0];
    d.remove_prefix(1);
  }
  struct Kind {
    std::string_view code;
    DType dtype;
  };
  constexpr Kind kinds[] = {
      {"b1", DType::boolean},   {"i1", DType::int8},       {"i2", DType::int16},
      {"i4", DType::int32},     {"i8", DType::int64},      {"u1", DType::uint8},
      {"u2", DType::uint16},    {"u4", DType::uint32},     {"u8", DType::uint64},
      {"f2", DType::float16},   {"f4", DType::float32},    {"f8", DType::float64},
      {"c8", DType::complex64}, {"c16", DType::complex128}};
  for (const Kind& k : kinds) {
    if (d == k.code) {
      h.dtype = k.dtype;
      h.big_endian = order == '>' && info(k.dtype).element_size > 1;
      return;
    }
  }
  if (d == "O") {
    h.unsupported = "an object array (pickled Python objects), which ckptfs never loads";
  } else if (!d.empty() && (d[0] == 'M' || d[0] == 'm')) {
    h.unsupported = fmt::format("a datetime or timedelta array (dtype {})", quote(h.descr, 40));
  } else {
    h.unsupported = fmt::format("dtype {}, which torch has no dtype for", quote(h.descr, 40));
  }
}

}  // namespace

bool is_npy(std::string_view bytes) noexcept { return bytes.starts_with(magic); }

NpyHeader read_npy_header(std::string_view bytes, std::size_t max_dims) {
  if (!is_npy(bytes)) fail("no .npy magic (\\x93NUMPY)");
  if (bytes.size() < 10) fail("cut short");
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    fail(fmt::format("version {}.{}, which numpy does not write (1.0 to 3.0)", major, minor));
  }
  std::uint64_t length = 0;
  std::size_t prefix = 10;
  if (major == 1) {
    length = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  } else {
    if (bytes.size() < 12) fail("cut short");
    prefix = 12;
    for (int i = 3; i >= 0; --i) length = length << 8 | static_cast<unsigned char>(bytes[8 + i]);
  }
  if (length > max_npy_header_bytes) {
    fail(fmt::format("a dict of {} bytes, more than ckptfs reads ({})", length,
                     max_npy_header_bytes));
  }
  if (length > bytes.size() - prefix) {
    fail(fmt::format("a dict of {} bytes, but the member has {} after the magic", length,
                     bytes.size() - prefix));
  }
  NpyHeader h;
  h.size = prefix + length;
  std::string_view dict = bytes.substr(prefix, length);
  // The dict, then spaces and a newline (and, in files of old numpy versions, NULs).
  while (!dict.empty() && (dict.back() == '\n' || dict.back() == ' ' || dict.back() == '\0')) {
    dict.remove_suffix(1);
  }
  DictParser p(dict);
  p.expect('{', "to open the dict");
  bool descr = false, fortran = false, shape = false;
  while (!p.take('}')) {
    const std::string_view key = p.string();
    p.expect(':', "after a key");
    if (key == "descr" && !descr) {
      descr = true;
      if (p.peek() == '[') {
        h.descr = std::string(p.skip_list());
        h.unsupported = "a structured dtype, which torch has no dtype for";
      } else {
        h.descr = std::string(p.string());
        set_dtype(h);
      }
    } else if (key == "fortran_order" && !fortran) {
      fortran = true;
      const std::string_view w = p.word();
      if (w != "True" && w != "False") fail("fortran_order is neither True nor False");
      h.fortran_order = w == "True";
    } else if (key == "shape" && !shape) {
      shape = true;
      p.expect('(', "to open the shape");
      while (!p.take(')')) {
        if (h.shape.size() == max_dims) fail(fmt::format("more than {} dimensions", max_dims));
        const std::uint64_t n = p.integer();
        if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
          fail(fmt::format("a dimension of {}", n));
        }
        h.shape.push_back(static_cast<std::int64_t>(n));
        if (!p.take(',')) {
          p.expect(')', "to close the shape");
          break;
        }
      }
    } else {
      fail(fmt::format("key {} (numpy writes descr, fortran_order and shape, once each)",
                       quote(key, 40)));
    }
    if (!p.take(',')) {
      p.expect('}', "to close the dict");
      break;
    }
  }
  if (!p.at_end()) fail("bytes after the dict");
  if (!descr || !fortran || !shape) fail("descr, fortran_order or shape missing");
  return h;
}

}  // namespace ckptfs
