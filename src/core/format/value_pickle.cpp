// SPDX-License-Identifier: MIT
// plain_value(): value_json's text read token by token into a pickle::Value tree, without
// recursion, the forms value_json() gives bytes and odd floats turned back into them.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/format/value_pickle.hpp>

#include <fmt/format.h>

#include <limits>
#include <vector>

namespace ckptfs {
namespace {

using pickle::Value;
using Token = JsonReader::Token;

// Values one plain value may hold at most (every item, key and scalar counts): value_json()
// cuts its text at 1 MiB, a split directory's value.json is read up to a few MiB.
constexpr std::size_t max_values = 4'000'000;

// The little-endian two's complement bytes of a decimal integer's text ("-12345...").
std::string twos_complement(std::string_view text) {
  const bool negative = text.starts_with('-');
  if (negative) text.remove_prefix(1);
  std::vector<unsigned char> magnitude;  // little-endian
  for (char digit : text) {
    unsigned carry = static_cast<unsigned>(digit - '0');
    for (unsigned char& byte : magnitude) {
      const unsigned v = byte * 10u + carry;
      byte = static_cast<unsigned char>(v & 0xff);
      carry = v >> 8;
    }
    while (carry) {
      magnitude.push_back(static_cast<unsigned char>(carry & 0xff));
      carry >>= 8;
    }
  }
  magnitude.push_back(0);  // room for the sign bit
  if (negative) {
    unsigned carry = 1;
    for (unsigned char& byte : magnitude) {
      const unsigned v = static_cast<unsigned char>(~byte) + carry;
      byte = static_cast<unsigned char>(v & 0xff);
      carry = v >> 8;
    }
  }
  return {magnitude.begin(), magnitude.end()};
}

Value number_value(const JsonReader& json) {
  const std::string_view text = json.number_text();
  if (text.find_first_of(".eE") != std::string_view::npos) return Value::real(json.floating());
  if (auto n = json.int64()) return Value::integer(*n);
  return Value::big_integer(twos_complement(text));
}

std::optional<std::string> hex_bytes(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
  }
  return out;
}

std::optional<double> special_float(std::string_view text) {
  if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (text == "inf") return std::numeric_limits<double>::infinity();
  if (text == "-inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

// A dict of one str member that stands for bytes or a float ({"__bytes__": "ff"}), turned into
// what it stands for; other dicts stay as they are.
void undo_special_form(Value& v) {
  if (v.kind != Value::Kind::dict || v.entries.size() != 1) return;
  const auto& [key, item] = v.entries[0];
  if (item.kind != Value::Kind::string) return;
  if (key.text == "__bytes__") {
    if (auto bytes = hex_bytes(item.text)) v = Value::bytes_value(std::move(*bytes));
  } else if (key.text == "__float__") {
    if (auto x = special_float(item.text)) v = Value::real(*x);
  }
}

}  // namespace

std::optional<pickle::Value> plain_value(std::string_view value_json, std::string& why_not) {
  JsonReader json(value_json, JsonLimits{max_plain_value_depth, JsonLimits{}.max_string_bytes,
                                         JsonLimits{}.max_number_chars});
  Value root;
  // The open containers: each is the last item of its parent, which does not grow while it is
  // open, so these pointers stay valid.
  std::vector<Value*> open;
  std::size_t count = 0;
  auto place = [&]() -> Value& {
    if (++count > max_values) {
      throw Error(ExitCode::unsupported, fmt::format("a value of more than {} items", max_values));
    }
    if (open.empty()) return root;
    Value& parent = *open.back();
    if (parent.kind == Value::Kind::list) return parent.items.emplace_back();
    return parent.entries.back().second;  // the key was placed first
  };
  for (Token t = json.next(); t != Token::end; t = json.next()) {
    switch (t) {
      case Token::begin_object:
      case Token::begin_array: {
        Value& v = place();
        v.kind = t == Token::begin_object ? Value::Kind::dict : Value::Kind::list;
        open.push_back(&v);
        break;
      }
      case Token::end_object:
        undo_special_form(*open.back());
        open.pop_back();
        break;
      case Token::end_array: open.pop_back(); break;
      case Token::key: {
        Value& dict = *open.back();
        const std::string_view key = json.string();
        if (dict.entries.empty()) {
          // value_json()'s forms for what it did not evaluate always start with their marker.
          for (const char* marker : {"__class__", "__global__", "__persistent_id__",
                                     "__truncated__", "__recursion__"}) {
            if (key != marker) continue;
            why_not = std::string_view(marker) == "__class__"
                          ? "an object ckptfs never builds (a call or an instance)"
                      : std::string_view(marker) == "__global__"
                          ? "a reference to a class or function"
                      : std::string_view(marker) == "__truncated__"
                          ? "a value cut at ckptfs's limits"
                          : "not a plain value";
            if (std::string_view(marker) == "__class__" && json.next() == Token::string) {
              why_not = fmt::format("an instance of {}, which ckptfs never builds",
                                    std::string(json.string()));
            }
            return std::nullopt;
          }
        }
        if (++count > max_values) {
          throw Error(ExitCode::unsupported,
                      fmt::format("a value of more than {} items", max_values));
        }
        dict.entries.emplace_back(Value::str(std::string(key)), Value{});
        break;
      }
      case Token::string: place() = Value::str(std::string(json.string())); break;
      case Token::number: place() = number_value(json); break;
      case Token::true_value: place() = Value::boolean(true); break;
      case Token::false_value: place() = Value::boolean(false); break;
      case Token::null: place() = Value::none_value(); break;
      case Token::end: break;
    }
  }
  return root;
}

}  // namespace ckptfs
