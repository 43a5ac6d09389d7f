# SPDX-License-Identifier: MIT
"""The views of a mount beyond data/meta.json/tensor.npy, on real mounts: tensors served in
another dtype (-o dtype=...), bit for bit as torch's .to(); tensor.pt of every kind of tensor.

Run by ctest as `/usr/bin/python3 -m unittest -v test_views` with CKPTFS and CKPTFS_FIXTURES set.
"""

import json
import os
import random
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import (FIXTURE_NAMES, NOT_TORCH_LOADABLE, TORCHSCRIPT_FIXTURES, fixture_path,
                      require)  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ckptfs_reference as ref  # noqa: E402
from fixtures import CKPTFS  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402

FLOAT_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64}
TARGETS = ("float16", "bfloat16", "float32")


def special_bits(dtype):
    """Bit patterns of one floating dtype that conversions must get right: +-0, +-inf, NaNs
    with payloads (quiet and signalling, both signs), the smallest and largest subnormals and
    normals, values that overflow float16, ties and near-ties of the narrower formats; padded
    with random patterns to a multiple of 16 elements (torch's vector loop: its scalar remainder
    writes some NaNs differently, see view/convert.hpp)."""
    bits = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}[dtype]
    exp_bits = {"float16": 5, "bfloat16": 8, "float32": 8, "float64": 11}[dtype]
    man = bits - 1 - exp_bits
    sign = 1 << (bits - 1)
    inf = ((1 << exp_bits) - 1) << man
    out = [0, sign, inf, sign | inf, inf | 1, inf | (1 << (man - 1)), sign | inf | 3,
           inf | ((1 << man) - 1), 1, (1 << man) - 1, 1 << man, inf - 1, sign | (inf - 1)]
    if dtype in ("float32", "float64"):
        as_float = np.float32 if dtype == "float32" else np.float64
        view = np.uint32 if dtype == "float32" else np.uint64
        for v in (65504.0, 65519.99, 65520.0, 1e6, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26,
                  1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8,
                  1 + 2.0 ** -11 + 2.0 ** -40, 3.4e38, 1e-40, 1e-45):
            out.append(int(np.array([v], dtype=as_float).view(view)[0]))
            out.append(int(np.array([-v], dtype=as_float).view(view)[0]))
    rng = random.Random(bits)
    while len(out) % 16 or len(out) < 64:
        out.append(rng.getrandbits(bits))
    return out


def special_tensor(dtype):
    bits = special_bits(dtype)
    unsigned = {"float16": np.uint16, "bfloat16": np.uint16, "float32": np.uint32,
                "float64": np.uint64}[dtype]
    signed = {np.uint16: torch.int16, np.uint32: torch.int32, np.uint64: torch.int64}[unsigned]
    raw = torch.from_numpy(np.array(bits, dtype=unsigned).view(unsigned.__name__.replace("u", "")))
    return raw.to(signed).view(FLOAT_DTYPES[dtype])


class ConversionTests(MountTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = Path(tempfile.mkdtemp(prefix="ckptfs-views-"))
        tensors = {f"special_{d}": special_tensor(d) for d in FLOAT_DTYPES}
        # Strided, 0-d, empty, and tensors that are never converted.
        tensors["strided_f32"] = torch.arange(24, dtype=torch.float32).reshape(4, 6).t()
        tensors["scalar_f64"] = torch.tensor(1 / 3, dtype=torch.float64)
        tensors["empty_bf16"] = torch.zeros(0, 3, dtype=torch.bfloat16)
        tensors["ints"] = torch.arange(10, dtype=torch.int64)
        tensors["flags"] = torch.tensor([True, False])
        tensors["complex"] = torch.tensor([1 + 2j], dtype=torch.complex64)
        cls.tensors = tensors
        cls.path = cls.dir / "floats.pth"
        torch.save(tensors, cls.path)

    def check_target(self, target):
        mnt, proc = self.mount(self.path, "-o", f"dtype={target}")
        try:
            for key, t in self.tensors.items():
                with self.subTest(target=target, key=key):
                    converted = t.dtype in FLOAT_DTYPES.values()
                    want_t = t.to(FLOAT_DTYPES[target]) if converted else t
                    want = ref.tensor_bytes(want_t.contiguous(), "little")
                    d = mnt / key
                    got = (d / "data").read_bytes()
                    self.assertEqual(got, want, f"{key} -> {target}: data")
                    meta = json.loads((d / "meta.json").read_bytes())
                    self.assertEqual(meta["dtype"], ref.dtype_name(want_t.dtype))
                    self.assertEqual(meta["stored_dtype"], ref.dtype_name(t.dtype))
                    self.assertEqual(meta["nbytes"], len(want))
                    self.assertEqual(meta["numpy"], ref.numpy_descr(meta["dtype"], "little"))
                    if converted and t.dtype != FLOAT_DTYPES[target]:
                        self.assertIsNone(meta["file_offset"], "converted: not a range")
                    # tensor.npy and tensor.pt hold the same converted values.
                    npy = np.load(d / "tensor.npy")
                    self.assertEqual(np.ascontiguousarray(npy).tobytes(), want)
                    loaded = ref.load_tensor_file(d / "tensor.pt")
                    self.assertEqual(loaded.dtype, want_t.dtype)
                    self.assertEqual(ref.tensor_bytes(loaded, "little"), want)
                    # Reads at random offsets and lengths equal the same slices.
                    rng = random.Random(key + target)
                    with open(d / "data", "rb") as f:
                        for _ in range(40):
                            if not want:
                                break
                            off = rng.randrange(len(want))
                            n = rng.choice([1, 3, 7, 4096, len(want)])
                            self.assertEqual(os.pread(f.fileno(), n, off), want[off:off + n])
        finally:
            self.unmount(mnt, proc)

    def test_float16(self):
        self.check_target("float16")

    def test_bfloat16(self):
        self.check_target("bfloat16")

    def test_float32(self):
        self.check_target("float32")

    def test_bad_dtype_is_a_usage_error(self):
        for bad in ("float64", "int8", "half", ""):
            r = run([CKPTFS, self.path, self.new_dir("mnt"), "-o", f"dtype={bad}"])
            self.assertEqual(r.returncode, 1, bad)
            self.assertIn("dtype", r.stderr.decode())


def zf_byteorder(pt):
    """The byteorder record of a torch zip ("little" when it has none, as torch reads it)."""
    with zipfile.ZipFile(pt) as zf:
        names = [n for n in zf.namelist() if n.endswith("/byteorder")]
        return zf.read(names[0]).decode() if names else "little"


def little_endian(data, meta):
    """A data file's bytes (the checkpoint's byte order, as meta.json says it) made
    little-endian."""
    if meta.get("byteorder") != "big":
        return data
    return ref.byteswap(data, ref.swap_unit(meta["dtype"]))


def torch_byteorder(meta):
    """The byte order in which this torch's tensor from torch.load of the checkpoint holds the
    checkpoint's bytes in memory: its own before 2.1 (which ignores the byteorder record), the
    checkpoint's after."""
    honours = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 1)
    return meta.get("byteorder", "little") if honours else sys.byteorder


class TensorFileTests(MountTestCase):
    """tensor.pt of every fixture: a zip whose CRCs hold and whose data records are 64-byte
    aligned, that torch loads as the tensor (where the installed torch can)."""

    def test_every_fixture(self):
        for name in FIXTURE_NAMES:
            path = fixture_path(name)
            mnt, proc = self.mount(path)
            try:
                index = json.loads((views_dir(mnt) / "index.json").read_bytes())
                # Entries pair by position: two may share a key's text.
                if name in TORCHSCRIPT_FIXTURES:
                    flat = [(key, t) for key, t, _, _ in ref.torchscript_flatten(path)]
                elif name in NOT_TORCH_LOADABLE:
                    flat = []
                else:
                    flat = ref.flatten(ref.torch_load(path))
                self.assertTrue(not flat or len(flat) == len(index["entries"]), name)
                for i, e in enumerate(index["entries"]):
                    if e["kind"] != "tensor" or e["nbytes"] is None:
                        continue
                    with self.subTest(fixture=name, key=e["key"]):
                        pt = mnt / e["path"] / "tensor.pt"
                        with zipfile.ZipFile(pt) as zf:
                            self.assertIsNone(zf.testzip(), "a CRC-32 does not hold")
                            for info in zf.infolist():
                                raw = pt.read_bytes()[info.header_offset:info.header_offset + 30]
                                name_len = int.from_bytes(raw[26:28], "little")
                                extra_len = int.from_bytes(raw[28:30], "little")
                                start = info.header_offset + 30 + name_len + extra_len
                                self.assertEqual(start % 64, 0, f"{info.filename} unaligned")
                            data = zf.read("tensor/data/0")
                        meta = json.loads((mnt / e["path"] / "meta.json").read_bytes())
                        stored = (mnt / e["path"] / "data").read_bytes()  # the file's order
                        # tensor.pt is little-endian whatever the checkpoint's byte order.
                        self.assertEqual(zf_byteorder(pt), "little")
                        if not meta.get("quantization"):
                            self.assertEqual(data, little_endian(stored, meta))
                        if flat and ref.is_torch_tensor(flat[i][1]):
                            t = ref.load_tensor_file(pt)
                            want = flat[i][1]
                            self.assertEqual(t.dtype, want.dtype)
                            self.assertEqual(list(t.shape), list(want.shape))
                            # The checkpoint's bytes: what torch.load(tensor.pt) gives, in the
                            # checkpoint's order (torch 1.13 loads a big-endian checkpoint
                            # swapped: its tensors' bytes in memory are the file's bytes).
                            self.assertEqual(ref.tensor_bytes(t, meta["byteorder"]),
                                             ref.tensor_bytes(want, torch_byteorder(meta)))
            finally:
                self.unmount(mnt, proc)

    def test_big_endian_loads_as_numpy_reads_it(self):
        """A big-endian checkpoint: torch.load (this torch: Debian's 1.13, which ignores the
        byteorder record) of tensor.pt and of the RFC layout's <key>.pt gives the values np.load
        gives from tensor.npy (whose descr says '>'), every dtype of the fixture."""
        path = fixture_path("bigendian")
        for layout in ("split", "rfc"):
            mnt, proc = self.mount(path, *(("-o", "layout=rfc") if layout == "rfc" else ()))
            npy_mnt, npy_proc = self.mount(path) if layout == "rfc" else (mnt, None)
            try:
                index = json.loads((views_dir(mnt) / "index.json").read_bytes())
                split = json.loads((views_dir(npy_mnt) / "index.json").read_bytes())
                checked = 0
                for e, s in zip(index["entries"], split["entries"]):
                    if e["kind"] != "tensor" or e["nbytes"] is None or e["path"] is None:
                        continue
                    with self.subTest(layout=layout, key=e["key"]):
                        pt = mnt / e["path"] / "tensor.pt" if layout == "split" else mnt / e["path"]
                        t = ref.load_tensor_file(pt)
                        a = np.load(npy_mnt / s["path"] / "tensor.npy")
                        self.assertEqual(a.dtype.byteorder in (">", "|"), True, a.dtype)
                        values = a.astype(a.dtype.newbyteorder("<")).tobytes()
                        self.assertEqual(ref.tensor_bytes(t, "little"), values)
                        checked += 1
                self.assertGreater(checked, 3, layout)
            finally:
                self.unmount(mnt, proc)
                if npy_proc is not None:
                    self.unmount(npy_mnt, npy_proc)

    def test_mmap_where_torch_has_it(self):
        """torch.load(..., mmap=True) (torch >= 2.1) maps the data record in place."""
        import inspect
        if "mmap" not in inspect.signature(torch.load).parameters:
            self.skipTest(f"torch {torch.__version__} has no torch.load(mmap=...): the 64-byte "
                          "alignment it needs is checked by test_every_fixture")
        mnt, proc = self.mount(fixture_path("convnet"))
        try:
            index = json.loads((views_dir(mnt) / "index.json").read_bytes())
            for e in index["entries"]:
                if e["kind"] == "tensor":
                    t = torch.load(mnt / e["path"] / "tensor.pt", mmap=True, weights_only=True)
                    self.assertEqual(t.numel() * t.element_size(), e["nbytes"])
        finally:
            self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
