// SPDX-License-Identifier: MIT
// read_loader_metadata(): transformers' load_gguf_checkpoint() (transformers 5,
// modeling_gguf_pytorch_utils.py) as it reads a GGUF file's metadata, step for step: the
// architecture and the name it updates it by, tie_word_embeddings from the tensors, the
// defaults, every key through the tables (gguf_hf_tables.hpp), then the fix-ups it makes for
// some model types and vocab_size from the tokens.
#include "gguf_hf_config.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace ckptfs::gguf_hf {
namespace {

JsonLimits metadata_limits() {
  JsonLimits limits;
  limits.surrogate_escapes = true;  // the reader writes bytes that are not UTF-8 so
  return limits;
}

const Model::JsonMetadata* find_metadata(const Model& model, std::string_view key) {
  for (const Model::JsonMetadata& kv : model.json_metadata) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

// The text of a STRING value.
std::string string_value(const Model::JsonMetadata& kv) {
  return parse_json(kv.value_json, metadata_limits(), 1).text();
}

std::string json_string(std::string_view text) {
  std::string out;
  append_json_string(out, text);
  return out;
}

void replace_all(std::string& text, std::string_view what, std::string_view with) {
  if (what.empty() || what == with) return;
  for (std::size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + with.size())) {
    text.replace(at, what.size(), with);
  }
}

// One item of a value of GGUF type `type` ("FLOAT32", "STRING", "UINT32"...), as JSON.
std::string item_value(std::string_view type, const JsonValue& v) {
  if (v.is(JsonValue::Kind::object)) {
    // {"__float__": "nan"|"inf"|"-inf"}: what the reader writes for floats JSON has no number for.
    const JsonValue* marker = v.find("__float__");
    const std::string text = marker ? marker->text() : std::string();
    if (text == "nan") return "NaN";
    return text == "-inf" ? "-Infinity" : "Infinity";
  }
  if (v.is(JsonValue::Kind::string)) return json_string(v.text());
  if (v.is(JsonValue::Kind::number) && (type == "FLOAT32" || type == "FLOAT64")) {
    const std::string& t = v.text();
    if (type == "FLOAT32") {
      float f = 0;
      std::from_chars(t.data(), t.data() + t.size(), f);  // the shortest text of the float32
      return python_json_float(static_cast<double>(f));
    }
    return python_json_float(v.floating());
  }
  if (v.is(JsonValue::Kind::boolean)) return v.boolean() ? "true" : "false";
  if (v.is(JsonValue::Kind::array)) {
    std::string out = "[";
    for (const JsonValue& item : v.items()) {
      if (out.size() > 1) out += ", ";
      out += item_value(type, item);
    }
    return out + "]";
  }
  return v.text();  // an integer, as written
}

// The number of items of a JSON array (the tokens), read without building them.
std::uint64_t array_length(std::string_view json) {
  JsonReader reader(json, metadata_limits());
  std::uint64_t n = 0;
  if (reader.next() != JsonReader::Token::begin_array) return 0;
  while (true) {
    const JsonReader::Token t = reader.next();
    if (t == JsonReader::Token::end_array) return n;
    ++n;
    reader.skip_value();
  }
}

const Architecture* architecture_row(std::string_view gguf) {
  for (const Architecture& a : architectures) {
    if (a.gguf == gguf) return &a;
  }
  return nullptr;
}

const ConfigKey* find_key(const ConfigKey* keys, std::size_t count, std::string_view key) {
  for (std::size_t i = 0; i < count; ++i) {
    if (keys[i].gguf == key) return &keys[i];
  }
  return nullptr;
}

// Tokenizer values too large to copy into the dict: their keys say they are there.
bool large_tokenizer_value(std::string_view hf) {
  return hf == "tokens" || hf == "scores" || hf == "token_type" || hf == "merges";
}

}  // namespace

void Dict::set(std::string_view key, std::string json) {
  for (auto& [k, v] : members_) {
    if (k == key) {
      v = std::move(json);
      return;
    }
  }
  members_.emplace_back(std::string(key), std::move(json));
}

void Dict::set_default(std::string_view key, std::string json) {
  if (!find(key)) members_.emplace_back(std::string(key), std::move(json));
}

const std::string* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : members_) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::optional<std::int64_t> Dict::integer(std::string_view key) const {
  const std::string* v = find(key);
  if (!v) return std::nullopt;
  return json_int64(*v);
}

std::string python_json_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return float_repr(value);
}

std::string loader_value(const Model::JsonMetadata& kv, std::string_view architecture,
                         std::string_view model_type) {
  const bool array = kv.type.starts_with("ARRAY[");
  std::string_view type = kv.type;
  // The innermost item type: "ARRAY[ARRAY[UINT8]]" -> "UINT8".
  while (type.starts_with("ARRAY[")) type = type.substr(6, type.size() - 7);
  const JsonValue v = parse_json(kv.value_json, metadata_limits());
  std::string out;
  if (array && v.items().size() == 1) {
    out = item_value(type, v.items().front());  // a list of one value is that value
  } else {
    out = item_value(type, v);
  }
  // `isinstance(value, str) and architecture in value`: the value itself, not an array's items.
  if (architecture != model_type && out.starts_with('"'))
    replace_all(out, architecture, model_type);
  return out;
}

std::optional<LoaderMetadata> read_loader_metadata(const Model& model, std::string& why) {
  const Model::JsonMetadata* arch_kv = find_metadata(model, "general.architecture");
  if (!arch_kv) {
    why = "it has no general.architecture";
    return std::nullopt;
  }
  if (arch_kv->type != "STRING") {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("general.architecture is {}, not a STRING", arch_kv->type));
  }
  const std::string architecture = string_value(*arch_kv);
  LoaderMetadata m;
  m.architecture = architecture_row(architecture);
  if (!m.architecture) {
    why = fmt::format("transformers {}'s GGUF loader does not load architecture {}",
                      transformers_version, quote(architecture));
    return std::nullopt;
  }
  m.model_type = std::string(m.architecture->model_type);
  const Model::JsonMetadata* name_kv = find_metadata(model, "general.name");
  // `"llama" in architecture and "mistral" in model_name`: model_name is the list of the
  // field's values, so the name must be "mistral" itself.
  if (architecture.find("llama") != std::string::npos && name_kv && name_kv->type == "STRING" &&
      string_value(*name_kv) == "mistral") {
    m.model_type = "mistral";
  }

  Dict& config = m.config;
  if (architecture.find("stablelm") != std::string::npos) {
    bool qkv_bias = false, ffn_norm = false;
    for (const Entry& e : model.entries) {
      for (std::string_view bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
        if (e.key.find(bias) != std::string::npos) qkv_bias = true;
      }
      if (e.key.find("ffn_norm") != std::string::npos) ffn_norm = true;
    }
    config.set("use_qkv_bias", qkv_bias ? "true" : "false");
    config.set("use_parallel_residual", ffn_norm ? "false" : "true");
  }
  bool output = false;
  for (const Entry& e : model.entries) output = output || e.key == "output.weight";
  const bool tied = !output || architecture == "falcon" || architecture == "bloom";
  config.set("tie_word_embeddings", tied ? "true" : "false");
  if (!m.architecture->defaults_json.empty()) {
    const JsonValue defaults = parse_json(m.architecture->defaults_json);
    for (const auto& [key, value] : defaults.members()) {
      config.set_default(key, item_value("", value));
    }
  }

  const Model::JsonMetadata* tokens = nullptr;
  for (const Model::JsonMetadata& kv : model.json_metadata) {
    std::string key = kv.key;
    if (architecture != m.model_type) replace_all(key, architecture, m.model_type);
    const std::size_t dot = key.find('.');
    const std::string_view prefix = std::string_view(key).substr(0, dot);
    const std::string_view rest =
        dot == std::string::npos ? std::string_view() : std::string_view(key).substr(dot + 1);
    for (const ConfigPrefix& p : config_prefixes) {
      if (p.prefix != prefix) continue;
      if (const ConfigKey* k = find_key(p.keys, p.count, rest); k && k->hf) {
        config.set(k->hf, loader_value(kv, architecture, m.model_type));
      }
    }
    if (prefix != "tokenizer") continue;
    if (const ConfigKey* k = find_key(tokenizer_keys, std::size(tokenizer_keys), rest)) {
      if (std::string_view(k->hf) == "tokens") tokens = &kv;
      m.tokenizer.set(k->hf, large_tokenizer_value(k->hf)
                                 ? "null"
                                 : loader_value(kv, architecture, m.model_type));
    }
    if (const ConfigKey* k =
            find_key(tokenizer_config_keys, std::size(tokenizer_config_keys), rest)) {
      m.tokenizer_config.set(k->hf, loader_value(kv, architecture, m.model_type));
    }
  }

  // The loader's fix-ups, in its order.
  if (const std::string* type = config.find("model_type")) {
    if (*type == "\"gemma3\"") config.set("model_type", "\"gemma3_text\"");
    if (*type == "\"gemma4\"") {
      config.set("model_type", "\"gemma4_text\"");
      config.set("eos_token_id", "[1, 106, 50]");  // the three end-of-generation tokens
    }
    if (*type == "\"minimax_m2\"") {
      if (const auto gating = config.integer("scoring_func")) {
        config.set("scoring_func", *gating == 0   ? "\"none\""
                                   : *gating == 2 ? "\"sigmoid\""
                                                  : "\"softmax\"");
      }
    }
    if (*type == "\"lfm2\"") {
      // Per-layer KV head counts: the largest is the model's, the layers with any attend fully.
      const std::string* heads = config.find("num_key_value_heads");
      const JsonValue list = parse_json(heads ? *heads : "[]");
      std::int64_t most = 0;
      std::string full = "[";
      for (std::size_t i = 0; i < list.items().size(); ++i) {
        const std::int64_t n = list.items()[i].int64().value_or(0);
        most = std::max(most, n);
        if (n > 0) full += fmt::format("{}{}", full.size() > 1 ? ", " : "", i);
      }
      config.set("num_key_value_heads", std::to_string(most));
      config.set("block_auto_adjust_ff_dim", "false");
      config.set("full_attn_idxs", full + "]");
    }
  }
  if (!config.find("vocab_size") && tokens) {
    config.set("vocab_size", std::to_string(array_length(tokens->value_json)));
  }
  return m;
}

std::string config_json(const Dict& config, std::optional<DType> dtype) {
  std::vector<std::pair<std::string_view, std::string_view>> members;
  const std::string dtype_json = json_string(info(dtype.value_or(DType::float32)).name);
  for (const auto& [k, v] : config.members()) {
    if (k != "dtype") members.emplace_back(k, v);
  }
  members.emplace_back("dtype", dtype_json);
  std::sort(members.begin(), members.end());
  std::string out;
  JsonWriter j(out);
  j.begin_object();
  for (const auto& [k, v] : members) j.key(k).raw(v);
  j.end_object();
  out += '\n';
  return out;
}

}  // namespace ckptfs::gguf_hf
