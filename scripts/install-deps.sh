#!/usr/bin/env bash
# Installs everything ckptfs needs to build, test and benchmark on Debian 12 (run as root, or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(
  g++ cmake ninja-build pkg-config
  libfuse3-dev fuse3 libfmt-dev nlohmann-json3-dev doctest-dev
  libcurl4-openssl-dev zlib1g-dev  # remote checkpoints (HTTP(S), S3); zlib: the disk cache's CRCs,
                                   # TorchScript's deflated code records, the CRC-32 benchmark
  python3-torch python3-numpy
  python3-h5py                     # test_hdf5: HDF5 and Keras-layout files written by h5py, its reference
  rsync fuse-zip
  nginx-light openssl curl         # the remote tests' HTTP(S) server, its throw-away CA, a reference client
  openssh-server openssh-client    # test_tree: the scp recipe, against an sshd of its own on 127.0.0.1
  dpkg-dev file man-db groff-base  # scripts/package.sh (dpkg-shlibdeps) and the man page tests
  clang-format clang-tidy          # scripts/lint.sh (ctest runs its clang-format check)
  time                             # scripts/bench: a command's own peak RSS (GNU time's %M)
  jq                               # test_readme: the README's "What you see" reads a meta.json with it
  debootstrap                      # scripts/interop-root: the interop tests' Debian sid root
)
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)  # the S3 test server
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  # Installing nginx or sshd must not start it as a service (the tests start their own on loopback):
  # invoke-rc.d asks policy-rc.d, and 101 means "not now".
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # openssh-server is there for the tests' own sshd on 127.0.0.1 only: installing it must not
  # make this machine an SSH server at the next boot either.
  if [[ " ${missing[*]} " == *" openssh-server "* ]] && command -v systemctl >/dev/null; then
    $SUDO systemctl disable ssh.service ssh.socket >/dev/null 2>&1 || true
  fi
fi
# The S3 API server of the remote tests (a fork of s3rver that checks SigV4 signatures), from
# the npm registry into tests/integration/s3rver/node_modules, at the versions of its lock file.
s3rver=tests/integration/s3rver
if [ ! -f "$s3rver/node_modules/@20minutes/s3rver/lib/cli.js" ] ||
   [ "$s3rver/package-lock.json" -nt "$s3rver/node_modules/.package-lock.json" ]; then
  (cd "$s3rver" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
