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
#include <ckptfs/source/open_file.hpp>

#include <fmt/format.h>

#include <dirent.h>
#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

namespace ckptfs {
namespace {

// The most checkpoints an error lists (then ", and N more").
constexpr std::size_t listed_at_most = 6;

// transformers' names for one model in a directory, in the order it loads them.
constexpr std::string_view transformers_names[] = {
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
    "pytorch_model.bin.index.json"};

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  return out;
}

bool has_suffix(const std::string& lowered, std::string_view suffix) {
  return lowered.size() > suffix.size() && lowered.ends_with(suffix);
}

// The regular files of `directory` (names), sorted.
std::vector<std::string> regular_files(const std::string& dir) {
  // Opened as a directory (never waiting, whatever is there now), then listed.
  OpenedFile opened = open_file(dir, FileKind::directory);
  DIR* d = ::fdopendir(opened.fd.get());
  if (d == nullptr) throw Error(ExitCode::io, std::strerror(errno));
  opened.fd.release();  // closedir() closes it
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != ".." && is_regular_file(dir + name)) names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// The shards an index names; nullopt when it cannot be read (its own error is told when it is
// opened).
std::optional<std::vector<std::string>> shards_of(const std::string& index_path) {
  try {
    FileSource source(index_path);
    ShardIndex index = read_shard_index(source, ShardLimits{});
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

std::vector<DirectoryCheckpoint> checkpoints_in(const std::string& directory) {
  const std::string dir = directory.ends_with('/') ? directory : directory + "/";
  const std::vector<std::string> files = regular_files(dir);
  std::set<std::string> owned;  // files that belong to a checkpoint counted otherwise
  std::vector<DirectoryCheckpoint> found;

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
    if (auto shards = shards_of(dir + name)) {
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

DirectoryCheckpoint choose_checkpoint_in(const std::string& directory) {
  const std::vector<DirectoryCheckpoint> found = checkpoints_in(directory);
  if (found.size() == 1) return found[0];
  if (found.empty()) {
    throw Error(ExitCode::io,
                "a directory without a checkpoint (no *.pth, *.pt, *.bin, *.ckpt, *.safetensors, "
                "*.index.json, *.gguf or *.npz file, no map.pt (an RFC directory), no key "
                "directories (a split directory), no .metadata (a PyTorch DCP checkpoint), no "
                "*_model_states.pt (a DeepSpeed checkpoint)): nothing to mount");
  }
  // transformers' own names for one model (a repository with both formats): as it loads them.
  const auto is_transformers = [](const DirectoryCheckpoint& c) {
    return std::find(std::begin(transformers_names), std::end(transformers_names), c.name) !=
           std::end(transformers_names);
  };
  if (std::all_of(found.begin(), found.end(), is_transformers)) {
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
