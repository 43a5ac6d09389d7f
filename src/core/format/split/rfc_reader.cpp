// SPDX-License-Identifier: MIT
// read_rfc_directory(): map.pt's list of keys read from its pickle, each key's file found by the
// naming rule, read as one tensor or value, and the files' models joined in map.pt's order.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/names.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/split/rfc_reader.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/source/directory.hpp>

#include "../torch/torch_storages.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ckptfs {
namespace {

using pickle::Kind;

constexpr std::string_view map_name = "map.pt";

// Runs `body`, naming `file` in the message of any Error it throws.
template <class Body>
auto naming(std::string_view file, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", quote(file, 300), e.what()));
  }
}

// map.pt's keys: the str items of the list (or tuple) its data.pkl holds, in order.
std::vector<std::string> read_keys(const ByteSource& source, const ReadLimits& limits,
                                   const RfcLimits& rfc) {
  if (!looks_like_zip(source)) {
    throw Error(ExitCode::unsupported,
                "not in torch's zip format: the RFC's map.pt is torch.save(list_of_keys) of "
                "torch >= 1.6");
  }
  ZipArchive zip(source, limits.zip);
  const ZipEntry* pickle_record = nullptr;
  for (const ZipEntry& e : zip.entries()) {
    const auto slash = e.name.find('/');
    if (slash != std::string::npos && e.name.find('/', slash + 1) == std::string::npos &&
        std::string_view(e.name).substr(slash + 1) == "data.pkl") {
      pickle_record = &e;
      break;
    }
  }
  if (pickle_record == nullptr) {
    throw Error(ExitCode::bad_checkpoint, "a zip without data.pkl: not a torch.save file");
  }
  pickle::ParseResult parsed = detail::parse_record(source, *pickle_record, limits.pickle);
  const pickle::Graph& g = parsed.graph;
  const pickle::NodeId root = g.root();
  if (root == pickle::no_node || (g.kind(root) != Kind::list && g.kind(root) != Kind::tuple)) {
    throw Error(ExitCode::bad_checkpoint, "does not hold a list of keys");
  }
  const auto& items = g.items(root);
  if (items.size() > rfc.max_keys) {
    throw Error(ExitCode::unsupported,
                fmt::format("{} keys, more than the limit of {}", items.size(), rfc.max_keys));
  }
  std::vector<std::string> keys;
  keys.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (g.kind(items[i]) != Kind::string) {
      throw Error(ExitCode::bad_checkpoint, fmt::format("item {} of its list is not a str", i));
    }
    keys.push_back(g.text(items[i]));
  }
  return keys;
}

// Whether entry `e` of a key's file is a part of its root tensor (a per-channel quantized
// tensor's scales and zero points, which go inside it).
bool is_part_of_root(const Entry& e) {
  return e.kind == Entry::Kind::tensor &&
         (e.key == "tensor.q_per_channel_scales" || e.key == "tensor.q_per_channel_zero_points");
}

}  // namespace

bool looks_like_rfc_directory(const std::string& directory) {
  try {
    return Directory(directory).has(map_name, FileKind::regular);
  } catch (const Error&) {
    return false;
  }
}

DirectoryModel read_rfc_directory(const std::string& directory, const ReadLimits& limits,
                                  const RfcLimits& rfc) {
  auto dir = std::make_shared<const Directory>(directory);
  DirectoryModel out;
  Model& m = out.model;
  m.format = Format::rfc;

  std::vector<std::string> keys;
  {
    const DirectoryFileSource map(dir, std::string(map_name));
    keep_newest(out.times, map.times());
    out.permissions &= permission_bits(map);
    keys = naming(map_name, [&] { return read_keys(map, limits, rfc); });
  }

  ReadLimits one_entry = limits;
  one_entry.root_is_one_entry = true;
  // <name> and ".pt" within NAME_MAX, keys of equal text as the mount names them.
  const TextViewSet own_keys(keys.begin(), keys.end());
  NameAllocator names(rfc_name_bytes, &own_keys);
  m.entries.reserve(keys.size());
  for (const std::string& key : keys) {
    const std::string file = names.name(key) + ".pt";
    auto source = naming(file, [&] { return std::make_unique<DirectoryFileSource>(dir, file); });
    Model part = naming(file, [&] { return read_torch(*source, file, one_entry); });
    const bool root_ok =
        !part.entries.empty() && part.entries[0].key_path == "[]" &&
        (part.entries[0].kind == Entry::Kind::tensor ? part.entries[0].key == "tensor"
                                                     : part.entries[0].key == "value");
    const bool rest_ok = std::all_of(part.entries.begin() + (part.entries.empty() ? 0 : 1),
                                     part.entries.end(), is_part_of_root);
    if (!root_ok || !rest_ok) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("{}: holds {} entries (first {}), not one tensor or value",
                              quote(file, 300), part.entries.size(),
                              part.entries.empty() ? "none" : quote(part.entries[0].key)));
    }
    Entry entry = std::move(part.entries[0]);
    entry.key = key;         // a copy: own_keys views the keys
    entry.key_path.clear();  // one key of map.pt's flat list
    entry.containers.clear();
    const std::size_t storage_base = m.storages.size();
    const std::size_t tensor_base = m.tensors.size();
    if (part.storages.empty()) {
      // A value, or a tensor without bytes: nothing is read from the file later.
      keep_newest(out.times, source->times());
      out.permissions &= permission_bits(*source);
    } else {
      const auto source_index = static_cast<std::uint32_t>(m.sources.size());
      for (Storage& s : part.storages) {
        s.source = source_index;
        m.storages.push_back(std::move(s));
      }
      m.sources.push_back(file);
      out.sources.push_back(std::move(source));
    }
    for (Tensor& t : part.tensors) {
      if (t.storage) *t.storage += storage_base;
      if (t.quantization) {
        if (t.quantization->scales) *t.quantization->scales += tensor_base;
        if (t.quantization->zero_points) *t.quantization->zero_points += tensor_base;
      }
      m.tensors.push_back(std::move(t));
    }
    if (entry.kind == Entry::Kind::tensor) entry.tensor += tensor_base;
    m.entries.push_back(std::move(entry));
  }
  return out;
}

}  // namespace ckptfs
