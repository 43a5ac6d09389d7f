// SPDX-License-Identifier: MIT
// Unit tests of a model directory's files served beside the export: which names are the model's
// (the allow-list), what is left out and why (links out, non-regular files, limits), a hub
// cache snapshot's links to its blobs, and config.json's dtype set in place under -o dtype.
#include "support/temp_dir.hpp"

#include <ckptfs/format/model_directory_files.hpp>

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <string>
#include <vector>

using namespace ckptfs;
using ckptfs::test::TempDir;

namespace {

std::vector<std::string> file_names(const Model& model) {
  std::vector<std::string> names;
  for (const Model::File& f : model.files) names.push_back(f.name);
  return names;
}

std::string bytes_of(const Model& model, const std::string& name,
                     std::optional<DType> dtype = std::nullopt) {
  for (const Model::File& f : model.files) {
    if (f.name == name) return f.make(model, dtype);
  }
  return "(absent)";
}

}  // namespace

TEST_CASE("a model directory's files are an allow-list of what transformers reads") {
  for (const char* name :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt",
        "tokenizer.model", "spiece.model", "chat_template.jinja", "chat_template.json",
        "preprocessor_config.json", "processor_config.json", "qwen.tiktoken"}) {
    CAPTURE(name);
    CHECK(model_directory_file(name));
  }
  for (const char* name : {"model.safetensors",
                           "model-00001-of-00002.safetensors",
                           "model.safetensors.index.json",
                           "pytorch_model.bin",
                           "pytorch_model.bin.index.json",
                           "consolidated.00.pth",
                           "model.gguf",
                           "__0_0.distcp",
                           ".metadata",
                           "README.md",
                           "LICENSE",
                           "modeling_custom.py",
                           "trainer_state.json",
                           "optimizer.pt",
                           "training_args.bin",
                           "params.json",
                           ".tiktoken",
                           "Config.json",
                           "config.json.bak",
                           "adapter_model.safetensors",
                           "index.json"}) {
    CAPTURE(name);
    CHECK_FALSE(model_directory_file(name));
  }
}

TEST_CASE("a model directory's files are served byte for byte, never its weights or others") {
  TempDir t;
  t.write("config.json", "{\"torch_dtype\": \"float32\"}\n");
  t.write("tokenizer.json", std::string("{\"a\":\"\xc3\xa9\"}\0tail", 15));
  t.write("merges.txt", "#version: 0.2\na b\n");
  t.write("model.safetensors", "weights");
  t.write("README.md", "card");
  t.write("notes.json", "{}");
  t.mkdir("vocab.txt");  // a directory under an allowed name: not a regular file
  REQUIRE(::mkfifo(t.path("vocab.json").c_str(), 0600) == 0);
  t.write("sub/tokenizer.model", "not in the directory itself");
  Model model;
  SourceTimes times;
  mode_t permissions = 0777;
  add_model_directory_files(model, std::make_shared<const Directory>(t.path()), &times,
                            &permissions);
  CHECK(file_names(model) ==
        std::vector<std::string>{"config.json", "merges.txt", "tokenizer.json"});
  CHECK(bytes_of(model, "tokenizer.json") == std::string("{\"a\":\"\xc3\xa9\"}\0tail", 15));
  CHECK(bytes_of(model, "merges.txt") == "#version: 0.2\na b\n");
  // Not a regular file: left out, saying so.
  REQUIRE(model.notes.size() == 2);
  CHECK(model.notes[0].find("\"vocab.json\"") != std::string::npos);
  CHECK(model.notes[0].find("not a regular file") != std::string::npos);
  CHECK(model.notes[1].find("\"vocab.txt\"") != std::string::npos);
  CHECK(model.notes[1].find("is a directory") != std::string::npos);
  CHECK(times.mtime_sec > 0);
}

TEST_CASE("a model directory file that leads out of the directory is left out") {
  TempDir t;
  t.write("secret", "outside");
  t.write("model/config.json", "{}");
  t.symlink("../secret", "model/tokenizer.json");
  t.symlink("/etc/passwd", "model/vocab.txt");
  t.symlink("config.json", "model/generation_config.json");  // inside: followed
  Model model;
  add_model_directory_files(model, std::make_shared<const Directory>(t.path("model")));
  CHECK(file_names(model) == std::vector<std::string>{"config.json", "generation_config.json"});
  CHECK(bytes_of(model, "generation_config.json") == "{}");
  REQUIRE(model.notes.size() == 2);
  CHECK(model.notes[0].find("\"tokenizer.json\"") != std::string::npos);
  CHECK(model.notes[0].find("leads out of the directory") != std::string::npos);
  CHECK(model.notes[1].find("\"vocab.txt\"") != std::string::npos);
}

TEST_CASE("a hub cache snapshot's model files are its links to its blobs") {
  TempDir t;
  const std::string rev = "models--org--name/snapshots/0123abcd/";
  t.write("models--org--name/blobs/c1", "{\"dtype\": \"bfloat16\"}");
  t.write("models--org--name/blobs/t1", "tokens");
  t.write("models--org--name/refs/main", "0123abcd");
  t.symlink("../../blobs/c1", rev + "config.json");
  t.symlink("../../blobs/t1", rev + "tokenizer.json");
  t.symlink("../../refs/main", rev + "vocab.txt");  // not a blob: refused
  Model model;
  add_model_directory_files(model, std::make_shared<const Directory>(t.path(rev)));
  CHECK(file_names(model) == std::vector<std::string>{"config.json", "tokenizer.json"});
  CHECK(bytes_of(model, "tokenizer.json") == "tokens");
  CHECK(bytes_of(model, "config.json", DType::float16) == "{\"dtype\": \"float16\"}");
  REQUIRE(model.notes.size() == 1);
  CHECK(model.notes[0].find("\"vocab.txt\"") != std::string::npos);
}

TEST_CASE("a model directory file over the limits is left out, and a model's own file stays") {
  TempDir t;
  t.write("tokenizer.json", std::string(model_file_max_bytes + 1, 'x'));
  t.write("config.json", "{\"from\": \"the directory\"}");
  t.write("vocab.json", "{}");
  Model model;
  model.files.push_back({"config.json", [](const Model&, std::optional<DType>) {
                           return std::string("{\"from\": \"the model\"}");
                         }});
  add_model_directory_files(model, std::make_shared<const Directory>(t.path()));
  CHECK(file_names(model) == std::vector<std::string>{"config.json", "vocab.json"});
  CHECK(bytes_of(model, "config.json") == "{\"from\": \"the model\"}");
  REQUIRE(model.notes.size() == 1);
  CHECK(model.notes[0].find("\"tokenizer.json\"") != std::string::npos);
  CHECK(model.notes[0].find("over the limit") != std::string::npos);
}

TEST_CASE("config.json's dtype is set in place and nothing else changes") {
  // torch_dtype, dtype, both; spacing and key order kept; sub-configs set, quantization's not.
  CHECK(config_with_dtype("{\n  \"a\": 1,\n  \"torch_dtype\": \"float32\",\n  \"z\": [1.50]\n}\n",
                          DType::bfloat16) ==
        "{\n  \"a\": 1,\n  \"torch_dtype\": \"bfloat16\",\n  \"z\": [1.50]\n}\n");
  CHECK(config_with_dtype("{\"dtype\":\"float32\",\"torch_dtype\" : null}", DType::float16) ==
        "{\"dtype\":\"float16\",\"torch_dtype\" : \"float16\"}");
  CHECK(config_with_dtype("{\"text_config\": {\"torch_dtype\": \"float32\", \"n\": {\"dtype\": "
                          "\"x\"}}, \"quantization_config\": {\"dtype\": \"int8\"}, "
                          "\"list\": [{\"dtype\": \"y\"}], \"dtype\": \"float32\"}",
                          DType::bfloat16) ==
        "{\"text_config\": {\"torch_dtype\": \"bfloat16\", \"n\": {\"dtype\": \"x\"}}, "
        "\"quantization_config\": {\"dtype\": \"int8\"}, \"list\": [{\"dtype\": \"y\"}], "
        "\"dtype\": \"bfloat16\"}");
  // A string with escapes before it, and a value that is not a string: left alone.
  CHECK(config_with_dtype("{\"s\": \"a\\\"b\\\\\", \"torch_dtype\": \"f\\u006coat32\"}",
                          DType::float16) ==
        "{\"s\": \"a\\\"b\\\\\", \"torch_dtype\": \"float16\"}");
  CHECK(config_with_dtype("{\"torch_dtype\": 32}", DType::float16) == "{\"torch_dtype\": 32}");
  // Neither member, or no JSON: as it is.
  CHECK(config_with_dtype("{\"model_type\": \"gpt2\"}", DType::float16) ==
        "{\"model_type\": \"gpt2\"}");
  CHECK(config_with_dtype("{\"torch_dtype\": \"float32\"", DType::float16) ==
        "{\"torch_dtype\": \"float32\"");
  CHECK(config_with_dtype("{\"torch_dtype\": \"float32\"} x", DType::float16) ==
        "{\"torch_dtype\": \"float32\"} x");
}
