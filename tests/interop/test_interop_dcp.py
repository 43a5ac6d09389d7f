# SPDX-License-Identifier: MIT
"""PyTorch Distributed Checkpoints written by the current torch (the interop root's 2.x), and
the corpus's real ones (a Lightning FSDP checkpoint of world size 2, a Megatron one), mounted and
read by the current torch, numpy and safetensors against torch's own consolidation:

  - the fixtures of tests/interop/root/dcp_fixtures.py: one process; FSDP2 on 2 and 3 gloo
    processes (uneven rows, a rank without rows, bfloat16); DTensors of 4 processes (Shard(0),
    Shard(1) uneven, Replicate, a 2x2 mesh); model and optimizer states; the reference is
    dcp_to_torch_save's file, which torch.distributed.checkpoint.load into full tensors agrees
    with;
  - every key, its data, tensor.npy (np.load) and tensor.pt (torch.load, weights_only and
    mmap) is the reference's (torch_checks.check_split), and index.json's keys are its
    flattening's, in order: values nested as dcp_to_torch_save nests them; -o layout=rfc's
    map.pt and <name>.pt files likewise (torch_checks.check_rfc);
  - model.safetensors (plain, -o dtype=bfloat16) and -o shard_size sets, read by safe_open and
    load_file; `ckptfs pack` of the directory to .pth: nested, dcp_to_torch_save's file in
    structure, types and bits (torch.load weights_only, and mmap), and resuming from it (a
    model and its optimizer, set_state_dict, one step) gives what resuming from
    dcp_to_torch_save's file gives; with --flat the flattened keys; to .safetensors; meta.json's
    pieces are .metadata's chunks (dcp_checks.check_pieces).

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_dcp` (label interop).
"""

import shutil
import subprocess
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import CKPTFS, CORPUS as CORPUS_DIR, require  # noqa: E402

require("fuse", "interop", "corpus")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402

FIXTURES = ["single", "fsdp2_w2", "fsdp2_bf16_w3", "dtensor_w4"]
CORPUS = ["Lightning-AI__pytorch-lightning__dcp-fsdp-world2",
          "LionRock-Research__Megatron-LM__dcp-ckpt"]


class DcpTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        out = cls.new_dir("fixtures")
        cls.fixtures = cls.call("dcp_fixtures.write", inside(out), timeout=900)
        # The corpus's checkpoints, copied where the root sees them, and their references.
        for name in CORPUS:
            source = CORPUS_DIR / "formats" / name
            if not source.is_dir():
                raise AssertionError(f"{source} is missing (the corpus)")
            copy = out / name
            shutil.copytree(source, copy)
            reference = cls.call("dcp_fixtures.reference_of", inside(copy), inside(copy) + ".pt")
            cls.fixtures[name] = {"path": inside(copy), "reference": reference,
                                  "load_problems": []}
        cls.versions = cls.call("versions.tools")

    def assert_clean(self, report, what, counted="tensors"):
        self.assertEqual(report["problems"], [], f"{what} against {self.versions}")
        self.assertGreater(report[counted], 0, what)

    def test_references_agree(self):
        """dcp.load into full tensors gives dcp_to_torch_save's tensors: one reference."""
        for name in FIXTURES:
            self.assertEqual(self.fixtures[name]["load_problems"], [], name)

    def test_tree_is_dcp_to_torch_save(self):
        for name in FIXTURES + CORPUS:
            with self.subTest(name):
                f = self.fixtures[name]
                mnt = self.mount(outside(f["path"]))
                report = self.call("torch_checks.check_split", f["reference"], inside(mnt),
                                   inside(views_dir(mnt)), True)
                self.assert_clean(report, f"{name}: the tree")
                pieces = self.call("dcp_checks.check_pieces", f["path"], inside(mnt),
                                   inside(views_dir(mnt)))
                self.assert_clean(pieces, f"{name}: meta.json's pieces", "pieces")
                rfc = self.mount(outside(f["path"]), "-o", "layout=rfc")
                report = self.call("torch_checks.check_rfc", f["reference"], inside(rfc),
                                   inside(views_dir(rfc)), True)
                self.assert_clean(report, f"{name}: -o layout=rfc")

    def test_safetensors_export_and_shards(self):
        for name in FIXTURES + CORPUS:
            with self.subTest(name):
                f = self.fixtures[name]
                for dtype in (None, "bfloat16"):
                    options = ["-o", f"dtype={dtype}"] if dtype else []
                    mnt = self.mount(outside(f["path"]), *options)
                    report = self.call("safetensors_checks.check_export", f["reference"],
                                       inside(views_dir(mnt)), dtype, True)
                    self.assert_clean(report, f"{name} -o dtype={dtype}: model.safetensors")
                mnt = self.mount(outside(f["path"]), "-o", "shard_size=400")
                report = self.call("safetensors_checks.check_shards", f["reference"],
                                   inside(views_dir(mnt)), None, True)
                self.assert_clean(report, f"{name} shard_size=400")

    def pack(self, name, out, *args, alone=True):
        """`ckptfs pack` of fixture `name` to `out`; with `alone`, stderr must be the summary
        alone (nothing left out, flattened or renamed)."""
        r = subprocess.run([str(CKPTFS), "pack", str(outside(self.fixtures[name]["path"])),
                            str(out), *args], capture_output=True, timeout=300)
        err = r.stderr.decode(errors="replace")
        self.assertEqual(r.returncode, 0, err)
        if alone:
            self.assertEqual(err.count("\n"), 1, f"more than the summary: {err}")

    def test_pack(self):
        for name in FIXTURES + CORPUS:
            with self.subTest(name):
                f = self.fixtures[name]
                out_dir = self.new_dir("pack")
                # Nested: dcp_to_torch_save's file, exactly.
                out = out_dir / f"{name}.pth"
                self.pack(name, out)
                report = self.call("pack_checks.check_nested", inside(out), f["reference"],
                                   True, False)
                self.assert_clean(report, f"{name}: ckptfs pack to .pth")
                for suffix, args, check in ((".pth", ["--flat"], "pack_checks.check_torch"),
                                            (".safetensors", [],
                                             "pack_checks.check_safetensors")):
                    out = out_dir / f"{name}-flat{suffix}"
                    self.pack(name, out, *args, alone=False)  # safetensors: no values
                    report = self.call(check, inside(out), f["reference"], "torch", None, True)
                    self.assert_clean(report, f"{name}: ckptfs pack {' '.join(args)} to {suffix}")

    def test_resume_from_pack(self):
        """Resuming from the packed file is resuming from dcp_to_torch_save's: the fixtures'
        model and optimizer (plain state_dict()s in one process; get_state_dict's of FSDP2 in
        two), loaded from each file and stepped once, give the same tensors."""
        for name in ("single", "fsdp2_w2"):
            with self.subTest(name):
                out = self.new_dir("resume") / f"{name}.pth"
                self.pack(name, out)
                report = self.call("dcp_fixtures.resume_problems", name, inside(out),
                                   self.fixtures[name]["reference"])
                self.assertEqual(report, [], name)


if __name__ == "__main__":
    unittest.main()
