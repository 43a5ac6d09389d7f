// SPDX-License-Identifier: MIT
// open_model(): which reader reads what the user named: a file by its name and first bytes, a
// directory by the files in it, a sharded set by its index, its shards opened in parallel.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/open_model.hpp>
#include <ckptfs/source/location.hpp>
#include <ckptfs/source/open_file.hpp>

#include <fmt/format.h>

#include <dirent.h>
#include <sys/stat.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <optional>
#include <thread>

namespace ckptfs {
namespace {

// Shards read at once: parsing is quick, but a remote shard waits on the network.
constexpr std::size_t max_parallel_shards = 8;

// The last component of a path, or of a URL's path (never its query: a presigned URL's
// signature): what Model::sources calls a single file, and what its name ends with.
std::string file_name(const std::string& location) {
  std::string path = location;
  if (is_url(location)) {
    auto url = parse_url(location);
    path = url ? url->path : std::string();
  }
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Whether the text's first non-blank byte opens a JSON object.
bool starts_like_json(const ByteSource& source) {
  std::string head = source.read_string(0, std::min<std::uint64_t>(source.size(), 64));
  auto first = head.find_first_not_of(" \t\r\n");
  return first != std::string::npos && head[first] == '{';
}

bool is_zip(const ByteSource& source) {
  return source.size() >= 4 && source.read_string(0, 4) == std::string_view("PK\x03\x04", 4);
}

// A model file (never an index): safetensors or torch.save. `name` is its name in Model::sources.
Model read_model_file(const ByteSource& source, const std::string& location, std::string name,
                      const OpenOptions& options) {
  if (file_name(location).ends_with(".safetensors") || looks_like_safetensors(source)) {
    return read_safetensors(source, std::move(name), options.safetensors);
  }
  // A remote zip's local headers are checked when a record is first read, not all at once.
  ReadLimits limits = options.limits;
  limits.zip.defer_local_headers = limits.zip.defer_local_headers || source.remote();
  return read_torch(source, std::move(name), limits);
}

OpenedModel open_sharded(const std::string& location, std::unique_ptr<ByteSource> index_source,
                         const OpenOptions& options) {
  ShardIndex index = read_shard_index(*index_source, options.sharded);
  const std::size_t n = index.shards.size();
  std::vector<std::unique_ptr<ByteSource>> sources(n);
  std::vector<Model> models(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  // Shards are taken in order, so when one fails every earlier one has been taken: the first
  // failure in the index's order is among those found, whatever the threads' timing.
  auto work = [&] {
    while (!failed.load()) {
      const std::size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        const std::string shard_location = sibling_location(location, index.shards[i]);
        sources[i] = options.open(shard_location);
        models[i] = read_model_file(*sources[i], shard_location, index.shards[i], options);
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> threads;
  try {
    for (std::size_t k = 1; k < std::min(n, max_parallel_shards); ++k) threads.emplace_back(work);
  } catch (...) {
    // Fewer threads: the ones that started and this one read every shard all the same.
  }
  work();
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < n; ++i) {
    if (!errors[i]) continue;
    try {
      std::rethrow_exception(errors[i]);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("shard {} (named by the index): {}", quote(index.shards[i]),
                                        e.what()));
    }
  }
  Model model = combine_shards(index, std::move(models));
  return OpenedModel(std::move(sources), std::move(model), index_source->times());
}

OpenedModel open_file(const std::string& location, const OpenOptions& options) {
  std::unique_ptr<ByteSource> source = options.open(location);
  const std::string name = file_name(location);
  if (name.ends_with(".json") ||
      (!name.ends_with(".safetensors") && !looks_like_safetensors(*source) && !is_zip(*source) &&
       starts_like_json(*source))) {
    return open_sharded(location, std::move(source), options);
  }
  Model model = read_model_file(*source, location, name, options);
  std::vector<std::unique_ptr<ByteSource>> sources;
  sources.push_back(std::move(source));
  return OpenedModel(std::move(sources), std::move(model));
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// What a directory holds to be mounted (see open_model()), as a path in it; nullopt when it
// holds none of those files.
std::optional<std::string> choose_in_directory(const std::string& directory) {
  const std::string dir = directory.ends_with('/') ? directory : directory + "/";
  for (const char* name : {"model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                           "pytorch_model.bin.index.json"}) {
    if (is_regular_file(dir + name)) return dir + name;
  }
  // Opened as a directory (never waiting, whatever is there now), then listed.
  OpenedFile opened = open_file(directory, FileKind::directory);
  DIR* d = ::fdopendir(opened.fd.get());
  if (d == nullptr) throw Error(ExitCode::io, std::strerror(errno));
  opened.fd.release();  // closedir() closes it
  std::vector<std::string> indexes, safetensors;
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.ends_with(".index.json") && is_regular_file(dir + name)) {
      indexes.push_back(name);
    } else if (name.ends_with(".safetensors") && is_regular_file(dir + name)) {
      safetensors.push_back(name);
    }
  }
  ::closedir(d);
  std::sort(indexes.begin(), indexes.end());
  std::sort(safetensors.begin(), safetensors.end());
  const auto& found = !indexes.empty() ? indexes : safetensors;
  if (found.size() == 1) return dir + found[0];
  if (found.empty()) return std::nullopt;
  std::string names;
  for (std::size_t i = 0; i < found.size() && i < 4; ++i) {
    names += (i ? ", " : "") + quote(found[i], 60);
  }
  throw Error(ExitCode::io,
              fmt::format("a directory with {} {} files ({}{}): name the one to mount",
                          found.size(), &indexes == &found ? "*.index.json" : "*.safetensors",
                          names, found.size() > 4 ? ", ..." : ""));
}

}  // namespace

std::unique_ptr<ByteSource> open_local_file(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

OpenedModel::OpenedModel(std::vector<std::unique_ptr<ByteSource>> sources, Model model,
                         SourceTimes other_times)
    : owned_(std::move(sources)), model_(std::move(model)), times_(other_times) {
  for (const auto& s : owned_) {
    raw_.push_back(s.get());
    keep_newest(times_, s->times());
  }
}

OpenedModel open_model(const std::string& location, const OpenOptions& options) {
  struct stat st {};
  if (::stat(location.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    auto opened = [](DirectoryModel d) {
      return OpenedModel(std::move(d.sources), std::move(d.model), d.times);
    };
    // A mount's own layouts first: map.pt is the RFC layout's; .ckptfs/index.json, index.json
    // or key directories make a split directory, whatever else was copied along (`rsync -a
    // /mnt/m/ dest/` copies .ckptfs/model.safetensors too, which holds no values; a copy made
    // before the views moved into .ckptfs has model.safetensors at its root).
    if (looks_like_rfc_directory(location)) {
      return opened(read_rfc_directory(location, options.limits, options.rfc));
    }
    if (looks_like_split_directory(location)) {
      return opened(read_split_directory(location, options.split));
    }
    if (auto chosen = choose_in_directory(location)) return open_file(*chosen, options);
    throw Error(ExitCode::io,
                "a directory without model.safetensors, pytorch_model.bin, an *.index.json, a "
                "*.safetensors file, map.pt (an RFC directory) or key directories (a split "
                "directory): nothing to mount");
  }
  return open_file(location, options);
}

}  // namespace ckptfs
