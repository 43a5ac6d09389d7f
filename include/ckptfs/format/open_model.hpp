// SPDX-License-Identifier: MIT
// open_model(): what the user named (a checkpoint file, a directory or an index of a sharded
// set), opened as the sources that hold its bytes and read into one Model by the right reader.
#pragma once

#include <ckptfs/format/dcp/dcp_reader.hpp>
#include <ckptfs/format/gguf/gguf_hf.hpp>
#include <ckptfs/format/gguf/gguf_reader.hpp>
#include <ckptfs/format/hdf5/hdf5_reader.hpp>
#include <ckptfs/format/npz/npz_reader.hpp>
#include <ckptfs/format/onnx/onnx_reader.hpp>
#include <ckptfs/format/safetensors/safetensors_reader.hpp>
#include <ckptfs/format/safetensors/sharded_reader.hpp>
#include <ckptfs/format/split/rfc_reader.hpp>
#include <ckptfs/format/split/split_reader.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/format/zero/zero_reader.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/members.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs {

// OpenOptions::open (SourceOpener, source/members.hpp) opens what the user named (a local path;
// a URL when a remote opener is given) and a URL's members; a local checkpoint's members are
// opened beneath its directory (CheckpointMembers), never through it.

// Local files: FileSource.
std::unique_ptr<ByteSource> open_local_file(const std::string& path);

// How a model's keys are named: as its file names them, or (a GGUF file) as transformers'
// GGUF loader names its parameters (format/gguf/gguf_hf.hpp).
enum class Names : std::uint8_t { file, hf };

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
  OnnxLimits onnx;                // ONNX models
  Hdf5Limits hdf5;                // HDF5 files (.h5, .weights.h5) and .keras archives
  SourceOpener open = open_local_file;
  // Names::hf: a GGUF model is named and transformed by name_gguf_as_transformers(); any other
  // model keeps its keys, and a note (Model::notes) says so.
  Names names = Names::file;
};

// A model with the sources it reads from; sources()[i] holds the bytes of Storage::source i.
class OpenedModel {
 public:
  // times(): the newest of the sources' times and `other_times` (an index read to find them);
  // permissions(): the bits every local source has, and `other_permissions` (that index's).
  // Marks every tensor whose size_problem() is not empty broken, and has each source check what
  // is read of the zip records it holds (zip_record_checks(), ByteSource::check_records()).
  OpenedModel(std::vector<std::unique_ptr<ByteSource>> sources, Model model,
              SourceTimes other_times = {}, mode_t other_permissions = 0777);
  OpenedModel(OpenedModel&&) noexcept = default;
  OpenedModel& operator=(OpenedModel&&) noexcept = default;

  const Model& model() const noexcept { return model_; }
  Model& model() noexcept { return model_; }
  std::span<const ByteSource* const> sources() const noexcept { return raw_; }
  const ByteSource& source(std::size_t i) const { return *owned_[i]; }
  // The newest mtime and the newest ctime of the files the model was read from: the times of
  // the mounted tree, which change only when one of those files does.
  const SourceTimes& times() const noexcept { return times_; }
  // The permission bits all the local files the model was read from have (their modes ANDed:
  // a set of 0600 and 0644 files is 0600); 0777 when none is local. A mount of the model is
  // no less strict than the strictest of its files.
  mode_t permissions() const noexcept { return permissions_; }
  // Takes the times and permission bits of other files the mount serves (a model directory's
  // config.json): the newest times, the permission bits ANDed.
  void also_from(const SourceTimes& times, mode_t permissions) noexcept {
    keep_newest(times_, times);
    permissions_ &= permissions & 0777;
  }

 private:
  std::vector<std::unique_ptr<ByteSource>> owned_;
  std::vector<const ByteSource*> raw_;
  Model model_;
  SourceTimes times_;
  mode_t permissions_ = 0777;
};

// Opens what `location` names and reads it with the reader it calls for. What the user named is
// followed wherever its links lead; the files it names or holds (its members: shards, split
// files, .distcp files, the file a directory mount chooses) are opened with CheckpointMembers
// (source/members.hpp): beneath its local directory (a link that leads out is refused, but for
// a Hugging Face cache snapshot's links to its blobs), or beside its URL with options.open.
//   - a local directory: an RFC directory when it holds map.pt (read_rfc_directory()); a split
//     directory when it holds index.json or a subdirectory holding meta.json or value.json
//     (read_split_directory(); whatever else is there: a mount's model.safetensors copied
//     along); otherwise its one checkpoint (choose_checkpoint_in(), directory_choice.hpp): a
//     PyTorch DCP checkpoint when it holds .metadata (as the file below; what else is there,
//     such as Megatron's common.pt and metadata.json, is not read, as dcp_to_torch_save reads
//     none of it); transformers' names first (model.safetensors, model.safetensors.index.json,
//     pytorch_model.bin, pytorch_model.bin.index.json); a DeepSpeed ZeRO checkpoint when it holds
//     *_model_states.pt files or a `latest` (read_zero_directory(); a Hugging Face Trainer's
//     checkpoint-N/ with its model's weights mounts those: name its global_stepN/ for the ZeRO
//     checkpoint); its one *.index.json, *.safetensors, *.gguf file or GGUF split set. Several
//     candidates (two *.index.json, say) is an error asking to name the one to mount;
//   - a local file named `latest`: the DeepSpeed ZeRO checkpoint of its directory, as a URL;
//   - a file or URL named .metadata: a PyTorch DCP checkpoint (read_dcp()), the files it names
//     its members, opened as their items are read (one that cannot be opened or leads out of the
//     directory breaks the tensors it holds);
//   - a URL whose path ends in '/' or "/latest": a DeepSpeed ZeRO checkpoint
//     (read_zero_remote(): its files found by DeepSpeed's names beside it, opened with
//     options.open);
//   - a file or URL named *.json: the index of a sharded set (read_shard_index()). Its shards,
//     members, are each opened once and read in parallel (at most 8 at a time), each as a file
//     below; the first that fails, in the index's order, is the error, naming it. A model's
//     other JSON file (config.json, tokenizer.json...: companion_file_kind()) that is no index
//     is refused (io) saying what it is and what to name;
//   - a file named *.safetensors or whose first bytes are a safetensors header length and '{':
//     read_safetensors();
//   - a file named like a GGUF split set's ("<prefix>-00002-of-00005.gguf"): every file of the
//     set (the others members), read in parallel as the shards above, combined by
//     combine_gguf_splits();
//   - a file starting with "GGUF": read_gguf();
//   - a file named *.npz, or a zip whose first member is named *.npy: read_npz();
//   - a file or URL named *.onnx, or whose first bytes are a ModelProto's (looks_like_onnx()):
//     read_onnx(), its external data files its members, opened by their locations as the
//     others' (beneath its directory, or beside its URL);
//   - a file named *.keras, or a zip whose first member is metadata.json, config.json or
//     model.weights.h5: read_keras();
//   - a file with HDF5's signature (at 0, or after a user block), or named *.h5 or *.hdf5:
//     read_hdf5();
//   - a zip: torch.save's (TorchScript and torch.package are refused); a file starting with '{':
//     an index; anything else: the legacy torch stream (read_torch()).
// Then options.names applies. Then, for a local directory's model (the directory named, or a
// file in it named by one of transformers' names or the one its mount would choose), the
// directory's config and tokenizer files are the model's files (add_model_directory_files(),
// model_directory_files.hpp), their times and permissions the mount's too. Model::sources are
// relative to the directory of what was named (for a single file, its name). Throws Error with the
// exit code of the problem, its message without the location (the caller names it); a shard's
// problem names the shard.
OpenedModel open_model(const std::string& location, const OpenOptions& options = {});

}  // namespace ckptfs
