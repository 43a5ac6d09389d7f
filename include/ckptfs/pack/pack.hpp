// SPDX-License-Identifier: MIT
// `ckptfs pack`: a model (anything open_model() reads, split and RFC directories too) written
// back as one file, torch's zip format or safetensors, streaming: memory stays bounded whatever
// the size of the tensors (their bytes go from source to output by copy_file_range, or through
// one buffer of OutputFile::buffer_bytes), and the file gets its name only once complete.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/pack/output_file.hpp>
#include <ckptfs/pack/selection.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ckptfs {

// How far a pack is, as it writes: bytes of the file and tensors whose bytes are all written.
struct PackProgress {
  std::uint64_t bytes = 0;        // written so far
  std::uint64_t total_bytes = 0;  // of the whole file
  std::size_t tensors = 0;        // whose bytes are all written
  std::size_t total_tensors = 0;
};

struct PackOptions {
  std::string output;                   // OUT: its suffix picks the format (pack_format_of())
  std::vector<std::string> keys;        // --keys patterns (key_glob.hpp); none: every entry
  std::optional<DType> dtype;           // --dtype: floating tensors converted as serve() does
  Overwrite overwrite = Overwrite::no;  // --force
  // Called as the file is written (OutputFile::watch(): at every write, at least every 64 MiB),
  // once before the first byte and once when every byte is written; on pack()'s thread.
  std::function<void(const PackProgress&)> progress = nullptr;  // none: no progress
  // --flat: a .pth holds one OrderedDict of the flattened keys, not the source's nesting.
  bool flat = false;
};

struct PackResult {
  PackFormat format = PackFormat::torch;
  std::size_t tensors = 0;  // entries written
  std::size_t values = 0;
  std::uint64_t bytes = 0;                                    // of the file
  std::vector<std::pair<std::string, std::string>> left_out;  // (key, why), in model order
  // (key, key written), in model order: entries written under another key. Keys an earlier
  // entry has (the int 0 and the str "0") get "<key>%#<n>" (base/names.hpp's rule for keys of
  // equal text); in safetensors also keys that are not UTF-8 (U+FFFD for each byte that is not)
  // and a tensor named __metadata__ (the format's own name), as the mount's export writes them.
  std::vector<std::pair<std::string, std::string>> renamed;
  // (where, why) of what a nested .pth holds under flattened keys (Structure::flattened).
  std::vector<std::pair<std::string, std::string>> flattened;
};

// Writes `model`'s entries (select_entries()) to options.output:
//   torch:       TorchPack (torch_pack.hpp): what torch.save writes of the source's nesting
//                (nested_structure(), structure.hpp; with options.flat an OrderedDict of the
//                keys), shared storages shared, views kept, values as plain Python values, a
//                byteorder record; a key of equal text in one container renamed "%#<n>";
//   safetensors: SafetensorsExport's layout (view/safetensors_export.hpp), the mount's
//                model.safetensors: {"format": "pt"} in __metadata__ (the model's own metadata
//                kept), each tensor its own contiguous bytes (tied ones too), in the model's
//                order, little-endian as the format is (a big-endian checkpoint's swapped).
// Every zip record (and inflated .npz member) the written tensors' bytes come from is checked
// against its CRC-32, whole, before the output gets its name: a corrupt one is
// Error(bad_checkpoint) naming it, and no output (ByteSource::verify()).
// `sources` holds the model's bytes (OpenedModel::sources()). Throws Error: usage for a name
// without a known suffix ("OUT must end in .pth, .pt, .bin, .ckpt or .safetensors") or an existing
// file without Overwrite::yes, and what select_entries(), TorchPack, OutputFile and the sources
// throw; the output then never appears under its name.
PackResult pack(const Model& model, Sources sources, const PackOptions& options);

}  // namespace ckptfs
