// SPDX-License-Identifier: MIT
// Unit tests of the PyTorch DCP reader: .metadata read as data (torch's Metadata, a subclass,
// newer fields), tensors assembled from chunks in several files, values nested as
// dcp_to_torch_save nests them, and hostile checkpoints: files outside the directory,
// overlapping, missing or outside chunks, sizes that overflow, items that are not zips or run
// past their file, pickles of other classes, colliding paths, many chunks.
#include "support/fake_checkpoint.hpp"
#include "support/impostor_lookalike.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/dcp/dcp_reader.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/view/served.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <map>
#include <variant>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

using Dims = std::vector<std::int64_t>;
constexpr const char* dcp_module = "torch.distributed.checkpoint.metadata";

// A torch.Size of `values`.
void size(PickleBuilder& p, const Dims& values) {
  p.global("torch", "Size").mark();
  for (auto v : values) p.integer(v);
  p.tuple().tuple1().reduce();
}

// An item: a torch.save zip of one float32 tensor of `shape` whose elements are first, first+1...
std::string tensor_item(const Dims& shape, int first, const Dims& stride = {}) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  Dims c(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) c[d - 1] = c[d] * shape[d];
  const Dims& s = stride.empty() ? c : stride;
  PickleBuilder p;
  p.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark();
  p.mark().binunicode("storage").global("torch", "FloatStorage").binunicode("0");
  p.binunicode("cpu").integer(n).tuple().binpersid();
  p.integer(0).mark();
  for (auto d : shape) p.integer(d);
  p.tuple().mark();
  for (auto d : s) p.integer(d);
  p.tuple().newfalse().global("collections", "OrderedDict").empty_tuple().reduce();
  p.tuple().reduce().stop();
  std::string data;
  for (int i = 0; i < n; ++i) {
    float f = static_cast<float>(first + i);
    data.append(reinterpret_cast<const char*>(&f), 4);
  }
  return torch_zip(p.bytes(), {{"0", data}}, "item");
}

// An item holding a value: torch.save of a float.
std::string float_item(double value) {
  PickleBuilder p;
  p.proto(2).binfloat(value).stop();
  return torch_zip(p.bytes(), {}, "item");
}

struct Chunk {
  Dims offsets, sizes;
  std::string file;          // "" : no storage_data entry
  std::string item;          // its bytes, appended to `file`
  std::int64_t at = -1;      // its offset there; -1: where it is appended
  std::int64_t length = -1;  // -1: the item's size
};

struct Entry_ {
  std::string fqn;
  bool bytes = false;
  std::string dtype = "float32";
  Dims size;
  std::vector<Chunk> chunks;  // bytes: one, its offsets and sizes empty
  std::vector<std::variant<std::string, std::int64_t>> path;  // planner_data; empty: none
};

// A DCP directory in memory: the files and the .metadata that names their items.
struct Checkpoint {
  std::vector<Entry_> entries;
  std::string metadata_class = "Metadata";
  std::vector<std::string> transforms;  // of every item
  bool extra_fields = false;            // newer torch's and Megatron's fields

  std::map<std::string, std::string> files;
  std::vector<std::string> opened;

  std::string metadata() {
    PickleBuilder p;
    p.proto(2).global(dcp_module, metadata_class).empty_tuple().newobj().empty_dict().mark();
    p.binunicode("state_dict_metadata").empty_dict().mark();
    for (const Entry_& e : entries) {
      p.binunicode(e.fqn);
      if (e.bytes) {
        p.global(dcp_module, "BytesStorageMetadata").empty_tuple().newobj();
        continue;
      }
      p.global(dcp_module, "TensorStorageMetadata").empty_tuple().newobj().empty_dict().mark();
      p.binunicode("properties").global(dcp_module, "TensorProperties").empty_tuple().newobj();
      p.mark().global("torch", e.dtype);
      p.global("torch.serialization", "_get_layout").binunicode("torch.strided").tuple1().reduce();
      p.newfalse().global(dcp_module, "_MEM_FORMAT_ENCODING").integer(0).tuple1().reduce();
      p.newfalse().tuple().build();
      p.binunicode("size");
      size(p, e.size);
      p.binunicode("chunks").empty_list().mark();
      for (const Chunk& c : e.chunks) {
        p.global(dcp_module, "ChunkStorageMetadata").empty_tuple().newobj().empty_dict().mark();
        p.binunicode("offsets");
        size(p, c.offsets);
        p.binunicode("sizes");
        size(p, c.sizes);
        p.setitems().build();
      }
      p.appends().setitems().build();
    }
    p.setitems();
    p.binunicode("planner_data").empty_dict().mark();
    for (const Entry_& e : entries) {
      if (e.path.empty()) continue;
      p.binunicode(e.fqn).mark();
      for (const auto& part : e.path) {
        if (const auto* text = std::get_if<std::string>(&part)) {
          p.binunicode(*text);
        } else {
          p.integer(std::get<std::int64_t>(part));
        }
      }
      p.tuple();
    }
    p.setitems();
    p.binunicode("storage_data").empty_dict().mark();
    for (Entry_& e : entries) {
      for (Chunk& c : e.chunks) {
        if (c.file.empty()) continue;
        std::int64_t at = c.at;
        if (at < 0) {
          std::string& file = files[c.file];
          at = static_cast<std::int64_t>(file.size());
          file += c.item;
        }
        p.global(dcp_module, "MetadataIndex").empty_tuple().newobj().empty_dict().mark();
        p.binunicode("fqn").binunicode(e.fqn);
        if (!e.bytes) {
          p.binunicode("offset");
          size(p, c.offsets);
        }
        p.binunicode("index").none().setitems().build();
        p.global("torch.distributed.checkpoint.filesystem", "_StorageInfo").empty_tuple().newobj();
        p.empty_dict().mark().binunicode("relative_path").binunicode(c.file);
        p.binunicode("offset").integer(at).binunicode("length");
        p.integer(c.length >= 0 ? c.length : static_cast<std::int64_t>(c.item.size()));
        if (!transforms.empty()) {
          p.binunicode("transform_descriptors").empty_list().mark();
          for (const auto& t : transforms) p.binunicode(t);
          p.appends();
        }
        p.setitems().build();
      }
    }
    p.setitems();
    if (extra_fields) {
      p.binunicode("version").binunicode("1.0.0");
      p.binunicode("mcore_data").empty_dict().binunicode("storage_meta").none();
    }
    p.setitems().build().stop();
    return p.bytes();
  }

  DcpModel read(const DcpLimits& limits = {}) {
    MemorySource meta(metadata(), ".metadata");
    return read_dcp(
        meta,
        [&](const std::string& name) -> std::unique_ptr<ByteSource> {
          opened.push_back(name);
          const auto it = files.find(name);
          if (it == files.end()) throw Error(ExitCode::io, "No such file or directory");
          return std::make_unique<MemorySource>(it->second, name);
        },
        {}, limits);
  }
};

std::string floats_from(int first, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    float f = static_cast<float>(first + i);
    out.append(reinterpret_cast<const char*>(&f), 4);
  }
  return out;
}

// The tensor of entry `key`, and its bytes as served.
const Tensor& tensor_of(const DcpModel& m, std::string_view key) {
  for (const Entry& e : m.model.entries) {
    if (e.key == key) {
      REQUIRE(e.kind == Entry::Kind::tensor);
      return m.model.tensors[e.tensor];
    }
  }
  FAIL("no entry " << key);
  throw;
}
std::string bytes_of(const DcpModel& m, const Tensor& t) {
  std::vector<const ByteSource*> sources;
  for (const auto& s : m.sources) sources.push_back(s.get());
  const ServedTensor served = serve(m.model, t);
  ReadBuffer buffer;
  read_served(m.model, t, served, 0, served.nbytes, sources, buffer);
  std::string out;
  for (const ReadPiece& p : buffer.pieces()) {
    out += p.memory ? std::string(p.memory, p.length)
                    : m.sources[p.source]->read_string(p.source_offset, p.length);
  }
  return out;
}

// A 4x3 tensor "model.w" in two row chunks, one per rank's file, a 1-d one in one chunk, and
// the optimizer's lr as a value nested at optim.param_groups.0.lr.
Checkpoint two_ranks() {
  Checkpoint c;
  c.entries.push_back({"model.w",
                       false,
                       "float32",
                       {4, 3},
                       {{{0, 0}, {1, 3}, "__0_0.distcp", tensor_item({1, 3}, 0)},
                        {{1, 0}, {3, 3}, "__1_0.distcp", tensor_item({3, 3}, 3)}},
                       {std::string("model"), std::string("w")}});
  c.entries.push_back(
      {"model.b", false, "float32", {2}, {{{0}, {2}, "__1_0.distcp", tensor_item({2}, 100)}}, {}});
  c.entries.push_back(
      {"optim.param_groups.0.lr",
       true,
       "",
       {},
       {{{}, {}, "__0_0.distcp", float_item(0.5)}},
       {std::string("optim"), std::string("param_groups"), std::int64_t{0}, std::string("lr")}});
  return c;
}

}  // namespace

TEST_CASE("dcp: tensors assembled from chunks in two files, values nested by planner_data") {
  Checkpoint c = two_ranks();
  const DcpModel m = c.read();
  CHECK(m.model.format == Format::dcp);
  CHECK(m.model.sources == std::vector<std::string>{"__0_0.distcp", "__1_0.distcp"});
  REQUIRE(m.model.entries.size() == 3);
  CHECK(m.model.entries[0].key == "model.w");
  CHECK(m.model.entries[1].key == "model.b");
  // A dict without a tensor below is one value, as in the file dcp_to_torch_save writes.
  CHECK(m.model.entries[2].key == "optim");
  CHECK(m.model.entries[2].kind == Entry::Kind::value);
  CHECK(nlohmann::json::parse(m.model.entries[2].value_json) ==
        nlohmann::json::parse(R"({"param_groups": [{"lr": 0.5}]})"));
  const Tensor& w = tensor_of(m, "model.w");
  CHECK(w.broken == "");
  CHECK(w.shape == Dims{4, 3});
  REQUIRE(w.assembly);
  CHECK(m.model.assemblies[*w.assembly].size() == 2);
  CHECK(bytes_of(m, w) == floats_from(0, 12));
  CHECK(bytes_of(m, tensor_of(m, "model.b")) == floats_from(100, 2));
  // Every piece is one range of its .distcp file: served without a copy.
  const ServedTensor served = serve(m.model, w);
  CHECK(served.way == ServedTensor::Way::pieces);
}

TEST_CASE("dcp: a .metadata whose first bytes are a tar header too is read as DCP") {
  // The impostor test runs only when .metadata cannot be read: an fqn may spell anything.
  Checkpoint c = two_ranks();
  const std::string metadata = tar_lookalike([&](const std::string& fqn) {
    c.entries[0].fqn = fqn;
    c.files.clear();
    return c.metadata();
  });
  CHECK(is_tar_header(metadata));
  const DcpModel m = c.read();
  REQUIRE(m.model.entries.size() == 3);
  CHECK(bytes_of(m, tensor_of(m, "model.w")) == floats_from(0, 12));
}

TEST_CASE("dcp: a subclass of Metadata with newer fields, FSDP's empty chunks, a strided chunk") {
  Checkpoint c = two_ranks();
  c.metadata_class = "MCoreMetadata";
  c.extra_fields = true;
  // A rank without rows: an empty chunk at the end, whose item is never read.
  c.entries[0].chunks.push_back({{4, 0}, {0, 3}, "__2_0.distcp", "not a zip at all"});
  // A chunk saved transposed: its item's tensor is a strided view.
  c.entries.push_back({"t",
                       false,
                       "float32",
                       {2, 2},
                       {{{0, 0}, {2, 2}, "__1_0.distcp", tensor_item({2, 2}, 10, {1, 2})}},
                       {}});
  const DcpModel m = c.read();
  CHECK(tensor_of(m, "model.w").broken == "");
  CHECK(bytes_of(m, tensor_of(m, "model.w")) == floats_from(0, 12));
  CHECK(bytes_of(m, tensor_of(m, "t")) ==
        floats_from(10, 1) + floats_from(12, 1) + floats_from(11, 1) + floats_from(13, 1));
  CHECK(std::find(c.opened.begin(), c.opened.end(), "__2_0.distcp") == c.opened.end());
}

TEST_CASE("dcp: hostile chunks break their tensor only, with the reason, no file outside") {
  auto broken = [](Checkpoint c) {
    const DcpModel m = c.read();
    for (const std::string& name : c.opened) {
      CHECK(name.find("..") == std::string::npos);
      CHECK(name.front() != '/');
    }
    CHECK(tensor_of(m, "model.b").broken == "");  // the rest stays usable
    return tensor_of(m, "model.w").broken;
  };
  Checkpoint outside = two_ranks();
  outside.entries[0].chunks[1].file = "../secret.distcp";
  CHECK(broken(outside).find("leaves the checkpoint's directory") != std::string::npos);
  Checkpoint absolute = two_ranks();
  absolute.entries[0].chunks[1].file = "/etc/passwd";
  CHECK(broken(absolute).find("an absolute file name") != std::string::npos);
  Checkpoint overlap = two_ranks();
  overlap.entries[0].chunks[0].sizes = {2, 3};
  overlap.entries[0].chunks[0].item = tensor_item({2, 3}, 0);
  CHECK(broken(overlap) == "pieces 0 and 1 overlap at [1, 0]");
  Checkpoint gap = two_ranks();
  gap.entries[0].chunks.pop_back();
  CHECK(broken(gap) == "no piece holds the elements at [1, 0] (3×3)");
  Checkpoint beyond = two_ranks();
  beyond.entries[0].chunks[1].offsets = {2, 0};
  CHECK(broken(beyond).find("is not inside the tensor's [4, 3]") != std::string::npos);
  Checkpoint past_end = two_ranks();
  past_end.entries[0].chunks[1].length = 1 << 30;
  CHECK(broken(past_end).find("runs past the end of the file") != std::string::npos);
  CHECK(broken(past_end).find("the file looks truncated") != std::string::npos);
  Checkpoint not_zip = two_ranks();
  not_zip.entries[0].chunks[1].item = std::string(200, 'x');
  CHECK(broken(not_zip).find("chunk 1 (at [1, 0]): the item at byte") != std::string::npos);
  Checkpoint other_shape = two_ranks();
  other_shape.entries[0].chunks[1].item = tensor_item({3, 2}, 0);
  CHECK(broken(other_shape).find("its tensor is float32 [3, 2], the chunk float32 [3, 3]") !=
        std::string::npos);
  Checkpoint no_item = two_ranks();
  no_item.entries[0].chunks[1].file.clear();
  CHECK(broken(no_item) == "chunk 1 (at [1, 0]) has no item in storage_data");
  Checkpoint missing_file = two_ranks();
  missing_file.entries[0].chunks[0].file = "__7_0.distcp";
  missing_file.entries[0].chunks[0].at = 0;
  CHECK(broken(missing_file).find("cannot be opened") != std::string::npos);
  Checkpoint huge = two_ranks();
  huge.entries[0].size = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  CHECK(broken(huge).find("has more elements than 64 bits count") != std::string::npos);
  Checkpoint wraps_small = two_ranks();  // 2^64 + 1 elements: never 1
  wraps_small.entries[0].size = {std::int64_t{1} << 32, (std::int64_t{1} << 32) + 1};
  CHECK(broken(wraps_small).find("has more elements than 64 bits count") != std::string::npos);
  Checkpoint compressed = two_ranks();
  compressed.transforms = {"zstd"};
  compressed.entries.pop_back();  // the value's item would be an error
  const DcpModel m = compressed.read();
  CHECK(tensor_of(m, "model.w").broken.find("transforms (\"zstd\")") != std::string::npos);
}

TEST_CASE("dcp: what is no DCP metadata, or cannot be nested, is a one-line error") {
  auto error = [](const std::string& metadata) {
    MemorySource meta(metadata, ".metadata");
    try {
      read_dcp(meta, [](const std::string&) -> std::unique_ptr<ByteSource> {
        throw Error(ExitCode::io, "no");
      });
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
      return std::string(e.what());
    }
    FAIL("no error");
    return std::string();
  };
  PickleBuilder system;
  system.proto(2).global("os", "system").binunicode("true").tuple1().reduce().stop();
  CHECK(error(system.bytes()) ==
        ".metadata: the pickle holds an object of \"os.system\", not "
        "torch.distributed.checkpoint's Metadata");
  PickleBuilder plain;
  plain.proto(2).empty_dict().stop();
  CHECK(error(plain.bytes()).starts_with(".metadata: the pickle holds a dict"));
  CHECK(error("not a pickle").starts_with(".metadata: "));

  Checkpoint no_value = two_ranks();
  no_value.entries[2].chunks[0].file.clear();
  CHECK(error(no_value.metadata()) ==
        "the value \"optim.param_groups.0.lr\" has no item in .metadata's storage_data");
  Checkpoint collide = two_ranks();
  collide.entries[1].path = {std::string("model"), std::string("w"), std::string("x")};
  CHECK_THROWS_WITH_AS(collide.read(),
                       ".metadata's planner_data: the path \"model.w.x\" goes through another "
                       "entry's value",
                       Error);
  Checkpoint too_many = two_ranks();
  DcpLimits limits;
  limits.max_chunks = 2;
  CHECK_THROWS_WITH_AS(too_many.read(limits), ".metadata: more than 2 tensor chunks", Error);
}

TEST_CASE("dcp: 20,000 chunks of one row each mount in bounded time") {
  Checkpoint c;
  const int rows = 20'000;
  Entry_ e{"big", false, "float32", {rows, 2}, {}, {}};
  const std::string item = tensor_item({1, 2}, 7);
  for (int i = 0; i < rows; ++i) {
    // Every chunk's item is the same bytes of one file: read once each, never copied.
    e.chunks.push_back({{i, 0},
                        {1, 2},
                        "__0_0.distcp",
                        i == 0 ? item : "",
                        i == 0 ? -1 : 0,
                        static_cast<std::int64_t>(item.size())});
  }
  c.entries.push_back(e);
  const auto start = std::chrono::steady_clock::now();
  const DcpModel m = c.read();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Tensor& t = tensor_of(m, "big");
  CHECK(t.broken == "");
  CHECK(m.model.assemblies[*t.assembly].size() == static_cast<std::size_t>(rows));
  CHECK(bytes_of(m, t).substr(8 * 12345, 8) == floats_from(7, 2));
  CHECK(seconds < 60);  // about a second in a release build
}
