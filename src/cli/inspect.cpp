// SPDX-License-Identifier: MIT
// The table and JSON printers of `ckptfs inspect`.
#include "inspect.hpp"

#include <ckptfs/describe.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace ckptfs::cli {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// "1.5 MiB" for a byte count.
std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} bytes", n) : fmt::format("{:.1f} {}, {} bytes", v, units[u], n);
}

// Keys and values are printed on one line each: control bytes become escapes.
std::string one_line(std::string_view text, std::size_t max) {
  std::string out;
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  if (out.size() > max) out = out.substr(0, max - 3) + "...";
  return out;
}

}  // namespace

void print_inspect_table(const Checkpoint& c, std::FILE* out) {
  std::size_t key_width = 3;
  for (const auto& e : c.entries) key_width = std::max(key_width, std::min<std::size_t>(e.key.size(), 60));
  fmt::print(out, "{:<{}}  {:<6}  {:<10}  {:<16}  {:>12}  {:>12}\n", "KEY", key_width, "KIND",
             "DTYPE", "SHAPE", "BYTES", "OFFSET");
  std::uint64_t tensor_bytes = 0;
  std::size_t tensors = 0, values = 0, broken = 0;
  for (const auto& e : c.entries) {
    std::string key = one_line(e.key, 200);
    if (e.kind == Entry::Kind::value) {
      ++values;
      fmt::print(out, "{:<{}}  {:<6}  {}\n", key, key_width, "value", one_line(e.value_json, 60));
      continue;
    }
    ++tensors;
    const Tensor& t = c.tensors[e.tensor];
    auto offset = c.file_offset(t);
    std::string where = offset ? std::to_string(*offset) : "-";
    if (!t.broken.empty()) {
      ++broken;
      where = "broken: " + t.broken;
    } else {
      tensor_bytes += t.nbytes();
      if (!t.contiguous()) where = "strided";
    }
    fmt::print(out, "{:<{}}  {:<6}  {:<10}  {:<16}  {:>12}  {:>12}\n", key, key_width, "tensor",
               info(t.dtype).name, shape_text(t.shape), t.broken.empty() ? t.nbytes() : 0, where);
  }
  fmt::print(out, "{} tensors ({}), {} values, {} storages, format {}, byteorder {}{}\n",
             tensors, human_bytes(tensor_bytes), values, c.storages.size(),
             format_name(c.format), byteorder_name(c),
             broken ? fmt::format(", {} broken", broken) : std::string());
}

void print_inspect_json(const Checkpoint& c, std::FILE* out) {
  std::string text = checkpoint_json(c);
  std::fwrite(text.data(), 1, text.size(), out);
}

}  // namespace ckptfs::cli
