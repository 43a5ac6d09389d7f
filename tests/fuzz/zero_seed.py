#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""zero_seed.py CHECKPOINT_DIR OUT: a DeepSpeed ZeRO checkpoint directory (its `latest` and the
files of its tag directory) packed as one input of the fuzz target fuzz_zero: records of
[1 byte name length][name][4 bytes little-endian size][bytes]. How tests/fuzz/corpus/zero/ was
made from the interop fixtures (tests/interop/root/zero_fixtures.py). Standard library only."""

import sys
from pathlib import Path


def main():
    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    records = []
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.name != "zero_to_fp32.py":
            name = str(f.relative_to(root)).encode()
            data = f.read_bytes()
            records.append(bytes([len(name)]) + name + len(data).to_bytes(4, "little") + data)
    out.write_bytes(b"".join(records))


if __name__ == "__main__":
    main()
