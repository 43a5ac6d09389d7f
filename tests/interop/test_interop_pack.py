# SPDX-License-Identifier: MIT
"""`ckptfs pack` outputs loaded by the current torch (weights_only=True, and mmap=True) and
safetensors (the interop root's): from torch 2.x checkpoints (every dtype ckptfs serves, views,
shared storages, a training checkpoint, torch.save(model), the legacy stream), from files and
sets safetensors and transformers wrote, from a split directory copied out of a mount and from
an RFC directory; .pth (nested, and --flat) and .safetensors, and --dtype bfloat16. Each output
gives the source's tensors as the same tools read them from the source; a nested .pth is what
torch.load of the source gives (the training checkpoint exactly, _metadata and all; what pack
does not rebuild as ckptfs_reference.packed_nesting says).

The checks are tests/interop/root/pack_checks.py, run in the root.
Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_pack` (label interop).
"""

import shutil
import subprocess
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import CKPTFS, require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402
from test_interop_torch import NOT_SERVED  # noqa: E402

PACK_TIMEOUT = 120.0


class PackTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        out = inside(cls.new_dir("fixtures"))
        cls.torch_fixtures = cls.call("torch_fixtures.write", out)
        cls.st_file = cls.call("hf_fixtures.write_safetensors", out)
        cls.models = cls.call("hf_fixtures.write_models", out)
        cls.versions = cls.call("versions.tools")

    def pack(self, source, suffix, *args):
        """`ckptfs pack SOURCE OUT [args]` (this machine's path SOURCE), OUT a new file of the
        scratch directory with `suffix`; must exit 0. OUT as the root sees it."""
        out = self.new_dir("packed") / f"out{suffix}"
        r = subprocess.run([str(CKPTFS), "pack", str(source), str(out), *args],
                           capture_output=True, timeout=PACK_TIMEOUT)
        self.assertEqual(r.returncode, 0, f"ckptfs pack {source} {out} {' '.join(args)}: "
                                          f"{r.stderr.decode(errors='replace')}")
        return inside(out)

    def check(self, source, kind, *args, dtype=None, weights_only=True, packed=None,
              every_tensor=True, nested=None):
        """Packs `packed` (by default `source`; paths as the root sees them) to .pth (--flat)
        and .safetensors with `args`, and checks both in the root against `source`, of `kind`;
        with `every_tensor`, none of its tensors may be left out. With `nested` (the arguments
        of pack_checks.check_nested but the files), packs to .pth without --flat too and checks
        that against torch.load of `source`. Returns the flat .pth's report."""
        reports = {}
        if nested is not None:
            out = self.pack(outside(packed or source), ".pth", *args)
            report = self.call("pack_checks.check_nested", out, source, *nested)
            self.assertEqual(report["problems"], [], f"pack {packed or source} nested against "
                                                     f"{self.versions}")
            self.assertGreater(report["tensors"], 0)
        for suffix, check in ((".pth", "check_torch"), (".safetensors", "check_safetensors")):
            flat = ["--flat"] if suffix == ".pth" else []
            out = self.pack(outside(packed or source), suffix, *flat, *args)
            report = self.call(f"pack_checks.{check}", out, source, kind, dtype, weights_only)
            where = f"pack {packed or source} {suffix} {' '.join(args)}"
            self.assertEqual(report["problems"], [], f"{where} against {self.versions}")
            self.assertGreater(report["tensors"], 0)
            if suffix == ".pth" and every_tensor:
                self.assertEqual(report["tensors_left_out"], [], where)
            reports[suffix] = report
        return reports[".pth"]

    def test_torch_checkpoints(self):
        for name in ("views", "training", "module", "legacy"):
            fixture = self.torch_fixtures[name]
            with self.subTest(name):
                self.check(fixture["path"], "torch", weights_only=fixture["weights_only"],
                           nested=[fixture["weights_only"]])
        with self.subTest("training", dtype="bfloat16"):
            self.check(self.torch_fixtures["training"]["path"], "torch", "--dtype", "bfloat16",
                       dtype="bfloat16")

    def test_every_dtype(self):
        fixture = self.torch_fixtures["dtypes"]
        globs = [a for name in fixture["dtypes"] if name not in NOT_SERVED
                 for a in ("--keys", name, "--keys", f"{name}.*")]
        globs += ["--keys", "per_channel.*", "--keys", "complex.*"]
        report = self.check(fixture["path"], "torch", *globs, every_tensor=False)
        self.assertEqual([k for k in report["tensors_left_out"]
                          if k.split(".")[0] not in NOT_SERVED], [],
                         "pack leaves out no tensor of a dtype ckptfs serves")

    def test_safetensors_sources(self):
        self.check(self.st_file["path"], "safetensors")
        for name in ("gpt2_sharded", "llama_sharded"):
            with self.subTest(name):
                self.check(self.models[name]["path"], "safetensors")

    def test_split_and_rfc_directories(self):
        fixture = self.torch_fixtures["training"]
        # The key directories and index.json of a mount, copied out.
        mnt = self.mount(outside(fixture["path"]))
        split = self.new_dir("split")
        for entry in mnt.iterdir():
            if entry.is_dir() and not entry.name.startswith("."):  # (not the views' .ckptfs/)
                shutil.copytree(entry, split / entry.name)
        shutil.copy(views_dir(mnt) / "index.json", split)
        self.check(fixture["path"], "torch", packed=inside(split))
        # Nested from the copy: the training checkpoint, but a state_dict's _metadata, which
        # the copy's JSON does not hold.
        out = self.pack(split, ".pth")
        report = self.call("pack_checks.check_nested", out, fixture["path"], True, True, False)
        self.assertEqual(report["problems"], [], f"the copy packed nested against "
                                                 f"{self.versions}")
        # map.pt and every <name>.pt of -o layout=rfc, copied out. The reference stays the
        # checkpoint (torch.load of it).
        mnt = self.mount(outside(fixture["path"]), "-o", "layout=rfc")
        rfc = self.new_dir("rfc")
        for entry in mnt.iterdir():
            if entry.name.endswith(".pt"):
                shutil.copy(entry, rfc)
        self.check(fixture["path"], "torch", packed=inside(rfc))

    def test_values_keep_their_types(self):
        """pack writes a value as the pickle held it (Adam's betas a tuple; issue 20, item 6:
        values were rebuilt from value.json)."""
        fixture = self.torch_fixtures["training"]
        out = self.pack(outside(fixture["path"]), ".pth", "--flat")
        report = self.call("pack_checks.check_torch", out, fixture["path"], "torch")
        self.assertEqual(report["value_types"], [])


if __name__ == "__main__":
    unittest.main()
