// SPDX-License-Identifier: MIT
// Unit tests of describe's local files: index.json's "source_files" (the files the mount reads,
// with their identity) and each tensor's "file_range" (served bytes that are exactly a range of
// one of them), which a reader on the same machine may map itself (the Python package).
#include "support/fake_checkpoint.hpp"
#include "support/temp_dir.hpp"

#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/tree.hpp>

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <string>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

// Float32 0..11 as a plain and a transposed view of storage 0, an int64 tensor, an int8 one and
// an empty one; `byteorder` as the zip's byteorder record ("" for none).
std::string checkpoint(const std::string& byteorder = "") {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("w").tensor_v2("FloatStorage", "0", "cpu", 12, 0, {3, 4}, {4, 1});
  p.binunicode("w.T").tensor_v2("FloatStorage", "0", "cpu", 12, 0, {4, 3}, {1, 4});
  p.binunicode("i").tensor_v2("LongStorage", "1", "cpu", 2, 0, {2}, {1});
  p.binunicode("c").tensor_v2("CharStorage", "2", "cpu", 3, 0, {3}, {1});
  p.binunicode("e").tensor_v2("FloatStorage", "3", "cpu", 0, 0, {0}, {1});
  p.setitems().stop();
  std::vector<std::pair<std::string, std::string>> extra;
  if (!byteorder.empty()) extra.emplace_back("byteorder", byteorder);
  return torch_zip(p.bytes(),
                   {{"0", floats(12)}, {"1", std::string(16, '\7')}, {"2", "abc"}, {"3", ""}},
                   "archive", extra);
}

nlohmann::json index_json(const Tree& tree, const ByteSource& source) {
  const Tree::Ino ino = tree.lookup(Tree::views_ino, "index.json");
  REQUIRE(ino != 0);
  ReadBuffer buffer;
  const ByteSource* sources[] = {&source};
  tree.read(ino, 0, 1 << 20, sources, buffer);
  std::string out;
  for (const auto& p : buffer.pieces()) out.append(p.memory, p.length);
  return nlohmann::json::parse(out);
}

nlohmann::json entry(const nlohmann::json& index, const std::string& key) {
  for (const auto& e : index["entries"]) {
    if (e["key"] == key) return e;
  }
  FAIL("no entry " << key);
  return {};
}

}  // namespace

TEST_SUITE_BEGIN("describe");

TEST_CASE("local_files: a local file's absolute path and identity, null for other sources") {
  TempDir dir;
  const std::string path = dir.write("model.pth", checkpoint());
  FileSource file(path);
  MemorySource memory("abc", "memory");
  const ByteSource* sources[] = {&file, &memory};
  const auto files = local_files(sources);
  REQUIRE(files.size() == 2);
  REQUIRE(files[0]);
  CHECK(files[0]->path == path);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(files[0]->identity.inode == st.st_ino);
  CHECK(files[0]->identity.device == st.st_dev);
  CHECK_FALSE(files[1]);

  std::string out;
  JsonWriter j(out);
  j.begin_object();
  write_source_files(j, files);
  j.end_object();
  const auto json = nlohmann::json::parse(out)["source_files"];
  CHECK(json[0]["path"] == path);
  CHECK(json[0]["device"] == st.st_dev);
  CHECK(json[0]["inode"] == st.st_ino);
  CHECK(json[0]["size"] == st.st_size);
  CHECK(json[0]["mtime_ns"] == st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec);
  CHECK(json[1].is_null());
}

TEST_CASE("file_range: exactly the tensors served as one range of a local file") {
  TempDir dir;
  const std::string bytes = checkpoint();
  const std::string path = dir.write("model.pth", bytes);
  FileSource file(path);
  const ByteSource* sources[] = {&file};
  auto tree_with = [&](TreeOptions options) {
    options.local_files = local_files(sources);
    return std::make_unique<Tree>(read_torch(file, "model.pth"), options);
  };

  SUBCASE("as stored: plain tensors have one, strided views and empty tensors none") {
    const auto tree = tree_with({});
    const auto index = index_json(*tree, file);
    REQUIRE(index["source_files"].size() == 1);
    CHECK(index["source_files"][0]["path"] == path);
    const auto w = entry(index, "w")["file_range"];
    CHECK(w["source"] == 0);
    CHECK(w["byteorder"] == "little");
    const std::uint64_t offset = w["offset"];
    CHECK(bytes.substr(offset, 48) == floats(12));  // the very bytes data serves
    CHECK(entry(index, "i")["file_range"]["offset"].is_number());
    CHECK(entry(index, "w.T")["file_range"].is_null());  // gathered
    CHECK(entry(index, "e")["file_range"].is_null());    // no bytes
  }
  SUBCASE("-o dtype: converted tensors have none, the others keep theirs") {
    const auto index = index_json(*tree_with({.dtype = DType::float16}), file);
    CHECK(entry(index, "w")["file_range"].is_null());
    CHECK(entry(index, "w")["dtype"] == "float16");
    CHECK(entry(index, "i")["file_range"]["byteorder"] == "little");
    const auto same = index_json(*tree_with({.dtype = DType::float32}), file);
    CHECK(entry(same, "w")["file_range"]["offset"].is_number());  // float32 as float32: as is
  }
  SUBCASE("no local files published (a URL's sources): no ranges") {
    Tree tree(read_torch(file, "model.pth"), TreeOptions{});
    const auto index = index_json(tree, file);
    CHECK(index["source_files"].empty());
    CHECK(entry(index, "w")["file_range"].is_null());
  }
}

TEST_CASE("file_range: a big-endian checkpoint's ranges say their byte order") {
  TempDir dir;
  const std::string path = dir.write("big.pth", checkpoint("big"));
  FileSource file(path);
  const ByteSource* sources[] = {&file};
  TreeOptions options;
  options.local_files = local_files(sources);
  Tree tree(read_torch(file, "big.pth"), options);
  const auto index = index_json(tree, file);
  CHECK(entry(index, "w")["file_range"]["byteorder"] == "big");
  CHECK(entry(index, "c")["file_range"]["byteorder"] == "big");
  CHECK(entry(index, "w.T")["file_range"].is_null());
}

TEST_SUITE_END();
