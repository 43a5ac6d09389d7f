// SPDX-License-Identifier: MIT
// plain_value(): value_json()'s text read back, token by token, with an explicit stack.
#include <ckptfs/format/pickle/plain_value.hpp>

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/format/pickle/value_json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ckptfs {
namespace {

using pickle::Value;

// Little-endian two's complement bytes of a decimal integer ("-123"), as pickle::Value's
// big_integer takes them (the writer drops the bytes it does not need).
std::string twos_complement_le(std::string_view text) {
  const bool negative = text.starts_with('-');
  std::vector<std::uint32_t> limbs;  // the magnitude, least significant first
  for (char c : text.substr(negative ? 1 : 0)) {
    std::uint64_t carry = static_cast<std::uint64_t>(c - '0');
    for (auto& limb : limbs) {
      const std::uint64_t v = std::uint64_t{limb} * 10 + carry;
      limb = static_cast<std::uint32_t>(v);
      carry = v >> 32;
    }
    if (carry != 0) limbs.push_back(static_cast<std::uint32_t>(carry));
  }
  std::string out;
  for (const std::uint32_t limb : limbs) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((limb >> (8 * i)) & 0xff);
  }
  out += '\0';  // a sign byte: the magnitude's top bit is clear
  if (negative) {
    unsigned carry = 1;
    for (char& b : out) {
      const unsigned v = static_cast<unsigned char>(~static_cast<unsigned char>(b)) + carry;
      b = static_cast<char>(v & 0xff);
      carry = v >> 8;
    }
  }
  return out;
}

std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;  // value_json() writes lower case only
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

// The scalar of an object value_json() writes for what JSON has no form of: {"__float__": "nan"}
// or {"__bytes__": "<hex>"}, with `marker` its key, read up to its '}'. nullopt when it is not
// exactly that.
std::optional<Value> marked_scalar(JsonReader& json, std::string_view marker) {
  if (json.next() != JsonReader::Token::string) return std::nullopt;
  std::optional<Value> out;
  if (marker == "__float__") {
    const std::string_view s = json.string();
    if (s == "nan") out = Value::real(std::numeric_limits<double>::quiet_NaN());
    if (s == "inf") out = Value::real(std::numeric_limits<double>::infinity());
    if (s == "-inf") out = Value::real(-std::numeric_limits<double>::infinity());
  } else if (auto bytes = from_hex(json.string())) {
    out = Value::bytes_value(std::move(*bytes));
  }
  if (json.next() != JsonReader::Token::end_object) return std::nullopt;
  return out;
}

Value number(const JsonReader& json) {
  if (auto n = json.int64()) return Value::integer(*n);
  const std::string_view text = json.number_text();
  if (text.find_first_of(".eE") == std::string_view::npos) {
    return Value::big_integer(twos_complement_le(text));
  }
  return Value::real(json.floating());
}

}  // namespace

std::optional<pickle::Value> plain_value(std::string_view value_json) {
  using Token = JsonReader::Token;
  JsonLimits limits;
  limits.max_depth = max_value_depth + 1;  // value_json()'s containers, and its markers in them
  limits.max_number_chars = 10'000;        // value_json() writes ints of up to 4096 bytes
  limits.surrogate_escapes = true;
  struct Frame {
    Value value;
    std::string key;  // an object's current key
  };
  std::vector<Frame> open;
  std::optional<Value> result;
  auto complete = [&](Value v) {
    if (open.empty()) {
      result = std::move(v);
    } else if (open.back().value.kind == Value::Kind::dict) {
      open.back().value.entries.push_back({Value::str(std::move(open.back().key)), std::move(v)});
    } else {
      open.back().value.items.push_back(std::move(v));
    }
  };
  try {
    JsonReader json(value_json, limits);
    for (Token t = json.next(); t != Token::end; t = json.next()) {
      switch (t) {
        case Token::begin_array:
          open.push_back({Value::list({}), {}});
          break;
        case Token::begin_object: {
          const Token first = json.next();
          if (first == Token::end_object) {
            complete(Value::dict({}));
            break;
          }
          const std::string key(json.string());  // first == Token::key
          if (key == "__float__" || key == "__bytes__") {
            auto scalar = marked_scalar(json, key);
            if (!scalar) return std::nullopt;
            complete(std::move(*scalar));
          } else if (key == "__class__" || key == "__global__" || key == "__persistent_id__" ||
                     key == "__recursion__" || key == "__truncated__") {
            return std::nullopt;  // described, not written whole
          } else {
            open.push_back({Value::dict({}), key});
          }
          break;
        }
        case Token::key:
          open.back().key = json.string();
          break;
        case Token::end_array:
        case Token::end_object: {
          Value done = std::move(open.back().value);
          open.pop_back();
          complete(std::move(done));
          break;
        }
        case Token::string:
          complete(Value::str(std::string(json.string())));
          break;
        case Token::number:
          complete(number(json));
          break;
        case Token::true_value:
          complete(Value::boolean(true));
          break;
        case Token::false_value:
          complete(Value::boolean(false));
          break;
        case Token::null:
          complete(Value::none_value());
          break;
        case Token::end:
          break;
      }
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  return result;
}

}  // namespace ckptfs
