# SPDX-License-Identifier: MIT
"""The FUSE requests a mount costs: every request is a round trip between the reader's kernel and
the daemon, and thousands of small files (np.load of every tensor.npy, ls -l, find | xargs stat)
cost what their requests cost. These tests count the requests libfuse's debug log (-d) lists for
np.load of a tensor.npy on a fresh mount and again, and for ls -l of a directory, and pin the
counts: a change that sends more fails here.

What is sent, per np.load of MNT/ENTRY/tensor.npy (Python's open() asks isatty(): one IOCTL, which
the kernel sends for every ioctl of a FUSE file, answered or not):
  - by default: fresh, LOOKUP of ENTRY and of tensor.npy, OPEN (which checks the checkpoint and
    stores the file's bytes in the page cache: no READ), IOCTL, RELEASE; again, OPEN, IOCTL,
    RELEASE (names and attributes are cached forever: no LOOKUP, no GETATTR; no FLUSH);
  - with -o no_open: fresh, LOOKUP, LOOKUP, IOCTL, READ; again, IOCTL alone.
Per ls -l of a directory: its listing (READDIRPLUS, names with attributes), then nothing again
(directories are opened without OPENDIR, and their listing is cached). A walk of the whole mount
(find | xargs stat): READDIRPLUS only, every batch with attributes and dentries, so no LOOKUP.

Phases are told apart by a STATFS (os.statvfs), which nothing else sends.

-o io_uring (FUSE over io_uring): a mount served that way gives the same bytes, where a ckptfs
built with libfuse 3.18 (scripts/build-libfuse-uring) and the kernel's enable_uring allow it
(skipped with the reason otherwise); without them one line says why it is not used.

Run by ctest as `/usr/bin/python3 -m unittest -v test_requests` (see fixtures.py).
"""

import collections
import errno
import os
import re
import subprocess
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ckptfs_reference import directory_name  # noqa: E402
from test_mount import MountTestCase  # noqa: E402

TENSORS = 40
# Requests the kernel sends on its own, not for the reader: memory pressure (FORGET) and the
# interrupt of a request.
KERNEL_OWN = {"FORGET", "BATCH_FORGET", "INTERRUPT"}
REQUEST = re.compile(r"unique: \d+, opcode: (\w+) \(\d+\), nodeid: (\d+)")


def phases(log):
    """[Counter(opcode -> requests)] for each stretch of the log between two STATFS."""
    counts = [collections.Counter()]
    for m in REQUEST.finditer(log):
        op = m.group(1)
        if op == "STATFS":
            counts.append(collections.Counter())
        elif op not in KERNEL_OWN:
            counts[-1][op] += 1
    return counts


class RequestCountTests(MountTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.keys = [f"layer{i}.bias" for i in range(TENSORS)]

    def setUp(self):
        super().setUp()
        self.checkpoint = self.tmp / "small.pth"
        g = torch.Generator().manual_seed(25)
        torch.save({k: torch.randn(16 + i, generator=g) for i, k in enumerate(self.keys)},
                   self.checkpoint)
        self.expected = {k: v.numpy() for k, v in torch.load(self.checkpoint).items()}

    def marker(self, mnt, log_of, settled=lambda counts: True):
        """Ends a phase: once `settled(counts of the phase so far)` (a request the kernel sends
        after the call returned: RELEASE is sent in the background after close), a STATFS."""
        deadline = time.monotonic() + 10
        while not settled(phases(log_of())[-1]) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.statvfs(mnt)

    def assert_at_most(self, counts, allowed, what):
        extra = {op: n for op, n in counts.items() if n > allowed.get(op, 0)}
        self.assertEqual(extra, {}, f"{what}: more requests than pinned: {dict(counts)} "
                                    f"(at most {allowed})")

    def np_load_phases(self, *options, opens_released=True):
        """The request counts of np.load of every tensor.npy on a fresh mount, again, ls -l of an
        entry's directory, again. `opens_released`: every OPEN is followed by a RELEASE (not
        with no_open, whose one OPEN fails)."""
        mnt, proc = self.mount(self.checkpoint, "-d", *options)
        log_of = lambda: self.output(proc)  # noqa: E731
        released = lambda c: not opens_released or c["RELEASE"] >= c["OPEN"]  # noqa: E731
        self.marker(mnt, log_of, released)  # the mount's own requests (INIT, index.json)
        for _ in range(2):
            for key in self.keys:
                got = np.load(mnt / directory_name(key) / "tensor.npy")
                np.testing.assert_array_equal(got, self.expected[key], key)
            self.marker(mnt, log_of, released)
        entry = mnt / directory_name(self.keys[0])
        for _ in range(2):
            r = subprocess.run(["ls", "-l", str(entry)], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(len(r.stdout.splitlines()), 1 + 4, r.stdout)  # total + 4 files
            self.marker(mnt, log_of)
        self.unmount(mnt, proc)
        counts = phases(self.output(proc))
        self.assertEqual(len(counts), 6, "one STATFS per marker")
        return counts[1:5]

    def test_default(self):
        fresh, again, ls_fresh, ls_again = self.np_load_phases()
        n = TENSORS
        self.assert_at_most(fresh, {"LOOKUP": 2 * n, "OPEN": n, "IOCTL": n, "RELEASE": n},
                            "np.load on a fresh mount")
        self.assert_at_most(again, {"OPEN": n, "IOCTL": n, "RELEASE": n}, "np.load again")
        # The kernel asks the first getxattr (ls's ACL check), and remembers its ENOSYS.
        self.assert_at_most(ls_fresh, {"OPENDIR": 1, "READDIRPLUS": 2, "GETXATTR": 1}, "ls -l")
        self.assert_at_most(ls_again, {}, "ls -l again")

    def test_no_open(self):
        fresh, again, ls_fresh, ls_again = self.np_load_phases("-o", "no_open",
                                                             opens_released=False)
        n = TENSORS
        # The first open is asked (its answer, ENOSYS, tells the kernel to ask no more), and the
        # first FLUSH of that file (likewise).
        self.assert_at_most(fresh, {"LOOKUP": 2 * n, "OPEN": 1, "FLUSH": 1, "IOCTL": n, "READ": n},
                            "np.load on a fresh -o no_open mount")
        self.assert_at_most(again, {"IOCTL": n}, "np.load again, -o no_open")
        self.assert_at_most(ls_fresh, {"OPENDIR": 1, "READDIRPLUS": 2, "GETXATTR": 1},
                            "ls -l, -o no_open")
        self.assert_at_most(ls_again, {}, "ls -l again, -o no_open")

    def test_listing_names_need_no_lookup(self):
        """A walk (find MNT | xargs stat, a glob, ls -l of each entry): every listing comes with
        attributes and a dentry for each name (READDIRPLUS for every batch, not only the first,
        as the kernel's adaptive READDIRPLUS would), so nothing the walk then stats or opens by a
        listed name is looked up."""
        mnt, proc = self.mount(self.checkpoint, "-d")
        log_of = lambda: self.output(proc)  # noqa: E731
        self.marker(mnt, log_of)  # the mount's own requests
        walked = subprocess.run(f"find '{mnt}' -type f -print0 | xargs -0 stat -c %s",
                                shell=True, capture_output=True, text=True)
        self.assertEqual(walked.returncode, 0, walked.stderr)
        self.marker(mnt, log_of)
        self.unmount(mnt, proc)
        counts = phases(self.output(proc))
        # find asks statfs too: everything between the two markers is the walk's.
        walk = sum(counts[1:-1], collections.Counter())
        dirs = TENSORS + 2  # the root, .ckptfs and one per entry
        self.assertGreaterEqual(len(walked.stdout.split()), 4 * TENSORS)
        self.assertGreaterEqual(walk["READDIRPLUS"], dirs, dict(walk))
        # Each directory: its names with attributes, then the end of the listing; no GETATTR,
        # no plain READDIR, and a LOOKUP only for the views of .ckptfs whose size is made when
        # first asked (model.safetensors: a listing does not make it).
        self.assert_at_most(walk, {"READDIRPLUS": 3 * dirs, "OPENDIR": 1, "GETXATTR": 1,
                                   "LOOKUP": 2}, "find | xargs stat")

    def test_no_open_changed_checkpoint_fails_reads(self):
        """-o no_open trades the check at open for one round trip: a checkpoint changed while
        mounted is found at the next read the kernel asks for, which fails with EIO (never other
        bytes); the open itself succeeds."""
        mnt, proc = self.mount(self.checkpoint, "-o", "no_open")
        first, second = (mnt / directory_name(k) / "data" for k in self.keys[:2])
        self.assertEqual(len(first.read_bytes()), first.stat().st_size)
        time.sleep(0.02)  # past the file system's timestamp granularity
        with open(self.checkpoint, "r+b") as f:  # same size and inode, other bytes
            f.seek(os.path.getsize(self.checkpoint) // 2)
            f.write(b"\xff" * 64)
        with open(second, "rb") as f:  # not cached yet: its read asks the daemon
            with self.assertRaises(OSError) as caught:
                f.read()
        self.assertEqual(caught.exception.errno, errno.EIO)
        self.assertIn("changed while mounted", self.output(proc))
        self.unmount(mnt, proc)


# A ckptfs built with libfuse 3.18 (scripts/build-libfuse-uring), for -o io_uring.
CKPTFS_URING = Path(os.environ.get("CKPTFS_URING", HERE.parents[1] / "build-uring" / "ckptfs"))
ENABLE_URING = Path("/sys/module/fuse/parameters/enable_uring")


def io_uring_missing():
    """Why -o io_uring cannot be tested here, or None."""
    if not CKPTFS_URING.is_file():
        return f"no ckptfs built with libfuse 3.18 at {CKPTFS_URING} (scripts/build-libfuse-uring)"
    if not ENABLE_URING.exists():
        return "this kernel has no FUSE over io_uring (Linux 6.14+)"
    if ENABLE_URING.read_text().strip() != "Y":
        return f"{ENABLE_URING} is N (root: echo Y > {ENABLE_URING})"
    return None


def tree_bytes(mnt):
    """{relative path: bytes} of every file of a mount."""
    return {str(p.relative_to(mnt)): p.read_bytes()
            for p in sorted(mnt.rglob("*")) if p.is_file()}


class IoUringTests(MountTestCase):
    def setUp(self):
        super().setUp()
        self.checkpoint = self.tmp / "model.pth"
        g = torch.Generator().manual_seed(26)
        self.state = {f"layer{i}.weight": torch.randn(64 + 100 * i, 33, generator=g)
                      for i in range(6)}
        self.state["big"] = torch.randn(3 << 20, generator=g)  # 12 MiB: reads of 1 MiB
        torch.save(self.state, self.checkpoint)

    def test_without_it_one_line_says_why(self):
        """-o io_uring where libfuse (3.14) or the kernel cannot: the mount works, and one line
        says why io_uring is not used."""
        mnt, proc = self.mount(self.checkpoint, "-o", "io_uring")
        np.testing.assert_array_equal(
            np.load(mnt / directory_name("big") / "tensor.npy"), self.state["big"].numpy())
        self.unmount(mnt, proc)
        lines = [l for l in self.output(proc).splitlines() if "io_uring" in l]
        self.assertEqual(len(lines), 1, self.output(proc))
        self.assertRegex(lines[0], r"io_uring not used: (this ckptfs was built with libfuse "
                                   r"3\.\d+|the kernel has it turned off|this kernel has no)")

    def test_same_bytes_as_without(self):
        """A mount served over io_uring gives every file's bytes as /dev/fuse does, and the
        tensors torch saved."""
        why = io_uring_missing()
        if why:
            self.skipTest(why)
        mnt, proc = self.mount(self.checkpoint)
        want = tree_bytes(mnt)
        self.unmount(mnt, proc)
        mnt = self.new_dir()
        with open(self.tmp / "uring.log", "wb") as log:
            proc = subprocess.Popen([str(CKPTFS_URING), "-f", "-d", "-o", "io_uring",
                                     str(self.checkpoint), str(mnt)],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log, start_new_session=True)
        self.addCleanup(self._stop, proc, mnt)
        deadline = time.monotonic() + 20
        while not (mnt / ".ckptfs").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        got = tree_bytes(mnt)
        for key, t in self.state.items():
            np.testing.assert_array_equal(np.load(mnt / directory_name(key) / "tensor.npy"),
                                          t.numpy(), key)
        self.unmount(mnt, None)
        proc.wait(timeout=10)
        log = (self.tmp / "uring.log").read_text(errors="replace")
        self.assertIn("starting io-uring", log, "libfuse did not start io_uring")
        self.assertNotIn("io_uring not used", log)
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            self.assertEqual(got[name], want[name], name)


if __name__ == "__main__":
    unittest.main()
