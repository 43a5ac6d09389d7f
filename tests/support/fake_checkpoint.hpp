// SPDX-License-Identifier: MIT
// Fake torch checkpoints assembled in C++ (zip and legacy layouts), for the model and tree tests.
#pragma once

#include "support/pickle_builder.hpp"
#include "support/zip_builder.hpp"

#include <string>
#include <utility>
#include <vector>

namespace ckptfs::test {

// A zip checkpoint the way torch.save writes one: data.pkl, the storages, version.
inline std::string torch_zip(const std::string& data_pkl,
                             const std::vector<std::pair<std::string, std::string>>& storages,
                             const std::string& prefix = "archive",
                             const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  ZipBuilder zip;
  zip.add(prefix + "/data.pkl", data_pkl, torch_entry());
  for (const auto& [name, bytes] : extra) zip.add(prefix + "/" + name, bytes, torch_entry());
  for (const auto& [key, bytes] : storages) zip.add(prefix + "/data/" + key, bytes, torch_entry());
  zip.add(prefix + "/version", "3\n", torch_entry());
  return zip.build({.zip64 = true});
}

// n little-endian float32 values 0, 1, 2, ...
inline std::string floats(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    float f = static_cast<float>(i);
    out.append(reinterpret_cast<const char*>(&f), sizeof f);
  }
  return out;
}

// {key: tensor, ...} as an OrderedDict state_dict pickle; each tensor a float32 view of storage
// `storage_key` with `numel` elements.
struct FakeTensor {
  std::string key;
  std::string storage_key;
  std::int64_t numel;
  std::int64_t offset;
  std::initializer_list<std::int64_t> size;
  std::initializer_list<std::int64_t> stride;
};

inline std::string state_dict_pickle(const std::vector<FakeTensor>& tensors) {
  PickleBuilder p;
  p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
  for (const auto& t : tensors) {
    p.binunicode(t.key).tensor_v2("FloatStorage", t.storage_key, "cpu", t.numel, t.offset, t.size,
                                  t.stride);
  }
  p.setitems().stop();
  return p.bytes();
}

}  // namespace ckptfs::test
