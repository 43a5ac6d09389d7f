#!/usr/bin/env bash
# Mounts the committed sample checkpoint and shows what a user sees, then unmounts.
set -euo pipefail
cd "$(dirname "$0")/.."
sample=tests/data/sample.pth
mnt=$(mktemp -d)
trap 'mountpoint -q "$mnt" && fusermount3 -u "$mnt"; rmdir "$mnt"' EXIT
set -x
build/ckptfs inspect "$sample"
build/ckptfs "$sample" "$mnt"
ls -l "$mnt" "$mnt/encoder.weight" "$mnt/.ckptfs"
cat "$mnt/encoder.weight/meta.json"
/usr/bin/python3 -c "import numpy; print(numpy.load('$mnt/encoder.weight/tensor.npy'))"
fusermount3 -u "$mnt"
{ set +x; } 2>/dev/null
