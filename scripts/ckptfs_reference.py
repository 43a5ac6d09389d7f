# SPDX-License-Identifier: MIT
"""What a correct reader of a PyTorch checkpoint reports, computed in Python without ckptfs.

The one copy of the reference logic that scripts/make_fixtures.py, scripts/ckptfs-verify and the
integration tests (tests/integration/) share:

    dtypes      DTYPE_SIZES, NUMPY_KIND, dtype_name, numpy_descr, swap_unit, byteswap
    bytes       gather (a strided view over raw storage bytes, in C order), load_tensor_file
                (torch.load of a tensor.pt, never running other code),
                tensor_bytes (a torch tensor's elements in C order, in a given byte order),
                storage_of (the identity and size of a tensor's storage)
    loading     torch_load: torch.load on the CPU even when the checkpoint's classes are missing
                (StubObject, stub_class, StubUnpickler, stubbed_names)
    flattening  flatten: a loaded object as ordered (key, tensor | value) entries, the rule of
                `ckptfs inspect` and of the mount (children, contains_tensor; sparse and nested
                tensors as their parts: tensor_parts, SPARSE_PARTS, NESTED_PARTS); key_paths and
                key_containers: the Python keys and containers of the entries whose text does
                not say them; packed_nesting, nesting_difference: what `ckptfs pack` writes of
                a checkpoint's nesting, and how torch.load of it compares
    TorchScript torchscript_prefix, torchscript_flatten, torchscript_key_paths: a torch.jit.save
                archive's entries (state_dict, constants.N, attributes.*) computed with torch
    values      simple_json, NOT_JSON, value_from_json, same_value, value_entry, has_opaque,
                json_equal: value.json's rule (docs/VALUES.md) both ways, a value's entry, and
                how ckptfs's JSON and values compare with torch's
    names       directory_name, entry_names, rfc_file_names, fnv1a64, VIEW_FILES: the names of
                keys in the mount, and of the views in its .ckptfs folder

(Mounts, /proc/self/mountinfo and unmounting are ckptfs_mounts.py's, beside this file.)

Needs torch (Debian's 1.13, or later) and numpy; everything else is the standard library.
Importing it only defines things. Tools import it from their own directory, where it sits beside
them (scripts/ in the repository, or wherever ckptfs-verify is installed).
"""

import collections
import inspect
import re
import pickle
import sys
import types
from unittest import mock

import numpy as np
import torch

# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------

# Every dtype name a reader may report (torch's name, without "torch.") -> element size in bytes.
DTYPE_SIZES = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16, "complex32": 4, "bcomplex32": 4,
    "float8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2fnuz": 1, "float8_e4m3fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "bits8": 1,
    "qint8": 1, "quint8": 1, "qint32": 4,
}

# The numpy descr kind ckptfs uses in tensor.npy for each dtype; the dtypes numpy lacks are the
# unsigned integer of their width, bit for bit.
NUMPY_KIND = {
    "float32": "f4", "float64": "f8", "float16": "f2", "int8": "i1", "uint8": "u1",
    "int16": "i2", "int32": "i4", "int64": "i8", "uint16": "u2", "uint32": "u4", "uint64": "u8",
    "bool": "b1", "complex64": "c8", "complex128": "c16",
    "bfloat16": "u2", "complex32": "u4", "bcomplex32": "u4", "bits8": "u1",
    "float8_e5m2": "u1", "float8_e4m3fn": "u1", "float8_e5m2fnuz": "u1", "float8_e4m3fnuz": "u1",
    "float8_e8m0fnu": "u1", "float4_e2m1fn_x2": "u1",
    "qint8": "i1", "quint8": "u1", "qint32": "i4",  # the integer representation
}

# Byte swapping is per element, complex numbers per half (their real and imaginary parts).
SWAP_UNIT = {"complex64": 4, "complex128": 8, "complex32": 2, "bcomplex32": 2}


def dtype_name(dt):
    """torch's name of a dtype without the module: torch.float32 -> 'float32'."""
    return str(dt).removeprefix("torch.")


def numpy_descr(dtype, byteorder):
    """The numpy descr of tensor.npy for a dtype name in a file of `byteorder` ('little' or
    'big'): '<f4', '>i8', '|u1'...; None for a dtype without one (quantized dtypes)."""
    kind = NUMPY_KIND.get(dtype)
    if kind is None:
        return None
    if kind.endswith("1"):
        return "|" + kind
    return (">" if byteorder == "big" else "<") + kind


def swap_unit(dtype):
    """How many bytes reverse together when a dtype changes byte order."""
    return SWAP_UNIT.get(dtype, DTYPE_SIZES[dtype])


def byteswap(data, unit):
    """`data` with every `unit`-byte group reversed (as bytes)."""
    if unit <= 1 or not data:
        return bytes(data)
    a = np.frombuffer(bytes(data), dtype=np.uint8).reshape(-1, unit)
    return a[:, ::-1].tobytes()


# --------------------------------------------------------------------------------------------
# Bytes
# --------------------------------------------------------------------------------------------

# The globals a tensor.pt may hold (ckptfs writes only these): torch's rebuild calls, storage
# classes, dtypes and qschemes, and OrderedDict.
_TENSOR_FILE_GLOBALS = re.compile(
    r"^(torch\._utils _rebuild_(tensor_v2|tensor_v3|qtensor)|torch \w+Storage|"
    r"torch\.storage UntypedStorage|torch \w+|collections OrderedDict)$")


def load_tensor_file(path):
    """torch.load of a tensor.pt: with weights_only=True, or, where the installed torch's
    weights_only loader lacks what the file needs (quantized tensors before torch 2.4, the dtypes
    of _rebuild_tensor_v3 before 2.2...), with weights_only=False once every GLOBAL of its pickle
    is one of torch's rebuild calls, storage classes, dtypes or qschemes: never runs other code."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001: torch raises various types for what it refuses
        pass
    import pickletools
    import zipfile
    with zipfile.ZipFile(path) as zf:
        pkl = zf.read(next(n for n in zf.namelist() if n.endswith("/data.pkl")))
    for op, arg, _ in pickletools.genops(pkl):
        if op.name in ("GLOBAL", "INST") and not _TENSOR_FILE_GLOBALS.match(arg):
            raise ValueError(f"{path}: unexpected global {arg!r} in a tensor.pt")
        if op.name == "STACK_GLOBAL":
            raise ValueError(f"{path}: STACK_GLOBAL in a tensor.pt")
    return torch.load(path, map_location="cpu", weights_only=False)


def gather(storage_bytes, elsize, shape, stride, offset):
    """The logical elements of a strided view over raw storage bytes, in C order: `elsize`
    bytes an element; `shape`, `stride` and `offset` in elements, as torch stores them."""
    numel = 1
    for s in shape:
        numel *= s
    if numel == 0:
        return b""
    base = np.frombuffer(storage_bytes, dtype=np.dtype((np.void, elsize)))
    view = np.lib.stride_tricks.as_strided(base[offset:], shape=tuple(shape),
                                           strides=tuple(s * elsize for s in stride))
    return np.ascontiguousarray(view).tobytes()


def tensor_bytes(t, byteorder=sys.byteorder):
    """A torch tensor's logical elements in C order, each as its bytes in `byteorder` ('little'
    or 'big'; by default this machine's, i.e. the bytes as they are in memory).

    Dtypes numpy lacks (bfloat16, float8, complex32...) give their raw bits; a conjugated tensor
    gives its stored, un-conjugated values; a quantized one its integer representation. Another
    byte order swaps every element (complex numbers per half)."""
    unit = SWAP_UNIT.get(dtype_name(t.dtype), t.element_size())
    t = t.detach()
    if getattr(t, "is_quantized", False):
        t = t.int_repr()
    if t.is_conj():
        t = t.conj()  # the view without the conj bit: the stored values
    t = t.cpu().contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    try:
        data = t.view(torch.uint8).numpy().tobytes()
    except (RuntimeError, TypeError):
        if t.dtype == torch.bfloat16:
            data = t.view(torch.int16).numpy().tobytes()
        else:
            data = t.numpy().tobytes()
    if byteorder != sys.byteorder:
        data = byteswap(data, unit)
    return data


# torch >= 2.1 reads the `byteorder` record of a zip and swaps big-endian storages on load;
# older torch keeps the bytes as stored (a big-endian checkpoint's values then come out swapped,
# its bytes unchanged).
TORCH_HONOURS_BYTEORDER = tuple(int(x) for x in re.findall(r"\d+", torch.__version__)[:2]) >= (2, 1)


def checkpoint_bytes(t, byteorder):
    """The bytes a checkpoint of `byteorder` holds for `t`, a tensor torch.load gave of it: its
    elements in that order where this torch honours the byteorder record, its memory as it is
    where it does not (then the file's bytes, the values swapped)."""
    return tensor_bytes(t, byteorder if TORCH_HONOURS_BYTEORDER else sys.byteorder)


def storage_of(t):
    """(identity, nbytes) of a torch tensor's storage: tensors over one storage have the same
    identity; nbytes is None when this torch cannot tell."""
    try:
        s = t.untyped_storage()
    except AttributeError:  # torch < 2.0
        s = t.storage()
    try:
        nbytes = s.nbytes()
    except (AttributeError, TypeError, RuntimeError):
        nbytes = None
    return s._cdata, nbytes


# --------------------------------------------------------------------------------------------
# Loading: torch.load with raw object state
# --------------------------------------------------------------------------------------------

class StubObject:
    """An instance of a class that is not imported (missing, or deliberately not run): keeps its
    pickled BUILD state as its __dict__, which is what the flattening rule walks."""

    dump_patches = False  # read by torch's legacy loader for saved nn.Module classes

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif (isinstance(state, tuple) and len(state) == 2
              and isinstance(state[0], (dict, type(None)))):
            self.__dict__.update(state[0] or {})  # (state, slotstate)
            self.__dict__.update(state[1] or {})
        else:
            self.__dict__["__state__"] = state


_stub_classes = {}


def stub_class(module, name):
    """The StubObject subclass standing for `module.name` (one class per name)."""
    key = (module, name)
    if key not in _stub_classes:
        _stub_classes[key] = type(name, (StubObject,), {"__module__": module, "__qualname__": name})
    return _stub_classes[key]


# The "module.name" of every class torch_load could not import and kept as a plain object (a
# caller may report and clear it).
stubbed_names = set()


class StubUnpickler(pickle.Unpickler):
    """An unpickler for torch.load: classes that cannot be imported and nn.Module subclasses
    become stub classes; pre-0.4 `torch.cuda.*Tensor` objects are rebuilt as CPU tensors."""

    def find_class(self, module, name):
        if module == "torch.cuda" and name.endswith("Tensor"):  # pre-0.4 tensor objects
            module = "torch"
        try:
            obj = super().find_class(module, name)
        except (ImportError, AttributeError):
            stubbed_names.add(f"{module}.{name}")
            return stub_class(module, name)
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            return stub_class(module, name)
        return obj


# A stand-in for the pickle module whose Unpickler is StubUnpickler.
_stub_pickle = types.ModuleType("stub_pickle")
_stub_pickle.__dict__.update({k: v for k, v in pickle.__dict__.items() if not k.startswith("__")})
_stub_pickle.Unpickler = StubUnpickler


def torch_load(path):
    """torch.load(path, map_location="cpu") through StubUnpickler (this runs the checkpoint's
    pickle: trusted files only). torch 1.13 ignores torch.load's `pickle_module` argument, so the
    pickle module torch.serialization uses is swapped for the duration of the load."""
    kwargs = {"map_location": "cpu"}
    try:
        if "weights_only" in inspect.signature(torch.load).parameters:
            kwargs["weights_only"] = False
    except (TypeError, ValueError):
        pass
    with mock.patch.object(torch.serialization, "pickle", _stub_pickle):
        return torch.load(str(path), **kwargs)


# --------------------------------------------------------------------------------------------
# Flattening (the rule of `ckptfs inspect` and of the mount)
# --------------------------------------------------------------------------------------------

# The parts of a sparse tensor, in the order torch saves them (torch._utils._rebuild_sparse_tensor
# and _rebuild_sparse_csr_tensor), by layout name; ckptfs shows each as the entry KEY.PART.
SPARSE_PARTS = {
    "sparse_coo": ("indices", "values", "size"),
    "sparse_csr": ("crow_indices", "col_indices", "values", "size"),
    "sparse_bsr": ("crow_indices", "col_indices", "values", "size"),
    "sparse_csc": ("ccol_indices", "row_indices", "values", "size"),
    "sparse_bsc": ("ccol_indices", "row_indices", "values", "size"),
}
# A nested tensor's parts (torch >= 2.0, torch._utils._rebuild_nested_tensor).
NESTED_PARTS = ("buffer", "sizes", "strides", "storage_offsets")


def tensor_parts(t):
    """[(part, object)] of a torch tensor that torch saves as parts (sparse, nested), as ckptfs
    shows them; None for an ordinary (strided) tensor. A size is a torch.Size, as pickled.

    torch 1.13 saves only sparse COO and CSR tensors, the layouts the fixtures hold; the other
    layouts and nested tensors follow the same rule for later torch versions."""
    layout = str(t.layout).removeprefix("torch.")
    if layout in SPARSE_PARTS:
        if layout == "sparse_coo":
            tensors = (t._indices(), t._values())
        elif layout in ("sparse_csr", "sparse_bsr"):
            tensors = (t.crow_indices(), t.col_indices(), t.values())
        else:
            tensors = (t.ccol_indices(), t.row_indices(), t.values())
        return list(zip(SPARSE_PARTS[layout], (*tensors, t.size())))
    if getattr(t, "is_nested", False):
        return list(zip(NESTED_PARTS, (t.values(), t._nested_tensor_size(),
                                       t._nested_tensor_strides(),
                                       t._nested_tensor_storage_offsets())))
    return None


def is_torch_tensor(x):
    """A leaf of the flattening: a torch tensor with its own storage (not sparse, not nested:
    their parts are walked, see children())."""
    return isinstance(x, torch.Tensor) and tensor_parts(x) is None


def key_text(k):
    """A dict key as a flattened key part: strings as they are, anything else as str()."""
    return k if isinstance(k, str) else str(k)


def children(x):
    """The (key part, child) pairs the rule walks below `x`: a dict's items, a list's or
    tuple's items (indices in decimal), an object's state (its __dict__), a sparse or nested
    tensor's parts (tensor_parts); none for other tensors, scalars, strings, bytes, classes and
    numpy values."""
    if isinstance(x, torch.Tensor):
        return tensor_parts(x) or []
    if isinstance(x, dict):
        return [(key_text(k), v) for k, v in x.items()]
    if type(x) in (list, tuple):
        return [(str(i), v) for i, v in enumerate(x)]
    if isinstance(x, (torch.Tensor, str, bytes, int, float, complex, type(None), type,
                      np.ndarray, np.generic)):
        return []
    d = getattr(x, "__dict__", None)
    if isinstance(d, dict):
        return [(key_text(k), v) for k, v in d.items()]
    return []


def contains_tensor(x, is_tensor=is_torch_tensor, seen=None):
    """Whether a tensor stands anywhere below `x` (each object visited once)."""
    if is_tensor(x):
        return True
    seen = set() if seen is None else seen
    if id(x) in seen:
        return False
    seen.add(id(x))
    return any(contains_tensor(v, is_tensor, seen) for _, v in children(x))


def container_kind(x):
    """What `x` is as a container of the children the rule walks, by the name index.json's
    "containers" gives it: "dict", "OrderedDict", "list", "tuple"; "object" for anything else
    (an object's state, a tensor's parts), which `ckptfs pack` does not build."""
    kinds = {dict: "dict", collections.OrderedDict: "OrderedDict", list: "list", tuple: "tuple",
             set: "set", frozenset: "frozenset"}
    return "object" if isinstance(x, torch.Tensor) else kinds.get(type(x), "object")


def root_kind(root, is_tensor=is_torch_tensor):
    """index.json's "root": the kind of the container holding the entries flatten() gives
    (container_kind), or None when the root is one entry (a bare tensor or a value)."""
    if is_tensor(root):
        return None
    if type(root) in (dict, list, collections.OrderedDict) or contains_tensor(root, is_tensor):
        return container_kind(root)
    return None


def flatten(root, is_tensor=is_torch_tensor, with_parts=False, with_containers=False):
    """The entries of a loaded checkpoint, in order: [(key, object)], or with `with_parts`
    [(key, object, parts)], `parts` being the Python keys (and list indices) along the way, and
    with `with_containers` too [(key, object, parts, containers)], `containers` the
    container_kind() of what holds each part.

    Tensors are leaves; a child holding a tensor somewhere below is walked, keyed
    "parent.child"; a subtree without tensors is one value. A bare tensor is the entry "tensor";
    a root that is neither a dict, a list, nor holds a tensor is the entry "value".
    `is_tensor` says what a tensor is (torch tensors by default)."""
    out = []

    def tensor(key, t, parts, kinds):
        out.append((key, t, parts, kinds))
        # A per-channel quantized tensor: its scales and zero points follow as entries.
        for name, part in quantized_parts(t):
            out.append((f"{key}.{name}", part, parts + [Part(name)], kinds + ["object"]))

    def walk(x, prefix, parts, kinds):
        kind = container_kind(x)
        for (k, v), part in zip(children(x), raw_keys(x)):
            key = k if prefix is None else f"{prefix}.{k}"
            here, here_kinds = parts + [part], kinds + [kind]
            if is_tensor(v):
                tensor(key, v, here, here_kinds)
            elif contains_tensor(v, is_tensor):
                walk(v, key, here, here_kinds)
            else:
                out.append((key, v, here, here_kinds))

    if is_tensor(root):
        tensor("tensor", root, [], [])
    elif type(root) in (dict, list, collections.OrderedDict) or contains_tensor(root, is_tensor):
        walk(root, None, [], [])
    else:
        out.append(("value", root, [], []))
    if with_containers:
        return out
    return [e[:3] for e in out] if with_parts else [(k, v) for k, v, _, _ in out]


def quantized_parts(t):
    """[(name, tensor)] of the scales and zero points of a per-channel quantized tensor (torch's,
    or any object with a `quantized_parts` list); [] for others."""
    if isinstance(t, torch.Tensor):
        if t.is_quantized and t.qscheme() in (torch.per_channel_affine,
                                              torch.per_channel_affine_float_qparams):
            return [("q_per_channel_scales", t.q_per_channel_scales()),
                    ("q_per_channel_zero_points", t.q_per_channel_zero_points())]
        return []
    return list(getattr(t, "quantized_parts", []))


def quantization(t, key):
    """meta.json's "quantization" of a tensor saved under `key`: None unless it is quantized
    (a torch tensor, or an object with a `quantization` dict, as make_fixtures' reader makes)."""
    if not isinstance(t, torch.Tensor):
        q = getattr(t, "quantization", None)
        if q is None:
            return None
        q = dict(q)
    elif not t.is_quantized:
        return None
    elif t.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        return {"qscheme": str(t.qscheme()).removeprefix("torch."), "scale": t.q_scale(),
                "zero_point": t.q_zero_point()}
    else:
        # torch saves every per-channel scheme under the per_channel_affine tag
        q = {"qscheme": "per_channel_affine", "axis": t.q_per_channel_axis()}
    if "axis" in q:
        q.update(scales=f"{key}.q_per_channel_scales",
                 zero_points=f"{key}.q_per_channel_zero_points")
    return q


class Part(str):
    """A key part ckptfs names itself (a quantized tensor's "q_per_channel_scales"), not a
    Python key."""


def raw_keys(x):
    """The Python keys of children(x), in the same order: dict keys as they are, positions of a
    list or tuple as ints, an object's attribute names, the parts of a sparse or nested tensor
    (named by ckptfs: Part)."""
    if isinstance(x, torch.Tensor):
        return [Part(name) for name, _ in (tensor_parts(x) or [])]
    if isinstance(x, dict):
        return list(x.keys())
    if type(x) in (list, tuple):
        return list(range(len(x)))
    d = getattr(x, "__dict__", None)
    if isinstance(d, dict) and not isinstance(x, (torch.Tensor, type, np.ndarray, np.generic)):
        # An object standing for a tensor's parts (make_fixtures' SparseDesc) names them Part.
        return [Part(k) if getattr(x, "tensor_parts", False) else k for k in d.keys()]
    return []


def key_part_json(k):
    """A Python key as ckptfs writes it in a key path: str, int, bool and None as JSON does (a
    str by json_text's rule), a float as a number or {"__float__": ...}, bytes as
    {"__bytes__": hex}, a tuple as {"__tuple__": repr}."""
    if isinstance(k, Part):
        return {"__part__": str(k)}
    if type(k) is str:
        return json_text(k)
    if type(k) in (int, bool) or k is None:
        return k
    if type(k) is float:
        return k if np.isfinite(k) else {"__float__": repr(k)}
    if type(k) is bytes:
        return {"__bytes__": k.hex()}
    if type(k) is tuple:
        return {"__tuple__": json_text(repr(k))}
    return {"__key__": json_text(str(k))}


def key_paths(flat):
    """For the entries of flatten(..., with_parts=True): each entry's "key_path" as ckptfs
    writes it in index.json and meta.json, or None where it has none. An entry has one unless it
    is one str key of the root whose text no other entry has: when a part is not a str, when it
    has more or fewer parts than one ([] for a root that is one entry), when another entry has
    the same key text."""
    count = collections.Counter(e[0] for e in flat)
    out = []
    for key, _, parts, *_ in flat:
        needed = count[key] > 1 or len(parts) != 1 or any(type(p) is not str for p in parts)
        out.append([key_part_json(p) for p in parts] if needed else None)
    return out


def key_containers(flat):
    """For the entries of flatten(..., with_containers=True) (or torchscript_flatten's): each
    entry's "containers" as ckptfs writes it beside its key path, or None where it has none
    (no key path, or the key path [])."""
    return [e[3] if path else None for e, path in zip(flat, key_paths(flat))]


# --------------------------------------------------------------------------------------------
# What `ckptfs pack` writes of the nesting (docs/PACK.md)
# --------------------------------------------------------------------------------------------

_LEFT_OUT = object()  # a value pack leaves out (no plain data)


def _exact_key(k):
    """A dict key pack writes as it is: a str, an int of 64 bits, a bool, None, a float, bytes."""
    if type(k) is int:
        return -2**63 <= k < 2**63
    return type(k) in (str, bool, type(None), float, bytes)


def _renamed_apart(items):
    """[(exact, key, obj)] of one container with its flattened keys (exact False) renamed
    "<key>%#<n>" where another key of the container has their text: the exact keys keep
    theirs, then the first flattened key of a text keeps it (docs/NAMES.md's rule)."""
    own = {k for _, k, _ in items if type(k) is str}
    used = {k for exact, k, _ in items if exact and type(k) is str}
    out = []
    for exact, key, obj in items:
        if not exact:
            text, n = key, 2
            while key in used:
                key = f"{text}%#{n}"
                if key in own:
                    key = text
                n += 1
            used.add(key)
        out.append((key, obj))
    return out


def _flat_entries(x, prefix, is_tensor):
    """[(flattened key, object)] of what pack writes below `x` when it does not rebuild it:
    flatten()'s entries under `prefix` (None: relative to `x`), without the values that are no
    plain data and the parts of per-channel quantized tensors (inside them)."""
    if is_tensor(x) or not contains_tensor(x, is_tensor):
        entries = [(prefix, x)]
    else:
        entries = []
        for key, obj, path in flatten(x, is_tensor, with_parts=True):
            if path and isinstance(path[-1], Part) and path[-1] in (
                    "q_per_channel_scales", "q_per_channel_zero_points"):
                continue
            entries.append((key if prefix is None else f"{prefix}.{key}", obj))
    return [(k, v) for k, v in entries if is_tensor(v) or simple_json(v) is not NOT_JSON]


def packed_nesting(root, is_tensor=is_torch_tensor):
    """What torch.load gives of `ckptfs pack SRC OUT.pth` (without --flat) when torch.load of
    SRC gives `root`, by docs/PACK.md's rule:
      - a bare tensor or a plain value: itself; a Parameter its tensor (requires_grad kept,
        as state_dict() gives it: the model does not say Parameter);
      - dicts, OrderedDicts (their attributes too: a state_dict()'s _metadata), lists and tuples
        that hold a tensor somewhere below: rebuilt, of the same types, keys in order; a value
        that is no plain data (simple_json's NOT_JSON) left out, in a list or tuple None in its
        place unless nothing follows it;
      - a dict key that is not a str, an int of 64 bits, a bool, None, a float or bytes (a
        tuple): its text, a str, the entries below it flattened from there into that dict;
      - anything else holding a tensor (an object, a sparse tensor's parts): an OrderedDict of
        flatten()'s entries below it, under their keys relative to it;
      - flattened keys that another key of their container has: "<key>%#<n>"."""
    def tensor(t):
        # A Parameter is written as its tensor, requires_grad kept: what state_dict() gives.
        if isinstance(t, torch.nn.Parameter):
            return t.detach().requires_grad_(t.requires_grad)
        return t

    if is_tensor(root):
        return tensor(root)
    if not (type(root) in (dict, list, collections.OrderedDict)
            or contains_tensor(root, is_tensor)):
        return root

    def child(v):
        if is_tensor(v):
            return tensor(v)
        if contains_tensor(v, is_tensor):
            return container(v)
        return v if simple_json(v) is not NOT_JSON else _LEFT_OUT

    def container(x):
        kind = container_kind(x)
        if kind in ("list", "tuple"):
            items = [child(v) for v in x]
            while items and items[-1] is _LEFT_OUT:
                items.pop()
            items = [None if v is _LEFT_OUT else v for v in items]
            return items if kind == "list" else tuple(items)
        if kind in ("dict", "OrderedDict"):
            items = []
            for k, v in x.items():
                if _exact_key(k):
                    c = child(v)
                    if c is not _LEFT_OUT:
                        items.append((True, k, c))
                else:
                    items += [(False, key, tensor(obj) if is_tensor(obj) else obj)
                              for key, obj in _flat_entries(v, key_text(k), is_tensor)]
            out = collections.OrderedDict() if kind == "OrderedDict" else {}
            out.update(_renamed_apart(items))
            if kind == "OrderedDict":
                out.__dict__.update(vars(x))
            return out
        # Anything else (an object, a sparse tensor): an OrderedDict of its flattened keys.
        return collections.OrderedDict(_renamed_apart(
            [(False, k, tensor(v) if is_tensor(v) else v)
             for k, v in _flat_entries(x, None, is_tensor)]))

    return container(root)


def nesting_difference(got, want, byteorder="little", where="root", tensors=None,
                       attributes=True, value_types=True):
    """The first way `got` (torch.load of a packed file) differs from `want` (packed_nesting()
    of the source, or another torch.load): the type of every container and value, keys (with
    their types) and their order, an OrderedDict's attributes, each tensor's dtype, shape,
    strides, storage offset, requires_grad and bytes (`want`'s as checkpoint_bytes() gives them
    for a checkpoint of `byteorder`), values by same_value(); None when they are the same.
    `tensors`, a list, gets the (got, want) pairs of tensors compared. Without `attributes`,
    attributes are not compared; without `value_types`, values are compared up to the types
    value.json does not tell apart (what a split directory's values keep)."""
    stack = [(got, want, where)]
    while stack:
        g, w, at = stack.pop()
        if not isinstance(w, torch.Tensor) and not contains_tensor(w):
            # A value: as a whole.
            if not same_value(g, w, types=value_types):
                return f"{at}: {show(g)}, not {show(w)}"
            continue
        if type(g) is not type(w):
            return f"{at}: a {type(g).__name__}, not a {type(w).__name__}"
        if isinstance(w, torch.Tensor):
            for what in ("dtype", "shape", "requires_grad"):
                if getattr(g, what) != getattr(w, what):
                    return f"{at}: {what} {getattr(g, what)}, not {getattr(w, what)}"
            if g.stride() != w.stride() or g.storage_offset() != w.storage_offset():
                return f"{at}: strides or storage offset differ"
            if tensor_bytes(g, byteorder) != checkpoint_bytes(w, byteorder):
                return f"{at}: bytes differ"
            if tensors is not None:
                tensors.append((g, w))
        elif isinstance(w, dict):
            if list(g) != list(w) or [type(k) for k in g] != [type(k) for k in w]:
                return f"{at}: keys {show(list(g))}, not {show(list(w))}"
            if attributes and hasattr(w, "__dict__") and vars(g) != vars(w):
                return f"{at}: attributes {show(vars(g))}, not {show(vars(w))}"
            stack += [(g[k], w[k], f"{at}[{k!r}]") for k in reversed(list(w))]
        elif type(w) in (list, tuple):
            if len(g) != len(w):
                return f"{at}: {len(g)} items, not {len(w)}"
            stack += [(x, y, f"{at}[{i}]") for i, (x, y) in reversed(list(enumerate(zip(g, w))))]
        else:
            return f"{at}: a {type(w).__name__} holding tensors, which pack does not write"
    return None


# --------------------------------------------------------------------------------------------
# TorchScript archives (torch.jit.save)
# --------------------------------------------------------------------------------------------

def torchscript_prefix(path):
    """The record prefix of a TorchScript archive (a zip whose `<prefix>/constants.pkl` exists,
    which is how torch.load tells one), or None for any other file."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except (zipfile.BadZipFile, OSError):
        return None
    if not names:
        return None
    prefix = names[0].split("/")[0]
    return prefix if f"{prefix}/constants.pkl" in names else None


class _RenamedRecords:
    """torch's own zip reader, with torch.serialization._load's `data/<key>` storages read from
    another directory (constants.pkl's storages are `constants/<key>`)."""

    def __init__(self, reader, directory):
        self._reader, self._directory = reader, directory

    def get_storage_from_record(self, name, *args):
        if name.startswith("data/"):
            name = self._directory + name[len("data/"):]
        return self._reader.get_storage_from_record(name, *args)

    def __getattr__(self, name):
        return getattr(self._reader, name)


def _torchscript_pickle(path, pickle_file, directory):
    """A pickle of a TorchScript archive loaded by torch's own torch.serialization._load (torch
    reads and rebuilds every tensor from its record), TorchScript classes kept as StubObjects
    holding their pickled state (runs the archive's pickle: trusted files only)."""
    reader = _RenamedRecords(torch._C.PyTorchFileReader(str(path)), directory)
    return torch.serialization._load(reader, "cpu", _stub_pickle, pickle_file=pickle_file)


def _tensor_leaves(x, parts, out, seen, kinds):
    """The tensors below `x` in flatten's order, tensors only: (key parts, tensor, containers)
    of dict items, list and tuple positions, an object's dict state by its keys, or its other
    state as the part "__state__"; a per-channel quantized tensor is followed by its scales and
    zero points. `kinds`: the containers of `parts`."""
    if isinstance(x, torch.Tensor):
        out.append((parts, x, kinds))
        for name, part in quantized_parts(x):
            out.append((parts + [Part(name)], part, kinds + ["object"]))
        return
    if id(x) in seen:
        return
    seen.add(id(x))
    if isinstance(x, dict):
        children = list(x.items())
    elif type(x) in (list, tuple):
        children = list(enumerate(x))
    elif isinstance(x, StubObject):
        d = x.__dict__
        children = ([(Part("__state__"), d["__state__"])] if list(d) == ["__state__"]
                    else list(d.items()))
    else:
        children = []
    kind = container_kind(x)
    for k, v in children:
        _tensor_leaves(v, parts + [k], out, seen, kinds + [kind])
    seen.discard(id(x))


def _state_of(stub):
    d = stub.__dict__ if isinstance(stub, StubObject) else {}
    return {} if list(d) == ["__state__"] else d


def torchscript_flatten(path, with_containers=False):
    """The entries ckptfs gives a TorchScript archive, computed with torch:
    [(key, tensor, parts, group)] in order, group being "state_dict", "constants" or
    "attributes" (with `with_containers`, then the containers of `parts`, container_kind()'s,
    modules and the parts ckptfs names being "object"):
      - torch.jit.load(path).state_dict(): its keys, in its order;
      - constants.pkl's tensors as "constants.N" (torch's _load over the constants/ records);
      - every other tensor of data.pkl under "attributes." + the module path + the attribute
        (then positions, keys, "__state__"), modules' other attributes before their submodules'.
    Every tensor comes from torch's own _load of data.pkl (so that tensors over one storage
    share it, as in the file); each state_dict one is checked against torch.jit.load's (dtype,
    layout, requires_grad, values): an AssertionError says where they differ."""
    prefix = torchscript_prefix(path)
    if prefix is None:
        raise ValueError(f"{path}: not a TorchScript archive")
    module = torch.jit.load(str(path), map_location="cpu")
    root = _torchscript_pickle(path, "data.pkl", "data/")
    constants = _torchscript_pickle(path, "constants.pkl", "constants/")
    out = []

    def tensor(key, t, parts, group, kinds):
        out.append((key, t, parts, group, kinds))
        for name, part in quantized_parts(t):
            out.append((f"{key}.{name}", part, parts + [Part(name)], group, kinds + ["object"]))

    for key, jit_tensor in module.state_dict(keep_vars=True).items():
        stub, names = root, key.split(".")
        for name in names[:-1]:
            stub = _state_of(stub)[name]
        t = _state_of(stub)[names[-1]]
        assert isinstance(t, torch.Tensor), f"{key}: not a tensor in data.pkl"
        assert (t.dtype, t.shape, t.stride(), t.storage_offset(), t.requires_grad) == (
            jit_tensor.dtype, jit_tensor.shape, jit_tensor.stride(), jit_tensor.storage_offset(),
            jit_tensor.requires_grad), f"{key}: torch.jit.load and data.pkl disagree"
        assert tensor_bytes(t) == tensor_bytes(jit_tensor), f"{key}: values differ"
        tensor(key, t, names, "state_dict", ["object"] * len(names))
    assert isinstance(constants, tuple), "constants.pkl is not a tuple"
    leaves = []
    _tensor_leaves(constants, [Part("constants")], leaves, set(), ["object"])
    for parts, t, kinds in leaves:
        out.append((".".join(map(str, parts)), t, parts, "constants", kinds))

    leaves = []

    def attributes(m, stub, parts):
        state = stub.__dict__ if isinstance(stub, StubObject) else {}
        taken = set(m._modules.keys())
        taken |= {k for k, v in m._parameters.items() if isinstance(v, torch.Tensor)}
        taken |= {k for k, v in m._buffers.items() if isinstance(v, torch.Tensor)}
        kinds = ["object"] * len(parts)  # modules, below the part "attributes"
        if list(state) == ["__state__"]:
            _tensor_leaves(stub, parts, leaves, set(), kinds)
            return
        for name, value in state.items():
            if name not in taken:
                _tensor_leaves(value, parts + [name], leaves, set(), kinds + ["object"])
        for name, sub in m._modules.items():
            if sub is not None:
                attributes(sub, state.get(name), parts + [name])

    attributes(module, root, [Part("attributes")])
    for parts, t, kinds in leaves:
        out.append((".".join(map(str, parts)), t, parts, "attributes", kinds))
    return out if with_containers else [e[:4] for e in out]


def torchscript_key_paths(flat):
    """key_paths() of torchscript_flatten()'s entries, each group on its own (as ckptfs finds
    shared texts within the walk that made them)."""
    out = [None] * len(flat)
    for group in ("state_dict", "constants", "attributes"):
        where = [i for i, e in enumerate(flat) if e[3] == group]
        paths = key_paths([flat[i][:3] for i in where])
        for i, p in zip(where, paths):
            out[i] = p
    return out


def torchscript_key_containers(flat):
    """key_containers() of torchscript_flatten(..., with_containers=True)'s entries."""
    return [e[4] if path else None for e, path in zip(flat, torchscript_key_paths(flat))]


# --------------------------------------------------------------------------------------------
# Values as JSON
# --------------------------------------------------------------------------------------------

NOT_JSON = object()  # what simple_json returns for a value that is no plain data
# The first keys of value.json's objects that describe what is no plain data (docs/VALUES.md).
OPAQUE_MARKERS = ("__class__", "__global__", "__persistent_id__", "__truncated__",
                  "__recursion__")
# The numpy scalars value.json writes as numbers (little-endian, these sizes).
NUMPY_JSON_CODES = ("f8", "f4", "i8", "i4", "i2", "i1", "u8", "u4", "u2", "u1", "b1")


def json_text(s):
    """A str as ckptfs's JSON holds it: a byte of its UTF-8 (with surrogates passed) that is not
    valid UTF-8 is the escape \\udcXX of that byte (Python's surrogateescape), as the README
    says; what json.loads of that JSON gives."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "surrogateescape")


def text_of_json(s):
    """json_text undone: the str a JSON string of ckptfs stands for."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "surrogatepass")


def _marker_like(key):
    return len(key) >= 4 and key.startswith("__") and key.endswith("__")


def simple_json(v):
    """value.json's JSON of a plain value, by its rule (docs/VALUES.md), or NOT_JSON for what is
    no plain data (an object of some class; value.json describes those with "__class__" and its
    kin). None, bools, ints (past 1024 bytes {"__int__": "0x.."}), floats ({"__float__": "nan"}
    for the three JSON lacks), str; bytes and bytearray as {"__bytes__"/"__bytearray__": hex};
    lists as arrays; tuples (and torch.Size), sets, frozensets as {"__tuple__"/"__set__"/
    "__frozenset__": [...]}; dicts and OrderedDicts as objects when every key is a str that
    neither starts nor ends with "__"... both, else {"__dict__": [[key, value], ...]}; numpy
    scalars of NUMPY_JSON_CODES as numbers."""
    if v is None or type(v) is bool:
        return v
    if type(v) is str:
        return json_text(v)
    if type(v) is int:
        if len(pickle.encode_long(v)) > 1024:  # as the pickle holds it: Python's json refuses
            digits = format(abs(v), "x")      # numbers of more than 4300 digits
            return {"__int__": ("-" if v < 0 else "") + "0x" + "0" * (len(digits) % 2) + digits}
        return v
    if type(v) is float:
        return v if np.isfinite(v) else {"__float__": repr(v)}
    if type(v) is bytes:
        return {"__bytes__": v.hex()}
    if type(v) is bytearray:
        return {"__bytearray__": v.hex()}
    if isinstance(v, np.generic) and not isinstance(v, np.ndarray):
        if v.dtype.byteorder == ">" or v.dtype.str[1:] not in NUMPY_JSON_CODES:
            return NOT_JSON
        return simple_json(v.item())
    marker = {list: None, tuple: "__tuple__", torch.Size: "__tuple__", set: "__set__",
              frozenset: "__frozenset__"}
    if type(v) in marker:
        items = [simple_json(i) for i in v]
        if any(i is NOT_JSON for i in items):
            return NOT_JSON
        return items if marker[type(v)] is None else {marker[type(v)]: items}
    if type(v) in (dict, collections.OrderedDict):
        items = [(simple_json(k), simple_json(i)) for k, i in v.items()]
        if any(k is NOT_JSON or i is NOT_JSON for k, i in items):
            return NOT_JSON
        if all(type(k) is str and not _marker_like(k) for k in v):
            return dict(items)  # the keys escaped by json_text
        return {"__dict__": [[k, i] for k, i in items]}
    return NOT_JSON


class NotPlain(ValueError):
    """value.json describes something that is no plain data."""


def _hashable(v):
    try:
        hash(v)
        return True
    except TypeError:
        return False


def value_from_json(j):
    """The Python value a value.json says, by its rule (what ckptfs pack and the RFC layout
    write from it): the inverse of simple_json up to equal types (an OrderedDict comes back a
    dict, a numpy scalar an int, float or bool, a torch.Size a tuple). Raises NotPlain for what
    describes no plain data (OPAQUE_MARKERS, and any other object whose keys start and end
    with "__" but these: __float__ __int__ __bytes__ __bytearray__ __tuple__ __set__ __frozenset__
    __dict__)."""
    if isinstance(j, list):
        return [value_from_json(i) for i in j]
    if isinstance(j, str):
        return text_of_json(j)
    if not isinstance(j, dict):
        return j
    if not any(_marker_like(k) for k in j):
        return {text_of_json(k): value_from_json(i) for k, i in j.items()}
    if len(j) != 1:
        raise NotPlain(f"an object with a marker among other keys: {list(j)[:3]}")
    (marker, body), = j.items()
    if marker == "__float__" and body in ("nan", "inf", "-inf"):
        return float(body)
    if marker == "__int__" and isinstance(body, str):
        return int(body, 16)
    if marker in ("__bytes__", "__bytearray__") and isinstance(body, str):
        return (bytes if marker == "__bytes__" else bytearray).fromhex(body)
    if marker in ("__tuple__", "__set__", "__frozenset__") and isinstance(body, list):
        items = [value_from_json(i) for i in body]
        if marker == "__tuple__":
            return tuple(items)
        if not all(_hashable(i) for i in items):
            raise NotPlain(f"a {marker} item Python cannot hash")
        return set(items) if marker == "__set__" else frozenset(items)
    if marker == "__dict__" and isinstance(body, list):
        out = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise NotPlain(f"a __dict__ item that is no [key, value] pair: {pair!r:.80}")
            key = value_from_json(pair[0])
            if not _hashable(key):
                raise NotPlain(f"a __dict__ key Python cannot hash: {key!r:.80}")
            out[key] = value_from_json(pair[1])
        return out
    raise NotPlain(f"{marker} describes no plain data")


def same_value(a, b, types=True):
    """Equality of plain values that also tells bools from ints from floats, lists from tuples,
    bytes from bytearrays (nan equals nan); with types=False, the types value.json cannot tell
    apart count as one: OrderedDict and dict, torch.Size and tuple, numpy scalars and the Python
    scalar of the same value."""
    if not types:
        if isinstance(a, np.generic):
            a = a.item()
        if isinstance(b, np.generic):
            b = b.item()
        kinds = {collections.OrderedDict: dict, torch.Size: tuple}
        ta, tb = kinds.get(type(a), type(a)), kinds.get(type(b), type(b))
    else:
        ta, tb = type(a), type(b)
    if ta is not tb:
        return False
    if isinstance(a, float):
        return a == b or (a != a and b != b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y, types) for x, y in zip(a, b))
    if isinstance(a, (set, frozenset)):
        return len(a) == len(b) and all(any(same_value(x, y, types) for y in b) for x in a)
    if isinstance(a, dict):
        if list(a) != list(b) and set(a) != set(b):
            return False
        return all(any(same_value(k, j, types) and same_value(a[k], b[j], types) for j in b)
                   for k in a)
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    return a == b


def show(v, limit=200):
    """repr(v) cut at `limit` characters, for messages (an int too long for repr() included)."""
    try:
        text = repr(v)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        return f"<{type(v).__name__} too long to show>"
    return text if len(text) <= limit else text[:limit] + "..."


def value_entry(key, v):
    """The entry of a value (not a tensor) as `ckptfs inspect --json` and expected.json give it:
    {"key", "kind": "value"}, with "value" when it is plain data (simple_json)."""
    e = {"key": key, "kind": "value"}
    j = simple_json(v)
    if j is not NOT_JSON:
        e["value"] = j
    return e


def has_opaque(j):
    """True when ckptfs's JSON holds something it could not evaluate (an object whose first key
    is one of OPAQUE_MARKERS: the result of a call ckptfs never runs, which torch.load did run;
    a value cut at ckptfs's limits)."""
    if isinstance(j, dict):
        if j and next(iter(j)) in OPAQUE_MARKERS:
            return True
        return any(has_opaque(v) for v in j.values())
    if isinstance(j, list):
        return any(has_opaque(v) for v in j)
    return False


def json_equal(a, b):
    """Equality of JSON values that tells bools from ints and ints from floats; the items of
    {"__set__": ...} and {"__frozenset__": ...} in any order (a set's order is its process's)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return False
        if len(a) == 1 and next(iter(a)) in ("__set__", "__frozenset__"):
            (x,), (y,) = a.values(), b.values()
            return (isinstance(x, list) and isinstance(y, list) and len(x) == len(y)
                    and all(any(json_equal(i, k) for k in y) for i in x))
        return all(json_equal(a[k], b[k]) for k in a)
    return a == b


# --------------------------------------------------------------------------------------------
# Directory names
# --------------------------------------------------------------------------------------------

def fnv1a64(data):
    """The FNV-1a 64-bit hash of bytes."""
    h = 0xCBF29CE484222325
    for c in data:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# The files of a mount's .ckptfs folder (the default layout, one model.safetensors).
VIEW_FILES = ("index.json", "model.safetensors")

_RESERVED = {b"", b"index.json", b"map", b"model.safetensors", b"model.safetensors.index.json"}


def _reserved(raw):
    """Whether a key's name gets a '%' in front: a hidden name (".", "..", ".ckptfs"...), the
    empty one, map.pt's, or a name the root's views had before they moved into .ckptfs."""
    if raw in _RESERVED or raw.startswith(b"."):
        return True
    m = re.fullmatch(rb"model-([0-9]+)-of-([0-9]+)\.safetensors", raw)
    return m is not None


def _escaped(raw):
    """The escaped name of a key's bytes, and where a cut keeps at most 200 bytes."""
    name = bytearray(b"%" if _reserved(raw) else b"")
    cut = 0
    for c in raw:
        if c & 0xC0 != 0x80 and len(name) <= 200:  # a character starts here
            cut = len(name)
        name += {0x25: b"%25", 0x2F: b"%2F", 0: b"%00"}.get(c, bytes([c]))
    if len(name) <= 200:
        cut = len(name)
    return bytes(name), cut


def _cut(name, cut, raw):
    return name[:cut] + b"%~" + f"{fnv1a64(raw):016x}".encode()


def directory_name(key):
    """The directory name of a key: '%' -> %25, '/' -> %2F, NUL -> %00; a name starting with
    '.' and the names '', 'index.json', 'map', 'model.safetensors',
    'model.safetensors.index.json', 'model-N-of-M.safetensors' get a '%' in front; past 255
    bytes: the first 200 bytes (cut where a character starts) + '%~' + FNV-1a 64 of the key in
    16 hex digits."""
    raw = key.encode("utf-8", "surrogatepass")
    name, cut = _escaped(raw)
    if len(name) > 255:
        name = _cut(name, cut, raw)
    return name.decode("utf-8", "surrogateescape")


def entry_names(keys, max_bytes=255):
    """The names of the keys of a mount, in order: directory_name(), and for a name an earlier
    key already has, '%#2', '%#3'... (the smallest number free for which "<key>%#<n>" is no
    key's own text, as pack's keys: docs/NAMES.md), cut when it passes `max_bytes` (255; 252 in
    the RFC layout, whose files add ".pt": see rfc_file_names())."""
    own = set(keys)
    taken, out = set(), []
    for key in keys:
        raw = key.encode("utf-8", "surrogatepass")
        name, cut = _escaped(raw)
        plain = name if len(name) <= max_bytes else _cut(name, cut, raw)
        n, candidate = 1, plain
        while candidate in taken:
            n += 1
            if f"{key}%#{n}" in own:
                continue
            suffix = f"%#{n}".encode()
            candidate = (plain + suffix if len(plain) + len(suffix) <= max_bytes
                         else _cut(name, cut, raw) + suffix)
        taken.add(candidate)
        out.append(candidate.decode("utf-8", "surrogateescape"))
    return out


def rfc_file_names(keys):
    """The file names of keys in the RFC layout (-o layout=rfc), in order: the naming rule of
    entry_names() within 252 bytes, then ".pt". `keys` are those of the entries with a file
    (map.pt's): the others take no name."""
    return [name + ".pt" for name in entry_names(keys, 252)]


