// SPDX-License-Identifier: MIT
// Unit tests of read_rfc_directory(): map.pt's keys in order, each key's file found by the naming
// rule (escapes, reserved names, keys of one text), tensors and values (a dict of numbers is one
// value), and what is refused: a missing file, a file of several tensors, a map.pt that is no
// list of str. The files are written by the torch writers (format/torch/torch_writer.hpp), which
// the integration tests check against torch itself.
#include "support/temp_dir.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/open_model.hpp>
#include <ckptfs/format/split/rfc_reader.hpp>
#include <ckptfs/format/torch/torch_writer.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace ckptfs;
using ckptfs::test::TempDir;
using pickle::Value;

namespace {

std::string tensor_pt(DType dtype, std::vector<std::int64_t> shape, const std::string& bytes) {
  TorchArchive a = tensor_file({dtype, std::move(shape), false, std::nullopt}, {.prefix = "t"});
  std::string out;
  a.write([&](std::string_view b) { out += b; },
          [&](std::size_t, ZipStreamWriter& z) { z.write(bytes); });
  return out;
}

std::string map_pt(const std::vector<std::string>& keys) { return keys_file(keys).bytes(); }

std::vector<std::string> keys(const Model& m) {
  std::vector<std::string> out;
  for (const auto& e : m.entries) out.push_back(e.key);
  return out;
}

std::pair<ExitCode, std::string> refusal(const std::string& dir) {
  try {
    read_rfc_directory(dir);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

}  // namespace

TEST_SUITE_BEGIN("rfc_reader");

TEST_CASE("map.pt's keys in order, each from the file its name gives") {
  TempDir t;
  t.write("map.pt", map_pt({"enc.weight", "a/b", "map", "epoch", "cfg", "enc.weight"}));
  t.write("enc.weight.pt", tensor_pt(DType::float32, {2}, "abcdefgh"));
  t.write("a%2Fb.pt", tensor_pt(DType::bfloat16, {1, 2}, "wxyz"));
  t.write("%map.pt", tensor_pt(DType::int64, {}, "12345678"));
  t.write("epoch.pt", value_file(Value::integer(7)).bytes());
  t.write("cfg.pt", value_file(Value::dict({{Value::str("lr"), Value::integer(1)},
                                            {Value::str("b"), Value::list({})}}))
                        .bytes());
  t.write("enc.weight%#2.pt", tensor_pt(DType::uint8, {3}, "xyz"));
  t.write("unlisted.pt", "whatever: not read");
  DirectoryModel d = read_rfc_directory(t.path());
  const Model& m = d.model;
  CHECK(m.format == Format::rfc);
  CHECK(keys(m) ==
        std::vector<std::string>{"enc.weight", "a/b", "map", "epoch", "cfg", "enc.weight"});
  CHECK(m.sources ==
        std::vector<std::string>{"enc.weight.pt", "a%2Fb.pt", "%map.pt", "enc.weight%#2.pt"});
  CHECK(d.sources.size() == 4);
  const Tensor& w = m.tensors[m.entries[0].tensor];
  CHECK(w.dtype == DType::float32);
  CHECK(w.shape == std::vector<std::int64_t>{2});
  const Storage& s = m.storages[*w.storage];
  CHECK(d.sources[s.source]->read_string(data_offset(s), 8) == "abcdefgh");
  CHECK(m.tensors[m.entries[1].tensor].dtype == DType::bfloat16);
  CHECK(m.entries[3].kind == Entry::Kind::value);
  CHECK(m.entries[3].value_json == "7");
  CHECK(m.entries[4].value_json == R"({"lr":1,"b":[]})");  // one value, not walked
  const Tensor& second = m.tensors[m.entries[5].tensor];
  CHECK(m.sources[m.storages[*second.storage].source] == "enc.weight%#2.pt");
  CHECK(keys(open_model(t.path()).model()) == keys(m));
}

TEST_CASE("what an RFC directory may not hold") {
  TempDir t;
  t.write("map.pt", map_pt({"w", "missing"}));
  t.write("w.pt", tensor_pt(DType::float32, {1}, "abcd"));
  auto [code, message] = refusal(t.path());
  CHECK(code == ExitCode::io);
  CHECK(message == "\"missing.pt\": No such file or directory");

  // A file of a dict of tensors (several entries) is no key's file.
  {
    pickle::Writer w;
    TorchPickler torch(w);
    w.dict(2, [&](std::size_t i) {
      w.string(i ? "b" : "a");
      torch.tensor({DType::uint8, 0, 2, static_cast<std::int64_t>(i), {1}, {}, false});
    });
    TorchArchive a(std::move(w).finish(), torch.storages(), {.prefix = "x"});
    std::string bytes;
    a.write([&](std::string_view b) { bytes += b; },
            [&](std::size_t, ZipStreamWriter& z) { z.write("12"); });
    t.write("missing.pt", bytes);
  }
  std::tie(code, message) = refusal(t.path());
  CHECK(code == ExitCode::bad_checkpoint);
  CHECK(message == "\"missing.pt\": holds 2 entries (first \"a\"), not one tensor or value");

  t.write("map.pt", value_file(Value::dict({})).bytes());
  CHECK(refusal(t.path()).second == "\"map.pt\": does not hold a list of keys");
  t.write("map.pt", value_file(Value::list({Value::str("w"), Value::integer(3)})).bytes());
  CHECK(refusal(t.path()).second == "\"map.pt\": item 1 of its list is not a str");
  t.write("map.pt", "\x80\x02]q\x00.");  // a bare pickle: no zip
  CHECK(refusal(t.path()).first == ExitCode::unsupported);
  t.remove("map.pt");
  t.symlink("/etc/passwd", "map.pt");
  CHECK(refusal(t.path()).first == ExitCode::bad_checkpoint);
  t.remove("map.pt");
  t.write("map.pt", map_pt({"w"}));
  t.remove("w.pt");
  t.symlink("/etc/passwd", "w.pt");
  CHECK(refusal(t.path()).second ==
        "\"w.pt\": leads out of the directory (a symbolic link or \"..\")");
}

TEST_SUITE_END();
