# SPDX-License-Identifier: MIT
"""A mount of an HDF5 file (or a .keras archive's model.weights.h5) against h5py's reading of the
same file. Runs with Debian 12's h5py (test_hdf5) and the interop root's (test_interop_hdf5).

    expected_keys(h5)   the keys ckptfs should list, in its order: every dataset reached from the
                        root by hard links, each group's names in natural order ("2" before
                        "10"), depth first, '/' written '.'
    check(h5, mnt, views, broken=(), torch_all=False)
                        every key: index.json's order; data (the dataset's bytes as stored, its
                        byte order), tensor.npy (numpy.load: its values, bit for bit), meta.json
                        (shape, byteorder, its "hdf5" path), model.safetensors (the values,
                        little-endian, parsed here), tensor.pt (torch.load; with torch 1.13,
                        torch_all=False, only the dtypes and byte order it loads); the datasets
                        of `broken` are broken tensors saying why

Returns {"tensors": how many compared, "problems": [one line each]}.
"""

import json
import re
import struct
from pathlib import Path

import h5py
import numpy as np


def _natural(name):
    parts = re.split(r"(\d+)", name)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts)), name.encode()


def expected_keys(h5):
    """[(key, h5py dataset path)] in ckptfs's order (a dataset linked twice: two keys; a group
    reached twice: read once)."""
    out = []
    with h5py.File(h5, "r") as f:
        seen = []  # the ObjectIDs of the groups read (they compare by object, not by handle)
        stack = [("", f)]
        while stack:
            path, obj = stack.pop()
            if isinstance(obj, h5py.Dataset):
                out.append((path.replace("/", "."), path))
                continue
            if any(obj.id == other for other in seen):
                continue
            seen.append(obj.id)
            names = [n for n in sorted(obj.keys(), key=_natural)
                     if isinstance(obj.get(n, getlink=True), h5py.HardLink)]
            for name in reversed(names):
                stack.append((f"{path}/{name}" if path else name, obj[name]))
    return out


def _safetensors(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    return {k: raw[base + v["data_offsets"][0]:base + v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


def check(h5, mnt, views, broken=(), torch_all=False):
    mnt, views = Path(mnt), Path(views)
    problems = []
    index = json.loads((views / "index.json").read_text())
    keys = expected_keys(h5)
    listed = [e["key"] for e in index["entries"]]
    if listed != [k for k, _ in keys]:
        return {"tensors": 0, "problems": [f"index.json lists {listed}, h5py's walk "
                                           f"{[k for k, _ in keys]}"]}
    try:
        exported = _safetensors(views / "model.safetensors")
    except OSError:  # EIO: an export would lack the broken tensors (index.json says so)
        if not broken:
            problems.append("model.safetensors cannot be read")
        exported = None
    try:
        import torch
    except ImportError:
        torch = None
    compared = 0
    with h5py.File(h5, "r") as f:
        for entry, (key, path) in zip(index["entries"], keys):
            ds = f[path]
            d = mnt / entry["path"]
            if ds.shape is None:  # a null dataspace: the value null
                if (d / "value.json").exists() and json.loads((d / "value.json").read_text()) \
                        is not None:
                    problems.append(f"{key}: a null dataset is not the value null")
                continue
            meta = json.loads((d / "meta.json").read_text())
            if path in broken:
                if not meta.get("broken"):
                    problems.append(f"{key}: served, but ckptfs should refuse it")
                continue
            if meta.get("broken"):
                problems.append(f"{key}: broken: {meta['broken']}")
                continue
            want = ds[()]
            want = np.asarray(want)
            bfloat16 = ds.attrs.get("dtype") in ("bfloat16", b"bfloat16") and \
                want.dtype.kind == "V"
            if meta["shape"] != list(want.shape):
                problems.append(f"{key}: shape {meta['shape']}, h5py {list(want.shape)}")
            # A dataset linked twice is one tensor: its path is the first link's.
            said = meta.get("hdf5", {}).get("path")
            if not isinstance(said, str) or said not in f or f[said].id != ds.id:
                problems.append(f"{key}: meta.json's hdf5.path is {meta.get('hdf5')}")
            big = want.dtype.byteorder == ">"
            if meta["byteorder"] != ("big" if big else "little"):
                problems.append(f"{key}: byteorder {meta['byteorder']}")
            stored = np.ascontiguousarray(want).tobytes()
            if (d / "data").read_bytes() != stored:
                problems.append(f"{key}: data is not the dataset's bytes as stored")
            native = want if bfloat16 else want.astype(want.dtype.newbyteorder("="))
            little = stored if bfloat16 else \
                np.ascontiguousarray(want.astype(want.dtype.newbyteorder("<"))).tobytes()
            if not bfloat16:
                got = np.load(d / "tensor.npy")
                if got.shape != want.shape or got.dtype.newbyteorder("=") != native.dtype or \
                        got.astype(got.dtype.newbyteorder("=")).tobytes() != native.tobytes():
                    problems.append(f"{key}: tensor.npy {got.dtype} {got.shape}, h5py "
                                    f"{want.dtype} {want.shape} (or other values)")
            if exported is None:
                pass
            elif key in exported:
                if exported[key] != little:
                    problems.append(f"{key}: model.safetensors differs from h5py's values")
            elif want.dtype.kind != "c":
                problems.append(f"{key}: not in model.safetensors")
            if torch is not None and (torch_all or (not big and (want.dtype.kind != "u" or
                                                                 want.dtype.itemsize == 1))):
                pt = torch.load(d / "tensor.pt")
                if bfloat16:
                    ok = pt.dtype == torch.bfloat16 and \
                        pt.view(torch.int16).numpy().tobytes() == stored
                else:
                    ok = pt.numpy().tobytes() == np.ascontiguousarray(native).tobytes()
                if not ok or tuple(pt.shape) != want.shape:
                    problems.append(f"{key}: tensor.pt differs from h5py's values")
            compared += 1
    return {"tensors": compared, "problems": problems}
