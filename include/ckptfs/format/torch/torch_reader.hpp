// SPDX-License-Identifier: MIT
// torch.save checkpoints (the zip format of torch >= 1.6 and the legacy stream before it) read
// into a Model, without reading any tensor data.
#pragma once

#include <ckptfs/format/read_limits.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <string>

namespace ckptfs {

// Reads and validates a torch.save checkpoint; every storage is in source 0, named
// `source_name`. A zip with a constants.pkl (or code/ records) is a TorchScript archive, which
// it hands to read_torchscript() (torchscript_reader.hpp), as torch.load hands it to
// torch.jit.load. Throws Error with the exit code of the problem: bad_zip, bad_checkpoint
// (invalid pickle, not a torch checkpoint, inconsistent records) or unsupported (compressed
// record, torch.package, tar or preview formats). A tensor whose view does not fit its storage,
// or whose record is missing, is kept and marked broken.
Model read_torch(const ByteSource& source, std::string source_name, const ReadLimits& limits = {});

}  // namespace ckptfs
