// SPDX-License-Identifier: MIT
// Hugging Face sharded sets: the index (`model.safetensors.index.json`,
// `pytorch_model.bin.index.json`...) read and checked, and the shards' models combined into one
// Model as its weight_map says. Opening the shards is open_model()'s (format/open_model.hpp).
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ckptfs {

struct ShardLimits {
  std::uint64_t max_index_bytes = 100'000'000;  // the index file (a 1,000-shard model: ~10 MB)
  std::uint64_t max_keys = 4'000'000;           // weight_map entries
  std::uint64_t max_shards = 65'536;            // distinct files it names
};

// What an index says, as transformers writes it:
//   {"metadata": {"total_size": N, ...}, "weight_map": {"key": "file", ...}}
struct ShardIndex {
  // The distinct files the weight_map names, in the order they first appear there, as written
  // (relative to the index's directory).
  std::vector<std::string> shards;
  // Every key with the index in `shards` of its file, in the weight_map's order.
  std::vector<std::pair<std::string, std::uint32_t>> weight_map;
  // The members of "metadata" whose values are strings ("total_size", a number, is not kept:
  // writers disagree on what it counts, and index.json's total_bytes is computed).
  std::vector<std::pair<std::string, std::string>> metadata;
};

// Reads an index with JsonReader's strict rules (a key twice in the weight_map or anywhere is
// an error). Other top-level members than metadata and weight_map are ignored.
// Throws Error(bad_checkpoint) for invalid JSON, a missing weight_map, a file name that is not
// a string, and a file name that would leave the index's directory: empty, absolute, or with an
// empty, "." or ".." component, or a NUL (symbolic links are followed when the shard is opened:
// the index cannot make one, and the Hugging Face cache is made of them, each to ../../blobs/).
// Throws Error(unsupported) past `limits`. Messages start with "index: ".
ShardIndex read_shard_index(const ByteSource& index, const ShardLimits& limits = {});

// One Model of the shards' models (shard_models[i] read from index.shards[i], each with its
// storages in source 0): its sources are index.shards, its entries the weight_map's keys in
// order, each the entry of that key in its shard. A key its shard lacks is a broken tensor
// saying so; a shard's entries the weight_map does not list are not shown, and their tensors
// and storages are not in the Model (those of the listed tensors only, with a per-channel
// quantized tensor's scales and zero points, renumbered in order). Format::sharded; metadata:
// the index's.
Model combine_shards(const ShardIndex& index, std::vector<Model> shard_models);

}  // namespace ckptfs
