// SPDX-License-Identifier: MIT
// What the ZeRO reader takes from DeepSpeed's files (private to src/core/format/zero): a model
// states file's buffer names, param_shapes, frozen parameters and shared parameters, and an
// optimizer states file's stage, partition count and flat fp32 groups, read from their pickles
// as zero_to_fp32 reads them, with every tensor bound to its file's storages.
#pragma once

#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/format/zero/zero_limits.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include "../torch/torch_storages.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ckptfs::zero {

// A torch.save zip read but not flattened: its pickle, the tensors the pickle builds (bound to
// `storages`, Tensor::storage an index into them) and their storages (in source 0).
using TorchFile = detail::ZipPickle;

// Reads a torch.save zip: what detail::read_zip_pickle() reads, its remote records located on
// first use; a legacy-format file is refused (unsupported). Throws what it throws.
TorchFile read_torch_file(const ByteSource& source, const ReadLimits& limits);

// A name and a shape, as param_shapes and frozen_param_shapes give them.
struct NamedShape {
  std::string name;
  std::vector<std::int64_t> shape;
  std::uint64_t numel = 0;
};

// A name and the tensor its dict gives it (an index into TorchFile::interpretation.tensors, or
// none when the value is not a tensor).
struct NamedTensor {
  std::string name;
  std::optional<std::size_t> tensor;
};

// A model states file (*_model_states.pt), as zero_to_fp32's parse_model_states() reads it.
struct ModelStates {
  TorchFile file;
  std::vector<std::string> buffer_names;  // in their list's order, repeats dropped
  std::vector<NamedTensor> module;        // the module's state_dict, in its order
  pickle::NodeId module_node = pickle::no_node;
  pickle::NodeId module_key_node = pickle::no_node;            // the str "module" of the root dict
  std::vector<std::vector<NamedShape>> param_shapes;           // one list per param group
  std::optional<std::vector<NamedShape>> frozen_param_shapes;  // none: None or absent
  std::optional<std::vector<NamedTensor>> frozen_param_fragments;
  std::vector<std::pair<std::string, std::string>> shared_params;  // alias, the name it shares
  std::optional<std::int64_t> dp_world_size;
  bool bf16 = false;  // ds_config says bf16 (or bfloat16) enabled: the optimizer files' bf16_
};

// Reads a model states file. Throws Error(bad_checkpoint) when it is not one ("not a DeepSpeed
// model states file: no buffer_names"), when a shape is not a list of sizes, or past `zero`'s
// limits; and what read_torch_file() throws.
ModelStates read_model_states(const ByteSource& source, const ReadLimits& limits,
                              const ZeroLimits& zero);

// An optimizer states file (*_optim_states.pt), as zero_to_fp32's parse_optim_states() reads
// it: optimizer_state_dict's stage, partition count and flat fp32 groups (the base optimizer's
// own state, its moments, is not read).
struct OptimStates {
  TorchFile file;
  std::optional<std::int64_t> zero_stage;       // none: the file has none
  std::optional<std::int64_t> partition_count;  // the largest when a list
  // Stage 1/2 single_partition_of_fp32_groups, stage 3 fp32_flat_groups (the one the stage
  // names; stageless: whichever is there): per group a tensor (or none: not one).
  std::vector<std::optional<std::size_t>> groups;
};

// Reads an optimizer states file. Throws Error(bad_checkpoint) when it has no
// optimizer_state_dict, or its groups are not a list; and what read_torch_file() throws.
OptimStates read_optim_states(const ByteSource& source, const ReadLimits& limits,
                              const ZeroLimits& zero);

}  // namespace ckptfs::zero
