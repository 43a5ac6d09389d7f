// SPDX-License-Identifier: MIT
// The part of transformers' load_gguf_checkpoint() that reads a GGUF file's metadata: which
// architecture it is to transformers, and the configuration (and tokenizer parameters) it makes
// of the metadata, value for value.
#pragma once

#include "gguf_hf_tables.hpp"

#include <ckptfs/model/model.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs::gguf_hf {

// A dict as the loader builds it: members in the order it sets them, each value compact JSON.
class Dict {
 public:
  // Sets `key` (in place when it is there, as a Python dict does).
  void set(std::string_view key, std::string json);
  void set_default(std::string_view key, std::string json);
  const std::string* find(std::string_view key) const;
  // The member as an integer, when it is one (a JSON integer).
  std::optional<std::int64_t> integer(std::string_view key) const;
  const std::vector<std::pair<std::string, std::string>>& members() const { return members_; }

 private:
  std::vector<std::pair<std::string, std::string>> members_;
};

// A GGUF model's metadata as the loader reads it.
struct LoaderMetadata {
  const Architecture* architecture = nullptr;  // the tables' row of general.architecture
  std::string model_type;  // the loader's "updated" architecture: its config prefix ("mistral")
  Dict config;             // parsed_parameters["config"]
  Dict tokenizer;          // parsed_parameters["tokenizer"]: values of tokens, merges... excepted
  Dict tokenizer_config;   // parsed_parameters["tokenizer_config"]
};

// Reads `model`'s metadata (its tensors still named as the GGUF file names them) as the loader
// does. nullopt, with why in `why`, when general.architecture is missing or one the loader does
// not load. The tokenizer's large arrays (tokens, scores, token types, merges) are not copied
// into `tokenizer`: their keys are there with the value null (the tokenizer files read them
// from the model's metadata).
std::optional<LoaderMetadata> read_loader_metadata(const Model& model, std::string& why);

// The metadata value `kv` as the loader's _gguf_parse_value() gives it, as JSON: numbers as
// Python floats (a FLOAT32 1e-05 is 9.999999747378752e-06, the float32's value), NaN and the
// infinities as Python's json writes them (NaN, Infinity), an array of one item as that item.
// Strings whose text holds `architecture` have it replaced by `model_type` when they differ.
std::string loader_value(const Model::JsonMetadata& kv, std::string_view architecture = {},
                         std::string_view model_type = {});

// config.json: `config` with "dtype" (float32 unless `dtype`), keys sorted, indented by 2, as
// transformers' save_pretrained writes it.
std::string config_json(const Dict& config, std::optional<DType> dtype);

// A Python float as Python's json module writes it: repr(), or NaN, Infinity, -Infinity.
std::string python_json_float(double value);

}  // namespace ckptfs::gguf_hf
