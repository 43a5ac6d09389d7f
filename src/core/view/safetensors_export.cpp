// SPDX-License-Identifier: MIT
// SafetensorsExport: the layout and the reads of a virtual model.safetensors and its shards.
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/view/safetensors_export.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/base/hash.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace ckptfs {
namespace {

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
    j_.key(key).begin_object();
    j_.key("dtype").string(info(serve(model_, tensor, convert_to_).dtype).safetensors);
    j_.key("shape").numbers(tensor.shape);
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
         !info(served.dtype).safetensors.empty();
}

}  // namespace

SafetensorsExport::SafetensorsExport(const Model& model, std::uint64_t shard_size,
                                     std::optional<DType> convert_to)
    : convert_to_(convert_to) {
  // The tensors, with keys made unique: the first of a text keeps it.
  TextViewSet texts;
  for (const Entry& e : model.entries) {
    if (e.kind == Entry::Kind::tensor) texts.insert(e.key);
  }
  TextSet used;
  for (std::size_t i = 0; i < model.entries.size(); ++i) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const ServedTensor served = serve(model, model.tensors[e.tensor], convert_to);
    if (!exported(model, e, served)) continue;
    std::string key = e.key;
    for (std::uint64_t n = 2; used.contains(key); ++n) {
      key = fmt::format("{}%#{}", e.key, n);
      if (texts.contains(key)) key = e.key;  // another entry's own key: take the next number
    }
    used.insert(key);
    tensors_.push_back({i, std::move(key), 0, served.nbytes});
  }
  // Files, as transformers' shard_checkpoint() splits: in order, a new file when the current one
  // holds a tensor and the next would take it past shard_size. A tensor that would make its file
  // larger than a file can be (with room for its header) is left out.
  std::vector<Tensor> kept;
  std::uint64_t in_file = 0;  // bytes of tensors in the current file: the next one's offset
  std::size_t file_first = 0;
  for (Tensor& t : tensors_) {
    const bool has_tensors = kept.size() > file_first;
    if (shard_size != 0 && has_tensors && (in_file > shard_size || t.nbytes > shard_size - in_file)) {
      files_.push_back({"", file_first, kept.size(), {}, 0});
      file_first = kept.size();
      in_file = 0;
    }
    if (t.nbytes > max_tensor_bytes - in_file) continue;
    t.begin = in_file;
    in_file += t.nbytes;
    kept.push_back(std::move(t));
  }
  tensors_ = std::move(kept);
  files_.push_back({"", file_first, tensors_.size(), {}, 0});
  for (std::size_t i = 0; i < files_.size(); ++i) {
    File& f = files_[i];
    f.name = shard_size == 0 ? "model.safetensors"
                             : fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, files_.size());
    f.header = header_of(model, tensors_, f.first, f.end, convert_to);
    const std::uint64_t data = f.first < f.end ? tensors_[f.end - 1].begin + tensors_[f.end - 1].nbytes : 0;
    f.size = f.header.size() + data;
  }
  if (shard_size == 0) return;
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
  // Keys are the entries' own unless two tensors share one: then the full layout names them.
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
  std::uint64_t in_file = 0;
  for (std::size_t i = 0; i < model.entries.size(); ++i) {
    const Entry& e = model.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const ServedTensor served = serve(model, model.tensors[e.tensor], convert_to);
    if (!exported(model, e, served) || served.nbytes > max_tensor_bytes - in_file) continue;
    header.tensor(i, e.key, in_file, served.nbytes);
    in_file += served.nbytes;
    json_size += json.size();
    json.clear();
  }
  header.finish();
  json_size += json.size();
  return header_size(json_size) + in_file;
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
    read_served(model, tensor, serve(model, tensor, convert_to_), a - it->begin,
                static_cast<std::size_t>(b - a), sources, out);
  }
}

}  // namespace ckptfs
