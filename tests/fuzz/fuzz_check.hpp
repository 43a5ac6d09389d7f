// SPDX-License-Identifier: MIT
// FUZZ_CHECK: an invariant of a fuzz target. A violation prints where and aborts, so that
// libFuzzer (and the replay runner under ctest) report the input as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                                \
  do {                                                                                       \
    if (!(condition)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#include <ckptfs/format/torch/torch_reader.hpp>

// The limits the pickle and checkpoint targets read with: small enough that a fuzzed input
// reaches them, large enough for every seed.
inline ckptfs::ReadLimits fuzz_limits() {
  ckptfs::ReadLimits limits;
  limits.pickle = {.max_nodes = 1 << 20, .max_stack = 1 << 20, .max_memo = 1 << 20};
  limits.max_entries = 1 << 16;
  return limits;
}
