// SPDX-License-Identifier: MIT
// SafetensorsExport: the layout and the reads of a virtual model.safetensors and its shards.
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/view/safetensors_export.hpp>
#include <ckptfs/view/served.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace ckptfs {
namespace {

// How a tensor is served in the export: little-endian, as the format has it.
ServedTensor served_of(const Model& model, const Tensor& tensor, std::optional<DType> convert_to) {
  return serve(model, tensor, convert_to, ByteOrder::little);
}

// Whether a key is UTF-8, which a header's JSON must be: the safetensors library refuses the lone
// surrogate escapes ckptfs writes elsewhere for bytes that are not.
bool is_utf8(std::string_view key) {
  for (std::size_t i = 0; i < key.size();) {
    const std::size_t n = utf8_sequence_length(key, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// A key's text in a header: each byte that is not UTF-8 becomes U+FFFD.
std::string header_text(std::string_view key) {
  std::string out;
  for (std::size_t i = 0; i < key.size();) {
    const std::size_t n = utf8_sequence_length(key, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    } else {
      out.append(key.substr(i, n));
      i += n;
    }
  }
  return out;
}

// The JSON header of a file, written into `out` (compact; no length in front, no padding): the
// __metadata__ object, then each tensor(). Only ever appends to `out`, so that a caller may take
// and clear what it holds between tensors.
class HeaderJson {
 public:
  HeaderJson(const Model& model, std::optional<DType> convert_to, std::string& out)
      : model_(model), convert_to_(convert_to), j_(out, 0) {
    j_.begin_object();
    j_.key("__metadata__").begin_object();
    bool has_format = false;
    for (const auto& [key, value] : model.metadata) {
      j_.key(key).string(value);
      has_format = has_format || key == "format";
    }
    if (!has_format) j_.key("format").string("pt");
    j_.end_object();
  }
  void tensor(std::size_t entry, std::string_view key, std::uint64_t begin, std::uint64_t nbytes) {
    const Tensor& tensor = model_.tensors[model_.entries[entry].tensor];
    const std::string_view dtype =
        safetensors_dtype(tensor, served_of(model_, tensor, convert_to_).dtype);
    j_.key(key).begin_object();
    j_.key("dtype").string(dtype);
    j_.key("shape").begin_array();
    for (std::size_t d = 0; d < tensor.shape.size(); ++d) {
      const auto size = static_cast<std::uint64_t>(tensor.shape[d]);
      j_.number(d + 1 == tensor.shape.size() && dtype == "F4" ? 2 * size : size);
    }
    j_.end_array();
    j_.key("data_offsets").begin_array();
    j_.number(begin).number(begin + nbytes);
    j_.end_array().end_object();
  }
  void finish() { j_.end_object(); }

 private:
  const Model& model_;
  std::optional<DType> convert_to_;
  JsonWriter j_;
};

// The bytes before a file's data: the JSON header's 8-byte little-endian length, then the JSON
// padded with spaces to a multiple of 8, as the format asks.
std::uint64_t header_size(std::uint64_t json_size) { return 8 + (json_size + 7) / 8 * 8; }

std::string header_of(const Model& model, const std::vector<SafetensorsExport::Tensor>& tensors,
                      std::size_t first, std::size_t end, std::optional<DType> convert_to) {
  std::string json;
  HeaderJson header(model, convert_to, json);
  for (std::size_t i = first; i < end; ++i) {
    header.tensor(tensors[i].entry, tensors[i].key, tensors[i].begin, tensors[i].nbytes);
  }
  header.finish();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json;
}

// Whether a tensor entry is in the export, served as `served`.
bool exported(const Model& model, const Entry& e, const ServedTensor& served) {
  return e.kind == Entry::Kind::tensor && model.tensors[e.tensor].broken.empty() &&
         values_not_served(model, model.tensors[e.tensor]).empty() &&
         !safetensors_dtype(model.tensors[e.tensor], served.dtype).empty();
}

// Where the export's tensors go, one after the other, as transformers' shard_checkpoint()
// splits (shard_size 0: all in one file): the one rule of the constructor, single_file_size()
// and for_each_left_out().
class Placement {
 public:
  explicit Placement(std::uint64_t shard_size) : shard_size_(shard_size) {}
  struct At {
    bool new_file = false;               // the tensor closes the file before it: a new file starts
    std::optional<std::uint64_t> begin;  // its offset in its file's data; none: left out
  };
  // A new file starts when the current one holds a tensor and this one would take it past
  // shard_size; a tensor that would make its file larger than a file can be is left out.
  At place(std::uint64_t nbytes) {
    At at;
    if (shard_size_ != 0 && in_this_file_ != 0 &&
        (in_file_ > shard_size_ || nbytes > shard_size_ - in_file_)) {
      at.new_file = true;
      in_file_ = 0;
      in_this_file_ = 0;
    }
    if (nbytes > max_tensor_bytes - in_file_) return at;
    at.begin = in_file_;
    in_file_ += nbytes;
    ++in_this_file_;
    return at;
  }
  std::uint64_t in_file() const noexcept { return in_file_; }

 private:
  std::uint64_t shard_size_;
  std::uint64_t in_file_ = 0;  // bytes of tensors in the current file: the next one's offset
  std::size_t in_this_file_ = 0;
};

constexpr std::string_view too_large_for_a_file =
    "its bytes would take its file past the largest size a file can have";

}  // namespace

std::string_view safetensors_dtype(const Tensor& tensor, DType served) {
  if (served == DType::float4_e2m1fn_x2) return tensor.shape.empty() ? "" : "F4";
  return info(served).safetensors;
}

std::string safetensors_omission(const Model& model, const Tensor& tensor,
                                 std::optional<DType> convert_to) {
  if (const std::string_view why = values_not_served(model, tensor); !why.empty()) {
    return fmt::format("{} blocks: {}", info(tensor.blocks).name, why);
  }
  const DType served = served_of(model, tensor, convert_to).dtype;
  if (!safetensors_dtype(tensor, served).empty()) return {};
  if (served == DType::float4_e2m1fn_x2) {
    return "a 0-d float4_e2m1fn_x2: safetensors' F4 holds no half byte";
  }
  return fmt::format("safetensors has no dtype {}", info(served).name);
}

void SafetensorsExport::for_each_left_out(
    const Model& model, std::uint64_t shard_size, std::optional<DType> convert_to,
    const std::function<void(std::size_t entry, std::string_view why, bool broken)>& visit) {
  Placement placement(shard_size);
  for (std::size_t i = 0; i < model.entries.size(); ++i) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const ckptfs::Tensor& t = model.tensors[e.tensor];
    if (!t.broken.empty()) {
      visit(i, "broken", true);  // whatever it would be: pack refuses it alike
    } else if (const std::string why = safetensors_omission(model, t, convert_to); !why.empty()) {
      visit(i, why, false);
    } else if (!placement.place(served_of(model, t, convert_to).nbytes).begin) {
      visit(i, too_large_for_a_file, false);
    }
  }
}

SafetensorsExport::SafetensorsExport(const Model& model, std::uint64_t shard_size,
                                     std::optional<DType> convert_to)
    : convert_to_(convert_to) {
  // The tensors, with keys made unique: the first of a text keeps it. "__metadata__" is the
  // format's own. Texts are the keys as a header holds them (header_text()).
  std::vector<std::string> rewritten(model.entries.size());  // of the keys that are not UTF-8
  auto text_of = [&](std::size_t i) -> std::string_view {
    return rewritten[i].empty() ? std::string_view(model.entries[i].key) : rewritten[i];
  };
  TextViewSet texts;
  for (std::size_t i = 0; i < model.entries.size(); ++i) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    if (!is_utf8(e.key)) rewritten[i] = header_text(e.key);
    texts.insert(text_of(i));
  }
  TextSet used;
  used.insert("__metadata__");
  for (std::size_t i = 0; i < model.entries.size(); ++i) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const ServedTensor served = served_of(model, model.tensors[e.tensor], convert_to);
    if (!exported(model, e, served)) continue;
    const std::string_view text = text_of(i);
    std::string key(text);
    for (std::uint64_t n = 2; used.contains(key); ++n) {
      key = fmt::format("{}%#{}", text, n);
      if (texts.contains(key)) key = text;  // another entry's own key: take the next number
    }
    used.insert(key);
    tensors_.push_back({i, std::move(key), 0, served.nbytes});
  }
  // Files, as transformers' shard_checkpoint() splits (Placement).
  std::vector<Tensor> kept;
  Placement placement(shard_size);
  std::size_t file_first = 0;
  for (Tensor& t : tensors_) {
    const Placement::At at = placement.place(t.nbytes);
    if (at.new_file) {
      files_.push_back({"", file_first, kept.size(), {}, 0});
      file_first = kept.size();
    }
    if (!at.begin) continue;
    t.begin = *at.begin;
    kept.push_back(std::move(t));
  }
  tensors_ = std::move(kept);
  files_.push_back({"", file_first, tensors_.size(), {}, 0});
  // One file is model.safetensors, without an index, as save_pretrained writes it.
  const bool sharded = files_.size() > 1;
  for (std::size_t i = 0; i < files_.size(); ++i) {
    File& f = files_[i];
    f.name = !sharded ? "model.safetensors"
                      : fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, files_.size());
    f.header = header_of(model, tensors_, f.first, f.end, convert_to);
    const std::uint64_t data =
        f.first < f.end ? tensors_[f.end - 1].begin + tensors_[f.end - 1].nbytes : 0;
    f.size = f.header.size() + data;
  }
  if (!sharded) return;
  std::uint64_t total = 0;
  for (const Tensor& t : tensors_) total += t.nbytes;
  JsonWriter j(index_json_);
  j.begin_object();
  j.key("metadata").begin_object().key("total_size").number(total).end_object();
  j.key("weight_map").begin_object();
  for (const File& f : files_) {
    for (std::size_t i = f.first; i < f.end; ++i) j.key(tensors_[i].key).string(f.name);
  }
  j.end_object().end_object();
  index_json_ += '\n';
}

std::uint64_t SafetensorsExport::single_file_size(const Model& model,
                                                  std::optional<DType> convert_to,
                                                  bool keys_unique) {
  // Keys are the entries' own unless two tensors share one, or one is "__metadata__" or not
  // UTF-8: then the full layout names them.
  for (const Entry& e : model.entries) {
    if (e.kind == Entry::Kind::tensor && (e.key == "__metadata__" || !is_utf8(e.key))) {
      return SafetensorsExport(model, 0, convert_to).files().front().size;
    }
  }
  if (!keys_unique) {
    std::vector<std::string_view> keys;
    keys.reserve(model.entries.size());
    for (const Entry& e : model.entries) {
      if (e.kind == Entry::Kind::tensor) keys.push_back(e.key);
    }
    std::sort(keys.begin(), keys.end());
    keys_unique = std::adjacent_find(keys.begin(), keys.end()) == keys.end();
  }
  if (!keys_unique) return SafetensorsExport(model, 0, convert_to).files().front().size;
  // The constructor's layout, counted: the same tensors at the same offsets, the same JSON.
  std::string json;
  HeaderJson header(model, convert_to, json);
  std::uint64_t json_size = 0;
  Placement placement(0);
  for (std::size_t i = 0; i < model.entries.size(); ++i) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const ServedTensor served = served_of(model, model.tensors[e.tensor], convert_to);
    if (!exported(model, e, served)) continue;
    const auto begin = placement.place(served.nbytes).begin;
    if (!begin) continue;
    header.tensor(i, e.key, *begin, served.nbytes);
    json_size += json.size();
    json.clear();
  }
  header.finish();
  json_size += json.size();
  return header_size(json_size) + placement.in_file();
}

void SafetensorsExport::read(const Model& model, std::size_t file, std::uint64_t offset,
                             std::size_t length, Sources sources, ReadBuffer& out) const {
  const File& f = files_[file];
  if (offset >= f.size) return;
  std::uint64_t end = offset + std::min<std::uint64_t>(length, f.size - offset);
  if (offset < f.header.size()) {
    const std::uint64_t n = std::min<std::uint64_t>(end, f.header.size()) - offset;
    out.add_memory(f.header.data() + offset, static_cast<std::size_t>(n));
    offset += n;
  }
  if (offset >= end) return;
  // Offsets in this file's data, after the header.
  const std::uint64_t from = offset - f.header.size();
  const std::uint64_t to = end - f.header.size();
  auto it = std::upper_bound(tensors_.begin() + static_cast<std::ptrdiff_t>(f.first),
                             tensors_.begin() + static_cast<std::ptrdiff_t>(f.end), from,
                             [](std::uint64_t at, const Tensor& t) { return at < t.begin; });
  for (--it; it != tensors_.begin() + static_cast<std::ptrdiff_t>(f.end) && it->begin < to; ++it) {
    const std::uint64_t a = std::max(from, it->begin);
    const std::uint64_t b = std::min(to, it->begin + it->nbytes);
    if (a >= b) continue;
    const ckptfs::Tensor& tensor = model.tensors[model.entries[it->entry].tensor];
    read_served(model, tensor, served_of(model, tensor, convert_to_), a - it->begin,
                static_cast<std::size_t>(b - a), sources, out);
  }
}

}  // namespace ckptfs
