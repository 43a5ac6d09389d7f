// SPDX-License-Identifier: MIT
// The virtual model.safetensors of a mount, or the Hugging Face sharded set that stands for it:
// every servable tensor with a safetensors dtype, its bytes spliced from the sources.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

// safetensors' name of the dtype a tensor is served as (`served`: serve()'s dtype, after any
// -o dtype conversion), or "" when the format has none for it: "F32", "BF16"..., and "F4" for
// torch's float4_e2m1fn_x2, whose bytes each hold a pair of F4 (its header shape then has twice
// the last dimension; a 0-d one, half a byte, has none). The one rule of what a safetensors
// file of ckptfs holds: the mount's export and `ckptfs pack OUT.safetensors` both use it.
std::string_view safetensors_dtype(const Tensor& tensor, DType served);

// Why a safetensors file of ckptfs (the mount's export, `ckptfs pack OUT.safetensors`) cannot
// hold `tensor`, served converted to `convert_to` as serve() says: its values are not served (a
// block type ckptfs does not dequantize: values_not_served()), or the format has no dtype for it
// (safetensors_dtype()); "" when it can. What the format cannot hold is left out and said: this
// is the one text of why. (A broken tensor is no omission: the export fails instead of lacking
// it, Tree::refusal(), as pack refuses it.)
std::string safetensors_omission(const Model& model, const Tensor& tensor,
                                 std::optional<DType> convert_to);

class SafetensorsExport {
 public:
  struct Tensor {
    std::size_t entry;    // index into Model::entries
    std::string key;      // its key in the header: the entry's key, unique (see plan())
    std::uint64_t begin;  // offset of its bytes in its file's data (after the header)
    std::uint64_t nbytes;
  };
  struct File {
    std::string name;       // model.safetensors, or model-00001-of-00004.safetensors
    std::size_t first = 0;  // its tensors are tensors()[first, end)
    std::size_t end = 0;
    std::string header;  // the 8-byte length, then the JSON header padded with spaces to 8
    std::uint64_t size = 0;
  };

  // Lays out the export of `model`. Tensors are the servable entries whose dtype safetensors
  // has (F4 for torch's float4_e2m1fn_x2, its last dimension doubled; for_each_left_out() says
  // which are not and why; a broken one's absence makes the tree refuse the reads of every file
  // of the export, Tree::refusal()), in entry order, their
  // bytes little-endian whatever the checkpoint's (tied tensors each with their own bytes: the
  // format forbids overlaps); a tensor whose bytes would make its file larger than a file can
  // be is left out. Keys are the entries' keys, each byte that is not UTF-8 written U+FFFD (the
  // safetensors library refuses JSON's lone surrogates); a text several entries share is kept by
  // the first, the next get "%#2"... (the smallest number that is no other key), and so does a
  // tensor named "__metadata__", which is the format's own. __metadata__ holds the model's own
  // metadata (a safetensors source's) and {"format": "pt"} unless it says otherwise.
  // shard_size 0: one file, model.safetensors; else files of at most shard_size bytes of
  // tensors, split as transformers' save_pretrained splits (in order, a file closed when the
  // next tensor would pass shard_size; a larger tensor alone in its file), and
  // model.safetensors.index.json; a split into one file is model.safetensors without an index,
  // as save_pretrained writes it. `convert_to`: tensors are served converted, as serve() says.
  SafetensorsExport(const Model& model, std::uint64_t shard_size,
                    std::optional<DType> convert_to = std::nullopt);

  // Calls visit(entry, why, broken) for each tensor entry of `model` that the export of this
  // shard_size and convert_to leaves out, in entry order: a broken tensor (`broken`, why
  // "broken": reading the export fails, Tree::refusal(), as `ckptfs pack` refuses it), what the
  // format cannot hold (safetensors_omission()), and a tensor whose bytes would take its file
  // past the largest size a file can have (max_tensor_bytes: only hostile views of one element
  // repeated reach it). The constructor's own rule, without laying the export out. Throws what
  // visit throws.
  static void for_each_left_out(
      const Model& model, std::uint64_t shard_size, std::optional<DType> convert_to,
      const std::function<void(std::size_t entry, std::string_view why, bool broken)>& visit);

  // The size of the one-file export (shard_size 0) of `model`, without laying it out: one pass
  // that keeps nothing but a few bytes of JSON at a time (unless two tensors share a key).
  // `keys_unique`: the caller knows that no two entries share a key (the check is skipped).
  static std::uint64_t single_file_size(const Model& model,
                                        std::optional<DType> convert_to = std::nullopt,
                                        bool keys_unique = false);

  const std::vector<File>& files() const noexcept { return files_; }
  const std::vector<Tensor>& tensors() const noexcept { return tensors_; }
  // model.safetensors.index.json of a sharded export ({"metadata": {"total_size"}, "weight_map"});
  // empty for one file (shard_size 0, or a model that fits one shard).
  const std::string& index_json() const noexcept { return index_json_; }

  // Appends the pieces of [offset, offset + length) of file `file` (clipped to its size).
  void read(const Model& model, std::size_t file, std::uint64_t offset, std::size_t length,
            Sources sources, ReadBuffer& out) const;

 private:
  std::optional<DType> convert_to_;
  std::vector<Tensor> tensors_;
  std::vector<File> files_;
  std::string index_json_;
};

}  // namespace ckptfs
