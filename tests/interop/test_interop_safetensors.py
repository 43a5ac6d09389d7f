# SPDX-License-Identifier: MIT
"""The mount's safetensors files read by the current safetensors library (the interop root's,
0.8), and files that library and transformers wrote, mounted:

  - model.safetensors of a mount of torch 2.x checkpoints (every dtype torch saves, a training
    checkpoint), plain and with -o dtype=bfloat16/float16: safe_open and load_file give exactly
    torch.load's tensors (of the dtypes safetensors has; converted by torch's Tensor.to);
  - every shard of -o shard_size sets (with -o dtype= too): the same, through the index;
  - files written by safetensors.torch.save_file (every dtype it saves) and sets written by
    transformers' save_pretrained(max_shard_size=...): mounted, each key's data, tensor.npy and
    tensor.pt agree with safe_open of the source, and the mount's own model.safetensors too.

The checks are tests/interop/root/safetensors_checks.py, run in the root.
Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_safetensors` (label interop).
"""

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402

TORCH_FIXTURES = ["dtypes", "training"]


class SafetensorsTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        out = inside(cls.new_dir("fixtures"))
        cls.torch_fixtures = cls.call("torch_fixtures.write", out)
        cls.st_file = cls.call("hf_fixtures.write_safetensors", out)
        cls.models = cls.call("hf_fixtures.write_models", out)
        cls.versions = cls.call("versions.tools")

    def assert_clean(self, report, what):
        self.assertEqual(report["problems"], [], f"{what} against {self.versions}")
        self.assertGreater(report["tensors"], 0, what)

    def mount_torch(self, name, *options):
        fixture = self.torch_fixtures[name]
        mnt = self.mount(outside(fixture["path"]), *options)
        return fixture, mnt

    def test_export_of_torch_checkpoints(self):
        for name in TORCH_FIXTURES:
            for dtype in (None, "bfloat16", "float16"):
                with self.subTest(name, dtype=dtype):
                    options = ["-o", f"dtype={dtype}"] if dtype else []
                    fixture, mnt = self.mount_torch(name, *options)
                    report = self.call("safetensors_checks.check_export", fixture["path"],
                                       inside(views_dir(mnt)), dtype, fixture["weights_only"])
                    self.assert_clean(report, f"{name} -o dtype={dtype}")

    def test_shard_sets(self):
        for name in TORCH_FIXTURES:
            for dtype in (None, "bfloat16"):
                with self.subTest(name, dtype=dtype):
                    options = ["-o", "shard_size=600"] + (["-o", f"dtype={dtype}"] if dtype else [])
                    fixture, mnt = self.mount_torch(name, *options)
                    report = self.call("safetensors_checks.check_shards", fixture["path"],
                                       inside(views_dir(mnt)), dtype, fixture["weights_only"])
                    self.assert_clean(report, f"{name} shard_size=600 dtype={dtype}")
                    self.assertGreater(report["shards"], 1, name)

    def test_file_written_by_save_file(self):
        # Every dtype safetensors.torch saves, float8_e8m0fnu and float4_e2m1fn_x2 among them.
        for name in ("float8_e8m0fnu", "float4_e2m1fn_x2", "uint64", "complex64", "bool"):
            self.assertIn(name, self.st_file["dtypes"])
        mnt = self.mount(outside(self.st_file["path"]))
        report = self.call("safetensors_checks.check_mount_of", self.st_file["path"],
                           inside(mnt), inside(views_dir(mnt)))
        self.assert_clean(report, "save_file's all_dtypes.safetensors")

    def test_sets_written_by_save_pretrained(self):
        for name in ("gpt2", "gpt2_sharded", "llama_sharded"):
            with self.subTest(name):
                model = self.models[name]
                self.assertEqual(model["sharded"], "model.safetensors.index.json" in model["files"])
                mnt = self.mount(outside(model["path"]))
                report = self.call("safetensors_checks.check_mount_of", model["path"],
                                   inside(mnt), inside(views_dir(mnt)))
                self.assert_clean(report, f"save_pretrained's {name}")


if __name__ == "__main__":
    unittest.main()
