// SPDX-License-Identifier: MIT
// name_gguf_as_transformers(): a GGUF model's tensors renamed through the tables read out of
// transformers (gguf_hf_tables.hpp) and transformed as the loader's TensorProcessors transform
// them (transformers 5, modeling_gguf_pytorch_utils.py), in the format-neutral model: row
// blocks of the file's bytes (assemblies), strided views, or derivations computed on read.
#include "gguf_hf_config.hpp"
#include "gguf_hf_tokenizer.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/gguf/gguf_hf.hpp>
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/model/derivation.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ckptfs {
namespace {

using gguf_hf::Architecture;
using gguf_hf::LoaderMetadata;

// The TensorProcessor classes of the loader whose transforms are done here.
enum class Processor : std::uint8_t { none, llama, norm_minus_one, gpt2, bloom, moe, lfm2 };

std::optional<Processor> processor_of(std::string_view name) {
  if (name == "TensorProcessor") return Processor::none;
  if (name == "LlamaTensorProcessor") return Processor::llama;
  if (name == "Gemma2TensorProcessor" || name == "NemotronTensorProcessor") {
    return Processor::norm_minus_one;
  }
  if (name == "GPT2TensorProcessor") return Processor::gpt2;
  if (name == "BloomTensorProcessor") return Processor::bloom;
  if (name == "Qwen2MoeTensorProcessor" || name == "MiniMaxM2TensorProcessor") {
    return Processor::moe;
  }
  if (name == "Lfm2TensorProcessor") return Processor::lfm2;
  return std::nullopt;  // MambaTensorProcessor (numpy's float32 log), T5TensorProcessor
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// The loader's name map: the tables' patterns with block numbers below the model's layer count.
class NameMap {
 public:
  NameMap(const Architecture& a, std::optional<std::int64_t> layers) : layers_(layers) {
    for (std::size_t i = 0; i < a.name_count; ++i) {
      patterns_.emplace(a.names[i].gguf, a.names[i].hf);
    }
  }

  // transformers' name of GGUF tensor `name`, or nullopt when the loader does not load it.
  std::optional<std::string> hf(std::string_view name) const {
    constexpr std::string_view block = "blk.";
    if (!name.starts_with(block)) {
      auto it = patterns_.find(name);
      if (it == patterns_.end()) return std::nullopt;
      return std::string(it->second);
    }
    // "blk.12.attn_q.weight": the pattern "blk.#.attn_q.weight", the number "12" as the map's
    // model writes it (no leading zero), below its layer count.
    const std::string_view rest = name.substr(block.size());
    const std::size_t dot = rest.find('.');
    const std::string_view number = rest.substr(0, dot);
    if (dot == std::string_view::npos || number.empty() || number.size() > 9 ||
        (number.size() > 1 && number[0] == '0') ||
        !std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    if (layers_ && std::stoll(std::string(number)) >= *layers_) return std::nullopt;
    const std::string pattern = fmt::format("blk.#{}", rest.substr(dot));
    auto it = patterns_.find(pattern);
    if (it == patterns_.end()) return std::nullopt;
    std::string out(it->second);
    out.replace(out.find('#'), 1, number);
    return out;
  }

 private:
  std::map<std::string_view, std::string_view, std::less<>> patterns_;
  std::optional<std::int64_t> layers_;
};

// The config key block_count becomes for this model type (num_hidden_layers, n_layer...).
std::optional<std::int64_t> layer_count(const LoaderMetadata& m) {
  for (const gguf_hf::ConfigPrefix& p : gguf_hf::config_prefixes) {
    if (p.prefix != m.model_type) continue;
    for (std::size_t i = 0; i < p.count; ++i) {
      if (std::string_view(p.keys[i].gguf) == "block_count" && p.keys[i].hf) {
        return m.config.integer(p.keys[i].hf);
      }
    }
  }
  return std::nullopt;
}

std::vector<std::int64_t> c_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> stride(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    stride[i] = step;
    step *= std::max<std::int64_t>(shape[i], 1);
  }
  return stride;
}

bool floating_plain(DType dtype) {
  return dtype == DType::float16 || dtype == DType::bfloat16 || dtype == DType::float32;
}

// Builds the renamed model.
class Renamer {
 public:
  Renamer(Model& model, const LoaderMetadata& meta, Processor processor)
      : m_(model), meta_(meta), processor_(processor) {}

  void run() {
    const NameMap names(*meta_.architecture, layer_count(meta_));
    std::vector<Entry> entries;
    std::vector<Model::Origin> origins;
    std::vector<std::string> left_out;
    // MoE: the entry of each merged gate_up_proj, by its name, and its parts.
    struct Merge {
      std::size_t entry = 0;
      std::optional<std::size_t> gate, up;
    };
    std::map<std::string, Merge> merges;
    const std::size_t entry_count = m_.entries.size();
    for (std::size_t i = 0; i < entry_count; ++i) {
      const Entry& e = m_.entries[i];
      const std::string& name = e.key;
      if (e.kind != Entry::Kind::tensor) continue;
      std::optional<std::string> hf;
      bool merge_part = false;
      if (processor_ == Processor::gpt2 && name == "output.weight") {
        hf = "lm_head.weight";  // the processor's own rule, before the name map
      } else if (processor_ == Processor::moe && moe_part(name)) {
        // The map names the merged tensor by the GGUF name without ".weight".
        hf = names.hf(std::string_view(name).substr(0, name.size() - 7));
        merge_part = hf.has_value() && !contains(name, "_down_exps");
      } else {
        hf = names.hf(name);
      }
      if (!hf) {
        left_out.push_back(name);
        continue;
      }
      if (merge_part) {
        auto [it, fresh] = merges.try_emplace(*hf);
        if (fresh) {
          it->second.entry = entries.size();
          entries.push_back({*hf, {}, Entry::Kind::tensor, 0, {}, {}});
          origins.push_back({name, ""});
        } else {
          origins[it->second.entry].key += ", " + name;
        }
        (contains(name, "_gate_exps") ? it->second.gate : it->second.up) = e.tensor;
        continue;
      }
      std::string how;
      const std::size_t tensor = transform(name, e.tensor, how);
      entries.push_back({*hf, {}, Entry::Kind::tensor, tensor, {}, {}});
      origins.push_back({name, how});
    }
    for (auto& [hf, merge] : merges) {
      std::string how;
      entries[merge.entry].tensor = merged(merge.gate, merge.up, how);
      origins[merge.entry].how = how;
    }
    m_.entries = std::move(entries);
    m_.origins = std::move(origins);
    if (!left_out.empty()) {
      std::string listed;
      for (std::size_t i = 0; i < left_out.size() && i < 5; ++i) {
        listed += (i ? ", " : "") + quote(left_out[i], 80);
      }
      m_.notes.push_back(fmt::format(
          "names=hf: left out {} tensor{} transformers' GGUF loader does not load: {}{}",
          left_out.size(), left_out.size() == 1 ? "" : "s", listed,
          left_out.size() > 5 ? fmt::format(", and {} more", left_out.size() - 5) : ""));
    }
  }

 private:
  static bool moe_part(std::string_view name) {
    return name.ends_with(".weight") &&
           (contains(name, ".ffn_gate_exps") || contains(name, ".ffn_up_exps") ||
            contains(name, ".ffn_down_exps"));
  }

  std::size_t add(Tensor t) {
    m_.tensors.push_back(std::move(t));
    return m_.tensors.size() - 1;
  }

  // Tensor `i`, made to serve float32 when it is a float16 or bfloat16 one (converted on read:
  // the loader gives every tensor as gguf-py dequantizes it, float32); returns `i`.
  std::size_t as_float32(std::size_t i) {
    Tensor& t = m_.tensors[i];
    if (t.blocks == BlockFormat::none &&
        (t.dtype == DType::float16 || t.dtype == DType::bfloat16)) {
      t.stored_dtype = t.dtype;
      t.dtype = DType::float32;
    }
    return i;
  }

  std::size_t broken(const Tensor& source, std::string why) {
    Tensor t;
    t.shape = source.shape;
    t.stride = c_strides(t.shape);
    t.broken = std::move(why);
    return add(std::move(t));
  }

  // A derived float32 tensor of `shape` from derivation `d`.
  std::size_t derived(std::vector<std::int64_t> shape, Derivation d) {
    Tensor t;
    t.shape = std::move(shape);
    t.stride = c_strides(t.shape);
    t.derivation = static_cast<std::uint32_t>(m_.derivations.size());
    m_.derivations.push_back(std::move(d));
    const std::size_t i = add(std::move(t));
    std::string why = check_derivation(m_, m_.tensors[i]);
    if (!why.empty()) m_.tensors[i].broken = std::move(why);
    return i;
  }

  // Rows along the first dimension: the tensor's elements after it are one row.
  static std::uint64_t row_length(const Tensor& t) {
    std::uint64_t n = 1;
    for (std::size_t d = 1; d < t.shape.size(); ++d) n *= static_cast<std::uint64_t>(t.shape[d]);
    return n;
  }

  // Tensor `source` with its rows (along the first dimension) taken run by run: an assembly of
  // its bytes when it is a plain floating tensor, else a derivation of its values.
  std::size_t rows_of(std::size_t source, std::vector<Derivation::Run> runs) {
    const Tensor& s = m_.tensors[source];
    if (s.blocks != BlockFormat::none || !floating_plain(s.stored()) || !s.storage ||
        !s.contiguous()) {
      Derivation d;
      d.runs = std::move(runs);
      for (auto& run : d.runs) run.source = source;
      d.row_length = row_length(s);
      return derived(s.shape, std::move(d));
    }
    Tensor t;
    t.shape = s.shape;
    t.stride = c_strides(t.shape);
    t.dtype = s.dtype;
    t.stored_dtype = s.stored_dtype;
    const std::size_t rank = t.shape.size();
    Assembly a(Assembly::Grid::shape, rank);
    const std::vector<std::int64_t> inner = c_strides(s.shape);
    const auto row = static_cast<std::int64_t>(row_length(s));
    std::vector<std::int64_t> offset(rank, 0), length(s.shape), stride(inner);
    for (const Derivation::Run& run : runs) {
      offset[0] = static_cast<std::int64_t>(run.at);
      length[0] = static_cast<std::int64_t>(run.count);
      stride[0] = static_cast<std::int64_t>(run.step) * row;
      a.add({*s.storage, s.storage_offset + static_cast<std::int64_t>(run.first) * row}, offset,
            length, stride);
    }
    t.assembly = m_.assemblies.size();
    m_.assemblies.push_back(std::move(a));
    const std::size_t i = add(std::move(t));
    std::string why = index_assembly(m_, m_.tensors[i], m_.assemblies[*m_.tensors[i].assembly]);
    if (!why.empty()) m_.tensors[i].broken = std::move(why);
    return i;
  }

  // The tensor transformers' processor makes of GGUF tensor `source` named `name`; `how` says
  // what was done ("" when nothing but the name changed).
  std::size_t transform(const std::string& name, std::size_t source, std::string& how) {
    const Tensor& s = m_.tensors[source];
    if (!s.broken.empty() || s.numel() == 0) return source;
    switch (processor_) {
      case Processor::llama:
        if (contains(name, ".attn_q.") || contains(name, ".attn_k.")) {
          return unpermute(name, source, how);
        }
        break;
      case Processor::norm_minus_one:
        if (contains(name, "norm.weight")) {
          how = "w - 1 (llama.cpp stores these norm weights as w + 1)";
          Derivation d;
          d.runs.push_back(
              {source, 0, 0, static_cast<std::uint64_t>(s.shape.empty() ? 1 : s.shape[0]), 1});
          d.row_length = row_length(s);
          d.op = Derivation::Op::minus_one;
          return derived(s.shape, std::move(d));
        }
        break;
      case Processor::gpt2:
        if (contains(name, "attn_qkv.weight") || contains(name, "ffn_down.weight") ||
            contains(name, "ffn_up.weight") || contains(name, "attn_output.weight")) {
          return transpose(source, how);
        }
        break;
      case Processor::bloom:
        if (contains(name, "attn_qkv")) return bloom_qkv(name, source, how);
        break;
      case Processor::moe:
        if (contains(name, "ffn_gate_inp_shexp")) return reshaped(source, {1}, 0, how);
        break;
      case Processor::lfm2:
        if (contains(name, "shortconv.conv.weight")) return reshaped(source, {1}, 1, how);
        break;
      case Processor::none:
        break;
    }
    return as_float32(source);
  }

  // np.expand_dims(weights, axis): a dimension of 1 inserted before dimension `axis`.
  std::size_t reshaped(std::size_t source, std::vector<std::int64_t> one, std::size_t axis,
                       std::string& how) {
    Tensor t = m_.tensors[as_float32(source)];
    if (axis > t.shape.size()) return source;
    t.shape.insert(t.shape.begin() + static_cast<std::ptrdiff_t>(axis), one.begin(), one.end());
    // The same elements in the same order: C-order strides of the new shape (the file's
    // tensors are C order; a block-quantized one keeps its last dimension).
    t.stride = c_strides(t.shape);
    how = fmt::format("a dimension of 1 inserted at {} (np.expand_dims)", axis);
    return add(std::move(t));
  }

  // LlamaTensorProcessor: convert_hf_to_gguf.py's RoPE permutation of Q and K undone: rows
  // (n_head, dim, 2) become (n_head, 2, dim).
  std::size_t unpermute(const std::string& name, std::size_t source, std::string& how) {
    const auto heads = meta_.config.integer("num_attention_heads");
    const auto kv_heads = meta_.config.integer("num_key_value_heads");
    // Without both in the config the loader leaves the rows as they are.
    if (!meta_.config.find("num_attention_heads") || !meta_.config.find("num_key_value_heads")) {
      return as_float32(source);
    }
    const Tensor& s = m_.tensors[source];
    const bool q = contains(name, ".attn_q.");
    const std::optional<std::int64_t> n = q ? heads : (heads != kv_heads ? kv_heads : heads);
    const std::int64_t rows = s.shape.empty() ? 1 : s.shape[0];
    if (!n || *n <= 0 || *n > rows / 2 || rows % (2 * *n) != 0) {
      return broken(s, fmt::format("its {} rows are no whole number of {} heads of 2 halves: "
                                   "transformers' loader cannot un-permute them",
                                   rows, n ? fmt::format("{}", *n) : "?"));
    }
    if (static_cast<std::uint64_t>(*n) > max_derivation_runs / 2) {
      return broken(s, fmt::format("{} heads: more than ckptfs un-permutes ({})", *n,
                                   max_derivation_runs / 2));
    }
    const auto dim = static_cast<std::uint64_t>(rows / 2 / *n);
    std::vector<Derivation::Run> runs;
    for (std::uint64_t h = 0; h < static_cast<std::uint64_t>(*n); ++h) {
      for (std::uint64_t j = 0; j < 2; ++j) {
        runs.push_back({source, h * 2 * dim + j * dim, h * 2 * dim + j, dim, 2});
      }
    }
    how = fmt::format("rows un-permuted ({} heads): llama.cpp's RoPE order back to transformers'",
                      *n);
    as_float32(source);
    return rows_of(source, std::move(runs));
  }

  // BloomTensorProcessor: the fused QKV rows [q; k; v] back to per-head (q, k, v) blocks.
  std::size_t bloom_qkv(const std::string& name, std::size_t source, std::string& how) {
    const auto heads = meta_.config.integer("n_head");
    const auto embed = meta_.config.integer("hidden_size");
    const Tensor& s = m_.tensors[source];
    const bool weight = contains(name, "weight");
    const bool fits = heads && embed && *heads > 0 && *embed > 0 && *embed % *heads == 0 &&
                      !s.shape.empty() && s.shape[0] % 3 == 0 && s.shape[0] / 3 == *embed &&
                      s.shape.size() == (weight ? 2u : 1u) && (!weight || s.shape[1] == *embed) &&
                      static_cast<std::uint64_t>(*heads) <= max_derivation_runs / 3;
    if (!fits) {
      return broken(s,
                    "its shape is not Bloom's fused QKV of the config's n_head and "
                    "hidden_size: transformers' loader cannot reshape it");
    }
    const auto n = static_cast<std::uint64_t>(*heads);
    const auto e = static_cast<std::uint64_t>(*embed);
    const std::uint64_t dim = e / n;
    std::vector<Derivation::Run> runs;
    for (std::uint64_t h = 0; h < n; ++h) {
      for (std::uint64_t part = 0; part < 3; ++part) {
        runs.push_back({source, (h * 3 + part) * dim, part * e + h * dim, dim, 1});
      }
    }
    how = fmt::format("fused QKV rows back to per-head order ({} heads)", n);
    as_float32(source);
    return rows_of(source, std::move(runs));
  }

  // GPT2TensorProcessor: a Conv1D weight, stored as a Linear's: its transpose.
  std::size_t transpose(std::size_t source, std::string& how) {
    const Tensor& s = m_.tensors[source];
    if (s.shape.size() != 2) return as_float32(source);  // weights.T of 1-d is itself
    how = "transposed (GPT-2's Conv1D weight)";
    if (s.blocks == BlockFormat::none && s.storage && s.contiguous()) {
      Tensor t = m_.tensors[as_float32(source)];
      t.shape = {s.shape[1], s.shape[0]};
      t.stride = {1, s.shape[1]};
      return add(std::move(t));
    }
    Derivation d;
    d.runs.push_back({source, 0, 0, 1, 1});
    d.transpose = true;
    return derived({s.shape[1], s.shape[0]}, std::move(d));
  }

  // Qwen2MoeTensorProcessor: the experts' gate [E, ff, n] and up [E, ff, n] as one gate_up_proj
  // [E, 2 ff, n], gate first in each expert.
  std::size_t merged(std::optional<std::size_t> gate, std::optional<std::size_t> up,
                     std::string& how) {
    const Tensor& g = m_.tensors[gate ? *gate : *up];
    if (!gate || !up) {
      return broken(g,
                    "a merged gate_up_proj of which the file holds only one part (the "
                    "loader fills the other with zeros)");
    }
    const Tensor& u = m_.tensors[*up];
    if (g.shape.size() != 3 || g.shape != u.shape || !g.broken.empty() || !u.broken.empty() ||
        static_cast<std::uint64_t>(g.shape[0]) > max_derivation_runs / 2) {
      return broken(g, fmt::format("its gate and up expert tensors are not two [experts, rows, "
                                   "columns] tensors of one shape (of at most {} experts)",
                                   max_derivation_runs / 2));
    }
    how = "the experts' gate and up tensors, concatenated per expert";
    std::vector<std::int64_t> shape = {g.shape[0], 2 * g.shape[1], g.shape[2]};
    const auto experts = static_cast<std::uint64_t>(g.shape[0]);
    const auto rows = static_cast<std::uint64_t>(g.shape[1]);
    const bool plain = g.blocks == BlockFormat::none && u.blocks == BlockFormat::none &&
                       floating_plain(g.dtype) && g.dtype == u.dtype && g.storage && u.storage &&
                       g.contiguous() && u.contiguous() &&
                       m_.storages[*g.storage].big_endian == m_.storages[*u.storage].big_endian;
    if (plain) {
      as_float32(*gate);
      as_float32(*up);
      Tensor t;
      t.shape = shape;
      t.stride = c_strides(shape);
      t.dtype = m_.tensors[*gate].dtype;
      t.stored_dtype = m_.tensors[*gate].stored_dtype;
      Assembly a(Assembly::Grid::shape, 3);
      for (const std::size_t part : {*gate, *up}) {
        const Tensor& p = m_.tensors[part];
        const std::int64_t offset[] = {0, part == *gate ? 0 : g.shape[1], 0};
        a.add({*p.storage, p.storage_offset}, offset, p.shape, c_strides(p.shape));
      }
      t.assembly = m_.assemblies.size();
      m_.assemblies.push_back(std::move(a));
      const std::size_t i = add(std::move(t));
      std::string why = index_assembly(m_, m_.tensors[i], m_.assemblies[*m_.tensors[i].assembly]);
      if (!why.empty()) m_.tensors[i].broken = std::move(why);
      return i;
    }
    Derivation d;
    d.row_length = static_cast<std::uint64_t>(g.shape[2]);
    for (std::uint64_t e = 0; e < experts; ++e) {
      d.runs.push_back({*gate, 2 * e * rows, e * rows, rows, 1});
      d.runs.push_back({*up, (2 * e + 1) * rows, e * rows, rows, 1});
    }
    return derived(std::move(shape), std::move(d));
  }

  Model& m_;
  const LoaderMetadata& meta_;
  Processor processor_;
};

// config.json's maker: the loader's config, with -o dtype's dtype.
Model::File config_file(gguf_hf::Dict config) {
  return {"config.json", [config = std::move(config)](const Model&, std::optional<DType> dtype) {
            return gguf_hf::config_json(config, dtype);
          }};
}

}  // namespace

std::optional<std::string> gguf_transformers_config(const Model& model,
                                                    std::optional<DType> dtype) {
  std::string why;
  const auto meta = gguf_hf::read_loader_metadata(model, why);
  if (!meta) return std::nullopt;
  return gguf_hf::config_json(meta->config, dtype);
}

void name_gguf_as_transformers(Model& model) {
  std::string why;
  const auto meta = gguf_hf::read_loader_metadata(model, why);
  const Architecture* a = meta ? meta->architecture : nullptr;
  std::optional<Processor> processor;
  if (a && !a->names) {
    why = fmt::format("transformers' GGUF loader has no tensor names for architecture {} ({})",
                      quote(a->gguf), a->why_no_names);
  } else if (a && !a->unloaded.empty()) {
    why = fmt::format("transformers' GGUF loader loads no tensor of architecture {} into {}",
                      quote(a->gguf), a->unloaded);
  } else if (a && !(processor = processor_of(a->processor))) {
    why = fmt::format("ckptfs does not do the {} of transformers' GGUF loader (architecture {})",
                      a->processor, quote(a->gguf));
  }
  if (!processor) {
    model.notes.push_back(fmt::format("names=hf: {}: its tensors keep llama.cpp's names", why));
    return;
  }
  Renamer(model, *meta, *processor).run();
  model.files.push_back(config_file(meta->config));
  const std::string no_tokenizer = gguf_hf::why_no_tokenizer(model, *a);
  if (!no_tokenizer.empty()) {
    model.notes.push_back(fmt::format("names=hf: no tokenizer files: {}", no_tokenizer));
    return;
  }
  const gguf_hf::Tokenizer* rule = a->tokenizer;
  model.files.push_back({"tokenizer.json", [rule](const Model& m, std::optional<DType>) {
                           return gguf_hf::tokenizer_json(m, *rule);
                         }});
  model.files.push_back({"tokenizer_config.json", [rule](const Model& m, std::optional<DType>) {
                           return gguf_hf::tokenizer_config_json(m, *rule);
                         }});
}

}  // namespace ckptfs
