// SPDX-License-Identifier: MIT
// describe_tensor() and describe_checkpoint(): the JSON forms of entries.
#include <ckptfs/describe.hpp>

namespace ckptfs {

using nlohmann::ordered_json;

SharingIndex::SharingIndex(const Checkpoint& c) : by_storage_(c.storages.size()) {
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const Entry& e = c.entries[i];
    if (e.kind != Entry::Kind::tensor) continue;
    const Tensor& t = c.tensors[e.tensor];
    if (t.storage) by_storage_[*t.storage].push_back(i);
  }
}

std::string_view byteorder_name(const Checkpoint& c) { return c.big_endian ? "big" : "little"; }

ordered_json describe_tensor(const Checkpoint& c, std::size_t entry_index,
                             const SharingIndex& sharing) {
  const Entry& e = c.entries[entry_index];
  const Tensor& t = c.tensors[e.tensor];
  ordered_json j;
  j["key"] = e.key;
  j["dtype"] = info(t.dtype).name;
  j["shape"] = t.shape;
  j["stride"] = t.stride;
  j["storage_offset"] = t.storage_offset;
  bool contiguous = t.broken.empty() && t.contiguous();
  j["contiguous"] = contiguous;
  j["nbytes"] = t.broken.empty() ? t.nbytes() : 0;
  if (auto offset = c.file_offset(t)) {
    j["file_offset"] = *offset;
  } else {
    j["file_offset"] = nullptr;
  }
  j["numpy"] = numpy_descr(t.dtype, c.big_endian);
  j["byteorder"] = byteorder_name(c);
  j["requires_grad"] = t.requires_grad;
  if (t.storage) {
    const Storage& s = c.storages[*t.storage];
    ordered_json sj;
    sj["key"] = s.key;
    sj["record"] = s.record.empty() ? ordered_json(nullptr) : ordered_json(s.record);
    sj["file_offset"] = s.file_offset;
    sj["nbytes"] = s.nbytes;
    j["storage"] = std::move(sj);
    ordered_json shared = ordered_json::array();
    std::size_t others = 0;
    for (std::size_t other : sharing.entries_of_storage(*t.storage)) {
      if (other == entry_index) continue;
      if (++others <= max_shared_with) shared.push_back(c.entries[other].key);
    }
    j["shared_with"] = std::move(shared);
    j["shared_with_count"] = others;
  } else {
    j["storage"] = nullptr;
    j["shared_with"] = ordered_json::array();
    j["shared_with_count"] = 0;
  }
  j["broken"] = t.broken.empty() ? ordered_json(nullptr) : ordered_json(t.broken);
  return j;
}

ordered_json describe_checkpoint(const Checkpoint& c) {
  SharingIndex sharing(c);
  ordered_json entries = ordered_json::array();
  for (std::size_t i = 0; i < c.entries.size(); ++i) {
    const Entry& e = c.entries[i];
    ordered_json j;
    if (e.kind == Entry::Kind::tensor) {
      ordered_json meta = describe_tensor(c, i, sharing);
      j["key"] = e.key;
      j["kind"] = "tensor";
      for (auto& [name, value] : meta.items()) {
        if (name != "key") j[name] = std::move(value);
      }
    } else {
      j["key"] = e.key;
      j["kind"] = "value";
      j["value"] = ordered_json::parse(e.value_json);
    }
    entries.push_back(std::move(j));
  }
  ordered_json out;
  out["format"] = format_name(c.format);
  out["byteorder"] = byteorder_name(c);
  out["entries"] = std::move(entries);
  return out;
}

}  // namespace ckptfs
