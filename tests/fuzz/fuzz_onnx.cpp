// SPDX-License-Identifier: MIT
// Fuzz target: ONNX models over arbitrary bytes, their external data file "w.bin" a fixed 64
// bytes. Beyond "no crash" and bounded memory and time: a refusal is bad_checkpoint or
// unsupported; a model read_onnx() accepts has every served tensor's bytes inside its source,
// each storage exactly its tensor's bytes, and no external file opened but w.bin (a name that
// leads out is never asked for); the tree serves each tensor's data (decoded typed fields too)
// at the size meta.json says, or refuses it saying why; index.json and inspect's table are made.
#include "fuzz_check.hpp"

#include "../../src/cli/inspect.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/format/onnx/onnx_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/tree.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace ckptfs;

std::uint64_t read_length(const Tree& tree, Tree::Ino ino, Sources sources, std::size_t length) {
  ReadBuffer buffer;
  tree.read(ino, 0, length, sources, buffer);
  std::uint64_t got = 0;
  std::string bytes;
  for (const ReadPiece& p : buffer.pieces()) {
    if (!p.memory) {
      FUZZ_CHECK(p.source < sources.size());
      bytes = sources[p.source]->read_string(p.source_offset, p.length);  // reads decoded ones
    }
    got += p.length;
  }
  return got;
}

void check_onnx(const MemorySource& source) {
  OnnxLimits limits;
  limits.max_tensors = 1 << 12;
  limits.max_names_json_bytes = 1 << 20;
  limits.max_metadata_json_bytes = 1 << 20;
  limits.max_strings_json_bytes = 1 << 20;
  const std::string external(64, '\x3c');
  const OnnxMemberOpener open = [&](const std::string& name) -> std::unique_ptr<ByteSource> {
    FUZZ_CHECK(!name.empty() && name.front() != '/' && name != ".." && !name.starts_with("../") &&
               name.find("/../") == std::string::npos && !name.ends_with("/.."));
    if (name != "w.bin") throw Error(ExitCode::io, "no such file");
    return std::make_unique<MemorySource>(external, name);
  };
  OnnxModel onnx;
  try {
    onnx = read_onnx(source, "fuzz.onnx", open, limits);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint || e.code() == ExitCode::unsupported);
    return;
  }
  Model& m = onnx.model;
  FUZZ_CHECK(m.sources.size() == onnx.sources.size() + 1);
  FUZZ_CHECK(m.tensor_notes.size() == m.tensors.size());
  std::vector<const ByteSource*> sources{&source};
  for (const auto& s : onnx.sources) sources.push_back(s.get());
  for (const Tensor& t : m.tensors) {
    if (!t.broken.empty()) {
      FUZZ_CHECK(!t.storage);
      continue;
    }
    FUZZ_CHECK(t.storage && t.contiguous());
    const Storage& s = m.storages[*t.storage];
    FUZZ_CHECK(s.source < sources.size());
    FUZZ_CHECK(sources[s.source]->contains(s.file_offset, s.nbytes));
    FUZZ_CHECK(s.nbytes == t.stored_nbytes());
    FUZZ_CHECK(t.nbytes() <= max_tensor_bytes);
  }
  JsonLimits json_limits;
  json_limits.max_depth = 64;
  json_limits.surrogate_escapes = true;
  for (const std::string& note : m.tensor_notes) parse_json(note, json_limits, 1 << 20);
  for (const Entry& e : m.entries) {
    if (e.kind == Entry::Kind::value) parse_json(e.value_json, json_limits, 1 << 22);
  }
  parse_json(model_json(m), json_limits, 1 << 24);
  std::FILE* null = std::fopen("/dev/null", "w");
  if (null) {
    cli::print_inspect_table(m, null);
    std::fclose(null);
  }

  const Model kept = m;
  Tree tree(std::move(m), {});
  constexpr std::size_t max_read = 1 << 16;
  for (std::size_t i = 0; i < kept.entries.size() && i < 32; ++i) {
    const Entry& e = kept.entries[i];
    const Tree::Ino dir = tree.lookup(Tree::root_ino, tree.entry_name(i));
    FUZZ_CHECK(dir != 0);
    if (e.kind != Entry::Kind::tensor) continue;
    const Tensor& t = kept.tensors[e.tensor];
    const Tree::Ino data = tree.lookup(dir, "data");
    if (data == 0 || refused_as_said(tree, data, sources)) continue;
    FUZZ_CHECK(t.broken.empty());
    const std::uint64_t want = std::min<std::uint64_t>(kept.storages[*t.storage].nbytes, max_read);
    FUZZ_CHECK(read_length(tree, data, sources, max_read) == want);
  }
  read_length(tree, tree.lookup(Tree::root_ino, "index.json"), sources, max_read);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  MemorySource source{std::string(bytes), "fuzz"};
  check_onnx(source);
  looks_like_onnx(source);
  return 0;
}
