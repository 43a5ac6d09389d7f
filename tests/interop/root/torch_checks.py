# SPDX-License-Identifier: MIT
"""Runs in the interop root: a ckptfs mount read by the root's torch (2.x) and numpy, compared
with torch.load of the checkpoint mounted.

    check_split(source, mnt, views, weights_only)  the default layout: every key's directory
    check_rfc(source, mnt, views, weights_only)    -o layout=rfc: map.pt and <name>.pt
    check_packed(source, mnt, keys)                quint4x2 and quint2x4 keys: their meta.json

Each returns {"entries", "tensors", "files", "problems": [...]}: what it compared, and one line
per difference (empty when the mount agrees with torch in every byte). The reference is
torch.load(source) (weights_only as given: torch's default True where the file allows it);
the keys are those of ckptfs's flattening rule (ckptfs_reference.flatten: the mount's
contract, applied to what torch 2.x loaded); the bytes of a tensor are its elements in C order,
as torch 2.x has them in memory (ckptfs_reference.tensor_bytes: a view of torch's memory).
"""

import json
import os

import numpy as np
import torch

import ckptfs_reference as ref

MAX_PROBLEMS = 40


def tensor_difference(got, want):
    """Why tensor `got` (read back from the mount) is not `want` (from torch.load), or None:
    dtype, shape, quantization parameters, every byte of its elements."""
    if not isinstance(got, torch.Tensor):
        return f"not a tensor: {type(got).__name__}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, torch.load has {want.dtype}"
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, torch.load has {tuple(want.shape)}"
    if want.is_quantized:
        if got.qscheme() != want.qscheme():
            return f"qscheme {got.qscheme()}, torch.load has {want.qscheme()}"
        if want.qscheme() == torch.per_tensor_affine:
            if (got.q_scale(), got.q_zero_point()) != (want.q_scale(), want.q_zero_point()):
                return (f"scale, zero point {got.q_scale()}, {got.q_zero_point()}; torch.load "
                        f"has {want.q_scale()}, {want.q_zero_point()}")
        else:
            for part in ("q_per_channel_scales", "q_per_channel_zero_points"):
                if not torch.equal(getattr(got, part)(), getattr(want, part)()):
                    return f"{part} differ"
            if got.q_per_channel_axis() != want.q_per_channel_axis():
                return "q_per_channel_axis differs"
    a, b = ref.tensor_bytes(got), ref.tensor_bytes(want)
    if a != b:
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        return f"bytes differ ({len(a)} vs {len(b)} bytes, first at byte {first})"
    return None


def read(path):
    with open(path, "rb") as f:
        return f.read()


def load_flat(source, weights_only):
    obj = torch.load(source, map_location="cpu", weights_only=weights_only)
    return ref.flatten(obj)


def plain(v):
    """A value with the distinctions that JSON does not make erased: tuples and sets as lists
    (a set sorted), dict keys as their text."""
    if isinstance(v, (list, tuple)):
        return [plain(i) for i in v]
    if isinstance(v, (set, frozenset)):
        return sorted((plain(i) for i in v), key=repr)
    if isinstance(v, dict):
        return {str(k): plain(i) for k, i in v.items()}
    return v


def same_types(a, b):
    """Whether two equal-looking values are of the same types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_types(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_types(a[k], b[k]) for k in a)
    return a == b


class Report:
    def __init__(self):
        self.problems = []
        self.value_types = []  # values equal but for JSON's erasures (see check_rfc)
        self.counts = {"entries": 0, "tensors": 0, "files": 0}

    def problem(self, text):
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(text)

    def result(self, **extra):
        return {**self.counts, "problems": self.problems, "value_types": self.value_types,
                **extra}


def check_torch_file(report, path, want, where):
    """A .pt file of the mount (tensor.pt, <name>.pt) loaded by torch's default torch.load
    (weights_only=True) and with mmap=True: each must give `want`."""
    for mmap in (False, True):
        how = "torch.load(mmap=True)" if mmap else "torch.load"
        try:
            got = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except Exception as e:  # noqa: BLE001: what torch refuses is the finding
            report.problem(f"{where}: {how} failed: {type(e).__name__}: {str(e)[:300]}")
            continue
        why = tensor_difference(got, want)
        if why:
            report.problem(f"{where}: {how}: {why}")
        report.counts["files"] += 1


def check_split_entry(report, e, v, d, dtypes):
    """One entry `e` of index.json, whose directory is `d`, against torch.load's object `v`."""
    key = e["key"]
    if not isinstance(v, torch.Tensor):
        if e["kind"] != "value":
            report.problem(f"{key}: kind {e['kind']}, torch.load has a value")
            return
        want = ref.simple_json(v)
        if want is not ref.NOT_JSON:
            got = json.loads(read(os.path.join(d, "value.json")))
            if not ref.json_equal(got, want):
                report.problem(f"{key}: value.json {got!r}, torch.load has {want!r}")
        return
    report.counts["tensors"] += 1
    dtypes.add(ref.dtype_name(v.dtype))
    meta = json.loads(read(os.path.join(d, "meta.json")))
    if meta.get("broken"):
        report.problem(f"{key} ({v.dtype}): broken in the mount: {meta['broken']}")
        return
    if meta["dtype"] != ref.dtype_name(v.dtype) or meta["shape"] != list(v.shape):
        report.problem(f"{key}: meta.json {meta['dtype']} {meta['shape']}, torch.load has "
                       f"{v.dtype} {list(v.shape)}")
        return
    want = ref.tensor_bytes(v)
    if read(os.path.join(d, "data")) != want:
        report.problem(f"{key} ({v.dtype}): data differs from torch.load's bytes")
    array = np.load(os.path.join(d, "tensor.npy"))
    # (a packed dtype's tensor.npy: its stored bytes in one dimension, ref.npy_shape)
    if array.shape != ref.npy_shape(ref.dtype_name(v.dtype), v.shape) or array.tobytes() != want:
        report.problem(f"{key} ({v.dtype}): np.load(tensor.npy) {array.dtype} {array.shape} "
                       f"differs")
    check_torch_file(report, os.path.join(d, "tensor.pt"), v, f"{key}/tensor.pt")


def check_split(source, mnt, views, weights_only=True):
    """The default layout: index.json's keys are the flattening's, in order; each tensor's
    `data`, `tensor.npy` (numpy's np.load) and `tensor.pt` (torch.load, weights_only and mmap)
    hold torch.load's tensor; each value's value.json its value."""
    report = Report()
    flat = load_flat(source, weights_only)
    index = json.loads(read(os.path.join(views, "index.json")))
    keys = [e["key"] for e in index["entries"]]
    if keys != [k for k, _ in flat]:
        report.problem(f"keys differ: mount {keys[:20]}..., torch {[k for k, _ in flat][:20]}...")
        return report.result()
    dtypes = set()
    for e, (key, v) in zip(index["entries"], flat):
        report.counts["entries"] += 1
        try:
            check_split_entry(report, e, v, os.path.join(mnt, e["path"]), dtypes)
        except Exception as x:  # noqa: BLE001: one entry's failure is one problem
            report.problem(f"{key}: {type(x).__name__}: {str(x)[:300]}")
    return report.result(dtypes=sorted(dtypes))


def check_rfc(source, mnt, views, weights_only=True):
    """-o layout=rfc: map.pt (torch.load, weights_only) lists the keys that have a file, in
    order; each key's file, found through index.json's path, loads (weights_only, and mmap=True
    for tensors) as torch.load's tensor or value. A value that is equal but for the types JSON
    erases (a tuple or set read back as a list, an int dict key as a str: ckptfs rebuilds values
    from their value.json) is listed in "value_types", not in "problems"."""
    report = Report()
    flat = load_flat(source, weights_only)
    index = json.loads(read(os.path.join(views, "index.json")))
    keys = torch.load(os.path.join(mnt, "map.pt"), weights_only=True)
    with_file = [e for e in index["entries"] if e["path"] is not None]
    if keys != [e["key"] for e in with_file]:
        report.problem(f"map.pt {keys[:20]}..., index.json's keys with a file "
                       f"{[e['key'] for e in with_file][:20]}...")
    by_key = dict(flat)
    for e in with_file:
        report.counts["entries"] += 1
        v = by_key.get(e["key"])
        path = os.path.join(mnt, e["path"])
        if isinstance(v, torch.Tensor):
            report.counts["tensors"] += 1
            check_torch_file(report, path, v, e["path"])
            continue
        got = torch.load(path, weights_only=True)
        report.counts["files"] += 1
        if plain(got) != plain(v):
            report.problem(f"{e['path']}: {got!r}, torch.load has {v!r}")
        elif not same_types(got, v):
            report.value_types.append(f"{e['path']}: {got!r}, torch.load has {v!r}")
    have_file = {e["key"] for e in with_file}
    for k, v in flat:
        if isinstance(v, torch.Tensor) and k not in have_file:
            report.problem(f"{k} ({v.dtype}): a tensor without a file")
    return report.result()


def check_packed(source, mnt, keys):
    """The tensors of packed dtypes (quint4x2, quint2x4) under `keys` of a mount of `source`:
    meta.json's nbytes and "packing" say torch's storage of them, and tensor.pt gives the very
    tensor torch.load gives: int_repr(), scale, zero point, shape, stride, dequantize()."""
    report = Report()
    want = dict(load_flat(source, True))
    index = json.loads(read(os.path.join(mnt, ".ckptfs", "index.json")))
    paths = {e["key"]: e["path"] for e in index["entries"]}
    for key in keys:
        v, d = want[key], os.path.join(mnt, paths[key])
        name = ref.dtype_name(v.dtype)
        k = ref.PACKED[name]
        report.counts["tensors"] += 1
        meta = json.loads(read(os.path.join(d, "meta.json")))
        numel = v.numel()
        packing = {"elements_per_byte": k, "bits": 8 // k, "order": "c",
                   "packed_nbytes": -(-numel // k),
                   "row_nbytes": -(-(v.shape[-1] if v.dim() else 1) // k),
                   "numpy_shape": list(ref.npy_shape(name, v.shape))}
        if meta.get("packing") != packing or meta["nbytes"] != ref.packed_nbytes(name, v.shape):
            report.problem(f"{key}: meta.json nbytes {meta['nbytes']}, packing "
                           f"{meta.get('packing')}; want {ref.packed_nbytes(name, v.shape)}, "
                           f"{packing}")
        got = torch.load(os.path.join(d, "tensor.pt"), weights_only=True)
        if (got.dtype, got.shape, got.stride(), got.q_scale(), got.q_zero_point()) != \
                (v.dtype, v.shape, v.stride(), v.q_scale(), v.q_zero_point()):
            report.problem(f"{key}: tensor.pt {got.dtype} {tuple(got.shape)} {got.stride()} "
                           f"{got.q_scale()} {got.q_zero_point()}, torch.load has {v.dtype} "
                           f"{tuple(v.shape)} {v.stride()} {v.q_scale()} {v.q_zero_point()}")
        elif not torch.equal(got.int_repr(), v.int_repr()) or \
                not torch.equal(got.dequantize(), v.dequantize()):
            report.problem(f"{key}: tensor.pt's int_repr() or dequantize() differ")
    return report.result()
