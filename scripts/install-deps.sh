#!/usr/bin/env bash
# Installs everything ckptfs needs to build, test and benchmark on Debian 12 (run as root, or with sudo).
set -euo pipefail
packages=(
  g++ cmake ninja-build pkg-config
  libfuse3-dev fuse3 libfmt-dev nlohmann-json3-dev doctest-dev
  zlib1g-dev  # only for the CRC-32 benchmark built with the tests (tests/tools/crc32_bench)
  python3-torch python3-numpy
  rsync fuse-zip
  dpkg-dev file man-db groff-base  # scripts/package.sh (dpkg-shlibdeps) and the man page tests
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
