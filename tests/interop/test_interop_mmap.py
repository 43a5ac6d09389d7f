# SPDX-License-Identifier: MIT
"""mmap through the mount as transformers and safetensors use it: many threads page-faulting the
tensors of a fresh mount's model.safetensors at once (the deadlock users report with other FUSE
model mounts, when the FUSE queue fills with page faults) complete, with the right bytes (the
CRC-32 of each tensor as torch.load gives it), within a bound.

A 64 MiB checkpoint of 128 tensors written by torch 2.x; storms (tests/interop/root/
mmap_stress.py) of 64 and 256 threads over one shared mapping, 64 threads with a safe_open of
their own each, 64 threads np.load(tensor.npy, mmap_mode="r") of the key directories (first
opens, and their page-cache fills, among them), and 64 threads over -o dtype=bfloat16's
converted file. Each starts from a cold page cache.

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_mmap` (label interop).
"""

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402

TENSORS, TENSOR_KIB = 128, 512  # 64 MiB
# Every storm must be done within this (seconds): here each takes 1-10 s (2 cores, the CRCs of
# 0.5-4 GiB); a deadlock never ends. Generous for sanitizer builds and a loaded machine.
BOUND = 120.0


class MmapTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        path = inside(cls.new_dir("fixtures") / "big.pth")
        cls.fixture = cls.call("mmap_stress.write_checkpoint", path, TENSORS, TENSOR_KIB)
        cls.want = cls.call("mmap_stress.expected", path)

    def storm(self, mode, threads, share, *options, want=None):
        mnt = self.mount(outside(self.fixture["path"]), *options)
        target = inside(mnt) if mode == "npy" else inside(views_dir(mnt) / "model.safetensors")
        r = self.call("mmap_stress.storm", target, want or self.want, threads, mode, BOUND,
                      share, timeout=BOUND + 60)
        what = f"{threads} threads, {mode}, {' '.join(options)}"
        self.assertEqual(r["stuck"], 0, f"{what}: {r['stuck']} threads not done after "
                                        f"{BOUND:g} s")
        self.assertEqual(r["mismatches"], [], what)
        self.assertEqual(r["reads"], threads * max(1, int(TENSORS * share)), what)
        self.assertLess(r["seconds"], BOUND, what)
        print(f"\n  {what}: {r['reads']} tensor reads, {r['bytes'] / 2**30:.2f} GiB in "
              f"{r['seconds']:.2f} s, slowest tensor {r['slowest']:.2f} s", file=sys.stderr)
        return r

    def test_threads_faulting_one_mapping(self):
        self.storm("mmap", 64, 0.25)
        self.storm("mmap", 256, 0.1)

    def test_threads_with_safe_open_each(self):
        self.storm("safe_open", 64, 0.25)

    def test_threads_loading_tensor_npy(self):
        self.storm("npy", 64, 0.25)

    def test_threads_faulting_a_converted_file(self):
        want = self.call("mmap_stress.expected", self.fixture["path"], "bfloat16")
        self.storm("mmap", 64, 0.25, "-o", "dtype=bfloat16", want=want)


if __name__ == "__main__":
    unittest.main()
