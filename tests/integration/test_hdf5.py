# SPDX-License-Identifier: MIT
"""Integration tests of HDF5 files and .keras archives written by Debian 12's h5py (3.7):
every dataset mounted and compared with h5py's reading of it (data, tensor.npy, tensor.pt,
model.safetensors, meta.json), h5py's default file layout and libver="latest"'s, a user block,
Keras 3's .weights.h5 and .keras (stored and deflated members) and Keras 2's .h5, chunked
datasets decoded on read (random and concurrent reads), pack, and the one-line refusals.

The files: tests/interop/root/hdf5_fixtures.py; the comparison: hdf5_checks.py (test_interop_hdf5
runs both with the interop root's h5py). Run by ctest as `/usr/bin/python3 -m unittest -v
test_hdf5` (see fixtures.py).
"""

import json
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "interop" / "root"))

from fixtures import require  # noqa: E402

require("fuse", "torch")

try:
    import h5py  # noqa: E402,F401
except ImportError:
    print("SKIPPED: no h5py (Debian: python3-h5py, scripts/install-deps.sh)", file=sys.stderr)
    sys.exit(77)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import hdf5_checks  # noqa: E402
import hdf5_fixtures  # noqa: E402
from fixtures import CKPTFS, assert_random_and_concurrent_reads, views_dir  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402

# What ckptfs refuses to serve in each file (a broken tensor saying why).
BROKEN = {"datasets": {"strings/fixed", "strings/variable"},
          "latest": {"strings/fixed", "strings/variable", "index/extensible"}}


class Hdf5Tests(MountTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        import tempfile
        cls._dir = tempfile.TemporaryDirectory(prefix="ckptfs-hdf5-")
        cls.files = hdf5_fixtures.write(cls._dir.name)

    @classmethod
    def tearDownClass(cls):
        cls._dir.cleanup()
        super().tearDownClass()

    def check(self, name, h5=None):
        path = self.files[name]
        mnt, _ = self.mount(path)
        report = hdf5_checks.check(h5 or path, mnt, views_dir(mnt), BROKEN.get(name, ()))
        self.assertEqual(report["problems"], [], name)
        self.assertGreater(report["tensors"], 0, name)
        return mnt

    def test_h5py_default_layout(self):
        mnt = self.check("datasets")
        meta = json.loads((mnt / "numeric.f4_be" / "meta.json").read_text())
        self.assertEqual((meta["byteorder"], meta["numpy"]), ("big", ">f4"))
        meta = json.loads((mnt / "chunked.gzip_shuffle" / "meta.json").read_text())
        self.assertEqual(meta["hdf5"]["layout"], "chunked")
        self.assertEqual(meta["hdf5"]["chunks"], [3, 2])
        self.assertEqual(meta["hdf5"]["filters"], ["shuffle", "deflate"])
        meta = json.loads((mnt / "strings.variable" / "meta.json").read_text())
        self.assertIn("variable-length string", meta["broken"])
        self.assertEqual(json.loads((mnt / "compact" / "meta.json").read_text())["hdf5"]["layout"],
                         "compact")
        # A dataset linked twice: one tensor, two keys.
        meta = json.loads((mnt / "deep.alias" / "meta.json").read_text())
        self.assertEqual(meta["shared_with"], ["deep.er.vars.2"])

    def test_libver_latest(self):
        mnt = self.check("latest")
        indexes = {name: json.loads((mnt / f"index.{name}" / "meta.json").read_text())["hdf5"]
                   for name in ("single", "fixed_array", "btree2", "extensible")}
        self.assertEqual({k: v["chunk_index"] for k, v in indexes.items()},
                         {"single": "single chunk", "fixed_array": "fixed array",
                          "btree2": "v2 B-tree", "extensible": "extensible array"})
        self.assertIn("extensible array", indexes["extensible"]["error"])

    def test_user_block(self):
        self.check("userblock")

    def test_keras_layouts(self):
        mnt = self.check("keras3")
        meta = json.loads((mnt / "layers.embedding.vars.0" / "meta.json").read_text())
        self.assertEqual(meta["dtype"], "bfloat16")
        mnt = self.check("keras2")
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertEqual(index["metadata"]["keras_version"], "2.15.0")
        self.assertEqual(index["metadata"]["backend"], "tensorflow")
        self.assertEqual(index["metadata"]["layer_names"] if "layer_names" in index["metadata"]
                         else None, None)  # only the root group's attributes

    def test_keras_archives(self):
        import zipfile
        for name in ("keras", "deflated_keras"):
            with self.subTest(name):
                mnt = self.check(name, h5=self.files["keras3"])
                views = views_dir(mnt)
                with zipfile.ZipFile(self.files[name]) as z:
                    for member in ("config.json", "metadata.json"):
                        self.assertEqual((views / member).read_bytes(), z.read(member))
                index = json.loads((views / "index.json").read_text())
                self.assertEqual(index["format"], "keras")

    def test_chunks_decoded_on_random_and_concurrent_reads(self):
        mnt, _ = self.mount(self.files["datasets"])
        with h5py.File(self.files["datasets"], "r") as f:
            raw = f["chunked/big"][()].tobytes()
        data = mnt / "chunked.big" / "data"
        assert_random_and_concurrent_reads(self, data, raw,
                                           [len(raw) - 4096, 17, 1_000_001, 5, 3_999_000, 0])

    def test_pack(self):
        out = self.tmp / "packed.pth"
        r = run([CKPTFS, "pack", self.files["keras3"], out])
        self.assertEqual(r.returncode, 0, r.stderr)
        packed = torch.load(out)
        with h5py.File(self.files["keras3"], "r") as f:
            want = f["layers/dense/vars/0"][()]
        self.assertTrue(np.array_equal(packed["layers.dense.vars.0"].numpy(), want))
        self.assertEqual(packed["layers.embedding.vars.0"].dtype, torch.bfloat16)

    def test_inspect(self):
        r = run([CKPTFS, "inspect", self.files["keras2"]])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("format hdf5", r.stdout.decode())


if __name__ == "__main__":
    unittest.main()
