# SPDX-License-Identifier: MIT
"""Runs in the interop root: ONNX models written by the root's torch (2.x, torch.onnx.export's
TorchScript exporter: the dynamo one needs onnxscript, which Debian lacks) and onnx package, the
fixtures of tests/interop/test_interop_onnx.py.

    write(out_dir)  returns {name: path} of:
      torch_float32, torch_float16, torch_bfloat16  torch.onnx.export of a small MLP with a
                      buffer, its initializers in raw_data
      torch_external  torch_float32 saved again by onnx.save_model with every initializer in one
                      external file (torch's exporter writes external data only past 2 GB)
      helpers         onnx.helper.make_tensor of every data type onnx has, in its typed field
                      and as raw_data, a sparse initializer, an If whose branches hold
                      initializers, a STRING initializer
      helpers_external  the helpers model with every tensor of 8 bytes or more in an external
                      file of its own directory (onnx's offsets and lengths)

Seeded, small, a few seconds (torch's import).
"""

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 5)
        self.fc2 = torch.nn.Linear(5, 3)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 3))

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x))) * self.scale


def torch_export(path, dtype):
    torch.manual_seed(33)
    m = Mlp().to(dtype).eval()
    torch.onnx.export(m, (torch.randn(2, 6, dtype=dtype),), path, dynamo=False,
                      do_constant_folding=False)


def values(dtype_id, rng, shape):
    """Values of ONNX data type `dtype_id` as make_tensor takes them (numpy's or ml_dtypes')."""
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype_id)
    n = int(np.prod(shape))
    if dtype_id == TensorProto.BOOL:
        return rng.integers(0, 2, size=n).astype(bool).reshape(shape)
    if np.dtype(np_dtype).kind in "iu":
        raw = rng.integers(0, 256, size=(n, np.dtype(np_dtype).itemsize), dtype=np.uint8)
        return raw.view(np_dtype).reshape(shape)  # every bit pattern, the extremes too
    if np.dtype(np_dtype).kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np_dtype) \
            .reshape(shape)
    if np.dtype(np_dtype).kind == "f":
        return rng.standard_normal(n).astype(np_dtype).reshape(shape)
    # ml_dtypes: float8s, float4, int4/uint4, int2/uint2...: from float32 or int values.
    name = str(np.dtype(np_dtype))
    if "int" in name:
        bits = 2 if "2" in name else 4
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if not name.startswith("u") \
            else (0, (1 << bits) - 1)
        return rng.integers(lo, hi, size=n, endpoint=True).astype(np_dtype).reshape(shape)
    if "e8m0" in name:
        return (2.0 ** rng.integers(-5, 5, size=n)).astype(np.float32).astype(np_dtype) \
            .reshape(shape)
    return (rng.standard_normal(n) * 2).astype(np.float32).astype(np_dtype).reshape(shape)


def data_types():
    """Every data type of this onnx but UNDEFINED and STRING, as (name, id)."""
    return [(name, i) for name, i in TensorProto.DataType.items()
            if name not in ("UNDEFINED", "STRING")]


def helpers_model():
    rng = np.random.default_rng(33)
    inits = []
    for name, dtype_id in data_types():
        shape = [3, 5]
        a = values(dtype_id, rng, shape)
        # Typed fields: make_tensor(raw=False) puts the values in float_data, int32_data...
        inits.append(helper.make_tensor(f"typed_{name}", dtype_id, shape, a.flatten().tolist()
                                        if np.asarray(a).dtype.kind in "biufc" else a.flatten(),
                                        raw=False))
        inits.append(numpy_helper.from_array(a, f"raw_{name}"))  # raw_data
    inits.append(numpy_helper.from_array(np.float32(2.5), "scalar"))
    inits.append(numpy_helper.from_array(np.zeros((0, 4), np.int16), "empty"))
    inits.append(helper.make_tensor("words", TensorProto.STRING, [2, 2],
                                    [b"a", b"bc", "d\u00e9".encode(), b""]))
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.5, -2.0, 3.25], np.float32), "sparse_w"),
        numpy_helper.from_array(np.array([1, 7, 10], np.int64), "sparse_w_indices"), [3, 4])

    def branch(tag, value):
        w = numpy_helper.from_array(np.full((2, 2), value, np.float32), f"{tag}_w")
        return helper.make_graph([helper.make_node("Identity", [f"{tag}_w"], [f"{tag}_out"])],
                                 f"{tag}_graph", [],
                                 [helper.make_tensor_value_info(f"{tag}_out", TensorProto.FLOAT,
                                                                [2, 2])], [w])

    cond = numpy_helper.from_array(np.array(True), "cond")
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch("then", 1.0),
                            else_branch=branch("else", -1.0))
    graph = helper.make_graph([node], "helpers", [],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              inits + [cond], sparse_initializer=[sparse])
    return helper.make_model(graph, producer_name="ckptfs-interop")


def write(out_dir):
    import os
    out = {}
    for name, dtype in (("float32", torch.float32), ("float16", torch.float16),
                        ("bfloat16", torch.bfloat16)):
        out[f"torch_{name}"] = f"{out_dir}/torch_{name}.onnx"
        torch_export(out[f"torch_{name}"], dtype)
    os.makedirs(f"{out_dir}/external", exist_ok=True)
    out["torch_external"] = f"{out_dir}/external/model.onnx"
    onnx.save_model(onnx.load(out["torch_float32"]), out["torch_external"],
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    out["helpers"] = f"{out_dir}/helpers.onnx"
    model = helpers_model()
    onnx.save_model(model, out["helpers"])
    os.makedirs(f"{out_dir}/helpers_external/weights", exist_ok=True)
    out["helpers_external"] = f"{out_dir}/helpers_external/helpers.onnx"
    onnx.save_model(model, out["helpers_external"], save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights/helpers.bin",
                    size_threshold=8, convert_attribute=True)
    return out
