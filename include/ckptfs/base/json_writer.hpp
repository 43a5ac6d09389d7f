// SPDX-License-Identifier: MIT
// A small streaming JSON writer for the files ckptfs generates (meta.json, index.json, inspect):
// fixed schemas written straight into a string, thousands of times at mount, without building a
// document tree first.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

// Appends JSON to `out`. Containers nest with begin_*/end_*; inside an object, key() precedes
// each value. Objects and arrays are indented by `indent` spaces per level (0: compact), except
// arrays of numbers, which stay on one line ("shape": [4, 3]).
class JsonWriter {
 public:
  explicit JsonWriter(std::string& out, int indent = 2) : out_(out), indent_(indent) {}

  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);

  JsonWriter& string(std::string_view text);  // see append_json_string()
  JsonWriter& number(std::int64_t value);
  JsonWriter& number(std::uint64_t value);
  JsonWriter& boolean(bool value);
  JsonWriter& null();
  JsonWriter& raw(std::string_view json);                     // an already serialized value
  JsonWriter& numbers(std::span<const std::int64_t> values);  // on one line
  JsonWriter& numbers(const std::vector<std::int64_t>& values) {
    return numbers(std::span<const std::int64_t>(values));
  }

 private:
  void before_value();
  void newline();

  std::string& out_;
  int indent_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace ckptfs
