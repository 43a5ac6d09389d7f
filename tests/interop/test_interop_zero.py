# SPDX-License-Identifier: MIT
"""DeepSpeed ZeRO checkpoints (stages 1, 2 and 3, world sizes 1-4, bf16 and fp16, three param
groups, uneven sizes, frozen and tied parameters, BatchNorm's buffers) written in DeepSpeed's
layout by the current torch (tests/interop/root/zero_fixtures.py), mounted, and every view read
by the current torch, numpy and safetensors against what DeepSpeed's own zero_to_fp32.py (the
corpus's copy, run in the root with a stand-in `deepspeed` package) gives for them: every key in
its order, dtype and byte, through data, tensor.npy, tensor.pt, model.safetensors and its
shards, -o dtype, -o layout=rfc, `ckptfs pack`, and zero_to_fp32's own output file. A fixture
counts only when zero_to_fp32 gives back the model it was made from (test_fixtures_are_models).
The corpus's real ZeRO-3 checkpoint, whose optimizer states are missing, mounts what it can.

The checks are tests/interop/root/zero_checks.py, run in the root.
Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_zero` (label interop).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import CKPTFS, CORPUS, require  # noqa: E402

require("fuse", "interop", "corpus")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402

REAL = CORPUS / "formats" / "bigyanghimire__deepspeed-experiments__zero3-bert-model-states-only"
PACK_TIMEOUT = 120.0
# What S3 settings ckptfs reads from the environment: the test's own, the machine's unset.
S3_ENVIRONMENT = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
                  "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_PROFILE",
                  "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")


class ZeroTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # zero_to_fp32.py as DeepSpeed ships it, from the corpus's real checkpoint.
        script = cls.new_dir("script") / "zero_to_fp32.py"
        shutil.copy(REAL / "zero_to_fp32.py", script)
        cls.script = inside(script)
        cls.fixtures = cls.call("zero_fixtures.write", inside(cls.new_dir("fixtures")), cls.script)

    def fixture(self, name):
        return self.fixtures[name]["path"]

    def assert_clean(self, report, where):
        self.assertEqual(report["problems"], [], where)
        self.assertGreater(report["tensors"], 0, where)

    def test_fixtures_are_models(self):
        """zero_to_fp32 gives back each fixture's model: its fp32 weights, buffers, frozen and
        tied parameters (else the fixture would not count)."""
        self.assertEqual(len(self.fixtures), 26)
        for name, fixture in self.fixtures.items():
            with self.subTest(name):
                self.assert_clean(self.call("zero_checks.check_fixture", fixture, self.script),
                                  name)

    def test_every_fixture(self):
        """Each fixture's directory (with `latest`) mounted: index.json's keys in zero_to_fp32's
        order, then the module's under module.; every key's data, meta.json, tensor.npy and
        tensor.pt, and model.safetensors, byte for byte."""
        for name in self.fixtures:
            with self.subTest(name):
                mnt = self.mount(outside(self.fixture(name)))
                path = self.fixture(name)
                report = self.call("zero_checks.check_split", path, self.script, inside(mnt),
                                   inside(views_dir(mnt)))
                self.assert_clean(report, f"{name}: the key directories")
                stage = self.fixtures[name]["stage"]
                modules = [k for k in report["keys"] if k.startswith("module.")]
                self.assertEqual(bool(modules), stage != 3, name)
                self.assert_clean(self.call("zero_checks.check_export", path, self.script,
                                            inside(views_dir(mnt))), f"{name}: model.safetensors")

    def test_tag_directory(self):
        """The tag directory named itself mounts the same checkpoint."""
        for name in ("zero2-fp16-ws3-round_robin", "zero3-bf16-ws4-sub_groups"):
            with self.subTest(name):
                mnt = self.mount(outside(self.fixtures[name]["tag_dir"]))
                report = self.call("zero_checks.check_split", self.fixture(name), self.script,
                                   inside(mnt), inside(views_dir(mnt)))
                self.assert_clean(report, name)

    def test_dtype(self):
        """-o dtype: every floating-point tensor as torch's Tensor.to gives it (the buffers
        converted from float32, as zero_to_fp32 gives them)."""
        for name, dtype in (("zero2-bf16-ws3", "bfloat16"), ("zero3-fp16-ws4", "float16"),
                            ("zero1-fp16-ws2", "bfloat16")):
            with self.subTest(name, dtype=dtype):
                mnt = self.mount(outside(self.fixture(name)), "-o", f"dtype={dtype}")
                views = inside(views_dir(mnt))
                self.assert_clean(self.call("zero_checks.check_split", self.fixture(name),
                                            self.script, inside(mnt), views, dtype), name)
                self.assert_clean(self.call("zero_checks.check_export", self.fixture(name),
                                            self.script, views, dtype), name)

    def test_shards_and_rfc(self):
        for name in ("zero2-bf16-ws4", "zero3-bf16-ws3"):
            with self.subTest(name, layout="shards"):
                mnt = self.mount(outside(self.fixture(name)), "-o", "shard_size=4KB")
                report = self.call("zero_checks.check_shards", self.fixture(name), self.script,
                                   inside(views_dir(mnt)))
                self.assert_clean(report, name)
                self.assertGreater(report["shards"], 1)
            with self.subTest(name, layout="rfc"):
                mnt = self.mount(outside(self.fixture(name)), "-o", "layout=rfc")
                self.assert_clean(self.call("zero_checks.check_rfc", self.fixture(name),
                                            self.script, inside(mnt), inside(views_dir(mnt))),
                                  name)

    def pack(self, name, suffix, *args):
        out = self.new_dir("packed") / f"out{suffix}"
        r = subprocess.run([str(CKPTFS), "pack", str(outside(self.fixture(name))), str(out),
                            *args], capture_output=True, timeout=PACK_TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        return inside(out)

    def test_pack(self):
        """ckptfs pack of the directory to .pth and .safetensors (and --dtype bfloat16)."""
        for name in ("zero1-bf16-ws3", "zero2-fp16-ws2", "zero3-bf16-ws4-sub_groups"):
            with self.subTest(name):
                report = self.call("zero_checks.check_pack", self.fixture(name), self.script,
                                   self.pack(name, ".pth"), self.pack(name, ".safetensors"))
                self.assert_clean(report, name)
        with self.subTest("zero3-fp16-ws3", dtype="bfloat16"):
            name = "zero3-fp16-ws3"
            report = self.call("zero_checks.check_pack", self.fixture(name), self.script,
                               self.pack(name, ".pth", "--dtype", "bfloat16"),
                               self.pack(name, ".safetensors", "--dtype", "bfloat16"),
                               "bfloat16")
            self.assert_clean(report, name)

    def test_zero_to_fp32_output(self):
        """The file zero_to_fp32.py itself writes (its command line's consolidation) holds the
        tensors of the mount's model.safetensors, in the same order, byte for byte."""
        for name in ("zero1-fp16-ws4", "zero2-bf16-ws3", "zero3-bf16-ws2", "zero3-fp16-ws4"):
            with self.subTest(name):
                mnt = self.mount(outside(self.fixture(name)))
                report = self.call("zero_checks.check_output", self.fixture(name), self.script,
                                   inside(views_dir(mnt)), inside(self.new_dir("output")))
                self.assert_clean(report, name)

    def test_remote(self):
        """A checkpoint directory over HTTP (named by its URL with a trailing '/', its `latest`,
        or its tag directory) and over S3: the same keys and bytes as the local mount, its files
        found by DeepSpeed's names (a server lists no directory) and read by range."""
        from remote_servers import Nginx, S3Server
        root = outside(Path(self.fixture("zero2-bf16-ws3")).parent)
        nginx = Nginx(root, self.new_dir("nginx"), tls=False)
        self.addCleanup(nginx.stop)
        nginx.start()
        for name, suffix in (("zero2-bf16-ws3", "/"), ("zero3-fp16-ws4", "/latest"),
                             ("zero1-fp16-ws2", "/global_step7/"),
                             ("zero3-bf16-ws4-sub_groups", "/")):
            with self.subTest(name, url=suffix):
                mark = nginx.mark()
                mnt = self.mount(nginx.url(name + suffix))
                report = self.call("zero_checks.check_split", self.fixture(name), self.script,
                                   inside(mnt), inside(views_dir(mnt)))
                self.assert_clean(report, name)
                whole = [r for r in nginx.since(mark) if r["method"] == "GET"
                         and r["path"].endswith(".pt") and r["range"] in ("", "-")]
                self.assertEqual(whole, [], "a states file fetched whole, not by range")
        if not S3Server.installed():
            self.skipTest("the S3 test server is not installed (scripts/install-deps.sh)")
        s3 = S3Server(self.new_dir("s3"), "models")
        self.addCleanup(s3.stop)
        s3.start()
        name = "zero3-bf16-ws4-sub_groups"
        for f in sorted(Path(outside(self.fixture(name))).rglob("*")):
            if f.is_file():
                s3.put(f"ckpt/{f.relative_to(outside(self.fixture(name)))}", f)
        saved = {k: os.environ.get(k) for k in S3_ENVIRONMENT}
        self.addCleanup(os.environ.update, {k: v for k, v in saved.items() if v is not None})
        for k in S3_ENVIRONMENT:
            os.environ.pop(k, None)
        os.environ.update(AWS_ENDPOINT_URL=s3.endpoint, AWS_ACCESS_KEY_ID=S3Server.ACCESS_KEY,
                          AWS_SECRET_ACCESS_KEY=S3Server.SECRET_KEY, AWS_REGION="us-east-1")
        mnt = self.mount("s3://models/ckpt/")
        report = self.call("zero_checks.check_split", self.fixture(name), self.script,
                           inside(mnt), inside(views_dir(mnt)))
        self.assert_clean(report, f"s3: {name}")

    def test_real_checkpoint_without_optimizer_states(self):
        """The corpus's real ZeRO-3 checkpoint (DeepSpeed 0.18.5, bf16, 2 ranks) lacks its
        optimizer states: zero_to_fp32 refuses it; the mount lists its parameters (param_shapes,
        the tied lm_head.decoder.weight), each broken, saying the optimizer states are missing."""
        copy = self.new_dir("real") / "ckpt"
        shutil.copytree(REAL, copy)
        refused = self.call("zero_checks.reference_error", inside(copy), self.script)
        self.assertIn("FileNotFoundError", refused or "")
        mnt = self.mount(copy)
        report = self.call("zero_checks.broken_report", inside(mnt), inside(views_dir(mnt)))
        self.assertEqual(report["format"], "zero")
        self.assertEqual(len(report["keys"]), 110)
        self.assertEqual(report["keys"][0], "encoder.embeddings.word_embeddings.weight")
        self.assertEqual(report["keys"][-1], "lm_head.decoder.weight")
        self.assertEqual(set(report["broken"]), set(report["keys"]))
        for why in report["broken"].values():
            self.assertEqual(why, 'no *_optim_states.pt in "global_step99": the fp32 weights are '
                                  "in the optimizer states, which this checkpoint lacks (only its "
                                  "model states are here); zero_to_fp32 needs them too")


if __name__ == "__main__":
    import unittest
    unittest.main()
