// SPDX-License-Identifier: MIT
// Unit tests of read_safetensors(): every dtype, shapes, metadata, the orders, what other
// writers write, and every refusal with its exit code, on files assembled in C++.
#include "support/safetensors_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

Model read(const std::string& bytes, const SafetensorsLimits& limits = {}) {
  MemorySource source(bytes, "test.safetensors");
  return read_safetensors(source, "test.safetensors", limits);
}

// (exit code, message) of a refused file; ok and "" when it is read.
std::pair<ExitCode, std::string> refusal(const std::string& bytes,
                                         const SafetensorsLimits& limits = {}) {
  try {
    read(bytes, limits);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

// A file whose header is `json` (padded) and whose data is `data_bytes` zero bytes.
std::string with_header(const std::string& json, std::size_t data_bytes = 0) {
  return safetensors_raw(json, std::string(data_bytes, '\0'));
}

bool refused_with(const std::string& bytes, ExitCode code, const std::string& part) {
  const auto refused = refusal(bytes);
  const auto& [c, message] = refused;
  CAPTURE(refused.second);
  return c == code && message.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE_BEGIN("safetensors_reader");

TEST_CASE("every dtype of the format, with torch's name and size") {
  struct Case {
    const char* format;
    const char* torch;
    std::size_t bytes;  // of 4 elements
  };
  const Case cases[] = {
      {"F64", "float64", 32},
      {"F32", "float32", 16},
      {"F16", "float16", 8},
      {"BF16", "bfloat16", 8},
      {"I64", "int64", 32},
      {"I32", "int32", 16},
      {"I16", "int16", 8},
      {"I8", "int8", 4},
      {"U64", "uint64", 32},
      {"U32", "uint32", 16},
      {"U16", "uint16", 8},
      {"U8", "uint8", 4},
      {"BOOL", "bool", 4},
      {"F8_E4M3", "float8_e4m3fn", 4},
      {"F8_E5M2", "float8_e5m2", 4},
      {"F8_E8M0", "float8_e8m0fnu", 4},
      {"F8_E4M3FNUZ", "float8_e4m3fnuz", 4},
      {"F8_E5M2FNUZ", "float8_e5m2fnuz", 4},
      {"C64", "complex64", 32},
  };
  std::vector<SafetensorsTensor> tensors;
  for (const auto& c : cases) {
    tensors.push_back({std::string("t.") + c.format, c.format, {2, 2}, std::string(c.bytes, 'x')});
  }
  Model m = read(safetensors_file(tensors));
  CHECK(m.format == Format::safetensors);
  REQUIRE(m.entries.size() == std::size(cases));
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    CAPTURE(cases[i].format);
    const Tensor& t = m.tensors[m.entries[i].tensor];
    CHECK(info(t.dtype).name == cases[i].torch);
    CHECK(t.shape == std::vector<std::int64_t>{2, 2});
    CHECK(t.stride == std::vector<std::int64_t>{2, 1});
    CHECK(t.nbytes() == cases[i].bytes);
    CHECK(t.broken.empty());
    CHECK(m.file_offset(t) == m.storages[*t.storage].file_offset);
  }
}

TEST_CASE("F4 is torch's float4_e2m1fn_x2: pairs along the last dimension") {
  Model m = read(safetensors_file({{"w", "F4", {3, 8}, std::string(12, 'x')}}));
  const Tensor& t = m.tensors[0];
  CHECK(t.dtype == DType::float4_e2m1fn_x2);
  CHECK(t.shape == std::vector<std::int64_t>{3, 4});
  CHECK(t.stride == std::vector<std::int64_t>{4, 1});
  CHECK(t.nbytes() == 12);
  // An odd last dimension is whole bytes for the library, but no torch shape.
  CHECK(refused_with(safetensors_file({{"w", "F4", {2, 3}, std::string(3, 'x')}}),
                     ExitCode::unsupported, "last dimension"));
  // Half a byte is refused by the library itself.
  CHECK(refused_with(safetensors_file({{"w", "F4", {3}, std::string(1, 'x')}}),
                     ExitCode::bad_checkpoint, "do not fill whole bytes"));
  CHECK(refused_with(safetensors_file({{"w", "F4", {}, ""}}), ExitCode::bad_checkpoint,
                     "do not fill whole bytes"));
  // Six-bit elements: valid, but torch has no such dtype.
  CHECK(refused_with(safetensors_file({{"w", "F6_E2M3", {4}, std::string(3, 'x')}}),
                     ExitCode::unsupported, "F6_E2M3 (6-bit elements)"));
  CHECK(refused_with(safetensors_file({{"w", "F6_E3M2", {4}, std::string(3, 'x')}}),
                     ExitCode::unsupported, "torch has no dtype"));
}

TEST_CASE("0-d, empty and large shapes, strides as torch computes them") {
  Model m = read(safetensors_file({{"scalar", "F32", {}, std::string(4, 'a')},
                                   {"empty", "F32", {2, 0, 3}, ""},
                                   {"none", "I64", {0}, ""},
                                   {"vector", "U8", {5}, "abcde"}}));
  REQUIRE(m.entries.size() == 4);
  auto tensor = [&](std::size_t i) -> const Tensor& { return m.tensors[m.entries[i].tensor]; };
  // Data order: the empty tensors sit at offset 4, in header order, after the scalar.
  CHECK(m.entries[0].key == "scalar");
  CHECK(m.entries[1].key == "empty");
  CHECK(m.entries[2].key == "none");
  CHECK(m.entries[3].key == "vector");
  CHECK(tensor(0).shape.empty());
  CHECK(tensor(0).numel() == 1);
  CHECK(tensor(1).stride == std::vector<std::int64_t>{3, 3, 1});  // torch.empty(2, 0, 3)
  CHECK(tensor(1).nbytes() == 0);
  CHECK(m.storages[*tensor(3).storage].file_offset + 5 ==
        safetensors_file({{"scalar", "F32", {}, std::string(4, 'a')},
                          {"empty", "F32", {2, 0, 3}, ""},
                          {"none", "I64", {0}, ""},
                          {"vector", "U8", {5}, "abcde"}})
            .size());
  // A huge dimension beside a 0 is an empty tensor for the library; torch holds it if it fits.
  Model big = read(safetensors_file({{"e", "F32", {0, 9223372036854775807ull}, ""}}));
  CHECK(big.tensors[0].shape[1] == INT64_MAX);
  CHECK(refused_with(safetensors_file({{"e", "F32", {0, 9223372036854775808ull}, ""}}),
                     ExitCode::unsupported, "past what torch can hold"));
  CHECK(refused_with(safetensors_file({{"e", "F32", {0, 4294967296, 4294967296}, ""}}),
                     ExitCode::unsupported, "strides past what torch can hold"));
  // Only the strides count: the first dimension multiplies none.
  CHECK(read(safetensors_file({{"e", "F32", {1ull << 40, 0, 1ull << 30}, ""}})).tensors[0].stride ==
        std::vector<std::int64_t>{1ll << 30, 1ll << 30, 1});
  // More elements than 64 bits count, as the library computes them (in order, overflow first).
  CHECK(refused_with(safetensors_file({{"e", "F32", {4294967296, 4294967296, 0}, ""}}),
                     ExitCode::bad_checkpoint, "more elements than 64 bits count"));
  CHECK(refused_with(safetensors_file({{"e", "F64", {4611686018427387904ull}, ""}}),
                     ExitCode::bad_checkpoint, "more bits than 64 bits count"));
  // 2^64 + 2 elements, which would wrap to 2 (and 2 bytes of data for them).
  CHECK(refused_with(safetensors_file({{"e", "U8", {3, 6148914691236517206ull}, "ab"}}),
                     ExitCode::bad_checkpoint, "more elements than 64 bits count"));
  // torch's 64 dimensions.
  std::vector<std::uint64_t> dims64(64, 1), dims65(65, 1);
  CHECK(read(safetensors_file({{"d", "U8", dims64, "x"}})).tensors[0].shape.size() == 64);
  CHECK(refused_with(safetensors_file({{"d", "U8", dims65, "x"}}), ExitCode::unsupported,
                     "more than 64 dimensions"));
}

TEST_CASE("storages: one per tensor, its bytes in the file, data order, not header order") {
  // Written with data in the order b, a; described in the order a, b (as MLX does).
  std::string data = std::string(8, 'B') + std::string(4, 'A');
  std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
                       R"("b":{"data_offsets":[0,8],"shape":[2],"dtype":"I32"}})";
  std::string file = safetensors_raw(header, data);
  Model m = read(file);
  REQUIRE(m.entries.size() == 2);
  CHECK(m.entries[0].key == "b");
  CHECK(m.entries[1].key == "a");
  const Storage& b = m.storages[*m.tensors[m.entries[0].tensor].storage];
  const Storage& a = m.storages[*m.tensors[m.entries[1].tensor].storage];
  CHECK(b.file_offset == 8 + header.size());
  CHECK(b.nbytes == 8);
  CHECK(a.file_offset == 8 + header.size() + 8);
  CHECK(file.substr(a.file_offset, 4) == "AAAA");
  CHECK(a.key == "a");
  CHECK(a.record.empty());
  CHECK(a.source == 0);
  CHECK(!a.big_endian);
  CHECK(m.sources == std::vector<std::string>{"test.safetensors"});
  CHECK(m.byteorder() == "little");
}

TEST_CASE("__metadata__: strings in header order, null accepted, anything else refused") {
  Model m =
      read(safetensors_file({{"x", "U8", {1}, "x"}}, {{"format", "pt"}, {"b", "2"}, {"a", ""}}));
  CHECK(m.metadata ==
        std::vector<std::pair<std::string, std::string>>{{"format", "pt"}, {"b", "2"}, {"a", ""}});
  // MLX's way of saying none, unpadded.
  Model mlx = read(safetensors_raw(
      R"({"__metadata__":null,"x":{"data_offsets":[0,1],"dtype":"U8","shape":[1]}})", "x"));
  CHECK(mlx.metadata.empty());
  CHECK(mlx.entries.size() == 1);
  CHECK(refused_with(with_header(R"({"__metadata__":{"a":1}})"), ExitCode::bad_checkpoint,
                     "__metadata__ \"a\" is not a string"));
  CHECK(refused_with(with_header(R"({"__metadata__":["a"]})"), ExitCode::bad_checkpoint,
                     "__metadata__ is neither an object nor null"));
  CHECK(refused_with(with_header(R"({"__metadata__":{"a":"1","a":"2"}})"), ExitCode::bad_checkpoint,
                     "the key \"a\" twice"));
  CHECK(refused_with(with_header(R"({"__metadata__":{},"__metadata__":{}})"),
                     ExitCode::bad_checkpoint, "twice"));
  SafetensorsLimits limits;
  limits.max_metadata_entries = 2;
  auto [code, message] =
      refusal(safetensors_file({}, {{"a", "1"}, {"b", "2"}, {"c", "3"}}), limits);
  CHECK(code == ExitCode::unsupported);
  CHECK(message.find("more than 2 entries") != std::string::npos);
}

TEST_CASE("what the library accepts: no tensors, padding or none, unknown members") {
  CHECK(read(safetensors_raw("{}", "")).entries.empty());
  CHECK(read(safetensors_raw("{}      ", "")).entries.empty());  // the library's own empty file
  CHECK(read(safetensors_raw(" \n{}\t\r\n", "")).entries.empty());
  Model m = read(safetensors_raw(
      R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"comment":{"any":[1,{}]}}})", "xy"));
  CHECK(m.entries.size() == 1);
  // A key with escapes is decoded.
  Model e = read(
      safetensors_raw(R"({"a\/b\u00e9":{"dtype":"U8","shape":[],"data_offsets":[0,1]}})", "x"));
  CHECK(e.entries[0].key == "a/b\xc3\xa9");
}

TEST_CASE("the header length: too short, past the file, over 100 MB") {
  CHECK(refused_with("", ExitCode::bad_checkpoint, "an empty file (an interrupted download?)"));
  CHECK(refused_with(std::string(7, '\0'), ExitCode::bad_checkpoint, "too short"));
  CHECK(refused_with(safetensors_raw("{}", "", 1), ExitCode::bad_checkpoint, "invalid JSON"));
  CHECK(refused_with(safetensors_raw("{}", "", 100), ExitCode::bad_checkpoint,
                     "runs past the end of the file"));
  CHECK(refused_with(safetensors_raw("{}", "", 100'000'001), ExitCode::bad_checkpoint,
                     "over the limit of 100000000 bytes"));
  CHECK(refused_with(safetensors_raw("{}", "", UINT64_MAX), ExitCode::bad_checkpoint,
                     "over the limit"));
  CHECK(refused_with(safetensors_raw("", ""), ExitCode::bad_checkpoint, "an empty text"));
}

TEST_CASE("the header's JSON: strict, an object, each tensor described fully and exactly") {
  CHECK(refused_with(with_header("[]"), ExitCode::bad_checkpoint, "not a JSON object"));
  CHECK(refused_with(with_header("\"x\""), ExitCode::bad_checkpoint, "not a JSON object"));
  CHECK(refused_with(with_header("{} x"), ExitCode::bad_checkpoint, "more than whitespace"));
  CHECK(refused_with(with_header(std::string("{}\0\0", 4)), ExitCode::bad_checkpoint,
                     "more than whitespace"));
  CHECK(refused_with(with_header("{\"x\":{\"dtype\":\"U8\",}}"), ExitCode::bad_checkpoint,
                     "trailing comma"));
  CHECK(refused_with(with_header("{\"\xff\":1}"), ExitCode::bad_checkpoint, "UTF-8"));
  auto one = [](const std::string& description, std::size_t data = 4) {
    return with_header("{\"t\":" + description + "}", data);
  };
  CHECK(refused_with(one("[]"), ExitCode::bad_checkpoint, "tensor \"t\": its description is not"));
  CHECK(refused_with(one(R"({"shape":[4],"data_offsets":[0,4]})"), ExitCode::bad_checkpoint,
                     "tensor \"t\" has no dtype"));
  CHECK(refused_with(one(R"({"dtype":"U8","data_offsets":[0,4]})"), ExitCode::bad_checkpoint,
                     "has no shape"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4]})"), ExitCode::bad_checkpoint,
                     "has no data_offsets"));
  CHECK(refused_with(one(R"({"dtype":"F7","shape":[4],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "unknown dtype \"F7\""));
  CHECK(refused_with(one(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "unknown dtype"));
  CHECK(refused_with(one(R"({"dtype":32,"shape":[1],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "dtype is not a string"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":4,"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "shape is not an array"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[-4],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "holds \"-4\", not an integer"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4.0],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "holds \"4.0\""));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4e0],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "holds \"4e0\""));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":["4"],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "not a number"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[[4]],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "not a number"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0,-4]})"),
                     ExitCode::bad_checkpoint, "data_offsets holds \"-4\""));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0.0,4]})"),
                     ExitCode::bad_checkpoint, "data_offsets holds \"0.0\""));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551616]})"),
                     ExitCode::bad_checkpoint, "not an integer from 0 to 2^64 - 1"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0]})"),
                     ExitCode::bad_checkpoint, "fewer than two numbers"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4,4]})"),
                     ExitCode::bad_checkpoint, "more than two numbers"));
  CHECK(refused_with(one(R"({"dtype":"U8","shape":[4],"data_offsets":{"a":0}})"),
                     ExitCode::bad_checkpoint, "data_offsets is not an array"));
  CHECK(refused_with(one(R"({"dtype":"U8","dtype":"U8","shape":[4],"data_offsets":[0,4]})"),
                     ExitCode::bad_checkpoint, "the key \"dtype\" twice"));
  // Two tensors of one name: the library keeps the last; this refuses the file.
  CHECK(refused_with(with_header(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                                 R"("t":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                                 4),
                     ExitCode::bad_checkpoint, "the key \"t\" twice"));
  // Messages say where: the header, at a byte of it.
  auto [code, message] = refusal(one(R"({"dtype":"F7","shape":[4],"data_offsets":[0,4]})"));
  CHECK(message == "safetensors header: at byte 14: tensor \"t\": unknown dtype \"F7\"");
}

TEST_CASE("sizes and extents: as the library checks them, and the whole file") {
  auto file = [](const std::string& tensors, std::size_t data) {
    return with_header("{" + tensors + "}", data);
  };
  // shape x element size must be the length.
  CHECK(refused_with(file(R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]})", 4),
                     ExitCode::bad_checkpoint, "hold 4 bytes, but F32 [2] needs 8"));
  CHECK(refused_with(file(R"("t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]})", 8),
                     ExitCode::bad_checkpoint, "end before they begin"));
  // Overlaps, gaps, out of order.
  CHECK(refused_with(file(R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]})",
                          6),
                     ExitCode::bad_checkpoint, "overlap those of tensor \"a\""));
  CHECK(refused_with(file(R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})",
                          4),
                     ExitCode::bad_checkpoint, "overlap"));
  CHECK(refused_with(file(R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"U8","shape":[4],"data_offsets":[5,9]})",
                          9),
                     ExitCode::bad_checkpoint, "leave bytes [4, 5) of the data to no tensor"));
  CHECK(refused_with(file(R"("a":{"dtype":"U8","shape":[4],"data_offsets":[1,5]})", 5),
                     ExitCode::bad_checkpoint, "leave bytes [0, 1)"));
  // The data ends exactly at the end of the file.
  CHECK(refused_with(file(R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})", 5),
                     ExitCode::bad_checkpoint, "but the file has"));
  CHECK(refused_with(file(R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})", 3),
                     ExitCode::bad_checkpoint, "the file looks truncated"));
  CHECK(refused_with(file(R"("a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]})", 1),
                     ExitCode::bad_checkpoint, "but the file has"));
  CHECK(refused_with(
      file(
          R"("a":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]})",
          0),
      ExitCode::bad_checkpoint, "leave bytes"));
}

TEST_CASE("the tensor limit, and a header of a million tensors read in bounded time") {
  SafetensorsLimits limits;
  limits.max_tensors = 3;
  std::vector<SafetensorsTensor> four;
  for (int i = 0; i < 4; ++i) four.push_back({"t" + std::to_string(i), "U8", {1}, "x"});
  auto [code, message] = refusal(safetensors_file(four), limits);
  CHECK(code == ExitCode::unsupported);
  CHECK(message == "safetensors header: more than 3 tensors");
  CHECK(read(safetensors_file({four.begin(), four.begin() + 3}), limits).entries.size() == 3);

  std::vector<SafetensorsTensor> many;
  for (int i = 0; i < 1'000'000; ++i) {
    many.push_back({"model.layers." + std::to_string(i) + ".weight", "U8", {0}, ""});
  }
  std::string file = safetensors_file(many);
  auto start = std::chrono::steady_clock::now();
  Model m = read(file);
  CHECK(m.entries.size() == 1'000'000);
  CHECK(m.entries[999'999].key == "model.layers.999999.weight");  // header order at one offset
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(30));
}

TEST_SUITE_END();
