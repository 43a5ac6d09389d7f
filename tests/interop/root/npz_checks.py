# SPDX-License-Identifier: MIT
"""Runs in the interop root: a mount of an .npz file against the root's numpy.load (2.x), torch
(tensor.pt) and safetensors (the mount's model.safetensors).

    check(npz, mnt, views)  every key of numpy.load(npz), in its order: the mount's tensor.npy
                            (numpy.load: dtype, byte order and values), data (the array's bytes
                            in C order), tensor.pt (torch.load, weights_only: the values) and
                            model.safetensors (safe_open: the values, little-endian)

Returns {"tensors", "problems": [one line each]}.
"""

import json
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open


def check(npz, mnt, views):
    mnt, views = Path(mnt), Path(views)
    problems = []
    index = json.loads((views / "index.json").read_text())
    with np.load(npz, allow_pickle=False) as z:
        if [e["key"] for e in index["entries"]] != z.files:
            return {"tensors": 0, "problems": ["index.json's keys are not numpy.load's"]}
        with safe_open(views / "model.safetensors", framework="pt") as st:
            exported = set(st.keys())
            for entry in index["entries"]:
                key, d = entry["key"], mnt / entry["path"]
                want = z[key]
                c_order = np.ascontiguousarray(want)
                native = c_order.astype(c_order.dtype.newbyteorder("="))
                got = np.load(d / "tensor.npy")
                if got.dtype != want.dtype or got.shape != want.shape or \
                        got.tobytes() != c_order.tobytes():
                    problems.append(f"{key}: tensor.npy {got.dtype} {got.shape}, want "
                                    f"{want.dtype} {want.shape} (or other bytes)")
                if (d / "data").read_bytes() != c_order.tobytes():
                    problems.append(f"{key}: data is not the array's bytes in C order")
                pt = torch.load(d / "tensor.pt", weights_only=True)
                if pt.numpy().tobytes() != native.tobytes() or tuple(pt.shape) != want.shape:
                    problems.append(f"{key}: tensor.pt differs from the array")
                if want.dtype.kind == "c" and want.dtype.itemsize == 16:
                    if key in exported:  # safetensors has no complex128
                        problems.append(f"{key}: complex128 in model.safetensors")
                elif key not in exported:
                    problems.append(f"{key}: not in model.safetensors")
                elif st.get_tensor(key).numpy().tobytes() != native.astype(
                        native.dtype.newbyteorder("<")).tobytes():
                    problems.append(f"{key}: model.safetensors differs from the array")
    return {"tensors": len(index["entries"]), "problems": problems}


def check_packed(npz, pth):
    """`ckptfs pack NPZ PTH`'s file read by torch.load (weights_only): every key of numpy.load,
    in order, the same values (big-endian arrays of uint16-64 too, which torch never swaps in a
    big-endian file: pack writes those files little-endian)."""
    problems = []
    packed = torch.load(pth, weights_only=True)
    with np.load(npz, allow_pickle=False) as z:
        if list(packed) != z.files:
            return {"tensors": 0, "problems": ["the packed keys are not numpy.load's"]}
        for key in z.files:
            want = z[key]  # (np.ascontiguousarray would make a 0-d array 1-d)
            native = want.astype(want.dtype.newbyteorder("="), order="C")
            got = packed[key]
            if got.numpy().tobytes() != native.tobytes() or tuple(got.shape) != want.shape:
                problems.append(f"{key}: the packed tensor differs from the array")
    return {"tensors": len(packed), "problems": problems}
