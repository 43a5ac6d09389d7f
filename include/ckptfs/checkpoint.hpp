// SPDX-License-Identifier: MIT
// The checkpoint model: every storage, tensor and flattened entry of a torch.save file, with
// every offset validated, built without reading any tensor data.
#pragma once

#include <ckptfs/byte_source.hpp>
#include <ckptfs/dtype.hpp>
#include <ckptfs/pickle_machine.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ckptfs {

enum class Format : std::uint8_t {
  zip,     // torch >= 1.6 default: data.pkl plus one stored record per storage
  legacy,  // torch < 1.6 or _use_new_zipfile_serialization=False: pickles then raw storages
};
std::string_view format_name(Format format);

// A run of bytes in the checkpoint holding one storage.
struct Storage {
  std::string key;                // the persistent id's key: "0", "94613254123456"
  std::string record;             // zip record name ("archive/data/0"); empty for legacy files
  std::uint64_t file_offset = 0;  // absolute offset of the storage's first byte
  std::uint64_t nbytes = 0;       // bytes of the storage in the file
  std::string broken;             // why it cannot be served (missing record); empty when fine
};

struct Tensor {
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;   // in elements, as stored
  std::int64_t storage_offset = 0;    // in elements, as stored
  bool requires_grad = false;
  std::optional<std::size_t> storage;  // index into Checkpoint::storages; none for meta tensors
  std::string broken;                  // why the bytes cannot be served; empty when fine

  std::uint64_t numel() const noexcept;   // valid when !broken (checked for overflow)
  std::uint64_t nbytes() const noexcept;  // numel × element size: the logical tensor in C order
  // True when the tensor's bytes in C order are one range of its storage (empty tensors too).
  bool contiguous() const noexcept;
  std::size_t element_size() const noexcept { return info(dtype).element_size; }
};

// One flattened item of the checkpoint (see flatten.hpp for the rule).
struct Entry {
  enum class Kind : std::uint8_t { tensor, value };
  std::string key;
  Kind kind = Kind::value;
  std::size_t tensor = 0;    // index into Checkpoint::tensors when kind == tensor
  std::string value_json;    // the value as compact JSON when kind == value
};

struct Checkpoint {
  Format format = Format::zip;
  bool big_endian = false;          // byte order of the storages (the zip `byteorder` record)
  std::string record_prefix;        // the zip's top folder ("archive", "model", ...); "" if legacy
  std::vector<Storage> storages;
  std::vector<Tensor> tensors;
  std::vector<Entry> entries;       // in checkpoint order; keys are unique

  // Absolute offset in the file of the tensor's first byte, when it is contiguous and whole.
  std::optional<std::uint64_t> file_offset(const Tensor& tensor) const;
};

struct ReadLimits {
  pickle::Limits pickle;
  std::uint64_t max_entries = 4'000'000;  // flattened entries (a DAG can multiply them)
  // Entries may outnumber the pickle's nodes only up to this: more means that objects shared
  // along many paths multiply them (a DAG of dicts: 2^n entries from n small dicts).
  std::uint64_t min_entries_per_graph = 65'536;
  std::size_t max_key_bytes = 4096;       // a flattened key longer than this is refused
  // All keys and value.json texts together: a shared value reached along many paths would
  // otherwise be copied into every entry.
  std::uint64_t max_flattened_bytes = 64ull << 20;
  std::size_t max_value_json = 1 << 20;   // a longer value.json is cut (valid JSON says so)
  std::size_t max_dims = 64;              // torch's own limit on tensor dimensions
};

// Reads and validates the whole checkpoint. Throws Error with the exit code of the problem:
// bad_zip, bad_checkpoint (invalid pickle, not a torch checkpoint, inconsistent records) or
// unsupported (compressed record, TorchScript, torch.package, tar or preview formats). A tensor
// whose view does not fit its storage, or whose record is missing, is kept and marked broken.
Checkpoint read_checkpoint(const ByteSource& source, const ReadLimits& limits = {});

}  // namespace ckptfs
