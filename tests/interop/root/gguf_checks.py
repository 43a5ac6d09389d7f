# SPDX-License-Identifier: MIT
"""Runs in the interop root: a mounted GGUF (or split set) against the reference reader,
gguf-py, and the files `ckptfs pack` writes of one.

    check_mount(spec)   spec: {"mount": DIR, "files": [GGUF...], "dtype": null|"float16"|...,
                               "views": DIR (index.json, model.safetensors; default: mount/.ckptfs),
                               "twins": [GGUF...] (of a big-endian file: the little-endian file
                                        it was converted from, whose values its blocks give)}
    check_packed(spec)  spec: {"packed": FILE (.safetensors or .pth), "files": [GGUF...],
                               "dtype": ...}: every tensor whose values are served, in order

For every tensor of every file, in order, against gguf.GGUFReader and gguf.quants.dequantize:
  - its directory's meta.json: key, shape (ne reversed), dtype served, and "ggml": type name and
    number, block size and bytes, nbytes and file_offset (the reader's n_bytes and data_offset);
    nbytes the size of data; a block-quantized tensor's stored_dtype its type, its nbytes,
    file_offset and contiguous its blocks' (the reader's);
  - data: the reader's bytes of the tensor, as stored (blocks too; -o dtype converts plain ones);
  - tensor.npy: a block-quantized tensor's values, element by element bit for bit with
    dequantize() (converted to DTYPE with torch's Tensor.to when given); a plain tensor's values;
  - tensor.pt (torch.load, weights_only) the same values as tensor.npy;
  - model.safetensors (or its shards, through the index): safe_open's tensor, bit for bit the same
    values; the tensors whose values are not served are not in it.
index.json's metadata and metadata_types against the reader's fields: every key in order, its
type, its value (FLOAT32 compared as float32 bits). Each returns {"tensors", "dequantized",
"data_only", "values", "problems": [one line each, the first per tensor]}.
"""

import json
import warnings
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T, GGUFValueType as V

warnings.simplefilter("ignore")  # NaN scales in random blocks: numpy warns, as it computes them

PLAIN = {T.F32: "float32", T.F16: "float16", T.BF16: "bfloat16", T.F64: "float64", T.I8: "int8",
         T.I16: "int16", T.I32: "int32", T.I64: "int64"}
NOT_DEQUANTIZED = {T.Q8_1, T.Q8_K, T.Q1_0, T.Q2_0}


class Problem(Exception):
    """A difference: the check of that tensor (or of the metadata) stops there."""


def fail(where, what):
    raise Problem(f"{where}: {what}")


def bits(a):
    """The array's bytes as unsigned integers of its element size: compares NaNs bit for bit."""
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def same_bits(where, got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        fail(where, f"shape {got.shape}, want {want.shape}")
    if got.dtype.itemsize != want.dtype.itemsize:
        fail(where, f"dtype {got.dtype}, want {want.dtype}")
    g, w = bits(got).ravel(), bits(want).ravel()
    diff = np.nonzero(g != w)[0]
    if len(diff):
        i = int(diff[0])
        fail(where, f"{len(diff)} of {g.size} elements differ; first at {i}: "
                    f"{g[i]:#x}, want {w[i]:#x}")


def as_numpy(tensor):
    """A torch tensor as numpy; bfloat16 as its bits (uint16), as tensor.npy holds it."""
    import torch
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def native(a):
    """`a` in this machine's byte order (a big-endian file's tensors, as torch loads them)."""
    a = np.asarray(a)
    return a.astype(a.dtype.newbyteorder("="))


def expected_values(t, dtype):
    """What tensor.npy holds for reader tensor t, as numpy (in the file's byte order for plain
    tensors served as stored); None when its values are not served."""
    import torch
    shape = tuple(int(n) for n in reversed(t.shape.tolist()))
    data = np.asarray(t.data)
    if t.tensor_type in PLAIN:
        if t.tensor_type == T.BF16:  # gguf-py gives its bytes; tensor.npy its bits as uint16
            a = data.view(">u2" if reader_big_endian(t) else "<u2").reshape(shape)
            if not dtype:
                return a
            values = torch.from_numpy(native(a).view(np.int16)).view(torch.bfloat16)
        else:
            a = data.reshape(shape)
            if not dtype or t.tensor_type not in (T.F32, T.F16, T.F64):
                return a
            values = torch.from_numpy(native(a))
        return as_numpy(values.to(getattr(torch, dtype)))
    if t.tensor_type in NOT_DEQUANTIZED:
        return None
    values = gguf.quants.dequantize(data, t.tensor_type).reshape(shape)
    return as_numpy(torch.from_numpy(values).to(getattr(torch, dtype))) if dtype else values


def reader_big_endian(t):
    return t.field.parts[2].dtype.byteorder == ">"  # n_dims, as the reader read it


def check_metadata(reader, index, where):
    fields = [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]
    meta, types = index["metadata"], index.get("metadata_types", {})
    if list(meta) != [f.name for f in fields]:
        fail(where, f"metadata keys {list(meta)[:8]}..., want {[f.name for f in fields][:8]}...")
    for f in fields:
        w = f"{where}: metadata {f.name!r}"
        names = [V(x).name for x in f.types]
        want_type = names[-1]
        for _ in names[:-1]:
            want_type = f"ARRAY[{want_type}]"
        if f.types[0] == V.ARRAY and len(f.data) == 0:
            want_type = f"ARRAY[{V(f.parts[-2][0]).name}]"  # an empty array: its declared type
        if types.get(f.name) != want_type:
            fail(w, f"type {types.get(f.name)}, want {want_type}")
        got = meta[f.name]
        want = f.contents()
        if f.types[0] == V.ARRAY:
            flat = got
            while flat and isinstance(flat[0], list):
                flat = [x for inner in flat for x in inner]
            got = flat
        else:
            got, want = [got], [want]
        if len(got) != len(want):
            fail(w, f"{len(got)} values, want {len(want)}")
        kind = f.types[-1]
        for i, (g, x) in enumerate(zip(got, want)):
            if kind == V.FLOAT32:
                ok = np.float32(g).view(np.uint32) == np.float32(x).view(np.uint32) \
                    if not isinstance(g, dict) else np.isnan(x)
            elif kind == V.FLOAT64:
                ok = (g == x) if not isinstance(g, dict) else np.isnan(x)
            else:
                ok = g == x
            if not ok:
                fail(w, f"value {i}: {g!r}, want {x!r}")


def read_npy(path):
    with open(path, "rb") as f:
        return np.lib.format.read_array(f, allow_pickle=False)


class Exports:
    """The mount's model.safetensors, or its shards through model.safetensors.index.json."""

    def __init__(self, views):
        from safetensors import safe_open
        index = views / "model.safetensors.index.json"
        self.files = {}
        if index.exists():
            for key, name in json.loads(index.read_text())["weight_map"].items():
                self.files[key] = views / name
        else:
            with safe_open(views / "model.safetensors", framework="pt") as f:
                for key in f.keys():
                    self.files[key] = views / "model.safetensors"
        self.open = {}

    def get(self, key):
        from safetensors import safe_open
        path = self.files.get(key)
        if path is None:
            return None
        if path not in self.open:
            self.open[path] = safe_open(path, framework="pt")
        return as_numpy(self.open[path].get_tensor(key))


def check_mount(spec):
    import torch
    mount = Path(spec["mount"])
    views = Path(spec.get("views") or Path(mount) / ".ckptfs")
    dtype = spec.get("dtype")
    index = json.loads((views / "index.json").read_text())
    exports = Exports(views)
    summary = {"tensors": 0, "dequantized": 0, "data_only": 0, "values": 0, "problems": []}
    for n, file in enumerate(spec["files"]):
        reader = gguf.GGUFReader(file)
        twins = gguf.GGUFReader(spec["twins"][n]).tensors if spec.get("twins") else None
        if n == 0:
            try:
                check_metadata(reader, index, file)
            except Problem as p:
                summary["problems"].append(str(p))
        for i, t in enumerate(reader.tensors):
            try:
                check_tensor(file, t, twins[i] if twins else None, mount, dtype, exports, summary)
            except Problem as p:
                summary["problems"].append(str(p))
    return summary


def check_tensor(file, t, twin, mount, dtype, exports, summary):
    """Tensor `t` of `file`'s reader against the mount; counts into `summary`."""
    import torch
    where = f"{Path(file).name}: {t.name!r}"
    d = mount / t.name
    meta = json.loads((d / "meta.json").read_text())
    shape = [int(x) for x in reversed(t.shape.tolist())]
    if meta["key"] != t.name or meta["shape"] != shape:
        fail(where, f"meta.json key {meta['key']!r} shape {meta['shape']}, want {shape}")
    block, size = gguf.GGML_QUANT_SIZES[t.tensor_type]
    want_ggml = {"type": t.tensor_type.name, "type_id": int(t.tensor_type),
                 "block_elements": block, "block_bytes": size, "nbytes": int(t.n_bytes),
                 "file_offset": int(t.data_offset)}
    got_ggml = {k: meta["ggml"].get(k) for k in want_ggml}
    if got_ggml != want_ggml:
        fail(where, f"meta.json ggml {got_ggml}, want {want_ggml}")
    # meta.json's nbytes is data's size; a block-quantized tensor's data is its blocks: their
    # type, where they are, one range of the file.
    size = (d / "data").stat().st_size
    if meta["nbytes"] != size:
        fail(where, f"meta.json nbytes {meta['nbytes']}, data has {size} bytes")
    if t.tensor_type not in PLAIN:
        want_data = {"stored_dtype": t.tensor_type.name, "nbytes": int(t.n_bytes),
                     "file_offset": int(t.data_offset), "contiguous": True}
        got_data = {k: meta.get(k) for k in want_data}
        if got_data != want_data:
            fail(where, f"meta.json {got_data}, want {want_data}")
    want = expected_values(t, dtype)
    # data: the blocks as stored; a plain tensor's bytes as tensor.npy's (-o dtype
    # converts them).
    stored = np.asarray(t.data).tobytes()
    if t.tensor_type in PLAIN and want is not None:
        stored = np.ascontiguousarray(want).tobytes()
    if (d / "data").read_bytes() != stored:
        fail(where, "data is not the tensor's bytes as stored")
    if twin is not None and t.tensor_type not in PLAIN and want is not None:
        want = expected_values(twin, dtype)  # gguf-py dequantizes little-endian
    summary["tensors"] += 1
    if want is None:
        summary["data_only"] += 1
        if meta["ggml"].get("dequantized") is not False or (d / "tensor.npy").exists() or \
                meta["numpy"] is not None:
            fail(where, "values served for a type without a reference dequantization")
        if exports.get(t.name) is not None:
            fail(where, "in model.safetensors, without values")
        return
    if t.tensor_type not in PLAIN:
        summary["dequantized"] += 1
        want_dtype = dtype or "float32"
        if meta["dtype"] != want_dtype or meta["ggml"]["dequantized"] is not True:
            fail(where, f"meta.json dtype {meta['dtype']}, dequantized "
                        f"{meta['ggml'].get('dequantized')}")
    got = read_npy(d / "tensor.npy")
    same_bits(f"{where}: tensor.npy", got, want)
    # torch loads a big-endian file's tensors in this machine's order; safetensors is
    # little-endian.
    pt = as_numpy(torch.load(d / "tensor.pt", weights_only=True))
    same_bits(f"{where}: tensor.pt", pt, native(want))
    exported = exports.get(t.name)
    if exported is None:
        fail(where, "not in model.safetensors")
    same_bits(f"{where}: model.safetensors", exported, native(want))
    summary["values"] += int(np.asarray(want).size)


def check_packed(spec):
    """A file `ckptfs pack` wrote of the GGUF files: the tensors with values, in order."""
    try:
        return check_packed_file(spec)
    except Problem as p:
        return {"tensors": 0, "problems": [str(p)]}


def check_packed_file(spec):
    import torch
    packed = spec["packed"]
    if packed.endswith(".safetensors"):
        from safetensors import safe_open
        with safe_open(packed, framework="pt") as f:
            got = {k: f.get_tensor(k) for k in f.keys()}
            order = list(got)
    else:
        got = torch.load(packed, weights_only=True)
        order = list(got)
    want_keys = []
    for file in spec["files"]:
        for t in gguf.GGUFReader(file).tensors:
            want = expected_values(t, spec.get("dtype"))
            if want is None:
                if t.name in got:
                    fail(packed, f"{t.name!r} packed, without values")
                continue
            want_keys.append(t.name)
            same_bits(f"{packed}: {t.name!r}", as_numpy(got[t.name]), native(want))
    if packed.endswith(".pth") and order != want_keys:
        fail(packed, f"keys {order[:5]}..., want {want_keys[:5]}...")
    if sorted(order) != sorted(want_keys):
        fail(packed, f"{len(order)} tensors, want {len(want_keys)}")
    return {"tensors": len(order), "problems": []}
