# SPDX-License-Identifier: MIT
"""quint4x2 and quint2x4 on real mounts: torch's quantized dtypes packed 2 or 4 elements a byte,
flat over the elements in C order, in a storage of one row of ceil(last dimension / k) bytes per
row (the rest padding). They were broken ("its view needs 15 bytes of storage but it has 9":
ckptfs counted a byte an element), and so the mount's model.safetensors failed with EIO.

Checkpoints written here by torch 1.13 (torch.save, zip and legacy streams) of several shapes
(rows that fill their bytes and odd ones, 0-d, empty) beside a float tensor, and checked:
  - meta.json (nbytes, packing), data (torch's storage bytes), tensor.npy (those bytes, uint8 in
    one dimension) and tensor.pt (torch.load gives the very tensor: int_repr, scale, zero point,
    shape, stride, dequantize), and -o layout=rfc's <key>.pt alike;
  - the export model.safetensors reads, without them, and index.json's exports say why;
  - `ckptfs pack` to .pth (from the file, and from a copy of the mount's directories) gives
    torch.load's tensors; to .safetensors leaves them out, saying so;
  - the Python package (python/ckptfs): ck[key] is torch.load's tensor, ck.numpy(key) tensor.npy.
The interop suite checks the same with torch 2.14 (tests/interop/test_interop_torch.py).

Run by ctest as `/usr/bin/python3 -m unittest -v test_packed_quantized` (CKPTFS: the binary).
"""

import os
import shutil
import sys
import unittest
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ckptfs_reference as ref  # noqa: E402
from fixtures import CKPTFS, views_dir  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402

sys.path.insert(0, str(REPO / "python"))
os.environ["CKPTFS_BINARY"] = str(CKPTFS)
import ckptfs  # noqa: E402

warnings.filterwarnings("ignore")  # (torch 1.13's TypedStorage and quantization notices)

SHAPES = [(3, 5), (2, 3, 5), (4, 8), (7,), (2, 1), (), (0, 4)]


def state_dict():
    """Each packed dtype in each shape (random values, quantized per tensor), and a float."""
    gen = torch.Generator().manual_seed(29)
    sd = {}
    for dtype, zero_point in ((torch.quint4x2, 3), (torch.quint2x4, 1)):
        name = ref.dtype_name(dtype)
        for shape in SHAPES:
            x = torch.randn(shape, generator=gen)
            sd[f"{name}.{'x'.join(map(str, shape)) or 'scalar'}"] = \
                torch.quantize_per_tensor(x, 0.25, zero_point, dtype)
    sd["float"] = torch.randn(2, 3, generator=gen)
    return sd


def load(path):
    return torch.load(path, map_location="cpu")  # (torch 1.13: weights_only refuses quantized)


class PackedTestCase(MountTestCase):
    def setUp(self):
        super().setUp()
        self.sd = state_dict()
        self.packed = [k for k, v in self.sd.items() if v.is_quantized]
        self.pth = self.tmp / "packed.pth"
        torch.save(self.sd, self.pth)

    def assert_same(self, got, want, where):
        """`got` is the very tensor torch.load gives: dtype, shape, stride, quantization,
        integers, values."""
        self.assertEqual((got.dtype, tuple(got.shape), got.stride()),
                         (want.dtype, tuple(want.shape), want.stride()), where)
        self.assertEqual((got.q_scale(), got.q_zero_point()), (want.q_scale(), want.q_zero_point()),
                         where)
        self.assertTrue(torch.equal(got.int_repr(), want.int_repr()), where)
        self.assertTrue(torch.equal(got.dequantize(), want.dequantize()), where)


class MountTests(PackedTestCase):
    def check_key_dirs(self, mnt, want):
        index = self.read_json(views_dir(mnt) / "index.json")
        paths = {e["key"]: e["path"] for e in index["entries"]}
        for key in self.packed:
            v, d = want[key], mnt / paths[key]
            name = ref.dtype_name(v.dtype)
            k = ref.PACKED[name]
            nbytes = ref.packed_nbytes(name, v.shape)
            meta = self.read_json(d / "meta.json")
            self.assertIsNone(meta["broken"], key)
            self.assertEqual((meta["dtype"], meta["shape"], meta["nbytes"], meta["numpy"]),
                             (name, list(v.shape), nbytes, "|u1"), key)
            self.assertEqual(meta["packing"], {
                "elements_per_byte": k, "bits": 8 // k, "order": "c",
                "packed_nbytes": -(-v.numel() // k),
                "row_nbytes": -(-(v.shape[-1] if v.dim() else 1) // k),
                "numpy_shape": [nbytes]}, key)
            stored = ref.tensor_bytes(v)
            self.assertEqual(len(stored), nbytes, key)
            self.assertEqual((d / "data").read_bytes(), stored, key)
            # The packed elements are torch's int_repr(): flat, whatever the rows.
            self.assertEqual(stored[:-(-v.numel() // k)], bytes(v.int_repr().numpy()), key)
            array = np.load(d / "tensor.npy")
            self.assertEqual((array.dtype.str, array.shape, array.tobytes()),
                             ("|u1", (nbytes,), stored), key)
            self.assert_same(load(d / "tensor.pt"), v, f"{key}/tensor.pt")
        self.assertEqual((mnt / paths["float"] / "data").read_bytes(),
                         ref.tensor_bytes(want["float"]))
        return index

    def test_key_directories_serve_them_as_torch_stores_them(self):
        for stream in ("zip", "legacy"):
            with self.subTest(stream):
                path = self.pth
                if stream == "legacy":
                    path = self.tmp / "legacy.pth"
                    torch.save(self.sd, path, _use_new_zipfile_serialization=False)
                want = load(path)
                mnt, proc = self.mount(path)
                index = self.check_key_dirs(mnt, want)
                # The export lacks them (safetensors has no such dtype), saying so, and reads.
                [export] = index["exports"]
                self.assertEqual(export["files"], ["model.safetensors"])
                self.assertIsNone(export["fails"])
                self.assertEqual(export["lacks"],
                                 [{"key": k, "why": f"safetensors has no dtype "
                                                    f"{ref.dtype_name(want[k].dtype)}"}
                                  for k in self.packed])
                st = (views_dir(mnt) / "model.safetensors").read_bytes()
                self.assertIn(b'"float"', st)
                self.unmount(mnt, proc)

    def test_rfc_layout(self):
        mnt, proc = self.mount(self.pth, "-o", "layout=rfc")
        keys = load(mnt / "map.pt")
        self.assertEqual(keys, list(self.sd))
        for key, name in zip(keys, ref.rfc_file_names(keys)):
            if key in self.packed:
                self.assert_same(load(mnt / name), self.sd[key], name)
        self.unmount(mnt, proc)

    def test_python_package(self):
        mnt, proc = self.mount(self.pth)
        with ckptfs.open(mnt) as ck:
            for key in self.packed:
                self.assert_same(ck[key], self.sd[key], key)
                array = ck.numpy(key)
                self.assertEqual(array.tobytes(), ref.tensor_bytes(self.sd[key]), key)
                self.assertEqual(array.shape, ref.npy_shape(ref.dtype_name(self.sd[key].dtype),
                                                            self.sd[key].shape), key)
            with self.assertRaises(ckptfs.Error) as caught:
                ck.get_slice("quint4x2.3x5")
            self.assertIn("rows share bytes", str(caught.exception))
        self.unmount(mnt, proc)


class PackTests(PackedTestCase):
    def test_pack_to_pth_from_the_file_and_from_a_copy_of_the_mount(self):
        mnt, proc = self.mount(self.pth)
        copy = self.tmp / "copy"
        shutil.copytree(mnt, copy, ignore=shutil.ignore_patterns("tensor.npy", "tensor.pt", "*.safetensors"))
        self.unmount(mnt, proc)
        for source in (self.pth, copy):
            with self.subTest(source.name):
                out = self.new_dir("out") / "out.pth"
                r = run([CKPTFS, "pack", "-q", source, out])
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                self.assertEqual(r.stderr, b"")
                got = load(out)
                self.assertEqual(list(got), list(self.sd))
                for key in self.packed:
                    self.assert_same(got[key], self.sd[key], key)
                    # The storage as torch keeps it, padding and all.
                    self.assertEqual(ref.tensor_bytes(got[key]), ref.tensor_bytes(self.sd[key]),
                                     key)

    def test_pack_to_safetensors_leaves_them_out_saying_why(self):
        out = self.tmp / "out.safetensors"
        r = run([CKPTFS, "pack", "-q", self.pth, out])
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        err = r.stderr.decode()
        self.assertIn(f"left out {len(self.packed) // 2} entries (safetensors has no dtype "
                      "quint4x2)", err)
        self.assertIn("(safetensors has no dtype quint2x4)", err)


if __name__ == "__main__":
    unittest.main()
