// SPDX-License-Identifier: MIT
// open_model(): what the user named (a checkpoint file, a directory or an index of a sharded
// set), opened as the sources that hold its bytes and read into one Model by the right reader.
#pragma once

#include <ckptfs/format/dcp/dcp_reader.hpp>
#include <ckptfs/format/gguf/gguf_reader.hpp>
#include <ckptfs/format/hdf5/hdf5_reader.hpp>
#include <ckptfs/format/npz/npz_reader.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/safetensors/sharded_reader.hpp>
#include <ckptfs/format/split/rfc_reader.hpp>
#include <ckptfs/format/split/split_reader.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/format/zero/zero_reader.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs {

// Opens one location (a local path; a URL when a remote opener is given) as a source. Throws
// Error(io) naming the problem when it cannot. Called from several threads at once (the shards
// of a sharded set are opened in parallel).
using SourceOpener = std::function<std::unique_ptr<ByteSource>(const std::string& location)>;

// Local files: FileSource.
std::unique_ptr<ByteSource> open_local_file(const std::string& path);

struct OpenOptions {
  ReadLimits limits;              // torch.save files
  SafetensorsLimits safetensors;  // safetensors files
  ShardLimits sharded;            // indexes of sharded sets
  SplitLimits split;              // split directories
  RfcLimits rfc;                  // RFC directories (their files: `limits`)
  DcpLimits dcp;                  // PyTorch DCP checkpoints (their items: `limits`)
  ZeroLimits zero;                // DeepSpeed ZeRO checkpoints (their files: `limits`)
  GgufLimits gguf;                // GGUF files
  NpzLimits npz;                  // .npz files
  Hdf5Limits hdf5;                // HDF5 files (.h5, .weights.h5) and .keras archives
  SourceOpener open = open_local_file;
};

// A model with the sources it reads from; sources()[i] holds the bytes of Storage::source i.
class OpenedModel {
 public:
  // times(): the newest of the sources' times and `other_times` (an index read to find them).
  OpenedModel(std::vector<std::unique_ptr<ByteSource>> sources, Model model,
              SourceTimes other_times = {});
  OpenedModel(OpenedModel&&) noexcept = default;
  OpenedModel& operator=(OpenedModel&&) noexcept = default;

  const Model& model() const noexcept { return model_; }
  Model& model() noexcept { return model_; }
  std::span<const ByteSource* const> sources() const noexcept { return raw_; }
  const ByteSource& source(std::size_t i) const { return *owned_[i]; }
  // The newest mtime and the newest ctime of the files the model was read from: the times of
  // the mounted tree, which change only when one of those files does.
  const SourceTimes& times() const noexcept { return times_; }

 private:
  std::vector<std::unique_ptr<ByteSource>> owned_;
  std::vector<const ByteSource*> raw_;
  Model model_;
  SourceTimes times_;
};

// Opens what `location` names and reads it with the reader it calls for:
//   - a local directory: an RFC directory when it holds map.pt (read_rfc_directory()); a split
//     directory when it holds index.json or a subdirectory holding meta.json or value.json
//     (read_split_directory(); whatever else is there: a mount's model.safetensors copied
//     along); a PyTorch DCP checkpoint when it holds .metadata (as the file below; what else
//     is there, such as Megatron's common.pt and metadata.json, is not read, as
//     dcp_to_torch_save reads none of it); else the first of model.safetensors,
//     model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json in it
//     (transformers' order); else a DeepSpeed ZeRO checkpoint when it holds *_model_states.pt
//     files or a `latest` naming a directory that does (read_zero_directory(); a Hugging Face
//     Trainer's checkpoint-N/ with a model.safetensors mounts that file: name its
//     global_stepN/ for the ZeRO checkpoint); else its one *.index.json; else, without any,
//     its one *.safetensors; else its one *.gguf file or GGUF split set. Several candidates
//     and none of those names (two *.index.json, say) is an error asking to name the one to
//     mount;
//   - a file or URL named .metadata: a PyTorch DCP checkpoint (read_dcp()), the files it names
//     its siblings (sibling_location()), opened with options.open as their items are read;
//   - a URL whose path ends in '/' or "/latest": a DeepSpeed ZeRO checkpoint
//     (read_zero_remote(): its files found by DeepSpeed's names beside it, opened with
//     options.open);
//   - a file or URL named *.json: the index of a sharded set (read_shard_index()). Its shards
//     (sibling_location() of the index, source/location.hpp: URLs too) are opened with
//     options.open, each once, and read in parallel (at most 8 at a time), each as a file
//     below; the first that fails, in the index's order, is the error, naming it;
//   - a file named *.safetensors or whose first bytes are a safetensors header length and '{':
//     read_safetensors();
//   - a file named like a GGUF split set's ("<prefix>-00002-of-00005.gguf"): every file of the
//     set, opened and read in parallel as the shards above, combined by combine_gguf_splits();
//   - a file starting with "GGUF": read_gguf();
//   - a file named *.npz, or a zip whose first member is named *.npy: read_npz();
//   - a file named *.keras, or a zip whose first member is metadata.json, config.json or
//     model.weights.h5: read_keras();
//   - a file with HDF5's signature (at 0, or after a user block), or named *.h5 or *.hdf5:
//     read_hdf5();
//   - a zip: torch.save's (TorchScript and torch.package are refused); a file starting with '{':
//     an index; anything else: the legacy torch stream (read_torch()).
// Model::sources are relative to the directory of what was named (for a single file, its name).
// Throws Error with the exit code of the problem, its message without the location (the caller
// names it); a shard's problem names the shard.
OpenedModel open_model(const std::string& location, const OpenOptions& options = {});

}  // namespace ckptfs
