// SPDX-License-Identifier: MIT
// checkpoints_in(), choose_checkpoint_in(): a directory's files sorted into checkpoints and the
// files that belong to one.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/directory_choice.hpp>
#include <ckptfs/format/gguf/gguf_reader.hpp>
#include <ckptfs/format/safetensors/sharded_reader.hpp>
#include <ckptfs/format/zero/zero_reader.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/directory.hpp>
#include <ckptfs/source/members.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

namespace ckptfs {
namespace {

// The most checkpoints an error lists (then ", and N more").
constexpr std::size_t listed_at_most = 6;

// The most names a directory may hold to be looked at as a checkpoint's (a model directory
// holds tens, a DCP checkpoint one per rank and writer thread).
constexpr std::size_t max_listed = 1'000'000;

// transformers' names for one model in a directory, in the order it loads them.
constexpr std::string_view transformers_names[] = {
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
    "pytorch_model.bin.index.json"};

// What a Hugging Face Trainer writes into checkpoint-N/ beside the model (transformers'
// trainer.py: TRAINER_STATE_NAME, TRAINING_ARGS_NAME, OPTIMIZER_NAME, SCHEDULER_NAME,
// SCALER_NAME, _save_rng_state()): its own state, to resume training, no model.
constexpr std::string_view trainer_state_name = "trainer_state.json";
constexpr std::string_view trainer_names[] = {"training_args.bin", "optimizer.pt", "scheduler.pt",
                                              "scaler.pt", "rng_state.pth"};

bool is_trainer_file(std::string_view name) {
  if (std::find(std::begin(trainer_names), std::end(trainer_names), name) !=
      std::end(trainer_names)) {
    return true;
  }
  // rng_state_<process index>.pth, one per process of a distributed run.
  if (!name.starts_with("rng_state_") || !name.ends_with(".pth")) return false;
  const std::string_view rank = name.substr(10, name.size() - 14);
  return !rank.empty() &&
         std::all_of(rank.begin(), rank.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Well-known files of a model's directory that hold no weights: what each is and what to name.
struct Companion {
  std::string_view name, kind, advice;
};
constexpr std::string_view name_the_directory = "name its directory, which holds the weights";
constexpr Companion companions[] = {
    {"config.json", "a model config (transformers' config.json)", name_the_directory},
    {"generation_config.json", "a model's generation config", name_the_directory},
    {"tokenizer.json", "a tokenizer", name_the_directory},
    {"tokenizer_config.json", "a tokenizer's config", name_the_directory},
    {"special_tokens_map.json", "a tokenizer's special tokens", name_the_directory},
    {"added_tokens.json", "a tokenizer's added tokens", name_the_directory},
    {"vocab.json", "a tokenizer's vocabulary", name_the_directory},
    {"preprocessor_config.json", "a processor config", name_the_directory},
    {"processor_config.json", "a processor config", name_the_directory},
    {"chat_template.json", "a chat template", name_the_directory},
    {"adapter_config.json", "a PEFT adapter's config",
     "name its directory, which holds the adapter's weights (adapter_model.safetensors)"},
    {"trainer_state.json", "a Hugging Face Trainer's state (of a checkpoint-N directory)",
     "name its directory, which holds the model's weights"},
    {"model_index.json", "a diffusers pipeline's index",
     "name the directory of one of its components (unet/, text_encoder/, vae/...)"},
    {"scheduler_config.json", "a diffusers scheduler's config",
     "name the directory of a component with weights (unet/, text_encoder/, vae/...)"},
    {"params.json", "a model's parameters (Meta's params.json)",
     "name the weights beside it (consolidated.00.pth)"},
};

const Companion* companion(std::string_view name) {
  for (const Companion& c : companions) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return out;
}

bool has_suffix(const std::string& lowered, std::string_view suffix) {
  return lowered.size() > suffix.size() && lowered.ends_with(suffix);
}

// The names of `dir` that are files, sorted: regular files and links to them beneath it, and
// links that lead out of it or loop (each refused, saying so, when it is opened).
std::vector<std::string> file_names(const Directory& dir) {
  std::vector<std::string> names;
  for (DirectoryEntry& e : dir.list("", max_listed)) {
    if (e.file_or_way_out()) names.push_back(std::move(e.name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The shards an index names; nullopt when it cannot be read (its own error is told when it is
// opened).
std::optional<std::vector<std::string>> shards_of(const std::shared_ptr<const Directory>& dir,
                                                  const std::string& index_name) {
  try {
    const std::unique_ptr<ByteSource> source = CheckpointMembers(dir).open(index_name);
    ShardIndex index = read_shard_index(*source, ShardLimits{});
    return std::move(index.shards);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::string shown_path(const std::string& directory, const std::string& name) {
  std::string path = directory;
  if (!name.empty()) path += (path.ends_with('/') ? "" : "/") + name;
  const bool plain = std::all_of(path.begin(), path.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("/._-+,:@%=").find(c) != std::string_view::npos;
  });
  return plain ? path : quote(path);
}

}  // namespace

bool is_transformers_checkpoint_name(std::string_view name) {
  return std::find(std::begin(transformers_names), std::end(transformers_names), name) !=
         std::end(transformers_names);
}

namespace {

// checkpoints_in() of the open directory `dir` (named `directory`), whose file names are `files`.
std::vector<DirectoryCheckpoint> checkpoints_among(const std::shared_ptr<const Directory>& dir,
                                                   const std::string& directory,
                                                   const std::vector<std::string>& files) {
  std::set<std::string> owned;  // files that belong to a checkpoint counted otherwise
  std::vector<DirectoryCheckpoint> found;
  if (std::binary_search(files.begin(), files.end(), std::string(trainer_state_name))) {
    for (const auto& name : files) {
      if (is_trainer_file(name)) owned.insert(name);
    }
  }

  if (std::binary_search(files.begin(), files.end(), std::string(".metadata"))) {
    found.push_back({".metadata", "a PyTorch DCP checkpoint"});
    for (const auto& name : files) {
      if (has_suffix(lower(name), ".distcp") || name == "common.pt" || name == "metadata.json") {
        owned.insert(name);
      }
    }
  }
  if (looks_like_zero_directory(directory)) {
    found.push_back({"", "a DeepSpeed ZeRO checkpoint"});
    for (const auto& name : files) {
      if (name.ends_with("_model_states.pt") || name.ends_with("_optim_states.pt") ||
          name == "latest") {
        owned.insert(name);
      }
    }
  }
  for (const auto& name : files) {
    if (!has_suffix(lower(name), ".index.json")) continue;
    if (auto shards = shards_of(dir, name)) {
      owned.insert(shards->begin(), shards->end());
    } else {
      // An index that cannot be read is the checkpoint its directory holds, and its error the
      // one to tell: the *.safetensors and *.bin beside it are taken for its shards.
      for (const auto& other : files) {
        const std::string l = lower(other);
        if (has_suffix(l, ".safetensors") || has_suffix(l, ".bin")) owned.insert(other);
      }
    }
  }
  std::set<std::string> gguf_sets;
  for (const auto& name : files) {
    if (owned.count(name) != 0 || name == ".metadata") continue;
    const std::string l = lower(name);
    if (has_suffix(l, ".index.json")) {
      found.push_back({name, "a sharded set"});
    } else if (has_suffix(l, ".gguf")) {
      const auto split = gguf_split_name(name);
      if (split && split->count > 1) {
        if (gguf_sets.insert(split->prefix).second) {
          found.push_back({gguf_split_file(split->prefix, 1, split->count),
                           fmt::format("a GGUF split set of {} files", split->count)});
        }
      } else {
        found.push_back({name, ""});
      }
    } else {
      for (std::string_view suffix :
           {".pth", ".pt", ".bin", ".ckpt", ".jit", ".safetensors", ".npz"}) {
        if (has_suffix(l, suffix)) {
          found.push_back({name, ""});
          break;
        }
      }
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return found;
}

bool is_transformers_name(const DirectoryCheckpoint& c) {
  return std::find(std::begin(transformers_names), std::end(transformers_names), c.name) !=
         std::end(transformers_names);
}

}  // namespace

std::vector<DirectoryCheckpoint> checkpoints_in(const std::string& directory) {
  const auto dir = std::make_shared<const Directory>(directory);
  return checkpoints_among(dir, directory, file_names(*dir));
}

std::string_view companion_file_kind(std::string_view name) {
  const Companion* c = companion(name);
  return c ? c->kind : std::string_view();
}

std::string_view companion_file_advice(std::string_view name) {
  const Companion* c = companion(name);
  return c ? c->advice : std::string_view();
}

DirectoryCheckpoint choose_checkpoint_in(const std::string& directory) {
  const auto dir = std::make_shared<const Directory>(directory);
  const std::vector<std::string> files = file_names(*dir);
  std::vector<DirectoryCheckpoint> found = checkpoints_among(dir, directory, files);
  // A Trainer's checkpoint-N/ with DeepSpeed holds the model (as transformers loads it) and the
  // ZeRO checkpoint to resume from: the model is what naming the directory means, as
  // from_pretrained() takes it; its tag directory names the other.
  const bool trainer =
      std::binary_search(files.begin(), files.end(), std::string(trainer_state_name));
  if (trainer && std::any_of(found.begin(), found.end(), is_transformers_name)) {
    std::erase_if(found, [](const DirectoryCheckpoint& c) { return c.name.empty(); });
  }
  if (found.size() == 1) return found[0];
  // A DeepSpeed `latest` whose tag is missing or holds no model states: its own error says so.
  if (found.empty() && dir->has("latest", FileKind::regular)) {
    return {"", "a DeepSpeed ZeRO checkpoint"};
  }
  if (found.empty()) {
    throw Error(ExitCode::io,
                "a directory without a checkpoint (no *.pth, *.pt, *.bin, *.ckpt, *.safetensors, "
                "*.index.json, *.gguf or *.npz file, no map.pt (an RFC directory), no key "
                "directories (a split directory), no .metadata (a PyTorch DCP checkpoint), no "
                "*_model_states.pt (a DeepSpeed checkpoint)): nothing to mount");
  }
  // transformers' own names for one model (a repository with both formats): as it loads them.
  if (std::all_of(found.begin(), found.end(), is_transformers_name)) {
    for (std::string_view name : transformers_names) {
      for (const auto& c : found) {
        if (c.name == name) return c;
      }
    }
  }
  std::string listed;
  for (std::size_t i = 0; i < found.size() && i < listed_at_most; ++i) {
    const auto& c = found[i];
    listed += (i ? ", " : "") + (c.name.empty() ? std::string("the directory") : quote(c.name, 80));
    if (!c.what.empty()) listed += " (" + c.what + ")";
  }
  if (found.size() > listed_at_most) {
    listed += fmt::format(", and {} more", found.size() - listed_at_most);
  }
  const auto& example = found[0].name.empty() ? found[1] : found[0];
  throw Error(ExitCode::io,
              fmt::format("a directory of {} checkpoints: {}: name the one to mount, as in: "
                          "ckptfs {} MOUNTPOINT",
                          found.size(), listed, shown_path(directory, example.name)));
}

}  // namespace ckptfs
