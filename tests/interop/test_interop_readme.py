# SPDX-License-Identifier: MIT
"""The README's recipes that need torch 2.x, run as written in the interop root (the others are
tests/integration/test_readme.py's, under this machine's torch 1.13, whose rules hold here: the
blocks of one recipe taken from the README at test time, in order, in one fresh directory).

  resume_dcp  a DCP checkpoint `step-100` (tests/interop/root/readme_checks.py: the README's
              model with AdamW, two steps, dcp.save of get_state_dict) mounted and packed by
              the sh blocks on this machine; the python block run by the root's torch in that
              directory: the model's weights loaded from the mount must be the checkpoint's,
              then set_state_dict from the packed .pth must give the model and optimizer that
              dcp_to_torch_save's file gives, and one more training step from each the same
              tensors; the packed file equals dcp_to_torch_save's in structure, types and bits.

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_readme` (label interop).
"""

import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import CKPTFS, require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside  # noqa: E402
from readme_blocks import recipe  # noqa: E402

BLOCK_TIMEOUT = 180

# Run after the python block, in its namespace: the weights from the mount, then what
# set_state_dict made of the packed file, against dcp_to_torch_save's file.
AFTER_RESUME = """
import ckptfs_reference as ref
import readme_checks
from torch.distributed.checkpoint.state_dict import get_state_dict
reference = torch.load("step-100.reference.pt", weights_only=True)
for key, tensor in reference["model"].items():
    assert torch.equal(weights[key], tensor), key
assert ref.nesting_difference(state, reference) is None, ref.nesting_difference(state, reference)
m, o = readme_checks.readme_model()
set_state_dict(m, o, model_state_dict=reference["model"], optim_state_dict=reference["optim"])
for resumed in ((model, optimizer), (m, o)):
    readme_checks.train_step(*resumed, 3)
got, want = get_state_dict(model, optimizer), get_state_dict(m, o)
assert ref.nesting_difference(got, want) is None, ref.nesting_difference(got, want)
print("resume_dcp: resumed as from dcp_to_torch_save's file")
"""


class ReadmeRecipesOfTorch2(InteropCase):
    def run_sh(self, block, cwd):
        """A sh block on this machine, `ckptfs` being the binary under test."""
        bin_dir = cwd / ".bin"
        bin_dir.mkdir(exist_ok=True)
        if not (bin_dir / "ckptfs").exists():
            (bin_dir / "ckptfs").symlink_to(CKPTFS)
        env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=cwd, env=env,
                           capture_output=True, timeout=BLOCK_TIMEOUT)
        self.assertEqual(r.returncode, 0, f"{block.where()} failed (exit {r.returncode}):\n"
                                          f"{r.stderr.decode(errors='replace')[-3000:]}")

    def test_resume_dcp(self):
        work = self.new_dir("resume_dcp")
        self.call("readme_checks.write_dcp", inside(work), timeout=600)
        mnt = work / "mnt"
        self.addCleanup(lambda: mnt.is_mount() and subprocess.run(["fusermount3", "-u", mnt]))
        blocks = recipe("resume_dcp")
        self.assertEqual([b.lang for b in blocks], ["sh", "python", "sh"])
        self.run_sh(blocks[0], work)
        steps = [("\n" * (blocks[1].line - 1) + blocks[1].code, "README.md"),
                 (AFTER_RESUME, f"<check after README.md:{blocks[1].line}>")]
        self.call("readme_checks.run_python", steps, inside(work))
        self.run_sh(blocks[2], work)
        self.assertFalse(mnt.is_mount(), "the recipe left its mount")
        # The file pack wrote is dcp_to_torch_save's, in structure, types and bits.
        report = self.call("pack_checks.check_nested", inside(work / "step-100.pth"),
                           inside(work / "step-100.reference.pt"))
        self.assertEqual(report["problems"], [], json.dumps(report))


if __name__ == "__main__":
    unittest.main()
