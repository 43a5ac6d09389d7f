// SPDX-License-Identifier: MIT
// How every ckptfs command reports a failure: one line on stderr, and the exit code (the README
// and --help list them) that goes with it.
#pragma once

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <string_view>

namespace ckptfs::cli {

// Prints "ckptfs: MESSAGE" and returns `code`, the process's exit status.
inline int fail(ExitCode code, std::string_view message) {
  fmt::print(stderr, "ckptfs: {}\n", message);
  return static_cast<int>(code);
}

}  // namespace ckptfs::cli
