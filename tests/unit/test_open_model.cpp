// SPDX-License-Identifier: MIT
// Unit tests of open_model(): what a file, a directory or an index is read as, the shards of a
// sharded set (opened once each, in parallel, the first failure in the index's order), sources
// relative to what was named, and the times of the tree. On real files in a temporary directory.
#include "support/fake_checkpoint.hpp"
#include "support/gguf_builder.hpp"
#include "support/impostor_lookalike.hpp"
#include "support/safetensors_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/open_model.hpp>

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

using namespace ckptfs;
using namespace ckptfs::test;
namespace fs = std::filesystem;

namespace {

// A fresh directory, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("ckptfs-unit-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& bytes) const {
    fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
  std::string path(const std::string& name = "") const {
    return name.empty() ? path_.string() : (path_ / name).string();
  }

 private:
  fs::path path_;
};

std::string one_tensor(const std::string& name, const std::string& data = "abcd") {
  return safetensors_file({{name, "U8", {data.size()}, data}});
}

// An index as transformers writes it, of {key: file}.
std::string index_json(const std::vector<std::pair<std::string, std::string>>& map) {
  std::string out = R"({"metadata": {"total_size": 0}, "weight_map": {)";
  for (std::size_t i = 0; i < map.size(); ++i) {
    out += (i ? ", \"" : "\"") + map[i].first + "\": \"" + map[i].second + "\"";
  }
  return out + "}}";
}

std::vector<std::string> keys(const Model& m) {
  std::vector<std::string> out;
  for (const auto& e : m.entries) out.push_back(e.key);
  return out;
}

std::pair<ExitCode, std::string> refusal(const std::string& location,
                                         const OpenOptions& options = {}) {
  try {
    open_model(location, options);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

void set_mtime(const std::string& path, std::int64_t sec) {
  struct timespec times[2] = {{sec, 0}, {sec, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

}  // namespace

TEST_SUITE_BEGIN("open_model");

TEST_CASE("a single file: safetensors by name or first bytes, torch otherwise") {
  TempDir dir;
  std::string st = dir.write("weights.safetensors", one_tensor("w"));
  OpenedModel opened = open_model(st);
  CHECK(opened.model().format == Format::safetensors);
  CHECK(opened.model().sources == std::vector<std::string>{"weights.safetensors"});
  CHECK(opened.sources().size() == 1);
  // By its first bytes, whatever its name.
  std::string renamed = dir.write("weights.bin", one_tensor("w"));
  CHECK(open_model(renamed).model().format == Format::safetensors);
  // torch.save's zip.
  std::string pth = dir.write(
      "model.pth",
      torch_zip(state_dict_pickle({{"fc.weight", "0", 4, 0, {2, 2}, {2, 1}}}), {{"0", floats(4)}}));
  OpenedModel torch = open_model(pth);
  CHECK(torch.model().format == Format::zip);
  CHECK(torch.model().sources == std::vector<std::string>{"model.pth"});
  // A bad header named .safetensors is a safetensors error, not "not a PyTorch checkpoint".
  std::string bad = dir.write("bad.safetensors", safetensors_raw("  [", ""));
  auto [code, message] = refusal(bad);
  CHECK(code == ExitCode::bad_checkpoint);
  CHECK(message.starts_with("safetensors header: "));
}

TEST_CASE("a directory: transformers' names first, else its one index or safetensors file") {
  TempDir dir;
  dir.write("model.safetensors.index.json", index_json({{"s", "shard.safetensors"}}));
  dir.write("shard.safetensors", one_tensor("s"));
  dir.write("config.json", "{}");
  OpenedModel sharded = open_model(dir.path());
  CHECK(sharded.model().format == Format::sharded);
  CHECK(keys(sharded.model()) == std::vector<std::string>{"s"});
  // model.safetensors comes before the index, as in transformers.
  dir.write("model.safetensors", one_tensor("single"));
  OpenedModel single = open_model(dir.path() + "/");
  CHECK(single.model().format == Format::safetensors);
  CHECK(single.model().sources == std::vector<std::string>{"model.safetensors"});

  TempDir bin;
  bin.write("pytorch_model.bin",
            torch_zip(state_dict_pickle({{"w", "0", 2, 0, {2}, {1}}}), {{"0", floats(2)}}));
  CHECK(keys(open_model(bin.path()).model()) == std::vector<std::string>{"w"});
  // A second checkpoint beside it (a PEFT adapter, a stray file): two, and neither is guessed.
  bin.write("adapter.safetensors", one_tensor("x"));
  auto [bin_code, bin_message] = refusal(bin.path());
  CHECK(bin_code == ExitCode::io);
  CHECK(bin_message ==
        "a directory of 2 checkpoints: \"adapter.safetensors\", "
        "\"pytorch_model.bin\": name the one to mount, as in: ckptfs " +
            bin.path() + "/adapter.safetensors MOUNTPOINT");
  // transformers' two formats of one model: as transformers loads them, safetensors first.
  TempDir both;
  both.write("pytorch_model.bin",
             torch_zip(state_dict_pickle({{"w", "0", 2, 0, {2}, {1}}}), {{"0", floats(2)}}));
  both.write("model.safetensors", one_tensor("st"));
  CHECK(keys(open_model(both.path()).model()) == std::vector<std::string>{"st"});

  TempDir other;  // diffusers' names: the one index there is
  other.write("diffusion_pytorch_model.safetensors.index.json",
              index_json({{"u", "diffusion_pytorch_model-00001-of-00001.safetensors"}}));
  other.write("diffusion_pytorch_model-00001-of-00001.safetensors", one_tensor("u"));
  CHECK(open_model(other.path()).model().format == Format::sharded);

  TempDir lone;
  lone.write("only.safetensors", one_tensor("o"));
  CHECK(keys(open_model(lone.path()).model()) == std::vector<std::string>{"o"});

  TempDir two;
  two.write("a.index.json", index_json({}));
  two.write("b.index.json", index_json({}));
  auto [code, message] = refusal(two.path());
  CHECK(code == ExitCode::io);
  CHECK(message ==
        "a directory of 2 checkpoints: \"a.index.json\" (a sharded set), "
        "\"b.index.json\" (a sharded set): name the one to mount, as in: ckptfs " +
            two.path() + "/a.index.json MOUNTPOINT");

  TempDir empty;
  CHECK(refusal(empty.path()).first == ExitCode::io);
  CHECK(refusal(empty.path()).second.find("nothing to mount") != std::string::npos);
}

TEST_CASE("an index: its shards beside it, sources as the index names them, mixed formats") {
  TempDir dir;
  dir.write("sub/model-1.safetensors",
            safetensors_file({{"b", "F32", {1}, "BBBB"}, {"a", "U8", {2}, "AA"}}));
  dir.write("model-2.bin", torch_zip(state_dict_pickle({{"t.weight", "0", 4, 0, {2, 2}, {2, 1}},
                                                        {"unlisted", "1", 1, 0, {1}, {1}}}),
                                     {{"0", floats(4)}, {"1", floats(1)}}));
  std::string index =
      dir.write("model.safetensors.index.json", index_json({{"a", "sub/model-1.safetensors"},
                                                            {"t.weight", "model-2.bin"},
                                                            {"b", "sub/model-1.safetensors"}}));
  OpenedModel opened = open_model(index);
  const Model& m = opened.model();
  CHECK(m.format == Format::sharded);
  CHECK(m.sources == std::vector<std::string>{"sub/model-1.safetensors", "model-2.bin"});
  CHECK(keys(m) == std::vector<std::string>{"a", "t.weight", "b"});
  REQUIRE(opened.sources().size() == 2);
  CHECK(opened.sources()[1]->size() == fs::file_size(dir.path("model-2.bin")));
  const Tensor& t = m.tensors[m.entries[1].tensor];
  CHECK(t.broken.empty());
  CHECK(m.storages[*t.storage].source == 1);
  // The shard's own bytes at its own offsets.
  auto offset = m.file_offset(t);
  REQUIRE(offset);
  std::string bytes(16, '\0');
  opened.sources()[1]->read(*offset, std::as_writable_bytes(std::span(bytes)));
  CHECK(bytes == floats(4));
  // Named by its directory, the same model.
  CHECK(keys(open_model(dir.path()).model()) == keys(m));
}

TEST_CASE("a missing shard, a shard outside the directory, a bad shard: one error naming it") {
  TempDir dir;
  dir.write("a.safetensors", one_tensor("a"));
  std::string index =
      dir.write("x.index.json",
                index_json({{"a", "a.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}));
  auto [code, message] = refusal(index);
  CHECK(code == ExitCode::io);
  CHECK(message ==
        "shard \"model-00002-of-00002.safetensors\" (named by the index): No such file "
        "or directory");
  dir.write("y.index.json", index_json({{"a", "../../etc/passwd"}}));
  auto [code2, message2] = refusal(dir.path("y.index.json"));
  CHECK(code2 == ExitCode::bad_checkpoint);
  CHECK(message2.find("\"../../etc/passwd\": a path with a \".\" or \"..\" component") !=
        std::string::npos);
  dir.write("bad.safetensors", safetensors_raw("{}", "extra"));
  dir.write("z.index.json", index_json({{"a", "a.safetensors"}, {"b", "bad.safetensors"}}));
  auto [code3, message3] = refusal(dir.path("z.index.json"));
  CHECK(code3 == ExitCode::bad_checkpoint);
  CHECK(message3.starts_with("shard \"bad.safetensors\" (named by the index): the tensors' data"));
  // A .json that is no index, of no name known.
  dir.write("settings.json", R"({"hidden_size": 8})");
  CHECK(refusal(dir.path("settings.json")).second ==
        "index: no weight_map: not the index of a sharded set");
}

TEST_CASE("a model's other JSON files named by mistake: what each is and what to name") {
  TempDir dir;
  dir.write("model.safetensors", one_tensor("w"));
  const std::pair<const char*, const char*> named[] = {
      {"config.json",
       "a model config (transformers' config.json), not a checkpoint: name its directory, "
       "which holds the weights"},
      {"generation_config.json", "a model's generation config, not a checkpoint: name its "},
      {"tokenizer.json", "a tokenizer, not a checkpoint: name its directory"},
      {"tokenizer_config.json", "a tokenizer's config, not a checkpoint: name its directory"},
      {"trainer_state.json",
       "a Hugging Face Trainer's state (of a checkpoint-N directory), not a checkpoint: name "
       "its directory, which holds the model's weights"},
      {"adapter_config.json",
       "a PEFT adapter's config, not a checkpoint: name its directory, "
       "which holds the adapter's weights (adapter_model.safetensors)"},
      {"model_index.json",
       "a diffusers pipeline's index, not a checkpoint: name the directory "
       "of one of its components"}};
  for (const auto& [name, message] : named) {
    CAPTURE(name);
    dir.write(name, R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})");
    auto [code, text] = refusal(dir.path(name));
    CHECK(code == ExitCode::io);
    CHECK(text.starts_with(message));
  }
  // The directory itself mounts the weights beside them.
  CHECK(keys(open_model(dir.path()).model()) == std::vector<std::string>{"w"});
  // An index that happens to bear such a name is still read as one.
  dir.write("config.json", index_json({{"w", "model.safetensors"}}));
  CHECK(keys(open_model(dir.path("config.json")).model()) == std::vector<std::string>{"w"});
}

TEST_CASE("members that lead out of the directory are refused, what was named is followed") {
  TempDir outside;
  outside.write("secret.safetensors", one_tensor("secret"));
  outside.write("model.safetensors", one_tensor("secret"));
  TempDir dir;
  // A sharded set whose second shard is a link out, and one whose folder is.
  dir.write("set/a.safetensors", one_tensor("a"));
  fs::create_symlink(outside.path("secret.safetensors"), dir.path("set/b.safetensors"));
  fs::create_symlink(outside.path(), dir.path("set/sub"));
  const std::string index = dir.write("set/model.safetensors.index.json",
                                      index_json({{"a", "a.safetensors"}, {"b", "b.safetensors"}}));
  const std::string by_folder =
      dir.write("set/by_folder.index.json", index_json({{"s", "sub/secret.safetensors"}}));
  const std::string leads_out = "leads out of the directory (a symbolic link or \"..\")";
  CHECK(refusal(index) == std::pair{ExitCode::bad_checkpoint,
                                    "shard \"b.safetensors\" (named by the index): " + leads_out});
  CHECK(refusal(by_folder) ==
        std::pair{ExitCode::bad_checkpoint,
                  "shard \"sub/secret.safetensors\" (named by the index): " + leads_out});
  // The index itself named through a link: followed, its shards beside the link.
  dir.write("own/a.safetensors", one_tensor("a"));
  dir.write("own/b.safetensors", one_tensor("b"));
  fs::create_symlink(index, dir.path("own/model.safetensors.index.json"));
  CHECK(keys(open_model(dir.path("own/model.safetensors.index.json")).model()) ==
        std::vector<std::string>{"a", "b"});

  // A GGUF split set with a file that is a link out; the file named may be a link itself.
  GgufWriter kv0, kv1;
  kv0.key("split.no", 2).u16(0).key("split.count", 2).u16(2);
  kv1.key("split.no", 2).u16(1).key("split.count", 2).u16(2);
  const std::string part0 =
      gguf_file({{"a", {4}, 0, std::string(16, '\1')}}, 3, false, 32, kv0.bytes, 2);
  const std::string part1 =
      gguf_file({{"b", {4}, 0, std::string(16, '\2')}}, 3, false, 32, kv1.bytes, 2);
  dir.write("gguf/m-00001-of-00002.gguf", part0);
  outside.write("m-00002-of-00002.gguf", part1);
  fs::create_symlink(outside.path("m-00002-of-00002.gguf"), dir.path("gguf/m-00002-of-00002.gguf"));
  CHECK(refusal(dir.path("gguf/m-00001-of-00002.gguf")) ==
        std::pair{ExitCode::bad_checkpoint, "split file \"m-00002-of-00002.gguf\": " + leads_out});
  CHECK(refusal(dir.path("gguf")).second ==
        "\"m-00001-of-00002.gguf\": split file \"m-00002-of-00002.gguf\": " + leads_out);
  outside.write("m-00001-of-00002.gguf", part0);
  dir.write("gguf2/m-00002-of-00002.gguf", part1);
  fs::create_symlink(outside.path("m-00001-of-00002.gguf"),
                     dir.path("gguf2/m-00001-of-00002.gguf"));
  CHECK(keys(open_model(dir.path("gguf2/m-00001-of-00002.gguf")).model()) ==
        std::vector<std::string>{"a", "b"});
  CHECK(refusal(dir.path("gguf2/m-00002-of-00002.gguf")).second ==
        "split file \"m-00001-of-00002.gguf\": " + leads_out);

  // A directory whose one checkpoint is a link out: the user named the directory, not it.
  fs::create_directories(dir.path("single"));
  fs::create_symlink(outside.path("model.safetensors"), dir.path("single/model.safetensors"));
  CHECK(refusal(dir.path("single")) ==
        std::pair{ExitCode::bad_checkpoint, "\"model.safetensors\": " + leads_out});
  // Named itself, it is followed.
  CHECK(keys(open_model(dir.path("single/model.safetensors")).model()) ==
        std::vector<std::string>{"secret"});
}

TEST_CASE("a Hugging Face cache snapshot mounts: its links to its own blobs are followed") {
  TempDir cache;
  const std::string repo = "hub/models--org--name/";
  const std::string rev = repo + "snapshots/0123abcd/";
  cache.write(repo + "blobs/s1", one_tensor("w"));
  cache.write(repo + "blobs/s2", one_tensor("v"));
  cache.write(repo + "blobs/ix",
              index_json({{"w", "model-1.safetensors"}, {"v", "sub/model-2.safetensors"}}));
  cache.write(repo + "blobs/cf", R"({"model_type": "gpt2"})");
  cache.write(repo + "refs/main", "0123abcd");
  fs::create_directories(cache.path(rev + "sub"));
  fs::create_symlink("../../blobs/s1", cache.path(rev + "model-1.safetensors"));
  fs::create_symlink("../../../blobs/s2", cache.path(rev + "sub/model-2.safetensors"));
  fs::create_symlink("../../blobs/ix", cache.path(rev + "model.safetensors.index.json"));
  fs::create_symlink("../../blobs/cf", cache.path(rev + "config.json"));
  const std::vector<std::string> both{"w", "v"};
  CHECK(keys(open_model(cache.path(rev)).model()) == both);
  CHECK(keys(open_model(cache.path(rev + "model.safetensors.index.json")).model()) == both);
  // A snapshot's link to another revision, or to refs/, is no blob.
  cache.write(repo + "snapshots/old/model-1.safetensors", one_tensor("old"));
  fs::remove(cache.path(rev + "model-1.safetensors"));
  fs::create_symlink("../old/model-1.safetensors", cache.path(rev + "model-1.safetensors"));
  CHECK(refusal(cache.path(rev))
            .second.starts_with("\"model.safetensors.index.json\": shard \"model-1.safetensors\" "
                                "(named by the index): "
                                "leads out of the directory"));
  // The same tree without the repository folder's name is no snapshot: nothing is followed.
  TempDir plain;
  plain.write("blobs/s1", one_tensor("w"));
  fs::create_directories(plain.path("snapshots/rev"));
  fs::create_symlink("../../blobs/s1", plain.path("snapshots/rev/model.safetensors"));
  CHECK(refusal(plain.path("snapshots/rev")).first == ExitCode::bad_checkpoint);
}

TEST_CASE("a Trainer's checkpoint-N: the model's weights, its own files and ZeRO's left aside") {
  TempDir run;
  const std::string ckpt = run.path("checkpoint-5");
  fs::create_directories(ckpt);
  run.write("checkpoint-5/model.safetensors", one_tensor("w"));
  run.write("checkpoint-5/config.json", R"({"model_type": "gpt2"})");
  run.write("checkpoint-5/trainer_state.json", R"({"global_step": 5})");
  const std::string saved =
      torch_zip(state_dict_pickle({{"w", "0", 2, 0, {2}, {1}}}), {{"0", floats(2)}});
  for (const char* name : {"training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt",
                           "rng_state.pth", "rng_state_0.pth", "rng_state_1.pth"}) {
    run.write(std::string("checkpoint-5/") + name, saved);
  }
  CHECK(keys(open_model(ckpt).model()) == std::vector<std::string>{"w"});
  CHECK(open_model(ckpt).model().sources == std::vector<std::string>{"model.safetensors"});
  // Without trainer_state.json they are checkpoints like any other.
  fs::rename(run.path("checkpoint-5/trainer_state.json"), run.path("state.json"));
  CHECK(refusal(ckpt).second.starts_with("a directory of 8 checkpoints: "));
  fs::rename(run.path("state.json"), run.path("checkpoint-5/trainer_state.json"));
  // With DeepSpeed: `latest` and global_step5/ beside the model: the model still.
  run.write("checkpoint-5/latest", "global_step5");
  run.write("checkpoint-5/global_step5/mp_rank_00_model_states.pt", saved);
  run.write("checkpoint-5/zero_to_fp32.py", "# DeepSpeed's script");
  CHECK(open_model(ckpt).model().format == Format::safetensors);
  // ZeRO-3 without gathered weights saves no model file: the ZeRO checkpoint is what there is.
  fs::remove(run.path("checkpoint-5/model.safetensors"));
  auto [code, message] = refusal(ckpt);
  CHECK(message.starts_with("\"global_step5/mp_rank_00_model_states.pt\": "));
  // Two model files are still two.
  run.write("checkpoint-5/model.safetensors", one_tensor("w"));
  run.write("checkpoint-5/other.safetensors", one_tensor("o"));
  CHECK(refusal(ckpt).second.starts_with(
      "a directory of 2 checkpoints: \"model.safetensors\", \"other.safetensors\": "));
}

TEST_CASE("latest naming a tag that is not there: the message names latest") {
  TempDir run;
  run.write("latest", "global_step7\n");
  run.write("zero_to_fp32.py", "# DeepSpeed's script");
  const std::string missing =
      "latest names the tag \"global_step7\", which does not exist here: name the tag "
      "directory that holds the *_model_states.pt files, or write its name into latest";
  CHECK(refusal(run.path()) == std::pair{ExitCode::bad_checkpoint, missing});
  CHECK(refusal(run.path("latest")) == std::pair{ExitCode::bad_checkpoint, missing});
  fs::create_directories(run.path("global_step7"));
  CHECK(refusal(run.path()) ==
        std::pair{ExitCode::io, std::string("latest names the tag \"global_step7\", which holds "
                                            "no *_model_states.pt: not a DeepSpeed checkpoint "
                                            "directory")});
}

TEST_CASE("the permissions of a model of several files: the strictest of them all") {
  TempDir dir;
  const std::string a = dir.write("a.safetensors", one_tensor("a"));
  const std::string b = dir.write("b.safetensors", one_tensor("b"));
  const std::string index = dir.write("model.safetensors.index.json",
                                      index_json({{"a", "a.safetensors"}, {"b", "b.safetensors"}}));
  for (const std::string& f : {a, b, index}) REQUIRE(::chmod(f.c_str(), 0644) == 0);
  CHECK(open_model(index).permissions() == 0644);
  CHECK(open_model(dir.path()).permissions() == 0644);
  REQUIRE(::chmod(b.c_str(), 0600) == 0);
  CHECK(open_model(index).permissions() == 0600);
  CHECK(open_model(dir.path()).permissions() == 0600);
  REQUIRE(::chmod(b.c_str(), 0644) == 0);
  REQUIRE(::chmod(index.c_str(), 0640) == 0);
  CHECK(open_model(index).permissions() == 0640);
  CHECK(open_model(a).permissions() == 0644);
}

TEST_CASE("a hundred shards: each opened once, in parallel, the first failure in order wins") {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> map;
  for (int i = 0; i < 100; ++i) {
    std::string shard = "model-" + std::to_string(1000 + i) + ".safetensors";
    dir.write(shard, safetensors_file({{"k" + std::to_string(i) + ".a", "U8", {1}, "a"},
                                       {"k" + std::to_string(i) + ".b", "U8", {1}, "b"}}));
    map.emplace_back("k" + std::to_string(i) + ".a", shard);
    map.emplace_back("k" + std::to_string(i) + ".b", shard);
  }
  std::string index = dir.write("model.safetensors.index.json", index_json(map));
  std::atomic<int> opens{0};
  OpenOptions options;
  options.open = [&](const std::string& location) {
    ++opens;
    return open_local_file(location);
  };
  OpenedModel opened = open_model(index, options);
  CHECK(opens == 1);  // the index; the shards are members, opened beneath its directory
  CHECK(opened.sources().size() == 100);  // each once
  CHECK(opened.model().entries.size() == 200);
  CHECK(opened.model().sources.size() == 100);
  for (std::size_t i = 0; i < 200; ++i) {
    CHECK(opened.model().entries[i].key == map[i].first);
    const Tensor& t = opened.model().tensors[opened.model().entries[i].tensor];
    CHECK(opened.model().sources[opened.model().storages[*t.storage].source] == map[i].second);
  }
  // Break shards 10 and 60: whichever thread finds which first, shard 10 is the error.
  dir.write("model-1060.safetensors", "garbage");
  dir.write("model-1010.safetensors", safetensors_raw("{}", "x"));
  for (int run = 0; run < 5; ++run) {
    CHECK(refusal(index).second.starts_with("shard \"model-1010.safetensors\""));
  }
}

TEST_CASE("the tree's times: the newest of the files read") {
  TempDir dir;
  std::string a = dir.write("a.safetensors", one_tensor("a"));
  std::string b = dir.write("b.safetensors", one_tensor("b"));
  std::string index =
      dir.write("i.index.json", index_json({{"a", "a.safetensors"}, {"b", "b.safetensors"}}));
  set_mtime(a, 1'000'000'000);
  set_mtime(b, 1'500'000'000);
  set_mtime(index, 1'200'000'000);
  CHECK(open_model(index).times().mtime_sec == 1'500'000'000);
  set_mtime(index, 1'700'000'000);
  CHECK(open_model(index).times().mtime_sec == 1'700'000'000);
  CHECK(open_model(a).times().mtime_sec == 1'000'000'000);
}

// A legacy torch.save stream of one float32 tensor `key` of 4 elements.
std::string legacy_file(const std::string& key) {
  auto pickle_of = [](auto&& fill) {
    PickleBuilder p;
    p.proto(2);
    fill(p);
    return p.stop().bytes();
  };
  std::string file;
  file += pickle_of([](PickleBuilder& p) {
    p.long1(std::string("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10));
  });
  file += pickle_of([](PickleBuilder& p) { p.integer(1001); });
  file += pickle_of([](PickleBuilder& p) { p.empty_dict(); });
  file += pickle_of([&](PickleBuilder& p) {
    p.empty_dict().binunicode(key).global("torch._utils", "_rebuild_tensor_v2").mark();
    p.mark().binunicode("storage").global("torch", "FloatStorage").binunicode("0");
    p.binunicode("cpu").integer(4).none().tuple().binpersid();
    p.integer(0).int_tuple({4}).int_tuple({1}).newfalse();
    p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce().setitem();
  });
  file += pickle_of([](PickleBuilder& p) { p.mark().binunicode("0").list(); });
  const std::uint64_t count = 4;
  return file + std::string(reinterpret_cast<const char*>(&count), 8) + floats(4);
}

// An .npz of one float32 array of 4 elements, member `name`.npy, stored.
std::string npz_file(const std::string& name) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string npy("\x93NUMPY\x01\x00", 8);
  npy += static_cast<char>(header.size() & 0xff);
  npy += static_cast<char>(header.size() >> 8);
  ZipBuilder zip;
  zip.add(name + ".npy", npy + header + floats(4));
  return zip.build();
}

TEST_CASE("valid files whose bytes spell an impostor's signature are read as what they are") {
  // The impostor test runs only once a format's reader has failed: a key, a name or a value may
  // put "ustar" at byte 257 (a key "mustard"), even a whole tar header, into any valid file.
  TempDir dir;
  struct Case {
    const char* name;
    std::function<std::string(const std::string&)> build;
    bool checksum;  // the whole tar header, its checksum too
  };
  const Case cases[] = {
      {"model.gguf",
       [](const std::string& text) {
         GgufWriter kv;
         kv.key("general.name", 8).string(text);
         return gguf_file({{"t", {4}, 0, floats(4)}}, 3, false, 32, kv.bytes, 1);
       },
       true},
      {"model.safetensors",
       [](const std::string& text) {
         return safetensors_file({{text, "F32", {4}, floats(4)}});
       },
       true},
      {"legacy.pth", legacy_file, true},
      {"arrays.npz", npz_file, true},
      {"model.pth",
       [](const std::string& text) {
         return torch_zip(state_dict_pickle({{text, "0", 4, 0, {4}, {1}}}), {{"0", floats(4)}});
       },
       true},  // data.pkl's CRC-32 is in its data descriptor, as torch writes it
  };
  for (const Case& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const std::string file = tar_lookalike(c.build);
    CHECK(file.substr(257, 5) == "ustar");
    CHECK(is_tar_header(file) == c.checksum);
    const std::string path = dir.write(std::string("one-") + c.name + "/" + c.name, file);
    for (const std::string& location : {path, dir.path(std::string("one-") + c.name)}) {
      const auto [code, message] = refusal(location);
      CHECK_MESSAGE(code == ExitCode::ok, message);
    }
    const OpenedModel opened = open_model(path);
    const Model& m = opened.model();
    REQUIRE(m.entries.size() == 1);
    const Tensor& t = m.tensors[m.entries.back().tensor];
    CHECK(t.broken.empty());
    CHECK(opened.sources().front()->read_string(*m.file_offset(t), 16) == floats(4));
    // Cut short, with "ustar" at 257 but no tar checksum: said to be cut short (or what its
    // reader says), never a tar archive.
    std::string cut = file.substr(0, file.size() - 20);  // into the last tensor's bytes
    cut[148] = 'x';
    const auto [code, message] = refusal(dir.write(std::string("cut-") + c.name, cut));
    CHECK(code != ExitCode::ok);
    CHECK_MESSAGE(message.find("tar archive") == std::string::npos, message);
  }
  // A sharded set whose index holds a tar header.
  const std::string head = R"({"weight_map": {")";
  const std::string index = tar_lookalike([&](const std::string& text) {
    return head + text + R"(": "model-00001-of-00001.safetensors"}})";
  });
  CHECK(is_tar_header(index));
  const std::string key = index.substr(head.size(), index.find('"', head.size()) - head.size());
  dir.write("set/model-00001-of-00001.safetensors",
            safetensors_file({{key, "F32", {4}, floats(4)}}));
  const std::string index_path = dir.write("set/model.safetensors.index.json", index);
  CHECK(open_model(index_path).model().entries.size() == 1);
  CHECK(open_model(dir.path("set")).model().entries.size() == 1);
  // A GGUF whose 123 tensors make its ninth byte the '{' of a safetensors header.
  std::vector<GgufTensor> tensors;
  for (int i = 0; i < 123; ++i) tensors.push_back({"t" + std::to_string(i), {4}, 0, floats(4)});
  const std::string gguf = gguf_file(tensors);
  REQUIRE(gguf[8] == '{');
  CHECK(open_model(dir.write("brace/x.gguf", gguf)).model().entries.size() == 123);
  CHECK(open_model(dir.path("brace")).model().entries.size() == 123);
}

TEST_CASE("is_tar_header: ustar at 257 and the checksum at 148, as tar writes it") {
  std::string header(512, '\0');
  header.replace(0, 8, "model.pt");
  header.replace(257, 6, std::string("ustar\0", 6));
  CHECK_FALSE(is_tar_header(header));  // no checksum
  header.replace(148, 8, std::string(8, ' '));
  unsigned sum = 0;
  for (const char c : header) sum += static_cast<unsigned char>(c);
  char field[16];
  std::snprintf(field, sizeof field, "%06o", sum);
  header.replace(148, 7, std::string(field, 6) + '\0');
  CHECK(is_tar_header(header));
  CHECK_FALSE(is_tar_header(header.substr(0, 511)));
  header[300] = 'x';  // the sum no longer agrees
  CHECK_FALSE(is_tar_header(header));
}

TEST_SUITE_END();
