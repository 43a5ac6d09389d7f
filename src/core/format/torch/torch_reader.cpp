// SPDX-License-Identifier: MIT
// read_torch(): format detection, the zip and legacy layouts, and validation of every storage
// and tensor extent against the bytes that are really in the file.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/pickle/flatten.hpp>
#include <ckptfs/format/torch/torch_interpreter.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/format/torch/torchscript_reader.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>

#include "torch_storages.hpp"

#include <fmt/format.h>

#include <array>
#include <unordered_map>

namespace ckptfs {
namespace {

using pickle::Kind;
using namespace detail;

// After the zip or legacy read failed: names the files that are not torch.save output, saying
// what they are (throws), or returns, and the read's own error stands.
void refuse_other_formats(const ByteSource& source, const Error& failure) {
  refuse_impostor_after(source, failure);
  if (failure.code() == ExitCode::io || failure.code() == ExitCode::access_denied ||
      failure.code() == ExitCode::unreachable) {
    return;
  }
  std::string head;
  try {
    head = source.read_string(0, std::min<std::uint64_t>(source.size(), 512));
  } catch (const Error&) {
    return;
  }
  if (head.starts_with("PYTORCH1")) {
    throw Error(ExitCode::unsupported,
                "a checkpoint of the torch 1.0 preview release (PYTORCH1), which torch itself "
                "no longer reads");
  }
  if (is_tar_header(head)) {
    throw Error(ExitCode::unsupported,
                "a tar-format checkpoint of torch 0.1.x, which ckptfs does not serve: load it with "
                "torch and save it again");
  }
}

std::string pickle_error_context(const std::string& what, const Error& e) {
  return fmt::format("{}: {}", what, e.what());
}

// ---- zip ---------------------------------------------------------------------------------

struct ZipLayout {
  std::string prefix;
  const ZipEntry* data_pkl = nullptr;
};

ZipLayout find_zip_layout(const ZipArchive& zip) {
  ZipLayout layout;
  for (const auto& e : zip.entries()) {
    std::string_view name = e.name;
    auto slash = name.find('/');
    if (slash == std::string_view::npos || name.find('/', slash + 1) != std::string_view::npos) {
      continue;
    }
    if (name.substr(slash + 1) == "data.pkl") {
      layout.prefix = std::string(name.substr(0, slash));
      layout.data_pkl = &e;
      break;
    }
  }
  for (const auto& e : zip.entries()) {
    if (e.name.ends_with(".data/extern_modules")) {
      throw Error(ExitCode::unsupported,
                  "a torch.package archive: it holds code, not a torch.save checkpoint");
    }
  }
  if (!layout.data_pkl) {
    bool torchscript = false;
    for (const auto& e : zip.entries()) {
      if (e.name.ends_with("/model.json")) {
        throw Error(ExitCode::unsupported,
                    "a TorchScript archive of an older layout (model.json, no data.pkl), which "
                    "ckptfs does not read: load it with torch.jit.load and save it again");
      }
      torchscript = torchscript || e.name.ends_with("/constants.pkl");
    }
    if (torchscript) {
      throw Error(ExitCode::bad_checkpoint,
                  "a TorchScript archive without data.pkl: nothing says what its records are");
    }
    bool has_version = false;
    for (const auto& e : zip.entries()) {
      has_version = has_version || e.name.ends_with("/version");
    }
    throw Error(ExitCode::bad_checkpoint,
                has_version ? "a zip with a version record but no data.pkl: an incomplete "
                              "torch.save (did the save fail?)"
                            : "a zip file without data.pkl: not a torch.save checkpoint");
  }
  return layout;
}

bool has_code_records(const ZipArchive& zip, const std::string& prefix) {
  const std::string code = prefix + "/code/";
  for (const auto& e : zip.entries()) {
    if (e.name.starts_with(code)) return true;
  }
  return false;
}

// ---- legacy stream -----------------------------------------------------------------------

// The LONG1 magic number that opens a legacy stream: 0x1950a86a20f9469cfc6c, little-endian.
constexpr std::string_view legacy_magic("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10);

bool is_legacy_magic(const pickle::Graph& g) {
  auto root = g.root();
  return root != pickle::no_node && g.kind(root) == Kind::big_integer &&
         g.big_integer(root) == legacy_magic;
}

StorageTable legacy_storages(const ByteSource& source, std::uint64_t offset,
                             const std::vector<std::string>& keys, const Interpretation& in) {
  // The element size of each key comes from the first persistent id that names it.
  TextMap<std::size_t> element_size;
  for (const auto& ref : in.storage_refs) element_size.emplace(ref.key, ref.element_size());
  StorageTable table;
  for (const auto& key : keys) {
    auto size_it = element_size.find(key);
    if (size_it == element_size.end()) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("storage {} is listed but no tensor uses it, so its element size "
                              "is unknown",
                              quote(key)));
    }
    if (table.by_key.contains(key)) {
      throw Error(ExitCode::bad_checkpoint, fmt::format("storage {} is listed twice", quote(key)));
    }
    std::array<unsigned char, 8> count_bytes{};
    if (!source.contains(offset, 8)) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("storage {} would start at byte {}, past the end of the file ({} "
                              "bytes): {}",
                              quote(key), offset, source.size(), looks_truncated));
    }
    source.read(offset, std::as_writable_bytes(std::span(count_bytes)));
    std::uint64_t count = 0;
    for (int i = 7; i >= 0; --i) count = (count << 8) | count_bytes[static_cast<std::size_t>(i)];
    auto nbytes = mul(count, size_it->second);
    auto data = add(offset, 8);
    if (!nbytes || !data || !source.contains(*data, *nbytes)) {
      throw Error(
          ExitCode::bad_checkpoint,
          fmt::format("storage {} declares {} elements of {} bytes at byte {}, past the "
                      "end of the file ({} bytes): {}",
                      quote(key), count, size_it->second, offset, source.size(), looks_truncated));
    }
    Storage s;
    s.key = key;
    s.file_offset = *data;
    s.nbytes = *nbytes;
    table.by_key.emplace(key, table.storages.size());
    table.storages.push_back(std::move(s));
    offset = *data + *nbytes;
  }
  return table;
}

std::vector<std::string> legacy_key_list(const pickle::Graph& g) {
  auto root = g.root();
  if (root == pickle::no_node || (g.kind(root) != Kind::list && g.kind(root) != Kind::tuple)) {
    throw Error(ExitCode::bad_checkpoint,
                "the storage key list of the legacy stream is not a list");
  }
  std::vector<std::string> keys;
  for (auto item : g.items(root)) {
    if (g.kind(item) != Kind::string && g.kind(item) != Kind::bytes) {
      throw Error(ExitCode::bad_checkpoint, "a storage key of the legacy stream is not a string");
    }
    keys.push_back(g.text(item));
  }
  return keys;
}

// ---- validation --------------------------------------------------------------------------

Model finish(Format format, bool big_endian, std::string source_name, pickle::Graph& graph,
             Interpretation& in, StorageTable& table, const ReadLimits& limits) {
  bind_tensors(in.tensors, in.storage_refs, table);
  Model m;
  m.format = format;
  m.sources.push_back(std::move(source_name));
  Flattened flat = flatten(graph, in, limits);
  m.entries = std::move(flat.entries);
  m.root = flat.root;
  m.container_states = std::move(flat.container_states);
  m.tensors = used_tensors(m.entries, in.tensors);
  m.storages = used_storages(m.tensors, table.storages);
  for (Storage& s : m.storages) s.big_endian = big_endian;
  return m;
}

Model read_zip(const ByteSource& source, std::string name, const ReadLimits& limits) {
  ZipArchive zip(source, limits.zip);
  ZipLayout layout = find_zip_layout(zip);
  // torch.load hands an archive with a constants.pkl to torch.jit.load; one with code/ records
  // but no constants.pkl is a TorchScript archive that lost it (read_torchscript says so).
  if (zip.find(layout.prefix + "/constants.pkl") || has_code_records(zip, layout.prefix)) {
    return read_torchscript(source, zip, layout.prefix, std::move(name), limits);
  }
  bool big_endian = read_byteorder(source, zip, layout.prefix);
  pickle::ParseResult parsed = parse_record(source, *layout.data_pkl, limits.pickle);
  Interpretation in = interpret(parsed.graph, limits.max_dims);
  StorageTable table =
      zip_storages(source, zip, layout.prefix + "/data/", in, CompressedStorage::refuse);
  return finish(Format::zip, big_endian, std::move(name), parsed.graph, in, table, limits);
}

Model read_legacy(const ByteSource& source, std::string name, const ReadLimits& limits) {
  // The stream's pickles run to the end of the file: one cut short ends before its STOP.
  auto next = [&](std::uint64_t offset, const char* what) {
    try {
      return pickle::parse(source, offset, source.size() - offset, limits.pickle);
    } catch (const pickle::Truncated& e) {
      throw Error(e.code(), fmt::format("{}: {}", pickle_error_context(what, e), looks_truncated));
    } catch (const Error& e) {
      throw Error(e.code(), pickle_error_context(what, e));
    }
  };
  pickle::ParseResult magic;
  constexpr std::uint64_t magic_bytes = 64;  // its magic number's pickle takes 13 to 29
  try {
    magic = pickle::parse(source, 0, std::min(source.size(), magic_bytes), limits.pickle);
  } catch (const pickle::Truncated& e) {
    // A stream cut before its magic number ends: it starts as torch.save's (PROTO 2 or more).
    if (source.size() >= magic_bytes || source.read_string(0, 1) != "\x80") {
      throw Error(ExitCode::bad_checkpoint,
                  "not a PyTorch checkpoint: neither a zip nor a legacy torch.save stream");
    }
    throw Error(e.code(), fmt::format("legacy magic number: {}: {}", e.what(), looks_truncated));
  } catch (const Error&) {
    throw Error(ExitCode::bad_checkpoint,
                "not a PyTorch checkpoint: neither a zip nor a legacy torch.save stream");
  }
  if (!is_legacy_magic(magic.graph)) {
    throw Error(ExitCode::bad_checkpoint,
                "not a PyTorch checkpoint: a pickle, but not a torch.save stream (no magic "
                "number)");
  }
  auto protocol = next(magic.end_offset, "legacy protocol version");
  auto sys_info = next(protocol.end_offset, "legacy sys_info");
  auto main = next(sys_info.end_offset, "legacy main pickle");
  auto key_list = next(main.end_offset, "legacy storage key list");
  const auto& pg = protocol.graph;
  if (pg.root() == pickle::no_node || pg.kind(pg.root()) != Kind::integer ||
      pg.integer(pg.root()) != 1001) {
    throw Error(ExitCode::unsupported, "legacy stream with an unknown protocol version");
  }
  Interpretation in = interpret(main.graph, limits.max_dims);
  StorageTable table =
      legacy_storages(source, key_list.end_offset, legacy_key_list(key_list.graph), in);
  for (const auto& ref : in.storage_refs) {
    if (!table.by_key.contains(ref.key)) {
      // A tensor names a storage the stream does not contain.
      Storage s;
      s.key = ref.key;
      s.broken = fmt::format("storage {} is not in the file", quote(ref.key));
      table.by_key.emplace(ref.key, table.storages.size());
      table.storages.push_back(std::move(s));
    }
  }
  // The legacy stream always stores little-endian data (torch converts on big-endian hosts).
  return finish(Format::legacy, false, std::move(name), main.graph, in, table, limits);
}

}  // namespace

ZipPickle detail::read_zip_pickle(const ByteSource& source, const ReadLimits& limits) {
  if (!looks_like_zip(source)) {
    throw Error(ExitCode::bad_checkpoint, "not a torch.save zip (no local file header)");
  }
  ZipArchive zip(source, limits.zip);
  ZipLayout layout = find_zip_layout(zip);
  if (zip.find(layout.prefix + "/constants.pkl") || has_code_records(zip, layout.prefix)) {
    throw Error(ExitCode::unsupported, "a TorchScript archive, not a torch.save zip");
  }
  const bool big_endian = read_byteorder(source, zip, layout.prefix);
  pickle::ParseResult parsed = parse_record(source, *layout.data_pkl, limits.pickle);
  ZipPickle out{std::move(parsed.graph), {}, {}};
  out.interpretation = interpret(out.graph, limits.max_dims);
  StorageTable table = zip_storages(source, zip, layout.prefix + "/data/", out.interpretation,
                                    CompressedStorage::refuse);
  bind_tensors(out.interpretation.tensors, out.interpretation.storage_refs, table);
  out.storages = std::move(table.storages);
  for (Storage& s : out.storages) s.big_endian = big_endian;
  return out;
}

Model read_torch(const ByteSource& source, std::string source_name, const ReadLimits& limits) {
  // What the file is, when it is not torch.save output, is told only once both readers have
  // failed: a valid checkpoint's bytes may spell any magic (a key "mustard" at byte 257).
  try {
    if (looks_like_zip(source)) return read_zip(source, std::move(source_name), limits);
    return read_legacy(source, std::move(source_name), limits);
  } catch (const Error& failure) {
    refuse_other_formats(source, failure);
    throw;
  }
}

}  // namespace ckptfs
