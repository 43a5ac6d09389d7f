// SPDX-License-Identifier: MIT
// The model every format reader produces and every view is built on: storages (byte runs in one
// of the model's sources), tensors (typed, strided views of a storage) and flattened entries
// (keyed tensors and values), with every offset validated. It knows no file format and no FUSE.
#pragma once

#include <ckptfs/base/boxed_optional.hpp>
#include <ckptfs/model/dtype.hpp>
#include <ckptfs/model/plain_value.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs {

// What a model was read from. The names are what index.json and inspect call it.
enum class Format : std::uint8_t {
  zip,          // torch.save of torch >= 1.6: data.pkl plus one stored record per storage
  legacy,       // torch < 1.6 or _use_new_zipfile_serialization=False: pickles, then storages
  torchscript,  // torch.jit.save: data.pkl and constants.pkl over stored records
  safetensors,  // an 8-byte header length, a JSON header, then the tensors' bytes
  sharded,      // a Hugging Face sharded set: an *.index.json naming one shard per key
  split,        // key directories copied out of a mount: meta.json and data, or value.json
  rfc,          // the RFC's split layout: map.pt (the keys in order) and one <name>.pt per key
};
std::string_view format_name(Format format);

// Where storages start when their format learns it only on first use: a remote zip's records,
// whose local headers are read with their bytes instead of one request each at mount.
class StorageLocator {
 public:
  virtual ~StorageLocator() = default;
  // The absolute offset of record `index`'s first byte in its source, read and checked on the
  // first call, then remembered. Thread-safe. Throws Error: bad_zip when the record's header is
  // invalid or its bytes do not fit where the directory says, io when it cannot be read.
  virtual std::uint64_t data_offset(std::uint32_t index) const = 0;
};

// A run of bytes in one source holding one storage (torch) or one tensor's bytes (safetensors).
struct Storage {
  std::uint32_t source = 0;  // index into Model::sources
  std::string key;           // the persistent id's key ("0", "94613254123456"), or a name
  std::string record;        // zip record name ("archive/data/0"); empty outside zips
  // Absolute offset of the storage's first byte in its source, unless `locator` is set: then
  // locator->data_offset(locator_index) says it, on first use (see data_offset()).
  std::uint64_t file_offset = 0;
  std::shared_ptr<const StorageLocator> locator;
  std::uint32_t locator_index = 0;
  std::uint64_t nbytes = 0;  // bytes of the storage in the source
  bool big_endian = false;   // byte order of its elements (the zip's `byteorder` record)
  // The CRC-32 of the whole storage as its zip's central directory records it, unchecked (torch
  // never checks it, and writes 0 at times); none outside zips.
  std::optional<std::uint32_t> record_crc32;
  std::string broken;  // why it cannot be served (missing record); empty when fine
};

// The quantization parameters of a quantized tensor (torch's _rebuild_qtensor), without which
// its integer data cannot be dequantized.
struct Quantization {
  std::string scheme;           // "per_tensor_affine", "per_channel_affine", ...
  double scale = 0;             // per-tensor schemes
  std::int64_t zero_point = 0;  // per-tensor schemes
  std::int64_t axis = 0;        // per-channel schemes
  // Per-channel schemes: indices into Model::tensors of the scales (float64) and zero points
  // (int64) tensors; also entries of their own, under the keys the flattener gives them.
  std::optional<std::size_t> scales;
  std::optional<std::size_t> zero_points;
};

// The most bytes a tensor may have: every file made of its data (data, tensor.npy, tensor.pt,
// a header of a few KiB included) must have a size that fits off_t. A larger one (a stride-0
// view of 2^62 elements, say) is marked broken.
inline constexpr std::uint64_t max_tensor_bytes =
    (std::uint64_t{1} << 63) - (std::uint64_t{1} << 24);

struct Tensor {
  DType dtype = DType::float32;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;  // in elements, as stored
  std::int64_t storage_offset = 0;   // in elements, as stored
  bool requires_grad = false;
  std::optional<std::size_t> storage;        // index into Model::storages; none for meta tensors
  BoxedOptional<Quantization> quantization;  // few tensors have one: boxed (8 bytes, not 96)
  std::string broken;                        // why the bytes cannot be served; empty when fine

  std::uint64_t numel() const noexcept;   // valid when !broken (checked for overflow)
  std::uint64_t nbytes() const noexcept;  // numel × element size: the logical tensor in C order
  // True when the tensor's bytes in C order are one range of its storage (empty tensors too).
  bool contiguous() const noexcept;
  std::size_t element_size() const noexcept { return info(dtype).element_size; }
};

// One flattened item of the model (see format/pickle/flatten.hpp for torch's rule).
struct Entry {
  enum class Kind : std::uint8_t { tensor, value };
  std::string key;  // the flattened key as text; two entries may share it
  // The Python keys along the way, as compact JSON ([0, "exp_avg"]), when the text alone does
  // not say them (a key that is not a str, or a text another entry has too); else empty.
  std::string key_path;
  Kind kind = Kind::value;
  std::size_t tensor = 0;  // index into Model::tensors when kind == tensor
  std::string value_json;  // the value as compact JSON when kind == value (value_json.hpp)
  // The value exactly as the checkpoint held it, when it is plain data (plain_value.hpp) and
  // was read from a pickle: what pack and the RFC layout write. Null for a value that is not
  // plain, or that only value_json says (split copies, formats without pickles): value_json
  // then says it as exactly as JSON can (format/pickle/read_plain_value.hpp, plain_value()).
  std::shared_ptr<const PlainValue> value;
};

struct Model {
  Format format = Format::zip;
  // The files (or URLs) the bytes come from, as the user named them relative to what was
  // mounted; index = Storage::source. One for every format but sharded sets.
  std::vector<std::string> sources;
  std::vector<Storage> storages;
  std::vector<Tensor> tensors;
  std::vector<Entry> entries;  // in the model's order
  // String metadata of the file (safetensors' __metadata__), in the file's order.
  std::vector<std::pair<std::string, std::string>> metadata;

  // Where the tensor's first byte is in its storage, when the tensor is servable, its bytes in C
  // order are one range of its storage, and that range lies inside the storage. No I/O.
  std::optional<std::uint64_t> offset_in_storage(const Tensor& tensor) const;
  // The same as an absolute offset in the storage's source: it may ask the storage's locator,
  // and so read the source and throw what data_offset() throws.
  std::optional<std::uint64_t> file_offset(const Tensor& tensor) const;
  // "little" or "big" when every storage agrees, "mixed" otherwise ("little" without storages).
  std::string_view byteorder() const;
};

// The absolute offset of a storage's first byte in its source: file_offset, or what its locator
// reads (which may throw Error).
inline std::uint64_t data_offset(const Storage& storage) {
  return storage.locator ? storage.locator->data_offset(storage.locator_index)
                         : storage.file_offset;
}

// The byte order of a tensor's elements: its storage's.
inline bool big_endian(const Model& model, const Tensor& tensor) {
  return tensor.storage && model.storages[*tensor.storage].big_endian;
}

}  // namespace ckptfs
