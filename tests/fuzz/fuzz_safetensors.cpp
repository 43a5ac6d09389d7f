// SPDX-License-Identifier: MIT
// Fuzz target: safetensors files and sharded-set indexes over arbitrary bytes, and the JSON
// reader under them. Beyond "no crash": the JSON reader gives the same tokens or the same error
// whether it reads the text whole or streamed in odd-sized pieces; a file read_safetensors()
// accepts has its tensors in data order, each inside the file, one run from the header to the
// end of the file, each the size its shape and dtype say; the tree serves each tensor's data as
// exactly the file's bytes at its offset; and an index's shard names never leave its directory.
#include "fuzz_check.hpp"

#include "../../src/cli/inspect.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/safetensors/sharded_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/tree.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>

namespace {

using namespace ckptfs;

// Every token of `json` as text, or the error that ended it, appended to `out`.
void trace(JsonReader& json, std::string& out) {
  try {
    for (auto t = json.next(); t != JsonReader::Token::end; t = json.next()) {
      out += static_cast<char>('A' + static_cast<int>(t));
      if (t == JsonReader::Token::key || t == JsonReader::Token::string ||
          t == JsonReader::Token::number) {
        out += std::to_string(json.string().size()) + ':';
        out += json.string();
        if (auto v = json.uint64()) out += '=' + std::to_string(*v);
      }
    }
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint);
    out += '!';
    out += e.what();
  }
}

void check_json(std::string_view text) {
  JsonLimits limits;
  limits.max_depth = 64;
  limits.max_string_bytes = 4096;
  JsonReader whole(text, limits);
  std::string a;
  trace(whole, a);
  std::size_t at = 0, step = 1;
  JsonReader pieces(
      [&](std::span<char> buffer) {
        std::size_t n = std::min({step, buffer.size(), text.size() - at});
        std::copy_n(text.data() + at, n, buffer.data());
        at += n;
        step = step % 7 + 1;
        return n;
      },
      limits, 16);
  std::string b;
  trace(pieces, b);
  FUZZ_CHECK(a == b);
  try {
    parse_json(text, limits, 1 << 16);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint);
  }
}

void check_safetensors(const MemorySource& source) {
  SafetensorsLimits limits;
  limits.max_tensors = 1 << 14;
  Model m;
  try {
    m = read_safetensors(source, "fuzz.safetensors", limits);
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint || e.code() == ExitCode::unsupported);
    return;
  }
  // One run of tensors from the end of the header to the end of the file, in entry order.
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) {
    length = length << 8 | static_cast<unsigned char>(source.read_string(i, 1)[0]);
  }
  std::uint64_t at = 8 + length;
  FUZZ_CHECK(m.entries.size() == m.tensors.size() && m.tensors.size() == m.storages.size());
  for (std::size_t i = 0; i < m.entries.size(); ++i) {
    const Tensor& t = m.tensors[m.entries[i].tensor];
    const Storage& s = m.storages[*t.storage];
    FUZZ_CHECK(t.broken.empty() && t.contiguous());
    FUZZ_CHECK(s.file_offset == at && source.contains(s.file_offset, s.nbytes));
    FUZZ_CHECK(t.nbytes() == s.nbytes);
    FUZZ_CHECK(m.file_offset(t) == s.file_offset);
    at += s.nbytes;
  }
  FUZZ_CHECK(at == source.size());
  std::string json = model_json(m);
  std::FILE* null = std::fopen("/dev/null", "w");
  if (null) {
    cli::print_inspect_table(m, null);
    std::fclose(null);
  }
  // The tree: every data file is the file's bytes at the tensor's offset.
  const Model& kept = m;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const Entry& e : kept.entries) {
    const Storage& s = kept.storages[*kept.tensors[e.tensor].storage];
    ranges.emplace_back(s.file_offset, s.nbytes);
  }
  Tree tree(std::move(m), {});
  const ByteSource* sources[] = {&source};
  ReadBuffer buffer;
  for (std::size_t i = 0; i < ranges.size() && i < 64; ++i) {
    Tree::Ino dir = tree.lookup(Tree::root_ino, tree.entry_name(i));
    FUZZ_CHECK(dir != 0);
    Tree::Ino data = tree.lookup(dir, "data");
    FUZZ_CHECK(data != 0);
    buffer.clear();
    tree.read(data, 0, 1 << 16, sources, buffer);
    std::string got;
    for (const ReadPiece& p : buffer.pieces()) {
      got += p.memory ? std::string(p.memory, p.length)
                      : source.read_string(p.source_offset, p.length);
    }
    const auto [offset, nbytes] = ranges[i];
    FUZZ_CHECK(got == source.read_string(offset, std::min<std::uint64_t>(nbytes, 1 << 16)));
    buffer.clear();
    tree.read(tree.lookup(Tree::views_ino, "index.json"), 0, 1 << 16, sources, buffer);
  }
}

void check_index(const MemorySource& source) {
  ShardLimits limits;
  limits.max_keys = 1 << 14;
  try {
    ShardIndex index = read_shard_index(source, limits);
    for (const auto& name : index.shards) {
      FUZZ_CHECK(!name.empty() && name.front() != '/');
      FUZZ_CHECK(name.find('\0') == std::string::npos);
      std::size_t start = 0;
      for (;;) {
        auto slash = name.find('/', start);
        auto part = std::string_view(name).substr(
            start, slash == std::string::npos ? std::string_view::npos : slash - start);
        FUZZ_CHECK(!part.empty() && part != "." && part != "..");
        if (slash == std::string::npos) break;
        start = slash + 1;
      }
    }
    for (const auto& [key, shard] : index.weight_map) FUZZ_CHECK(shard < index.shards.size());
  } catch (const Error& e) {
    FUZZ_CHECK(e.code() == ExitCode::bad_checkpoint || e.code() == ExitCode::unsupported);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  MemorySource source{std::string(bytes), "fuzz"};
  check_safetensors(source);
  check_index(source);
  // The JSON reader on the header's text when the input looks like a file, else on all of it.
  check_json(size > 8 && bytes[8] == '{' ? bytes.substr(8) : bytes);
  return 0;
}
