// SPDX-License-Identifier: MIT
// Unit tests of the tree: layout, names, attributes, laziness, and reads of every kind of file,
// the safetensors export included.
#include "support/fake_checkpoint.hpp"
#include "support/safetensors_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/names.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/safetensors/sharded_reader.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/format/torch/torch_writer.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/view/convert.hpp>
#include <ckptfs/view/npy.hpp>
#include <ckptfs/view/tree.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstring>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

// Child i of `dir`: its name and inode.
std::pair<std::string, Tree::Ino> child_of(const Tree& tree, Tree::Ino dir, std::size_t i) {
  std::string name;
  const Tree::Ino ino = tree.child(dir, i, name);
  return {name, ino};
}

TreeOptions with_times(TreeOptions options) {
  options.times.mtime_sec = 1234;
  return options;
}

struct Mounted {
  MemorySource source;
  Tree tree;
  explicit Mounted(const std::string& bytes, TreeOptions options = {})
      : source(bytes), tree(read_torch(source, "test.pth"), with_times(options)) {}

  std::string read_all(Tree::Ino ino, std::uint64_t offset = 0, std::size_t length = 1 << 20) {
    ReadBuffer buffer;
    const ByteSource* sources[] = {&source};
    tree.read(ino, offset, length, sources, buffer);
    std::string out;
    for (const auto& p : buffer.pieces()) {
      if (p.memory) {
        out.append(p.memory, p.length);
      } else {
        out += source.read_string(p.source_offset, p.length);
      }
    }
    return out;
  }
  Tree::Ino path(std::string_view dir, std::string_view file = {}) {
    Tree::Ino d = tree.lookup(Tree::root_ino, dir);
    return file.empty() || d == 0 ? d : tree.lookup(d, file);
  }
  // A file of .ckptfs, the whole-checkpoint views.
  Tree::Ino view(std::string_view file) {
    const Tree::Ino d = tree.lookup(Tree::root_ino, ".ckptfs");
    REQUIRE(d == Tree::views_ino);
    return tree.lookup(d, file);
  }
  std::vector<std::string> list(Tree::Ino dir) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < tree.child_count(dir); ++i)
      names.emplace_back(child_of(tree, dir, i).first);
    return names;
  }
};

// Views of one storage (transposed, strided, expanded), a key that needs escaping, and (unless
// `with_broken` is false) "bad", a view past its storage: broken.
std::string checkpoint_with_views(bool with_broken = true) {
  // (FakeTensor's shapes are initializer lists: each vector is made and used in one expression.)
  if (!with_broken) {
    return torch_zip(state_dict_pickle({{"w", "0", 12, 0, {3, 4}, {4, 1}},
                                        {"w.T", "0", 12, 0, {4, 3}, {1, 4}},
                                        {"a/b", "0", 12, 1, {2, 2}, {6, 2}},
                                        {"x", "0", 12, 0, {2, 3}, {0, 1}}}),
                     {{"0", floats(12)}});
  }
  return torch_zip(state_dict_pickle({{"w", "0", 12, 0, {3, 4}, {4, 1}},
                                      {"w.T", "0", 12, 0, {4, 3}, {1, 4}},
                                      {"a/b", "0", 12, 1, {2, 2}, {6, 2}},
                                      {"x", "0", 12, 0, {2, 3}, {0, 1}},
                                      {"bad", "0", 12, 10, {4}, {1}}}),
                   {{"0", floats(12)}});
}

// "" when the tree serves file `ino`; else the message of the Error(io) that a read of it throws,
// before it reads any source.
std::string refused_read(const Tree& tree, Tree::Ino ino) {
  const auto node = tree.node(ino);
  REQUIRE(node);
  if (!tree.refusal(*node)) return {};
  ReadBuffer buffer;
  try {
    tree.read(ino, 0, 4096, {}, buffer);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::io);
    return e.what();
  }
  FAIL("a refused file was read");
  return {};
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

TEST_SUITE_BEGIN("tree");

TEST_CASE("the tree: a directory per entry, files per kind, and .ckptfs's views") {
  Mounted m(checkpoint_with_views(),
            {.source_path = "x.pth", .uid = 7, .gid = 8, .modes = {0640, 0750}});
  CHECK(m.list(Tree::root_ino) ==
        std::vector<std::string>{".ckptfs", "w", "w.T", "a%2Fb", "x", "bad"});
  CHECK(m.list(Tree::views_ino) == std::vector<std::string>{"index.json", "model.safetensors"});
  CHECK(m.tree.parent(m.view("index.json")) == Tree::views_ino);
  CHECK(m.tree.parent(Tree::views_ino) == Tree::root_ino);
  CHECK(m.path("index.json") == 0);  // the views are in .ckptfs only
  CHECK(m.path("model.safetensors") == 0);
  CHECK(m.view("w") == 0);
  CHECK(m.list(m.path("w")) ==
        std::vector<std::string>{"data", "meta.json", "tensor.npy", "tensor.pt"});
  // Broken: its files all the same (their reads fail, see "a broken tensor keeps its files").
  CHECK(m.list(m.path("bad")) ==
        std::vector<std::string>{"data", "meta.json", "tensor.npy", "tensor.pt"});
  CHECK(m.path("a%2Fb", "data") != 0);
  CHECK(m.path("bad", "data") == m.path("bad") + 1);
  CHECK(m.path("nope") == 0);
  CHECK(m.tree.lookup(m.path("w", "data"), "x") == 0);  // not a directory
  for (std::size_t i = 0; i < m.tree.child_count(Tree::root_ino); ++i) {
    auto [name, ino] = child_of(m.tree, Tree::root_ino, i);
    CHECK(m.tree.lookup(Tree::root_ino, name) == ino);
    CHECK(m.tree.parent(ino) == Tree::root_ino);
    for (std::size_t j = 0; j < m.tree.child_count(ino); ++j) {
      auto [file, file_ino] = child_of(m.tree, ino, j);
      CHECK(m.tree.lookup(ino, file) == file_ino);
      CHECK(m.tree.parent(file_ino) == ino);
    }
  }

  struct stat st {};
  REQUIRE(m.tree.stat(m.path("w", "data"), st));
  CHECK(st.st_mode == (S_IFREG | 0640));
  CHECK(st.st_size == 48);
  CHECK(st.st_blocks == 1);
  CHECK(st.st_uid == 7);
  CHECK(st.st_gid == 8);
  CHECK(st.st_mtim.tv_sec == 1234);
  REQUIRE(m.tree.stat(m.path("w"), st));
  CHECK(st.st_mode == (S_IFDIR | 0750));
  CHECK(st.st_nlink == 2);
  for (Tree::Ino dir : {Tree::root_ino, Tree::views_ino}) {
    REQUIRE(m.tree.stat(dir, st));
    CHECK(st.st_mode == (S_IFDIR | 0750));
  }
  CHECK(st.st_nlink == 2);  // .ckptfs
  REQUIRE(m.tree.stat(m.view("index.json"), st));
  CHECK(st.st_mode == (S_IFREG | 0640));
  REQUIRE(m.tree.stat(Tree::root_ino, st));
  CHECK(st.st_nlink == 2 + 1 + 5);  // ".", "..", .ckptfs's and each entry's ".."
  CHECK_FALSE(m.tree.stat(0, st));
  CHECK_FALSE(m.tree.stat(m.tree.node_count_hint() + 1, st));
  CHECK_FALSE(m.tree.stat(m.path("bad") + 5, st));  // past the last entry's files

  auto index = nlohmann::json::parse(m.read_all(m.view("index.json")));
  CHECK(index["tensors"] == 5);
  CHECK(index["entries"][2]["key"] == "a/b");
  CHECK(index["entries"][2]["path"] == "a%2Fb");
  CHECK(index["entries"][4]["nbytes"].is_null());  // broken: its meta.json says why
}

TEST_CASE("files=: a tensor's directory holds the chosen files, each at its own inode") {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("w").tensor_v2("FloatStorage", "0", "cpu", 12, 0, {3, 4}, {4, 1});
  p.binunicode("bad").tensor_v2("FloatStorage", "0", "cpu", 12, 10, {4}, {1});
  p.binunicode("epoch").binint1(7);
  p.setitems().stop();
  const std::string file = torch_zip(p.bytes(), {{"0", floats(12)}});
  Mounted all(file);
  struct Case {
    std::uint8_t files;
    std::vector<std::string> listed;
  };
  for (const Case& c :
       {Case{key_data | key_meta_json, {"data", "meta.json"}}, Case{key_tensor_npy, {"tensor.npy"}},
        Case{key_meta_json | key_tensor_pt, {"meta.json", "tensor.pt"}},
        Case{all_key_files, {"data", "meta.json", "tensor.npy", "tensor.pt"}}}) {
    CAPTURE(key_files_text(c.files));
    Mounted m(file, {.files = c.files});
    CHECK(m.list(m.path("w")) == c.listed);
    // A value keeps value.json whatever files= says; a broken tensor the files chosen.
    CHECK(m.list(m.path("epoch")) == std::vector<std::string>{"value.json"});
    CHECK(m.list(m.path("bad")) == c.listed);
    for (std::size_t slot = 0; slot < 4; ++slot) {
      const std::string name = key_files_text(static_cast<std::uint8_t>(1u << slot));
      CAPTURE(name);
      const Tree::Ino ino = m.path("w", name);
      struct stat st {};
      if ((c.files & (1u << slot)) == 0) {
        CHECK(ino == 0);
        // Its inode is no node: a file left out cannot be reached by number either.
        CHECK_FALSE(m.tree.node(m.path("w") + 1 + slot));
        CHECK_FALSE(m.tree.stat(m.path("w") + 1 + slot, st));
        continue;
      }
      // The same inode and bytes as in a mount of every file.
      CHECK(ino == all.path("w", name));
      CHECK(m.tree.parent(ino) == m.path("w"));
      CHECK(m.read_all(ino) == all.read_all(all.path("w", name)));
    }
    CHECK(m.tree.lookup(m.path("w"), "value.json") == 0);
  }
}

TEST_CASE("key_file_bit, key_files_text: the names -o files= takes") {
  CHECK(key_file_bit("data") == key_data);
  CHECK(key_file_bit("meta.json") == key_meta_json);
  CHECK(key_file_bit("tensor.npy") == key_tensor_npy);
  CHECK(key_file_bit("npy") == key_tensor_npy);
  CHECK(key_file_bit("tensor.pt") == key_tensor_pt);
  CHECK(key_file_bit("pt") == key_tensor_pt);
  CHECK(key_file_bit("value.json") == 0);  // a value's directory always holds it
  for (const char* wrong : {"", "meta", "tensor", "DATA", "data ", "index.json", ".ckptfs"}) {
    CAPTURE(wrong);
    CHECK_FALSE(key_file_bit(wrong));
  }
  CHECK(key_files_text(key_tensor_pt | key_data) == "data,tensor.pt");
  CHECK(key_files_text(all_key_files) == "data,meta.json,tensor.npy,tensor.pt");
}

TEST_CASE("modes follow the checkpoint's, umask= overrides") {
  auto modes = [](Modes m) { return std::pair{m.file, m.directory}; };
  CHECK(modes(modes_following(0644)) == std::pair<mode_t, mode_t>{0644, 0755});
  CHECK(modes(modes_following(0600)) == std::pair<mode_t, mode_t>{0600, 0700});
  CHECK(modes(modes_following(0640)) == std::pair<mode_t, mode_t>{0640, 0750});
  CHECK(modes(modes_following(0664)) == std::pair<mode_t, mode_t>{0664, 0775});
  // Read-only: copies' directories stay removable by their owner.
  CHECK(modes(modes_following(0444)) == std::pair<mode_t, mode_t>{0444, 0755});
  CHECK(modes(modes_following(0400)) == std::pair<mode_t, mode_t>{0400, 0700});
  // Never an execute bit on a file, nor a special bit anywhere; a directory's own mode (0755)
  // gives 0644 and 0755.
  CHECK(modes(modes_following(S_IFDIR | 0755)) == std::pair<mode_t, mode_t>{0644, 0755});
  CHECK(modes(modes_following(S_IFREG | 04777)) == std::pair<mode_t, mode_t>{0666, 0777});
  CHECK(modes(modes_from_umask(0222)) == std::pair<mode_t, mode_t>{0444, 0555});
  CHECK(modes(modes_from_umask(022)) == std::pair<mode_t, mode_t>{0644, 0755});
  CHECK(modes(modes_from_umask(0227)) == std::pair<mode_t, mode_t>{0440, 0550});
  CHECK(modes(modes_from_umask(0)) == std::pair<mode_t, mode_t>{0666, 0777});
  // The tree shows them, nothing else.
  Mounted m(checkpoint_with_views(), {.modes = modes_following(0600)});
  struct stat st {};
  REQUIRE(m.tree.stat(m.path("w", "tensor.pt"), st));
  CHECK(st.st_mode == (S_IFREG | 0600));
  REQUIRE(m.tree.stat(m.path("w"), st));
  CHECK(st.st_mode == (S_IFDIR | 0700));
  REQUIRE(m.tree.stat(Tree::views_ino, st));
  CHECK(st.st_mode == (S_IFDIR | 0700));
}

TEST_CASE("entries with the same text each get their name, literal keys keep the rule's") {
  Mounted m(torch_zip(state_dict_pickle({{"a.b", "0", 2, 0, {2}, {1}},
                                         {"a.b#2", "0", 2, 0, {2}, {1}},
                                         {"model.safetensors", "0", 2, 0, {2}, {1}}}),
                      {{"0", floats(2)}}));
  CHECK(m.list(Tree::root_ino) ==
        std::vector<std::string>{".ckptfs", "a.b", "a.b#2", "%model.safetensors"});
}

TEST_CASE("contiguous data is a range of the checkpoint, tensor.npy adds a header") {
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
  CHECK(m.read_all(m.path("w.T", "data")) == floats_at({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
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

TEST_CASE("model.safetensors: every tensor, valid by the format's rules, bytes exact") {
  Mounted m(checkpoint_with_views(false));
  std::string file = m.read_all(m.view("model.safetensors"));
  struct stat st {};
  REQUIRE(m.tree.stat(m.view("model.safetensors"), st));
  CHECK(static_cast<std::size_t>(st.st_size) == file.size());
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  CHECK(n % 8 == 0);  // padded with spaces to 8
  auto header = nlohmann::json::parse(file.substr(8, n));
  CHECK(header["__metadata__"] == nlohmann::json({{"format", "pt"}}));
  const std::string data = file.substr(8 + n);
  // Every tensor, contiguous in entry order, gathered.
  std::uint64_t at = 0;
  for (const char* key : {"w", "w.T", "a/b", "x"}) {
    CAPTURE(key);
    auto t = header[key];
    CHECK(t["dtype"] == "F32");
    CHECK(t["data_offsets"][0] == at);
    at = t["data_offsets"][1];
    const std::string dir = key == std::string("a/b") ? "a%2Fb" : key;
    CHECK(data.substr(t["data_offsets"][0], at - t["data_offsets"][0].get<std::uint64_t>()) ==
          m.read_all(m.path(dir, "data")));
  }
  CHECK(at == data.size());
  SUBCASE("any slice reads the same bytes") {
    for (std::size_t off = 0; off < file.size(); off += 13) {
      for (std::size_t len : {1, 7, 100, 4096}) {
        CHECK(m.read_all(m.view("model.safetensors"), off, len) == file.substr(off, len));
      }
    }
  }
}

TEST_CASE("a broken tensor keeps its files, at the sizes they would have, and their reads fail") {
  Mounted m(checkpoint_with_views());
  const Tree::Ino dir = m.path("bad");
  const std::string why = "its view needs 56 bytes of storage \"0\" but it has 48";
  struct stat st {};
  REQUIRE(m.tree.stat(m.path("bad", "data"), st));
  CHECK(st.st_size == 16);  // 4 float32, as its dtype and shape say
  REQUIRE(m.tree.stat(m.path("bad", "tensor.npy"), st));
  CHECK(static_cast<std::size_t>(st.st_size) == npy_header("<f4", {4}).size() + 16);
  REQUIRE(m.tree.stat(m.path("bad", "tensor.pt"), st));
  CHECK(
      static_cast<std::uint64_t>(st.st_size) ==
      tensor_file({DType::float32, {4}, false, std::nullopt}, {.prefix = "tensor"}).plan().size());
  // meta.json says why, and the size of data.
  const auto meta = nlohmann::json::parse(m.read_all(m.path("bad", "meta.json")));
  CHECK(meta["broken"] == why);
  CHECK(meta["nbytes"] == 16);
  CHECK_FALSE(m.tree.refusal(*m.tree.node(m.path("bad", "meta.json"))));
  CHECK_FALSE(m.tree.refusal(*m.tree.node(m.path("w", "data"))));
  const std::string said = "tensor \"bad\" is broken (" + why +
                           "): every read of its bytes fails with EIO (ckptfs inspect lists the "
                           "broken tensors)";
  for (const char* file : {"data", "tensor.npy", "tensor.pt"}) {
    CAPTURE(file);
    const auto refusal = m.tree.refusal(*m.tree.node(m.path("bad", file)));
    REQUIRE(refusal);
    CHECK(refusal->why == said);
    CHECK(refusal->group == dir);  // one per tensor: logged once, whichever file is read
    CHECK(refused_read(m.tree, m.path("bad", file)) == said);  // never a short read
  }
  SUBCASE("a size no file can have: data of 0 bytes, tensor.npy its header, no tensor.pt") {
    PickleBuilder p;
    p.proto(2).empty_dict().mark();
    p.binunicode("huge").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {1ll << 31, 1ll << 31},
                                   {0, 0});  // 2^64 bytes
    p.setitems().stop();
    Mounted h(torch_zip(p.bytes(), {{"0", floats(1)}}));
    CHECK(h.list(h.path("huge")) == std::vector<std::string>{"data", "meta.json", "tensor.npy"});
    REQUIRE(h.tree.stat(h.path("huge", "data"), st));
    CHECK(st.st_size == 0);
    REQUIRE(h.tree.stat(h.path("huge", "tensor.npy"), st));
    CHECK(static_cast<std::size_t>(st.st_size) == npy_header("<f4", {1ll << 31, 1ll << 31}).size());
    CHECK(nlohmann::json::parse(h.read_all(h.path("huge", "meta.json")))["nbytes"] == 0);
    // Refused all the same, though the read is past the end: an open fails (EIO) before.
    CHECK(refused_read(h.tree, h.path("huge", "data")).find("more bytes than a file can") !=
          std::string::npos);
  }
}

TEST_CASE("a tensor.pt whose per-channel scales are broken is refused, its data is not") {
  // A per-channel quantized qint8 [2, 2] whose scales' record is missing.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("pc").global("torch._utils", "_rebuild_qtensor").mark();
  p.mark().binunicode("storage").global("torch", "QInt8Storage").binunicode("1");
  p.binunicode("cpu").integer(4).tuple().binpersid();
  p.integer(0).int_tuple({2, 2}).int_tuple({2, 1});
  p.mark().global("torch", "per_channel_affine");
  p.tensor_v2("DoubleStorage", "2", "cpu", 2, 0, {2}, {1});
  p.tensor_v2("LongStorage", "3", "cpu", 2, 0, {2}, {1});
  p.integer(1).tuple();
  p.newfalse().global("collections", "OrderedDict").empty_tuple().reduce();
  p.tuple().reduce();
  p.setitems().stop();
  Mounted m(torch_zip(p.bytes(), {{"1", std::string(4, '\2')}, {"3", std::string(16, '\0')}}));
  REQUIRE(m.tree.model().entries.size() == 3);
  REQUIRE_FALSE(m.tree.model().tensors[m.tree.model().entries[1].tensor].broken.empty());
  CHECK(m.read_all(m.path("pc", "data")) == std::string(4, '\2'));
  REQUIRE(m.path("pc", "tensor.pt") != 0);
  const std::string why = refused_read(m.tree, m.path("pc", "tensor.pt"));
  CHECK(why.starts_with("the per-channel scales of tensor \"pc\" are broken ("));
  CHECK(why.ends_with("): every read of its tensor.pt fails with EIO"));
}

TEST_CASE("an export that would lack a broken tensor is listed, and its reads fail saying why") {
  const std::string said =
      ".ckptfs/model.safetensors would lack 1 broken tensor: \"bad\" (its view needs 56 bytes of "
      "storage \"0\" but it has 48); it fails with EIO rather than lack it: .ckptfs/index.json's "
      "\"exports\" lists what each view lacks, and ckptfs pack --keys writes the others";
  Mounted m(checkpoint_with_views());
  const auto refusal = m.tree.refusal(*m.tree.node(m.view("model.safetensors")));
  REQUIRE(refusal);
  CHECK(refusal->why == said);
  CHECK(refusal->group == Tree::views_ino);
  CHECK(refused_read(m.tree, m.view("model.safetensors")) == said);
  // index.json says what each export lacks, and why it fails.
  CHECK_FALSE(m.tree.refusal(*m.tree.node(m.view("index.json"))));
  const auto index = nlohmann::json::parse(m.read_all(m.view("index.json")));
  CHECK(index["exports"] ==
        nlohmann::json::parse(R"([{"files": ["model.safetensors"], "fails": )" +
                              nlohmann::json(said).dump() +
                              R"(, "lacks": [{"key": "bad", "why": "broken"}]}])"));
  SUBCASE("shards: every file of the set, its index too") {
    Mounted sharded(checkpoint_with_views(), {.shard_size = 64});
    const std::vector<std::string> files = sharded.list(Tree::views_ino);
    CHECK(files.size() == 5);  // index.json, the set's index, 3 shards
    for (const std::string& file : files) {
      CAPTURE(file);
      const std::string why = refused_read(sharded.tree, sharded.view(file));
      if (file == "index.json") {
        CHECK(why.empty());
        continue;
      }
      CHECK(
          why.starts_with(".ckptfs/model.safetensors.index.json and its 3 shards would lack 1 "
                          "broken tensor: \"bad\" ("));
      CHECK(why.find("; they fail with EIO rather than lack it") != std::string::npos);
    }
  }
  SUBCASE("many: the first with why, the next two, and how many more") {
    Mounted many(torch_zip(state_dict_pickle({{"ok", "0", 4, 0, {4}, {1}},
                                              {"b0", "0", 4, 1, {4}, {1}},
                                              {"b1", "0", 4, 2, {4}, {1}},
                                              {"b2", "0", 4, 3, {4}, {1}},
                                              {"b3", "0", 4, 4, {4}, {1}},
                                              {"b4", "0", 4, 5, {4}, {1}}}),
                           {{"0", floats(4)}}));
    const std::string why = refused_read(many.tree, many.view("model.safetensors"));
    CHECK(
        why.starts_with(".ckptfs/model.safetensors would lack 5 broken tensors: \"b0\" (its "
                        "view needs 20 bytes"));
    CHECK(why.find("), \"b1\", \"b2\" and 2 more; it fails with EIO rather than lack them: ") !=
          std::string::npos);
  }
}

TEST_CASE("index.json: what the export cannot hold is said, and reading it does not fail") {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("w").tensor_v2("FloatStorage", "0", "cpu", 4, 0, {4}, {1});
  p.binunicode("c").tensor_v2("ComplexDoubleStorage", "1", "cpu", 1, 0, {1}, {1});
  p.setitems().stop();
  Mounted m(torch_zip(p.bytes(), {{"0", floats(4)}, {"1", std::string(16, '\0')}}));
  CHECK_FALSE(m.tree.refusal(*m.tree.node(m.view("model.safetensors"))));
  CHECK(m.read_all(m.view("model.safetensors")).size() > 16);
  const auto index = nlohmann::json::parse(m.read_all(m.view("index.json")));
  CHECK(index["exports"] == nlohmann::json::parse(R"([{"files": ["model.safetensors"],
      "fails": null, "lacks": [{"key": "c", "why": "safetensors has no dtype complex128"}]}])"));
}

TEST_CASE("size_known: false for a root file made from every entry until it is counted or made") {
  auto known = [](Mounted& m, std::string_view dir, std::string_view file = {}) {
    return m.tree.size_known(*m.tree.node(m.path(dir, file)));
  };
  auto view_known = [](Mounted& m, std::string_view file) {
    return m.tree.size_known(*m.tree.node(m.view(file)));
  };
  struct stat st {};
  SUBCASE("split layout") {
    Mounted m(checkpoint_with_views(false));
    CHECK_FALSE(view_known(m, "index.json"));
    CHECK_FALSE(view_known(m, "model.safetensors"));
    CHECK(known(m, ".ckptfs"));
    CHECK(known(m, "w"));
    CHECK(known(m, "w", "data"));
    CHECK(known(m, "w", "tensor.npy"));  // one entry's own work, made for its stat
    REQUIRE(m.tree.stat(m.view("index.json"), st));
    CHECK(view_known(m, "index.json"));
    CHECK_FALSE(view_known(m, "model.safetensors"));
    m.read_all(m.view("model.safetensors"));
    CHECK(view_known(m, "model.safetensors"));
  }
  SUBCASE("shards: laid out at mount") {
    Mounted m(checkpoint_with_views(), {.shard_size = 64});
    CHECK(view_known(m, "model.safetensors.index.json"));
    CHECK(view_known(m, "model-00001-of-00003.safetensors"));
    CHECK_FALSE(view_known(m, "index.json"));
  }
  SUBCASE("layout=rfc: map.pt") {
    Mounted m(checkpoint_with_views(), {.layout = Layout::rfc});
    CHECK_FALSE(known(m, "map.pt"));
    CHECK_FALSE(view_known(m, "index.json"));
    REQUIRE(m.tree.stat(m.path("map.pt"), st));
    CHECK(known(m, "map.pt"));
  }
}

TEST_CASE("shard_size: the sharded set as save_pretrained splits it") {
  // Tensors of 48, 48, 16, 24 bytes in shards of at most 64 bytes: [w], [w.T, a/b], [x].
  Mounted m(checkpoint_with_views(false), {.shard_size = 64});
  CHECK(m.list(Tree::root_ino) == std::vector<std::string>{".ckptfs", "w", "w.T", "a%2Fb", "x"});
  const std::vector<std::string> views{
      "index.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
      "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
  CHECK(m.list(Tree::views_ino) == views);
  for (std::size_t i = 0; i < views.size(); ++i) {
    CHECK(m.view(views[i]) == child_of(m.tree, Tree::views_ino, i).second);
  }
  // Names like a shard's that are none: found by place, checked by name.
  for (const char* absent :
       {"model-00004-of-00003.safetensors", "model-00000-of-00003.safetensors",
        "model-2-of-00003.safetensors", "model-00002-of-00004.safetensors",
        "model-99999999999999999999999-of-00003.safetensors", "model-", "model.safetensors", "w"}) {
    CAPTURE(absent);
    CHECK(m.view(absent) == 0);
  }
  auto index = nlohmann::json::parse(m.read_all(m.view("model.safetensors.index.json")));
  CHECK(index["metadata"]["total_size"] == 48 + 48 + 16 + 24);
  CHECK(index["weight_map"] == nlohmann::json({{"w", "model-00001-of-00003.safetensors"},
                                               {"w.T", "model-00002-of-00003.safetensors"},
                                               {"a/b", "model-00002-of-00003.safetensors"},
                                               {"x", "model-00003-of-00003.safetensors"}}));
  std::string second = m.read_all(m.view("model-00002-of-00003.safetensors"));
  std::uint64_t n = 0;
  std::memcpy(&n, second.data(), 8);
  auto header = nlohmann::json::parse(second.substr(8, n));
  CHECK(header["w.T"]["data_offsets"] == nlohmann::json::array({0, 48}));
  CHECK(header["a/b"]["data_offsets"] == nlohmann::json::array({48, 64}));
  CHECK(second.substr(8 + n, 48) == m.read_all(m.path("w.T", "data")));
}

TEST_CASE("dtype=float16: floating tensors served converted, described as served") {
  // Float32 0..11 as a plain, a transposed and a stride-0 view, and an int64 tensor.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("w").tensor_v2("FloatStorage", "0", "cpu", 12, 0, {3, 4}, {4, 1});
  p.binunicode("w.T").tensor_v2("FloatStorage", "0", "cpu", 12, 0, {4, 3}, {1, 4});
  p.binunicode("i").tensor_v2("LongStorage", "1", "cpu", 2, 0, {2}, {1});
  p.setitems().stop();
  const std::string file = torch_zip(p.bytes(), {{"0", floats(12)}, {"1", std::string(16, '\7')}});
  Mounted plain(file);
  Mounted half(file, {.dtype = DType::float16});
  for (const char* key : {"w", "w.T"}) {
    CAPTURE(key);
    const std::string f32 = plain.read_all(plain.path(key, "data"));
    std::string want(f32.size() / 2, '\0');
    convert(DType::float32, DType::float16, false, reinterpret_cast<const std::byte*>(f32.data()),
            reinterpret_cast<std::byte*>(want.data()), f32.size() / 4);
    CHECK(half.read_all(half.path(key, "data")) == want);
    for (std::size_t off = 0; off < want.size(); ++off) {  // every offset, odd ones included
      CHECK(half.read_all(half.path(key, "data"), off, 3) == want.substr(off, 3));
    }
    CHECK(half.read_all(half.path(key, "tensor.npy")).ends_with(want));
    auto meta = nlohmann::json::parse(half.read_all(half.path(key, "meta.json")));
    CHECK(meta["dtype"] == "float16");
    CHECK(meta["stored_dtype"] == "float32");
    CHECK(meta["nbytes"] == want.size());
    CHECK(meta["numpy"] == "<f2");
    CHECK(meta["file_offset"].is_null());
    CHECK(meta["contiguous"] == false);
  }
  // Integers are served as stored.
  CHECK(half.read_all(half.path("i", "data")) == std::string(16, '\7'));
  auto meta = nlohmann::json::parse(half.read_all(half.path("i", "meta.json")));
  CHECK(meta["dtype"] == "int64");
  CHECK_FALSE(meta["file_offset"].is_null());
  // model.safetensors holds the converted bytes, as F16.
  const std::string st = half.read_all(half.view("model.safetensors"));
  std::uint64_t n = 0;
  std::memcpy(&n, st.data(), 8);
  auto header = nlohmann::json::parse(st.substr(8, n));
  CHECK(header["w"]["dtype"] == "F16");
  CHECK(header["i"]["dtype"] == "I64");
  CHECK(st.substr(8 + n, 24) == half.read_all(half.path("w", "data")));
}

// tensor.pt as the writer would stream it, the data record being `data`.
std::string expected_torch_file(const Model& model, const Tensor& tensor, const std::string& data,
                                DType dtype) {
  TensorFileSpec spec = tensor_file_spec(model, tensor);
  spec.dtype = dtype;
  TorchArchive archive = tensor_file(spec, {.prefix = "tensor"});
  std::string out;
  archive.write([&](std::string_view b) { out += b; },
                [&](std::size_t, ZipStreamWriter& z) { z.write(data); });
  return out;
}

TEST_CASE("tensor.pt: the writer's archive, data spliced or gathered, CRCs made on need") {
  Mounted m(checkpoint_with_views());
  for (const char* key : {"w", "w.T", "x"}) {
    CAPTURE(key);
    const Tree::Ino pt = m.path(key, "tensor.pt");
    REQUIRE(pt != 0);
    const Entry& e = m.tree.model().entries[m.tree.node(m.path(key))->index];
    const Tensor& t = m.tree.model().tensors[e.tensor];
    const std::string want =
        expected_torch_file(m.tree.model(), t, m.read_all(m.path(key, "data")), t.dtype);
    struct stat st {};
    REQUIRE(m.tree.stat(pt, st));
    CHECK(static_cast<std::size_t>(st.st_size) == want.size());  // known before any CRC
    CHECK(m.read_all(pt) == want);
    for (std::size_t off = 0; off < want.size(); off += 29) {  // any slice, the tail first too
      CHECK(m.read_all(pt, want.size() - 1 - off, 41) == want.substr(want.size() - 1 - off, 41));
    }
    // Our own readers take it back: one tensor, the same bytes.
    MemorySource file(want);
    ZipArchive zip(file);
    const ZipEntry* record = zip.find("tensor/data/0");
    REQUIRE(record);
    CHECK(record->data_offset % 64 == 0);  // aligned, as torch.load(mmap=True) needs
    CHECK(file.read_string(record->data_offset, record->size) == m.read_all(m.path(key, "data")));
  }
  CHECK(m.path("bad", "tensor.pt") != 0);  // broken: the file it would be, whose reads fail
}

TEST_CASE("views: sizes counted before their content is made, equal to it") {
  // A tree stats index.json and model.safetensors before anything is read (a listing of
  // .ckptfs), another reads them first: the sizes are the contents'.
  auto check = [](const std::string& file, TreeOptions options) {
    Mounted counted(file, options);
    Mounted built(file, options);
    for (const char* name : {"index.json", "model.safetensors"}) {
      CAPTURE(name);
      struct stat st {};
      REQUIRE(counted.tree.stat(counted.view(name), st));
      if (!refused_read(built.tree, built.view(name)).empty()) {
        // An export that would lack a broken tensor: its size is the layout's all the same.
        REQUIRE(built.tree.stat(built.view(name), st));
        struct stat again {};
        REQUIRE(counted.tree.stat(counted.view(name), again));
        CHECK(st.st_size == again.st_size);
        CHECK(st.st_size > 0);
        continue;
      }
      const std::string content = built.read_all(built.view(name), 0, 64 << 20);
      CHECK(static_cast<std::size_t>(st.st_size) == content.size());
      CHECK(counted.read_all(counted.view(name), 0, 64 << 20) == content);
      REQUIRE(counted.tree.stat(counted.view(name), st));
      CHECK(static_cast<std::size_t>(st.st_size) == content.size());
    }
  };
  SUBCASE("views, an escaped name") { check(checkpoint_with_views(false), {}); }
  SUBCASE("a broken tensor") { check(checkpoint_with_views(), {}); }
  SUBCASE("served converted") { check(checkpoint_with_views(false), {.dtype = DType::float16}); }
  SUBCASE("two tensors with the same key text: the int 0 and the str \"0\"") {
    PickleBuilder p;
    p.proto(2).empty_dict().mark();
    p.binint1(0).tensor_v2("FloatStorage", "0", "cpu", 4, 0, {4}, {1});
    p.binunicode("0").tensor_v2("FloatStorage", "0", "cpu", 4, 0, {2}, {1});
    p.binunicode("0%#2").tensor_v2("FloatStorage", "0", "cpu", 4, 2, {2}, {1});
    p.setitems().stop();
    check(torch_zip(p.bytes(), {{"0", floats(4)}}), {});
  }
  SUBCASE("3000 entries: index.json and the header written in many pieces") {
    PickleBuilder p;
    p.proto(2).empty_dict().mark();
    for (int i = 0; i < 3000; ++i) {
      p.binunicode(i % 7 == 0 ? "layer/" + std::to_string(i) : "layer." + std::to_string(i));
      p.tensor_v2("FloatStorage", "0", "cpu", 64, i % 60, {2, 2}, {2, 1});
    }
    p.setitems().stop();
    check(torch_zip(p.bytes(), {{"0", floats(64)}}), {});
  }
}

TEST_CASE("root names: the entries' keys where the rule keeps them, found by lookup") {
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  for (int i = 0; i < 500; ++i) {
    p.binunicode(i % 3 == 0 ? "w/" + std::to_string(i) : "w." + std::to_string(i));
    p.tensor_v2("FloatStorage", "0", "cpu", 4, 0, {4}, {1});
  }
  p.setitems().stop();
  Mounted m(torch_zip(p.bytes(), {{"0", floats(4)}}));
  REQUIRE(m.tree.child_count(Tree::root_ino) == 501);
  for (int i = 0; i < 500; ++i) {
    const std::string name = (i % 3 == 0 ? "w%2F" : "w.") + std::to_string(i);
    CAPTURE(name);
    CHECK(m.tree.entry_name(static_cast<std::size_t>(i)) == name);
    CHECK(child_of(m.tree, Tree::root_ino, 1 + static_cast<std::size_t>(i)).first == name);
    CHECK(m.tree.lookup(Tree::root_ino, name) ==
          child_of(m.tree, Tree::root_ino, 1 + static_cast<std::size_t>(i)).second);
  }
  CHECK(m.tree.lookup(Tree::root_ino, "w/0") == 0);  // the key, not its name
  CHECK(m.tree.lookup(Tree::root_ino, "w.500") == 0);
  CHECK(m.tree.lookup(Tree::root_ino, "") == 0);
  CHECK(m.tree.lookup(Tree::root_ino, "index.json") == 0);  // in .ckptfs
  CHECK(m.tree.lookup(Tree::root_ino, ".ckptfs") == Tree::views_ino);
}

TEST_CASE("entry names are NameAllocator's, collisions and cut names included") {
  // Keys with the same text (the int 1 and the str "1"; a nested key and a dotted one, long
  // enough to be cut), escaped ones, reserved ones.
  const std::string long_key(300, 'k');
  auto tensor = [](PickleBuilder& p) { p.tensor_v2("FloatStorage", "0", "cpu", 4, 0, {4}, {1}); };
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("a"), tensor(p);
  p.binint1(1), tensor(p);
  p.binunicode("1"), tensor(p);
  p.binunicode("1%#2"), tensor(p);
  p.binunicode("a/b"), tensor(p);
  p.binunicode("a%2Fb"), tensor(p);
  p.binunicode(""), tensor(p);
  p.binunicode("."), tensor(p);
  p.binunicode("index.json"), tensor(p);
  p.binunicode(long_key).empty_dict().binunicode("x"), tensor(p), p.setitem();
  p.binunicode(long_key + ".x"), tensor(p);
  p.binunicode("b\n"), tensor(p);
  p.setitems().stop();
  Mounted m(torch_zip(p.bytes(), {{"0", floats(4)}}));
  REQUIRE(m.tree.model().entries.size() == 12);
  // The rule for keys of equal text skips a number whose "<key>%#<n>" is a key of its own.
  TextViewSet own;
  for (const auto& e : m.tree.model().entries) own.insert(e.key);
  NameAllocator names(max_name_bytes, &own);
  for (std::size_t i = 0; i < m.tree.model().entries.size(); ++i) {
    const std::string& key = m.tree.model().entries[i].key;
    CAPTURE(key);
    const std::string want = names.name(key);
    CHECK(m.tree.entry_name(i) == want);
    CHECK(m.tree.lookup(Tree::root_ino, want) ==
          child_of(m.tree, Tree::root_ino, 1 + static_cast<std::size_t>(i)).second);
  }
  CHECK(m.tree.entry_name(2) == "1%#3");  // "1%#2" is a key of its own
  CHECK(m.tree.entry_name(10).ends_with("%#2"));
}

TEST_CASE("layout=rfc: map.pt, a <name>.pt per entry torch can load alone, .ckptfs/index.json") {
  const std::string long_key(260, 'k');
  auto tensor = [](PickleBuilder& p, std::int64_t offset = 0) {
    p.tensor_v2("FloatStorage", "0", "cpu", 4, offset, {2}, {1});
  };
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("w"), tensor(p);
  p.binunicode("map"), tensor(p);       // the rule's reserved name: %map.pt
  p.binunicode("map.pt"), tensor(p);    // not reserved: map.pt.pt
  p.binunicode("bad"), tensor(p, 10);   // past its storage: broken, its file's reads fail
  p.binunicode("epoch"), p.binint1(7);  // a value JSON holds whole
  p.binunicode(long_key), tensor(p);    // 260 bytes: cut within 252
  p.binunicode("opaque").global("argparse", "Namespace").empty_tuple().reduce();  // described only
  p.binunicode(std::string(252, 'x')), tensor(p);  // 252 bytes: its own name
  p.setitems().stop();
  Mounted m(torch_zip(p.bytes(), {{"0", floats(4)}}), {.layout = Layout::rfc});
  REQUIRE(m.tree.model().entries.size() == 8);
  const std::string cut = directory_name(long_key, rfc_name_bytes) + ".pt";
  CHECK(cut.size() <= 255);
  CHECK(cut.find("%~") != std::string::npos);
  CHECK(m.list(Tree::root_ino) == std::vector<std::string>{".ckptfs", "map.pt", "w.pt", "%map.pt",
                                                           "map.pt.pt", "bad.pt", "epoch.pt", cut,
                                                           std::string(252, 'x') + ".pt"});
  CHECK(m.list(Tree::views_ino) == std::vector<std::string>{"index.json"});
  for (std::size_t i = 1; i < m.tree.child_count(Tree::root_ino); ++i) {
    const auto child = child_of(m.tree, Tree::root_ino, i);
    const auto& [name, ino] = child;
    CAPTURE(child.first);
    CHECK(m.tree.lookup(Tree::root_ino, name) == ino);
    CHECK(m.tree.parent(ino) == Tree::root_ino);
    CHECK(m.tree.child_count(ino) == 0);
    struct stat st {};
    REQUIRE(m.tree.stat(ino, st));
    CHECK(st.st_mode == (S_IFREG | 0444));
    if (name == "bad.pt") {
      CHECK(refused_read(m.tree, ino).find("tensor \"bad\" is broken") != std::string::npos);
      continue;
    }
    CHECK(static_cast<std::size_t>(st.st_size) == m.read_all(ino).size());
  }
  // Names without ".pt", entries without a file, and the split layout's names are not there.
  for (const char* absent :
       {"w", "bad", "opaque.pt", "model.safetensors", "w.pt/data", "map", "index.json"}) {
    CAPTURE(absent);
    CHECK(m.tree.lookup(Tree::root_ino, absent) == 0);
  }
  struct stat st {};
  REQUIRE(m.tree.stat(Tree::root_ino, st));
  CHECK(st.st_nlink == 3);  // one subdirectory: .ckptfs

  // A tensor's file is its tensor.pt (the same archive); a value's is torch.save of the value;
  // map.pt holds the keys with a file, in order.
  const Tree::Ino w = m.tree.lookup(Tree::root_ino, "w.pt");
  CHECK(m.tree.node(w)->kind == Tree::Kind::tensor_pt);
  const Tensor& t = m.tree.model().tensors[m.tree.model().entries[0].tensor];
  CHECK(m.read_all(w) == expected_torch_file(m.tree.model(), t, floats_at({0, 1}), t.dtype));
  const Tree::Ino epoch = m.tree.lookup(Tree::root_ino, "epoch.pt");
  CHECK(m.tree.node(epoch)->kind == Tree::Kind::value_pt);
  CHECK(m.read_all(epoch) == value_file(pickle::Value::integer(7)).bytes());
  const std::vector<std::string> keys{
      "w", "map", "map.pt", "bad", "epoch", long_key, std::string(252, 'x')};
  CHECK(m.read_all(m.tree.lookup(Tree::root_ino, "map.pt")) ==
        keys_file(keys, {.prefix = "map"}).bytes());

  auto index = nlohmann::json::parse(m.read_all(m.view("index.json")));
  std::vector<nlohmann::json> paths;
  for (const auto& e : index["entries"]) paths.push_back(e["path"]);
  CHECK(paths == std::vector<nlohmann::json>{"w.pt", "%map.pt", "map.pt.pt", "bad.pt", "epoch.pt",
                                             cut, nullptr, std::string(252, 'x') + ".pt"});
  // What map.pt lacks, and why: the value torch.save cannot write alone.
  REQUIRE(index["exports"].size() == 1);
  CHECK(index["exports"][0]["files"] == nlohmann::json::array({"map.pt"}));
  CHECK(index["exports"][0]["fails"].is_null());
  REQUIRE(index["exports"][0]["lacks"].size() == 1);
  CHECK(index["exports"][0]["lacks"][0]["key"] == "opaque");
  CHECK(index["exports"][0]["lacks"][0]["why"].get<std::string>().find("value.json describes it") !=
        std::string::npos);
}

TEST_CASE("layout=rfc: names are given among the keys map.pt lists, so its keys find their files") {
  // None and "None" have the same text; None's value has no file, so "None" is "None.pt".
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.none().global("argparse", "Namespace").empty_tuple().reduce();
  p.binunicode("None").tensor_v2("FloatStorage", "0", "cpu", 4, 0, {2}, {1});
  p.setitems().stop();
  Mounted m(torch_zip(p.bytes(), {{"0", floats(4)}}), {.layout = Layout::rfc});
  REQUIRE(m.tree.model().entries.size() == 2);
  CHECK(m.list(Tree::root_ino) == std::vector<std::string>{".ckptfs", "map.pt", "None.pt"});
  CHECK(m.tree.lookup(Tree::root_ino, "None.pt") != 0);
  CHECK(m.tree.lookup(Tree::root_ino, "None%#2.pt") == 0);
  // The split layout names both: the directory of the first key is the one without a suffix.
  Mounted split(torch_zip(p.bytes(), {{"0", floats(4)}}));
  CHECK(split.tree.lookup(Tree::root_ino, "None%#2") != 0);
}

TEST_CASE("derived files are made on first use, once") {
  Mounted m(checkpoint_with_views());
  struct stat st {};
  REQUIRE(m.tree.stat(m.path("w", "meta.json"), st));
  const std::string first = m.read_all(m.path("w", "meta.json"));
  CHECK(static_cast<std::size_t>(st.st_size) == first.size());
  CHECK(m.read_all(m.path("w", "meta.json")) == first);
}

TEST_CASE("sources: meta.json and index.json name each tensor's file, nodes know theirs") {
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
  TreeOptions options;
  options.source_path = "/models/x";
  Tree tree(combine_shards(index, std::move(shards)), options);
  const ByteSource* sources[] = {&first, &second};
  auto ino_of = [&](std::string_view dir, std::string_view file) {
    Tree::Ino ino = tree.lookup(Tree::root_ino, dir);
    if (ino == 0) ino = tree.lookup(tree.lookup(Tree::root_ino, ".ckptfs"), dir);
    if (!file.empty()) ino = tree.lookup(ino, file);
    REQUIRE(ino != 0);
    return ino;
  };
  auto read = [&](std::string_view dir, std::string_view file) {
    ReadBuffer buffer;
    tree.read(ino_of(dir, file), 0, 1 << 20, sources, buffer);
    std::string out;
    for (const auto& p : buffer.pieces()) {
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
  CHECK(meta_gone["broken"] ==
        "the index puts it in \"two.safetensors\", which has no tensor of "
        "that name");
  CHECK(read("b", "data") == "xyz");
  // Opens check the source of what they open: a tensor's files, its file; the rest, every file.
  auto source = [&](std::string_view dir, std::string_view file = {}) {
    auto n = tree.node(ino_of(dir, file));
    REQUIRE(n);
    return tree.source_of(*n);
  };
  CHECK(source("a", "data") == 0);
  CHECK(source("a", "meta.json") == 0);
  CHECK(source("b", "tensor.npy") == 1);
  CHECK(source("b") == 1);
  CHECK(source("gone", "meta.json") == Tree::every_source);
  CHECK(source("index.json") == Tree::every_source);
  CHECK(source("model.safetensors") == Tree::every_source);  // the export reads every shard
  CHECK(tree.source_of(*tree.node(Tree::root_ino)) == Tree::every_source);
}

TEST_SUITE_END();
