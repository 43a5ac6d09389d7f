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

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/torch/torch_reader.hpp>
#include <ckptfs/view/tree.hpp>

#include <optional>

// The limits the pickle and checkpoint targets read with: small enough that a fuzzed input
// reaches them, large enough for every seed.
inline ckptfs::ReadLimits fuzz_limits() {
  ckptfs::ReadLimits limits;
  limits.pickle = {.max_nodes = 1 << 20, .max_stack = 1 << 20, .max_memo = 1 << 20};
  limits.max_entries = 1 << 16;
  return limits;
}

// Whether the tree refuses file `ino` (Tree::refusal(): a broken tensor's file, an export that
// would lack one); when it does, a read of it must fail with Error(io) saying why: never a short
// or empty read.
inline bool refused_as_said(const ckptfs::Tree& tree, ckptfs::Tree::Ino ino,
                            ckptfs::Sources sources) {
  const auto node = tree.node(ino);
  const auto refusal = node ? tree.refusal(*node) : std::nullopt;
  if (!refusal) return false;
  ckptfs::ReadBuffer buffer;
  bool failed = false;
  try {
    tree.read(ino, 0, 1, sources, buffer);
  } catch (const ckptfs::Error& e) {
    FUZZ_CHECK(e.code() == ckptfs::ExitCode::io && refusal->why == e.what());
    failed = true;
  }
  FUZZ_CHECK(failed);
  return true;
}
