# SPDX-License-Identifier: MIT
"""ONNX models written by the interop root's torch (torch.onnx.export, float32, float16,
bfloat16; again with external data by onnx.save_model) and onnx package (make_tensor of every
data type in its typed field and as raw_data, sparse and STRING initializers, an If's
subgraphs; again with external data), mounted and read back by onnx's numpy_helper.to_array,
torch (tensor.pt) and safetensors (model.safetensors): every initializer bit for bit
(tests/interop/root/onnx_checks.py); and `ckptfs pack` of one to safetensors.

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_onnx` (label interop).
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

MODELS = ("torch_float32", "torch_float16", "torch_bfloat16", "torch_external", "helpers",
          "helpers_external")


class OnnxTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.fixtures = cls.call("onnx_fixtures.write", inside(cls.new_dir("fixtures")))
        cls.versions = cls.call("versions.tools")

    def test_every_initializer_equals_to_array(self):
        for name in MODELS:
            with self.subTest(name):
                path = self.fixtures[name]
                mnt = self.mount(outside(path))
                report = self.call("onnx_checks.check", path, inside(mnt), inside(views_dir(mnt)))
                self.assertEqual(report["problems"], [], f"{name} against {self.versions}")
                self.assertGreater(report["tensors"], 0)

    def test_cp_model_safetensors_and_pack(self):
        # pack writes the initializers as any other tensors; the mount's export is the same file.
        out = self.new_dir("packed") / "helpers.safetensors"
        r = subprocess.run([str(CKPTFS), "pack", str(outside(self.fixtures["helpers_external"])),
                            str(out)], capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        mnt = self.mount(outside(self.fixtures["helpers_external"]))
        self.assertEqual(out.read_bytes(), (views_dir(mnt) / "model.safetensors").read_bytes())


if __name__ == "__main__":
    unittest.main()
