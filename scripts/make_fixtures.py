#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes the checkpoint fixtures of the integration tests, and what a correct reader reports.

Usage:
    /usr/bin/python3 scripts/make_fixtures.py OUTDIR         # OUTDIR/*.pth + OUTDIR/*.expected.json
    /usr/bin/python3 scripts/make_fixtures.py --sample PATH  # tests/data/sample.pth

Needs Debian's python3-torch (1.13) and numpy; everything else is the standard library. Without
them it exits 77 (test harnesses' "skipped"), saying so. The output is deterministic: fixed
seeds, no timestamps, legacy storage keys (heap pointers) rewritten.

Each `<name>.expected.json` is computed from the objects that were saved (never typed by hand):
    {"format": "zip"|"legacy"|"torchscript", "byteorder": "little"|"big", "entries": [...]}
with one entry per flattened item (the rule is ckptfs_reference.flatten, that of `ckptfs inspect`):
    {"key", "kind": "tensor", "dtype", "shape", "stride", "storage_offset", "requires_grad",
     "nbytes", "contiguous", "shared_with", "sha256"}
    {"key", "kind": "value"[, "value"]}      ("value" only when JSON can hold it)
sha256 is over the tensor's logical elements in C order, each as the bytes stored in the FILE
(big-endian in bigendian.pth; raw bytes for float8/complex32/...; un-conjugated for conj tensors).

Fixtures:
    convnet     state_dict of a small convnet (Conv2d, BatchNorm2d with 0-d int64, Linear)
    dtypes      every dtype torch 1.13 saves, each 0-d, (0,), (2,0,3), 1-d and 3-d
    views       tied weights, views at offsets, transposed, stepped, expanded (stride 0),
                permuted, channels_last, a small view of a big storage, an empty view at the end
    training    model + Adam (2 steps) + StepLR + epoch + args + Namespaces + rng_state + best
    keys        awkward keys: '/', '%', '.', '..', '', unicode, emoji, 300 chars, newline, ints
    params      nn.Parameter with requires_grad True and False, a requires_grad leaf tensor
    module      torch.save of a whole nn.Module whose class (make_fixtures.TinyNet) readers lack
    bare        a tensor as the root
    sparse      sparse COO (coalesced, uncoalesced, hybrid, empty) and CSR tensors: their parts
    zip64       re-zipped by Python's zipfile with force_zip64 (zip64 local extras)
    zip64_cd    the same with zip64 extras in the central directory too, and a zip64 EOCD
    legacy      _use_new_zipfile_serialization=False, shared storages and views
    bigendian   what torch >= 2.1 writes on s390x: byte-swapped storages, byteorder 'big'
    new_dtypes  torch >= 2.7 layout: _rebuild_tensor_v3 + UntypedStorage for float8*, uint16/32/64,
                complex32, bits8; two dtypes over one storage; Parameter with state; conj
    ts_script   torch.jit.script of TSNet: conv/bn/linear, Sequential, ModuleList, ModuleDict,
                ParameterList, buffers persistent, not persistent and None, a tied parameter, one
                module under two names, a frozen parameter, plain tensor attributes (one set
                before Module.__init__), a TorchScript class holding a tensor, List/Dict of
                tensors, an LSTM, buffers of several dtypes, a transposed view, an empty buffer
    ts_trace    torch.jit.trace of TSTraced: tensor constants in constants.pkl
    ts_quantized torch.jit.script of a dynamically quantized model (qint8 per tensor and per
                channel): the weights are packed parameters, outside state_dict()
    ts_frozen   torch.jit.freeze: every weight a constant, state_dict() empty
    ts_layout2x ts_script re-zipped as torch 2.x lays archives out (byteorder, .data/version,
                .data/serialization_id), code records stored
The expected entries of a TorchScript archive are torch's own reading (ckptfs_reference's
torchscript_flatten): torch.jit.load(f).state_dict()'s keys and order, then constants.pkl and the
other tensors of data.pkl as torch.serialization._load rebuilds them from the records.

and the safetensors files and Hugging Face sharded sets of scripts/safetensors_fixtures.py
(st_dtypes, st_mlx, st_keys, st_empty, sharded_st/, sharded_bin/), whose expected.json has its
own form (see there).

Fixtures torch 1.13 cannot write (bigendian.pth, new_dtypes.pth) are assembled here: a zip writer
that lays records out exactly as torch's miniz writer does (the 'FB' padding field, 64-byte
aligned payloads, data descriptors, zip64 end records), and a protocol-2 pickle assembler. torch
1.13 can load all but new_dtypes.pth and zip64_cd.pth (see the comment where it is written).

Self-checks before exiting 0: every fixture torch 1.13 can load is loaded and must describe exactly
as expected; every fixture but the TorchScript ones is re-read by an independent reference reader
in this file (zipfile or the legacy stream + a stub unpickler + byte gathering from the file) that
must agree too (a TorchScript archive's state_dict tensors are checked against torch.jit.load's
instead, and what its fixtures exist to show is asserted); the zip writer and the pickle
assembler reproduce torch's own output byte for byte.
"""

import argparse
import collections
import copy
import functools
import hashlib
import io
import json
import os
import pickle
import pickletools
import struct
import sys
import warnings
import zipfile
import zlib
from pathlib import Path

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as _e:
    if __name__ != "__main__":
        raise
    # 77: what test harnesses (ctest's SKIP_RETURN_CODE in tests/CMakeLists.txt) take for
    # "skipped": a machine without torch cannot make the fixtures, nor run what needs them.
    print(f"SKIPPED: make_fixtures.py needs torch and numpy for {sys.executable} ({_e})",
          file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import ckptfs_reference as ref  # noqa: E402  (beside this script)
import safetensors_fixtures  # noqa: E402  (beside this script)

warnings.filterwarnings("ignore")

# --------------------------------------------------------------------------------------------
# dtypes (the tables and the byte-level helpers are in ckptfs_reference)
# --------------------------------------------------------------------------------------------

# Legacy storage class name -> (dtype name, element size); UntypedStorage counts bytes.
STORAGE_CLASSES = {
    "FloatStorage": ("float32", 4),
    "DoubleStorage": ("float64", 8),
    "HalfStorage": ("float16", 2),
    "BFloat16Storage": ("bfloat16", 2),
    "LongStorage": ("int64", 8),
    "IntStorage": ("int32", 4),
    "ShortStorage": ("int16", 2),
    "CharStorage": ("int8", 1),
    "ByteStorage": ("uint8", 1),
    "BoolStorage": ("bool", 1),
    "ComplexFloatStorage": ("complex64", 8),
    "ComplexDoubleStorage": ("complex128", 16),
    "QInt8Storage": ("qint8", 1),
    "QUInt8Storage": ("quint8", 1),
    "QInt32Storage": ("qint32", 4),
    "UntypedStorage": ("uint8", 1),
}


def torch_is_contiguous(shape, stride):
    """torch's Tensor.is_contiguous() for the default memory format."""
    if any(s == 0 for s in shape):
        return True
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1:
            if st != expected:
                return False
            expected *= size
    return True


# --------------------------------------------------------------------------------------------
# Expected entries (the flattening rule, the contract of `ckptfs inspect`, is ref.flatten)
# --------------------------------------------------------------------------------------------

class TensorDesc:
    """A tensor as a reader sees it in a file, or as this script writes it by hand."""

    def __init__(self, dtype, shape, stride, offset, storage_key, storage_bytes,
                 requires_grad=False, conj=False):
        self.dtype, self.shape, self.stride = dtype, list(shape), list(stride)
        self.offset, self.storage_key, self.storage_bytes = offset, storage_key, storage_bytes
        self.requires_grad, self.conj = requires_grad, conj
        self.quantization = None  # meta.json's "quantization" (without the parts' keys)
        self.quantized_parts = []  # per-channel: [(name, TensorDesc)] of scales, zero points

    def with_requires_grad(self, rg):
        c = copy.copy(self)
        c.requires_grad = bool(rg)
        return c


def is_tensor(x):
    """A leaf of the flattening here: a torch tensor with its own storage (ref.is_torch_tensor:
    not sparse, whose parts are walked), or a TensorDesc."""
    return isinstance(x, TensorDesc) or ref.is_torch_tensor(x)


def storage_identity(t):
    if isinstance(t, TensorDesc):
        return ("desc", t.storage_key)
    return ("torch", ref.storage_of(t)[0])


def tensor_entry(t, byteorder):
    """The expected description of a tensor; `byteorder` is the byte order of the file."""
    if isinstance(t, TensorDesc):
        elsize = ref.DTYPE_SIZES[t.dtype]
        data = ref.gather(t.storage_bytes, elsize, t.shape, t.stride, t.offset)
        d = dict(dtype=t.dtype, shape=t.shape, stride=t.stride, storage_offset=t.offset,
                 requires_grad=bool(t.requires_grad))
    else:
        d = dict(dtype=ref.dtype_name(t.dtype), shape=list(t.shape), stride=list(t.stride()),
                 storage_offset=t.storage_offset(), requires_grad=bool(t.requires_grad))
        elsize = t.element_size()
        data = ref.tensor_bytes(t, byteorder)
    numel = 1
    for s in d["shape"]:
        numel *= s
    d["nbytes"] = numel * elsize
    assert len(data) == d["nbytes"], (d, len(data))
    d["contiguous"] = torch_is_contiguous(d["shape"], d["stride"])
    d["sha256"] = hashlib.sha256(data).hexdigest()
    return d


def describe(root, fmt, byteorder):
    """The expected.json document for an object that a reader will see as `root`."""
    entries, idents = [], []
    flat = ref.flatten(root, is_tensor, with_containers=True)
    for (key, obj, *_), key_path, containers in zip(flat, ref.key_paths(flat),
                                                    ref.key_containers(flat)):
        key = ref.json_text(key)  # as ckptfs's JSON holds it (the \udcXX rule)
        if is_tensor(obj):
            e = {"key": key, "kind": "tensor"}
            e.update(tensor_entry(obj, byteorder))
            q = ref.quantization(obj, key)
            if q is not None:
                e["quantization"] = q
            entries.append(e)
            idents.append(storage_identity(obj))
        else:
            entries.append(ref.value_entry(key, obj))
            idents.append(None)
        if key_path is not None:
            entries[-1]["key_path"] = key_path
        if containers:
            entries[-1]["containers"] = containers
    for i, e in enumerate(entries):
        if e["kind"] == "tensor":
            e["shared_with"] = [entries[j]["key"] for j in range(len(entries))
                                if j != i and idents[j] is not None and idents[j] == idents[i]]
    return {"format": fmt, "byteorder": byteorder, "root": ref.root_kind(root, is_tensor),
            "entries": entries}



# --------------------------------------------------------------------------------------------
# A zip writer with torch's (miniz's) layout
# --------------------------------------------------------------------------------------------

def torch_zip(entries, alignment=64):
    """Zip bytes laid out like torch's writer: stored, LFH sizes 0 + data descriptors, 'FB'
    padding so every payload starts at a multiple of `alignment`, DOS time 0, zip64 EOCD."""
    out = bytearray()
    central = []
    for name, data in entries:
        nb = name.encode("utf-8")
        lho = len(out)
        pad = (-(lho + 30 + len(nb) + 4)) % alignment
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        flags = 0x0808 if data else 0x0800
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0, len(nb),
                           len(extra))
        out += nb + extra
        assert len(out) % alignment == 0
        out += data
        crc = zlib.crc32(data)
        if data:
            out += struct.pack("<IIII", 0x08074B50, crc, len(data), len(data))
        central.append((nb, flags, crc, len(data), lho))
    cd_off = len(out)
    for nb, flags, crc, size, lho in central:
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0, 0, flags, 0, 0, 0, crc, size, size,
                           len(nb), 0, 0, 0, 0, 0, lho)
        out += nb
    cd_size = len(out) - cd_off
    n = len(central)
    z64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, n, n, cd_size, cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, cd_size, cd_off, 0)
    return bytes(out)


def read_zip_records(data):
    """[(name, bytes)] in central-directory order."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def serialization_id(records):
    """A deterministic stand-in for torch's `.data/serialization_id` (40 decimal digits)."""
    h = hashlib.sha256()
    crc = 0
    for name, data in records:
        h.update(name.encode())
        crc = zlib.crc32(data, crc)
    return f"{int(h.hexdigest()[:16], 16) % 10**20:020d}{crc:020d}"


def python_rezip(data, force_zip64=True, zip64_everywhere=False):
    """Rewrites a zip with Python's zipfile, ZIP_STORED, zip64 local extras on every entry.
    With `zip64_everywhere`, zipfile's ZIP64 limit is lowered to 0 while writing, so the
    central directory also carries zip64 extras (sizes and offsets) and a zip64 EOCD is written."""
    records = read_zip_records(data)
    out = io.BytesIO()
    saved_limit = zipfile.ZIP64_LIMIT
    try:
        if zip64_everywhere:
            zipfile.ZIP64_LIMIT = 0
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
            for name, payload in records:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_STORED
                with zf.open(info, "w", force_zip64=force_zip64) as w:
                    w.write(payload)
    finally:
        zipfile.ZIP64_LIMIT = saved_limit
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# A protocol-2 pickle assembler (the opcodes CPython's pickler emits for torch.save)
# --------------------------------------------------------------------------------------------

class G:
    """GLOBAL module name."""

    def __init__(self, module, name):
        self.module, self.name = module, name


class R:
    """REDUCE: func(*args). The same R object pickled twice becomes a memo BINGET."""

    def __init__(self, func, args):
        self.func, self.args = func, tuple(args)


class PID:
    """BINPERSID of a tuple."""

    def __init__(self, pid):
        self.pid = tuple(pid)


def ordered_dict():
    """`collections.OrderedDict()`, as torch pickles backward_hooks."""
    return R(G("collections", "OrderedDict"), ())


class PickleAsm:
    def __init__(self):
        self.out = bytearray(b"\x80\x02")
        self.memo = {}
        self.n = 0

    def _put(self, key):
        i = self.n
        self.n += 1
        self.out += (b"q" + bytes([i])) if i < 256 else (b"r" + struct.pack("<I", i))
        if key is not None:
            self.memo[key] = i

    def _get(self, key):
        i = self.memo[key]
        self.out += (b"h" + bytes([i])) if i < 256 else (b"j" + struct.pack("<I", i))

    def dump(self, obj):
        self.save(obj)
        self.out += b"."
        return bytes(self.out)

    def save(self, x):
        o = self.out
        if x is None:
            o += b"N"
        elif x is True:
            o += b"\x88"
        elif x is False:
            o += b"\x89"
        elif type(x) is int:
            if 0 <= x < 256:
                o += b"K" + bytes([x])
            elif 0 <= x < 65536:
                o += b"M" + struct.pack("<H", x)
            elif -2**31 <= x < 2**31:
                o += b"J" + struct.pack("<i", x)
            else:
                n = (x.bit_length() + 8) // 8
                o += b"\x8a" + bytes([n]) + x.to_bytes(n, "little", signed=True)
        elif type(x) is float:
            o += b"G" + struct.pack(">d", x)
        elif type(x) is str:
            key = ("str", x)
            if key in self.memo:
                self._get(key)
                return
            b = x.encode("utf-8", "surrogatepass")
            o += b"X" + struct.pack("<I", len(b)) + b
            self._put(key)
        elif isinstance(x, G):
            key = ("global", x.module, x.name)
            if key in self.memo:
                self._get(key)
                return
            o += b"c" + f"{x.module}\n{x.name}\n".encode()
            self._put(key)
        elif isinstance(x, R):
            key = ("obj", id(x))
            if key in self.memo:
                self._get(key)
                return
            self.save(x.func)
            self.save(x.args)
            self.out += b"R"
            self._put(key)
        elif isinstance(x, PID):
            self.save(x.pid)
            self.out += b"Q"
        elif type(x) is tuple:
            if not x:
                o += b")"
                return
            if len(x) <= 3:
                for i in x:
                    self.save(i)
                self.out += b"\x85\x86\x87"[len(x) - 1:len(x)]
            else:
                o += b"("
                for i in x:
                    self.save(i)
                self.out += b"t"
            self._put(None)
        elif type(x) is list:
            o += b"]"
            self._put(None)
            if len(x) == 1:
                self.save(x[0])
                self.out += b"a"
            elif x:
                self.out += b"("
                for i in x:
                    self.save(i)
                self.out += b"e"
        elif type(x) is dict:
            o += b"}"
            self._put(None)
            items = list(x.items())
            for start in range(0, len(items), 1000):
                batch = items[start:start + 1000]
                if len(batch) == 1:
                    self.save(batch[0][0])
                    self.save(batch[0][1])
                    self.out += b"s"
                else:
                    self.out += b"("
                    for k, v in batch:
                        self.save(k)
                        self.save(v)
                    self.out += b"u"
        else:
            raise TypeError(f"cannot assemble {type(x)}")


# --------------------------------------------------------------------------------------------
# Reference reader: an independent Python reading of a checkpoint file (zip or legacy)
# --------------------------------------------------------------------------------------------

class StorageRef:
    def __init__(self, key, dtype, elsize, numel):
        self.key, self.dtype, self.elsize, self.numel = key, dtype, elsize, numel


class _StorageClass:
    def __init__(self, name):
        self.name = name


def _rebuild_v2(storage, offset, size, stride, requires_grad, hooks, metadata=None):
    conj = bool(metadata and metadata.get("conj"))
    return TensorDesc(storage.dtype, size, stride, offset, storage.key, None, requires_grad, conj)


def _rebuild_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
    conj = bool(metadata and metadata.get("conj"))
    return TensorDesc(dtype, size, stride, offset, storage.key, None, requires_grad, conj)


def _rebuild_old(storage, offset, size, stride):
    return TensorDesc(storage.dtype, size, stride, offset, storage.key, None, False)


def _rebuild_qtensor(storage, offset, size, stride, qparams, requires_grad, hooks):
    t = TensorDesc(storage.dtype, size, stride, offset, storage.key, None, requires_grad)
    scheme = qparams[0]
    if len(qparams) == 3:
        t.quantization = {"qscheme": scheme, "scale": qparams[1], "zero_point": qparams[2]}
    else:
        t.quantization = {"qscheme": scheme, "axis": qparams[3]}
        t.quantized_parts = [("q_per_channel_scales", qparams[1]),
                             ("q_per_channel_zero_points", qparams[2])]
    return t


def _rebuild_parameter(data, requires_grad, hooks, state=None):
    return data.with_requires_grad(requires_grad)


class SparseDesc:
    """A sparse tensor as the reference reader sees it: its parts as its state, named and
    ordered as ref.SPARSE_PARTS says (so that ref.children walks them as ckptfs does)."""

    tensor_parts = True  # its attributes are parts ckptfs names (ref.raw_keys)

    def __init__(self, layout, parts):
        for name, part in zip(ref.SPARSE_PARTS[layout], parts):
            setattr(self, name, part)


def _rebuild_sparse(layout, data):
    return SparseDesc(layout, data)


class _RefUnpickler(pickle.Unpickler):
    FUNCS = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_v2,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_v3,
        ("torch._utils", "_rebuild_tensor"): _rebuild_old,
        ("torch._utils", "_rebuild_qtensor"): _rebuild_qtensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
        ("torch._utils", "_rebuild_sparse_tensor"): _rebuild_sparse,
        ("torch._utils", "_rebuild_sparse_csr_tensor"): _rebuild_sparse,
        ("torch", "Size"): tuple,
        # A layout: torch.serialization._get_layout("torch.sparse_coo"), or torch.sparse_coo.
        ("torch.serialization", "_get_layout"): lambda name: name.removeprefix("torch."),
        ("collections", "OrderedDict"): collections.OrderedDict,
    }

    def __init__(self, f, legacy):
        super().__init__(f, encoding="utf-8")
        self.legacy = legacy
        self.storages = {}

    def find_class(self, module, name):
        if (module, name) in self.FUNCS:
            return self.FUNCS[(module, name)]
        if "Storage" in name:
            return _StorageClass(name)
        if module == "torch" and (name in ref.DTYPE_SIZES or name.startswith("per_")
                                  or name in ref.SPARSE_PARTS):
            return name  # a dtype, a qscheme or a layout, by its name
        if module in ("builtins", "__builtin__", "_codecs", "argparse") or (
                (module, name) in (("numpy", "dtype"), ("numpy.core.multiarray", "scalar"))):
            return super().find_class(module, name)
        return ref.stub_class(module, name)

    def persistent_load(self, pid):
        if pid[0] == "module":
            return ref.stub_class("module", "module")
        assert pid[0] == "storage", pid
        cls, key, numel = pid[1], pid[2], pid[4]
        dtype, elsize = STORAGE_CLASSES[cls.name]
        if key not in self.storages:
            self.storages[key] = StorageRef(key, dtype, elsize, numel)
        return self.storages[key]


def reference_read(path):
    """(format, byteorder, root) of a checkpoint, with TensorDesc leaves that carry their
    storage's bytes exactly as stored in the file."""
    data = Path(path).read_bytes()
    if data[:4] == b"PK\x03\x04":
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            names = [i.filename for i in zf.infolist()]
            pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1][0]
            prefix = pkl[:-len("data.pkl")]
            byteorder = "little"
            if prefix + "byteorder" in names:
                byteorder = zf.read(prefix + "byteorder").decode()
            up = _RefUnpickler(io.BytesIO(zf.read(pkl)), legacy=False)
            root = up.load()
            blobs = {}
            for key, st in up.storages.items():
                info = zf.getinfo(prefix + "data/" + key)
                lho = info.header_offset
                name_len, extra_len = struct.unpack_from("<HH", data, lho + 26)
                off = lho + 30 + name_len + extra_len
                assert info.file_size == st.numel * st.elsize
                blobs[key] = data[off:off + info.file_size]
        fmt = "zip"
    else:
        f = io.BytesIO(data)
        assert pickle.load(f) == 0x1950A86A20F9469CFC6C
        assert pickle.load(f) == 1001
        pickle.load(f)
        up = _RefUnpickler(f, legacy=True)
        root = up.load()
        keys = pickle.load(f)
        blobs = {}
        for key in keys:
            (count,) = struct.unpack("<q", f.read(8))
            st = up.storages[key]
            assert count == st.numel
            blobs[key] = f.read(count * st.elsize)
        assert f.read() == b""
        fmt, byteorder = "legacy", "little"

    def attach(x, seen):
        if isinstance(x, TensorDesc):
            x.storage_bytes = blobs[x.storage_key]
            for _, part in x.quantized_parts:
                attach(part, seen)
            return
        if id(x) in seen:
            return
        seen.add(id(x))
        for _, v in ref.children(x):
            attach(v, seen)

    attach(root, set())
    return fmt, byteorder, root


# --------------------------------------------------------------------------------------------
# Fixture contents
# --------------------------------------------------------------------------------------------

class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.flatten(1))


class TinyNet(nn.Module):
    """Saved whole in module.pth; pickled as `make_fixtures.TinyNet`, which readers lack."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(8, 3)
        self.extra = nn.Parameter(torch.linspace(-1, 1, 4))
        self.register_buffer("scale_buf", torch.tensor([0.5, 2.0]))
        self.note = "tiny"
        self.alpha = 0.25


# Pickle must find TinyNet under a module name that also works outside this process.
TinyNet.__module__ = "make_fixtures"
sys.modules.setdefault("make_fixtures", sys.modules[__name__])


def trained_convnet(seed):
    torch.manual_seed(seed)
    m = ConvNet()
    m.train()
    m(torch.randn(4, 3, 6, 6))  # running stats and num_batches_tracked become non-trivial
    return m


def fixture_convnet():
    return trained_convnet(1).state_dict()


TORCH_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
                torch.complex128]


def values_of(dtype, shape, gen):
    n = int(np.prod(shape)) if shape else 1
    if dtype.is_complex:
        t = torch.complex(torch.randn(n, generator=gen) * 3, torch.randn(n, generator=gen) * 3)
        t = t.to(dtype)
    elif dtype.is_floating_point:
        t = (torch.randn(n, generator=gen, dtype=torch.float64) * 100).to(dtype)
        if n >= 6:
            t[:6] = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 1e-40, 65504.0],
                                 dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, (n,), generator=gen).to(torch.bool)
    else:
        info = torch.iinfo(dtype)
        lo, hi = info.min, info.max
        if dtype == torch.int64:
            t = torch.randint(-2**62, 2**62, (n,), generator=gen, dtype=torch.int64)
        else:
            t = torch.randint(lo, hi + 1, (n,), generator=gen, dtype=torch.int64).to(dtype)
        if n >= 2:
            t[0], t[1] = lo, hi
    return t.reshape(shape)


def fixture_dtypes():
    gen = torch.Generator().manual_seed(2)
    d = {}
    for dt in TORCH_DTYPES:
        name = ref.dtype_name(dt)
        d[name + ".scalar"] = values_of(dt, (), gen)
        d[name + ".empty"] = torch.empty((0,), dtype=dt)
        d[name + ".empty3d"] = torch.empty((2, 0, 3), dtype=dt)
        d[name + ".vec"] = values_of(dt, (7,), gen)
        d[name + ".nd"] = values_of(dt, (2, 3, 4), gen)
    return d


def fixture_views():
    torch.manual_seed(3)
    w = torch.randn(4, 3)
    base = torch.randn(6, 4)
    x = torch.arange(10.0)
    m = torch.randn(5, 6)
    big = torch.arange(1000, dtype=torch.int64)
    cube = torch.randn(2, 3, 4)
    small = torch.arange(5.0)
    return {
        "tied.a": w,
        "tied.b": w,  # the same object: a memo reference in the pickle
        "halves.top": base[:3],  # two view objects of one storage
        "halves.bottom": base[3:],
        "slice": x[3:7],
        "full": x,
        "row": m[2],
        "elem": x[5],  # 0-d view at an offset
        "matrix": m,
        "transposed": m.t(),
        "step2": x[::2],
        "cols3": m[:, ::3],
        "expanded": torch.arange(3.0).expand(4, 3),
        "tiny_of_big": big[500:505],
        "permuted": cube.permute(2, 0, 1),
        "channels_last": torch.randn(1, 3, 2, 2).contiguous(memory_format=torch.channels_last),
        "empty_at_end": small[5:5],  # offset == storage size
    }


def fixture_training():
    model = trained_convnet(4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    gen = torch.Generator().manual_seed(4)
    for _ in range(2):
        opt.zero_grad()
        loss = model(torch.randn(4, 3, 6, 6, generator=gen)).square().mean()
        loss.backward()
        opt.step()
        sched.step()
    torch.manual_seed(1234)
    ema = argparse.Namespace(decay=0.999, shadow={"fc.bias": model.fc.bias.detach().clone()})
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "epoch": 7,
        "args": {
            "lr": 1e-3, "weight_decay": 0.0, "name": "run-α/β", "layers": [3, 8, 10],
            "betas": (0.9, 0.999), "dropout": None, "amp": False, "resume": True,
            "seed": -17, "tokens": 2**40, "nested": {"a": [1, {"b": "c"}], "empty": []},
        },
        "cli": argparse.Namespace(batch_size=4, data="/tmp/data"),  # an object without tensors
        "ema": ema,  # an object with a tensor below: its state is walked
        "rng_state": torch.get_rng_state(),
        "best": 0.125,
    }


def fixture_values():
    """Every kind of value the restricted pickle machine reads, each a value entry beside one
    tensor: what pack and the RFC layout must write back as torch.load gives it, types and all
    (tuples, int keys, sets, bytearrays, OrderedDicts, torch.Size, numpy scalars), what value.json
    says by its rule, and real dict keys that look like value.json's markers."""
    shared = [1, 2]
    be = np.array([2.0], dtype=">f8")[0]  # a big-endian numpy scalar: described only
    return {
        "weight": torch.arange(4.0),
        "betas": (0.9, 0.999),
        "id2label": {0: "cat", 1: "dog"},
        "keys": {0: "int", "0": "str", 1.5: "float", None: "none", b"k": "bytes",
                 (1, "a"): "tuple", frozenset({2}): "frozenset", True: "bool"},
        "sets": [set(), {1, 2, 3}, frozenset(), frozenset({4, 5}), {(1, 2)}],
        "bytes": [b"", b"\x00\xff", bytearray(), bytearray(b"\x00ab")],
        "nested": {"a": [(1, (2, [3, {4: (5,)}]))], "b": {"c": ({"d": {6}},)}},
        "ordered": collections.OrderedDict([("b", 1), ("a", (2,)), (3, "x")]),
        "size": torch.Size([2, 3]),
        "numpy": [np.float64(0.5), np.float32(0.25), np.int64(-3), np.int32(7), np.uint8(255),
                  np.bool_(True)],
        "numpy_described": [np.float16(1.5), be],
        "ints": [2**70, -2**70, 2**(8 * 1000), 2**(8 * 5000), -(2**(8 * 5000))],
        "deep": functools.reduce(lambda inner, _: [inner], range(60), "bottom"),
        "floats": [float("nan"), float("inf"), -float("inf"), -0.0, 1e-300],
        "strings": ["", "é 层", "lone \udcff surrogate"],
        "like_markers": [{"__float__": "nan"}, {"__bytes__": "00ff"},
                         {"__class__": "os.system", "args": ["rm -rf /"]},
                         {"__tuple__": [1]}, {"a": 1, "__dict__": 2}, {"__": 0}],
        "shared": (shared, shared),
        "empty": [[], (), {}, "", collections.OrderedDict()],
    }


def fixture_keys():
    gen = torch.Generator().manual_seed(5)

    def t(*shape):
        return torch.randn(*shape, generator=gen)

    return {
        "a/b": t(2),
        "100%": t(1),
        "a.b": t(3),
        ".": t(1),
        "..": t(1),
        ".ckptfs": t(1),  # the views' folder's name: a key's is %.ckptfs
        ".hidden.weight": t(2),  # no key is hidden from `*`: %.hidden.weight
        "": t(2),
        "poids.ünïcødé.层": t(2, 2),
        "emoji 🔥🧠": t(1),
        "k" * 300: t(1),
        "index.json": t(1),
        "with space ": t(1),
        "new\nline": t(1),
        "tab\tand\\backslash\"quote": t(1),
        0: t(1),
        42: t(2),
        -7: t(1),
        "nested": {"": t(1), "x/y": t(1), 3: "a value", "deeper": {"z": t(1)}},
        "note": "keys test ✓",
        # A str with a lone surrogate (torch.save passes it): its bytes are no UTF-8, and every
        # JSON file of the mount writes each of them as \udcXX.
        "lone \udcff surrogate": t(1),
        "surrogates": {"\udc80": t(1), "value \udcfe": "v \udcfd"},
    }


def fixture_collisions():
    """Keys that render to the same text but are different Python keys, and literal keys that
    look like another key's suffixed or cut name: every one is an entry of its own."""
    gen = torch.Generator().manual_seed(11)

    def t(*shape):
        return torch.randn(*shape, generator=gen)

    long = "k" * 300
    return {
        0: t(1), "0": t(2),
        b"x": t(1), "x": t(2), "b'x'": t(3),
        (1, 2): t(1), "(1, 2)": t(2),
        None: t(1), "None": t(2),
        b"\xff": t(1), b"\xfe": t(2),
        "a.b": t(1), "a": {"b": t(2)}, "a.b#2": t(3), "a.b%#2": t(4),
        1.5: t(1), "1.5": "a value with the text of a float key",
        (1, "a'b"): t(1),
        long: t(1), ref.directory_name(long): t(2),
        "map": t(1), "model.safetensors": t(1), "model-00001-of-00002.safetensors": t(1),
    }


def fixture_quantized():
    """Quantized tensors of every scheme torch 1.13 saves: their parameters are kept."""
    torch.manual_seed(12)
    x = torch.randn(4, 3)
    return {
        "per_tensor": torch.quantize_per_tensor(x, 0.05, 3, torch.qint8),
        "per_tensor_u8": torch.quantize_per_tensor(x, 0.1, 128, torch.quint8),
        "per_channel": torch.quantize_per_channel(x, torch.tensor([0.1, 0.2, 0.3], dtype=torch.double),
                                                  torch.tensor([0, 1, -1]), 1, torch.qint8),
        "per_channel_float_qparams": torch.quantize_per_channel(
            x, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float),
            torch.tensor([0.0, 1.0, 2.0, 3.0]), 0, torch.quint8),
    }


def fixture_params():
    torch.manual_seed(6)
    return {
        "weight": nn.Parameter(torch.randn(3, 4)),
        "frozen": nn.Parameter(torch.randn(4), requires_grad=False),
        "grad_leaf": torch.randn(2, 2).requires_grad_(True),
        "plain": torch.randn(3),
        "int_param": nn.Parameter(torch.arange(3), requires_grad=False),
    }


def fixture_module():
    torch.manual_seed(7)
    m = TinyNet()
    m.eval()
    return m


def fixture_bare():
    torch.manual_seed(8)
    return torch.randn(3, 5)


def fixture_sparse():
    """Sparse COO (coalesced, uncoalesced, hybrid with a dense dimension, empty) and CSR
    tensors, which torch saves as their parts, beside a dense one, nested in a list and dict."""
    g = torch.Generator().manual_seed(11)
    dense = torch.randn(5, 6, generator=g) * (torch.rand(5, 6, generator=g) > 0.6)
    uncoalesced = torch.sparse_coo_tensor([[0, 2, 0], [1, 3, 1]], [1.0, 2.0, 3.0], (4, 5))
    hybrid = torch.sparse_coo_tensor([[0, 3]], torch.randn(2, 3, generator=g), (4, 3))
    empty = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.int64), torch.zeros(0),
                                    (3, 3))
    csr64 = torch.tensor([[0, 1.5, 0], [2.5, 0, -1]], dtype=torch.float64).to_sparse_csr()
    return {"coo": dense.to_sparse(), "uncoalesced": uncoalesced, "hybrid": hybrid,
            "empty": empty, "csr": dense.to_sparse_csr(),
            "layers": [{"w": csr64, "b": torch.arange(3.0)}], "dense": dense, "step": 3}


def fixture_zip64_source():
    gen = torch.Generator().manual_seed(9)
    w = torch.randn(4, 5, generator=gen)
    return {"w": w, "w_t": w.t(), "ids": torch.arange(6), "empty": torch.empty(0),
            "half": torch.randn(3, generator=gen).half(), "flag": torch.tensor(True)}


def fixture_legacy():
    torch.manual_seed(10)
    base = torch.randn(4, 6)
    big = torch.arange(100, dtype=torch.int32)
    return collections.OrderedDict([
        ("w", base),
        ("w_t", base.t()),
        ("row", base[1]),
        ("tied", base),
        ("slice", big[10:20]),
        ("step", torch.tensor(3, dtype=torch.int64)),
        ("half", torch.randn(5).half()),
        ("bf16", torch.randn(2, 2).bfloat16()),
        ("empty", torch.empty(0, 3)),
        ("meta", {"epoch": 2, "tag": "legacy"}),
    ])


def fixture_bigendian_source():
    gen = torch.Generator().manual_seed(11)
    d = {}
    for dt in TORCH_DTYPES:
        d[ref.dtype_name(dt)] = values_of(dt, (2, 3), gen)
    m = torch.randn(3, 4, generator=gen)
    d["matrix"] = m
    d["matrix_t"] = m.t()
    d["row"] = m[1]
    d["scalar64"] = torch.tensor(-123456789012, dtype=torch.int64)
    d["empty"] = torch.empty(0, dtype=torch.float64)
    d["count"] = 3
    return d


# --------------------------------------------------------------------------------------------
# TorchScript fixtures (torch.jit.save): modules scripted and traced here
# --------------------------------------------------------------------------------------------

@torch.jit.script
class TSHolder:
    """A TorchScript class (not a module): its tensor is an attribute, never in state_dict,
    though a bool `training` follows it as in a module (only the declarations tell)."""

    def __init__(self, t: torch.Tensor):
        self.t = t
        self.training = True


class TSInner(nn.Module):
    """Parameters and buffers of every kind state_dict() knows, and tensors it does not list."""

    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.register_buffer("persistent", torch.arange(float(n)))
        self.register_buffer("transient", torch.ones(n), persistent=False)  # listed by jit
        self.register_buffer("absent", None)  # a None buffer: not listed
        self.plain = torch.full((n,), 7.0)  # a plain tensor attribute: not listed
        self.scale = nn.Parameter(torch.linspace(-1, 1, n))
        self.frozen = nn.Parameter(torch.ones(2, 2), requires_grad=False)

    def forward(self, x):
        return self.lin(x) * self.scale + self.persistent + self.transient + self.plain


class TSEarly(nn.Module):
    """A tensor attribute set before Module.__init__: it precedes `training` in data.pkl."""

    def __init__(self, n):
        self.early = torch.zeros(n)
        super().__init__()
        self.w = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * self.w + self.early


class TSNet(nn.Module):
    def __init__(self):
        super().__init__()
        n = 3
        self.conv = nn.Conv2d(2, n, 3, bias=False)  # a parameter that is None: not listed
        self.bn = nn.BatchNorm2d(n)
        self.seq = nn.Sequential(nn.Linear(n, n), nn.ReLU(), nn.Linear(n, n))
        self.blocks = nn.ModuleList([TSInner(n), TSInner(n)])
        self.heads = nn.ModuleDict({"a": nn.Linear(n, n), "norm": nn.LayerNorm(n)})
        self.extra = nn.ParameterList([nn.Parameter(torch.randn(n)), nn.Parameter(torch.randn(2))])
        self.tied = nn.Linear(n, n)
        self.seq[0].weight = self.tied.weight  # one parameter in two places
        self.shared = nn.Linear(n, 2)
        self.shared_again = self.shared  # one module under two names
        self.early = TSEarly(n)
        self.holder = TSHolder(torch.randn(4))
        self.rnn = nn.LSTM(n, 2, batch_first=True)  # its _flat_weights list: attributes
        self.emb = nn.Embedding(5, n)
        self.register_buffer("tied_t", self.tied.weight.detach().t())  # a transposed view
        self.register_buffer("steps", torch.tensor(11, dtype=torch.int64))
        self.register_buffer("mask", torch.tensor([True, False, True]))
        self.register_buffer("f16", torch.randn(2, 3).half())
        self.register_buffer("bf16", torch.randn(3).bfloat16())
        self.register_buffer("ids", torch.arange(6, dtype=torch.int32).reshape(2, 3))
        self.register_buffer("nothing", torch.empty(0, 4))
        self.history = [torch.randn(2), torch.randn(3)]  # List[Tensor]: attributes
        self.table = {"k": torch.randn(2)}  # Dict[str, Tensor]: attributes

    def forward(self, x):
        y = self.bn(self.conv(x)).mean((2, 3))
        y = self.seq(y) + self.tied(y)
        for block in self.blocks:
            y = block(y)
        y = self.heads["norm"](self.heads["a"](y)) + self.early(y)
        o, _ = self.rnn(y.unsqueeze(0))
        z = self.shared(y) + self.shared_again(y)
        return (o.sum() + z.sum() + self.emb(torch.tensor([1])).sum() + self.holder.t.sum()
                + self.extra[0].sum() + self.history[0].sum() + self.table["k"].sum())


class TSTraced(nn.Module):
    """Traced: tensors the forward makes or reads from plain attributes become constants."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 2)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2, 3)
        self.offset = torch.tensor([0.5, -0.5, 2.0])

    def forward(self, x):
        y = self.bn(self.conv(x)).mean((2, 3))
        return self.fc(y) + self.offset + torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64).float()


def ts_net():
    torch.manual_seed(21)
    m = TSNet()
    m.train()
    m(torch.randn(2, 2, 5, 5))  # running statistics move, num_batches_tracked counts
    return m.eval()


def ts_quantized_model():
    """Dynamically quantized Linear layers, per tensor and per channel: their weights live in
    packed parameters, which state_dict() does not list."""
    torch.manual_seed(22)
    float_model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2), nn.LayerNorm(2))
    qconfig = {"0": torch.quantization.default_dynamic_qconfig,
               "2": torch.quantization.per_channel_dynamic_qconfig}
    return torch.quantization.quantize_dynamic(float_model, qconfig, dtype=torch.qint8)


def write_torchscript_fixtures(out):
    """ts_script, ts_trace, ts_quantized, ts_frozen (torch.jit.save by torch 1.13) and
    ts_layout2x (ts_script's records re-zipped in the order torch 2.x writes them, with
    byteorder, .data/version and .data/serialization_id, code records stored); their names."""
    torch.jit.save(torch.jit.script(ts_net()), str(out / "ts_script.pth"))
    torch.manual_seed(23)
    traced = TSTraced().eval()
    torch.jit.save(torch.jit.trace(traced, torch.randn(1, 1, 3, 3)), str(out / "ts_trace.pth"))
    torch.jit.save(torch.jit.script(ts_quantized_model()), str(out / "ts_quantized.pth"))
    torch.manual_seed(24)
    frozen = nn.Sequential(nn.Conv2d(1, 2, 2), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2)).eval()
    torch.jit.save(torch.jit.freeze(torch.jit.script(frozen)), str(out / "ts_frozen.pth"))
    records = read_zip_records((out / "ts_script.pth").read_bytes())
    old = records[0][0].split("/")[0] + "/"
    rec = {n[len(old):]: b for n, b in records}
    order = sorted((n for n in rec if n.startswith("data/")), key=lambda n: int(n[5:]))
    order += ["data.pkl"] + [n for n in rec if n.startswith("code/")]
    order += [n for n in rec if n.startswith("constants/")] + ["constants.pkl", "version"]
    assert sorted(order) == sorted(rec), "ts_script.pth has records the 2.x layout lacks"
    layout = [("ts_layout2x/" + n, rec[n]) for n in order]
    layout += [("ts_layout2x/byteorder", b"little"), ("ts_layout2x/.data/version", b"3\n")]
    layout.append(("ts_layout2x/.data/serialization_id", serialization_id(layout).encode()))
    write(out / "ts_layout2x.pth", torch_zip(layout))
    return ["ts_script", "ts_trace", "ts_quantized", "ts_frozen", "ts_layout2x"]


def describe_torchscript(path):
    """The expected.json document of a TorchScript archive: ref.torchscript_flatten (torch's own
    reading: torch.jit.load's state_dict, then torch's _load of constants.pkl and data.pkl)."""
    flat = ref.torchscript_flatten(path, with_containers=True)
    entries, idents = [], []
    for (key, t, *_), key_path, containers in zip(flat, ref.torchscript_key_paths(flat),
                                                  ref.torchscript_key_containers(flat)):
        e = {"key": key, "kind": "tensor"}
        e.update(tensor_entry(t, "little"))
        q = ref.quantization(t, key)
        if q is not None:
            e["quantization"] = q
        if key_path is not None:
            e["key_path"] = key_path
        if containers:
            e["containers"] = containers
        entries.append(e)
        idents.append(storage_identity(t))
    for i, e in enumerate(entries):
        e["shared_with"] = [entries[j]["key"] for j in range(len(entries))
                            if j != i and idents[j] == idents[i]]
    return {"format": "torchscript", "byteorder": "little", "root": "object", "entries": entries}


def check_torchscript_facts(out, made):
    """What the TorchScript fixtures exist to show, as torch 1.13 has it."""
    def keys(name, group=None):
        return [e["key"] for e in made[name][0]["entries"]
                if group is None or (e.get("key_path") or [None])[0] == group]

    sd = list(torch.jit.load(str(out / "ts_script.pth")).state_dict())
    check(keys("ts_script")[:len(sd)] == sd, "ts_script: state_dict first, in its order")
    for key in ("blocks.0.transient", "seq.0.weight", "tied.weight", "shared.weight",
                "shared_again.weight", "early.w", "blocks.1.frozen"):
        check(key in sd, f"ts_script: {key} is in state_dict")
    for key in ("blocks.0.plain", "blocks.0.absent", "conv.bias", "early.early", "holder.t"):
        check(key not in sd, f"ts_script: {key} is not in state_dict")
    attributes = keys("ts_script", {"__part__": "attributes"})
    for key in ("attributes.blocks.0.plain", "attributes.early.early", "attributes.holder.t",
                "attributes.history.1", "attributes.table.k", "attributes.rnn._flat_weights.0"):
        check(key in attributes, f"ts_script: {key} is among the attributes")
    check(keys("ts_trace", {"__part__": "constants"}), "ts_trace: tensor constants")
    quantized_sd = list(torch.jit.load(str(out / "ts_quantized.pth")).state_dict())
    check(quantized_sd == ["3.weight", "3.bias"],
          "ts_quantized: the LayerNorm only in state_dict, no packed weight")
    dtypes = {e["dtype"] for e in made["ts_quantized"][0]["entries"]}
    check("qint8" in dtypes, "ts_quantized: qint8 packed weights among the attributes")
    check(any(e["key"].endswith(".q_per_channel_scales")
              for e in made["ts_quantized"][0]["entries"]), "ts_quantized: per-channel scales")
    check(not list(torch.jit.load(str(out / "ts_frozen.pth")).state_dict())
          and keys("ts_frozen") == keys("ts_frozen", {"__part__": "constants"}),
          "ts_frozen: frozen weights are constants only")
    check(made["ts_layout2x"][0]["entries"] == made["ts_script"][0]["entries"],
          "ts_layout2x: the same entries as ts_script")


# --------------------------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------------------------

def torch_save_bytes(obj, **kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf, **kwargs)
    return buf.getvalue()


def rewrite_legacy_keys(data):
    """torch's legacy storage keys are heap addresses (str(storage._cdata)): they, and so the
    order of the storages (sorted by key), change from run to run. Rename them to fixed 15-digit
    pseudo-addresses ascending in order of first use, and reorder the key list and the storages
    to match, exactly as torch would have written them had it got those addresses."""
    f = io.BytesIO(data)
    spans = []
    for _ in range(5):  # magic, protocol, sys_info, object, key list
        start = f.tell()
        ops = list(pickletools.genops(f))  # positions are absolute
        spans.append((start, f.tell(), ops))
    data_start = f.tell()
    keys = pickle.loads(data[spans[4][0]:spans[4][1]])
    assert keys == sorted(keys)
    first_use = []
    for op, arg, _ in spans[3][2]:
        if op.name == "BINUNICODE" and arg in keys and arg not in first_use:
            first_use.append(arg)
    assert sorted(first_use) == keys
    mapping = {k: str(139_900_000_000_000 + 4096 * i) for i, k in enumerate(first_use)}
    new_keys = sorted(mapping.values())

    def rewrite(span, replacement):
        start, end, ops = span
        out = bytearray()
        n = 0
        for i, (op, arg, pos) in enumerate(ops):
            raw = data[pos:ops[i + 1][2] if i + 1 < len(ops) else end]
            if op.name == "BINUNICODE" and arg in mapping:
                b = replacement(arg, n).encode()
                raw = b"X" + struct.pack("<I", len(b)) + b
                n += 1
            out += raw
        return bytes(out), n

    obj, n_obj = rewrite(spans[3], lambda key, _: mapping[key])
    key_list, n_keys = rewrite(spans[4], lambda _, i: new_keys[i])
    assert n_keys == len(keys) and n_obj >= len(keys)

    up = _RefUnpickler(io.BytesIO(data[spans[3][0]:spans[3][1]]), legacy=True)
    up.load()
    blocks, pos = {}, data_start
    for key in keys:
        (count,) = struct.unpack_from("<q", data, pos)
        size = 8 + count * up.storages[key].elsize
        blocks[mapping[key]] = data[pos:pos + size]
        pos += size
    assert pos == len(data)
    return data[:spans[3][0]] + obj + key_list + b"".join(blocks[k] for k in new_keys)


def bigendian_from(data, prefix):
    """A torch-saved zip turned into what a big-endian torch >= 2.1 writes: storages byte-swapped
    per element, a `byteorder` record `big`, records in the 2.1-2.6 order."""
    records = read_zip_records(data)
    old_prefix = records[0][0].split("/")[0] + "/"
    rec = {n[len(old_prefix):]: b for n, b in records}
    up = _RefUnpickler(io.BytesIO(rec["data.pkl"]), legacy=False)
    up.load()
    out = [("data.pkl", rec["data.pkl"]), ("byteorder", b"big")]
    for name in sorted(k for k in rec if k.startswith("data/")):
        st = up.storages[name[len("data/"):]]
        out.append((name, ref.byteswap(rec[name], ref.swap_unit(st.dtype))))
    out.append(("version", rec["version"]))
    out = [(prefix + "/" + n, b) for n, b in out]
    out.append((prefix + "/.data/serialization_id", serialization_id(out).encode()))
    return torch_zip(out)


# float8 and friends: any byte pattern is a value (NaN encodings included).
NEW_DTYPES = ["float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
              "float8_e8m0fnu", "uint16", "uint32", "uint64", "complex32", "bits8"]


def new_dtype_bytes(dtype, numel, rng):
    if dtype in ("uint16", "uint32", "uint64"):
        bits = ref.DTYPE_SIZES[dtype] * 8
        a = rng.integers(0, 2**bits, size=numel, dtype=np.dtype(f"<u{bits // 8}"), endpoint=False)
        if numel >= 2:
            a[0], a[1] = 0, 2**bits - 1
        return a.astype(f"<u{bits // 8}").tobytes()
    if dtype == "complex32":
        return rng.standard_normal(2 * numel).astype("<f2").tobytes()
    return rng.integers(0, 256, size=numel, dtype=np.uint8).tobytes()


def build_new_dtypes(prefix):
    """(zip bytes, root with TensorDesc leaves) of a checkpoint in the torch >= 2.7 layout."""
    rng = np.random.default_rng(12)
    storages = []  # (key, bytes) in pickling order
    storage_pids = {}

    def storage(cls_module, cls_name, nbytes_or_numel, payload):
        key = str(len(storages))
        storages.append((key, payload))
        pid = PID(("storage", G(cls_module, cls_name), key, "cpu", nbytes_or_numel))
        storage_pids[key] = pid
        return key, pid

    def v3(key, pid, payload, dtype, shape, stride, offset, rg=False):
        node = R(G("torch._utils", "_rebuild_tensor_v3"),
                 (pid, offset, tuple(shape), tuple(stride), rg, ordered_dict(), G("torch", dtype)))
        return node, TensorDesc(dtype, shape, stride, offset, key, payload, rg)

    pickled, described = {}, {}

    def add(name, node, desc):
        pickled[name] = node
        described[name] = desc

    for dtype in NEW_DTYPES:
        es = ref.DTYPE_SIZES[dtype]
        payload = new_dtype_bytes(dtype, 12, rng)
        key, pid = storage("torch.storage", "UntypedStorage", len(payload), payload)
        add(dtype + ".mat", *v3(key, pid, payload, dtype, (3, 4), (4, 1), 0))
        add(dtype + ".t", *v3(key, pid, payload, dtype, (4, 3), (1, 4), 0))
        add(dtype + ".tail", *v3(key, pid, payload, dtype, (5,), (1,), 7))
        add(dtype + ".scalar", *v3(key, pid, payload, dtype, (), (), 11))
        empty = b""
        ekey, epid = storage("torch.storage", "UntypedStorage", 0, empty)
        add(dtype + ".empty", *v3(ekey, epid, empty, dtype, (0, 2), (2, 1), 0))
        assert len(payload) == 12 * es

    # One untyped storage viewed with two dtypes (legal for v3 tensors since 2.2).
    payload = new_dtype_bytes("uint64", 2, rng)
    key, pid = storage("torch.storage", "UntypedStorage", len(payload), payload)
    add("mixed.u16", *v3(key, pid, payload, "uint16", (8,), (1,), 0))
    add("mixed.u32", *v3(key, pid, payload, "uint32", (2,), (2,), 1))

    # A Parameter carrying Python state (torch >= 2.0), over a v2 float32 tensor.
    f32 = np.arange(6, dtype="<f4") / 4 - 0.5
    payload = f32.tobytes()
    key, pid = storage("torch", "FloatStorage", 6, payload)
    inner = R(G("torch._utils", "_rebuild_tensor_v2"),
              (pid, 0, (2, 3), (3, 1), False, ordered_dict()))
    param = R(G("torch._utils", "_rebuild_parameter_with_state"),
              (inner, True, ordered_dict(), {"_is_hf_initialized": True}))
    add("param", param, TensorDesc("float32", (2, 3), (3, 1), 0, key, payload, True))

    # A conjugated complex64 tensor: the bytes are stored un-conjugated.
    c = (np.arange(4) + 1j * np.arange(4, 8)).astype("<c8")
    payload = c.tobytes()
    key, pid = storage("torch", "ComplexFloatStorage", 4, payload)
    conj = R(G("torch._utils", "_rebuild_tensor_v2"),
             (pid, 0, (2, 2), (2, 1), False, ordered_dict(), {"conj": True}))
    add("conj", conj, TensorDesc("complex64", (2, 2), (2, 1), 0, key, payload, False, True))

    # The same v3 tensor object under two keys: a memo reference.
    node, desc = pickled["uint32.mat"], described["uint32.mat"]
    add("tied_uint32", node, desc)
    pickled["writer"] = "make_fixtures.py (hand-built, torch >= 2.7 layout)"
    described["writer"] = pickled["writer"]
    pickled["version"] = 2
    described["version"] = 2

    data_pkl = PickleAsm().dump(pickled)
    pickletools.dis(data_pkl, out=io.StringIO())  # raises if the stream is malformed
    records = [("data.pkl", data_pkl), (".format_version", b"1"),
               (".storage_alignment", b"64"), ("byteorder", b"little")]
    records += [("data/" + k, b) for k, b in storages]
    records.append(("version", b"3\n"))
    records = [(prefix + "/" + n, b) for n, b in records]
    records.append((prefix + "/.data/serialization_id", serialization_id(records).encode()))
    return torch_zip(records), described


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------

def write(path, data):
    Path(path).write_bytes(data)


def write_json(path, doc):
    Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def check(cond, msg):
    if not cond:
        raise SystemExit(f"make_fixtures.py: self-check failed: {msg}")


def first_difference(a, b):
    if a.keys() != b.keys() or a["format"] != b["format"] or a["byteorder"] != b["byteorder"]:
        return "header"
    if len(a["entries"]) != len(b["entries"]):
        return f"{len(a['entries'])} vs {len(b['entries'])} entries"
    for x, y in zip(a["entries"], b["entries"]):
        if x != y:
            return f"{x} != {y}"
    return None


def make_all(outdir):
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    made = {}  # name -> (expected, loadable_by_torch_1_13)

    def torch_fixture(name, obj, *, to_path=True, **save_kwargs):
        path = out / f"{name}.pth"
        if to_path:
            torch.save(obj, path, **save_kwargs)  # zip prefix = the file's basename ("convnet")
        else:
            write(path, torch_save_bytes(obj, **save_kwargs))  # zip prefix "archive"
        made[name] = (describe(obj, "zip", "little"), True)

    torch_fixture("convnet", fixture_convnet())
    torch_fixture("dtypes", fixture_dtypes())
    torch_fixture("views", fixture_views(), to_path=False)
    torch_fixture("training", fixture_training())
    torch_fixture("values", fixture_values())
    torch_fixture("keys", fixture_keys())
    torch_fixture("collisions", fixture_collisions())
    torch_fixture("quantized", fixture_quantized())
    torch_fixture("params", fixture_params())
    torch_fixture("module", fixture_module())
    torch_fixture("bare", fixture_bare())
    torch_fixture("sparse", fixture_sparse())

    src = fixture_zip64_source()
    saved = torch_save_bytes(src)
    write(out / "zip64.pth", python_rezip(saved))
    made["zip64"] = (describe(src, "zip", "little"), True)
    # torch 1.13's miniz rejects this one: for the zero-length record, the central directory's
    # zip64 extra holds only the local header offset, and miniz then checks the saturated 32-bit
    # offset (0xFFFFFFFF) against the file size. The file is valid (zipfile reads it).
    write(out / "zip64_cd.pth", python_rezip(saved, zip64_everywhere=True))
    made["zip64_cd"] = (describe(src, "zip", "little"), False)

    leg = fixture_legacy()
    write(out / "legacy.pth",
          rewrite_legacy_keys(torch_save_bytes(leg, _use_new_zipfile_serialization=False)))
    made["legacy"] = (describe(leg, "legacy", "little"), True)

    be = fixture_bigendian_source()
    write(out / "bigendian.pth", bigendian_from(torch_save_bytes(be), "bigendian"))
    made["bigendian"] = (describe(be, "zip", "big"), True)

    data, root = build_new_dtypes("new_dtypes")
    write(out / "new_dtypes.pth", data)
    made["new_dtypes"] = (describe(root, "zip", "little"), False)

    for name in write_torchscript_fixtures(out):
        made[name] = (describe_torchscript(out / f"{name}.pth"), True)
    check_torchscript_facts(out, made)

    for name, (expected, loadable) in made.items():
        write_json(out / f"{name}.expected.json", expected)

    # Self-checks. 1: torch 1.13 loads what it can, and it describes exactly as expected
    # (bigendian.pth loads with swapped values: its bytes must then be the file's bytes).
    for name, (expected, loadable) in made.items():
        if not loadable or expected["format"] == "torchscript":  # torch's own reading made them
            continue
        loaded = torch.load(out / f"{name}.pth", map_location="cpu")
        got = describe(loaded, expected["format"], "little")
        got["byteorder"] = expected["byteorder"]
        diff = first_difference(got, expected)
        check(diff is None, f"{name}.pth: torch.load disagrees with expected: {diff}")
    # 2: the reference reader (zipfile / legacy stream, stub unpickler, bytes from the file).
    for name, (expected, _) in made.items():
        if expected["format"] == "torchscript":
            continue  # no reader here tells parameters from attributes: torch's (above) does
        fmt, byteorder, root = reference_read(out / f"{name}.pth")
        got = describe(root, fmt, byteorder)
        diff = first_difference(got, expected)
        check(diff is None, f"{name}.pth: reference reader disagrees with expected: {diff}")
    # 3: layout facts the fixtures exist for.
    for name in ("convnet", "bigendian", "new_dtypes"):
        raw = (out / f"{name}.pth").read_bytes()
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            for info in zf.infolist():
                n, e = struct.unpack_from("<HH", raw, info.header_offset + 26)
                check((info.header_offset + 30 + n + e) % 64 == 0, f"{name}: unaligned record")
                check(info.compress_type == zipfile.ZIP_STORED, f"{name}: compressed record")
    # 4: the pickle assembler writes what torch's pickler writes, byte for byte.
    ref = {"a": torch.arange(3.0), "e": torch.empty(0)}
    theirs = read_zip_records(torch_save_bytes(ref))[0][1]

    def v2(key, numel, shape):
        pid = PID(("storage", G("torch", "FloatStorage"), key, "cpu", numel))
        return R(G("torch._utils", "_rebuild_tensor_v2"),
                 (pid, 0, shape, (1,), False, ordered_dict()))

    mine = PickleAsm().dump({"a": v2("0", 3, (3,)), "e": v2("1", 0, (0,))})
    check(mine == theirs, "the pickle assembler differs from torch's pickler")
    raw = (out / "convnet.pth").read_bytes()
    check(torch_zip(read_zip_records(raw)) == raw, "the zip writer differs from torch's writer")
    # The safetensors files and sharded sets, with their own self-check.
    return sorted(made) + safetensors_fixtures.make_all(out)


def make_sample(path):
    torch.manual_seed(0)
    enc, dec = nn.Linear(3, 4), nn.Linear(4, 3)
    sd = collections.OrderedDict()
    for prefix, layer in (("encoder", enc), ("decoder", dec)):
        for k, v in layer.state_dict().items():
            sd[f"{prefix}.{k}"] = (v * 100).round() / 100 + 0.0  # + 0.0: no -0.0
    sd["step"] = torch.tensor(1000, dtype=torch.int64)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(sd, path)
    loaded = torch.load(path)
    check(list(loaded) == list(sd) and all(torch.equal(loaded[k], sd[k]) for k in sd),
          "sample does not round-trip")
    check(Path(path).stat().st_size < 4096, "sample is not < 4 KiB")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir", nargs="?", help="directory for *.pth and *.expected.json")
    ap.add_argument("--sample", metavar="PATH", help="write the small README sample checkpoint")
    args = ap.parse_args(argv)
    if not args.outdir and not args.sample:
        ap.error("give OUTDIR and/or --sample PATH")
    if args.sample:
        make_sample(args.sample)
        print(f"wrote {args.sample}")
    if args.outdir:
        names = make_all(args.outdir)
        print(f"wrote {len(names)} fixtures to {args.outdir}: {' '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
