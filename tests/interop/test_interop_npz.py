# SPDX-License-Identifier: MIT
""".npz files written by the interop root's numpy (2.x), savez and savez_compressed, mounted and
read back by that numpy, torch 2.x (tensor.pt, uint16 and big-endian arrays too, which the
build machine's torch 1.13 cannot check) and safetensors (model.safetensors): every key, every
dtype torch has, C and Fortran order, both byte orders (tests/interop/root/npz_checks.py); and
`ckptfs pack` of them to .pth read back by torch.load.

Found: torch.load never byte-swaps a big-endian file's untyped storages (uint16, uint32,
uint64...: it swaps by the storage's element size, 1 for an UntypedStorage), so a big-endian
tensor of those dtypes came back swapped from tensor.pt and from pack's .pth. Both now write
such tensors little-endian.

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_npz` (label interop).
"""

import subprocess
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from fixtures import CKPTFS  # noqa: E402
from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402


class NpzTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.fixtures = cls.call("npz_fixtures.write", inside(cls.new_dir("fixtures")))
        cls.versions = cls.call("versions.tools")

    def test_savez_and_savez_compressed(self):
        for name in ("stored", "compressed"):
            with self.subTest(name):
                path = self.fixtures[name]
                mnt = self.mount(outside(path))
                report = self.call("npz_checks.check", path, inside(mnt), inside(views_dir(mnt)))
                self.assertEqual(report["problems"], [], f"{name} against {self.versions}")
                self.assertEqual(report["tensors"], len(self.fixtures["keys"]))

    def test_pack_to_pth(self):
        for name in ("stored", "compressed"):
            with self.subTest(name):
                pth = self.new_dir("packed") / f"{name}.pth"
                r = subprocess.run([str(CKPTFS), "pack", str(outside(self.fixtures[name])),
                                    str(pth)], capture_output=True, timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr)
                report = self.call("npz_checks.check_packed", self.fixtures[name], inside(pth))
                self.assertEqual(report["problems"], [], f"{name} against {self.versions}")


if __name__ == "__main__":
    unittest.main()
