// SPDX-License-Identifier: MIT
// FUZZ_CHECK: an invariant of a fuzz target. A violation prints where and aborts, so that
// libFuzzer (and the replay runner under ctest) report the input as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition)                                                         \
  do {                                                                                \
    if (!(condition)) {                                                               \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__,       \
                   #condition);                                                       \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
