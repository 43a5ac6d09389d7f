// SPDX-License-Identifier: MIT
// `ckptfs pack SRC OUT`: its command line, its messages and exit codes (the work is the core's
// pack(), include/ckptfs/pack/pack.hpp).
#pragma once

#include <string>
#include <vector>

namespace ckptfs::cli {

// Runs `ckptfs pack` with its arguments (after "pack"); returns the exit code. Errors are one
// line on stderr naming SRC (or the file in it), or OUT for a failure of the output itself.
int run_pack(const std::vector<std::string>& args);

}  // namespace ckptfs::cli
