// SPDX-License-Identifier: MIT
// A model's selected entries as torch.save would write them: in the structure given (nested as
// the source, or one flat OrderedDict: structure.hpp), over storage records that are the
// model's own storages, whole, so that tensors sharing a storage share it in the file and views
// keep their offset and strides.
//
//   TorchPack pack(model, selection, nested_structure(model, selection), "model", std::nullopt);
//   pack.write(model, sources, out);   // streaming: storages copied, never held
#pragma once

#include <ckptfs/format/torch/torch_writer.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/pack/output_file.hpp>
#include <ckptfs/pack/selection.hpp>
#include <ckptfs/pack/structure.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ckptfs {

// The bytes of one storage record of the packed file.
struct StoragePayload {
  enum class Way : std::uint8_t {
    storage,  // Model::storages[storage] whole: one range of its source
    tensor,   // Model::tensors[tensor]'s bytes as serve() gives them (converted, or gathered)
  };
  Way way = Way::storage;
  std::size_t storage = 0;
  std::size_t tensor = 0;
  std::optional<DType> convert_to;  // Way::tensor
  std::uint64_t nbytes = 0;
  DType dtype = DType::float32;  // of its elements as written
  // Way::storage: the bytes each element reverses together on the way (swap_unit() of the
  // dtype for a big-endian storage), 1 for none. Written records are all little-endian.
  std::size_t swap_unit = 1;
};

// The pickle and records of the packed file, made from the model's description alone (no byte
// of any storage is read).
//
// Each tensor is pickled as torch pickles it (torch_writer.hpp's TorchPickler), over a record
// holding its storage whole (its storage offset and strides kept, so that views stay views and
// tensors over one storage share one record), except:
//   - a tensor converted (`convert_to`: float16, bfloat16, float32, as serve() converts) has a
//     record of its own with its converted bytes, in C order;
//   - a tensor whose storage is no whole number of its elements (torch refuses to save that) has
//     a record of its own with its bytes in C order;
//   - a tensor without a storage (an empty one) has an empty record;
//   - tensors viewing one storage as different dtypes get a record each (torch refuses to save
//     one storage as two dtypes).
// The same tensor under two keys (tied weights saved as one object) is pickled once and got
// from the memo the second time, as torch writes it. Values are pickled as write_value() does.
// The zip's records are named "<prefix>/...", with a byteorder record, "little": a big-endian
// storage is written swapped (torch before 2.1 ignores the record and reads little-endian), so
// that sources of both byte orders, and converted tensors beside unconverted ones, pack as one.
class TorchPack {
 public:
  TorchPack(const Model& model, const Selection& selection, const Structure& structure,
            std::string prefix, std::optional<DType> convert_to);

  const TorchArchive& archive() const noexcept { return *archive_; }
  // The payload of storage record `i` of archive().storages().
  const StoragePayload& payload(std::size_t i) const;

  // Writes the whole file to `out`, front to back. A record that is a source file's range
  // whose CRC the source's zip directory gives (a zip checkpoint's storage, whole) is copied in
  // the kernel (OutputFile::copy); every other record goes through the output's buffer to have
  // its CRC computed. Throws what OutputFile and the sources throw.
  void write(const Model& model, Sources sources, OutputFile& out) const;

 private:
  std::vector<StoragePayload> payloads_;  // by storage id (TensorArgs::storage)
  std::optional<TorchArchive> archive_;
};

// The record prefix torch.save uses for a file: its name without directory and extension
// ("/data/model.pth" -> "model"), "archive" when that is empty.
std::string torch_prefix_of(const std::string& path);

}  // namespace ckptfs
