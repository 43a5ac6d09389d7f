// SPDX-License-Identifier: MIT
// JSON descriptions of a model's entries: meta.json, `inspect --json` and index.json share them.
#pragma once

#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/read_buffer.hpp>
#include <ckptfs/view/served.hpp>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ckptfs {

// For each storage, the entries whose tensors use it (for meta.json's shared_with).
class SharingIndex {
 public:
  explicit SharingIndex(const Model& model);
  const std::vector<std::size_t>& entries_of_storage(std::size_t storage) const {
    return by_storage_[storage];
  }

 private:
  std::vector<std::vector<std::size_t>> by_storage_;
};

// At most this many keys are listed in shared_with, and no more once their bytes reach
// max_shared_with_bytes; shared_with_count has the full number.
inline constexpr std::size_t max_shared_with = 100;
inline constexpr std::size_t max_shared_with_bytes = 2048;

// At most this many pieces of an assembled tensor are listed in its "pieces"; "count" has them all.
inline constexpr std::size_t max_listed_pieces = 1024;

// Writes, into an open JSON object, the fields that describe tensor entry `entry_index` after its
// key (and key_path): dtype, stored_dtype, shape, stride, storage_offset, contiguous, nbytes,
// source (the file holding its bytes, as Model::sources names it; null without a storage: an
// assembled tensor's are its pieces'), file_offset (in that file), numpy, byteorder,
// requires_grad, quantization, ggml (a GGUF model's tensors and block-quantized ones only),
// Model::tensor_notes_key with the tensor's Model::tensor_notes ("onnx", "hdf5"), storage,
// shared_with, shared_with_count, pieces (null, or an assembled tensor's {"grid", "count", "list":
// [{"source", "file_offset", "nbytes", "offsets", "lengths"}...]}), broken. dtype, nbytes, numpy
// and byteorder describe the bytes served, which `convert_to` may convert or which may be
// dequantized (see serve()); file_offset is then null, as they are no range of the file. "ggml"
// describes the `data` file: {"type": "Q4_K", "type_id": 12, "block_elements", "block_bytes",
// "nbytes", "file_offset"}, and for block-quantized tensors "byteorder" (the blocks'),
// "dequantized" (whether tensor.npy serves their values) and "not_dequantized" (why not). A split
// directory copied out of the mount reads "ggml" back.
void write_tensor_fields(JsonWriter& json, const Model& model, std::size_t entry_index,
                         const SharingIndex& sharing,
                         std::optional<DType> convert_to = std::nullopt);

// Writes, into an open JSON object, what entry `entry_index` was in the file when the model's
// naming changed it (Model::origins: -o names=hf): "original_key" (the file's name of it) and
// "transform" (how its values were made from it; null when they are the file's). Nothing for a
// model without origins.
void write_origin(JsonWriter& json, const Model& model, std::size_t entry_index);

// Writes, into an open JSON object, "sources": [Model::sources...] and "metadata": {key: value}
// (Model::metadata: safetensors' __metadata__, a sharded set's index metadata; {} when none),
// then Model::json_metadata's values in it too, and their types in "metadata_types": {key: type}
// (a GGUF file's; only when there are some), and "notes": [Model::notes...] when there are some.
void write_sources_and_metadata(JsonWriter& json, const Model& model);

// Writes, into an open JSON object, the entry's "key_path" and "containers" (its container
// kinds by name), each when the entry has it.
void write_key_path(JsonWriter& json, const Entry& entry);

// Writes, into an open JSON object, "root": the name of Model::root's kind, or null.
void write_root(JsonWriter& json, const Model& model);

// A source that is a local file, as the mount opened it. index.json publishes it
// ("source_files"), and each tensor whose bytes served are one range of it as stored
// ("file_range"), so that a reader on the same machine can map that range of the file itself
// after checking that the file is still this one (the Python package's fast path).
struct LocalFile {
  std::string path;       // absolute, not resolved: the name the mount opened
  FileIdentity identity;  // at open: device, inode, size, mtime (what unchanged() compares)
};

// Per source, in Model::sources' order: the local file it is, or nullopt for any other source
// (a URL, a deflated .npz member inflated on read). A relative path is made absolute against
// the working directory as it is now: call it before a daemon changes it.
std::vector<std::optional<LocalFile>> local_files(Sources sources);

// Writes, into an open JSON object, "source_files": an array beside "sources", each element
// null or {"path", "device", "inode", "size", "mtime_ns"} of the local file that source is.
void write_source_files(JsonWriter& json, std::span<const std::optional<LocalFile>> files);

// Writes, into an open JSON object, "file_range": {"source", "offset", "byteorder"} when the
// tensor's bytes as `served` are exactly bytes [offset, offset + served.nbytes) of the local
// file `files[source]` (Way::range: one range of its storage, in C order, neither converted,
// swapped, dequantized nor assembled; `byteorder` is theirs), else null. Reads nothing but a
// record's local header whose reading was deferred (StorageLocator).
void write_file_range(JsonWriter& json, const Model& model, const ServedTensor& served,
                      std::span<const std::optional<LocalFile>> files);

// meta.json of a tensor entry: {"key", "key_path" and "containers" when the entry has them,
// ...write_tensor_fields}, indented, with a final newline.
std::string tensor_meta_json(const Model& model, std::size_t entry_index,
                             const SharingIndex& sharing,
                             std::optional<DType> convert_to = std::nullopt);

// `inspect --json`: {"format", "byteorder", "sources", "metadata", "root", "entries": [...]},
// tensors as {"key", "key_path"?, "containers"?, "kind": "tensor", ...write_tensor_fields},
// values as {"key", "key_path"?, "containers"?, "kind": "value", "value"}.
std::string model_json(const Model& model);

}  // namespace ckptfs
