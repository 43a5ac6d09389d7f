// SPDX-License-Identifier: MIT
// read_torch(): format detection, the zip and legacy layouts, and validation of every storage
// and tensor extent against the bytes that are really in the file.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/flatten.hpp>
#include <ckptfs/format/torch_interpreter.hpp>
#include <ckptfs/format/torch_reader.hpp>
#include <ckptfs/format/zip_reader.hpp>

#include <fmt/format.h>

#include <array>
#include <unordered_map>

namespace ckptfs {
namespace {

using pickle::Kind;

// a * b, or nullopt on uint64 overflow.
std::optional<std::uint64_t> mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<std::uint64_t> add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Storages by key; each persistent id names one.
struct StorageTable {
  std::vector<Storage> storages;
  std::unordered_map<std::string, std::size_t> by_key;
};

// Refuses the files that are not torch.save output, saying what they are.
void refuse_other_formats(const ByteSource& source) {
  if (source.size() == 0) throw Error(ExitCode::bad_checkpoint, "empty file");
  std::array<char, 8> head{};
  std::size_t n = std::min<std::uint64_t>(head.size(), source.size());
  source.read(0, std::as_writable_bytes(std::span(head.data(), n)));
  if (n == 8 && std::string_view(head.data(), 8) == "PYTORCH1") {
    throw Error(ExitCode::unsupported,
                "a checkpoint of the torch 1.0 preview release (PYTORCH1), which torch itself "
                "no longer reads");
  }
  if (source.size() >= 262 && source.read_string(257, 5) == "ustar") {
    throw Error(ExitCode::unsupported,
                "a tar-format checkpoint of torch 0.1.x, which ckptfs does not serve: load it with "
                "torch and save it again");
  }
}

std::string pickle_error_context(const std::string& what, const Error& e) {
  return fmt::format("{}: {}", what, e.what());
}

// ---- zip ---------------------------------------------------------------------------------

const ZipEntry& stored_or_refuse(const ZipEntry& entry) {
  if (!entry.stored()) {
    throw Error(ExitCode::unsupported,
                fmt::format("record {} is {} (method {}): ckptfs serves records by offset and "
                            "needs them stored, as torch.save writes them",
                            quote(entry.name), (entry.flags & 1) ? "encrypted" : "compressed",
                            entry.method));
  }
  return entry;
}

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
    if (e.name.ends_with("/constants.pkl") || e.name == "constants.pkl") {
      throw Error(ExitCode::unsupported,
                  "a TorchScript archive (torch.jit.save): it holds code, not a torch.save "
                  "checkpoint; load it with torch.jit.load");
    }
    if (e.name.ends_with(".data/extern_modules")) {
      throw Error(ExitCode::unsupported,
                  "a torch.package archive: it holds code, not a torch.save checkpoint");
    }
  }
  if (!layout.data_pkl) {
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

// Where a record's payload is: known, or read from its local header now (deferred headers).
std::uint64_t payload_offset(const ByteSource& source, const ZipEntry& entry) {
  return entry.data_offset != 0 ? entry.data_offset : locate_entry(source, entry);
}

bool read_byteorder(const ByteSource& source, const ZipArchive& zip, const std::string& prefix) {
  const ZipEntry* e = zip.find(prefix + "/byteorder");
  if (!e) return false;  // absent: little, as torch >= 2.2 assumes
  stored_or_refuse(*e);
  if (e->size > 16) throw Error(ExitCode::bad_checkpoint, "byteorder record is too long");
  std::string text = source.read_string(payload_offset(source, *e), e->size);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text == "little") return false;
  if (text == "big") return true;
  throw Error(ExitCode::bad_checkpoint,
              fmt::format("byteorder record says {}, not little or big", quote(text)));
}

// The storages the pickle refers to. With deferred local headers, each storage's offset is its
// record's, located by one ZipLocator on first use.
StorageTable zip_storages(const ByteSource& source, const ZipArchive& zip,
                          const std::string& prefix, const Interpretation& in, bool deferred) {
  StorageTable table;
  std::vector<ZipEntry> located_later;
  std::vector<std::size_t> deferred_storages;
  for (const auto& ref : in.storage_refs) {
    if (table.by_key.contains(ref.key)) continue;
    Storage s;
    s.key = ref.key;
    s.record = prefix + "/data/" + ref.key;
    if (const ZipEntry* e = zip.find(s.record)) {
      stored_or_refuse(*e);
      s.nbytes = e->size;
      s.record_crc32 = e->crc32;
      if (deferred) {
        s.locator_index = static_cast<std::uint32_t>(located_later.size());
        located_later.push_back(*e);
        deferred_storages.push_back(table.storages.size());
      } else {
        s.file_offset = e->data_offset;
      }
    } else {
      s.broken = fmt::format("record {} is missing from the zip", quote(s.record));
    }
    table.by_key.emplace(s.key, table.storages.size());
    table.storages.push_back(std::move(s));
  }
  if (!located_later.empty()) {
    auto locator = std::make_shared<const ZipLocator>(source, std::move(located_later));
    for (std::size_t i : deferred_storages) table.storages[i].locator = locator;
  }
  return table;
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
  std::unordered_map<std::string, std::size_t> element_size;
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
                  fmt::format("file is truncated: storage {} would start at byte {} but the file "
                              "has {}",
                              quote(key), offset, source.size()));
    }
    source.read(offset, std::as_writable_bytes(std::span(count_bytes)));
    std::uint64_t count = 0;
    for (int i = 7; i >= 0; --i) count = (count << 8) | count_bytes[static_cast<std::size_t>(i)];
    auto nbytes = mul(count, size_it->second);
    auto data = add(offset, 8);
    if (!nbytes || !data || !source.contains(*data, *nbytes)) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("file is truncated: storage {} declares {} elements of {} bytes at "
                              "byte {} but the file has {}",
                              quote(key), count, size_it->second, offset, source.size()));
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
    throw Error(ExitCode::bad_checkpoint, "the storage key list of the legacy stream is not a list");
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

// Binds each tensor to its storage, and marks it broken when its view does not fit.
void bind_tensors(std::vector<Tensor>& tensors, const std::vector<StorageRef>& refs,
                  const StorageTable& table) {
  for (auto& t : tensors) {
    if (!t.storage) {
      if (t.broken.empty() && t.numel() != 0) t.broken = "no storage";
      continue;
    }
    const StorageRef& ref = refs[*t.storage];
    std::size_t index = table.by_key.at(ref.key);
    const Storage& s = table.storages[index];
    t.storage = index;
    if (!t.broken.empty()) continue;
    if (!s.broken.empty()) {
      t.broken = s.broken;
      continue;
    }
    // The pickle's element count must match the record: torch refuses a mismatch, and trusting
    // it is how readers come to read out of bounds (CVE-2026-24747).
    std::uint64_t base = 0;
    std::uint64_t available = s.nbytes;
    if (ref.view) {
      // A legacy view: elements [offset, offset + size) of the root storage.
      auto begin = mul(ref.view->first, ref.element_size());
      auto length = mul(ref.view->second, ref.element_size());
      if (!begin || !length || *begin > s.nbytes || *length > s.nbytes - *begin) {
        t.broken = fmt::format("its storage view runs past storage {} ({} bytes)", quote(s.key),
                               s.nbytes);
        continue;
      }
      base = *begin;
      available = *length;
    } else {
      auto declared = mul(ref.declared_numel, ref.element_size());
      if (!declared || *declared != s.nbytes) {
        t.broken = fmt::format("storage {} holds {} bytes but the pickle declares {} elements of "
                               "{} bytes",
                               quote(s.key), s.nbytes, ref.declared_numel, ref.element_size());
        continue;
      }
    }
    if (base % t.element_size() != 0) {
      t.broken = "its storage view is not aligned to its element size";
      continue;
    }
    t.storage_offset += static_cast<std::int64_t>(base / t.element_size());
    std::optional<std::uint64_t> count = 1;
    for (auto d : t.shape) count = count ? mul(*count, static_cast<std::uint64_t>(d)) : count;
    auto bytes = count ? mul(*count, t.element_size()) : std::nullopt;
    if (!bytes || *bytes > max_tensor_bytes) {
      // Its data, tensor.npy and tensor.pt are files: their sizes must fit off_t.
      t.broken = fmt::format("its {} elements of {} bytes do not fit a file (at most {} bytes)",
                             count ? fmt::to_string(*count) : std::string("2^64 or more"),
                             t.element_size(), max_tensor_bytes);
      continue;
    }
    // Elements needed: offset + sum((size - 1) * stride) + 1, when there is any element.
    if (*count == 0) continue;
    std::optional<std::uint64_t> last = static_cast<std::uint64_t>(t.storage_offset);
    for (std::size_t i = 0; i < t.shape.size() && last; ++i) {
      auto step = mul(static_cast<std::uint64_t>(t.shape[i] - 1),
                      static_cast<std::uint64_t>(t.stride[i]));
      last = step ? add(*last, *step) : std::nullopt;
    }
    auto needed = last ? add(*last, 1) : std::nullopt;
    auto needed_bytes = needed ? mul(*needed, t.element_size()) : std::nullopt;
    if (!needed_bytes || *needed_bytes > available) {
      t.broken = needed_bytes
                     ? fmt::format("its view needs {} bytes of storage {} but it has {}",
                                   *needed_bytes, quote(s.key), available)
                     : std::string("its view overflows 64-bit offsets");
    }
  }
}

// Keeps only the tensors that entries use, in entry order, and renumbers them (the entries and
// the quantization parameters that point at tensors; flatten makes those entries too).
std::vector<Tensor> used_tensors(std::vector<Entry>& entries, std::vector<Tensor>& all) {
  std::vector<std::int64_t> renumbered(all.size(), -1);
  std::vector<Tensor> used;
  for (auto& e : entries) {
    if (e.kind != Entry::Kind::tensor) continue;
    auto& slot = renumbered[e.tensor];
    if (slot < 0) {
      slot = static_cast<std::int64_t>(used.size());
      used.push_back(std::move(all[e.tensor]));
    }
    e.tensor = static_cast<std::size_t>(slot);
  }
  for (Tensor& t : used) {
    if (!t.quantization) continue;
    for (auto* part : {&t.quantization->scales, &t.quantization->zero_points}) {
      if (*part && renumbered[**part] >= 0) {
        *part = static_cast<std::size_t>(renumbered[**part]);
      } else {
        part->reset();
      }
    }
  }
  return used;
}

// Keeps only the storages that tensors use, and renumbers them.
std::vector<Storage> used_storages(std::vector<Tensor>& tensors, std::vector<Storage>& all) {
  std::vector<std::int64_t> renumbered(all.size(), -1);
  std::vector<Storage> used;
  for (auto& t : tensors) {
    if (!t.storage) continue;
    auto& slot = renumbered[*t.storage];
    if (slot < 0) {
      slot = static_cast<std::int64_t>(used.size());
      used.push_back(std::move(all[*t.storage]));
    }
    t.storage = static_cast<std::size_t>(slot);
  }
  return used;
}

Model finish(Format format, bool big_endian, std::string source_name, pickle::Graph& graph,
             Interpretation& in, StorageTable& table, const ReadLimits& limits) {
  bind_tensors(in.tensors, in.storage_refs, table);
  Model m;
  m.format = format;
  m.sources.push_back(std::move(source_name));
  m.entries = flatten(graph, in, limits);
  m.tensors = used_tensors(m.entries, in.tensors);
  m.storages = used_storages(m.tensors, table.storages);
  for (Storage& s : m.storages) s.big_endian = big_endian;
  return m;
}

Model read_zip(const ByteSource& source, std::string name, const ReadLimits& limits) {
  ZipArchive zip(source, limits.zip);
  ZipLayout layout = find_zip_layout(zip);
  const ZipEntry& pkl = stored_or_refuse(*layout.data_pkl);
  bool big_endian = read_byteorder(source, zip, layout.prefix);
  pickle::ParseResult parsed;
  try {
    parsed = pickle::parse(source, payload_offset(source, pkl), pkl.size, limits.pickle);
  } catch (const Error& e) {
    throw Error(e.code(), pickle_error_context(quote(pkl.name), e));
  }
  Interpretation in = interpret(parsed.graph, limits.max_dims);
  StorageTable table =
      zip_storages(source, zip, layout.prefix, in, limits.zip.defer_local_headers);
  return finish(Format::zip, big_endian, std::move(name), parsed.graph, in, table, limits);
}

Model read_legacy(const ByteSource& source, std::string name, const ReadLimits& limits) {
  auto next = [&](std::uint64_t offset, const char* what) {
    try {
      return pickle::parse(source, offset, source.size() - offset, limits.pickle);
    } catch (const Error& e) {
      throw Error(e.code(), pickle_error_context(what, e));
    }
  };
  pickle::ParseResult magic;
  try {
    magic = pickle::parse(source, 0, std::min<std::uint64_t>(source.size(), 64), limits.pickle);
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

Model read_torch(const ByteSource& source, std::string source_name, const ReadLimits& limits) {
  refuse_other_formats(source);
  if (looks_like_zip(source)) return read_zip(source, std::move(source_name), limits);
  return read_legacy(source, std::move(source_name), limits);
}

}  // namespace ckptfs
