// SPDX-License-Identifier: MIT
// Fuzz target: PyTorch DCP checkpoints. The input is a 4-byte little-endian length L, L bytes of
// .metadata, then the bytes of every file it names (each name opens the same bytes). Beyond "no
// crash": only Error's codes of a bad checkpoint come out; no name that leaves the directory is
// ever opened; every tensor that is not broken is assembled from indexed pieces whose views lie
// inside their files, and its bytes as served (all of them, a range at a time) come from those
// files; meta.json, index.json and inspect describe every entry.
#include "fuzz_check.hpp"

#include "../../src/cli/inspect.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/dcp/dcp_reader.hpp>
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <cstdio>
#include <string>
#include <string_view>

namespace {

using namespace ckptfs;

bool leaves_directory(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos) return true;
  std::size_t start = 0;
  for (;;) {
    const auto slash = name.find('/', start);
    const auto part = std::string_view(name).substr(
        start, slash == std::string::npos ? std::string_view::npos : slash - start);
    if (part.empty() || part == "." || part == "..") return true;
    if (slash == std::string::npos) return false;
    start = slash + 1;
  }
}

void check(const MemorySource& metadata, const std::string& files) {
  DcpLimits dcp;
  dcp.max_chunks = 1 << 14;
  dcp.max_files = 64;
  DcpModel m;
  try {
    m = read_dcp(
        metadata,
        [&](const std::string& name) {
          FUZZ_CHECK(!leaves_directory(name));
          return std::make_unique<MemorySource>(files, name);
        },
        fuzz_limits(), dcp);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint || e.code() == ExitCode::unsupported ||
               e.code() == ExitCode::bad_zip);
    return;
  }
  FUZZ_CHECK(m.model.sources.size() == m.sources.size());
  std::vector<const ByteSource*> sources;
  for (const auto& s : m.sources) sources.push_back(s.get());
  for (const Tensor& t : m.model.tensors) {
    if (!t.broken.empty() || !t.assembly) continue;
    const Assembly& a = m.model.assemblies[*t.assembly];
    FUZZ_CHECK(a.indexed());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const Storage& s = m.model.storages[a.piece(i).storage];
      FUZZ_CHECK(s.source < sources.size() && sources[s.source]->contains(s.file_offset, s.nbytes));
    }
    const ServedTensor served = serve(m.model, t);
    ReadBuffer buffer;
    constexpr std::uint64_t step = 1 << 12;
    for (std::uint64_t at = 0; at < served.nbytes && at < (1 << 16); at += step) {
      buffer.clear();
      const auto n = static_cast<std::size_t>(std::min(step, served.nbytes - at));
      read_served(m.model, t, served, at, n, sources, buffer);
      FUZZ_CHECK(buffer.size() == n);
      for (const ReadPiece& p : buffer.pieces()) {
        FUZZ_CHECK(p.memory || sources[p.source]->contains(p.source_offset, p.length));
      }
    }
  }
  std::string json = model_json(m.model);
  std::FILE* null = std::fopen("/dev/null", "w");
  if (null) {
    cli::print_inspect_table(m.model, null);
    std::fclose(null);
  }
  Tree tree(std::move(m.model), {});
  ReadBuffer buffer;
  tree.read(tree.lookup(Tree::views_ino, "index.json"), 0, 1 << 16, sources, buffer);
  for (std::size_t i = 0; i < tree.model().entries.size() && i < 64; ++i) {
    const Tree::Ino dir = tree.lookup(Tree::root_ino, tree.entry_name(i));
    FUZZ_CHECK(dir != 0);
    buffer.clear();
    tree.read(tree.lookup(dir, "meta.json"), 0, 1 << 16, sources, buffer);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() < 4) return 0;
  std::uint32_t length = 0;
  for (int i = 3; i >= 0; --i) length = length << 8 | static_cast<unsigned char>(bytes[i]);
  const std::string_view rest = bytes.substr(4);
  const std::string_view meta = rest.substr(0, std::min<std::size_t>(length, rest.size()));
  MemorySource metadata{std::string(meta), ".metadata"};
  check(metadata, std::string(rest.substr(meta.size())));
  return 0;
}
