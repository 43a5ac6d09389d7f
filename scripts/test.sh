#!/usr/bin/env bash
# Builds what changed, then runs the whole test suite: unit tests, fixtures, inspect and real mounts.
# With --sanitize first: the same suite built with ASan+UBSan in build-asan/. Other arguments go
# to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --sanitize ]; then
  # The same suite, mounts included, against an ASan+UBSan build of everything in build-asan/
  # (with libstdc++'s own bounds checks too).
  # The mount tests run ckptfs -f (no fork); any sanitizer report aborts the process (a test
  # then sees a signal, not an exit status) and leaks are reported at exit.
  shift
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  if [ ! -f build-asan/CMakeCache.txt ]; then
    cmake -S . -B build-asan "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCKPTFS_SANITIZE=address;undefined" -DCMAKE_CXX_FLAGS=-D_GLIBCXX_ASSERTIONS >/dev/null
  fi
  cmake --build build-asan -j"$(nproc)" >/dev/null
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  exec ctest --test-dir build-asan --output-on-failure -j"$(nproc)" "$@"
fi
scripts/build.sh >/dev/null
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
