// SPDX-License-Identifier: MIT
// What the torch.save and TorchScript readers share (private to src/core/format): stored zip
// records, storages made of them, tensors bound to their storages and validated, and a model's
// tensors and storages cut down to those its entries use.
#pragma once

#include <ckptfs/base/hash.hpp>
#include <ckptfs/format/pickle/pickle_machine.hpp>
#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/format/torch/torch_interpreter.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace ckptfs::detail {

// a * b and a + b, or nullopt on uint64 overflow.
inline std::optional<std::uint64_t> mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<std::uint64_t> add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Storages by key; each persistent id names one.
struct StorageTable {
  std::vector<Storage> storages;
  TextMap<std::size_t> by_key;
};

// `entry`, or Error(unsupported) naming it when it is compressed or encrypted: ckptfs reads
// records by offset.
const ZipEntry& stored_or_refuse(const ZipEntry& entry);

// The `<prefix>/byteorder` record: true for "big", false for "little" or when it is absent.
// Throws Error(bad_checkpoint) for anything else, Error(unsupported) when it is compressed.
bool read_byteorder(const ByteSource& source, const ZipArchive& zip, const std::string& prefix);

// Runs the pickle of a stored record, once its bytes are checked against its CRC-32
// (check_record_crc(): a corrupt pickle is Error(bad_checkpoint)); errors name the record.
pickle::ParseResult parse_record(const ByteSource& source, const ZipEntry& record,
                                 const pickle::Limits& limits);

// What a storage whose record is compressed becomes: the whole file refused (torch.save zips),
// or that storage broken and the rest served (TorchScript archives).
enum class CompressedStorage : std::uint8_t { refuse, broken };

// One storage per key the pickle names, each the record `<directory><key>` ("archive/data/0"):
// broken when the record is missing (or compressed, under CompressedStorage::broken). Records
// whose local headers were deferred (remote sources) share one ZipLocator over `source`.
StorageTable zip_storages(const ByteSource& source, const ZipArchive& zip,
                          const std::string& directory, const Interpretation& in,
                          CompressedStorage compressed);

// Binds each tensor to its storage in `table` (Tensor::storage becomes an index into
// table.storages), and marks it broken when its storage is, or its view does not fit.
void bind_tensors(std::vector<Tensor>& tensors, const std::vector<StorageRef>& refs,
                  const StorageTable& table);

// Keeps only the tensors that entries use, in entry order, and renumbers them (the entries and
// the quantization parameters that point at tensors).
std::vector<Tensor> used_tensors(std::vector<Entry>& entries, std::vector<Tensor>& all);

// Keeps only the storages that tensors use, and renumbers them.
std::vector<Storage> used_storages(std::vector<Tensor>& tensors, std::vector<Storage>& all);

// A torch.save zip's pickle and storages, read but not flattened: what a reader that nests
// several of them needs (a PyTorch DCP checkpoint's items). interpretation.tensors are bound to
// `storages` (Tensor::storage indexes it), broken as read_torch() breaks them.
struct ZipPickle {
  pickle::Graph graph;
  Interpretation interpretation;
  std::vector<Storage> storages;  // in source 0, big-endian when the byteorder record says so
};

// Reads a torch.save zip (the zip format only: TorchScript and torch.package archives, legacy
// streams and compressed records are refused). Throws what read_torch() throws.
ZipPickle read_zip_pickle(const ByteSource& source, const ReadLimits& limits);

}  // namespace ckptfs::detail
