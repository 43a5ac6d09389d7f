# SPDX-License-Identifier: MIT
"""Models loaded by the current transformers and accelerate (the interop root's) from mounts:

  - tiny GPT-2 and Llama models saved by save_pretrained (single file, sharded) and as .bin
    (single, sharded), each mounted; a directory holding the model's config.json beside the
    mount's model.safetensors (a symbolic link; the shard set and its index with -o shard_size)
    loads with from_pretrained to the same state dict and the same logits, bit for bit, as
    from_pretrained of the model as saved;
  - through -o dtype=bfloat16, the same as from_pretrained(..., dtype=torch.bfloat16);
  - accelerate's init_empty_weights + load_checkpoint_in_model from the mount's
    model.safetensors, and from the views folder of a -o shard_size set.

The checks are tests/interop/root/transformers_checks.py, run in the root.
Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_transformers` (label interop).
"""

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402

MODELS = ["gpt2", "gpt2_sharded", "gpt2_bin", "gpt2_bin_sharded", "llama_sharded"]


class TransformersTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.models = cls.call("hf_fixtures.write_models", inside(cls.new_dir("fixtures")))
        cls.versions = cls.call("versions.tools")

    def check(self, report, what):
        self.assertEqual(report["problems"], [], f"{what} against {self.versions}")
        self.assertTrue(report["logits_equal"], what)

    def from_pretrained(self, name, *options, dtype=None):
        model = self.models[name]
        mnt = self.mount(outside(model["path"]), *options)
        report = self.call("transformers_checks.from_pretrained_via_mount", model["path"],
                           inside(views_dir(mnt)), inside(self.new_dir("linked")), dtype)
        self.check(report, f"{name} {' '.join(options)}")
        return report

    def test_from_pretrained(self):
        for name in MODELS:
            with self.subTest(name):
                report = self.from_pretrained(name)
                self.assertIn("model.safetensors", report["linked"])
                self.assertEqual(report["dtype"], "torch.float32")

    def test_from_pretrained_of_a_shard_set(self):
        for name in ("llama_sharded", "gpt2_bin"):
            with self.subTest(name):
                report = self.from_pretrained(name, "-o", "shard_size=100KB")
                self.assertIn("model.safetensors.index.json", report["linked"])
                shards = [n for n in report["linked"] if n.startswith("model-0")]
                self.assertGreater(len(shards), 1, report["linked"])

    def test_bfloat16(self):
        for name in ("gpt2", "llama_sharded", "gpt2_bin_sharded"):
            with self.subTest(name):
                report = self.from_pretrained(name, "-o", "dtype=bfloat16", dtype="bfloat16")
                self.assertEqual(report["dtype"], "torch.bfloat16")

    def test_accelerate_load_checkpoint_in_model(self):
        for name, options, file in (("gpt2", [], "model.safetensors"),
                                    ("gpt2_bin_sharded", [], "model.safetensors"),
                                    ("llama_sharded", ["-o", "shard_size=100KB"], None)):
            with self.subTest(name, options=options):
                model = self.models[name]
                mnt = self.mount(outside(model["path"]), *options)
                checkpoint = views_dir(mnt) / file if file else views_dir(mnt)
                report = self.call("transformers_checks.accelerate_via_mount", model["path"],
                                   inside(checkpoint))
                self.check(report, f"accelerate {name} {' '.join(options)}")


if __name__ == "__main__":
    unittest.main()
