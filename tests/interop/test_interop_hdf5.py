# SPDX-License-Identifier: MIT
"""HDF5 files and Keras-layout files written by the interop root's h5py (3.16, HDF5 1.14),
mounted and read back by that h5py, numpy 2.x, torch 2.x (tensor.pt, uint16 and up and
big-endian datasets too, which the build machine's torch 1.13 cannot check) and the mount's
model.safetensors: every dataset of tests/interop/root/hdf5_fixtures.py's files, compared by
hdf5_checks.py (test_hdf5 runs both with Debian 12's h5py 3.7).

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_hdf5` (label interop).
"""

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402

BROKEN = {"datasets": ["strings/fixed", "strings/variable"],
          "latest": ["strings/fixed", "strings/variable", "index/extensible"]}


class Hdf5Tests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.fixtures = cls.call("hdf5_fixtures.write", inside(cls.new_dir("fixtures")))
        cls.versions = cls.call("versions.tools")

    def test_h5py_files(self):
        for name in ("datasets", "latest", "userblock", "keras3", "keras2", "keras",
                     "deflated_keras"):
            with self.subTest(name):
                path = self.fixtures[name]
                h5 = self.fixtures["keras3"] if name.endswith("keras") else path
                mnt = self.mount(outside(path))
                report = self.call("hdf5_checks.check", h5, inside(mnt), inside(views_dir(mnt)),
                                   BROKEN.get(name, []), True)
                self.assertEqual(report["problems"], [], f"{name} against {self.versions}")
                self.assertGreater(report["tensors"], 0)


if __name__ == "__main__":
    unittest.main()
