// SPDX-License-Identifier: MIT
// PlainValue's constructors.
#include <ckptfs/model/plain_value.hpp>

#include <utility>

namespace ckptfs {
namespace {

PlainValue of_kind(PlainValue::Kind kind) {
  PlainValue v;
  v.kind = kind;
  return v;
}

PlainValue with_text(PlainValue::Kind kind, std::string text) {
  PlainValue v = of_kind(kind);
  v.text = std::move(text);
  return v;
}

PlainValue with_items(PlainValue::Kind kind, std::vector<PlainValue> items) {
  PlainValue v = of_kind(kind);
  v.items = std::move(items);
  return v;
}

PlainValue with_entries(PlainValue::Kind kind, std::vector<PlainDictEntry> entries) {
  PlainValue v = of_kind(kind);
  v.entries = std::move(entries);
  return v;
}

}  // namespace

PlainValue PlainValue::boolean(bool b) {
  PlainValue v = of_kind(Kind::boolean);
  v.flag = b;
  return v;
}
PlainValue PlainValue::integer(std::int64_t n) {
  PlainValue v = of_kind(Kind::integer);
  v.number = n;
  return v;
}
PlainValue PlainValue::big_integer(std::string twos_complement_le) {
  return with_text(Kind::big_integer, std::move(twos_complement_le));
}
PlainValue PlainValue::real(double x) {
  PlainValue v = of_kind(Kind::real);
  v.real_value = x;
  return v;
}
PlainValue PlainValue::str(std::string utf8) { return with_text(Kind::string, std::move(utf8)); }
PlainValue PlainValue::bytes_value(std::string data) {
  return with_text(Kind::bytes, std::move(data));
}
PlainValue PlainValue::bytearray_value(std::string data) {
  return with_text(Kind::bytearray, std::move(data));
}
PlainValue PlainValue::list(std::vector<PlainValue> items) {
  return with_items(Kind::list, std::move(items));
}
PlainValue PlainValue::tuple(std::vector<PlainValue> items) {
  return with_items(Kind::tuple, std::move(items));
}
PlainValue PlainValue::set(std::vector<PlainValue> items) {
  return with_items(Kind::set, std::move(items));
}
PlainValue PlainValue::frozenset(std::vector<PlainValue> items) {
  return with_items(Kind::frozenset, std::move(items));
}
PlainValue PlainValue::dict(std::vector<PlainDictEntry> entries) {
  return with_entries(Kind::dict, std::move(entries));
}
PlainValue PlainValue::ordered_dict(std::vector<PlainDictEntry> entries) {
  return with_entries(Kind::ordered_dict, std::move(entries));
}

PlainValue PlainValue::call(std::string_view module, std::string_view name, PlainValue args) {
  PlainValue v = of_kind(Kind::call);
  v.text.append(module).append("\n").append(name);
  v.items.push_back(std::move(args));
  return v;
}

PlainValue PlainValue::call(std::string_view module, std::string_view name, PlainValue args,
                            PlainValue state) {
  PlainValue v = call(module, name, std::move(args));
  v.items.push_back(std::move(state));
  v.flag = true;
  return v;
}

std::string_view PlainValue::call_module() const {
  return std::string_view(text).substr(0, text.find('\n'));
}

std::string_view PlainValue::call_name() const {
  const auto newline = text.find('\n');
  return newline == std::string::npos ? std::string_view()
                                      : std::string_view(text).substr(newline + 1);
}

bool is_plain_call(std::string_view module, std::string_view name) {
  return (module == "torch" && name == "Size") || (module == "numpy" && name == "dtype") ||
         ((module == "numpy.core.multiarray" || module == "numpy._core.multiarray") &&
          name == "scalar");
}

}  // namespace ckptfs
