// SPDX-License-Identifier: MIT
// Unit tests of sharded sets: the index (its order, metadata, file names that would leave the
// directory, limits) and the combination of the shards' models under its weight_map.
#include "support/safetensors_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/safetensors/sharded_reader.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

ShardIndex index_of(const std::string& json, const ShardLimits& limits = {}) {
  MemorySource source(json, "model.safetensors.index.json");
  return read_shard_index(source, limits);
}

std::pair<ExitCode, std::string> index_refusal(const std::string& json,
                                               const ShardLimits& limits = {}) {
  try {
    index_of(json, limits);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

Model safetensors_model(const std::string& bytes, const std::string& name) {
  MemorySource source(bytes, name);
  return read_safetensors(source, name);
}

}  // namespace

TEST_SUITE_BEGIN("sharded_reader");

TEST_CASE("an index as transformers writes it: keys in order, files once each") {
  ShardIndex index = index_of(R"({
    "metadata": {"total_size": 4305, "format": "pt", "nested": {"a": 1}},
    "weight_map": {
      "b.weight": "model-00001-of-00002.safetensors",
      "a.weight": "model-00002-of-00002.safetensors",
      "c.weight": "model-00001-of-00002.safetensors",
      "d.bias": "model-00002-of-00002.safetensors"
    },
    "other": [1, 2, {"ignored": true}]
  })");
  CHECK(index.shards == std::vector<std::string>{"model-00001-of-00002.safetensors",
                                                 "model-00002-of-00002.safetensors"});
  REQUIRE(index.weight_map.size() == 4);
  CHECK(index.weight_map[0] == std::pair<std::string, std::uint32_t>{"b.weight", 0});
  CHECK(index.weight_map[1] == std::pair<std::string, std::uint32_t>{"a.weight", 1});
  CHECK(index.weight_map[2] == std::pair<std::string, std::uint32_t>{"c.weight", 0});
  CHECK(index.weight_map[3] == std::pair<std::string, std::uint32_t>{"d.bias", 1});
  // Strings only: total_size is a number.
  CHECK(index.metadata == std::vector<std::pair<std::string, std::string>>{{"format", "pt"}});
  CHECK(index_of(R"({"weight_map": {}})").shards.empty());
  CHECK(index_of(R"({"weight_map": {"a": "sub/dir/x.bin"}, "metadata": null})").shards ==
        std::vector<std::string>{"sub/dir/x.bin"});
}

TEST_CASE("file names that could leave the index's directory are refused") {
  for (const char* name : {"../../etc/passwd", "/etc/passwd", "..", ".", "", "a/../../b",
                           "./x.safetensors", "a//b", "a/", "sub/./x"}) {
    CAPTURE(name);
    auto [code, message] = index_refusal(std::string(R"({"weight_map": {"k": ")") + name + "\"}}");
    CHECK(code == ExitCode::bad_checkpoint);
    CHECK(message.find("which could lead out of the index's directory") != std::string::npos);
    CHECK(message.starts_with("index: at byte "));
  }
  auto [code, message] = index_refusal(R"({"weight_map": {"k": "a\u0000b"}})");
  CHECK(code == ExitCode::bad_checkpoint);
  CHECK(message.find("NUL") != std::string::npos);
  // Dots inside names are names.
  CHECK(index_of(R"({"weight_map": {"k": "..x/y..z/.w"}})").shards.size() == 1);
}

TEST_CASE("an index that is not one: each refused in one line") {
  auto refused = [](const std::string& json, ExitCode code, const std::string& part) {
    const auto result = index_refusal(json);
    const auto& [c, message] = result;
    CAPTURE(result.second);
    return c == code && message.find(part) != std::string::npos;
  };
  CHECK(refused("[]", ExitCode::bad_checkpoint, "the index is not a JSON object"));
  CHECK(refused("{}", ExitCode::bad_checkpoint, "index: no weight_map"));
  CHECK(refused(R"({"weight_map": []})", ExitCode::bad_checkpoint, "weight_map is not an object"));
  CHECK(refused(R"({"weight_map": {"k": 1}})", ExitCode::bad_checkpoint,
                "the file of key \"k\" is not a string"));
  CHECK(refused(R"({"weight_map": {"k": "a", "k": "b"}})", ExitCode::bad_checkpoint,
                "the key \"k\" twice"));
  CHECK(refused(R"({"weight_map": {}, "weight_map": {}})", ExitCode::bad_checkpoint, "twice"));
  CHECK(
      refused(R"({"weight_map": {"k": "a"}} trailing)", ExitCode::bad_checkpoint, "invalid JSON"));
  CHECK(refused(R"({"metadata": 5, "weight_map": {}})", ExitCode::bad_checkpoint,
                "metadata is not an object"));
  CHECK(refused("", ExitCode::bad_checkpoint, "an empty file (an interrupted download?)"));
  ShardLimits limits;
  limits.max_keys = 2;
  CHECK(index_refusal(R"({"weight_map": {"a": "x", "b": "x", "c": "x"}})", limits).first ==
        ExitCode::unsupported);
  limits = {};
  limits.max_shards = 2;
  CHECK(index_refusal(R"({"weight_map": {"a": "x", "b": "y", "c": "z"}})", limits).second ==
        "index: weight_map names more than 2 files");
  CHECK(index_refusal(R"({"weight_map": {"a": "x", "b": "y", "c": "x"}})", limits).first ==
        ExitCode::ok);
  limits = {};
  limits.max_index_bytes = 10;
  CHECK(index_refusal(R"({"weight_map": {}})", limits).first == ExitCode::unsupported);
}

TEST_CASE("combine_shards(): the weight_map's keys, each from the shard it names") {
  std::vector<Model> shards;
  shards.push_back(safetensors_model(
      safetensors_file(
          {{"a", "F32", {1}, "AAAA"}, {"unlisted", "U8", {1}, "u"}, {"b", "I16", {2}, "BBBB"}}),
      "s1.safetensors"));
  shards.push_back(safetensors_model(
      safetensors_file({{"c", "U8", {3}, "CCC"}}, {{"format", "pt"}}), "s2.safetensors"));
  ShardIndex index = index_of(R"({"metadata": {"note": "x"}, "weight_map": {
    "c": "s2.safetensors", "a": "s1.safetensors", "missing": "s2.safetensors",
    "b": "s1.safetensors"}})");
  REQUIRE(index.shards == std::vector<std::string>{"s2.safetensors", "s1.safetensors"});
  std::swap(shards[0], shards[1]);  // shard models come in the index's order of files
  Model m = combine_shards(index, std::move(shards));
  CHECK(m.format == Format::sharded);
  CHECK(m.sources == index.shards);
  CHECK(m.metadata == std::vector<std::pair<std::string, std::string>>{{"note", "x"}});
  REQUIRE(m.entries.size() == 4);
  std::vector<std::string> keys;
  for (const auto& e : m.entries) keys.push_back(e.key);
  CHECK(keys == std::vector<std::string>{"c", "a", "missing", "b"});  // the weight_map's order
  auto tensor = [&](std::size_t i) -> const Tensor& { return m.tensors[m.entries[i].tensor]; };
  auto storage = [&](std::size_t i) -> const Storage& { return m.storages[*tensor(i).storage]; };
  CHECK(storage(0).source == 0);
  CHECK(storage(1).source == 1);
  CHECK(storage(3).source == 1);
  CHECK(tensor(1).dtype == DType::float32);
  CHECK(tensor(3).dtype == DType::int16);
  CHECK(storage(3).key == "b");
  CHECK(tensor(0).broken.empty());
  CHECK(!tensor(2).storage);
  CHECK(tensor(2).broken ==
        "the index puts it in \"s2.safetensors\", which has no tensor of that name");
  // Only the listed tensors and their storages: "unlisted" is in none of them (inspect counts
  // the storages), and the broken tensor of "missing" has none.
  CHECK(m.tensors.size() == 4);
  CHECK(m.storages.size() == 3);
  for (const Storage& s : m.storages) CHECK(s.key != "unlisted");
  // Offsets stay the shard's own.
  CHECK(storage(0).file_offset ==
        safetensors_file({{"c", "U8", {3}, "CCC"}}, {{"format", "pt"}}).size() - 3);
}

TEST_SUITE_END();
