// SPDX-License-Identifier: MIT
// The table and JSON printers of `ckptfs inspect`, and its --verify.
#include "inspect.hpp"

#include "messages.hpp"

#include <ckptfs/base/numbers.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/format/zip/zip_verify.hpp>
#include <ckptfs/source/inflated_source.hpp>
#include <ckptfs/source/record_checks.hpp>
#include <ckptfs/view/describe.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

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

namespace {

// The records of the model's storages in source `index` (a file that is no zip as a whole: a DCP
// .distcp file of torch.save zips one after the other), each checked whole through the source.
ZipVerification verify_storage_records(const Model& model, const ByteSource& source,
                                       std::uint32_t index) {
  ZipVerification v;
  for (const Storage& s : model.storages) {
    if (s.source != index || !s.record_check) continue;
    ++v.records;
    ++v.checked;
    v.bytes += s.record_check->size;
    try {
      source.verify(data_offset(s), s.nbytes);
    } catch (const Error& e) {
      std::string what = e.what();
      if (what.ends_with(fmt::format(": {}", corrupt_file_advice))) {
        what.resize(what.size() - corrupt_file_advice.size() - 2);
      }
      if (std::find(v.corrupt.begin(), v.corrupt.end(), what) == v.corrupt.end()) {
        v.corrupt.push_back(what);
      }
    }
  }
  return v;
}

}  // namespace

int verify_checkpoint(const OpenedModel& opened, std::FILE* out) {
  // torch writes a CRC of 0 when told not to compute them; numpy's zips have real ones only.
  const bool zero_is_none = opened.model().format != Format::npz;
  std::size_t corrupt = 0;
  for (std::uint32_t i = 0; i < opened.sources().size(); ++i) {
    const ByteSource& source = *opened.sources()[i];
    // An .npz's inflated members: checked as the .npz's deflated records.
    if (dynamic_cast<const InflatedSource*>(&source)) continue;
    const std::string name = escape_for_terminal(source.name(), 200);
    std::optional<ZipVerification> v;
    std::string what = "records";
    if (looks_like_zip(source)) {
      try {
        v = verify_zip_records(source, zero_is_none);
      } catch (const Error& e) {
        if (e.code() != ExitCode::bad_zip) throw;  // no zip as a whole: its storages' records
      }
    }
    if (!v) {
      v = verify_storage_records(opened.model(), source, i);
      what = "records of its storages";
    }
    if (v->records == 0) {
      fmt::print(out, "{}: it records no CRC-32 to check\n", name);
      continue;
    }
    // Each line names its record with quote(): escaped already.
    for (const std::string& why : v->unchecked) fmt::print(out, "{}: {}: not checked\n", name, why);
    for (const std::string& why : v->corrupt) {
      ++corrupt;
      fmt::print(stderr, "ckptfs: {}: {}: {}\n", name, why, corrupt_file_advice);
    }
    fmt::print(out, "{}: {} of {} {} checked ({}): {}\n", name, v->checked, v->records, what,
               human_bytes(v->bytes),
               v->corrupt.empty() ? std::string("every CRC-32 matches")
                                  : fmt::format("{} corrupt", v->corrupt.size()));
  }
  return corrupt == 0 ? 0 : static_cast<int>(ExitCode::bad_checkpoint);
}

}  // namespace ckptfs::cli
