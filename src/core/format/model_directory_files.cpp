// SPDX-License-Identifier: MIT
// add_model_directory_files(): a model directory's config and tokenizer files chosen by name,
// opened beneath it and served as Model::files; config_with_dtype(): config.json's dtype set in
// place under -o dtype.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/model_directory_files.hpp>
#include <ckptfs/source/members.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <vector>

namespace ckptfs {
namespace {

// What transformers (configuration_utils, tokenization_utils_base, processing_utils,
// generation/configuration_utils) reads from a model directory beside its weights.
constexpr std::string_view model_file_names[] = {
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
};

// The most names of a directory looked at (a model directory holds tens).
constexpr std::size_t max_listed = 100'000;

constexpr std::string_view config_name = "config.json";

// The end of the JSON string starting at text[begin] (its opening quote): one past its closing
// quote. The text has been read as valid JSON, so the closing quote is there.
std::size_t string_end(std::string_view text, std::size_t begin) {
  std::size_t i = begin + 1;
  while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
  return std::min(i + 1, text.size());
}

}  // namespace

bool model_directory_file(std::string_view name) {
  if (std::find(std::begin(model_file_names), std::end(model_file_names), name) !=
      std::end(model_file_names)) {
    return true;
  }
  // tiktoken vocabularies (qwen.tiktoken, tokenizer.tiktoken) and more chat templates beside
  // chat_template.jinja are loaded by name from tokenizer_config.json.
  return name.size() > 9 && name.ends_with(".tiktoken") && name.find('/') == std::string_view::npos;
}

std::string config_with_dtype(std::string_view config, DType dtype) {
  // The spans of the values to set, found in one pass that reads the whole text first: an edit
  // is made only in a text that is valid JSON.
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  try {
    JsonReader json(config);
    bool in_sub_config = false;  // the depth-1 member being read is an object *_config
    std::string top_key;
    for (JsonReader::Token token = json.next(); token != JsonReader::Token::end;
         token = json.next()) {
      if (token == JsonReader::Token::key && json.depth() == 1) top_key = json.string();
      if (token == JsonReader::Token::begin_object && json.depth() == 2) {
        in_sub_config = top_key.ends_with("_config") && top_key != "quantization_config";
      }
      if (token != JsonReader::Token::key) continue;
      if (json.depth() != 1 && !(json.depth() == 2 && in_sub_config)) continue;
      if (json.string() != "torch_dtype" && json.string() != "dtype") continue;
      const JsonReader::Token value = json.next();
      if (value == JsonReader::Token::string) {
        const auto begin = static_cast<std::size_t>(json.offset());
        spans.emplace_back(begin, string_end(config, begin));
      } else if (value == JsonReader::Token::null) {
        const auto begin = static_cast<std::size_t>(json.offset());
        spans.emplace_back(begin, begin + 4);
      } else {
        json.skip_value();
      }
    }
  } catch (const Error&) {
    return std::string(config);
  }
  std::string out;
  out.reserve(config.size() + 16 * spans.size());
  std::size_t at = 0;
  for (const auto& [begin, end] : spans) {
    out.append(config.substr(at, begin - at));
    out += '"';
    out += info(dtype).name;
    out += '"';
    at = end;
  }
  out.append(config.substr(at));
  return out;
}

void add_model_directory_files(Model& model, const std::shared_ptr<const Directory>& directory,
                               SourceTimes* times, mode_t* permissions) {
  std::vector<std::string> names;
  try {
    for (DirectoryEntry& e : directory->list("", max_listed)) {
      if (model_directory_file(e.name)) names.push_back(std::move(e.name));
    }
  } catch (const Error& e) {
    model.notes.push_back(fmt::format(
        "the model directory's config and tokenizer files are not served: {}", e.what()));
    return;
  }
  std::sort(names.begin(), names.end());
  const CheckpointMembers members(directory);
  std::uint64_t total = 0;
  for (const std::string& name : names) {
    const bool own = std::any_of(model.files.begin(), model.files.end(),
                                 [&](const Model::File& f) { return f.name == name; });
    if (own) continue;
    auto left_out = [&](std::string_view why) {
      model.notes.push_back(
          fmt::format("{} of the model directory is not served: {}", quote(name), why));
    };
    if (model.files.size() >= model_files_max_count) {
      left_out(fmt::format("more than {} files", model_files_max_count));
      continue;
    }
    std::shared_ptr<const ByteSource> source;
    try {
      source = members.open(name);
    } catch (const Error& e) {
      left_out(e.what());
      continue;
    }
    if (source->size() > model_file_max_bytes) {
      left_out(fmt::format("{} bytes, over the limit of {} for one file", source->size(),
                           model_file_max_bytes));
      continue;
    }
    if (total + source->size() > model_files_max_bytes) {
      left_out(fmt::format("the files served would hold over {} bytes", model_files_max_bytes));
      continue;
    }
    total += source->size();
    if (times) keep_newest(*times, source->times());
    if (permissions) *permissions &= permission_bits(*source);
    const bool config = name == config_name;
    model.files.push_back({name, [source, config](const Model&, std::optional<DType> dtype) {
                             std::string bytes =
                                 source->read_string(0, static_cast<std::size_t>(source->size()));
                             return config && dtype ? config_with_dtype(bytes, *dtype) : bytes;
                           }});
  }
}

}  // namespace ckptfs
