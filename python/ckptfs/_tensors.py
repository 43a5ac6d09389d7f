# SPDX-License-Identifier: MIT
"""dtypes: the numpy dtype that holds each of ckptfs's dtypes bit for bit (tensor.npy's), and
turning such arrays into torch tensors of the dtype the mount serves. torch is imported on
first use only (an `import ckptfs` costs numpy's import, not torch's)."""

import sys

import numpy as np

from ._errors import Error

# ckptfs's dtype names (torch's) -> the numpy type of the same bytes, as tensor.npy's descr
# (docs/TREE.md): numpy lacks bfloat16, float8, float4, complex32 and the bits/quantized types,
# whose bits come as the unsigned integer of the same width.
_NUMPY = {
    "float32": "f4", "float64": "f8", "float16": "f2", "bfloat16": "u2",
    "float8_e5m2": "u1", "float8_e4m3fn": "u1", "float8_e5m2fnuz": "u1",
    "float8_e4m3fnuz": "u1", "float8_e8m0fnu": "u1", "float4_e2m1fn_x2": "u1",
    "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
    "uint8": "u1", "uint16": "u2", "uint32": "u4", "uint64": "u8", "bool": "b1",
    "complex32": "u4", "complex64": "c8", "complex128": "c16",
    "qint8": "i1", "quint8": "u1", "qint32": "i4", "quint4x2": "u1", "quint2x4": "u1",
    "bits8": "u1", "bits16": "u2", "bits1x8": "u1", "bits2x4": "u1", "bits4x2": "u1",
    "bcomplex32": "u4",
}
# The dtypes whose numpy arrays torch.from_numpy takes as they are (of the same dtype).
FROM_NUMPY = {"float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool",
              "complex64", "complex128"}
# Quantized tensors need their scale and zero point (tensor.pt holds them): never made from bytes.
QUANTIZED = {"qint8", "quint8", "qint32", "quint4x2", "quint2x4"}
# The dtypes torch packs below a byte, and how many elements a byte holds: flat over the elements
# in C order, element i in bits (i % k) * 8 / k up of byte i // k, in a storage of torch's rows of
# ceil(shape[-1] / k) bytes (docs/TREE.md, meta.json's "packing"). tensor.npy holds that storage
# as uint8, in one dimension.
PACKED = {"quint4x2": 2, "quint2x4": 4}
# The numpy types torch.from_numpy takes, by width, for the bits of an unsigned type it may not
# take (uint16-64 came in torch 2.3): the signed integer of the same width, viewed afterwards.
_CARRIER = {2: np.int16, 4: np.int32, 8: np.int64}


def nbytes(name, shape):
    """The bytes a C-order tensor of dtype `name` and `shape` takes as torch stores it, as the
    mount counts them: numel * the element size, or a packed dtype's rows of ceil(shape[-1] / k)
    bytes (1 for a 0-d tensor); None for a name this package does not know."""
    dtype = numpy_dtype(name)
    if dtype is None:
        return None
    k = PACKED.get(name, 1)
    rows = 1
    for d in shape[:-1]:
        rows *= d
    last = shape[-1] if shape else 1
    return rows * (-(-last // k) if k > 1 else last * dtype.itemsize)


def npy_shape(name, shape):
    """The shape of the tensor's tensor.npy (and ck.numpy's array): its own, but for a packed
    dtype one dimension of its stored bytes."""
    return (nbytes(name, shape),) if name in PACKED else tuple(shape)


def numpy_dtype(name, byteorder="="):
    """The numpy dtype holding ckptfs dtype `name` bit for bit, in `byteorder` ("<", ">", "=");
    None for a name this package does not know (a newer ckptfs's)."""
    code = _NUMPY.get(name)
    return None if code is None else np.dtype(code).newbyteorder(byteorder)


_torch_module = None
_torch_missing = False


def torch_available():
    """Whether torch can be imported: it is then, once (the first tensor asked for pays it)."""
    global _torch_missing
    if _torch_module is None and not _torch_missing:
        try:
            torch()
        except ImportError:
            _torch_missing = True
    return not _torch_missing


def torch():
    """The torch module, imported on first use."""
    global _torch_module
    if _torch_module is None:
        import torch as module
        _torch_module = module
    return _torch_module


def is_torch_tensor(value):
    """Whether `value` is a torch tensor (without importing torch: none exists before it is)."""
    module = sys.modules.get("torch")
    return module is not None and isinstance(value, module.Tensor)


def torch_dtype(name, key):
    """torch's dtype named `name`; Error when this torch has none (float8 came in 2.1, uint16-64
    in 2.3...)."""
    t = torch()
    dtype = getattr(t, name, None)
    if not isinstance(dtype, t.dtype):
        raise Error(f"ckptfs: {key}: a {name} tensor, which torch {t.__version__} does not have: "
                    f"ck.numpy(key) gives its bits (numpy dtype {numpy_dtype(name)}), or use a "
                    "newer torch", status=5)
    return dtype


def to_torch(array, name, key):
    """The torch tensor of dtype `name` whose bits are those of numpy `array` (as numpy_dtype
    gives them), sharing its memory when its byte order is the machine's (else converted
    once). Quantized dtypes are not made here (tensor.pt is)."""
    t = torch()
    dtype = torch_dtype(name, key)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if array.dtype.kind == "u" and array.dtype.itemsize > 1:
        array = array.view(_CARRIER[array.dtype.itemsize])
    if any(s < 0 for s in array.strides):
        array = array.copy()  # (torch takes no negative stride)
    tensor = t.from_numpy(array)
    return tensor if tensor.dtype == dtype else tensor.view(dtype)


def packed_quantized(array, name, shape, qparams, key):
    """The quantized tensor of packed dtype `name` (quint4x2, quint2x4) and `shape` whose storage
    holds the bytes of uint8 `array` (its tensor.npy), made as torch.load makes it
    (_rebuild_qtensor over a storage of those bytes); qparams as torch pickles them:
    (torch.per_tensor_affine, scale, zero_point) or (torch.per_channel_affine, scales,
    zero_points, axis)."""
    import collections
    t = torch()
    dtype = torch_dtype(name, key)
    data = t.from_numpy(np.array(array, dtype=np.uint8, copy=True).reshape(-1))
    untyped = (data.untyped_storage() if hasattr(data, "untyped_storage")
               else data.storage().untyped())  # (torch 1.13)
    try:
        storage = t.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)
    except TypeError:  # torch before 2.0 has no _internal
        storage = t.storage.TypedStorage(wrap_storage=untyped, dtype=dtype)
    stride, step = [], 1
    for d in reversed(shape):
        stride.insert(0, step)
        step *= max(d, 1)
    return t._utils._rebuild_qtensor(storage, 0, tuple(shape), tuple(stride), qparams, False,
                                     collections.OrderedDict())
