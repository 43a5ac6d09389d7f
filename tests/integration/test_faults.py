# SPDX-License-Identifier: MIT
"""Faults while mounted: the checkpoint changes under the mount, readers die or stop, the mount
goes away while files are open. The rule: a read returns the right bytes or fails (EIO), never
short or wrong bytes, and the mount and its daemon survive what readers do.

A checkpoint that changes (renamed over, deleted, truncated, rewritten, even touched) is found at
the next open (the path and the daemon's descriptor against the device, inode, size and mtime
recorded at mount) or read (the descriptor): every open and read then fails with EIO. What
changes its metadata alone (chmod, chown, a hard link, atime, a rename of its directory) is no
change. Pages the kernel
cached before the change (keep_cache) may still be served to files opened before: they hold the
old checkpoint's bytes, which were right. The tests drop those pages (POSIX_FADV_DONTNEED) where
they need the daemon to answer.

Run by ctest as `/usr/bin/python3 -m unittest -v test_faults` (see fixtures.py).
"""

import errno
import json
import mmap
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import CKPTFS, require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ckptfs_mounts import fusermount_u, is_mounted  # noqa: E402
from ckptfs_reference import directory_name  # noqa: E402
from test_mount import EXIT_TIMEOUT, MountTestCase  # noqa: E402

READER = """
import os, sys
path, chunk = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
size = os.fstat(fd).st_size
print("reading", flush=True)
while True:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    for offset in range(0, size, chunk):
        os.pread(fd, chunk, offset)
"""


def make_checkpoint(path, seed=1):
    """A 16 MiB tensor, a transposed and a strided view of one matrix, a small tensor and a
    value; returns {key: C-order bytes} computed by torch, independently of ckptfs."""
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(700, 500, generator=g)
    obj = {"big": torch.randn(4 << 20, generator=g), "mt": m.t(), "strided": m[::3, 1::2],
           "small": torch.arange(10.0) + seed, "epoch": seed}
    torch.save(obj, path)
    return {k: v.contiguous().numpy().tobytes() for k, v in obj.items()
            if isinstance(v, torch.Tensor)}


READ_FAULT_LIBRARY = Path(os.environ.get(
    "CKPTFS_READ_FAULT_LIBRARY", CKPTFS.parent / "tests" / "libckptfs_read_fault.so")).absolute()


# Run as root in a private mount namespace (unshare --mount): a private /dev with its own
# /dev/log socket, so that a daemon's syslog lines can be read without touching the machine's.
# Mounts CHECKPOINT on MNT with a daemon (its environment given as JSON: the read fault is
# preloaded into ckptfs alone), reads `big` while its reads fail, unmounts, and prints the syslog
# datagrams received as a JSON list.
SYSLOG_SCENARIO = r"""
import json, os, socket, stat, subprocess, sys, time
ckptfs, checkpoint, mnt, flag, offset, env = sys.argv[1:7]
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "ckptfs-test-dev", "/dev"], check=True)
for name, major, minor in (("null", 1, 3), ("zero", 1, 5), ("urandom", 1, 9), ("fuse", 10, 229)):
    os.mknod(f"/dev/{name}", stat.S_IFCHR | 0o666, os.makedev(major, minor))
log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
log.bind("/dev/log")
r = subprocess.run([ckptfs, checkpoint, mnt], capture_output=True, text=True, timeout=60,
                   env=json.loads(env))
if r.returncode != 0:
    sys.exit(f"ckptfs exited {r.returncode}: {r.stderr}")
try:
    fd = os.open(f"{mnt}/big/data", os.O_RDONLY)
    open(flag, "w").close()
    try:
        for i in range(20):
            try:
                os.pread(fd, 4096, int(offset) + i * 262144)
                sys.exit(f"read {i} did not fail")
            except OSError:
                pass
    finally:
        os.unlink(flag)
        os.close(fd)
finally:
    # Unmounted, the daemon ends; lazily when a plain unmount fails, so that nothing stays
    # behind in this namespace.
    if subprocess.run(["umount", mnt]).returncode != 0:
        subprocess.run(["umount", "-l", mnt])
lines = []
log.settimeout(2.0)
try:
    while True:
        lines.append(log.recv(65536).decode(errors="replace"))
except socket.timeout:
    pass
print(json.dumps(lines))
"""


def drop_cache(fd):
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class FaultTestCase(MountTestCase):
    def setUp(self):
        super().setUp()
        self.fds = []
        self.checkpoint = self.tmp / "model.pth"
        self.expected = make_checkpoint(self.checkpoint)

    def open_fd(self, path):
        """A descriptor closed before the unmount (open files keep the mount busy)."""
        if not self.fds:  # cleanups run last first: these close before the mount's own
            self.addCleanup(self.close_fds)
        fd = os.open(path, os.O_RDONLY)
        self.fds.append(fd)
        return fd

    def close_fds(self):
        while self.fds:
            os.close(self.fds.pop())

    def unmount(self, mnt, proc):
        self.close_fds()
        super().unmount(mnt, proc)

    def data(self, mnt, key, name="data"):
        return mnt / directory_name(key) / name

    def assert_eio(self, action, what):
        with self.assertRaises(OSError, msg=what) as caught:
            action()
        self.assertEqual(caught.exception.errno, errno.EIO, f"{what}: {caught.exception}")

    def assert_right_or_eio(self, fd, offset, length, expected, what):
        """pread returns exactly the expected bytes or fails with EIO. A read the kernel splits
        into several requests may return the right bytes of those served before one failed:
        then the next read, where it stopped, fails."""
        try:
            got = os.pread(fd, length, offset)
        except OSError as e:
            self.assertEqual(e.errno, errno.EIO, f"{what}: {e}")
            return False
        want = expected[offset:offset + length]
        if len(got) < len(want):
            self.assertEqual(got, want[:len(got)], f"{what}: wrong bytes (short read)")
            self.assert_eio(lambda: os.pread(fd, length - len(got), offset + len(got)),
                            f"{what}: a short read of {len(got)} bytes, not followed by EIO")
            return False
        self.assertEqual(got, want, f"{what}: wrong bytes")
        return True

    def assert_stale(self, mnt, fds):
        """After a change: every open fails with EIO; files opened before give EIO once their
        cached pages are dropped, and never wrong bytes."""
        for key in self.expected:
            for name in ("data", "tensor.npy", "meta.json"):
                self.assert_eio(lambda: open(self.data(mnt, key, name), "rb").close(),
                                f"open {key}/{name}")
        self.assert_eio(lambda: open(views_dir(mnt) / "index.json", "rb").close(),
                        "open index.json")
        self.assert_eio(lambda: open(mnt / "epoch" / "value.json", "rb").close(), "value.json")
        for key, fd in fds.items():
            want = self.expected[key]
            for offset in (0, len(want) // 2, max(0, len(want) - 100)):
                self.assert_right_or_eio(fd, offset, 4096, want, f"{key} at {offset}, cached")
            drop_cache(fd)
            self.assert_eio(lambda: os.pread(fd, 4096, len(want) // 3), f"{key}, not cached")

    def open_and_read(self, mnt):
        """Files opened (and partly read, so partly cached) before the change."""
        fds = {}
        for key, want in self.expected.items():
            fd = self.open_fd(self.data(mnt, key))
            self.assertEqual(os.pread(fd, 8192, 0), want[:8192], key)
            fds[key] = fd
        return fds


class ChangedCheckpointTests(FaultTestCase):
    def test_replaced_by_rename(self):
        mnt, proc = self.mount(self.checkpoint)
        fds = self.open_and_read(mnt)
        other = self.tmp / "other.pth"
        make_checkpoint(other, seed=2)
        os.rename(other, self.checkpoint)
        self.assert_stale(mnt, fds)
        self.assertIn("changed while mounted", self.output(proc))
        self.unmount(mnt, proc)

    def test_deleted(self):
        mnt, proc = self.mount(self.checkpoint)
        fds = self.open_and_read(mnt)
        os.unlink(self.checkpoint)
        self.assert_stale(mnt, fds)
        self.unmount(mnt, proc)

    def test_truncated(self):
        for size in (os.path.getsize(self.checkpoint) // 2, 0):
            with self.subTest(size=size):
                self.expected = make_checkpoint(self.checkpoint)
                mnt, proc = self.mount(self.checkpoint)
                fds = self.open_and_read(mnt)
                os.truncate(self.checkpoint, size)
                self.assert_stale(mnt, fds)
                self.unmount(mnt, proc)

    def test_rewritten_in_place(self):
        mnt, proc = self.mount(self.checkpoint)
        fds = self.open_and_read(mnt)
        time.sleep(0.02)  # past the file system's timestamp granularity
        size = os.path.getsize(self.checkpoint)
        with open(self.checkpoint, "r+b") as f:  # same size, same inode, other tensor bytes
            f.seek(size // 2)
            f.write(bytes(4096))
        self.assertEqual(os.path.getsize(self.checkpoint), size)
        self.assert_stale(mnt, fds)
        self.unmount(mnt, proc)

    def test_rewritten_by_copy(self):
        # cp over an existing file keeps its inode: truncate, then write the new bytes.
        other = self.tmp / "other.pth"
        make_checkpoint(other, seed=3)
        mnt, proc = self.mount(self.checkpoint)
        fds = self.open_and_read(mnt)
        inode = os.stat(self.checkpoint).st_ino
        shutil.copyfile(other, self.checkpoint)
        self.assertEqual(os.stat(self.checkpoint).st_ino, inode)
        self.assert_stale(mnt, fds)
        self.unmount(mnt, proc)

    def test_reads_race_a_truncation(self):
        """Threads read while the file is truncated: each read is right or EIO."""
        mnt, proc = self.mount(self.checkpoint)
        want = self.expected["big"]
        fd = self.open_fd(self.data(mnt, "big"))
        stop = threading.Event()
        counts = {"right": 0, "eio": 0}
        failures = []

        def reader(seed):
            rng = random.Random(seed)
            try:
                while not stop.is_set():
                    drop_cache(fd)
                    offset = rng.randrange(len(want))
                    ok = self.assert_right_or_eio(fd, offset, rng.randrange(1, 1 << 20), want,
                                                  f"big at {offset}")
                    counts["right" if ok else "eio"] += 1
            except AssertionError as e:
                failures.append(e)

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        os.truncate(self.checkpoint, os.path.getsize(self.checkpoint) // 3)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        self.assertGreater(counts["right"], 0, counts)
        self.assertGreater(counts["eio"], 0, counts)
        self.unmount(mnt, proc)

    def test_metadata_change_counts_as_a_change(self):
        # touch changes mtime and ctime: ckptfs cannot tell it from a rewrite, so it stops
        # serving (documented; remount to serve the file again).
        mnt, proc = self.mount(self.checkpoint)
        time.sleep(0.02)
        os.utime(self.checkpoint)
        self.assert_eio(lambda: open(self.data(mnt, "small"), "rb").close(), "open after touch")
        self.unmount(mnt, proc)

    def test_unchanged_checkpoint_keeps_serving(self):
        # Reading the checkpoint itself (atime only) or renaming another file beside it is not
        # a change.
        mnt, proc = self.mount(self.checkpoint)
        self.checkpoint.read_bytes()
        (self.tmp / "a").write_bytes(b"x")
        os.rename(self.tmp / "a", self.tmp / "b")
        for key, want in self.expected.items():
            self.assertEqual(self.data(mnt, key).read_bytes(), want, key)
        self.unmount(mnt, proc)


class MetadataChangeTests(FaultTestCase):
    """Only a change of the checkpoint's content identity (size, mtime, inode, device) is a
    change: what changes its metadata alone (its ctime, link count, mode, owner, atime, the name
    of its directory) leaves the mount serving, without a word in the log."""

    def setUp(self):
        super().setUp()
        folder = self.tmp / "checkpoints"
        folder.mkdir()
        self.checkpoint = folder / "model.pth"
        self.expected = make_checkpoint(self.checkpoint)

    def assert_serving(self, mnt, fds, what):
        """Files opened before read right uncached (the descriptor's check), and files opened
        now too (the path's check)."""
        for key, fd in fds.items():
            drop_cache(fd)
            self.assertTrue(self.assert_right_or_eio(fd, 0, 1 << 16, self.expected[key], key) and
                            self.assert_right_or_eio(fd, len(self.expected[key]) // 2, 1 << 16,
                                                     self.expected[key], key),
                            f"{what}: {key} read EIO through a descriptor opened before")
        for key, want in self.expected.items():
            try:
                got = self.data(mnt, key).read_bytes()
            except OSError as e:
                self.fail(f"{what}: {key}: {e}")
            self.assertEqual(got, want, f"{what}: {key}")
        json.loads((mnt / "epoch" / "value.json").read_bytes())

    def test_metadata_only_changes_keep_serving(self):
        mnt, proc = self.mount(self.checkpoint)
        fds = self.open_and_read(mnt)
        st = os.stat(self.checkpoint)
        folder = self.checkpoint.parent
        renamed = folder.with_name("renamed")

        def chown():
            os.chown(self.checkpoint, st.st_uid + 4242, st.st_gid + 4242)
            os.chown(self.checkpoint, st.st_uid, st.st_gid)

        def atime():
            now = time.time_ns()
            os.utime(self.checkpoint, ns=(now, os.stat(self.checkpoint).st_mtime_ns))

        changes = [
            ("chmod to the same mode", lambda: os.chmod(self.checkpoint,
                                                        stat.S_IMODE(st.st_mode))),
            ("chmod 600", lambda: os.chmod(self.checkpoint, 0o600)),
            ("chmod 644", lambda: os.chmod(self.checkpoint, 0o644)),
            ("a hard link", lambda: os.link(self.checkpoint, folder / "other.pth")),
            ("the hard link removed", lambda: os.unlink(folder / "other.pth")),
            ("an atime update", atime),
            ("a read of the checkpoint", self.checkpoint.read_bytes),
            ("the directory renamed", lambda: os.rename(folder, renamed)),
            ("the directory renamed back", lambda: os.rename(renamed, folder)),
        ]
        if os.geteuid() == 0:
            changes.append(("chown away and back", chown))
        def identity():
            moved = renamed / self.checkpoint.name
            now = os.stat(moved if moved.exists() else self.checkpoint)
            return now.st_size, now.st_mtime_ns, now.st_ino, now.st_dev

        for what, change in changes:
            with self.subTest(what):
                time.sleep(0.02)  # past the file system's timestamp granularity
                before = identity()
                change()
                self.assertEqual(identity(), before)
                self.assert_serving(mnt, fds, what)
        # Every change but the read moved the ctime, which is no part of the identity.
        self.assertNotEqual(os.stat(self.checkpoint).st_ctime_ns, st.st_ctime_ns)
        self.assertNotIn("changed while mounted", self.output(proc))
        # A change of the content still is one.
        time.sleep(0.02)
        with open(self.checkpoint, "r+b") as f:
            f.seek(os.path.getsize(self.checkpoint) // 2)
            f.write(bytes(16))
        self.assert_stale(mnt, fds)
        self.assertIn("changed while mounted", self.output(proc))
        self.unmount(mnt, proc)


class ReaderFaultTests(FaultTestCase):
    def reader(self, path, chunk=1 << 20):
        proc = subprocess.Popen([sys.executable, "-c", READER, str(path), str(chunk)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait(),
                                 proc.stdout.close()))
        self.assertEqual(proc.stdout.readline(), b"reading\n")
        return proc

    def assert_all_right(self, mnt, timeout=60):
        """Every file reads right (uncached), within `timeout` seconds."""
        done, failures = threading.Event(), []

        def check():
            try:
                for key, want in self.expected.items():
                    with open(self.data(mnt, key), "rb") as f:
                        drop_cache(f.fileno())
                        self.assertEqual(f.read(), want, key)
                    a = np.load(self.data(mnt, key, "tensor.npy"))
                    self.assertEqual(a.tobytes(), want, key)
            except Exception as e:  # reported below
                failures.append(e)
            done.set()

        threading.Thread(target=check, daemon=True).start()
        self.assertTrue(done.wait(timeout), f"reads did not finish within {timeout} s")
        self.assertEqual(failures, [])

    def test_reader_killed_mid_read(self):
        mnt, proc = self.mount(self.checkpoint)
        for i in range(6):
            reader = self.reader(self.data(mnt, "big" if i % 2 else "mt"), 1 << (16 + i))
            time.sleep(0.1 + 0.05 * i)
            reader.send_signal(signal.SIGKILL if i % 3 else signal.SIGINT)
            reader.wait(timeout=EXIT_TIMEOUT)
        self.assertIsNone(proc.poll(), "ckptfs exited")
        self.assert_all_right(mnt)
        self.unmount(mnt, proc)

    def test_stopped_reader_does_not_stop_the_others(self):
        mnt, proc = self.mount(self.checkpoint)
        stopped = [self.reader(self.data(mnt, key)) for key in ("big", "mt", "big")]
        time.sleep(0.2)
        for r in stopped:
            r.send_signal(signal.SIGSTOP)
        # A stopped process that maps a file, too.
        with open(self.data(mnt, "big", "tensor.npy"), "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        holder = subprocess.Popen(["sleep", "60"])
        holder.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: (holder.kill(), holder.wait()))
        self.assert_all_right(mnt)
        self.assertEqual(mapped[-64:], self.expected["big"][-64:])
        mapped.close()
        for r in stopped:
            r.send_signal(signal.SIGCONT)
            self.assertIsNone(r.poll(), "the reader died")
            r.kill()
            r.wait()
        self.assert_all_right(mnt)
        self.unmount(mnt, proc)

    def test_sixteen_threads_of_random_reads(self):
        mnt, proc = self.mount(self.checkpoint)
        files = []
        for key, want in self.expected.items():
            npy = self.data(mnt, key, "tensor.npy").read_bytes()
            self.assertEqual(npy[len(npy) - len(want):], want, key)
            files.append((self.data(mnt, key), want))
            files.append((self.data(mnt, key, "tensor.npy"), npy[:len(npy) - len(want)] + want))
        fds = [self.open_fd(path) for path, _ in files]
        failures, reads = [], [0] * 16

        def worker(n):
            rng = random.Random(n)
            try:
                for i in range(300):
                    k = rng.randrange(len(files))
                    fd, want = fds[k], files[k][1]
                    if i % 10 == 0:
                        drop_cache(fd)
                    offset = rng.randrange(len(want) + 10)
                    length = rng.choice([1, 3, 4096, 5000, 65536, 1 << 20])
                    got = os.pread(fd, length, offset)
                    if got != want[offset:offset + length]:
                        failures.append(f"{files[k][0]} at {offset} ({length}): wrong bytes")
                    reads[n] += 1
            except Exception as e:  # reported below
                failures.append(repr(e))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        self.assertFalse(any(t.is_alive() for t in threads), "readers hang")
        self.assertEqual(failures, [])
        self.assertEqual(sum(reads), 16 * 300)
        self.unmount(mnt, proc)


class UnmountTests(FaultTestCase):
    def test_unmount_while_files_are_open(self):
        mnt, proc = self.mount(self.checkpoint)
        fd = os.open(self.data(mnt, "big"), os.O_RDONLY)
        f = open(self.data(mnt, "mt", "tensor.npy"), "rb")
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            # A plain unmount refuses while files are open; the mount stays usable.
            r = fusermount_u(mnt)
            self.assertNotEqual(r.returncode, 0, "fusermount3 -u succeeded with open files")
            self.assertTrue(is_mounted(mnt))
            self.assertEqual(self.data(mnt, "small").read_bytes(), self.expected["small"])
            # A lazy one detaches the tree at once; open files keep reading right.
            r = fusermount_u(mnt, lazy=True)
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            self.assertFalse(is_mounted(mnt), "still in mountinfo after fusermount3 -u -z")
            self.assertIsNone(proc.poll(), "ckptfs exited while files were open")
            want = self.expected["big"]
            drop_cache(fd)
            self.assertEqual(os.pread(fd, 1 << 20, 12345), want[12345:12345 + (1 << 20)])
            self.assertEqual(mapped[-len(self.expected["mt"]):], self.expected["mt"])
        finally:
            mapped.close()
            f.close()
            os.close(fd)
        # The last close ends the daemon, cleanly.
        try:
            rc = proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"ckptfs still runs {EXIT_TIMEOUT:g} s after the last file closed")
        self.assertEqual(rc, 0, self.output(proc))

    def test_daemon_killed_while_files_are_open(self):
        # Not ckptfs's fault, but what a user sees: reads fail (ENOTCONN), nothing hangs, and
        # the dead mount can be unmounted.
        mnt, proc = self.mount(self.checkpoint)
        fd = self.open_fd(self.data(mnt, "big"))
        proc.kill()
        proc.wait(timeout=EXIT_TIMEOUT)
        drop_cache(fd)
        with self.assertRaises(OSError) as caught:
            os.pread(fd, 4096, 0)
        self.assertIn(caught.exception.errno, (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO))
        r = fusermount_u(mnt, lazy=True)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))


if __name__ == "__main__":
    unittest.main()


class ServeErrorTests(FaultTestCase):
    """A source that cannot be read (tests/support/read_fault.cpp makes its reads fail while a
    flag file exists): every read fails with EIO, and the daemon says why on stderr, at most 10
    lines a minute however many reads fail, the rest counted."""

    def fault_env(self, flag):
        if not READ_FAULT_LIBRARY.is_file():
            self.fail(f"missing {READ_FAULT_LIBRARY} (set CKPTFS_READ_FAULT_LIBRARY)")
        asan = os.environ.get("ASAN_OPTIONS", "")
        return {**os.environ, "LD_PRELOAD": str(READ_FAULT_LIBRARY),
                "CKPTFS_READ_FAULT_FLAG": str(flag),
                "ASAN_OPTIONS": f"{asan}:verify_asan_link_order=0".lstrip(":")}

    def test_failed_reads_are_logged_and_limited(self):
        flag = self.tmp / "fail-reads"
        mnt, proc = self.mount(self.checkpoint, env=self.fault_env(flag))
        want = self.expected["big"]
        fd = self.open_fd(self.data(mnt, "big"))
        flag.touch()
        failures = 40
        for i in range(failures):
            # Past the first 64 KiB, which the open stored in the page cache.
            self.assert_eio(lambda: os.pread(fd, 4096, (i + 1) * 256 * 1024), f"read {i}")
        flag.unlink()
        # Not a changed checkpoint: once it can be read again, reads work.
        self.assertEqual(os.pread(fd, 4096, 0), want[:4096])
        self.unmount(mnt, proc)
        log = self.output(proc)
        lines = re.findall(r"^ckptfs: read of inode \d+ failed: read failed: Input/output error$",
                           log, re.M)
        self.assertEqual(len(lines), 10, log)
        held = re.search(r"^ckptfs: (\d+) more lines were held back \(at most 10 a minute\)$",
                         log, re.M)
        self.assertIsNotNone(held, log)
        self.assertGreaterEqual(int(held.group(1)), failures - 10, log)
        self.assertNotIn("changed while mounted", log)

    def test_daemon_logs_to_syslog(self):
        """Once daemonized (stderr is /dev/null), the same lines go to syslog, limited the same
        way. Run in a private mount namespace whose /dev/log is the test's own socket."""
        if os.geteuid() != 0 or not shutil.which("unshare"):
            self.skipTest("needs root and unshare(1) for a private /dev/log")
        flag = self.tmp / "fail-reads"
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable,
                            "-c", SYSLOG_SCENARIO, str(CKPTFS), str(self.checkpoint),
                            str(self.new_dir()), str(flag), str(1 << 20),
                            json.dumps(self.fault_env(flag))],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        messages = json.loads(r.stdout)
        failed = [m for m in messages
                  if re.search(r"ckptfs\[\d+\]: read of inode \d+ failed: read failed: "
                               r"Input/output error$", m)]
        self.assertEqual(len(failed), 10, messages)
        self.assertTrue(any(re.search(r"ckptfs\[\d+\]: \d+ more lines were held back", m)
                            for m in messages), messages)
