# SPDX-License-Identifier: MIT
"""One page cache, not two: bytes read through the mount are cached once, in the mount's own
page cache (re-reads and np.load(mmap_mode="r") are served from it), and the checkpoint's pages
that held them are dropped once the mount's cache has them. Reads the mount's cache does not keep
(O_DIRECT) leave the checkpoint's pages alone.

Residency is measured with mincore(2) (scripts/ckptfs_pagecache.py), file by file, so that other
work on the machine does not disturb it.

Run by ctest as `/usr/bin/python3 -m unittest -v test_page_cache` (see fixtures.py).
"""

import errno
import mmap
import os
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ckptfs_pagecache import PAGE, evict, resident_bytes  # noqa: E402
from ckptfs_reference import directory_name  # noqa: E402
from test_mount import MountTestCase  # noqa: E402

MiB = 1 << 20
TENSORS = 6            # of 4 MiB each, stored one after the other
TENSOR_BYTES = 4 * MiB
# What may stay of the checkpoint after every tensor was read through the mount: the partial
# page-cache folios (up to 2 MiB each on x86-64) at the two ends of the bytes read, and the pages
# of the zip's own records (headers, data.pkl) around them.
LEFT_AT_MOST = 5 * MiB


class PageCacheTests(MountTestCase):
    def setUp(self):
        super().setUp()
        self.checkpoint = self.tmp / "model.pth"
        g = torch.Generator().manual_seed(7)
        sd = {f"layer{i}.weight": torch.randn(TENSOR_BYTES // 4, generator=g)
              for i in range(TENSORS)}
        sd["bias"] = torch.arange(10.0)
        torch.save(sd, self.checkpoint)
        self.expected = {k: v.numpy().tobytes() for k, v in sd.items()}

    def mount_cold(self):
        """Mounts, then drops every page of the checkpoint: what is cached afterwards was read
        for the tests' own reads."""
        mnt, proc = self.mount(self.checkpoint)
        evict(self.checkpoint)
        self.assertEqual(resident_bytes(self.checkpoint), 0, "the checkpoint is still cached")
        return mnt, proc

    def data(self, mnt, key, name="data"):
        return mnt / directory_name(key) / name

    def read_all(self, mnt):
        for key, want in self.expected.items():
            self.assertEqual(self.data(mnt, key).read_bytes(), want, key)

    def test_read_once_cached_once(self):
        mnt, proc = self.mount_cold()
        self.read_all(mnt)
        total = sum(len(v) for v in self.expected.values())
        mount_cached = sum(resident_bytes(self.data(mnt, k)) for k in self.expected)
        self.assertGreaterEqual(mount_cached, total, "the mount's page cache lacks bytes read")
        left = resident_bytes(self.checkpoint)
        self.assertLessEqual(left, LEFT_AT_MOST,
                             f"{left} bytes of the checkpoint stay cached after reading {total} "
                             f"through the mount")
        # Re-reads come from the mount's cache: the checkpoint is not read again.
        self.read_all(mnt)
        self.assertLessEqual(resident_bytes(self.checkpoint), left)
        self.unmount(mnt, proc)

    def test_mapped_npy(self):
        """np.load(mmap_mode="r") maps tensor.npy: its pages fault in through the mount's cache,
        which then holds them, and the checkpoint's are dropped."""
        mnt, proc = self.mount_cold()
        for key, want in self.expected.items():
            a = np.load(self.data(mnt, key, "tensor.npy"), mmap_mode="r")
            try:
                self.assertIsInstance(a, np.memmap, key)
                self.assertEqual(a.tobytes(), want, key)
            finally:
                del a
        self.assertLessEqual(resident_bytes(self.checkpoint), LEFT_AT_MOST)
        self.unmount(mnt, proc)

    def test_direct_reads_keep_the_checkpoint_cached(self):
        """An O_DIRECT read does not fill the mount's page cache: the checkpoint's pages are the
        only copy, and they stay."""
        mnt, proc = self.mount_cold()
        key = "layer1.weight"
        try:
            fd = os.open(self.data(mnt, key), os.O_RDONLY | os.O_DIRECT)
        except OSError as e:
            self.unmount(mnt, proc)
            if e.errno == errno.EINVAL:
                self.skipTest("this kernel refuses O_DIRECT on FUSE files")
            raise
        try:
            buf = mmap.mmap(-1, TENSOR_BYTES)  # page-aligned, as O_DIRECT wants
            got = os.preadv(fd, [buf], 0)
            self.assertEqual(got, TENSOR_BYTES)
            self.assertEqual(bytes(buf), self.expected[key])
            buf.close()
        finally:
            os.close(fd)
        self.assertLess(resident_bytes(self.data(mnt, key)), TENSOR_BYTES // 2)
        self.assertGreaterEqual(resident_bytes(self.checkpoint), TENSOR_BYTES - 2 * PAGE)
        self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
