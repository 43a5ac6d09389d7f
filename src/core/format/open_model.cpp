// SPDX-License-Identifier: MIT
// open_model(): which reader reads what the user named: a file by its name and first bytes, a
// directory by the files in it, a sharded set by its index, its shards opened in parallel.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/directory_choice.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/model_directory_files.hpp>
#include <ckptfs/format/open_model.hpp>
#include <ckptfs/format/zip/zip_record_checks.hpp>
#include <ckptfs/source/inflated_source.hpp>
#include <ckptfs/source/location.hpp>
#include <ckptfs/source/members.hpp>
#include <ckptfs/source/open_file.hpp>

#include <fmt/format.h>

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

// What a PyTorch Distributed Checkpoint's metadata file is called (FileSystemWriter's name).
constexpr const char* dcp_metadata_name = ".metadata";

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

// A model file (never an index, never an .npz: read_named() opens those): safetensors, GGUF or
// torch.save. `name` is its name in
// Model::sources.
Model read_model_file(const ByteSource& source, const std::string& location, std::string name,
                      const OpenOptions& options) {
  // GGUF's magic first: a GGUF file's ninth byte (its tensor count's lowest) may be the '{'
  // that opens a safetensors header, while "GGUF" as a header length (1.2 GB) is no
  // safetensors file's.
  if (looks_like_gguf(source)) return read_gguf(source, std::move(name), options.gguf);
  if (file_name(location).ends_with(".safetensors") || looks_like_safetensors(source)) {
    return read_safetensors(source, std::move(name), options.safetensors);
  }
  // A remote zip's local headers are checked when a record is first read, not all at once.
  ReadLimits limits = options.limits;
  limits.zip.defer_local_headers = limits.zip.defer_local_headers || source.remote();
  return read_torch(source, std::move(name), limits);
}

// What the user named, and where its members are: beside it (a file, a URL), or in the
// directory it was chosen from (`directory`: a directory mount's one checkpoint).
struct Named {
  std::string location;
  std::shared_ptr<const Directory> directory;

  CheckpointMembers members(const OpenOptions& options) const {
    return directory ? CheckpointMembers(directory) : CheckpointMembers(location, options.open);
  }
};

// The files of a set (a sharded set's shards, a GGUF split set's files): `names`, members of
// `named` (source/members.hpp: beneath its directory), each read as read_model_file() reads it,
// in parallel; `named_source`, when given, is the one named `named_name`, already open. The
// first that fails, in the set's order, is the error, naming it as `what` says ("shard %s
// (named by the index)").
struct SetFiles {
  std::vector<std::unique_ptr<ByteSource>> sources;
  std::vector<Model> models;
};
SetFiles read_set(const Named& named, const std::vector<std::string>& names,
                  const OpenOptions& options, std::string_view what,
                  std::unique_ptr<ByteSource> named_source = {},
                  const std::string& named_name = {}) {
  const CheckpointMembers members = named.members(options);
  const std::size_t n = names.size();
  std::vector<std::unique_ptr<ByteSource>> sources(n);
  std::vector<Model> models(n);
  std::vector<std::exception_ptr> errors(n);
  if (named_source) {
    // What the user named is followed wherever it leads, as any file named; the rest are members.
    const auto it = std::find(names.begin(), names.end(), named_name);
    if (it != names.end())
      sources[static_cast<std::size_t>(it - names.begin())] = std::move(named_source);
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  // Shards are taken in order, so when one fails every earlier one has been taken: the first
  // failure in the index's order is among those found, whatever the threads' timing.
  auto work = [&] {
    while (!failed.load()) {
      const std::size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        if (!sources[i]) sources[i] = members.open(names[i]);
        models[i] = read_model_file(*sources[i], names[i], names[i], options);
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
      throw Error(e.code(), fmt::format(fmt::runtime(what), quote(names[i])) + ": " + e.what());
    }
  }
  return {std::move(sources), std::move(models)};
}

OpenedModel open_sharded(const Named& named, std::unique_ptr<ByteSource> index_source,
                         const OpenOptions& options) {
  ShardIndex index;
  try {
    index = read_shard_index(*index_source, options.sharded);
  } catch (const Error& e) {
    // A model's other JSON file named by mistake (its config.json): say what it is.
    const std::string_view what = companion_file_kind(file_name(named.location));
    if (what.empty()) throw;
    throw Error(ExitCode::io, fmt::format("{}, not a checkpoint: {}", what,
                                          companion_file_advice(file_name(named.location))));
  }
  SetFiles set = read_set(named, index.shards, options, "shard {} (named by the index)");
  Model model = combine_shards(index, std::move(set.models));
  return OpenedModel(std::move(set.sources), std::move(model), index_source->times(),
                     permission_bits(*index_source));
}

// A GGUF split set, from any of its files (`source`, named `name`): every file of its name's
// prefix and count.
OpenedModel open_gguf_split(const Named& named, const GgufSplitName& split,
                            std::unique_ptr<ByteSource> source, const std::string& name,
                            const OpenOptions& options) {
  std::vector<std::string> names;
  for (std::uint32_t i = 1; i <= split.count; ++i) {
    names.push_back(gguf_split_file(split.prefix, i, split.count));
  }
  SetFiles set = read_set(named, names, options, "split file {}", std::move(source), name);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (set.models[i].format != Format::gguf) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("split file {}: not a GGUF file", quote(names[i])));
    }
  }
  Model model = combine_gguf_splits(names, std::move(set.models));
  return OpenedModel(std::move(set.sources), std::move(model));
}

// A DCP checkpoint by its .metadata: the files it names are its members, opened as needed (one
// that cannot be opened, or leads out of the directory, breaks the tensors it holds).
OpenedModel open_dcp(const Named& named, std::unique_ptr<ByteSource> metadata,
                     const OpenOptions& options) {
  const CheckpointMembers members = named.members(options);
  DcpModel dcp = read_dcp(
      *metadata,
      [&](const std::string& name) {
        // A .distcp file holds raw bytes: only a text impostor (a Git LFS pointer) is told.
        auto file = members.open(name);
        refuse_impostor(*file, ImpostorCheck::text_only);  // the reader names the file
        return file;
      },
      options.limits, options.dcp);
  return OpenedModel(std::move(dcp.sources), std::move(dcp.model), metadata->times(),
                     permission_bits(*metadata));
}

// An ONNX model: its external data files are its members (source/members.hpp), opened as the
// reader finds them by the names its tensors give: beneath the directory of what was named (a
// link or ".." that leads out is refused), or beside its URL. The directory is opened on the
// first external file: a model without external data needs none.
OpenedModel open_onnx(const Named& named, std::unique_ptr<ByteSource> source,
                      const std::string& name, const OpenOptions& options) {
  std::optional<CheckpointMembers> members;
  const OnnxMemberOpener open = [&](const std::string& member) -> std::unique_ptr<ByteSource> {
    if (!members) members.emplace(named.members(options));
    return members->open(member);
  };
  OnnxModel onnx = read_onnx(*source, name, open, options.onnx);
  std::vector<std::unique_ptr<ByteSource>> sources;
  sources.push_back(std::move(source));
  for (auto& s : onnx.sources) sources.push_back(std::move(s));
  return OpenedModel(std::move(sources), std::move(onnx.model));
}

// An HDF5 file or .keras archive with the sources its reader made over it (decoded chunks,
// inflated members), which read `file`.
OpenedModel opened_hdf5(std::unique_ptr<ByteSource> file, Hdf5Model read) {
  std::vector<std::unique_ptr<ByteSource>> sources;
  sources.push_back(std::move(file));
  for (auto& s : read.sources) sources.push_back(std::move(s));
  return OpenedModel(std::move(sources), std::move(read.model));
}

// What the user named (`source`, already open), read by the reader its name and first bytes
// call for.
OpenedModel read_named(const Named& named, std::unique_ptr<ByteSource> source,
                       const OpenOptions& options) {
  const std::string& location = named.location;
  const std::string name = file_name(location);
  if (const auto split = gguf_split_name(name); split && split->count > 1) {
    return open_gguf_split(named, *split, std::move(source), name, options);
  }
  if (name == dcp_metadata_name) return open_dcp(named, std::move(source), options);
  if (name.ends_with(".npz") || looks_like_npz(*source)) {
    // numpy.savez_compressed's members are served inflated on read, each its own source.
    std::vector<DeflatedMember> deflated;
    Model model = read_npz(*source, name, options.npz, &deflated);
    std::vector<std::unique_ptr<ByteSource>> sources;
    sources.push_back(std::move(source));
    for (std::size_t i = 0; i < deflated.size(); ++i) {
      sources.push_back(std::make_unique<InflatedSource>(
          *sources.front(), deflated[i].offset, deflated[i].compressed_size, deflated[i].size,
          model.sources[i + 1], deflated[i].crc32));
    }
    return OpenedModel(std::move(sources), std::move(model));
  }
  if (name.ends_with(".keras") || looks_like_keras(*source)) {
    Hdf5Model read = read_keras(*source, name, options.hdf5);
    return opened_hdf5(std::move(source), std::move(read));
  }
  if (looks_like_hdf5(*source) || name.ends_with(".h5") || name.ends_with(".hdf5")) {
    Hdf5Model read = read_hdf5(*source, name, options.hdf5);
    return opened_hdf5(std::move(source), std::move(read));
  }
  if (name.ends_with(".onnx") ||
      (!looks_like_safetensors(*source) && !looks_like_gguf(*source) && looks_like_onnx(*source))) {
    return open_onnx(named, std::move(source), name, options);
  }
  if (name.ends_with(".json") ||
      (!name.ends_with(".safetensors") && !looks_like_safetensors(*source) && !is_zip(*source) &&
       starts_like_json(*source))) {
    return open_sharded(named, std::move(source), options);
  }
  Model model = read_model_file(*source, location, name, options);
  std::vector<std::unique_ptr<ByteSource>> sources;
  sources.push_back(std::move(source));
  return OpenedModel(std::move(sources), std::move(model));
}

}  // namespace

std::unique_ptr<ByteSource> open_local_file(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

OpenedModel::OpenedModel(std::vector<std::unique_ptr<ByteSource>> sources, Model model,
                         SourceTimes other_times, mode_t other_permissions)
    : owned_(std::move(sources)),
      model_(std::move(model)),
      times_(other_times),
      permissions_(other_permissions & 0777) {
  // Every reader marks a tensor whose size overflows broken; this is the net under them all.
  for (Tensor& t : model_.tensors) {
    if (t.broken.empty()) t.broken = size_problem(t);
  }
  // What is read of a zip record whose CRC-32 is known is checked against it from now on.
  for (std::uint32_t i = 0; i < owned_.size(); ++i) {
    if (auto checks = zip_record_checks(model_, i)) owned_[i]->check_records(std::move(checks));
  }
  // Each storage is a unit a reader reads whole: a remote source's readahead stops at its end.
  std::vector<ByteSource::ReadUnits> units(owned_.size());
  for (const Storage& s : model_.storages) {
    if (s.source >= units.size() || s.nbytes == 0) continue;
    // A remote zip's record, located on first use: its header and data, as the zip says.
    const auto unit = s.locator ? s.locator->span(s.locator_index)
                                : std::pair(s.file_offset, s.file_offset + s.nbytes);
    if (unit.first < unit.second &&
        owned_[s.source]->contains(unit.first, unit.second - unit.first)) {
      units[s.source].push_back(unit);
    }
  }
  for (std::uint32_t i = 0; i < owned_.size(); ++i) {
    if (owned_[i]->remote() && !units[i].empty()) owned_[i]->set_read_units(std::move(units[i]));
  }
  for (const auto& s : owned_) {
    raw_.push_back(s.get());
    keep_newest(times_, s->times());
    permissions_ &= permission_bits(*s);
  }
}

namespace {

// The local directory of `location`, a file the user named, when the file is that directory's
// model: named by one of transformers' names, or the one checkpoint a mount of the directory
// chooses. Null otherwise (a URL, a file among others, a directory that cannot be opened).
std::shared_ptr<const Directory> model_directory_of_file(const std::string& location) {
  if (is_url(location)) return nullptr;
  const auto slash = location.rfind('/');
  const std::string directory =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : location.substr(0, slash));
  const std::string name = file_name(location);
  try {
    if (!is_transformers_checkpoint_name(name) && choose_checkpoint_in(directory).name != name) {
      return nullptr;
    }
    return std::make_shared<const Directory>(directory);
  } catch (const Error&) {
    return nullptr;  // a directory of several checkpoints, or none it can list
  }
}

// Reads what the user named; `model_directory` is set to the directory whose config and
// tokenizer files go with the model (a directory mount's, or a file's that is its directory's
// model), left null otherwise.
OpenedModel open_as_named(const std::string& location, const OpenOptions& options,
                          std::shared_ptr<const Directory>& model_directory) {
  struct stat st {};
  if (::stat(location.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    auto opened = [](DirectoryModel d) {
      return OpenedModel(std::move(d.sources), std::move(d.model), d.times, d.permissions);
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
    // Otherwise the directory's one checkpoint (directory_choice.hpp), its errors naming it.
    const DirectoryCheckpoint chosen = choose_checkpoint_in(location);
    if (chosen.name.empty()) {
      return opened(read_zero_directory(location, options.limits, options.zero));
    }
    try {
      // The user named the directory, not the file: it is a member, opened beneath it.
      Named named{(location.ends_with('/') ? location : location + "/") + chosen.name,
                  std::make_shared<const Directory>(location)};
      std::unique_ptr<ByteSource> source = named.members(options).open(chosen.name);
      OpenedModel opened_model = read_named(named, std::move(source), options);
      model_directory = named.directory;
      return opened_model;
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", quote(chosen.name), e.what()));
    }
  }
  if (is_url(location) && looks_like_zero_location(location)) {
    DirectoryModel d = read_zero_remote(location, options.open, options.limits, options.zero);
    return OpenedModel(std::move(d.sources), std::move(d.model), d.times, d.permissions);
  }
  if (!is_url(location) && file_name(location) == "latest") {
    // A DeepSpeed checkpoint's `latest` named, as a URL may name it: the directory holding it.
    const auto slash = location.rfind('/');
    const std::string directory = slash == std::string::npos ? "." : location.substr(0, slash + 1);
    DirectoryModel d = read_zero_directory(directory, options.limits, options.zero);
    return OpenedModel(std::move(d.sources), std::move(d.model), d.times, d.permissions);
  }
  // A file or URL the user named: followed wherever it leads, its members beside it.
  OpenedModel opened_model = read_named(Named{location, nullptr}, options.open(location), options);
  model_directory = model_directory_of_file(location);
  return opened_model;
}

}  // namespace

OpenedModel open_model(const std::string& location, const OpenOptions& options) {
  std::shared_ptr<const Directory> model_directory;
  OpenedModel opened = open_as_named(location, options, model_directory);
  if (options.names == Names::hf) {
    Model& model = opened.model();
    if (model.format == Format::gguf) {
      name_gguf_as_transformers(model);
    } else {
      model.notes.push_back(fmt::format(
          "names=hf names a GGUF file's tensors as transformers does: a {} model keeps its keys",
          format_name(model.format)));
    }
  }
  // After names=hf: a config.json it made of a GGUF file stays the model's.
  if (model_directory) {
    SourceTimes times = opened.times();
    mode_t permissions = opened.permissions();
    add_model_directory_files(opened.model(), model_directory, &times, &permissions);
    opened.also_from(times, permissions);
  }
  return opened;
}

}  // namespace ckptfs
