# SPDX-License-Identifier: MIT
"""Runs in the interop root: a mount's safetensors files read by the root's safetensors (0.8)
and what a mount of files safetensors and transformers wrote serves, against those libraries'
own reading.

    check_export(source, views, dtype=None)     views/model.safetensors: safe_open, load_file
    check_shards(source, views, dtype=None)     views/model.safetensors.index.json and its shards
    check_mount_of(source, mnt, views)          a mount of a safetensors file or sharded set

The reference of the first two is torch.load of a torch checkpoint (the tensors of the dtypes
safetensors has, converted by torch's Tensor.to when `dtype` names -o dtype's target); of the
third, safe_open of the files mounted. Each returns {"tensors", "problems": [...]}.
"""

import json
import os

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import ckptfs_reference as ref
from torch_checks import MAX_PROBLEMS, Report, check_torch_file, read, tensor_difference

# The torch dtypes that have a safetensors name (the format's dtypes torch has): what ckptfs's
# export holds. float4_e2m1fn_x2 but 0-d (half a byte, which the format cannot hold).
SAFETENSORS_DTYPES = {
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint64, torch.uint32, torch.uint16, torch.uint8, torch.bool,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu, torch.float4_e2m1fn_x2, torch.complex64,
}
FLOATING = {torch.float16, torch.bfloat16, torch.float32, torch.float64}


def expected_from_torch(source, dtype=None, weights_only=True):
    """{key: tensor} of what an export of a mount of torch checkpoint `source` holds, in the
    mount's order: torch.load's tensors of the dtypes safetensors has (converted to `dtype`, a
    torch dtype name, when floating)."""
    target = getattr(torch, dtype) if dtype else None
    obj = torch.load(source, map_location="cpu", weights_only=weights_only)
    out = {}
    for key, v in ref.flatten(obj):
        if not isinstance(v, torch.Tensor) or v.is_quantized or v.dtype not in SAFETENSORS_DTYPES:
            continue
        if v.dtype == torch.float4_e2m1fn_x2 and v.dim() == 0:
            continue
        out[key] = v.to(target) if target is not None and v.dtype in FLOATING else v
    return out


def compare(report, got, want, where):
    """Tensors `got` ({key: tensor}, read by the library) against `want`: the same keys, each
    the same tensor."""
    if sorted(got) != sorted(want):
        report.problem(f"{where}: keys {sorted(set(got) ^ set(want))[:20]} in one only")
    for key in want:
        if key in got:
            report.counts["tensors"] += 1
            why = tensor_difference(got[key], want[key])
            if why:
                report.problem(f"{where}: {key}: {why}")


def read_file(path):
    """{key: tensor} of a safetensors file by safe_open (framework "pt", get_tensor each key),
    and its __metadata__."""
    with safe_open(path, framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


def check_export(source, views, dtype=None, weights_only=True):
    """views/model.safetensors of a mount of torch checkpoint `source` (-o dtype=`dtype`), read
    with safe_open and with load_file, against torch.load's tensors."""
    report = Report()
    want = expected_from_torch(source, dtype, weights_only)
    path = os.path.join(views, "model.safetensors")
    got, metadata = read_file(path)
    compare(report, got, want, "safe_open(model.safetensors)")
    if (metadata or {}).get("format") != "pt":
        report.problem(f"__metadata__ {metadata}: no format pt (transformers asks for it)")
    compare(report, load_file(path), want, "load_file(model.safetensors)")
    return report.result()


def read_set(index_path):
    """{key: tensor} of a sharded set through its index (each key from the shard the weight map
    names, by safe_open), the index, and the shards' metadata."""
    index = json.loads(read(index_path))
    directory = os.path.dirname(index_path)
    out, metadata = {}, {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors, metadata[shard] = read_file(os.path.join(directory, shard))
        for key, name in index["weight_map"].items():
            if name == shard and key in tensors:
                out[key] = tensors[key]
    return out, index, metadata


def check_shards(source, views, dtype=None, weights_only=True):
    """The sharded set of a mount with -o shard_size (and -o dtype=`dtype`): its index and every
    shard, read with safe_open and load_file, against torch.load's tensors; total_size the sum
    of the tensors' bytes; every shard holding exactly what the weight map puts in it."""
    report = Report()
    want = expected_from_torch(source, dtype, weights_only)
    index_path = os.path.join(views, "model.safetensors.index.json")
    got, index, _ = read_set(index_path)
    compare(report, got, want, "the shards")
    total = sum(t.nbytes for t in want.values())
    if index["metadata"].get("total_size") != total:
        report.problem(f"total_size {index['metadata'].get('total_size')}, the tensors' bytes "
                       f"{total}")
    shards = sorted(set(index["weight_map"].values()))
    for shard in shards:
        tensors = load_file(os.path.join(views, shard))
        listed = {k for k, v in index["weight_map"].items() if v == shard}
        if set(tensors) != listed:
            report.problem(f"{shard}: holds {sorted(set(tensors) ^ listed)[:10]} against its "
                           f"weight map")
    return report.result(shards=len(shards))


def reference_of(source):
    """{key: tensor} and metadata of the safetensors file or sharded set (a directory holding an
    index, or the index) `source`, as the library reads it."""
    if os.path.isdir(source):
        indexes = [n for n in os.listdir(source) if n.endswith(".safetensors.index.json")]
        if not indexes:
            return read_file(os.path.join(source, "model.safetensors"))
        source = os.path.join(source, indexes[0])
    if source.endswith(".json"):
        tensors, index, _ = read_set(source)
        return tensors, {k: v for k, v in index.get("metadata", {}).items()
                         if isinstance(v, str)}
    return read_file(source)


def check_mount_of(source, mnt, views):
    """A mount of safetensors file or sharded set `source` (written by safetensors or
    transformers): each key's data, np.load(tensor.npy) and tensor.pt (torch.load, weights_only
    and mmap) hold what safe_open gives for it; the mount's own model.safetensors, read by
    safe_open, gives the same tensors and keeps the source's metadata."""
    report = Report()
    want, metadata = reference_of(source)
    index = json.loads(read(os.path.join(views, "index.json")))
    entries = {e["key"]: e for e in index["entries"]}
    if sorted(entries) != sorted(want):
        report.problem(f"keys {sorted(set(entries) ^ set(want))[:20]} in one only")
    for key, t in want.items():
        e = entries.get(key)
        if e is None:
            continue
        report.counts["tensors"] += 1
        d = os.path.join(mnt, e["path"])
        try:
            raw = ref.tensor_bytes(t)
            if read(os.path.join(d, "data")) != raw:
                report.problem(f"{key} ({t.dtype}): data differs from safe_open's bytes")
            array = np.load(os.path.join(d, "tensor.npy"))
            if array.tobytes() != raw or array.shape != tuple(t.shape):
                report.problem(f"{key} ({t.dtype}): np.load(tensor.npy) differs")
            check_torch_file(report, os.path.join(d, "tensor.pt"), t, f"{key}/tensor.pt")
        except Exception as x:  # noqa: BLE001: one entry's failure is one problem
            report.problem(f"{key}: {type(x).__name__}: {str(x)[:300]}")
        if len(report.problems) >= MAX_PROBLEMS:
            break
    got, got_metadata = read_file(os.path.join(views, "model.safetensors"))
    compare(report, got, want, "safe_open(the mount's model.safetensors)")
    for k, v in (metadata or {}).items():
        if (got_metadata or {}).get(k) != v:
            report.problem(f"the mount's model.safetensors: __metadata__ {k!r} is "
                           f"{(got_metadata or {}).get(k)!r}, the source's {v!r}")
    return report.result()
