// SPDX-License-Identifier: MIT
// Fuzz target: HDF5 files (and .keras archives) over arbitrary bytes. Beyond "no crash" and
// bounded memory and time: a refusal is bad_checkpoint or unsupported; a file read_hdf5()
// accepts has every storage of the file's own bytes inside the file and every source the model
// names made; the tree serves each tensor's data (contiguous: exactly the file's bytes; chunked:
// decoded, or a read that fails with bad_checkpoint for a corrupt chunk) at the size its
// meta.json says; index.json and inspect's table are made.
#include "fuzz_check.hpp"

#include "../../src/cli/inspect.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/hdf5/hdf5_reader.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/tree.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace ckptfs;

// A file's bytes read through the tree: "" when the read fails as a corrupt chunk does.
std::string read_all(const Tree& tree, Tree::Ino ino, Sources sources, std::size_t length) {
  ReadBuffer buffer;
  try {
    tree.read(ino, 0, length, sources, buffer);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint || e.code() == ExitCode::io);
    return {};
  }
  std::string got;
  for (const ReadPiece& p : buffer.pieces()) {
    got += p.memory ? std::string(p.memory, p.length)
                    : sources[p.source]->read_string(p.source_offset, p.length);
  }
  return got;
}

void check(const MemorySource& source, bool keras) {
  Hdf5Limits limits;
  limits.max_objects = 1 << 12;
  limits.max_links = 1 << 14;
  limits.max_chunks = 1 << 14;
  limits.max_header_bytes = 1 << 20;
  limits.max_extra_metadata_bytes = 1 << 22;
  limits.max_chunk_bytes = 1 << 20;
  limits.chunk_cache_bytes = 1 << 22;
  Hdf5Model read;
  try {
    read = keras ? read_keras(source, "fuzz.keras", limits) : read_hdf5(source, "fuzz.h5", limits);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint || e.code() == ExitCode::unsupported);
    return;
  }
  Model& m = read.model;
  FUZZ_CHECK(m.sources.size() == read.sources.size() + 1);
  FUZZ_CHECK(m.tensor_notes.size() == m.tensors.size());
  std::vector<const ByteSource*> sources{&source};
  for (const auto& s : read.sources) sources.push_back(s.get());
  for (const Storage& s : m.storages) {
    FUZZ_CHECK(s.source < sources.size());
    FUZZ_CHECK(sources[s.source]->contains(s.file_offset, s.nbytes));
  }
  for (const Tensor& t : m.tensors) {
    if (!t.broken.empty()) FUZZ_CHECK(!t.storage && !t.assembly);
    FUZZ_CHECK(t.nbytes() <= max_tensor_bytes);
  }
  for (const Model::ExtraFile& f : m.extra_files) {
    FUZZ_CHECK(f.source < sources.size() && sources[f.source]->contains(f.offset, f.size));
  }
  std::FILE* null = std::fopen("/dev/null", "w");
  if (null) {
    cli::print_inspect_table(m, null);
    std::fclose(null);
  }
  const Model kept = m;
  Tree tree(std::move(m), {});
  constexpr std::size_t max_read = 1 << 16;
  for (std::size_t i = 0; i < kept.entries.size() && i < 32; ++i) {
    const Tree::Ino dir = tree.lookup(Tree::root_ino, tree.entry_name(i));
    FUZZ_CHECK(dir != 0);
    if (kept.entries[i].kind != Entry::Kind::tensor) continue;
    const Tensor& t = kept.tensors[kept.entries[i].tensor];
    read_all(tree, tree.lookup(dir, "meta.json"), sources, 1 << 20);
    if (!t.broken.empty()) continue;
    const Tree::Ino data = tree.lookup(dir, "data");
    FUZZ_CHECK(data != 0);
    const std::string got = read_all(tree, data, sources, max_read);
    FUZZ_CHECK(got.empty() || got.size() == std::min<std::uint64_t>(t.nbytes(), max_read));
    if (t.storage && !t.assembly && !got.empty()) {
      const Storage& s = kept.storages[*t.storage];
      if (s.source == 0) FUZZ_CHECK(got == source.read_string(s.file_offset, got.size()));
    }
  }
  read_all(tree, tree.lookup(Tree::root_ino, "index.json"), sources, max_read);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  MemorySource source{std::string(reinterpret_cast<const char*>(data), size), "fuzz"};
  check(source, false);
  if (looks_like_zip(source)) check(source, true);
  return 0;
}
