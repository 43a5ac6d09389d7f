// SPDX-License-Identifier: MIT
// Fuzz target: DeepSpeed ZeRO checkpoints, as a mount sees them. The input is a directory of
// files: records of [1 byte name length][name][4 bytes little-endian size][bytes], read by
// read_zero_remote() from "http://fuzz/c/" through an opener that serves those files (so a
// fuzzed `latest` or name can ask for any path: what it may reach is the opener's to see). Then
// the model's JSON, inspect, and every file of its tree read through Tree::read. Beyond "no
// crash": every range handed to the kernel lies inside its source, every read returns exactly
// the bytes asked for, and the data of every assembled tensor equals, element by element, the
// piece whose box holds it found by scanning all pieces.
#include "fuzz_check.hpp"

#include "../../src/cli/inspect.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/zero/zero_reader.hpp>
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace ckptfs;

constexpr std::string_view base = "http://fuzz/c/";
constexpr std::uint64_t window = 4 << 10;  // bytes of each file read from each end
constexpr std::uint64_t checked_elements = 64;

std::map<std::string, std::string> files_of(const std::uint8_t* data, std::size_t size) {
  std::map<std::string, std::string> files;
  std::size_t at = 0;
  while (at < size) {
    const std::size_t name_length = data[at++];
    if (size - at < name_length + 4) break;
    std::string name(reinterpret_cast<const char*>(data + at), name_length);
    at += name_length;
    std::uint32_t length = 0;
    for (int i = 3; i >= 0; --i) length = (length << 8) | data[at + static_cast<std::size_t>(i)];
    at += 4;
    length = static_cast<std::uint32_t>(std::min<std::size_t>(length, size - at));
    files[name] = std::string(reinterpret_cast<const char*>(data + at), length);
    at += length;
  }
  return files;
}

// The bytes [offset, offset + length) of file `ino`, read in odd-sized pieces.
std::string read_file(const Tree& tree, Tree::Ino ino, std::uint64_t file_size,
                      std::uint64_t offset, std::uint64_t length, Sources sources) {
  ReadBuffer buffer;
  std::string out;
  std::uint64_t at = offset;
  const std::uint64_t end = offset + length;
  for (std::size_t step = 1237; at < end; step = step * 3 + 5) {
    const std::size_t ask = static_cast<std::size_t>(std::min<std::uint64_t>(step, end - at));
    buffer.clear();
    tree.read(ino, at, ask, sources, buffer);
    std::uint64_t got = 0;
    for (const ReadPiece& p : buffer.pieces()) {
      if (p.memory) {
        out.append(p.memory, p.length);
      } else {
        FUZZ_CHECK(p.source < sources.size());
        FUZZ_CHECK(sources[p.source]->contains(p.source_offset, p.length));
        out += sources[p.source]->read_string(p.source_offset, p.length);
      }
      got += p.length;
    }
    FUZZ_CHECK(got == std::min<std::uint64_t>(ask, file_size - at));
    at += ask;
  }
  return out;
}

// The stored bytes of element `element` of an assembled tensor: from the one piece whose box
// holds it, found by scanning every piece (flat grid: its elements in C order).
std::string reference_element(const Model& m, const Tensor& t, std::uint64_t element,
                              Sources sources) {
  const Assembly& a = m.assemblies[*t.assembly];
  const std::uint64_t es = t.stored_element_size();
  int found = 0;
  std::string out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto begin = static_cast<std::uint64_t>(a.offset(i)[0]);
    const auto length = static_cast<std::uint64_t>(a.length(i)[0]);
    if (element < begin || element - begin >= length) continue;
    ++found;
    const Piece& p = a.piece(i);
    const Storage& s = m.storages[p.storage];
    const std::uint64_t at = static_cast<std::uint64_t>(p.storage_offset) +
                             (element - begin) * static_cast<std::uint64_t>(a.stride(i)[0]);
    FUZZ_CHECK((at + 1) * es <= s.nbytes);
    FUZZ_CHECK(sources[s.source]->contains(s.file_offset, s.nbytes));
    out = sources[s.source]->read_string(s.file_offset + at * es, es);
  }
  FUZZ_CHECK(found == 1);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::map<std::string, std::string> files = files_of(data, size);
  auto open = [&](const std::string& location) -> std::unique_ptr<ByteSource> {
    FUZZ_CHECK(location.starts_with(base));
    auto it = files.find(location.substr(base.size()));
    if (it == files.end()) throw Error(ExitCode::io, "not found (HTTP 404)");
    return std::make_unique<MemorySource>(it->second, location);
  };
  ZeroLimits zero;
  zero.max_ranks = 64;
  zero.max_pieces = 1 << 16;
  DirectoryModel d;
  try {
    d = read_zero_remote(std::string(base), open, fuzz_limits(), zero);
  } catch (const Error& e) {
    FUZZ_CHECK(std::string_view(e.what()).find('\n') == std::string_view::npos);
    return 0;
  }
  std::vector<const ByteSource*> raw;
  for (const auto& s : d.sources) raw.push_back(s.get());
  const Sources sources(raw);
  FUZZ_CHECK(d.model.sources.size() == raw.size());
  for (const Storage& s : d.model.storages) {
    FUZZ_CHECK(s.source < raw.size());
    if (s.broken.empty()) FUZZ_CHECK(raw[s.source]->contains(s.file_offset, s.nbytes));
  }
  // Every assembled tensor's first elements, element by element against a scan of its pieces.
  for (const Tensor& t : d.model.tensors) {
    if (!t.broken.empty() || !t.assembly) continue;
    FUZZ_CHECK(!t.stored_dtype);
    const std::uint64_t n = std::min<std::uint64_t>(t.numel(), checked_elements);
    const std::uint64_t es = t.stored_element_size();
    std::string stored(n * es, '\0');
    read_stored(d.model, t, 0, sources, stored);
    for (std::uint64_t i = 0; i < n; ++i) {
      FUZZ_CHECK(stored.substr(i * es, es) == reference_element(d.model, t, i, sources));
    }
  }
  (void)model_json(d.model);
  if (std::FILE* devnull = std::fopen("/dev/null", "w")) {
    cli::print_inspect_table(d.model, devnull);
    cli::print_inspect_json(d.model, devnull);
    std::fclose(devnull);
  }

  Tree tree(std::move(d.model), TreeOptions{.source_path = std::string(base)});
  std::vector<Tree::Ino> dirs{Tree::root_ino};
  while (!dirs.empty()) {
    const Tree::Ino dir = dirs.back();
    dirs.pop_back();
    std::string name;
    for (std::size_t i = 0; i < tree.child_count(dir); ++i) {
      const Tree::Ino ino = tree.child(dir, i, name);
      struct stat st {};
      FUZZ_CHECK(tree.stat(ino, st));
      if (S_ISDIR(st.st_mode)) {
        dirs.push_back(ino);
        continue;
      }
      if (refused_as_said(tree, ino, sources)) continue;
      const auto n_size = static_cast<std::uint64_t>(st.st_size);
      const std::uint64_t head = std::min(n_size, window);
      (void)read_file(tree, ino, n_size, 0, head, sources);
      const std::uint64_t tail_at = n_size - std::min(n_size - head, window);
      (void)read_file(tree, ino, n_size, tail_at, n_size - tail_at, sources);
    }
  }
  return 0;
}
