# SPDX-License-Identifier: MIT
"""Models loaded by the current transformers and accelerate (the interop root's) from mounts:

  - tiny GPT-2 and Llama models saved by save_pretrained (single file, sharded) and as .bin
    (single, sharded), each mounted; a directory holding the model's config.json beside the
    mount's model.safetensors (a symbolic link; the shard set and its index with -o shard_size)
    loads with from_pretrained to the same state dict and the same logits, bit for bit, as
    from_pretrained of the model as saved;
  - through -o dtype=bfloat16, the same as from_pretrained(..., dtype=torch.bfloat16);
  - accelerate's init_empty_weights + load_checkpoint_in_model from the mount's
    model.safetensors, and from the views folder of a -o shard_size set;
  - from_pretrained of the views folder itself, the model directory the mount serves (its
    config.json, generation config and tokenizer files beside the export): the directory
    mounted, its model.safetensors or index named, a sharded set, -o shard_size, -o dtype
    (dtype="auto" gives it: config.json says it), a hub cache snapshot of links to blobs; the
    tokenizer of the views encodes and applies the chat template as the original's;
  - accelerate's load_checkpoint_and_dispatch and safetensors.torch.load_model on the export of
    a safetensors file, a torch .bin file and a sharded set.

The checks are tests/interop/root/transformers_checks.py, run in the root.
Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_transformers` (label interop).
"""

import os
import shutil
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

    def from_pretrained_of_views(self, named, *options, dtype=None, original=None):
        original = original or named
        mnt = self.mount(outside(named), *options)
        report = self.call("transformers_checks.from_pretrained_of_views", original,
                           inside(views_dir(mnt)), dtype)
        self.check(report, f"from_pretrained of the views of {named} {' '.join(options)}")
        # Every file of the original transformers reads is there (save_pretrained writes a
        # generation config; the .bin fixtures, written as transformers 4 did, have none).
        for name in ("config.json", "generation_config.json", "tokenizer.json",
                     "tokenizer_config.json", "chat_template.jinja"):
            if name in ("config.json", "tokenizer.json") or (outside(original) / name).exists():
                self.assertIn(name, report["files"])
        return report

    def test_from_pretrained_of_the_views(self):
        gpt2, sharded = self.models["gpt2"]["path"], self.models["llama_sharded"]["path"]
        for named, options, original in (
                (gpt2, [], None), (f"{gpt2}/model.safetensors", [], gpt2),
                (sharded, [], None), (self.models["gpt2_bin_sharded"]["path"], [], None),
                (f"{sharded}/model.safetensors.index.json", ["-o", "shard_size=100KB"], sharded)):
            with self.subTest(named, options=options):
                report = self.from_pretrained_of_views(named, *options, original=original)
                self.assertEqual(report["dtype"], "torch.float32")
                if options:
                    self.assertIn("model.safetensors.index.json", report["files"])

    def test_from_pretrained_of_the_views_with_dtype(self):
        for name, options in (("gpt2", []), ("llama_sharded", ["-o", "shard_size=100KB"]),
                              ("gpt2_bin", [])):
            with self.subTest(name, options=options):
                report = self.from_pretrained_of_views(
                    self.models[name]["path"], "-o", "dtype=bfloat16", *options,
                    dtype="bfloat16")
                self.assertEqual(report["dtype"], "torch.bfloat16")

    def test_from_pretrained_of_a_hub_cache_snapshot(self):
        # huggingface_hub's layout: every file of snapshots/<rev>/ a link to ../../blobs/<sha>.
        original = self.models["llama_sharded"]["path"]
        repo = self.new_dir("hub") / "models--org--tiny-llama"
        blobs, snapshot = repo / "blobs", repo / "snapshots" / "0123456789abcdef"
        for p in (blobs, snapshot, repo / "refs"):
            p.mkdir(parents=True)
        (repo / "refs" / "main").write_text("0123456789abcdef")
        for i, name in enumerate(sorted(os.listdir(outside(original)))):
            shutil.copy(outside(original) / name, blobs / f"sha{i:04}")
            (snapshot / name).symlink_to(f"../../blobs/sha{i:04}")
        for named in (snapshot, snapshot / "model.safetensors.index.json"):
            with self.subTest(named.name):
                self.from_pretrained_of_views(inside(named), original=original)

    def test_load_checkpoint_and_dispatch(self):
        for name, options, file in (("gpt2", [], "model.safetensors"),
                                    ("gpt2_bin", [], "model.safetensors"),
                                    ("gpt2_bin_sharded", [], "model.safetensors"),
                                    ("llama_sharded", ["-o", "shard_size=100KB"], None)):
            with self.subTest(name, options=options):
                model = self.models[name]
                mnt = self.mount(outside(model["path"]), *options)
                checkpoint = views_dir(mnt) / file if file else views_dir(mnt)
                report = self.call("transformers_checks.dispatch_via_mount", model["path"],
                                   inside(checkpoint))
                self.check(report, f"load_checkpoint_and_dispatch {name} {' '.join(options)}")

    def test_safetensors_load_model(self):
        for name in ("gpt2", "gpt2_bin", "llama_sharded"):
            with self.subTest(name):
                model = self.models[name]
                mnt = self.mount(outside(model["path"]))
                report = self.call("transformers_checks.load_model_via_mount", model["path"],
                                   inside(views_dir(mnt) / "model.safetensors"))
                self.check(report, f"safetensors.torch.load_model {name}")


if __name__ == "__main__":
    unittest.main()
