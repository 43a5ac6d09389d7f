// SPDX-License-Identifier: MIT
// read_shard_index() and combine_shards(): a Hugging Face index checked and streamed, and the
// shards' models joined under its weight_map.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/safetensors/sharded_reader.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

namespace ckptfs {
namespace {

using Token = JsonReader::Token;

// Why a shard's file name could name something outside the index's directory; null when it
// cannot. Lexical only: see read_shard_index().
const char* outside_reason(std::string_view name) {
  if (name.empty()) return "an empty name";
  if (name.front() == '/') return "an absolute path";
  if (name.find('\0') != std::string_view::npos) return "a name with a NUL byte";
  std::size_t start = 0;
  for (;;) {
    std::size_t slash = name.find('/', start);
    std::string_view part =
        name.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (part.empty()) return "a path with an empty component";
    if (part == "." || part == "..") return "a path with a \".\" or \"..\" component";
    if (slash == std::string_view::npos) return nullptr;
    start = slash + 1;
  }
}

class IndexParser {
 public:
  IndexParser(JsonReader& json, const ShardLimits& limits) : json_(json), limits_(limits) {}

  ShardIndex run() {
    if (json_.next() != Token::begin_object) json_.fail("the index is not a JSON object");
    bool has_map = false;
    for (Token t = json_.next(); t != Token::end_object; t = json_.next()) {
      std::string_view member = json_.string();
      if (member == "weight_map") {
        weight_map();
        has_map = true;
      } else if (member == "metadata") {
        metadata();
      } else {
        json_.skip_value();
      }
    }
    json_.next();  // the end, or an error for what follows the object
    if (!has_map) {
      throw Error(ExitCode::bad_checkpoint, "no weight_map: not the index of a sharded set");
    }
    return std::move(index_);
  }

 private:
  void metadata() {
    Token t = json_.next();
    if (t == Token::null) return;
    if (t != Token::begin_object) json_.fail("metadata is not an object");
    for (t = json_.next(); t != Token::end_object; t = json_.next()) {
      std::string key(json_.string());
      if (json_.next() == Token::string) {
        if (index_.metadata.size() == 65'536) {
          throw Error(ExitCode::unsupported, "index: metadata has more than 65536 strings");
        }
        index_.metadata.emplace_back(std::move(key), json_.string());
      } else {
        json_.skip_value();
      }
    }
  }

  void weight_map() {
    if (json_.next() != Token::begin_object) json_.fail("weight_map is not an object");
    // Shard names to their index: a tree, no hash an index could flood.
    std::map<std::string, std::uint32_t, std::less<>> shard_of;
    for (Token t = json_.next(); t != Token::end_object; t = json_.next()) {
      if (index_.weight_map.size() == limits_.max_keys) {
        throw Error(ExitCode::unsupported,
                    fmt::format("index: weight_map has more than {} keys", limits_.max_keys));
      }
      std::string key(json_.string());
      if (json_.next() != Token::string) {
        json_.fail(fmt::format("weight_map: the file of key {} is not a string", quote(key)));
      }
      std::string_view file = json_.string();
      if (const char* why = outside_reason(file)) {
        json_.fail(
            fmt::format("weight_map: key {} names the file {}: {}, which could lead out "
                        "of the index's directory",
                        quote(key), quote(file), why));
      }
      std::uint32_t shard = 0;
      if (!index_.shards.empty() && index_.shards[last_] == file) {
        shard = last_;  // keys come grouped by file: the last one is the likeliest
      } else if (auto it = shard_of.find(file); it != shard_of.end()) {
        shard = it->second;
      } else {
        if (index_.shards.size() == limits_.max_shards) {
          throw Error(
              ExitCode::unsupported,
              fmt::format("index: weight_map names more than {} files", limits_.max_shards));
        }
        shard = static_cast<std::uint32_t>(index_.shards.size());
        index_.shards.emplace_back(file);
        shard_of.emplace(file, shard);
      }
      last_ = shard;
      index_.weight_map.emplace_back(std::move(key), shard);
    }
  }

  JsonReader& json_;
  const ShardLimits& limits_;
  ShardIndex index_;
  std::uint32_t last_ = 0;
};

// Keeps only what the entries use: their tensors (with a per-channel quantized tensor's scales
// and zero points) and those tensors' storages, renumbered in their order. A shard's tensors the
// weight_map does not list are then no part of the model: inspect does not count their storages
// and no view holds their bytes. (Shards are safetensors and torch files: no assemblies.)
void keep_used_only(Model& m) {
  constexpr std::size_t none = static_cast<std::size_t>(-1);
  std::vector<std::size_t> tensor_at(m.tensors.size(), none);
  std::vector<std::size_t> used;  // old indices of the tensors kept
  auto use = [&](std::optional<std::size_t> t) {
    if (t && tensor_at[*t] == none) {
      tensor_at[*t] = 0;
      used.push_back(*t);
    }
  };
  for (const Entry& e : m.entries) {
    if (e.kind == Entry::Kind::tensor) use(e.tensor);
  }
  for (std::size_t k = 0; k < used.size(); ++k) {  // grows by the scales and zero points
    if (const auto& q = m.tensors[used[k]].quantization) {
      use(q->scales);
      use(q->zero_points);
    }
  }
  std::sort(used.begin(), used.end());
  std::vector<std::size_t> storage_at(m.storages.size(), none);
  std::vector<Storage> storages;
  std::vector<Tensor> tensors;
  tensors.reserve(used.size());
  for (const std::size_t t : used) {
    tensor_at[t] = tensors.size();
    tensors.push_back(std::move(m.tensors[t]));
    if (auto& s = tensors.back().storage) {
      if (storage_at[*s] == none) {
        storage_at[*s] = storages.size();
        storages.push_back(std::move(m.storages[*s]));
      }
      s = storage_at[*s];
    }
  }
  for (Tensor& t : tensors) {
    if (t.quantization) {
      if (auto& i = t.quantization->scales) i = tensor_at[*i];
      if (auto& i = t.quantization->zero_points) i = tensor_at[*i];
    }
  }
  for (Entry& e : m.entries) {
    if (e.kind == Entry::Kind::tensor) e.tensor = tensor_at[e.tensor];
  }
  m.tensors = std::move(tensors);
  m.storages = std::move(storages);
}

ShardIndex read_index_json(const ByteSource& index, const ShardLimits& limits) {
  const std::uint64_t size = index.size();
  if (size > limits.max_index_bytes) {
    throw Error(ExitCode::unsupported,
                fmt::format("index: {} bytes, over the limit of {}", size, limits.max_index_bytes));
  }
  std::uint64_t consumed = 0;
  JsonReader json([&](std::span<char> buffer) -> std::size_t {
    auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - consumed));
    index.read(consumed, std::as_writable_bytes(buffer.first(n)));
    consumed += n;
    return n;
  });
  try {
    return IndexParser(json, limits).run();
  } catch (const Error& e) {
    throw Error(e.code(), std::string_view(e.what()).starts_with("index: ")
                              ? std::string(e.what())
                              : fmt::format("index: {}", e.what()));
  }
}

}  // namespace

ShardIndex read_shard_index(const ByteSource& index, const ShardLimits& limits) {
  return read_or_name_impostor(index, [&] { return read_index_json(index, limits); });
}

Model combine_shards(const ShardIndex& index, std::vector<Model> shard_models) {
  Model m;
  m.format = Format::sharded;
  m.sources = index.shards;
  m.metadata = index.metadata;
  // Every storage and tensor of every shard, renumbered; only the listed keys become entries,
  // and only their tensors and storages stay (keep_used_only()).
  struct Shard {
    std::size_t first_tensor = 0;
    std::vector<std::uint32_t> by_key;  // its entries, sorted by key
  };
  std::vector<Shard> shards(shard_models.size());
  for (std::size_t i = 0; i < shard_models.size(); ++i) {
    Model& sm = shard_models[i];
    const std::size_t storage_base = m.storages.size();
    shards[i].first_tensor = m.tensors.size();
    for (Storage& s : sm.storages) {
      s.source = static_cast<std::uint32_t>(i);
      m.storages.push_back(std::move(s));
    }
    for (Tensor& t : sm.tensors) {
      if (t.storage) *t.storage += storage_base;
      if (t.quantization) {
        if (t.quantization->scales) *t.quantization->scales += shards[i].first_tensor;
        if (t.quantization->zero_points) *t.quantization->zero_points += shards[i].first_tensor;
      }
      m.tensors.push_back(std::move(t));
    }
    auto& by_key = shards[i].by_key;
    by_key.resize(sm.entries.size());
    std::iota(by_key.begin(), by_key.end(), std::uint32_t{0});
    std::sort(by_key.begin(), by_key.end(), [&](std::uint32_t a, std::uint32_t b) {
      return sm.entries[a].key < sm.entries[b].key;
    });
  }
  m.entries.reserve(index.weight_map.size());
  for (const auto& [key, shard] : index.weight_map) {
    Model& sm = shard_models[shard];
    const auto& by_key = shards[shard].by_key;
    auto it = std::lower_bound(
        by_key.begin(), by_key.end(), key,
        [&](std::uint32_t e, const std::string& k) { return sm.entries[e].key < k; });
    Entry e;
    if (it != by_key.end() && sm.entries[*it].key == key) {
      e = sm.entries[*it];
      if (e.kind == Entry::Kind::tensor) e.tensor += shards[shard].first_tensor;
    } else {
      // Nothing to serve: a tensor that says why (its dtype and shape are unknown).
      Tensor t;
      t.broken = fmt::format("the index puts it in {}, which has no tensor of that name",
                             quote(index.shards[shard]));
      m.tensors.push_back(std::move(t));
      e.key = key;
      e.kind = Entry::Kind::tensor;
      e.tensor = m.tensors.size() - 1;
    }
    // One key of the set's flat state dict (the index's weight_map), whatever the shard's
    // own nesting.
    e.key = key;
    e.key_path.clear();
    e.containers.clear();
    m.entries.push_back(std::move(e));
  }
  keep_used_only(m);
  return m;
}

}  // namespace ckptfs
