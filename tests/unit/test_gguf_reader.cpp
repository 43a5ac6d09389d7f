// SPDX-License-Identifier: MIT
// Unit tests of read_gguf(): versions, byte orders, metadata of every type as JSON, tensors and
// their shapes, split names, and every refusal of a hostile file with its exit code, on files
// assembled in C++ (support/gguf_builder.hpp).
#include "support/gguf_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/gguf/gguf_reader.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <limits>
#include <string>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

Model read(const std::string& bytes, const GgufLimits& limits = {}) {
  MemorySource source(bytes, "test.gguf");
  return read_gguf(source, "test.gguf", limits);
}

bool refused_with(const std::string& bytes, ExitCode code, const std::string& part,
                  const GgufLimits& limits = {}) {
  try {
    read(bytes, limits);
  } catch (const Error& e) {
    CAPTURE(e.what());
    return e.code() == code && std::string(e.what()).find(part) != std::string::npos;
  }
  return false;
}

std::string blocks(std::size_t n, std::size_t size) { return std::string(n * size, '\x11'); }

const Model::JsonMetadata* find(const Model& m, const std::string& key) {
  for (const auto& kv : m.json_metadata) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

}  // namespace

TEST_SUITE_BEGIN("gguf_reader");

TEST_CASE("tensors: names, C-order shapes, dtypes, blocks, offsets after the aligned header") {
  const std::string f32(4 * 6, '\1'), f16(2 * 4, '\2');
  const std::string q4k = blocks(2, 144);
  const std::string bytes = gguf_file({{"a.weight", {3, 2}, 0, f32},
                                       {"b", {4}, 1, f16},
                                       {"blk.0.q", {512, 1}, 12, q4k},
                                       {"i", {2}, 26, std::string(8, '\3')},
                                       {"bf", {2}, 30, std::string(4, '\4')}});
  const Model m = read(bytes);
  CHECK(m.format == Format::gguf);
  REQUIRE(m.entries.size() == 5);
  CHECK(m.entries[0].key == "a.weight");
  const Tensor& a = m.tensors[0];
  CHECK(a.shape == std::vector<std::int64_t>{2, 3});  // ne reversed
  CHECK(a.stride == std::vector<std::int64_t>{3, 1});
  CHECK(a.dtype == DType::float32);
  CHECK(m.tensors[1].dtype == DType::float16);
  const Tensor& q = m.tensors[2];
  CHECK(q.blocks == BlockFormat::q4_k);
  CHECK(q.dtype == DType::float32);
  CHECK(q.shape == std::vector<std::int64_t>{1, 512});
  CHECK(q.stored_nbytes() == 288);
  CHECK(q.nbytes() == 2048);
  CHECK(m.tensors[3].dtype == DType::int32);
  CHECK(m.tensors[4].dtype == DType::bfloat16);
  // Data start: the header's end aligned to 32; each tensor at its offset from there.
  const std::uint64_t data_start = m.storages[0].file_offset;
  CHECK(data_start % 32 == 0);
  CHECK(bytes.substr(data_start, f32.size()) == f32);
  CHECK(m.storages[2].nbytes == 288);
  CHECK(bytes.substr(m.storages[2].file_offset, 288) == q4k);
  CHECK(m.file_offset(q) == m.storages[2].file_offset);
}

TEST_CASE("metadata of every type as JSON, in the file's order, with GGUF's type names") {
  GgufWriter kv;
  kv.key("u8", 0).u8(200);
  kv.key("i8", 1).u8(0x9c);  // -100
  kv.key("u16", 2).u16(60000);
  kv.key("i16", 3).u16(0x8ad0);  // -30000
  kv.key("u32", 4).u32(4000000000u);
  kv.key("i32", 5).u32(0x88ca6c00);  // -2000000000
  kv.key("f32", 6).f32(1e-5f);
  kv.key("bool", 7).u8(1);
  kv.key("str", 8).string("h\xc3\xa9llo \"q\"\n");
  kv.key("u64", 10).u64(~std::uint64_t{0});
  kv.key("i64", 11).u64(std::uint64_t{1} << 63);
  kv.key("f64", 12).f64(0.1);
  kv.key("nan", 6).f32(std::numeric_limits<float>::quiet_NaN());
  kv.key("three", 6).f32(3.0f);
  kv.key("strings", 9).u32(8).u64(2).string("a").string("\xff");
  kv.key("nested", 9).u32(9).u64(2).u32(5).u64(2).u32(1).u32(2).u32(5).u64(0);
  kv.key("empty", 9).u32(4).u64(0);
  const Model m = read(gguf_file({}, 3, false, 32, kv.bytes, 17));
  REQUIRE(m.json_metadata.size() == 17);
  CHECK(m.json_metadata[0].key == "u8");
  auto check = [&](const char* key, const char* type, const char* json) {
    const auto* found = find(m, key);
    REQUIRE(found != nullptr);
    CHECK(found->type == type);
    CHECK(found->value_json == json);
  };
  check("u8", "UINT8", "200");
  check("i8", "INT8", "-100");
  check("u16", "UINT16", "60000");
  check("i16", "INT16", "-30000");
  check("u32", "UINT32", "4000000000");
  check("i32", "INT32", "-2000000000");
  check("f32", "FLOAT32", "1e-05");
  check("bool", "BOOL", "true");
  check("str", "STRING", R"("héllo \"q\"\n")");
  check("u64", "UINT64", "18446744073709551615");
  check("i64", "INT64", "-9223372036854775808");
  check("f64", "FLOAT64", "0.1");
  check("nan", "FLOAT32", R"({"__float__":"nan"})");
  check("three", "FLOAT32", "3.0");
  check("strings", "ARRAY[STRING]", R"(["a","\udcff"])");
  check("nested", "ARRAY[ARRAY[INT32]]", "[[1,2],[]]");
  check("empty", "ARRAY[UINT32]", "[]");
}

TEST_CASE("version 1: 32-bit counts, lengths and dimensions, version 2, alignment 64") {
  for (std::uint32_t version : {1u, 2u}) {
    CAPTURE(version);
    GgufWriter kv(version);
    kv.key("general.name", 8).string("x");
    const Model m =
        read(gguf_file({{"t", {2, 2}, 0, std::string(16, '\5')}}, version, false, 32, kv.bytes, 1));
    CHECK(m.tensors[0].shape == std::vector<std::int64_t>{2, 2});
    CHECK(find(m, "general.name")->value_json == "\"x\"");
  }
  const std::string aligned = gguf_file({{"t", {2}, 0, std::string(8, '\5')}}, 3, false, 64);
  const Model m = read(aligned);
  CHECK(m.storages[0].file_offset % 64 == 0);
  CHECK(find(m, "general.alignment")->value_json == "64");
}

TEST_CASE("big-endian files: numbers read swapped, storages big-endian") {
  GgufWriter kv(3, true);
  kv.key("n", 4).u32(7);
  const std::string bytes = gguf_file({{"t", {2}, 0, std::string("\x3f\x80\0\0\x40\0\0\0", 8)}}, 3,
                                      true, 32, kv.bytes, 1);
  const Model m = read(bytes);
  CHECK(find(m, "n")->value_json == "7");
  CHECK(m.tensors[0].shape == std::vector<std::int64_t>{2});
  CHECK(m.storages[0].big_endian);
  CHECK(m.byteorder() == "big");
}

TEST_CASE("a type ckptfs does not know is a broken tensor, types without values are data only") {
  const Model m = read(
      gguf_file({{"old", {32}, 4, std::string(20, '\0')}, {"q8k", {256}, 15, blocks(1, 292)}}));
  CHECK(m.tensors[0].broken.find("GGML type 4") != std::string::npos);
  CHECK(!m.tensors[0].storage);
  CHECK(m.tensors[1].blocks == BlockFormat::q8_k);
  CHECK(m.tensors[1].broken.empty());
  CHECK(!values_not_served(m, m.tensors[1]).empty());
  CHECK(serve(m, m.tensors[1]).way == ServedTensor::Way::none);
  CHECK(serve_data(m, m.tensors[1]).nbytes == 292);
}

TEST_CASE("hostile files: one-line refusals with their exit codes") {
  const std::string good = gguf_file({{"t", {4}, 0, std::string(16, '\0')}});
  SUBCASE("not GGUF, versions, truncated") {
    CHECK(refused_with("GGUX\3\0\0\0", ExitCode::bad_checkpoint, "not a GGUF file"));
    std::string v4 = good;
    v4[4] = 4;
    CHECK(refused_with(v4, ExitCode::bad_checkpoint, "version 4"));
    CHECK(refused_with(good.substr(0, 30), ExitCode::bad_checkpoint, "past the end of the file"));
    // Cut short: in the header or in the tensors' data, said as README's troubleshooting says.
    CHECK(refused_with(good.substr(0, 30), ExitCode::bad_checkpoint,
                       "the file looks truncated (an interrupted download or copy?): download "
                       "or copy it again"));
    CHECK(refused_with(good.substr(0, good.size() - 20), ExitCode::bad_checkpoint,
                       "run past the end of the file (76 bytes): the file looks truncated"));
  }
  SUBCASE("counts and lengths up to 2^64, never allocated for") {
    GgufWriter w;
    w.header(~std::uint64_t{0} >> 8, 0);
    CHECK(refused_with(w.bytes, ExitCode::unsupported, "tensors, more than"));
    GgufWriter k;
    k.header(0, ~std::uint64_t{0});
    CHECK(refused_with(k.bytes, ExitCode::bad_checkpoint, "past the end"));
    GgufWriter s;
    s.header(0, 1).u64(~std::uint64_t{0});  // a key of 2^64 - 1 bytes
    CHECK(refused_with(s.bytes, ExitCode::bad_checkpoint, "past the end"));
    GgufWriter a;
    a.header(0, 1).key("a", 9).u32(0).u64(~std::uint64_t{0});
    CHECK(refused_with(a.bytes, ExitCode::bad_checkpoint, "past the end"));
  }
  SUBCASE("value types GGUF does not define; keys and names twice") {
    GgufWriter w;
    w.header(0, 1).key("k", 13).u32(0);
    CHECK(refused_with(w.bytes, ExitCode::bad_checkpoint, "value type 13"));
    GgufWriter arr;
    arr.header(0, 1).key("k", 9).u32(99).u64(1);
    CHECK(refused_with(arr.bytes, ExitCode::bad_checkpoint, "array of type 99"));
    GgufWriter twice;
    twice.key("k", 4).u32(1).key("k", 4).u32(2);
    CHECK(refused_with(gguf_file({}, 3, false, 32, twice.bytes, 2), ExitCode::bad_checkpoint,
                       "appears twice"));
    CHECK(refused_with(
        gguf_file({{"t", {4}, 0, std::string(16, '\0')}, {"t", {4}, 0, std::string(16, '\0')}}),
        ExitCode::bad_checkpoint, "a second tensor of that name"));
  }
  SUBCASE("nested arrays: too deep, or of different types") {
    GgufWriter deep;
    deep.key("k", 9);
    for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
    deep.u32(4).u64(0);
    CHECK(refused_with(gguf_file({}, 3, false, 32, deep.bytes, 1), ExitCode::bad_checkpoint,
                       "nests arrays more than 8 deep"));
    GgufWriter mixed;
    mixed.key("k", 9).u32(9).u64(2).u32(4).u64(0).u32(8).u64(0);
    CHECK(refused_with(gguf_file({}, 3, false, 32, mixed.bytes, 1), ExitCode::bad_checkpoint,
                       "arrays of UINT32 and of STRING"));
  }
  SUBCASE("general.alignment not a UINT32 power of two") {
    GgufWriter three;
    three.key("general.alignment", 4).u32(48);
    CHECK(refused_with(gguf_file({}, 3, false, 32, three.bytes, 1), ExitCode::bad_checkpoint,
                       "power of two"));
    GgufWriter type;
    type.key("general.alignment", 10).u64(32);
    CHECK(refused_with(gguf_file({}, 3, false, 32, type.bytes, 1), ExitCode::bad_checkpoint,
                       "not a UINT32"));
  }
  SUBCASE("shapes: too many dimensions, overflowing products, rows that are no whole blocks") {
    GgufWriter dims;
    dims.header(1, 0).tensor_info("t", {1, 1, 1, 1, 1}, 0, 0);
    CHECK(refused_with(dims.bytes, ExitCode::bad_checkpoint, "5 dimensions"));
    GgufWriter big;
    big.header(1, 0).tensor_info("t", {1ull << 40, 1ull << 40}, 0, 0);
    CHECK(refused_with(big.bytes, ExitCode::bad_checkpoint, "more elements than 64 bits"));
    GgufWriter wraps;  // 2^64 + 2 elements: never 2
    wraps.header(1, 0).tensor_info("t", {6148914691236517206ull, 3}, 0, 0);
    CHECK(refused_with(wraps.bytes, ExitCode::bad_checkpoint, "more elements than 64 bits"));
    GgufWriter huge;
    huge.header(1, 0).tensor_info("t", {1ull << 62}, 0, 0);
    CHECK(refused_with(huge.bytes, ExitCode::bad_checkpoint, "more bytes than a file can"));
    CHECK(refused_with(gguf_file({{"q", {100}, 12, blocks(1, 144)}}), ExitCode::bad_checkpoint,
                       "rows of 100 values are no whole number of Q4_K blocks of 256"));
  }
  SUBCASE("offsets: misaligned, outside the file, overlapping, wrapping around 2^64") {
    GgufWriter mis;
    mis.header(1, 0).tensor_info("t", {4}, 0, 8).align();
    mis.bytes += std::string(64, '\0');
    CHECK(refused_with(mis.bytes, ExitCode::bad_checkpoint, "not a multiple of the alignment"));
    GgufWriter out;
    out.header(1, 0).tensor_info("t", {4}, 0, 64).align();
    out.bytes += std::string(16, '\0');
    CHECK(refused_with(out.bytes, ExitCode::bad_checkpoint, "run past the end of the file"));
    GgufWriter wrap;
    wrap.header(1, 0).tensor_info("t", {4}, 0, ~std::uint64_t{0} - 31).align();
    wrap.bytes += std::string(16, '\0');
    CHECK(refused_with(wrap.bytes, ExitCode::bad_checkpoint, "run past the end of the file"));
    GgufWriter overlap;
    overlap.header(2, 0).tensor_info("a", {8}, 0, 0).tensor_info("b", {8}, 0, 0).align();
    overlap.bytes += std::string(32, '\0');
    CHECK(refused_with(overlap.bytes, ExitCode::bad_checkpoint, "overlap"));
  }
  SUBCASE("limits: header bytes, metadata JSON") {
    GgufLimits limits;
    limits.max_header_bytes = 40;
    CHECK(refused_with(good, ExitCode::unsupported, "more than 40 bytes of metadata", limits));
    GgufWriter kv;
    kv.key("k", 9).u32(0).u64(1000);
    kv.bytes += std::string(1000, '\7');
    GgufLimits json;
    json.max_metadata_json_bytes = 100;
    CHECK(refused_with(gguf_file({}, 3, false, 32, kv.bytes, 1), ExitCode::unsupported,
                       "bytes of values as JSON", json));
  }
}

TEST_CASE(
    "limits of JSON text: checked on a string's length before it is read, on its escaped "
    "size before it is written") {
  auto one_string = [](const std::string& key, const std::string& value) {
    GgufWriter kv;
    kv.key(key, 8).string(value);
    return gguf_file({}, 3, false, 32, kv.bytes, 1);
  };
  GgufLimits limits;
  limits.max_metadata_json_bytes = 400;
  // 50 control characters are 300 bytes of JSON ("\u0007"): within 400, as the keys' 2 x 3.
  const Model m = read(one_string("k", std::string(50, '\7')), limits);
  REQUIRE(m.json_metadata.size() == 1);
  std::string expected;
  append_json_string(expected, std::string(50, '\7'));
  CHECK(m.json_metadata[0].value_json == expected);
  // 70 are 420: refused before they are written; 1000 plain bytes, before they are read.
  CHECK(refused_with(one_string("k", std::string(70, '\7')), ExitCode::unsupported,
                     "more than 400 bytes of values as JSON (at key \"k\")", limits));
  CHECK(refused_with(one_string("k", std::string(1000, 'a')), ExitCode::unsupported,
                     "more than 400 bytes of values as JSON", limits));
  // A key is written twice (metadata and metadata_types): 2 x (150 + 2) passes 300.
  limits.max_metadata_json_bytes = 300;
  CHECK(refused_with(one_string(std::string(150, 'k'), ""), ExitCode::unsupported,
                     "bytes of values as JSON (at byte 24)", limits));
  // Tensor names, all of them together.
  GgufLimits names;
  names.max_names_json_bytes = 10;
  const std::string two =
      gguf_file({{"abc", {4}, 0, std::string(16, '\0')}, {"\1\2", {4}, 0, std::string(16, '\0')}});
  CHECK(refused_with(two, ExitCode::unsupported, "more than 10 bytes of tensor names as JSON",
                     names));  // "abc" is 5 bytes of JSON, "\1\2" 14
  names.max_names_json_bytes = 19;
  CHECK(read(two, names).entries.size() == 2);
  names.max_names_json_bytes = 18;
  CHECK(refused_with(two, ExitCode::unsupported, "more than 18 bytes of tensor names as JSON",
                     names));
  // A string of several MiB is read a piece at a time, its UTF-8 sequences across the pieces'
  // ends escaped as if it were read whole.
  std::string text;
  while (text.size() < (3u << 20) + 5) text += "a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\x01\xff";
  const Model big = read(one_string("big", text));
  std::string whole;
  append_json_string(whole, text);
  CHECK(big.json_metadata[0].value_json == whole);
}

TEST_CASE(
    "the tree: data holds the blocks, tensor.npy the values, data-only types have two files") {
  std::string q8(34, '\0');
  q8[0] = 0x00;
  q8[1] = 0x38;  // d = 0.5
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<char>(j - 16);
  const std::string bytes =
      gguf_file({{"q", {32}, 8, q8}, {"k", {256}, 15, std::string(292, '\1')}});
  MemorySource source(bytes, "test.gguf");
  Tree tree(read(bytes), {});
  const ByteSource* sources[] = {&source};
  auto read_file = [&](Tree::Ino ino) {
    ReadBuffer buffer;
    tree.read(ino, 0, 1 << 20, sources, buffer);
    std::string got;
    for (const ReadPiece& p : buffer.pieces()) {
      got += p.memory ? std::string(p.memory, p.length)
                      : source.read_string(p.source_offset, p.length);
    }
    return got;
  };
  const Tree::Ino q = tree.lookup(Tree::root_ino, "q");
  CHECK(read_file(tree.lookup(q, "data")) == q8);
  const std::string npy = read_file(tree.lookup(q, "tensor.npy"));
  REQUIRE(npy.size() == 128 + 32 * 4);
  CHECK(npy.find("'descr': '<f4'") != std::string::npos);
  for (int j = 0; j < 32; ++j) {
    float v = 0;
    std::memcpy(&v, npy.data() + 128 + 4 * j, 4);
    CHECK(v == 0.5f * static_cast<float>(j - 16));
  }
  CHECK(tree.lookup(q, "tensor.pt") != 0);
  const Tree::Ino k = tree.lookup(Tree::root_ino, "k");
  CHECK(tree.child_count(k) == 2);
  CHECK(tree.lookup(k, "data") != 0);
  CHECK(tree.lookup(k, "tensor.npy") == 0);
  const std::string meta = read_file(tree.lookup(k, "meta.json"));
  CHECK(meta.find("\"dequantized\": false") != std::string::npos);
  CHECK(meta.find("gguf-py") != std::string::npos);
  const std::string index =
      read_file(tree.lookup(tree.lookup(Tree::root_ino, ".ckptfs"), "index.json"));
  CHECK(index.find("\"format\": \"gguf\"") != std::string::npos);
}

TEST_CASE("meta.json of every GGML type: data's blocks, their size and offset, the values' dtype") {
  // A block-quantized tensor's data holds its blocks: stored_dtype names their type, nbytes,
  // contiguous and file_offset describe data, dtype and numpy the values tensor.npy holds.
  using nlohmann::json;
  for (auto f = static_cast<int>(BlockFormat::q4_0); f <= static_cast<int>(BlockFormat::q2_0);
       ++f) {
    const BlockFormatInfo& b = info(static_cast<BlockFormat>(f));
    for (const bool big_endian : {false, true}) {
      CAPTURE(b.name);
      CAPTURE(big_endian);
      const Model m = read(gguf_file(
          {{"q", {2 * b.block_elements}, b.ggml_type, blocks(2, b.block_bytes)}}, 3, big_endian));
      const Tensor& t = m.tensors[0];
      const bool values = values_not_served(m, t).empty();
      for (const auto convert : {std::optional<DType>(), std::optional(DType::float16)}) {
        const json j = json::parse(tensor_meta_json(m, 0, SharingIndex(m), convert));
        CHECK(j["stored_dtype"] == b.name);
        CHECK(j["dtype"] == (convert && values ? "float16" : "float32"));
        CHECK(j["nbytes"] == 2 * b.block_bytes);
        CHECK(j["nbytes"] == serve_data(m, t, convert).nbytes);
        CHECK(j["contiguous"] == true);
        CHECK(j["file_offset"] == m.storages[0].file_offset);
        CHECK(j["ggml"]["type"] == b.name);
        CHECK(j["ggml"]["nbytes"] == j["nbytes"]);
        CHECK(j["ggml"]["dequantized"] == values);
        if (values) {
          CHECK(j["numpy"] == (convert ? "<f2" : "<f4"));
          CHECK(j["byteorder"] == "little");
        } else {
          CHECK(j["numpy"].is_null());
          CHECK(j["byteorder"] == (big_endian ? "big" : "little"));  // data's, its blocks'
        }
      }
    }
  }
  // The plain types: data holds the values as stored.
  for (const auto& [type, name, size] : {std::tuple{0u, "float32", 4u},
                                         {1u, "float16", 2u},
                                         {24u, "int8", 1u},
                                         {25u, "int16", 2u},
                                         {26u, "int32", 4u},
                                         {27u, "int64", 8u},
                                         {28u, "float64", 8u},
                                         {30u, "bfloat16", 2u}}) {
    CAPTURE(name);
    const Model m = read(gguf_file({{"p", {4}, type, std::string(4 * size, '\2')}}));
    const json j = json::parse(tensor_meta_json(m, 0, SharingIndex(m)));
    CHECK(j["stored_dtype"] == name);
    CHECK(j["dtype"] == name);
    CHECK(j["nbytes"] == 4 * size);
    CHECK(j["contiguous"] == true);
    CHECK(j["file_offset"] == m.storages[0].file_offset);
    CHECK(j["ggml"]["nbytes"] == j["nbytes"]);
  }
}

TEST_CASE("a header of a billion one-byte array items: refused in bounded time") {
  GgufWriter w;
  w.header(0, 1).key("k", 9).u32(0).u64(1ull << 30);  // claims 1 GiB of bytes, has none
  const auto start = std::chrono::steady_clock::now();
  CHECK(refused_with(w.bytes, ExitCode::bad_checkpoint, "past the end"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}

TEST_CASE("split set names: llama.cpp's pattern, and the combined model") {
  const auto n = gguf_split_name("Llama-3-Q4_K_M-00002-of-00005.gguf");
  REQUIRE(n);
  CHECK(n->prefix == "Llama-3-Q4_K_M");
  CHECK(n->number == 2);
  CHECK(n->count == 5);
  CHECK(gguf_split_file(n->prefix, 5, 5) == "Llama-3-Q4_K_M-00005-of-00005.gguf");
  for (const char* bad :
       {"model.gguf", "m-00000-of-00002.gguf", "m-00003-of-00002.gguf", "m-0001-of-0002.gguf",
        "-00001-of-00002.gguf", "m-00001-of-00002.bin", "m-0000x-of-00002.gguf"}) {
    CAPTURE(bad);
    CHECK(!gguf_split_name(bad));
  }
  GgufWriter kv0, kv1;
  kv0.key("split.no", 2).u16(0).key("split.count", 2).u16(2).key("general.name", 8).string("m");
  kv1.key("split.no", 2).u16(1).key("split.count", 2).u16(2);
  std::vector<Model> parts;
  parts.push_back(
      read(gguf_file({{"a", {4}, 0, std::string(16, '\1')}}, 3, false, 32, kv0.bytes, 3)));
  parts.push_back(
      read(gguf_file({{"b", {4}, 0, std::string(16, '\2')}}, 3, false, 32, kv1.bytes, 2)));
  const Model m = combine_gguf_splits({"m-00001-of-00002.gguf", "m-00002-of-00002.gguf"}, parts);
  REQUIRE(m.entries.size() == 2);
  CHECK(m.entries[1].key == "b");
  CHECK(m.storages[*m.tensors[m.entries[1].tensor].storage].source == 1);
  CHECK(m.json_metadata.size() == 3);  // the first file's
  std::vector<Model> swapped = {parts[1], parts[0]};
  CHECK_THROWS_AS(combine_gguf_splits({"x", "y"}, swapped), Error);
  std::vector<Model> twice = {parts[0], parts[0]};
  twice[1].json_metadata.clear();
  CHECK_THROWS_AS(combine_gguf_splits({"x", "y"}, twice), Error);  // "a" in both
}

TEST_SUITE_END();
