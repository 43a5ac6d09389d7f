// SPDX-License-Identifier: MIT
// JsonWriter: commas, indentation and escaping for generated JSON.
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

namespace ckptfs {

void JsonWriter::newline() {
  if (indent_ == 0) return;
  out_ += '\n';
  out_.append(first_.size() * static_cast<std::size_t>(indent_), ' ');
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (first_.empty()) return;
  if (!first_.back()) out_ += ',';
  first_.back() = false;
  newline();
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += '}';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  bool empty = first_.back();
  first_.pop_back();
  if (!empty) newline();
  out_ += ']';
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  before_value();
  append_json_string(out_, name);
  out_ += indent_ ? ": " : ":";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::string(std::string_view text) {
  before_value();
  append_json_string(out_, text);
  return *this;
}

JsonWriter& JsonWriter::number(std::int64_t value) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", value);
  return *this;
}

JsonWriter& JsonWriter::number(std::uint64_t value) {
  before_value();
  fmt::format_to(std::back_inserter(out_), "{}", value);
  return *this;
}

JsonWriter& JsonWriter::boolean(bool value) {
  before_value();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  out_ += "null";
  return *this;
}

JsonWriter& JsonWriter::raw(std::string_view json) {
  before_value();
  out_ += json;
  return *this;
}

JsonWriter& JsonWriter::numbers(std::span<const std::int64_t> values) {
  before_value();
  out_ += '[';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out_ += indent_ ? ", " : ",";
    fmt::format_to(std::back_inserter(out_), "{}", values[i]);
  }
  out_ += ']';
  return *this;
}

}  // namespace ckptfs
