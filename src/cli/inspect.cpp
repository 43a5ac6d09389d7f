// SPDX-License-Identifier: MIT
// The table and JSON printers of `ckptfs inspect`.
#include "inspect.hpp"

#include <ckptfs/base/numbers.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/view/describe.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace ckptfs::cli {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// "1.5 MiB" for a byte count.
std::string human_bytes(uint128 n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} bytes", decimal(n))
                : fmt::format("{:.1f} {}, {} bytes", v, units[u], decimal(n));
}

}  // namespace

void print_inspect_table(const Model& c, std::FILE* out) {
  std::size_t key_width = 3;
  for (const auto& e : c.entries)
    key_width = std::max(key_width, std::min<std::size_t>(e.key.size(), 60));
  // A sharded set's offsets are in each tensor's own file: a last column names it.
  const bool sources_column = c.sources.size() > 1;
  fmt::print(out, "{:<{}}  {:<6}  {:<10}  {:<16}  {:>12}  {:>12}{}\n", "KEY", key_width, "KIND",
             "DTYPE", "SHAPE", "BYTES", "OFFSET", sources_column ? "  SOURCE" : "");
  uint128 tensor_bytes = 0;
  std::size_t tensors = 0, values = 0, broken = 0;
  for (const auto& e : c.entries) {
    std::string key = escape_for_terminal(e.key, 200);
    if (e.kind == Entry::Kind::value) {
      ++values;
      fmt::print(out, "{:<{}}  {:<6}  {}\n", key, key_width, "value",
                 escape_for_terminal(e.value_json, 60));
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
      tensor_bytes += t.stored_nbytes();
      if (t.assembly) {
        const std::size_t pieces = c.assemblies[*t.assembly].size();
        where = fmt::format("{} piece{}", pieces, pieces == 1 ? "" : "s");
      } else if (!t.contiguous()) {
        where = "strided";
      } else if (t.stored_dtype) {
        where = fmt::format("from {}", info(*t.stored_dtype).name);  // converted on read
      }
    }
    std::string source;
    if (sources_column && t.storage) {
      source = "  " + escape_for_terminal(c.sources[c.storages[*t.storage].source], 200);
    }
    // A block-quantized tensor as the file holds it: its format and its blocks' bytes.
    const bool blocked = t.blocks != BlockFormat::none;
    fmt::print(out, "{:<{}}  {:<6}  {:<10}  {:<16}  {:>12}  {:>12}{}\n", key, key_width, "tensor",
               blocked ? info(t.blocks).name : info(t.dtype).name, shape_text(t.shape),
               t.broken.empty() ? t.stored_nbytes() : 0, where, source);
  }
  fmt::print(out, "{} tensors ({}), {} values, {} storages, format {}, byteorder {}{}{}{}\n",
             tensors, human_bytes(tensor_bytes), values, c.storages.size(), format_name(c.format),
             c.byteorder(),
             sources_column ? fmt::format(", {} files", c.sources.size()) : std::string(),
             broken ? fmt::format(", {} broken", broken) : std::string(),
             // A GGUF's key-value pairs (a vocabulary file has nothing else): --json shows them.
             c.json_metadata.empty() ? std::string()
                                     : fmt::format(", {} metadata keys", c.json_metadata.size()));
}

void print_inspect_json(const Model& c, std::FILE* out) {
  std::string text = model_json(c);
  std::fwrite(text.data(), 1, text.size(), out);
}

}  // namespace ckptfs::cli
