// SPDX-License-Identifier: MIT
// Fuzz target: the whole checkpoint model over arbitrary bytes, as `ckptfs inspect` and a mount
// see it: read_torch, inspect's JSON and table, the Tree, then reads of every file of the tree
// through Tree::read (strided tensors gathered). Beyond "no crash", it checks that the bytes
// served are right: every read returns exactly the bytes asked for (clipped to the file), every
// range handed to the kernel lies inside the checkpoint, and a tensor's data file equals the
// elements computed one by one from its shape, stride, offset and storage.
#include "fuzz_check.hpp"

#include "../../src/cli/inspect.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/tree.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace ckptfs;

// At most this many bytes of a file are read from each end: a fuzzed tensor can be a stride-0
// view of terabytes.
constexpr std::uint64_t window = 16 << 10;

// The bytes [offset, offset + length) of file `ino`, read with Tree::read in odd-sized pieces so
// that reads start and end inside elements and across pieces.
std::string read_file(const Tree& tree, Tree::Ino ino, std::uint64_t file_size,
                      std::uint64_t offset, std::uint64_t length, const MemorySource& source) {
  ReadBuffer buffer;
  std::string out;
  const ByteSource* sources[] = {&source};
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
        // What the FUSE adapter hands to the kernel as a range of the checkpoint's fd.
        FUZZ_CHECK(source.contains(p.source_offset, p.length));
        out += source.read_string(p.source_offset, p.length);
      }
      got += p.length;
    }
    FUZZ_CHECK(got == std::min<std::uint64_t>(ask, file_size - at));
    at += ask;
  }
  // Past the end: nothing.
  buffer.clear();
  tree.read(ino, file_size, 10, sources, buffer);
  FUZZ_CHECK(buffer.pieces().empty());
  return out;
}

// Byte `position` of the tensor's logical C-order bytes, element by element from the storage.
char reference_byte(const Model& c, const Tensor& t, const MemorySource& source,
                    std::uint64_t position) {
  const std::uint64_t es = t.element_size();
  std::uint64_t element = position / es;
  std::uint64_t storage_element = static_cast<std::uint64_t>(t.storage_offset);
  for (std::size_t d = t.shape.size(); d-- > 0;) {
    const auto size = static_cast<std::uint64_t>(t.shape[d]);
    storage_element += (element % size) * static_cast<std::uint64_t>(t.stride[d]);
    element /= size;
  }
  const Storage& s = c.storages[*t.storage];
  // The invariant that makes serving safe: every element of a servable tensor is in its storage.
  FUZZ_CHECK(storage_element < s.nbytes / es);
  FUZZ_CHECK(source.contains(s.file_offset, s.nbytes));
  return source.read_string(s.file_offset + storage_element * es + position % es, 1)[0];
}

void check_tensor_file(const Model& c, const Tensor& t, const std::string& bytes,
                       std::uint64_t data_offset, std::uint64_t offset,
                       const MemorySource& source) {
  for (std::uint64_t i = 0; i < bytes.size(); ++i) {
    const std::uint64_t position = offset + i;
    if (position < data_offset) continue;  // the npy header
    FUZZ_CHECK(bytes[i] == reference_byte(c, t, source, position - data_offset));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  MemorySource source(std::string(reinterpret_cast<const char*>(data), size));
  const ReadLimits limits = fuzz_limits();
  Model checkpoint;
  try {
    checkpoint = read_torch(source, "fuzz.pth", limits);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_zip || e.code() == ExitCode::bad_checkpoint ||
               e.code() == ExitCode::unsupported);
    FUZZ_CHECK(std::string_view(e.what()).find('\n') == std::string_view::npos);
    return 0;
  }
  for (const Tensor& t : checkpoint.tensors) {
    if (!t.broken.empty()) continue;
    FUZZ_CHECK(t.storage && *t.storage < checkpoint.storages.size());
    FUZZ_CHECK(t.shape.size() == t.stride.size());
    const Storage& s = checkpoint.storages[*t.storage];
    FUZZ_CHECK(s.broken.empty() || t.numel() == 0);
    FUZZ_CHECK(source.contains(s.file_offset, s.nbytes));
    if (auto offset = checkpoint.file_offset(t)) {
      FUZZ_CHECK(source.contains(*offset, t.nbytes()));
    }
  }
  (void)model_json(checkpoint);
  if (std::FILE* devnull = std::fopen("/dev/null", "w")) {
    cli::print_inspect_table(checkpoint, devnull);
    cli::print_inspect_json(checkpoint, devnull);
    std::fclose(devnull);
  }

  Tree tree(std::move(checkpoint), TreeOptions{.source_path = "fuzz.pth"});
  const Model& copy = tree.model();
  // Every node, found by walking the tree from its root.
  std::vector<Tree::Ino> dirs{Tree::root_ino};
  while (!dirs.empty()) {
    const Tree::Ino dir = dirs.back();
    dirs.pop_back();
    std::string name;
    for (std::size_t i = 0; i < tree.child_count(dir); ++i) {
      const Tree::Ino ino = tree.child(dir, i, name);
      FUZZ_CHECK(tree.lookup(dir, name) == ino);
      FUZZ_CHECK(tree.parent(ino) == dir);
      FUZZ_CHECK(!name.empty() && name.size() <= 255 && name.find('/') == std::string::npos);
      struct stat st {};
      FUZZ_CHECK(tree.stat(ino, st));
      FUZZ_CHECK(st.st_size >= 0);
      const auto node = tree.node(ino);
      FUZZ_CHECK(node.has_value());
      if (S_ISDIR(st.st_mode)) {
        dirs.push_back(ino);
        continue;
      }
      const ByteSource* one[] = {&source};
      if (refused_as_said(tree, ino, one)) continue;
      const auto n_size = static_cast<std::uint64_t>(st.st_size);
      const std::uint64_t head = std::min(n_size, window);
      const std::string first = read_file(tree, ino, n_size, 0, head, source);
      const std::uint64_t tail_at = n_size - std::min(n_size - head, window);
      const std::string last = read_file(tree, ino, n_size, tail_at, n_size - tail_at, source);
      // A tensor's data and tensor.npy: compare with the element-by-element reference.
      if (node->kind != Tree::Kind::data && node->kind != Tree::Kind::tensor_npy) continue;
      FUZZ_CHECK(node->index < copy.entries.size());
      const Entry& e = copy.entries[node->index];
      FUZZ_CHECK(e.kind == Entry::Kind::tensor);
      const Tensor& t = copy.tensors[e.tensor];
      FUZZ_CHECK(t.broken.empty());
      const std::uint64_t data_offset = n_size - t.nbytes();
      FUZZ_CHECK(node->kind == Tree::Kind::data ? data_offset == 0
                                                : data_offset % 64 == 0 && data_offset > 0);
      check_tensor_file(copy, t, first, data_offset, 0, source);
      check_tensor_file(copy, t, last, data_offset, tail_at, source);
    }
  }
  return 0;
}
