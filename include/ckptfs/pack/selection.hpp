// SPDX-License-Identifier: MIT
// What `ckptfs pack` writes of a model: the entries its --keys patterns select that the output
// format can hold, each under a key of its own, and what is left out and why.
#pragma once

#include <ckptfs/format/pickle/pickle_writer.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/pack/key_glob.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

enum class PackFormat : std::uint8_t {
  torch,        // torch.save's zip format: a flat OrderedDict of the keys
  safetensors,  // tensors only
};

// The format a file name asks for, its suffix in any case: ".pth", ".pt", ".bin", ".ckpt"
// torch's, ".safetensors" safetensors; nullopt for any other name (or a bare suffix).
std::optional<PackFormat> pack_format_of(std::string_view path);

struct Selection {
  std::vector<std::size_t> entries;  // into Model::entries, in the model's order
  std::vector<std::string> keys;     // each one's key in the output: unique (see below)
  // For each value entry, the plain value it holds (entry_value(), format/pickle/
  // read_plain_value.hpp); null for tensors.
  std::vector<std::shared_ptr<const PlainValue>> values;
  struct LeftOut {
    std::size_t entry;
    std::string why;
  };
  std::vector<LeftOut> left_out;  // selected, but not in the output, in the model's order
};

// The entries of `model` that `globs` select (all when there is none), for `format`:
//   - broken tensors are refused: Error(bad_checkpoint) naming the first one's key and why it
//     is broken, and how many of the tensors selected are (torch.load could not read them
//     either; a mount counts them alike and fails their reads);
//   - a pattern that selects no key is Error(usage) naming it (a typo would pack nothing);
//   - left out, with why: for torch, values that are not plain (read_plain_value.hpp: objects
//     ckptfs never builds) and quantized tensors ckptfs does not write (quint4x2 and quint2x4,
//     which torch 2.x saves packed, 2 or 4 elements a byte, and which ckptfs does not serve
//     either; schemes other than per-tensor and per-channel affine, which torch does not save); for
//     safetensors, every value and every tensor safetensors_dtype() finds no dtype for (its dtype
//     converted by `convert_to`, as serve() does): the rule of the mount's export;
//   - for torch, the entries of a per-channel quantized tensor's scales and zero points
//     (KEY.q_per_channel_scales, KEY.q_per_channel_zero_points) are not written when KEY is: they
//     go inside it, as torch saves them.
// Keys: an entry's own key; a text an earlier written entry has already gets "%#2", "%#3"...
// (the smallest that is no other entry's key), as the mount names them (base/names.hpp: one rule
// for keys of equal text, the RFC layout's file names included).
Selection select_entries(const Model& model, std::span<const KeyGlob> globs, PackFormat format,
                         std::optional<DType> convert_to);

}  // namespace ckptfs
