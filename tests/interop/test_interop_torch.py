# SPDX-License-Identifier: MIT
"""Checkpoints written by current torch (the interop root's, 2.x), mounted, and read back by that
torch: every dtype torch 2.x saves, views and shared storages, a training checkpoint,
torch.save(model), and the legacy stream torch 2.x still writes on request.

For each: the mount's keys are those of the flattening rule applied to torch.load's object; each
tensor's `data` and np.load(tensor.npy) hold torch.load's bytes; each tensor.pt loads with
torch's default torch.load (weights_only=True) and with mmap=True as torch.load's tensor; and
under -o layout=rfc, map.pt and every <key>.pt likewise (tests/interop/root/torch_checks.py).

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_torch` (label interop).
"""

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402

FIXTURES = ["dtypes", "views", "training", "module", "legacy"]

PACKED = ("quint4x2", "quint2x4")


def key_dtype(problem):
    """The dtype fixture key a problem line of torch_checks is about ("quint4x2.scalar/..."
    -> "quint4x2")."""
    return problem.split(" ")[0].split("/")[0].split(":")[0].split(".")[0]


class TorchTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        out = cls.new_dir("fixtures")
        cls.fixtures = cls.call("torch_fixtures.write", inside(out))
        cls.versions = cls.call("versions.tools")

    def check(self, name, layout):
        """The report of torch_checks.check_<layout> on a mount of fixture `name`: it must
        have no problem."""
        fixture = self.fixtures[name]
        options = ["-o", "layout=rfc"] if layout == "rfc" else []
        mnt = self.mount(outside(fixture["path"]), *options)
        report = self.call(f"torch_checks.check_{layout}", fixture["path"], inside(mnt),
                           inside(views_dir(mnt)), fixture["weights_only"])
        self.assertEqual(report["problems"], [], f"{name} ({layout}) against {self.versions}")
        self.assertGreater(report["tensors"], 0, name)
        return report

    def test_every_savable_dtype(self):
        report = self.check("dtypes", "split")
        fixture = self.fixtures["dtypes"]
        # Every dtype this torch saves is in the fixture (the dtypes of torch 2.14 named here
        # at least), and the mount showed each.
        self.assertEqual(sorted(set(fixture["dtypes"]) - set(report["dtypes"])), [])
        for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                     "float8_e8m0fnu", "float4_e2m1fn_x2", "uint16", "uint32", "uint64", "bool",
                     "bfloat16", "complex32", "bcomplex32", "bits16", "bits1x8", "qint8"):
            self.assertIn(name, fixture["dtypes"])
        print(f"\n  {len(fixture['dtypes'])} dtypes saved by {self.versions}; not savable: "
              f"{sorted(fixture['not_savable'])}", file=sys.stderr)

    def test_packed_quantized_dtypes(self):
        """quint4x2 and quint2x4, which torch 2.14 saves and loads (weights_only too), packed 2
        or 4 elements a byte in rows of whole bytes: served as torch stores them (data and
        tensor.npy their bytes, tensor.pt torch.load's tensor; they were broken: "its view
        needs 15 bytes of storage but it has 9"), in both layouts, each of the shapes of the
        fixture (rows that fill their bytes and odd ones, 0-d, empty)."""
        fixture = self.fixtures["dtypes"]
        keys = [k for k in fixture["keys"] if key_dtype(k) in PACKED]
        self.assertGreaterEqual(len(keys), 14, keys)
        for layout in ("split", "rfc"):
            with self.subTest(layout):
                report = self.check("dtypes", layout)
                self.assertEqual([p for p in report["problems"] if key_dtype(p) in PACKED], [])
        report = self.call("torch_checks.check_packed", fixture["path"],
                           inside(self.mount(outside(fixture["path"]))), keys)
        self.assertEqual(report["problems"], [], self.versions)
        self.assertEqual(report["tensors"], len(keys))

    def test_split_layout(self):
        for name in FIXTURES:
            with self.subTest(name):
                self.check(name, "split")

    def test_rfc_layout(self):
        for name in FIXTURES:
            with self.subTest(name):
                self.check(name, "rfc")

    def test_rfc_values_keep_their_types(self):
        """<key>.pt of a value holds it as the pickle did: Adam's betas a tuple, a module's
        _non_persistent_buffers_set a set (issue 20, item 6: values were rebuilt from
        value.json, which has neither)."""
        for name in ("training", "module"):
            fixture = self.fixtures[name]
            mnt = self.mount(outside(fixture["path"]), "-o", "layout=rfc")
            report = self.call("torch_checks.check_rfc", fixture["path"], inside(mnt),
                               inside(views_dir(mnt)), fixture["weights_only"])
            self.assertEqual(report["value_types"], [], name)


if __name__ == "__main__":
    unittest.main()
