# SPDX-License-Identifier: MIT
"""The safetensors and sharded-set fixtures of the integration tests, and what ckptfs must
report for each; called by scripts/make_fixtures.py (make_all), which writes the torch ones.

Fixtures, in OUTDIR:
    st_dtypes.safetensors   every dtype of the format torch has (F4 as float4_e2m1fn_x2), each
                            0-d, (0,), (2,0,3) and 1-d/3-d with bytes from a seed; a 1 MiB F32;
                            __metadata__ with escapes and unicode; written as the library does
    st_mlx.safetensors      as MLX writes: header not padded, "__metadata__": null, the header
                            sorted by name but the data in another order
    st_keys.safetensors     awkward names: '/', '%', '.', '..', '', 'index.json', unicode, 300
                            bytes, a newline
    st_empty.safetensors    no tensor at all, only metadata
    sharded_st/             model.safetensors.index.json (as transformers writes it) over three
                            safetensors shards, one holding a tensor the index does not list
    sharded_bin/            pytorch_model.bin.index.json over two torch.save shards (the zip
                            format and the legacy one), tied weights in one, a key not listed
and each `<name>.expected.json`, computed from the objects written (never from the files):
    {"format", "sources", "metadata", "entries": [{"key", "kind", "dtype", "shape", "stride",
     "nbytes", "source", "sha256"}]}
in ckptfs's order (a file's data order; an index's weight_map order). Self-check: the reference
reader (ckptfs_safetensors.expected_model, which parses the files) agrees with every one.
"""

import collections
import hashlib
import json
from pathlib import Path

import numpy as np
import torch

import ckptfs_reference as ref
import ckptfs_safetensors as st

ELEMENT_BYTES = {d: bits / 8 for d, (_, bits) in st.DTYPES.items()}


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _strides(shape):
    stride, step = [], 1
    for s in reversed(shape):
        stride.insert(0, step)
        step *= max(s, 1)
    return stride


def _entry(key, dtype, shape, data, source):
    """The expected entry of a tensor written as format dtype `dtype`, format shape `shape`."""
    name, bits = st.DTYPES[dtype]
    tshape = list(shape)
    if bits == 4:
        tshape[-1] //= 2
    return {"key": key, "kind": "tensor", "dtype": name, "shape": tshape,
            "stride": _strides(tshape), "nbytes": len(data), "source": source,
            "sha256": _sha(data)}


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _tensors_dtypes(rng):
    out = []
    for dtype, (name, bits) in st.DTYPES.items():
        if name is None:
            continue
        shapes = [[4], [0], [2, 0, 6], [3, 2, 4]] if bits == 4 else [[], [0], [2, 0, 3], [5],
                                                                    [2, 3, 4]]
        for shape in shapes:
            nbytes = _numel(shape) * bits // 8
            label = "x".join(map(str, shape)) or "0d"
            out.append((f"{name}.{label}", dtype, shape, rng.bytes(nbytes)))
    out.append(("big.weight", "F32", [256, 1024], rng.bytes(256 * 1024 * 4)))
    # The library's layout: by dtype alignment (largest first), then by name.
    out.sort(key=lambda t: (-st.DTYPES[t[1]][1], t[0]))
    return out


def _write_file(out, name, tensors, metadata=None, **kwargs):
    path = out / f"{name}.safetensors"
    st.write_safetensors(path, tensors, metadata, **kwargs)
    entries = [_entry(k, d, s, b, path.name) for k, d, s, b in tensors]
    return {"format": "safetensors", "sources": [path.name], "metadata": dict(metadata or {}),
            "entries": entries}


def _sharded_st(out, rng):
    d = out / "sharded_st"
    d.mkdir(exist_ok=True)
    shards = {
        "model-00001-of-00003.safetensors": [
            ("model.embed.weight", "BF16", [16, 8], rng.bytes(16 * 8 * 2)),
            ("model.layers.0.attn.q.weight", "F32", [8, 8], rng.bytes(256)),
            ("model.layers.0.norm.weight", "F16", [8], rng.bytes(16))],
        "model-00002-of-00003.safetensors": [
            ("model.layers.1.attn.q.weight", "F32", [8, 8], rng.bytes(256)),
            ("model.layers.1.step", "I64", [], rng.bytes(8)),
            ("model.layers.1.empty", "F32", [0, 8], b""),
            ("extra.unlisted", "U8", [3], b"xyz")],
        "model-00003-of-00003.safetensors": [
            ("lm_head.weight", "F8_E4M3", [16, 8], rng.bytes(128)),
            ("lm_head.scale", "F32", [1], rng.bytes(4))],
    }
    weight_map, entries_by_key, total = {}, {}, 0
    for f, tensors in shards.items():
        st.write_safetensors(d / f, tensors, {"format": "pt"})
        for k, dtype, shape, data in tensors:
            if k == "extra.unlisted":
                continue
            weight_map[k] = f
            entries_by_key[k] = _entry(k, dtype, shape, data, f)
            total += len(data)
    st.write_index(d / "model.safetensors.index.json", weight_map, total)
    keys = sorted(weight_map)  # transformers sorts the weight_map's keys
    return {"format": "sharded", "sources": list(dict.fromkeys(weight_map[k] for k in keys)),
            "metadata": {}, "entries": [entries_by_key[k] for k in keys]}


def _sharded_bin(out):
    d = out / "sharded_bin"
    d.mkdir(exist_ok=True)
    g = torch.Generator().manual_seed(7)
    embed = torch.randn(12, 4, generator=g)
    first = collections.OrderedDict([
        ("encoder.embed.weight", embed),
        ("decoder.embed.weight", embed),  # tied: one storage
        ("encoder.layer.0.weight", torch.randn(4, 4, generator=g).to(torch.bfloat16)),
        ("encoder.layer.0.bias", torch.zeros(4, dtype=torch.float16)),
    ])
    second = collections.OrderedDict([
        ("decoder.layer.0.weight", torch.randn(4, 4, generator=g).double()),
        ("decoder.layer.0.count", torch.tensor(3, dtype=torch.int64)),
        ("decoder.unlisted", torch.arange(5, dtype=torch.int32)),
    ])
    files = {"pytorch_model-00001-of-00002.bin": (first, {}),
             "pytorch_model-00002-of-00002.bin": (second,
                                                  {"_use_new_zipfile_serialization": False})}
    weight_map, entries_by_key, total = {}, {}, 0
    for f, (sd, kwargs) in files.items():
        torch.save(sd, d / f, **kwargs)
        for k, t in sd.items():
            if k == "decoder.unlisted":
                continue
            data = ref.tensor_bytes(t, "little")
            weight_map[k] = f
            entries_by_key[k] = {"key": k, "kind": "tensor", "dtype": ref.dtype_name(t.dtype),
                                 "shape": list(t.shape), "stride": list(t.stride()),
                                 "nbytes": len(data), "source": f, "sha256": _sha(data)}
            total += len(data)
    st.write_index(d / "pytorch_model.bin.index.json", weight_map, total)
    keys = sorted(weight_map)
    return {"format": "sharded", "sources": list(dict.fromkeys(weight_map[k] for k in keys)),
            "metadata": {}, "entries": [entries_by_key[k] for k in keys]}


def _keys_tensors():
    names = ["a/b", "%", "%2F", ".", "..", "", "index.json", "poids.层", "emoji.\U0001F600",
             "k" * 300, "with\nnewline", "quote\"back\\slash"]
    return [(n, "F32", [2], np.array([i, -i], dtype="<f4").tobytes())
            for i, n in enumerate(names)]


def make_all(outdir):
    """Writes every fixture and its expected.json into `outdir`; returns their names."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(20241122)
    made = {}
    made["st_dtypes"] = _write_file(out, "st_dtypes", _tensors_dtypes(rng),
                                    {"format": "pt", "note": "ünïcode \"quoted\" \\ / \n",
                                     "empty": ""})
    mlx = [("model.layers.1.lora_b", "F32", [4, 2], rng.bytes(32)),
           ("model.layers.0.lora_a", "F32", [2, 4], rng.bytes(32)),
           ("model.layers.0.lora_b", "F16", [4, 2], rng.bytes(16))]
    made["st_mlx"] = _write_file(out, "st_mlx", mlx, pad=False, metadata_null=True,
                                 header_order=sorted(t[0] for t in mlx))
    made["st_keys"] = _write_file(out, "st_keys", _keys_tensors())
    made["st_empty"] = _write_file(out, "st_empty", [], {"format": "pt"})
    made["sharded_st"] = _sharded_st(out, rng)
    made["sharded_bin"] = _sharded_bin(out)
    for name, doc in made.items():
        (out / f"{name}.expected.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False)
                                                   + "\n", encoding="utf-8")
    # Self-check: the reference reader, from the files, says the same.
    for name, doc in made.items():
        path = out / name if (out / name).is_dir() else out / f"{name}.safetensors"
        got = st.expected_model(path)
        for field in ("format", "sources", "metadata"):
            if got[field] != doc[field]:
                raise SystemExit(f"safetensors_fixtures: {name}: reference reader's {field} "
                                 f"{got[field]!r} != {doc[field]!r}")
        mine = [{k: e[k] for k in ("key", "dtype", "shape", "stride", "nbytes", "source")}
                | {"kind": "tensor", "sha256": _sha(e.data())} for e in got["entries"]]
        if mine != doc["entries"]:
            diff = next((a, b) for a, b in zip(mine + [None] * len(doc["entries"]),
                                              doc["entries"] + [None] * len(mine)) if a != b)
            raise SystemExit(f"safetensors_fixtures: {name}: reference reader disagrees: {diff}")
    return sorted(made)
