// SPDX-License-Identifier: MIT
// Storages of zip records, tensors bound to them and validated against the bytes really there,
// and the model cut down to what its entries use: shared by the torch.save and TorchScript
// readers.
#include "torch_storages.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

namespace ckptfs::detail {

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

pickle::ParseResult parse_record(const ByteSource& source, const ZipEntry& record,
                                 const pickle::Limits& limits) {
  stored_or_refuse(record);
  check_record_crc(source, record);  // read whole: a corrupt pickle is refused, not parsed
  try {
    return pickle::parse(source, payload_offset(source, record), record.size, limits);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", quote(record.name), e.what()));
  }
}

StorageTable zip_storages(const ByteSource& source, const ZipArchive& zip,
                          const std::string& directory, const Interpretation& in,
                          CompressedStorage compressed) {
  StorageTable table;
  std::vector<ZipEntry> located_later;  // records whose local headers were deferred
  std::vector<std::size_t> deferred_storages;
  for (const auto& ref : in.storage_refs) {
    if (table.by_key.contains(ref.key)) continue;
    Storage s;
    s.key = ref.key;
    s.record = directory + ref.key;
    if (const ZipEntry* e = zip.find(s.record)) {
      if (!e->stored() && compressed == CompressedStorage::broken) {
        s.broken = fmt::format(
            "record {} is {} (method {}): ckptfs serves records by offset "
            "and needs them stored",
            quote(s.record), (e->flags & 1) ? "encrypted" : "compressed", e->method);
      } else {
        stored_or_refuse(*e);
        s.nbytes = e->size;
        s.record_crc32 = e->crc32;
        if (e->crc32 != 0 || e->size == 0) {  // torch >= 2.6 writes 0 when it computes none
          s.record_check = Storage::RecordCheck{e->crc32, 0, e->size, e->header_offset};
        }
        if (e->data_offset == 0) {  // deferred: located by the storages' ZipLocator on first use
          s.locator_index = static_cast<std::uint32_t>(located_later.size());
          located_later.push_back(*e);
          deferred_storages.push_back(table.storages.size());
        } else {
          s.file_offset = e->data_offset;
        }
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

void bind_tensors(std::vector<Tensor>& tensors, const std::vector<StorageRef>& refs,
                  const StorageTable& table) {
  for (auto& t : tensors) {
    if (t.broken.empty()) t.broken = size_problem(t);
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
        t.broken =
            fmt::format("its storage view runs past storage {} ({} bytes)", quote(s.key), s.nbytes);
        continue;
      }
      base = *begin;
      available = *length;
    } else {
      auto declared = mul(ref.declared_numel, ref.element_size());
      if (!declared || *declared != s.nbytes) {
        t.broken = fmt::format(
            "storage {} holds {} bytes but the pickle declares {} elements of "
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
    // Elements needed: offset + sum((size - 1) * stride) + 1, when there is any element (its
    // size was checked above: size_problem()).
    if (t.numel() == 0) continue;
    std::optional<std::uint64_t> last = static_cast<std::uint64_t>(t.storage_offset);
    for (std::size_t i = 0; i < t.shape.size() && last; ++i) {
      auto step =
          mul(static_cast<std::uint64_t>(t.shape[i] - 1), static_cast<std::uint64_t>(t.stride[i]));
      last = step ? add(*last, *step) : std::nullopt;
    }
    auto needed = last ? add(*last, 1) : std::nullopt;
    auto needed_bytes = needed ? mul(*needed, t.element_size()) : std::nullopt;
    if (!needed_bytes || *needed_bytes > available) {
      t.broken = needed_bytes ? fmt::format("its view needs {} bytes of storage {} but it has {}",
                                            *needed_bytes, quote(s.key), available)
                              : std::string("its view overflows 64-bit offsets");
    }
  }
}

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

}  // namespace ckptfs::detail
