// SPDX-License-Identifier: MIT
// What the DeepSpeed ZeRO reader's parts share (zero_reader.hpp and its private files, states
// and locating): its limits and how it opens a remote file. A header of its own, so that those
// parts need not include the reader they serve.
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace ckptfs {

struct ZeroLimits {
  std::uint64_t max_ranks = 65'536;                 // model or optimizer states files
  std::uint64_t max_directory_entries = 1'000'000;  // names in the tag directory
  std::uint64_t max_parameters = 4'000'000;         // names in param_shapes and frozen_param_shapes
  std::uint64_t max_groups = 1'000'000;             // param groups, in all
  std::uint64_t max_pieces = 16'000'000;  // pieces of all parameters (stage 3: params × ranks)
  std::uint64_t max_latest_bytes = 4096;  // the `latest` file
};

// Opens one location (a URL) as a source; throws Error when it cannot (io for "not found").
using ZeroOpener = std::function<std::unique_ptr<ByteSource>(const std::string& location)>;

}  // namespace ckptfs
