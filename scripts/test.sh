#!/usr/bin/env bash
# Builds what changed, then runs the whole test suite: unit tests, fixtures, inspect and real mounts.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
