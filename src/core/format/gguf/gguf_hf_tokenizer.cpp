// SPDX-License-Identifier: MIT
// tokenizer.json and tokenizer_config.json of the tokenizer transformers' GGUF loader makes of a
// BPE vocabulary (tokenizer.ggml.model "gpt2"): the rule of each architecture read out of
// transformers by scripts/make_gguf_hf_tables.py (its tokenizers JSON without the file's parts;
// where its added and special tokens come from), filled with the file's tokens, merges and
// special token ids.
#include "gguf_hf_tokenizer.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/text.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

namespace ckptfs::gguf_hf {
namespace {

const Model::JsonMetadata* find_metadata(const Model& model, std::string_view key) {
  for (const Model::JsonMetadata& kv : model.json_metadata) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

// The strings of an ARRAY[STRING] value, which must be UTF-8 (the loader decodes them strictly).
std::optional<std::vector<std::string>> strings(const Model& model, std::string_view key) {
  const Model::JsonMetadata* kv = find_metadata(model, key);
  if (!kv || kv->type != "ARRAY[STRING]") return std::nullopt;
  std::vector<std::string> out;
  try {
    JsonReader json(kv->value_json);  // a byte that is not UTF-8 (a \udcXX escape) throws
    json.next();
    for (JsonReader::Token t = json.next(); t == JsonReader::Token::string; t = json.next()) {
      out.emplace_back(json.string());
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  return out;
}

std::optional<std::vector<std::int64_t>> integers(const Model& model, std::string_view key) {
  const Model::JsonMetadata* kv = find_metadata(model, key);
  if (!kv || !kv->type.starts_with("ARRAY[") || kv->type.find("ARRAY[", 6) != std::string::npos) {
    return std::nullopt;
  }
  std::vector<std::int64_t> out;
  JsonReader json(kv->value_json);
  json.next();
  for (JsonReader::Token t = json.next(); t == JsonReader::Token::number; t = json.next()) {
    const auto v = json.int64();
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

// The id of special token `role` ("bos"...), when the file has it.
std::optional<std::int64_t> role_id(const Model& model, std::string_view role) {
  const std::string key = fmt::format("tokenizer.ggml.{}_token_id", role == "unk"   ? "unknown"
                                                                    : role == "pad" ? "padding"
                                                                                    : role);
  const Model::JsonMetadata* kv = find_metadata(model, key);
  if (!kv || kv->type.starts_with("ARRAY")) return std::nullopt;
  return json_int64(kv->value_json);
}

struct Vocabulary {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
  std::vector<std::int64_t> types;  // empty when the file has none
};

std::optional<Vocabulary> vocabulary(const Model& model, std::string& why) {
  const Model::JsonMetadata* kind = find_metadata(model, "tokenizer.ggml.model");
  if (!kind || kind->value_json != "\"gpt2\"") {
    why = fmt::format("its vocabulary is {}, not a BPE one (\"gpt2\")",
                      kind ? kind->value_json : std::string("not in the file"));
    return std::nullopt;
  }
  Vocabulary v;
  auto tokens = strings(model, "tokenizer.ggml.tokens");
  auto merges = strings(model, "tokenizer.ggml.merges");
  if (!tokens || !merges) {
    why = "its tokens or merges are missing or not UTF-8 strings";
    return std::nullopt;
  }
  v.tokens = std::move(*tokens);
  v.merges = std::move(*merges);
  v.types = integers(model, "tokenizer.ggml.token_type").value_or(std::vector<std::int64_t>{});
  for (const std::string& m : v.merges) {
    // The loader splits a merge at every space into a pair; anything else fails it.
    if (std::count(m.begin(), m.end(), ' ') != 1) {
      why = fmt::format("a merge that is no pair: {}", quote(m));
      return std::nullopt;
    }
  }
  return v;
}

// The token a special-token source names: "bos"... (the file's token at that id), "=TEXT", or
// "" (none).
std::optional<std::string> special(const Model& model, const Vocabulary& v,
                                   std::string_view source) {
  if (source.empty()) return std::nullopt;
  if (source.starts_with('=')) return std::string(source.substr(1));
  const auto id = role_id(model, source);
  if (!id || *id < 0 || static_cast<std::uint64_t>(*id) >= v.tokens.size()) return std::nullopt;
  return v.tokens[static_cast<std::size_t>(*id)];
}

struct Added {
  std::int64_t id;
  std::string content;
  const AddedToken* flags;
};

}  // namespace

std::string why_no_tokenizer(const Model& model, const Architecture& architecture) {
  if (!architecture.tokenizer) {
    return fmt::format("the loader's tokenizer of architecture {} is not made ({})",
                       quote(architecture.gguf), architecture.why_no_tokenizer);
  }
  std::string why;
  if (!vocabulary(model, why)) return why;
  return {};
}

std::string tokenizer_json(const Model& model, const Tokenizer& rule) {
  std::string why;
  const auto v = vocabulary(model, why);
  if (!v) return {};
  // Each token's id: the last of its ids, as a Python dict made of them keeps it.
  TextViewMap<std::int64_t> ids;  // token texts come from the file: a keyed hash
  ids.reserve(v->tokens.size());
  for (std::size_t i = 0; i < v->tokens.size(); ++i) {
    ids[v->tokens[i]] = static_cast<std::int64_t>(i);
  }
  auto id_of = [&](std::string_view token) { return ids.find(token)->second; };  // a token's
  // Added tokens: the file's (its CONTROL tokens, or the token at a special id) at their ids,
  // then the loader's own, at their ids in the vocabulary or after it, in order; each once.
  std::vector<Added> added;
  auto add = [&](std::int64_t id, std::string content, const AddedToken* flags) {
    for (const Added& a : added) {
      if (a.content == content) return;
    }
    added.push_back({id, std::move(content), flags});
  };
  auto next_id = static_cast<std::int64_t>(v->tokens.size());
  for (std::size_t r = 0; r < rule.added_count; ++r) {
    const AddedToken& a = rule.added[r];
    if (a.source == "control") {
      for (std::size_t i = 0; i < v->types.size() && i < v->tokens.size(); ++i) {
        if (v->types[i] == 3) add(id_of(v->tokens[i]), v->tokens[i], &a);
      }
    } else if (!a.source.empty()) {
      if (const auto token = special(model, *v, a.source)) add(id_of(*token), *token, &a);
    } else if (const auto it = ids.find(a.content); it != ids.end()) {
      add(it->second, std::string(a.content), &a);
    } else {
      const std::size_t before = added.size();
      add(next_id, std::string(a.content), &a);
      if (added.size() != before) ++next_id;
    }
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const Added& x, const Added& y) { return x.id < y.id; });

  std::string out;
  const std::string_view backend = rule.backend_json;
  // {"version":..., then "added_tokens", the rest, and the model's vocabulary and merges last.
  out += "{\"added_tokens\":[";
  for (std::size_t i = 0; i < added.size(); ++i) {
    const Added& a = added[i];
    if (i) out += ',';
    out += fmt::format("{{\"id\":{},\"content\":", a.id);
    append_json_string(out, a.content);
    out += fmt::format(
        ",\"single_word\":{},\"lstrip\":{},\"rstrip\":{},\"normalized\":{},\"special\":{}}}",
        a.flags->single_word, a.flags->lstrip, a.flags->rstrip, a.flags->normalized,
        a.flags->special);
  }
  out += "],";
  std::string_view rest = backend.substr(1, backend.size() - 3);  // without '{' and the last "}}"
  std::string model_fields(rest);
  if (rule.model_unk == "unk") {
    const auto unk = special(model, *v, "unk");
    const std::size_t at = model_fields.rfind("\"unk_token\":null");
    if (unk && at != std::string::npos) {
      std::string text;
      append_json_string(text, *unk);
      model_fields.replace(at + 12, 4, text);
    }
  }
  out += model_fields;
  out += ",\"vocab\":{";
  bool first = true;
  for (std::size_t i = 0; i < v->tokens.size(); ++i) {
    if (id_of(v->tokens[i]) != static_cast<std::int64_t>(i)) continue;  // a later id has it
    if (!first) out += ',';
    first = false;
    append_json_string(out, v->tokens[i]);
    out += fmt::format(":{}", i);
  }
  out += "},\"merges\":[";
  for (std::size_t i = 0; i < v->merges.size(); ++i) {
    const std::string& m = v->merges[i];
    const std::size_t space = m.find(' ');
    if (i) out += ',';
    out += '[';
    append_json_string(out, std::string_view(m).substr(0, space));
    out += ',';
    append_json_string(out, std::string_view(m).substr(space + 1));
    out += ']';
  }
  out += "]}}\n";
  return out;
}

std::string tokenizer_config_json(const Model& model, const Tokenizer& rule) {
  std::string why;
  const auto v = vocabulary(model, why);
  std::string out;
  JsonWriter j(out);
  j.begin_object();
  j.key("tokenizer_class").string("TokenizersBackend");
  const std::pair<std::string_view, std::string_view> roles[] = {{"bos_token", rule.bos},
                                                                 {"eos_token", rule.eos},
                                                                 {"unk_token", rule.unk},
                                                                 {"pad_token", rule.pad}};
  for (const auto& [key, source] : roles) {
    j.key(key);
    const auto token = v ? special(model, *v, source) : std::nullopt;
    if (token) {
      j.string(*token);
    } else {
      j.null();
    }
  }
  if (const Model::JsonMetadata* kv = find_metadata(model, "tokenizer.chat_template");
      kv && kv->type == "STRING") {
    j.key("chat_template").raw(kv->value_json);
  }
  j.end_object();
  out += '\n';
  return out;
}

}  // namespace ckptfs::gguf_hf
