// SPDX-License-Identifier: MIT
// Unit tests of derived tensors: check_derivation() (model/derivation.hpp) on valid and lying
// runs, and their values served (view/derived.hpp through serve() and read_served()): rows taken
// run by run, a transpose, w - 1, float16 out, and a block-quantized source, each against the
// values computed here from the definition.
#include <ckptfs/model/derivation.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/convert.hpp>
#include <ckptfs/view/dequantize.hpp>
#include <ckptfs/view/served.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace ckptfs;

namespace {

// A model over one in-memory source holding `values` as a float32 [rows, columns] tensor (its
// tensor 0), and the source.
struct Fixture {
  std::string bytes;
  std::unique_ptr<MemorySource> source;
  std::vector<const ByteSource*> sources;
  Model model;

  Fixture(std::size_t rows, std::size_t columns) {
    std::vector<float> values(rows * columns);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) + 0.5f;
    bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    source = std::make_unique<MemorySource>(bytes, "f.bin");
    sources = {source.get()};
    model.sources = {"f.bin"};
    Storage s;
    s.nbytes = bytes.size();
    model.storages.push_back(s);
    Tensor t;
    t.shape = {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(columns)};
    t.stride = {static_cast<std::int64_t>(columns), 1};
    t.storage = 0;
    model.tensors.push_back(t);
  }

  // A derived tensor of `shape` from `d`, appended; its index.
  std::size_t derive(std::vector<std::int64_t> shape, Derivation d) {
    Tensor t;
    t.shape = shape;
    t.stride.resize(shape.size());
    std::int64_t step = 1;
    for (std::size_t i = shape.size(); i-- > 0;) {
      t.stride[i] = step;
      step *= shape[i];
    }
    t.derivation = static_cast<std::uint32_t>(model.derivations.size());
    model.derivations.push_back(std::move(d));
    model.tensors.push_back(t);
    return model.tensors.size() - 1;
  }

  // Bytes [offset, offset + length) of tensor i as served in `dtype`.
  std::string read(std::size_t i, std::optional<DType> dtype = std::nullopt,
                   std::uint64_t offset = 0, std::optional<std::size_t> length = std::nullopt) {
    const ServedTensor served = serve(model, model.tensors[i], dtype);
    REQUIRE(served.way == ServedTensor::Way::derive);
    ReadBuffer buffer;
    const std::size_t n = length.value_or(served.nbytes - offset);
    read_served(model, model.tensors[i], served, offset, n, sources, buffer);
    std::string out;
    for (const ReadPiece& p : buffer.pieces()) out.append(p.memory, p.length);
    return out;
  }

  float source_value(std::size_t element) const {
    float v = 0;
    std::memcpy(&v, bytes.data() + element * 4, 4);
    return v;
  }
};

std::vector<float> floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

}  // namespace

TEST_CASE("a derivation's runs are checked against its shape and its sources") {
  Fixture f(6, 4);
  auto derivation = [](std::vector<Derivation::Run> runs, std::uint64_t row_length = 4) {
    Derivation d;
    d.runs = std::move(runs);
    d.row_length = row_length;
    return d;
  };
  // Rows 0, 2, 4 then 1, 3, 5: valid.
  std::size_t good = f.derive({6, 4}, derivation({{0, 0, 0, 3, 2}, {0, 3, 1, 3, 2}}));
  CHECK(check_derivation(f.model, f.model.tensors[good]) == "");
  // A run past the source's rows, a run that does not start where the last ended, too few
  // rows, rows of 0 elements, a source that is itself derived, a source not in the model.
  const std::pair<Derivation, std::string> bad[] = {
      {derivation({{0, 0, 2, 3, 2}, {0, 3, 1, 3, 2}}), "outside its source's 6 rows"},
      {derivation({{0, 0, 0, 3, 2}, {0, 4, 1, 3, 2}}), "starts at row 4, not 3"},
      {derivation({{0, 0, 0, 3, 2}}), "give 3 rows of 4, not its 24 elements"},
      {derivation({{0, 0, 0, 6, 1}}, 0), "rows of 0 elements"},
      {derivation({{good, 0, 0, 6, 1}}), "derived itself"},
      {derivation({{99, 0, 0, 6, 1}}), "not in the model"},
      {derivation({{0, 0, 0, 1, 1}}, 5), "no whole number of rows of 5"},
      {derivation({{0, 0, 0, ~0ull, ~0ull}}), "outside its source"},
  };
  for (const auto& [d, why] : bad) {
    const std::size_t i = f.derive({6, 4}, d);
    CAPTURE(why);
    CHECK(check_derivation(f.model, f.model.tensors[i]).find(why) != std::string::npos);
  }
  // A transpose: of a 2-d source, its shape reversed, one run.
  Derivation t;
  t.runs = {{0, 0, 0, 1, 1}};
  t.transpose = true;
  CHECK(check_derivation(f.model, f.model.tensors[f.derive({4, 6}, t)]) == "");
  CHECK(check_derivation(f.model, f.model.tensors[f.derive({6, 4}, t)]).find("no transpose") !=
        std::string::npos);
  // A derived tensor has no storage of its own and is float32.
  const std::size_t stored = f.derive({4, 6}, t);
  f.model.tensors[stored].storage = 0;
  CHECK(check_derivation(f.model, f.model.tensors[stored]).find("no storage") != std::string::npos);
  const std::size_t half = f.derive({4, 6}, t);
  f.model.tensors[half].dtype = DType::float16;
  CHECK(check_derivation(f.model, f.model.tensors[half]).find("float32") != std::string::npos);
}

TEST_CASE("a derivation serves rows run by run, any range of them") {
  Fixture f(6, 4);
  Derivation d;
  d.runs = {{0, 0, 1, 3, 2}, {0, 3, 0, 3, 2}};  // rows 1, 3, 5, then 0, 2, 4
  d.row_length = 4;
  const std::size_t i = f.derive({6, 4}, d);
  REQUIRE(check_derivation(f.model, f.model.tensors[i]) == "");
  const std::size_t order[] = {1, 3, 5, 0, 2, 4};
  std::vector<float> want;
  for (std::size_t r : order) {
    for (std::size_t c = 0; c < 4; ++c) want.push_back(f.source_value(r * 4 + c));
  }
  CHECK(floats(f.read(i)) == want);
  // Every range, at every byte offset: the same bytes as the whole's.
  const std::string whole = f.read(i);
  for (std::size_t offset = 0; offset < whole.size(); offset += 7) {
    for (std::size_t length : {1u, 3u, 17u, 40u}) {
      if (offset + length > whole.size()) continue;
      CHECK(f.read(i, std::nullopt, offset, length) == whole.substr(offset, length));
    }
  }
}

TEST_CASE("a derivation serves a transpose, w - 1, and float16 converted from float32") {
  Fixture f(3, 5);
  Derivation t;
  t.runs = {{0, 0, 0, 1, 1}};
  t.transpose = true;
  t.op = Derivation::Op::minus_one;
  const std::size_t i = f.derive({5, 3}, t);
  REQUIRE(check_derivation(f.model, f.model.tensors[i]) == "");
  std::vector<float> want;
  for (std::size_t c = 0; c < 5; ++c) {
    for (std::size_t r = 0; r < 3; ++r) want.push_back(f.source_value(r * 5 + c) - 1.0f);
  }
  const std::string whole = f.read(i);
  CHECK(floats(whole) == want);
  for (std::size_t offset = 0; offset < whole.size(); offset += 5) {
    for (std::size_t length : {1u, 4u, 13u, 33u}) {
      if (offset + length > whole.size()) continue;
      CHECK(f.read(i, std::nullopt, offset, length) == whole.substr(offset, length));
    }
  }
  // float16: each float32 value converted (these are exact in float16).
  const std::string half = f.read(i, DType::float16);
  REQUIRE(half.size() == want.size() * 2);
  std::vector<std::byte> converted(want.size() * 2);
  convert(DType::float32, DType::float16, false, reinterpret_cast<const std::byte*>(want.data()),
          converted.data(), want.size());
  CHECK(std::memcmp(half.data(), converted.data(), half.size()) == 0);
}

TEST_CASE("a derivation of a block-quantized source serves its dequantized rows") {
  // Q8_0: blocks of a float16 scale and 32 int8 values; 4 rows of one block.
  const BlockFormatInfo& q8 = info(BlockFormat::q8_0);
  std::string blocks;
  for (int r = 0; r < 4; ++r) {
    blocks += std::string("\x00\x3c", 2);  // d = 1.0
    for (int k = 0; k < 32; ++k) blocks += static_cast<char>(r * 10 + k - 16);
  }
  REQUIRE(blocks.size() == 4 * q8.block_bytes);
  MemorySource source(blocks, "q.gguf");
  std::vector<const ByteSource*> sources = {&source};
  Model m;
  m.sources = {"q.gguf"};
  Storage s;
  s.nbytes = blocks.size();
  m.storages.push_back(s);
  Tensor q;
  q.shape = {4, 32};
  q.stride = {32, 1};
  q.storage = 0;
  q.blocks = BlockFormat::q8_0;
  m.tensors.push_back(q);
  Tensor t;
  t.shape = {4, 32};
  t.stride = {32, 1};
  t.derivation = 0;
  Derivation d;
  d.runs = {{0, 0, 2, 2, 1}, {0, 2, 0, 2, 1}};  // rows 2, 3, 0, 1
  d.row_length = 32;
  m.derivations.push_back(d);
  m.tensors.push_back(t);
  REQUIRE(check_derivation(m, m.tensors[1]) == "");
  std::vector<float> values(4 * 32);
  dequantize(BlockFormat::q8_0, reinterpret_cast<const std::byte*>(blocks.data()),
             reinterpret_cast<std::byte*>(values.data()), 4);
  std::vector<float> want;
  for (std::size_t r : {2, 3, 0, 1}) {
    want.insert(want.end(), values.begin() + static_cast<std::ptrdiff_t>(r * 32),
                values.begin() + static_cast<std::ptrdiff_t>(r * 32 + 32));
  }
  const ServedTensor served = serve(m, m.tensors[1]);
  REQUIRE(served.way == ServedTensor::Way::derive);
  ReadBuffer buffer;
  read_served(m, m.tensors[1], served, 0, served.nbytes, sources, buffer);
  std::string got;
  for (const ReadPiece& p : buffer.pieces()) got.append(p.memory, p.length);
  CHECK(floats(got) == want);
  // A source whose values are not served makes the derived tensor's not served, saying why.
  m.tensors[0].blocks = BlockFormat::q8_k;
  CHECK_FALSE(values_not_served(m, m.tensors[1]).empty());
  CHECK(serve(m, m.tensors[1]).way == ServedTensor::Way::none);
}
