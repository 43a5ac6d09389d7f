// SPDX-License-Identifier: MIT
// TorchScript archives (torch.jit.save) read into a Model: the module's state_dict, its tensor
// constants and the rest of its tensors, without running or trusting any of its code.
#pragma once

#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/format/torch/torchscript_code.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <string>

namespace ckptfs {

// The part of the keys of the tensors state_dict() leaves out ("attributes.lstm_state").
inline constexpr const char* torchscript_attributes_part = "attributes";
// The part of the keys of constants.pkl's tensors ("constants.0").
inline constexpr const char* torchscript_constants_part = "constants";

// Reads the TorchScript archive whose records are `<prefix>/...`: `data.pkl` (the module: objects
// of `__torch__.*` classes whose BUILD state holds their attributes), `constants.pkl` (a tuple:
// the code's tensor constants), their storages `data/<key>` and `constants/<key>`, `byteorder`.
// The code records are only read to find which attributes are parameters and buffers (see
// read_class_declarations); nothing else in code/ is read, and none of it is run.
// Model::format is torchscript. The entries, all tensors, in this order:
//  1. What torch.jit.load(f).state_dict() lists, under its keys and in its order: for each
//     module from the root, its parameters, then its buffers (those holding a tensor, in the
//     order of its state), then the same for each attribute holding a module, keyed
//     `attribute.`, recursively. A module reached along two paths is listed under both; a
//     module inside itself once per path. A class whose declaration cannot be read is taken to
//     be a module when its state has a bool `training`, and its parameters and buffers to be the
//     tensor attributes before `training` (where torch.jit.script and trace put them).
//  2. The tensors of constants.pkl, "constants.N" (N: the position in its tuple, then the walk
//     of flatten() below an item), key path [{"__part__": "constants"}, N, ...].
//  3. Every other tensor of the module (attributes that are neither parameters, buffers nor
//     modules; the packed parameters of quantized modules; tensors of objects and lists), under
//     "attributes." then the module's attribute path then flatten()'s walk of the value (an
//     object's non-dict state as "__state__"), key path [{"__part__": "attributes"}, ...].
// Parts 2 and 3 are walked by flatten() with tensors only; each part has flatten's limits.
// A compressed or missing storage record makes its tensors broken, saying so. Throws Error:
// unsupported when data.pkl or constants.pkl is compressed or when the archive holds no tensor
// at all; bad_checkpoint for an invalid pickle, a constants.pkl that is not a tuple, or limits.
Model read_torchscript(const ByteSource& source, const ZipArchive& zip, const std::string& prefix,
                       std::string source_name, const ReadLimits& limits = {},
                       const CodeLimits& code_limits = {});

}  // namespace ckptfs
