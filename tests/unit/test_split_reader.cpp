// SPDX-License-Identifier: MIT
// Unit tests of read_split_directory(): key directories as a mount writes them, with and without
// index.json, values, quantized tensors, broken ones; and hostile directories: meta.json that
// lies (nbytes, shape, dtype), data shorter or longer than it says, missing files, keys claimed
// twice, links leading out, huge and deep JSON. On real files in a temporary directory.
#include "support/temp_dir.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/open_model.hpp>
#include <ckptfs/format/split/split_reader.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <string>
#include <vector>

using namespace ckptfs;
using ckptfs::test::TempDir;

namespace {

// A tensor's directory as the mount writes it: meta.json (its fields, then `extra` members) and
// data. `nbytes` -1: the right count for `data`.
void tensor_dir(const TempDir& t, const std::string& dir, const std::string& key,
                const std::string& dtype, const std::string& shape, const std::string& data,
                const std::string& extra = "", long long nbytes = -1) {
  t.write(dir + "/meta.json",
          fmt::format(R"({{"key": "{}", "dtype": "{}", "stored_dtype": "{}", "shape": {},
  "stride": [1], "storage_offset": 0, "contiguous": true, "nbytes": {}, "source": "m.pth",
  "file_offset": 64, "numpy": "<f4", "storage": {{"key": "0", "record": "archive/data/0", "file_offset": 64,
  "nbytes": 16}}, "shared_with": [], "shared_with_count": 0, "broken": null{}}}
)",
                      key, dtype, dtype, shape,
                      nbytes < 0 ? static_cast<long long>(data.size()) : nbytes, extra));
  t.write(dir + "/data", data);
}

std::vector<std::string> keys(const Model& m) {
  std::vector<std::string> out;
  for (const auto& e : m.entries) out.push_back(e.key);
  return out;
}

std::pair<ExitCode, std::string> refusal(const std::string& dir, const SplitLimits& limits = {}) {
  try {
    read_split_directory(dir, limits);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE_BEGIN("split_reader");

TEST_CASE("key directories without index.json: sorted by key, each tensor its own data file") {
  TempDir t;
  tensor_dir(t, "w", "w", "float32", "[2, 2]", std::string(16, 'a'));
  tensor_dir(t, "a%2Fb", "a/b", "int64", "[]", std::string(8, 'b'));
  tensor_dir(t, "e", "e", "bfloat16", "[0, 3]", "");
  t.write("epoch/value.json", "7\n");
  t.write("cfg/value.json", "{ \"lr\": 0.5, \"names\": [\"x\", null] }\n");
  t.write("model.safetensors", "copied along: ignored");
  DirectoryModel d = read_split_directory(t.path());
  const Model& m = d.model;
  CHECK(m.format == Format::split);
  CHECK(keys(m) == std::vector<std::string>{"a/b", "cfg", "e", "epoch", "w"});
  CHECK(m.entries[1].kind == Entry::Kind::value);
  CHECK(m.entries[1].value_json == R"({"lr":0.5,"names":["x",null]})");
  CHECK(m.entries[3].value_json == "7");
  const Tensor& w = m.tensors[m.entries[4].tensor];
  CHECK(w.dtype == DType::float32);
  CHECK(w.shape == std::vector<std::int64_t>{2, 2});
  CHECK(w.stride == std::vector<std::int64_t>{2, 1});
  CHECK(w.contiguous());
  REQUIRE(w.storage);
  const Storage& s = m.storages[*w.storage];
  CHECK(m.sources[s.source] == "w/data");
  CHECK(s.nbytes == 16);
  CHECK(s.file_offset == 0);
  CHECK(d.sources[s.source]->read_string(0, 16) == std::string(16, 'a'));
  CHECK(m.file_offset(w) == 0u);
  const Tensor& e = m.tensors[m.entries[2].tensor];
  CHECK(e.nbytes() == 0);
  CHECK(e.broken.empty());
  CHECK(d.sources.size() == 3);
  // The same through open_model(), which tells a split directory by its key directories.
  OpenedModel opened = open_model(t.path());
  CHECK(keys(opened.model()) == keys(m));
}

TEST_CASE("index.json gives the order and the keys of values, more directories go after") {
  TempDir t;
  tensor_dir(t, "w", "w", "float32", "[1]", "abcd");
  tensor_dir(t, "0", "0", "float32", "[1]", "efgh", R"(, "key_path": ["opt", 0])");
  tensor_dir(t, "0%#2", "0", "float32", "[1]", "ijkl", R"(, "key_path": ["opt", "0"])");
  t.write(std::string(200, 'v') + "%~0123456789abcdef/value.json", "[1, 2]");
  tensor_dir(t, "extra", "extra", "uint8", "[2]", "xy");
  t.write("index.json", fmt::format(R"({{"source": "/m.pth", "format": "zip", "entries": [
    {{"key": "{}", "path": "{}%~0123456789abcdef", "kind": "value", "dtype": null}},
    {{"key": "0", "key_path": ["opt", "0"], "path": "0%#2", "kind": "tensor"}},
    {{"key": "w", "path": "w", "kind": "tensor"}},
    {{"key": "gone", "path": "gone", "kind": "tensor"}},
    {{"key": "0", "key_path": ["opt", 0], "path": "0", "kind": "tensor"}}]}})",
                                    std::string(300, 'v'), std::string(200, 'v')));
  const Model m = read_split_directory(t.path()).model;
  CHECK(keys(m) == std::vector<std::string>{std::string(300, 'v'), "0", "w", "0", "extra"});
  CHECK(m.entries[0].value_json == "[1,2]");
  CHECK(m.entries[1].key_path == R"(["opt","0"])");
  CHECK(m.entries[3].key_path == R"(["opt",0])");
  CHECK(m.tensors[m.entries[1].tensor].storage);
}

TEST_CASE("the mount's \\udcXX escapes read back as the bytes of a key that is not UTF-8") {
  // The key "lone \udcff" (a str with a lone surrogate: bytes ed b3 bf) as the mount writes it
  // in meta.json, index.json (key and key path) and a value.json string.
  TempDir t;
  const std::string raw = "lone \xed\xb3\xbf";
  const std::string escaped = R"(lone \udced\udcb3\udcbf)";
  tensor_dir(t, raw, escaped, "float32", "[1]", "abcd",
             fmt::format(R"(, "key_path": ["{}"])", escaped));
  t.write("v/value.json",
          fmt::format(R"({{"s": "{}", "n": {}}})", escaped, std::string(2467, '9')));
  SUBCASE("without index.json") {
    const Model m = read_split_directory(t.path()).model;
    CHECK(keys(m) == std::vector<std::string>{raw, "v"});
    CHECK(m.entries[0].key_path == "[\"" + escaped + "\"]");
    CHECK(has(m.entries[1].value_json, escaped));
  }
  SUBCASE("with index.json") {
    t.write(".ckptfs/index.json", fmt::format(R"({{"format": "zip", "entries": [
      {{"key": "v", "path": "v", "kind": "value", "value": {{"s": "{}"}}}},
      {{"key": "{}", "key_path": ["{}"], "path": "{}", "kind": "tensor"}}]}})",
                                              escaped, escaped, escaped, escaped));
    const Model m = read_split_directory(t.path()).model;
    CHECK(keys(m) == std::vector<std::string>{"v", raw});
  }
  // A pair of escapes that is a real surrogate pair is that character, not two bytes.
  tensor_dir(t, "pair", R"(\ud83d\udd25)", "float32", "[1]", "efgh");
  CHECK(keys(read_split_directory(t.path()).model).back() == "\xf0\x9f\x94\xa5");
}

TEST_CASE(".ckptfs/index.json of a whole mount copied, index.json at the root of older copies") {
  // Entries in an order that is not the keys', and a value whose cut name needs the index.
  const std::string long_key(300, 'v');
  const std::string long_name = std::string(200, 'v') + "%~0123456789abcdef";
  auto index = [&](const std::string& first) {
    return fmt::format(R"({{"entries": [{{"key": "{}", "path": "{}", "kind": "tensor"}},
      {{"key": "{}", "path": "{}", "kind": "value"}},
      {{"key": "a", "path": "a", "kind": "tensor"}}]}})",
                       first, first, long_key, long_name);
  };
  auto copy = [&](TempDir& t) {
    tensor_dir(t, "w", "w", "float32", "[1]", "abcd");
    tensor_dir(t, "a", "a", "float32", "[1]", "efgh");
    t.write(long_name + "/value.json", "7");
  };
  {
    TempDir t;  // rsync -a MNT/ dest/: the views' folder with the rest of its files
    copy(t);
    t.write(".ckptfs/index.json", index("w"));
    t.write(".ckptfs/model.safetensors", "copied along: ignored");
    t.write(".ckptfs/model.safetensors.index.json", "ignored");
    const Model m = read_split_directory(t.path()).model;
    CHECK(keys(m) == std::vector<std::string>{"w", long_key, "a"});
    CHECK(keys(open_model(t.path()).model()) == keys(m));
    CHECK(looks_like_split_directory(t.path()));
  }
  {
    TempDir t;  // a copy made before the views moved: index.json at the root
    copy(t);
    t.write("index.json", index("w"));
    CHECK(keys(read_split_directory(t.path()).model) ==
          std::vector<std::string>{"w", long_key, "a"});
  }
  {
    TempDir t;  // both: .ckptfs's is the mount's own
    copy(t);
    t.write(".ckptfs/index.json", index("w"));
    t.write("index.json", R"({"entries": []})");
    CHECK(keys(read_split_directory(t.path()).model) ==
          std::vector<std::string>{"w", long_key, "a"});
  }
  {
    TempDir t;  // .ckptfs without index.json (only the export copied): the root's, or none
    copy(t);
    t.write(".ckptfs/model.safetensors", "ignored");
    CHECK(has(refusal(t.path()).second, "copy the mount's index.json along"));
    t.write("index.json", index("w"));
    CHECK(keys(read_split_directory(t.path()).model) ==
          std::vector<std::string>{"w", long_key, "a"});
  }
  {
    TempDir t;  // only .ckptfs/index.json tells a directory of values alone for a split one
    t.write(long_name + "/value.json", "7");
    t.write(".ckptfs/index.json",
            fmt::format(R"({{"entries": [{{"key": "{}", "path": "{}", "kind": "value"}}]}})",
                        long_key, long_name));
    CHECK(looks_like_split_directory(t.path()));
    CHECK(keys(open_model(t.path()).model()) == std::vector<std::string>{long_key});
  }
  {
    TempDir t;  // its errors name it
    copy(t);
    t.write(".ckptfs/index.json", "{");
    CHECK(has(refusal(t.path()).second, "\".ckptfs/index.json\": "));
  }
  {
    TempDir outside;
    outside.write("index.json", index("w"));
    TempDir t;  // a .ckptfs/index.json or a .ckptfs that leads out is refused, never read
    copy(t);
    t.mkdir(".ckptfs");
    t.symlink(outside.path("index.json"), ".ckptfs/index.json");
    auto [code, message] = refusal(t.path());
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message ==
          "\".ckptfs/index.json\": leads out of the directory (a symbolic link or \"..\")");
    TempDir u;
    copy(u);
    u.symlink(outside.path(), ".ckptfs");
    CHECK(refusal(u.path()).second == "\".ckptfs\": leads out of the directory (a symbolic link)");
  }
}

TEST_CASE("byte order, requires_grad, broken tensors and quantization come from meta.json") {
  TempDir t;
  tensor_dir(t, "big", "big", "float32", "[1]", "abcd",
             R"(, "byteorder": "big", "requires_grad": true)");
  // (meta.json files written whole: tensor_dir() writes the members these set.)
  t.write("b/meta.json", R"({"key": "b", "dtype": "float32", "shape": [3], "nbytes": 0,
                             "broken": "its record is missing from the zip"})");
  t.write("q/meta.json", R"({"key": "q", "dtype": "qint8", "shape": [2, 3], "nbytes": 6,
      "quantization": {"qscheme": "per_channel_affine", "axis": 0,
                       "scales": "q.q_per_channel_scales", "zero_points": "q.q_per_channel_zero_points"}})");
  t.write("q/data", "123456");
  tensor_dir(t, "q.q_per_channel_scales", "q.q_per_channel_scales", "float64", "[2]",
             std::string(16, 's'), R"(, "key_path": ["q", {"__part__": "q_per_channel_scales"}])");
  tensor_dir(t, "q.q_per_channel_zero_points", "q.q_per_channel_zero_points", "int64", "[2]",
             std::string(16, 'z'),
             R"(, "key_path": ["q", {"__part__": "q_per_channel_zero_points"}])");
  t.write("p/meta.json", R"({"key": "p", "dtype": "quint8", "shape": [1], "nbytes": 1,
      "quantization": {"qscheme": "per_tensor_affine", "scale": {"__float__": "inf"}, "zero_point": -3}})");
  t.write("p/data", "x");
  const Model m = read_split_directory(t.path()).model;
  CHECK(keys(m) == std::vector<std::string>{"b", "big", "p", "q", "q.q_per_channel_scales",
                                            "q.q_per_channel_zero_points"});
  const Tensor& b = m.tensors[m.entries[0].tensor];
  CHECK(b.broken == "its record is missing from the zip");
  CHECK_FALSE(b.storage);
  const Tensor& big = m.tensors[m.entries[1].tensor];
  CHECK(m.storages[*big.storage].big_endian);
  CHECK(big.requires_grad);
  const Tensor& p = m.tensors[m.entries[2].tensor];
  REQUIRE(p.quantization);
  CHECK(p.quantization->scheme == "per_tensor_affine");
  CHECK(p.quantization->scale == std::numeric_limits<double>::infinity());
  CHECK(p.quantization->zero_point == -3);
  const Tensor& q = m.tensors[m.entries[3].tensor];
  REQUIRE(q.quantization);
  CHECK(q.quantization->axis == 0);
  CHECK(q.quantization->scales == m.entries[4].tensor);
  CHECK(q.quantization->zero_points == m.entries[5].tensor);
  // Without its scales in the directory, the quantized tensor is broken, saying why.
  t.remove("q.q_per_channel_scales");
  const Model without = read_split_directory(t.path()).model;
  CHECK(has(without.tensors[without.entries[3].tensor].broken, "are not in the directory"));
}

TEST_CASE("meta.json that lies about nbytes, shape or dtype, and data of another size") {
  struct Case {
    const char* name;
    std::string dtype, shape, data, extra;
    long long nbytes;
    ExitCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"nbytes", "float32", "[4]", std::string(16, 'x'), "", 12, ExitCode::bad_checkpoint,
       "nbytes 12, but a float32 tensor of shape [4] holds 16"},
      {"shape", "float32", "[5]", std::string(16, 'x'), "", 16, ExitCode::bad_checkpoint,
       "holds 20"},
      {"dtype", "float64", "[4]", std::string(16, 'x'), "", 16, ExitCode::bad_checkpoint,
       "holds 32"},
      {"short data", "float32", "[4]", std::string(15, 'x'), "", 16, ExitCode::bad_checkpoint,
       "\"w/data\": holds 15 bytes, but meta.json says nbytes 16"},
      {"long data", "float32", "[4]", std::string(17, 'x'), "", 16, ExitCode::bad_checkpoint,
       "holds 17 bytes"},
      {"unknown dtype", "float33", "[4]", std::string(16, 'x'), "", 16, ExitCode::bad_checkpoint,
       "unknown dtype \"float33\""},
      {"overflow", "float64", "[4611686018427387904, 4]", "", "", 0, ExitCode::bad_checkpoint,
       "has more elements than 64 bits count"},
      {"wraps to 8", "uint8", "[4294967296, 4294967296, 8]", std::string(8, 'x'), "", 8,
       ExitCode::bad_checkpoint, "has more elements than 64 bits count"},
      {"bytes past a file", "float64", "[2305843009213693952, 4]", "", "", 0,
       ExitCode::bad_checkpoint, "holds more bytes than a file can"},
      {"negative", "float32", "[-1]", "", "", 0, ExitCode::bad_checkpoint,
       "a dimension of shape is not an integer"},
      {"fraction", "float32", "[4]", std::string(16, 'x'), "", -2, ExitCode::bad_checkpoint,
       "nbytes is not an integer"},
      {"byteorder", "float32", "[4]", std::string(16, 'x'), R"(, "byteorder": "middle")", 16,
       ExitCode::bad_checkpoint, "byteorder is not"},
      {"quantized float", "float32", "[4]", std::string(16, 'x'),
       R"(, "quantization": {"qscheme": "per_tensor_affine", "scale": 1, "zero_point": 0})", 16,
       ExitCode::bad_checkpoint, "quantization given for a float32 tensor"},
      {"key path", "float32", "[4]", std::string(16, 'x'), R"(, "key_path": [[1]])", 16,
       ExitCode::bad_checkpoint, "a key_path part is not a key"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TempDir t;
    tensor_dir(t, "fine", "fine", "uint8", "[1]", "f");
    if (c.nbytes == -2) {
      tensor_dir(t, "w", "w", c.dtype, c.shape, c.data, c.extra, 16);
      // A fraction where an integer goes: rewritten by hand.
      std::string meta =
          "{\"key\": \"w\", \"dtype\": \"float32\", \"shape\": [4], \"nbytes\": 16.0}";
      t.write("w/meta.json", meta);
    } else {
      tensor_dir(t, "w", "w", c.dtype, c.shape, c.data, c.extra, c.nbytes);
    }
    // No structured binding: clang 14 cannot capture one in CHECK_MESSAGE's lambda.
    const auto refused = refusal(t.path());
    const ExitCode code = refused.first;
    const std::string& message = refused.second;
    CHECK(code == c.code);
    CHECK_MESSAGE(has(message, c.message), message);
    CHECK_MESSAGE(has(message, "\"w/"), message);  // names the file
  }
  TempDir dims;
  std::string shape = "[";
  for (int i = 0; i < 65; ++i) shape += i ? ", 1" : "1";
  tensor_dir(dims, "w", "w", "uint8", shape + "]", "x");
  CHECK(refusal(dims.path()).first == ExitCode::unsupported);
}

TEST_CASE("missing files, and directories that are no key directories") {
  TempDir t;
  tensor_dir(t, "w", "w", "float32", "[1]", "abcd");
  t.remove("w/data");
  auto [code, message] = refusal(t.path());
  CHECK(code == ExitCode::io);
  CHECK(message == "\"w/data\": No such file or directory");

  TempDir u;
  tensor_dir(u, "w", "w", "float32", "[1]", "abcd");
  u.mkdir("stray");
  CHECK(refusal(u.path()).second ==
        "\"stray\": holds neither meta.json nor value.json: not a key directory of a mount (or "
        "one copied from a mount whose -o files= left meta.json out)");
  u.remove("stray");
  u.write("w/value.json", "1");
  CHECK(has(refusal(u.path()).second, "holds both meta.json and value.json"));

  TempDir v;
  tensor_dir(v, "w", "w", "float32", "[1]", "abcd");
  v.write("w%#2/value.json", "1");
  CHECK(has(refusal(v.path()).second, "copy the mount's index.json along"));

  TempDir n;
  n.write("w/meta.json", R"({"dtype": "float32", "shape": [1], "nbytes": 4})");
  n.write("w/data", "abcd");
  CHECK(refusal(n.path()).second == "\"w/meta.json\": no \"key\"");
}

TEST_CASE("a key claimed by two directories") {
  TempDir t;
  tensor_dir(t, "w", "w", "float32", "[1]", "abcd");
  tensor_dir(t, "w.copy", "w", "float32", "[1]", "efgh");
  auto [code, message] = refusal(t.path());
  CHECK(code == ExitCode::bad_checkpoint);
  CHECK(message == "key \"w\" is claimed by two directories, \"w\" and \"w.copy\"");
  // A tensor and a value of one key too; one text with two key paths is fine.
  TempDir u;
  tensor_dir(u, "w", "w", "float32", "[1]", "abcd");
  u.write("x/value.json", "1");
  u.write("index.json", R"({"entries": [{"key": "w", "path": "x", "kind": "value"}]})");
  CHECK(refusal(u.path()).first == ExitCode::bad_checkpoint);
  TempDir v;
  tensor_dir(v, "a", "w", "float32", "[1]", "abcd", R"(, "key_path": [0])");
  tensor_dir(v, "b", "w", "float32", "[1]", "abcd", R"(, "key_path": ["0"])");
  CHECK(read_split_directory(v.path()).model.entries.size() == 2);
}

TEST_CASE("links that lead out of the directory are refused, never read") {
  TempDir outside;
  outside.write("secret", "SECRET!!");
  tensor_dir(outside, "w", "w", "uint8", "[8]", "SECRET!!");
  {
    TempDir t;
    tensor_dir(t, "w", "w", "uint8", "[8]", "", "", 8);
    t.remove("w/data");
    t.symlink(outside.path("secret"), "w/data");
    auto [code, message] = refusal(t.path());
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message == "\"w/data\": leads out of the directory (a symbolic link or \"..\")");
  }
  {
    TempDir t;
    t.symlink(outside.path("w"), "w");  // a whole key directory elsewhere
    auto [code, message] = refusal(t.path());
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message == "\"w\": leads out of the directory (a symbolic link)");
  }
  {
    TempDir t;
    tensor_dir(t, "w", "w", "uint8", "[8]", "12345678");
    t.remove("w/meta.json");
    t.symlink(outside.path("w/meta.json"), "w/meta.json");
    CHECK(has(refusal(t.path()).second, "\"w/meta.json\": leads out of the directory"));
  }
  {
    TempDir t;  // a link that stays inside is followed
    tensor_dir(t, "w", "w", "uint8", "[8]", "12345678");
    t.mkdir("v");
    t.symlink("../w/meta.json", "v/meta.json");
    t.symlink("../w/data", "v/data");
    // ...and then claims the key a second time.
    CHECK(has(refusal(t.path()).second, "claimed by two directories"));
  }
}

TEST_CASE("huge, deep and malformed JSON is refused within its limits") {
  TempDir t;
  tensor_dir(t, "w", "w", "float32", "[1]", "abcd");
  t.write("w/meta.json", "{\"key\": \"" + std::string(2u << 20, 'k') + "\"}");
  auto [code, message] = refusal(t.path());
  CHECK(code == ExitCode::unsupported);
  CHECK(has(message, "\"w/meta.json\": 2097163 bytes, over the limit of 1048576"));

  t.write("w/meta.json",
          R"({"key": "w", "x": )" + std::string(10'000, '[') + std::string(10'000, ']') + "}");
  std::tie(code, message) = refusal(t.path());
  CHECK(code == ExitCode::bad_checkpoint);
  CHECK(has(message, "\"w/meta.json\": invalid JSON at byte"));

  for (const char* bad : {"", "[]", "{\"key\": \"w\",}", "{\"key\": \"w\", \"key\": \"v\"}",
                          "{\"key\": 1}", "{\"key\": \"w\"} x"}) {
    CAPTURE(bad);
    t.write("w/meta.json", bad);
    CHECK(refusal(t.path()).first == ExitCode::bad_checkpoint);
  }
  t.write("w/meta.json", R"({"key": "w", "dtype": "float32", "shape": [1], "nbytes": 4})");
  t.write("v/value.json", std::string(100'000, '[') + std::string(100'000, ']'));
  CHECK(has(refusal(t.path()).second, "\"v/value.json\": invalid JSON"));
  t.write("v/value.json", "[1, 2");
  CHECK(has(refusal(t.path()).second, "\"v/value.json\": invalid JSON"));
  t.write("v/value.json", "[1, 2]");
  SplitLimits tiny;
  tiny.max_json_bytes = 60;
  CHECK(refusal(t.path(), tiny).first == ExitCode::unsupported);
  CHECK(read_split_directory(t.path()).model.entries.size() == 2);

  t.write("index.json", R"({"entries": [{"key": "w", "path": "../w", "kind": "tensor"}]})");
  CHECK(has(refusal(t.path()).second, "\"index.json\": at byte"));
  t.write("index.json", R"({"entries": [{"key": "w", "path": "w", "kind": "value"}]})");
  CHECK(has(refusal(t.path()).second, "index.json says its directory holds the value"));
  t.write("index.json", R"({"tensors": 1})");
  CHECK(has(refusal(t.path()).second, "no \"entries\""));
}

TEST_SUITE_END();

TEST_SUITE_BEGIN("split_reader");

TEST_CASE("a GGUF's block-quantized key copied out: its data holds blocks, its values come back") {
  TempDir t;
  // Two Q8_0 blocks (34 bytes each) of a [2, 32] tensor, as a GGUF mount's meta.json says them
  // (its dtype and nbytes those of the values it served: here -o dtype=float16's).
  tensor_dir(t, "q", "q", "float16", "[2, 32]", std::string(68, '\1'),
             R"(, "ggml": {"type": "Q8_0", "type_id": 8, "block_elements": 32, "block_bytes": 34,
  "nbytes": 68, "file_offset": 96, "byteorder": "big", "dequantized": true,
  "not_dequantized": null})",
             128);
  tensor_dir(t, "f", "f", "float32", "[4]", std::string(16, '\2'),
             R"(, "ggml": {"type": "F32", "type_id": 0, "block_elements": 1, "block_bytes": 4,
  "nbytes": 16, "file_offset": 0})");
  DirectoryModel d = read_split_directory(t.path());
  const Model& m = d.model;
  const Tensor& q = m.tensors[m.entries[1].tensor];
  CHECK(q.blocks == BlockFormat::q8_0);
  CHECK(q.dtype == DType::float32);
  CHECK(m.storages[*q.storage].nbytes == 68);
  CHECK(m.storages[*q.storage].big_endian);
  CHECK(m.tensors[m.entries[0].tensor].blocks == BlockFormat::none);
  // ggml nbytes that are not the blocks' size, or data that is not them: refused.
  TempDir bad;
  tensor_dir(bad, "q", "q", "float32", "[2, 32]", std::string(68, '\1'),
             R"(, "ggml": {"type_id": 8, "nbytes": 70})", 256);
  CHECK(
      has(refusal(bad.path()).second, "ggml nbytes 70, but Q8_0 blocks of shape [2, 32] hold 68"));
  TempDir short_data;
  tensor_dir(short_data, "q", "q", "float32", "[2, 32]", std::string(60, '\1'),
             R"(, "ggml": {"type_id": 8, "nbytes": 68})", 256);
  CHECK(
      has(refusal(short_data.path()).second, "holds 60 bytes, but meta.json says ggml nbytes 68"));
}

TEST_SUITE_END();
