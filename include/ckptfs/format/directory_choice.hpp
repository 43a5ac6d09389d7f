// SPDX-License-Identifier: MIT
// What a local directory named as a checkpoint holds, and which one checkpoint it is: the one
// rule every format goes through, so that `ckptfs DIR MNT` mounts a directory only when it is
// unambiguously one checkpoint set, and otherwise lists what it found and how to name one.
#pragma once

#include <string>
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
// .pt, .bin, .ckpt, .jit, .safetensors, .gguf, .npz, *.index.json, a DCP .metadata; regular
// files only, symbolic links followed), sorted by name. Reads the directory and each
// *.index.json (to know its shards; one that cannot be read is taken to own every *.safetensors
// and *.bin beside it, so that its own error is the one told). Throws Error(io) when the
// directory cannot be listed.
std::vector<DirectoryCheckpoint> checkpoints_in(const std::string& directory);

// The one checkpoint of `directory`: its only one, or, when all of them are transformers' names
// for one model (model.safetensors, model.safetensors.index.json, pytorch_model.bin,
// pytorch_model.bin.index.json), the first of those as transformers loads it. Throws Error(io):
// "a directory without ... nothing to mount" when there is none, or, when there are several,
// one line listing them (the first few) and how to name one:
//   a directory of 3 checkpoints: "a.pth", "b.pth", ".metadata" (a PyTorch DCP checkpoint):
//   name the one to mount, as in: ckptfs DIR/a.pth MOUNTPOINT
DirectoryCheckpoint choose_checkpoint_in(const std::string& directory);

}  // namespace ckptfs
