// SPDX-License-Identifier: MIT
// How every ckptfs command reports a failure: one line on stderr, and the exit code (the README
// and --help list them) that goes with it.
#pragma once

#include <ckptfs/base/error.hpp>
#include <ckptfs/model/model.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <string_view>

namespace ckptfs::cli {

// Prints "ckptfs: MESSAGE" and returns `code`, the process's exit status.
inline int fail(ExitCode code, std::string_view message) {
  fmt::print(stderr, "ckptfs: {}\n", message);
  return static_cast<int>(code);
}

// Prints each of the model's notes (how it was read: an architecture -o names=hf does not know)
// as "ckptfs: WHAT: NOTE", WHAT the checkpoint as shown.
inline void tell_notes(const Model& model, std::string_view what) {
  for (const std::string& note : model.notes) fmt::print(stderr, "ckptfs: {}: {}\n", what, note);
}

}  // namespace ckptfs::cli
