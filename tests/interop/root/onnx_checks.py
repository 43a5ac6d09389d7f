# SPDX-License-Identifier: MIT
"""Runs in the interop root: a mount of an ONNX model against the root's onnx
(onnx.load with its external data, numpy_helper.to_array), torch (tensor.pt) and safetensors
(the mount's model.safetensors).

    check(model, mnt, views)  every initializer of the graph and its subgraphs (the parts of a
                              sparse one as <name>.values and <name>.indices) and its key in
                              index.json: data is to_array's bytes (ml_dtypes' types as their
                              bits, one element a byte for 4- and 2-bit types), tensor.npy
                              numpy.load's dtype and values (numpy's types) or the same bits,
                              meta.json's onnx.data_type the TensorProto's, tensor.pt torch.load's
                              values (torch's types) and model.safetensors the same bits; a
                              STRING initializer's value.json its strings

Returns {"tensors", "problems": [one line each]}.
"""

import json
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, numpy_helper
from safetensors import safe_open


def initializers(model):
    """(key, TensorProto) of every initializer of the graph and its subgraphs, without
    recursion (a list of graphs to visit)."""
    out = []
    graphs = [model.graph]
    while graphs:
        g = graphs.pop(0)
        out += [(t.name, t) for t in g.initializer]
        for s in g.sparse_initializer:
            out += [(s.values.name + ".values", s.values), (s.values.name + ".indices", s.indices)]
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graphs.append(a.g)
                graphs += list(a.graphs)
    return out


def bits(a):
    """An array's bytes in C order; ml_dtypes' 4- and 2-bit integers as int8 or uint8 values (as
    ckptfs serves them: one element a byte, sign-extended), their float4 as its 4-bit codes
    (ml_dtypes' own bytes: the code in the low bits)."""
    a = np.ascontiguousarray(a)
    if a.dtype.name in ("int4", "int2"):
        return a.astype(np.int8).tobytes()
    if a.dtype.name in ("uint4", "uint2"):
        return a.astype(np.uint8).tobytes()
    return a.tobytes()


def check(model_path, mnt, views):
    mnt, views = Path(mnt), Path(views)
    model = onnx.load(model_path)  # with its external data
    problems = []
    index = json.loads((views / "index.json").read_text())
    by_key = {e["key"]: e for e in index["entries"]}
    wanted = initializers(model)
    if sorted(by_key) != sorted(k for k, _ in wanted):
        return {"tensors": 0, "problems": [f"index.json's keys {sorted(by_key)} are not the "
                                           f"initializers' {sorted(k for k, _ in wanted)}"]}
    with safe_open(views / "model.safetensors", framework="pt") as st:
        exported = set(st.keys())
        for key, t in wanted:
            d = mnt / by_key[key]["path"]
            if 0 in t.dims and t.raw_data:
                # onnx.load reads an empty tensor's external data (length "0", as onnx.save
                # writes it) from its offset to the end of the file: to_array then fails.
                t.raw_data = b""
            want = numpy_helper.to_array(t)
            if t.data_type == TensorProto.STRING:
                strings = [s.decode("utf-8") if isinstance(s, bytes) else s
                           for s in want.flatten()]
                got = json.loads((d / "value.json").read_text())
                if np.array(got, dtype=object).flatten().tolist() != strings:
                    problems.append(f"{key}: value.json {got}, want {strings}")
                continue
            meta = json.loads((d / "meta.json").read_text())
            if meta["onnx"]["data_type"] != TensorProto.DataType.Name(t.data_type):
                problems.append(f"{key}: meta.json's data_type {meta['onnx']['data_type']}")
            if list(meta["shape"]) != list(want.shape):
                problems.append(f"{key}: shape {meta['shape']}, want {list(want.shape)}")
            if (d / "data").read_bytes() != bits(want):
                problems.append(f"{key}: data is not to_array's bytes ({want.dtype})")
            npy = np.load(d / "tensor.npy")
            native = want.dtype.kind in "biufc" and want.dtype.type.__module__ == "numpy"
            if native and (npy.dtype != want.dtype or npy.shape != want.shape):
                problems.append(f"{key}: tensor.npy {npy.dtype} {npy.shape}, want "
                                f"{want.dtype} {want.shape}")
            if native == bool(meta["onnx"]["served_as"]):
                problems.append(f"{key}: meta.json's served_as {meta['onnx']['served_as']!r} "
                                f"for {want.dtype}")
            if npy.tobytes() != bits(want):
                problems.append(f"{key}: tensor.npy's bytes are not to_array's ({want.dtype})")
            pt = torch.load(d / "tensor.pt", weights_only=True)
            if tuple(pt.shape) != want.shape or \
                    pt.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() != bits(want):
                problems.append(f"{key}: tensor.pt {pt.dtype} {tuple(pt.shape)} differs")
            if key in exported:
                got = st.get_tensor(key)
                if got.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() != bits(want):
                    problems.append(f"{key}: model.safetensors differs")
            elif want.dtype != np.complex128:
                problems.append(f"{key}: not in model.safetensors")
    return {"tensors": len(wanted), "problems": problems}
