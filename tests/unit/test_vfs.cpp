// SPDX-License-Identifier: MIT
// Unit tests of the virtual tree: layout, names, attributes, and reads of every kind of extent.
#include "support/fake_checkpoint.hpp"
#include "support/safetensors_builder.hpp"

#include <ckptfs/format/safetensors_reader.hpp>
#include <ckptfs/format/sharded_reader.hpp>
#include <ckptfs/format/torch_reader.hpp>
#include <ckptfs/view/npy.hpp>
#include <ckptfs/view/vfs.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

VfsOptions with_times(VfsOptions options) {
  options.times.mtime_sec = 1234;
  return options;
}

struct Mounted {
  MemorySource source;
  Vfs vfs;
  explicit Mounted(const std::string& bytes, VfsOptions options = {})
      : source(bytes), vfs(read_torch(source, "test.pth"), with_times(options)) {}

  std::string read_all(Vfs::Ino ino, std::uint64_t offset = 0, std::size_t length = 1 << 20) {
    std::vector<ReadPiece> pieces;
    std::vector<char> scratch;
    const ByteSource* sources[] = {&source};
    vfs.read(ino, offset, length, sources, pieces, scratch);
    std::string out;
    for (const auto& p : pieces) {
      if (p.memory) {
        out.append(p.memory, p.length);
      } else {
        out += source.read_string(p.source_offset, p.length);
      }
    }
    return out;
  }
  Vfs::Ino path(std::string_view dir, std::string_view file = {}) {
    Vfs::Ino d = vfs.lookup(Vfs::root_ino, dir);
    return file.empty() || d == 0 ? d : vfs.lookup(d, file);
  }
};

std::string checkpoint_with_views() {
  return torch_zip(state_dict_pickle({{"w", "0", 12, 0, {3, 4}, {4, 1}},
                                      {"w.T", "0", 12, 0, {4, 3}, {1, 4}},
                                      {"a/b", "0", 12, 1, {2, 2}, {6, 2}},
                                      {"x", "0", 12, 0, {2, 3}, {0, 1}},
                                      {"bad", "0", 12, 10, {4}, {1}}}),
                   {{"0", floats(12)}});
}

std::string floats_at(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) {
    float f = static_cast<float>(v);
    out.append(reinterpret_cast<const char*>(&f), 4);
  }
  return out;
}

}  // namespace

TEST_SUITE_BEGIN("vfs");

TEST_CASE("the tree: index.json, a directory per entry, files per kind") {
  Mounted m(checkpoint_with_views(), {.source_path = "x.pth", .uid = 7, .gid = 8, .umask = 0222});
  const Vfs::Node* root = m.vfs.node(Vfs::root_ino);
  REQUIRE(root);
  CHECK(root->directory);
  CHECK(root->child_count == 6);
  CHECK(m.path("index.json") != 0);
  CHECK(m.path("w", "data") != 0);
  CHECK(m.path("w", "meta.json") != 0);
  CHECK(m.path("w", "tensor.npy") != 0);
  CHECK(m.path("a%2Fb", "data") != 0);
  CHECK(m.path("bad", "meta.json") != 0);
  CHECK(m.path("bad", "data") == 0);  // a broken tensor has no bytes to serve
  CHECK(m.path("nope") == 0);
  CHECK(m.vfs.lookup(m.path("w", "data"), "x") == 0);  // not a directory

  struct stat st {};
  REQUIRE(m.vfs.stat(m.path("w", "data"), st));
  CHECK(st.st_mode == (S_IFREG | 0444));
  CHECK(st.st_size == 48);
  CHECK(st.st_blocks == 1);
  CHECK(st.st_uid == 7);
  CHECK(st.st_gid == 8);
  CHECK(st.st_mtim.tv_sec == 1234);
  REQUIRE(m.vfs.stat(m.path("w"), st));
  CHECK(st.st_mode == (S_IFDIR | 0555));
  CHECK_FALSE(m.vfs.stat(0, st));
  CHECK_FALSE(m.vfs.stat(m.vfs.node_count() + 1, st));

  auto index = nlohmann::json::parse(m.read_all(m.path("index.json")));
  CHECK(index["tensors"] == 5);
  CHECK(index["entries"][2]["key"] == "a/b");
  CHECK(index["entries"][2]["path"] == "a%2Fb");
  CHECK(index["entries"][4]["nbytes"].is_null());
}

TEST_CASE("contiguous data is a range of the checkpoint; tensor.npy adds a header") {
  Mounted m(checkpoint_with_views());
  CHECK(m.read_all(m.path("w", "data")) == floats(12));
  std::string npy = m.read_all(m.path("w", "tensor.npy"));
  std::string header = npy_header("<f4", {3, 4});
  CHECK(npy == header + floats(12));
  SUBCASE("every slice across the header/data boundary") {
    for (std::size_t off = 0; off < npy.size(); off += 7) {
      for (std::size_t len : {1, 5, 64, 1000}) {
        CHECK(m.read_all(m.path("w", "tensor.npy"), off, len) == npy.substr(off, len));
      }
    }
  }
  SUBCASE("reads past the end are empty") {
    CHECK(m.read_all(m.path("w", "data"), 48, 10).empty());
    CHECK(m.read_all(m.path("w", "data"), 1000, 10).empty());
  }
}

TEST_CASE("strided views are gathered in C order") {
  Mounted m(checkpoint_with_views());
  CHECK(m.read_all(m.path("w.T", "data")) ==
        floats_at({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  CHECK(m.read_all(m.path("a%2Fb", "data")) == floats_at({1, 3, 7, 9}));
  CHECK(m.read_all(m.path("x", "data")) == floats_at({0, 1, 2, 0, 1, 2}));  // stride 0
  std::string all = m.read_all(m.path("w.T", "data"));
  for (std::size_t off = 0; off < all.size(); ++off) {
    for (std::size_t len = 1; off + len <= all.size(); len += 3) {
      CHECK(m.read_all(m.path("w.T", "data"), off, len) == all.substr(off, len));
    }
  }
}

TEST_CASE("meta.json describes the view and its sharing") {
  Mounted m(checkpoint_with_views());
  auto meta = nlohmann::json::parse(m.read_all(m.path("w.T", "meta.json")));
  CHECK(meta["key"] == "w.T");
  CHECK(meta["stride"] == nlohmann::json::array({1, 4}));
  CHECK(meta["contiguous"] == false);
  CHECK(meta["file_offset"].is_null());
  CHECK(meta["numpy"] == "<f4");
  CHECK(meta["storage"]["record"] == "archive/data/0");
  CHECK(meta["shared_with"] == nlohmann::json::array({"w", "a/b", "x", "bad"}));
  auto bad = nlohmann::json::parse(m.read_all(m.path("bad", "meta.json")));
  CHECK(bad["broken"] == "its view needs 56 bytes of storage \"0\" but it has 48");
}

TEST_CASE("sources: meta.json and index.json name each tensor's file; nodes know theirs") {
  std::string one = safetensors_file({{"a", "F32", {2}, floats(2)}}, {{"format", "pt"}});
  std::string two = safetensors_file({{"b", "U8", {3}, "xyz"}});
  MemorySource first(one, "one.safetensors"), second(two, "two.safetensors");
  ShardIndex index;
  index.shards = {"sub/one.safetensors", "two.safetensors"};
  index.weight_map = {{"b", 1}, {"a", 0}, {"gone", 1}};
  index.metadata = {{"note", "hi"}};
  std::vector<Model> shards;
  shards.push_back(read_safetensors(first, "sub/one.safetensors"));
  shards.push_back(read_safetensors(second, "two.safetensors"));
  Vfs vfs(combine_shards(index, std::move(shards)), {.source_path = "/models/x"});
  const ByteSource* sources[] = {&first, &second};
  auto read = [&](std::string_view dir, std::string_view file) {
    Vfs::Ino ino = vfs.lookup(Vfs::root_ino, dir);
    if (!file.empty()) ino = vfs.lookup(ino, file);
    REQUIRE(ino != 0);
    std::vector<ReadPiece> pieces;
    std::vector<char> scratch;
    vfs.read(ino, 0, 1 << 20, sources, pieces, scratch);
    std::string out;
    for (const auto& p : pieces) {
      out += p.memory ? std::string(p.memory, p.length)
                      : sources[p.source]->read_string(p.source_offset, p.length);
    }
    return out;
  };
  auto index_json = nlohmann::json::parse(read("index.json", ""));
  CHECK(index_json["format"] == "sharded");
  CHECK(index_json["source"] == "/models/x");
  CHECK(index_json["sources"] == nlohmann::json::array({"sub/one.safetensors", "two.safetensors"}));
  CHECK(index_json["metadata"] == nlohmann::json::object({{"note", "hi"}}));
  CHECK(index_json["total_bytes"] == 11);  // 8 + 3; the broken "gone" counts nothing
  auto meta_a = nlohmann::json::parse(read("a", "meta.json"));
  CHECK(meta_a["source"] == "sub/one.safetensors");
  CHECK(meta_a["file_offset"] == one.size() - 8);  // in its own file
  CHECK(nlohmann::json::parse(read("b", "meta.json"))["source"] == "two.safetensors");
  auto meta_gone = nlohmann::json::parse(read("gone", "meta.json"));
  CHECK(meta_gone["source"].is_null());
  CHECK(meta_gone["broken"] == "the index puts it in \"two.safetensors\", which has no tensor of "
                               "that name");
  CHECK(read("b", "data") == "xyz");
  // Opens check the source of what they open: a tensor's files, its file; the rest, every file.
  auto node = [&](std::string_view dir, std::string_view file = {}) {
    Vfs::Ino d = vfs.lookup(Vfs::root_ino, dir);
    return vfs.node(file.empty() ? d : vfs.lookup(d, file));
  };
  CHECK(node("a", "data")->source == 0);
  CHECK(node("a", "meta.json")->source == 0);
  CHECK(node("b", "tensor.npy")->source == 1);
  CHECK(node("b")->source == 1);
  CHECK(node("gone", "meta.json")->source == Vfs::every_source);
  CHECK(node("index.json")->source == Vfs::every_source);
  CHECK(vfs.node(Vfs::root_ino)->source == Vfs::every_source);
}

TEST_SUITE_END();
