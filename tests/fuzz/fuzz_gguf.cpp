// SPDX-License-Identifier: MIT
// Fuzz target: GGUF files over arbitrary bytes. Beyond "no crash" and bounded memory and time:
// a refusal is bad_checkpoint or unsupported; a file read_gguf() accepts has every tensor's
// bytes inside the file, none overlapping, each storage exactly its tensor's stored bytes;
// every metadata value is strict JSON; the tree serves each tensor's data as exactly the file's
// bytes at its offset (the size and offset its meta.json says), and its values (dequantized from
// fuzzed blocks) at the size the tree gives tensor.npy; index.json and inspect's table and JSON
// are made. Then -o names=hf of it: refused only as bad_checkpoint; every tensor it keeps or
// derives served (rows, transposes, w - 1 of fuzzed values) at the size it says, whatever the
// metadata's head counts; index.json and config.json made.
#include "fuzz_check.hpp"

#include "../../src/cli/inspect.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/format/gguf/gguf_hf.hpp>
#include <ckptfs/format/gguf/gguf_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace ckptfs;

std::string read_all(const Tree& tree, Tree::Ino ino, const ByteSource& source,
                     std::size_t length) {
  const ByteSource* sources[] = {&source};
  ReadBuffer buffer;
  tree.read(ino, 0, length, sources, buffer);
  std::string got;
  for (const ReadPiece& p : buffer.pieces()) {
    got +=
        p.memory ? std::string(p.memory, p.length) : source.read_string(p.source_offset, p.length);
  }
  return got;
}

// -o names=hf of a model read_gguf() accepted.
void check_names_hf(Model m, const MemorySource& source) {
  try {
    name_gguf_as_transformers(m);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint);
    return;
  }
  const ByteSource* sources[] = {&source};
  constexpr std::size_t max_read = 1 << 16;
  for (std::size_t i = 0; i < m.entries.size() && i < 32; ++i) {
    const Tensor& t = m.tensors[m.entries[i].tensor];
    const ServedTensor served = serve(m, t);
    if (served.way == ServedTensor::Way::none) continue;
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(served.nbytes, max_read));
    ReadBuffer buffer;
    read_served(m, t, served, served.nbytes - n, n, sources, buffer);
    FUZZ_CHECK(buffer.size() == n);
  }
  const std::size_t files = m.files.size();
  Tree tree(std::move(m), {});
  read_all(tree, tree.lookup(Tree::views_ino, "index.json"), source, max_read);
  if (files != 0) {
    // Python's JSON (NaN and Infinity for what a file's floats may hold): made, not empty.
    FUZZ_CHECK(
        !read_all(tree, tree.lookup(Tree::views_ino, "config.json"), source, 1 << 22).empty());
  }
}

void check_gguf(const MemorySource& source) {
  GgufLimits limits;
  limits.max_tensors = 1 << 14;
  limits.max_metadata_json_bytes = 1 << 20;
  Model m;
  try {
    m = read_gguf(source, "fuzz.gguf", limits);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint || e.code() == ExitCode::unsupported);
    return;
  }
  FUZZ_CHECK(m.entries.size() == m.tensors.size());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const Tensor& t : m.tensors) {
    if (!t.broken.empty()) {
      FUZZ_CHECK(!t.storage);
      continue;
    }
    FUZZ_CHECK(t.storage && t.contiguous());
    const Storage& s = m.storages[*t.storage];
    FUZZ_CHECK(source.contains(s.file_offset, s.nbytes));
    FUZZ_CHECK(s.nbytes == t.stored_nbytes());
    FUZZ_CHECK(t.nbytes() <= max_tensor_bytes);
    FUZZ_CHECK(m.file_offset(t) == s.file_offset);
    if (s.nbytes != 0) ranges.emplace_back(s.file_offset, s.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    FUZZ_CHECK(ranges[i - 1].first + ranges[i - 1].second <= ranges[i].first);
  }
  JsonLimits json_limits;
  json_limits.max_depth = 64;
  json_limits.surrogate_escapes = true;  // a string that is not UTF-8: its bytes as \udcXX
  for (const Model::JsonMetadata& kv : m.json_metadata) {
    parse_json(kv.value_json, json_limits, 1 << 22);  // throws (a crash here) if not JSON
    FUZZ_CHECK(kv.type.starts_with("ARRAY[") == kv.value_json.starts_with("["));
  }
  parse_json(model_json(m), json_limits, 1 << 24);
  std::FILE* null = std::fopen("/dev/null", "w");
  if (null) {
    cli::print_inspect_table(m, null);
    std::fclose(null);
  }

  const Model kept = m;
  check_names_hf(kept, source);
  Tree tree(std::move(m), {});
  constexpr std::size_t max_read = 1 << 16;
  for (std::size_t i = 0; i < kept.entries.size() && i < 32; ++i) {
    const Tensor& t = kept.tensors[kept.entries[i].tensor];
    const Tree::Ino dir = tree.lookup(Tree::root_ino, tree.entry_name(i));
    FUZZ_CHECK(dir != 0);
    if (!t.broken.empty()) continue;
    const Tree::Ino data = tree.lookup(dir, "data");
    FUZZ_CHECK(data != 0);
    const Storage& s = kept.storages[*t.storage];
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(s.nbytes, max_read));
    FUZZ_CHECK(read_all(tree, data, source, max_read) == source.read_string(s.file_offset, n));
    // meta.json says data's size and offset, for blocks as for plain values.
    const std::string meta = read_all(tree, tree.lookup(dir, "meta.json"), source, 1 << 20);
    FUZZ_CHECK(meta.find(fmt::format("\"nbytes\": {},", s.nbytes)) < meta.find("\"ggml\""));
    if (s.nbytes != 0) {
      FUZZ_CHECK(meta.find(fmt::format("\"file_offset\": {},", s.file_offset)) <
                 meta.find("\"ggml\""));
    }
    const Tree::Ino npy = tree.lookup(dir, "tensor.npy");
    FUZZ_CHECK((npy != 0) == values_not_served(kept, t).empty());
    if (npy != 0) {
      // The values (dequantized from whatever the blocks hold), as long as the file says.
      struct stat st {};
      FUZZ_CHECK(tree.stat(npy, st));
      const std::string values = read_all(tree, npy, source, max_read);
      FUZZ_CHECK(values.size() == std::min<std::uint64_t>(st.st_size, max_read));
    }
  }
  read_all(tree, tree.lookup(Tree::views_ino, "index.json"), source, max_read);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  MemorySource source{std::string(bytes), "fuzz"};
  check_gguf(source);
  // The split set names' parser, on the input as a name.
  if (const auto split = gguf_split_name(bytes.substr(0, 300))) {
    FUZZ_CHECK(split->number >= 1 && split->number <= split->count);
    FUZZ_CHECK(gguf_split_file(split->prefix, split->number, split->count) == bytes.substr(0, 300));
  }
  return 0;
}
