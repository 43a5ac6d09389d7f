// SPDX-License-Identifier: MIT
// Unit tests of the safetensors export: byte order, keys the format cannot take as they are,
// dtypes it names otherwise, and a sharded set that fits one file.
#include "support/fake_checkpoint.hpp"
#include "support/safetensors_builder.hpp"

#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/safetensors_export.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

struct Exported {
  MemorySource source;
  Model model;
  SafetensorsExport st;
  Exported(const std::string& bytes, bool safetensors_source, std::uint64_t shard_size = 0,
           std::optional<DType> convert_to = {})
      : source(bytes),
        model(safetensors_source ? read_safetensors(source, "test.safetensors")
                                 : read_torch(source, "test.pth")),
        st(model, shard_size, convert_to) {}

  std::string read(std::size_t file, std::uint64_t offset, std::size_t length) {
    ReadBuffer buffer;
    const ByteSource* sources[] = {&source};
    st.read(model, file, offset, length, sources, buffer);
    std::string out;
    for (const auto& p : buffer.pieces()) {
      out += p.memory ? std::string(p.memory, p.length)
                      : source.read_string(p.source_offset, p.length);
    }
    return out;
  }
  std::string whole(std::size_t file = 0) { return read(file, 0, st.files()[file].size); }
  static nlohmann::json header(const std::string& file) {
    std::uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    return nlohmann::json::parse(file.substr(8, n));
  }
  static std::string data_of(const std::string& file, const nlohmann::json& tensor) {
    std::uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    const auto begin = tensor["data_offsets"][0].get<std::uint64_t>();
    return file.substr(8 + n + begin, tensor["data_offsets"][1].get<std::uint64_t>() - begin);
  }
};

std::string reversed_per(std::string bytes, std::size_t unit) {
  for (std::size_t i = 0; i < bytes.size(); i += unit) {
    std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 bytes.begin() + static_cast<std::ptrdiff_t>(i + unit));
  }
  return bytes;
}

}  // namespace

TEST_CASE("a big-endian checkpoint is exported little-endian, complex numbers per half") {
  // Storage 0: 12 float32 (0..11), big-endian; storage 1: 2 complex64; storage 2: 4 uint8.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("w").tensor_v2("FloatStorage", "0", "cpu", 12, 0, {3, 4}, {4, 1});
  p.binunicode("w.T").tensor_v2("FloatStorage", "0", "cpu", 12, 0, {4, 3}, {1, 4});
  p.binunicode("c").tensor_v2("ComplexFloatStorage", "1", "cpu", 2, 0, {2}, {1});
  p.binunicode("u").tensor_v2("ByteStorage", "2", "cpu", 4, 0, {4}, {1});
  p.setitems().stop();
  const std::string complex_le = floats(4);  // real and imaginary parts 0, 1, 2, 3
  const std::string file = torch_zip(
      p.bytes(),
      {{"0", reversed_per(floats(12), 4)}, {"1", reversed_per(complex_le, 4)}, {"2", "\1\2\3\4"}},
      "archive", {{"byteorder", "big"}});
  Exported e(file, false);
  const std::string st = e.whole();
  const auto header = Exported::header(st);
  CHECK(Exported::data_of(st, header["w"]) == floats(12));
  std::string transposed;
  for (int i : {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}) transposed += floats(12).substr(4 * i, 4);
  CHECK(Exported::data_of(st, header["w.T"]) == transposed);
  CHECK(Exported::data_of(st, header["c"]) == complex_le);
  CHECK(Exported::data_of(st, header["u"]) == "\1\2\3\4");
  // Any slice, starting and ending inside elements, reads the same bytes.
  for (std::size_t off = 0; off < st.size(); ++off) {
    for (std::size_t len : {1, 2, 3, 5, 13, 64}) {
      CHECK(e.read(0, off, len) == st.substr(off, len));
    }
  }
  SUBCASE("converted tensors are little-endian too, the others swapped") {
    Exported half(file, false, 0, DType::float16);
    const std::string h = half.whole();
    const auto hh = Exported::header(h);
    CHECK(hh["w"]["dtype"] == "F16");
    CHECK(Exported::data_of(h, hh["w"]).substr(2, 2) == std::string("\x00\x3c", 2));  // 1.0
    CHECK(Exported::data_of(h, hh["c"]) == complex_le);
  }
}

TEST_CASE("keys: __metadata__ is the format's, bytes that are not UTF-8 become U+FFFD") {
  const std::string file = torch_zip(state_dict_pickle({{"__metadata__", "0", 2, 0, {2}, {1}},
                                                        {"bad\xff", "0", 2, 0, {1}, {1}},
                                                        {"bad\xef\xbf\xbd", "0", 2, 1, {1}, {1}},
                                                        {"ok", "0", 2, 0, {2}, {1}}}),
                                     {{"0", floats(2)}});
  Exported e(file, false);
  std::vector<std::string> keys;
  for (const auto& t : e.st.tensors()) keys.push_back(t.key);
  CHECK(keys ==
        std::vector<std::string>{"__metadata__%#2", "bad\xef\xbf\xbd", "bad\xef\xbf\xbd%#2", "ok"});
  const auto header = Exported::header(e.whole());
  CHECK(header["__metadata__"] == nlohmann::json({{"format", "pt"}}));
  CHECK(header["__metadata__%#2"]["data_offsets"] == nlohmann::json::array({0, 8}));
}

TEST_CASE("F4: torch's float4_e2m1fn_x2 [..., n] is F4 [..., 2n]") {
  const std::string file = safetensors_file(
      {{"f4", "F4", {3, 4}, "\x01\x23\x45\x67\x89\xab"}, {"x", "F32", {1}, floats(1)}},
      {{"format", "pt"}, {"note", "kept"}});
  Exported e(file, true);
  const std::string st = e.whole();
  const auto header = Exported::header(st);
  CHECK(header["f4"]["dtype"] == "F4");
  CHECK(header["f4"]["shape"] == nlohmann::json::array({3, 4}));
  CHECK(Exported::data_of(st, header["f4"]) == "\x01\x23\x45\x67\x89\xab");
  CHECK(header["__metadata__"] == nlohmann::json({{"format", "pt"}, {"note", "kept"}}));
}

TEST_CASE("shard_size: a model that fits one shard is model.safetensors, without an index") {
  const std::string file =
      torch_zip(state_dict_pickle({{"a", "0", 4, 0, {2}, {1}}, {"b", "0", 4, 2, {2}, {1}}}),
                {{"0", floats(4)}});
  Exported one(file, false, 16);
  REQUIRE(one.st.files().size() == 1);
  CHECK(one.st.files()[0].name == "model.safetensors");
  CHECK(one.st.index_json().empty());
  Exported two(file, false, 15);
  REQUIRE(two.st.files().size() == 2);
  CHECK(two.st.files()[1].name == "model-00002-of-00002.safetensors");
  CHECK(nlohmann::json::parse(two.st.index_json())["metadata"]["total_size"] == 16);
}

TEST_CASE("for_each_left_out: what the export leaves out and why, as its layout does") {
  // "big" and "big2": 2^62 bytes each, stride-0 views of one element: both cannot be in one file.
  PickleBuilder p;
  p.proto(2).empty_dict().mark();
  p.binunicode("w").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {1}, {1});
  p.binunicode("bad").tensor_v2("FloatStorage", "0", "cpu", 1, 3, {1}, {1});  // past its storage
  p.binunicode("c").tensor_v2("ComplexDoubleStorage", "1", "cpu", 1, 0, {1}, {1});
  p.binunicode("big").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {1ll << 30, 1ll << 30}, {0, 0});
  p.binunicode("big2").tensor_v2("FloatStorage", "0", "cpu", 1, 0, {1ll << 30, 1ll << 30}, {0, 0});
  p.binunicode("bad_c").tensor_v2("ComplexDoubleStorage", "1", "cpu", 1, 1, {1}, {1});
  p.setitems().stop();
  const std::string file = torch_zip(p.bytes(), {{"0", floats(1)}, {"1", std::string(16, '\0')}});
  Exported e(file, false);
  struct Left {
    std::size_t entry;
    std::string why;
    bool broken;
    bool operator==(const Left&) const = default;
  };
  auto left_out = [&](std::uint64_t shard_size) {
    std::vector<Left> out;
    SafetensorsExport::for_each_left_out(e.model, shard_size, std::nullopt,
                                         [&](std::size_t entry, std::string_view why, bool broken) {
                                           out.push_back({entry, std::string(why), broken});
                                         });
    return out;
  };
  const std::string too_large =
      "its bytes would take its file past the largest size a file can have";
  // A broken tensor is "broken" whatever its dtype (the export then fails, as pack refuses it).
  CHECK(left_out(0) == std::vector<Left>{{1, "broken", true},
                                         {2, "safetensors has no dtype complex128", false},
                                         {4, too_large, false},
                                         {5, "broken", true}});
  std::vector<std::string> keys;
  for (const auto& t : e.st.tensors()) keys.push_back(t.key);
  CHECK(keys == std::vector<std::string>{"w", "big"});  // the layout holds the rest
  CHECK(SafetensorsExport::single_file_size(e.model) == e.st.files()[0].size);
  // Sharded, each in a file of its own: nothing is too large.
  CHECK(left_out(1).size() == 3);  // bad, c, bad_c
  Exported sharded(file, false, 1);
  CHECK(sharded.st.tensors().size() == 3);
  CHECK(sharded.st.files().size() == 3);
}
