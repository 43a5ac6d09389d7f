// SPDX-License-Identifier: MIT
// DeepSpeed ZeRO checkpoints (stages 1, 2 and 3) read as the one model that DeepSpeed's
// zero_to_fp32 makes of them, every parameter assembled from its ranks' partitions on read.
//
//   run/                                       the directory save_checkpoint() was given
//     latest                                   "global_step99": the tag of the newest checkpoint
//     zero_to_fp32.py                          DeepSpeed's own consolidation script
//     global_step99/                           the tag directory
//       mp_rank_00_model_states.pt             stage 1/2: the module (bf16/fp16), param_shapes,
//                                              buffer_names, frozen params, shared params
//       zero_pp_rank_R_mp_rank_00_model_states.pt         stage 3: one per rank
//       [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt  one per rank: that rank's partition of
//                                              the flat fp32 master weights of each group
//
// Every file is torch.save's zip, read by the restricted pickle machine (nothing executed). The
// entries are, in this order, what zero_to_fp32's get_fp32_state_dict_from_zero_checkpoint()
// returns for the tag directory, key for key, dtype for dtype, byte for byte:
//   - the buffers (buffer_names, from the first model states file's module), as float32 (its
//     .float(): a bfloat16, float16 or integer buffer is converted on read);
//   - the frozen parameters (frozen_param_shapes, stage 2 and 3): stage 2 the first file's
//     frozen_param_fragments as saved; stage 3 each rank's fragment, concatenated and cut to
//     the parameter's size;
//   - the trainable parameters (param_shapes), float32, each assembled from pieces
//     (model/assembly.hpp): stage 1/2, group by group, the ranks' single_partition_of_fp32_groups
//     concatenated and cut at each parameter's elements; stage 3, each parameter's
//     ceil(numel / world size) elements in every rank's fp32_flat_groups, its padding left out;
//   - the shared (tied) parameters: shared_params' alias keys, the tensor of the key they name.
// Then, stage 1/2 only, every entry of the first model states file's `module` under the key
// "module." + its name: the module's own weights and buffers as saved (bfloat16 or float16),
// as mounting that file alone shows them. Stage 3's module holds empty placeholders: left out.
//
// What zero_to_fp32 refuses is an error (a first model states file that is not DeepSpeed's, an
// unknown stage) or, where the model states are sound, broken tensors saying why: without the
// optimizer states (a checkpoint copied without its *_optim_states.pt, ranks missing, a file
// that cannot be read, partitions shorter than param_shapes says) the trainable parameters are
// broken, the buffers and frozen parameters still served.
#pragma once

#include <ckptfs/format/directory_model.hpp>
#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/format/zero/zero_limits.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <string>

namespace ckptfs {

// Whether the local directory `directory` is a ZeRO checkpoint: a tag directory (it holds a
// regular *_model_states.pt file), or the directory above one (it holds a regular file `latest`
// whose text names a subdirectory holding one). Never throws.
bool looks_like_zero_directory(const std::string& directory);

// Reads the local ZeRO checkpoint `directory` (either kind above; with `latest`, the tag it
// names). Its files are found as zero_to_fp32 finds them: every *_model_states.pt and every
// *_optim_states.pt of the tag directory, in natural order (rank 10 after rank 9), opened
// beneath `directory` (source/directory.hpp: a link leading out of it is refused). Model::sources
// are the files' paths relative to `directory` ("global_step99/mp_rank_00_model_states.pt").
// Throws Error naming the file: io when the tag directory or its first model states file cannot
// be read; bad_checkpoint when `latest` names no directory beneath it, the first model states
// file is not a DeepSpeed one (no buffer_names, param_shapes...), a parameter shape is not a
// list of sizes, a name repeats; unsupported for an unknown stage, a legacy-format file, past
// `zero` limits; and what read_torch() throws for the first model states file.
DirectoryModel read_zero_directory(const std::string& directory, const ReadLimits& limits = {},
                                   const ZeroLimits& zero = {});

// Whether `location` (a URL) names a ZeRO checkpoint that read_zero_remote() reads: its path
// ends in '/' (a directory) or in "/latest". No I/O.
bool looks_like_zero_location(const std::string& location);

// Reads the ZeRO checkpoint at `location`, a URL: of the `latest` file (its tag directory
// beside it), or of a directory (ending in '/': its `latest` when it has one, else the
// directory itself is the tag directory). A server lists no directory: the files are found by
// DeepSpeed's names (sibling_location(), source/location.hpp): mp_rank_00_model_states.pt
// (stage 1/2) or zero_pp_rank_R_mp_rank_00_model_states.pt for each rank R (stage 3), and
// [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt for each rank R < the model states'
// dp_world_size. Model::sources are as read_zero_directory() names them. Throws what it
// throws, and what `open` throws for a file that must be there.
DirectoryModel read_zero_remote(const std::string& location, const ZeroOpener& open,
                                const ReadLimits& limits = {}, const ZeroLimits& zero = {});

}  // namespace ckptfs
