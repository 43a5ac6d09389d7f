// SPDX-License-Identifier: MIT
// Unit tests of the virtual tree: layout, names, attributes, and reads of every kind of extent.
#include "support/fake_checkpoint.hpp"

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

TEST_SUITE_END();
