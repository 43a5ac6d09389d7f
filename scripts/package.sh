#!/usr/bin/env bash
# Builds the Debian package build/ckptfs_VERSION_ARCH.deb (CPack, packaging/cpack.cmake) and
# prints its path. Install it with: apt-get install ./build/ckptfs_*.deb
# Needs dpkg-dev (dpkg-shlibdeps) and file, which scripts/install-deps.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh >/dev/null
out=${1:-build}
if ! log=$(cpack --config build/CPackConfig.cmake -G DEB -B "$out" 2>&1); then
  echo "$log" >&2
  exit 1
fi
rm -rf "$out/_CPack_Packages"
ls -1 "$out"/ckptfs_*.deb
