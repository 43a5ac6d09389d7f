# SPDX-License-Identifier: MIT
"""Runs in the interop root: .npz files written by the root's numpy (2.x), the fixtures of
tests/interop/test_interop_npz.py.

    write(out_dir)  stored.npz (numpy.savez) and compressed.npz (numpy.savez_compressed) of every
                    dtype torch has, C and Fortran order, both byte orders, 0-d and empty arrays;
                    returns {"stored": path, "compressed": path, "keys": [...]}

Seeded, small, a second.
"""

import numpy as np


def arrays():
    rng = np.random.default_rng(24)
    out = {}
    for dtype in ("f2", "f4", "f8", "c8", "c16", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8",
                  "b1"):
        raw = rng.integers(0, 256, size=(5, 7) + (np.dtype(dtype).itemsize,), dtype=np.uint8)
        a = raw.view(np.dtype(dtype)).reshape(5, 7) if dtype != "b1" else raw[..., 0] % 2 == 1
        out[f"c_{dtype}"] = a
        out[f"f_{dtype}"] = np.asfortranarray(a.reshape(5, 7, 1).repeat(2, axis=2))
        if np.dtype(dtype).itemsize > 1:
            out[f"be_{dtype}"] = a.astype(np.dtype(dtype).newbyteorder(">"))
    out["scalar"] = np.array(3.5, dtype=np.float32)
    out["empty"] = np.zeros((0, 4), dtype=np.int16)
    return out


def write(out_dir):
    data = arrays()
    stored, compressed = f"{out_dir}/stored.npz", f"{out_dir}/compressed.npz"
    np.savez(stored, **data)
    np.savez_compressed(compressed, **data)
    return {"stored": stored, "compressed": compressed, "keys": list(data)}
