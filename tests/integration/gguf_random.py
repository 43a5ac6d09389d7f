# SPDX-License-Identifier: MIT
"""gguf_random: random blocks of every block type gguf-py dequantizes, and its values. Runs
INSIDE the sid interop root (through sid_root.run()).

usage: python3 gguf_random.py OUT_DIR TYPE...

Writes OUT_DIR/<TYPE>.blocks (raw bytes: every byte random, so that scales are NaN, infinite,
subnormal at times) and OUT_DIR/<TYPE>.values (gguf.quants.dequantize's float32 values). The
blocks come as 37 rows of 9 blocks: numpy's arrays of more than one block (see dequantize()'s
contract for the one-block case).
"""

import sys
import warnings

import numpy as np
import gguf

warnings.simplefilter("ignore")


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(5)
    for name in sys.argv[2:]:
        t = gguf.GGMLQuantizationType[name]
        _, size = gguf.GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(37, size * 9), dtype=np.uint8)
        raw.tofile(f"{out}/{name}.blocks")
        gguf.quants.dequantize(raw, t).astype(np.float32).tofile(f"{out}/{name}.values")


if __name__ == "__main__":
    main()
