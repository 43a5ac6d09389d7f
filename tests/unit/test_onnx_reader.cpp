// SPDX-License-Identifier: MIT
// Unit tests of read_onnx() (raw_data, typed fields decoded on read, 4-bit elements unpacked,
// external data beneath the model's directory, sparse and STRING initializers, subgraphs) and
// of its refusals of hostile models (lengths past the end, deep nesting, declared sizes the file
// does not hold), on models assembled in C++ (tests/support/onnx_builder.hpp).
#include "support/onnx_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/onnx/onnx_reader.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <string>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

// A model read from `bytes`, external files from `files` (by name); the sources it opened kept.
struct Read {
  MemorySource source;
  OnnxModel onnx;
  std::vector<std::string> opened;

  explicit Read(std::string bytes, std::map<std::string, std::string> files = {})
      : source(std::move(bytes), "model.onnx") {
    const OnnxMemberOpener open = [&, files](const std::string& name) {
      opened.push_back(name);
      const auto it = files.find(name);
      if (it == files.end()) throw Error(ExitCode::io, "no such file");
      return std::unique_ptr<ByteSource>(std::make_unique<MemorySource>(it->second, name));
    };
    onnx = read_onnx(source, "model.onnx", open);
  }

  const Tensor& tensor(const std::string& key) const {
    for (const Entry& e : onnx.model.entries) {
      if (e.key == key && e.kind == Entry::Kind::tensor) return onnx.model.tensors[e.tensor];
    }
    FAIL("no tensor " << key);
    throw std::logic_error("unreachable");
  }
  const std::string& note(const std::string& key) const {
    return onnx.model
        .tensor_notes[static_cast<std::size_t>(&tensor(key) - onnx.model.tensors.data())];
  }
  // The bytes served for `key`, read from the source its storage names.
  std::string bytes(const std::string& key) const {
    const Tensor& t = tensor(key);
    REQUIRE_MESSAGE(t.broken.empty(), t.broken);
    const Storage& s = onnx.model.storages[*t.storage];
    const ByteSource& from =
        s.source == 0 ? static_cast<const ByteSource&>(source) : *onnx.sources[s.source - 1];
    return from.read_string(s.file_offset, static_cast<std::size_t>(s.nbytes));
  }
};

template <typename T>
std::string as_bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

}  // namespace

TEST_CASE("onnx: raw_data is a range of the file, typed fields are decoded on read") {
  using namespace tensor_field;
  Proto raw = onnx_tensor("raw", 1, {2, 2});
  raw.string(raw_data, as_bytes<float>({1, 2, 3, 4}));
  Proto half = onnx_tensor("half", 10, {3});  // FLOAT16 in int32_data, unpacked varints
  half.varint(int32_data, 0x3c00).varint(int32_data, 0xc000).varint(int32_data, 0x7bff);
  Proto longs = onnx_tensor("longs", 7, {2});  // INT64, a negative one
  longs.packed_varints(int64_data, {5, static_cast<std::uint64_t>(-3)});
  Proto floats = onnx_tensor("floats", 1, {3});  // float_data in two runs, a field between
  floats.packed_floats(float_data, {1.5f, 2.5f})
      .string(name, "floats")
      .packed_floats(float_data, {-1});
  Proto nibbles = onnx_tensor("nibbles", 22, {3});  // INT4 raw_data: 2 a byte, sign-extended
  nibbles.string(raw_data, std::string("\x9f\x07", 2));
  Proto words = onnx_tensor("words", 8, {2});
  words.string(string_data, "a").string(string_data, "b\"c");
  const Read r(onnx_model(onnx_graph({raw, half, longs, floats, nibbles, words})));

  CHECK(r.tensor("raw").dtype == DType::float32);
  CHECK(r.bytes("raw") == as_bytes<float>({1, 2, 3, 4}));
  CHECK(r.onnx.model.storages[*r.tensor("raw").storage].source == 0);  // never copied
  CHECK(r.bytes("half") == as_bytes<std::uint16_t>({0x3c00, 0xc000, 0x7bff}));
  CHECK(r.bytes("longs") == as_bytes<std::int64_t>({5, -3}));
  CHECK(r.bytes("floats") == as_bytes<float>({1.5f, 2.5f, -1}));
  CHECK(r.tensor("nibbles").dtype == DType::int8);
  CHECK(r.bytes("nibbles") == as_bytes<std::int8_t>({-1, -7, 7}));
  bool found = false;
  for (const Entry& e : r.onnx.model.entries) {
    if (e.key == "words") {
      found = true;
      CHECK(e.kind == Entry::Kind::value);
      CHECK(e.value_json == R"(["a","b\"c"])");
    }
  }
  CHECK(found);
  // meta.json's note: the data type and where the values are.
  CHECK(r.note("half").find(R"("data_type":"FLOAT16")") != std::string::npos);
  CHECK(r.note("half").find(R"("stored_in":"int32_data")") != std::string::npos);
  CHECK(r.note("raw").find(R"("stored_in":"raw_data")") != std::string::npos);
  CHECK(r.note("raw").find(R"("served_as":null)") != std::string::npos);
  CHECK(r.note("nibbles").find(R"("served_as":"int8 values)") != std::string::npos);
}

TEST_CASE("onnx: subgraphs' and sparse initializers are keys too, the main graph's first") {
  using namespace tensor_field;
  Proto inner = onnx_tensor("inner", 6, {1});
  inner.packed_varints(int32_data, {42});
  Proto outer = onnx_tensor("outer", 6, {1});
  outer.packed_varints(int32_data, {7});
  Proto values = onnx_tensor("sp", 1, {2});
  values.packed_floats(float_data, {1, 2});
  Proto indices = onnx_tensor("sp_indices", 7, {2});
  indices.packed_varints(int64_data, {0, 5});
  Proto sparse;
  sparse.message(1, values).message(2, indices).varint(3, 2).varint(3, 3);
  const Proto graph = onnx_graph(
      {outer}, {onnx_node_with_graph("If", "then_branch", onnx_graph({inner}))}, {sparse});
  const Read r(onnx_model(graph));
  std::vector<std::string> keys;
  for (const Entry& e : r.onnx.model.entries) keys.push_back(e.key);
  CHECK(keys == std::vector<std::string>{"outer", "sp.values", "sp.indices", "inner"});
  CHECK(r.bytes("inner") == as_bytes<std::int32_t>({42}));
  CHECK(r.bytes("sp.indices") == as_bytes<std::int64_t>({0, 5}));
}

TEST_CASE("onnx: external data is read beneath the model's directory, by offset and length") {
  using namespace tensor_field;
  Proto w = onnx_tensor("w", 1, {2});
  onnx_external(w, {{"location", "./weights/w.bin"}, {"offset", "4"}, {"length", "8"}});
  Proto missing = onnx_tensor("missing", 1, {1});
  onnx_external(missing, {{"location", "nothing.bin"}});
  Proto escape = onnx_tensor("escape", 1, {1});
  onnx_external(escape, {{"location", "../secret"}});
  Proto absolute = onnx_tensor("absolute", 1, {1});
  onnx_external(absolute, {{"location", "/etc/passwd"}});
  Proto past = onnx_tensor("past", 1, {4});
  onnx_external(past, {{"location", "weights/w.bin"}, {"offset", "8"}});
  const std::string file = "skip" + as_bytes<float>({0.5f, -0.5f}) + "tail";
  const Read r(onnx_model(onnx_graph({w, missing, escape, absolute, past})),
               {{"weights/w.bin", file}});
  CHECK(r.bytes("w") == as_bytes<float>({0.5f, -0.5f}));
  CHECK(r.onnx.model.storages[*r.tensor("w").storage].source == 1);
  CHECK(r.tensor("missing").broken.find("nothing.bin") != std::string::npos);
  CHECK(r.tensor("escape").broken.find("relative") != std::string::npos);
  CHECK(r.tensor("absolute").broken.find("relative") != std::string::npos);
  CHECK(r.tensor("past").broken.find("past its end") != std::string::npos);
  // Opened once each, never a name that leads out.
  CHECK(r.opened == std::vector<std::string>{"weights/w.bin", "nothing.bin"});
}

TEST_CASE("onnx: hostile models are refused in one line or their tensors broken") {
  using namespace tensor_field;
  SUBCASE("a length past the end of its message or the file") {
    Proto g;
    g.lying(5, 1000, "short");
    CHECK_THROWS_WITH_AS(Read(onnx_model(g)), doctest::Contains("past the end of its message"),
                         Error);
    const std::string model = onnx_model(onnx_graph({}));
    CHECK_THROWS_WITH_AS(Read(model.substr(0, model.size() - 3)),
                         doctest::Contains("looks truncated"), Error);
  }
  SUBCASE("a 2 GB raw_data declared inside a small tensor") {
    Proto t = onnx_tensor("big", 1, {1u << 29});
    t.lying(raw_data, 2ull << 30, "abcd");
    const Read r(onnx_model(onnx_graph({t})));
    CHECK(r.tensor("big").broken.find("no valid protobuf") != std::string::npos);
  }
  SUBCASE("a shape far larger than its bytes, typed or raw") {
    Proto raw = onnx_tensor("raw", 1, {1ll << 40, 1ll << 20});
    raw.string(raw_data, "1234");
    Proto typed = onnx_tensor("typed", 7, {1ll << 40});
    typed.packed_varints(int64_data, {1, 2});
    const Read r(onnx_model(onnx_graph({raw, typed})));
    CHECK(!r.tensor("raw").broken.empty());
    CHECK(r.tensor("typed").broken.find("holds 2 values") != std::string::npos);
  }
  SUBCASE("graphs nested deeper than the limit, without recursion") {
    Proto g = onnx_graph({});
    for (int i = 0; i < 200; ++i) g = onnx_graph({}, {onnx_node_with_graph("If", "then", g)});
    CHECK_THROWS_WITH_AS(Read(onnx_model(g)), doctest::Contains("nested more than"), Error);
  }
  SUBCASE("an unknown data type, a negative dimension") {
    Proto unknown = onnx_tensor("unknown", 99, {1});
    unknown.string(raw_data, "x");
    Proto negative = onnx_tensor("negative", 1, {-1});
    const Read r(onnx_model(onnx_graph({unknown, negative})));
    CHECK(r.tensor("unknown").broken.find("unknown data_type") != std::string::npos);
    CHECK(r.tensor("negative").broken.find("negative") != std::string::npos);
  }
}

TEST_CASE("onnx: looks_like_onnx knows a ModelProto's first bytes") {
  CHECK(looks_like_onnx(MemorySource(onnx_model(onnx_graph({})), "m")));
  CHECK_FALSE(looks_like_onnx(MemorySource(std::string("GGUF\3\0\0\0", 8), "m")));
  CHECK_FALSE(looks_like_onnx(MemorySource(std::string("{\"a\": 1}"), "m")));
  CHECK_FALSE(looks_like_onnx(MemorySource(std::string("PK\3\4", 4), "m")));
  CHECK_FALSE(looks_like_onnx(MemorySource(std::string("\x08\x08\x12\xff\xff\x7f", 6), "m")));
}

namespace {
// `bytes`, counting the bytes read of them.
class CountingSource final : public ByteSource {
 public:
  explicit CountingSource(std::string bytes) : bytes_(std::move(bytes)) {}
  std::uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const noexcept override { return name_; }
  std::uint64_t read_bytes() const noexcept { return read_; }

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override {
    read_ += out.size();
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
  }
  std::string bytes_;
  std::string name_ = "counting";
  mutable std::uint64_t read_ = 0;
};
}  // namespace

TEST_CASE("onnx: looks_like_onnx reads one byte of a file that is not a model") {
  // Every mount asks it of a torch zip: a 4 KiB read there starts a remote source's sequential
  // stream, which the first tensor's read then continues into a 1 MiB readahead window.
  for (const std::string& head : {std::string("PK\3\4", 4), std::string("GGUF\3\0\0\0", 8),
                                  std::string("\x80\x02}q\0.", 6)}) {
    const CountingSource source(head + std::string(8192, '\0'));
    CHECK_FALSE(looks_like_onnx(source));
    CHECK(source.read_bytes() == 1);
  }
  const CountingSource model(onnx_model(onnx_graph({})));
  CHECK(looks_like_onnx(model));
}
