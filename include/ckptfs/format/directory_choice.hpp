// SPDX-License-Identifier: MIT
// What a local directory named as a checkpoint holds, and which one checkpoint it is: the one
// rule every format goes through, so that `ckptfs DIR MNT` mounts a directory only when it is
// unambiguously one checkpoint set, and otherwise lists what it found and how to name one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

// One checkpoint in a directory. A set counts once: a sharded set by its *.index.json (its
// shards are its own), a GGUF split set by its first file, a PyTorch DCP checkpoint by its
// .metadata (its *.distcp files, and Megatron's common.pt and metadata.json beside it, are its
// own), a DeepSpeed ZeRO checkpoint by the directory itself (its *_model_states.pt,
// *_optim_states.pt and `latest` are its own).
struct DirectoryCheckpoint {
  std::string name;  // the file to open, in the directory; "" for the directory (ZeRO)
  std::string what;  // "a PyTorch DCP checkpoint", "a sharded set"... ("" for a single file)
};

// The checkpoints of `directory` (files read as checkpoints by their suffix, in any case: .pth,
// .pt, .bin, .ckpt, .jit, .safetensors, .gguf, .npz, *.index.json, a DCP .metadata), sorted by
// name. The directory is listed and its files looked at beneath it (source/directory.hpp): a
// regular file, a link to one inside it, and a link that leads out of it or loops (counted by
// its name, so that the mount of it is refused saying why). Each *.index.json is read beneath
// it too (to know its shards; one that cannot be read is taken to own every *.safetensors and
// *.bin beside it, so that its own error is the one told). A Hugging Face Trainer's
// checkpoint-N/ (it holds trainer_state.json) keeps its own files out: training_args.bin,
// optimizer.pt, scheduler.pt, scaler.pt, rng_state.pth and rng_state_<rank>.pth. Throws
// Error(io) when the directory cannot be listed.
std::vector<DirectoryCheckpoint> checkpoints_in(const std::string& directory);

// The one checkpoint of `directory`: its only one, or, when all of them are transformers' names
// for one model (model.safetensors, model.safetensors.index.json, pytorch_model.bin,
// pytorch_model.bin.index.json), the first of those as transformers loads it; in a Trainer's
// checkpoint-N/ the same, the DeepSpeed ZeRO checkpoint beside them (`latest`, global_stepN/)
// left for its tag directory to be named. With none, a DeepSpeed `latest` there (naming a tag
// directory that is missing or holds no model states) is the checkpoint, so that its own error
// is told. Throws Error(io): "a directory without ... nothing to mount" when there is none, or,
// when there are several, one line listing them (the first few) and how to name one:
//   a directory of 3 checkpoints: "a.pth", "b.pth", ".metadata" (a PyTorch DCP checkpoint):
//   name the one to mount, as in: ckptfs DIR/a.pth MOUNTPOINT
DirectoryCheckpoint choose_checkpoint_in(const std::string& directory);

// Whether `name` is one of transformers' names for a model's weights in its directory
// (model.safetensors, model.safetensors.index.json, pytorch_model.bin,
// pytorch_model.bin.index.json).
bool is_transformers_checkpoint_name(std::string_view name);

// What a well-known file of a model's directory that holds no weights is, by its name
// ("config.json": "a model config (transformers' config.json)"; tokenizer, generation, PEFT
// adapter, Trainer state and diffusers pipeline files too), "" for any other name; and what to
// name instead. For the message of such a file named as a checkpoint.
std::string_view companion_file_kind(std::string_view name);
std::string_view companion_file_advice(std::string_view name);

}  // namespace ckptfs
