# SPDX-License-Identifier: MIT
"""What the interop tests share (tests/interop/test_*.py, ctest label `interop`): the root, the
Python session that runs the real tools in it, scratch directories both sides see, and mounts.

The interop root (scripts/interop-root) is a Debian sid system with the current releases of
torch, safetensors, transformers, accelerate, gguf-py, numpy and llama.cpp's tools. A test:

  1. makes a scratch directory inside the root (InteropCase.scratch: its path here, and
     inside(path) the same path as the root sees it);
  2. has the real writers write its fixtures there: session().call("module.function", ...),
     a function of tests/interop/root/<module>.py run by the root's Python;
  3. mounts them from here with build/ckptfs at a path inside the scratch directory
     (InteropCase.mount; the root sees the mount at inside(mnt));
  4. has the real readers read the mount: another call, which returns what it found (JSON),
     for the test to assert on; the reference values are computed in the root by the real
     tools, never by ckptfs or by our own readers.

Everything is undone after the test class: mounts unmounted, the session ended, the scratch
directory removed. The root's Python session is one process for a whole test class
(tests/interop/root/serve.py), so torch is imported once.

Mount namespaces. A session runs in a mount namespace of its own (scripts/interop-run), made
when it starts; a mount made here later reaches it only by propagation. So, on import, this
module moves the test process into a private mount namespace of its own (unshare(CLONE_NEWNS),
every mount private: nothing it mounts is ever seen by another process of this machine), and
makes each scratch directory a shared mount there (bound onto itself): the ckptfs mounts made
below it propagate into the sessions, whose namespaces are its slaves. When the test process
ends, its namespace and every mount in it end too, even after a crash.

Needs: FUSE, the root (fixtures.missing("interop")), root's rights; nothing else of this
machine's Python (no torch here).
"""

import ctypes
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE.parent / "integration"))

from ckptfs_mounts import (fusermount_u, is_mounted, mount_points, mounts,  # noqa: E402
                           unmount, views_dir, wait_for_mount)
from fixtures import CKPTFS, INTEROP_ROOT, REPO  # noqa: E402

RUNNER = REPO / "scripts" / "interop-run"
MOUNT_TIMEOUT = 30.0   # seconds until a mount's index.json must be readable
EXIT_TIMEOUT = 10.0    # seconds for ckptfs to exit after its unmount
CALL_TIMEOUT = 300.0   # seconds for one call in the root (torch's first import is in it)


# mount(2) flags (linux/mount.h) and unshare(2)'s CLONE_NEWNS.
MS_BIND, MS_REC, MS_PRIVATE, MS_SHARED, MNT_DETACH = 0x1000, 0x4000, 0x40000, 0x100000, 2
CLONE_NEWNS = 0x20000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(status, what):
    if status != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def enter_private_mount_namespace():
    """Moves this process (single-threaded: at import) into a new mount namespace whose mounts
    are all private: what it mounts later is seen by it and its children only.

    The namespace starts as a copy of every mount of this machine's, and a copy keeps its file
    system alive: another test's FUSE mount that it unmounts would not end (its daemon would not
    exit, and that test would fail) while this process runs. So every FUSE mount copied is
    detached here at once (later mounts of others never reach this namespace: it is private)."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    fuse = [m.point for m in mounts() if m.fstype == "fuse" or m.fstype.startswith("fuse.")
            or m.fstype.startswith("fuseblk")]
    for point in sorted(fuse, reverse=True):
        detach_mount(point)


def make_shared_mount(path):
    """`path` bound onto itself and made shared: mounts below it propagate to the namespaces
    made later as its slaves (the sessions')."""
    p = os.fsencode(path)
    _check(_libc.mount(p, p, None, MS_BIND, None), f"mount --bind {path}")
    _check(_libc.mount(b"none", p, None, MS_SHARED, None), f"mount --make-shared {path}")


def detach_mount(path):
    _libc.umount2(os.fsencode(path), MNT_DETACH)


enter_private_mount_namespace()


def inside(path):
    """`path` (a path under the root, as this machine sees it) as the root sees it."""
    return "/" + str(Path(path).relative_to(INTEROP_ROOT))


def outside(path):
    """A path as the root sees it (a string from a call in the root) as this machine sees it."""
    return INTEROP_ROOT / str(path).lstrip("/")


def _die_with_parent():
    PR_SET_PDEATHSIG = 1
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class RootError(AssertionError):
    """A call in the root failed: its message ends with the root's traceback."""


class RootSession:
    """One python3 in the root (scripts/interop-run, tests/interop/root/serve.py) that runs
    functions of tests/interop/root/*.py for this process. Not thread-safe: one call at a time.
    Its stderr (the functions' prints, warnings) goes to `log`, a file path."""

    def __init__(self, log):
        self.log_path = Path(log)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(RUNNER), "python3", "-u", "/opt/ckptfs/tests/interop/root/serve.py"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            start_new_session=True)
        self._buffer = b""

    def call(self, name, *args, timeout=CALL_TIMEOUT, **kwargs):
        """The result of `module.function(*args, **kwargs)` run in the root. Raises RootError
        with the root's traceback when it raised, and when it does not answer within `timeout`
        seconds (the session is then ended: a hung reader must not hang the suite)."""
        if self.proc.poll() is not None:
            raise RootError(f"the root's Python ended (exit {self.proc.returncode}) before "
                            f"{name}: {self.log_tail()}")
        request = json.dumps({"call": name, "args": list(args), "kwargs": kwargs}) + "\n"
        self.proc.stdin.write(request.encode())
        self.proc.stdin.flush()
        line = self._read_line(timeout)
        if line is None:
            self.close(kill=True)
            raise RootError(f"{name} in the root: no answer within {timeout:g} s (session "
                            f"ended); its log: {self.log_tail()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RootError(f"{name} in the root failed:\n{reply['error']}")
        return reply["result"]

    def _read_line(self, timeout):
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    return None
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    raise RootError(f"the root's Python ended (exit {self.proc.wait()}): "
                                    f"{self.log_tail()}")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def log_tail(self, size=4000):
        try:
            return self.log_path.read_bytes()[-size:].decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self, kill=False):
        """Ends the session: its input closed (it exits), or its process group killed."""
        if self.proc.poll() is None:
            if not kill:
                try:
                    self.proc.stdin.close()
                    self.proc.wait(timeout=EXIT_TIMEOUT)
                except (OSError, subprocess.TimeoutExpired):
                    kill = True
            if kill:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self._log):
            try:
                f.close()
            except OSError:
                pass


class InteropCase(unittest.TestCase):
    """A test class of the interop group: a scratch directory inside the root and a session in
    the root for the whole class, mounts undone after each test (or after the class, for those
    made in setUpClass with mount_for_class)."""

    session_ = None

    @classmethod
    def setUpClass(cls):
        if not CKPTFS.is_file():
            raise AssertionError(f"ckptfs binary not found at {CKPTFS} (set CKPTFS)")
        cls.scratch = Path(tempfile.mkdtemp(prefix="ckptfs-interop-", dir=INTEROP_ROOT / "tmp"))
        cls.addClassCleanup(shutil.rmtree, cls.scratch, ignore_errors=True)
        make_shared_mount(cls.scratch)
        cls.addClassCleanup(detach_mount, cls.scratch)
        cls.addClassCleanup(cls._assert_nothing_mounted)
        cls.session_ = RootSession(cls.scratch / "root-session.log")
        cls.addClassCleanup(cls.session_.close)

    @classmethod
    def tearDownClass(cls):
        # Before the class's cleanups unmount: the session may still hold a mount's files.
        cls.session_.close()

    @classmethod
    def session(cls):
        return cls.session_

    @classmethod
    def call(cls, name, *args, **kwargs):
        """session().call(...): a function of tests/interop/root/ run in the root."""
        return cls.session_.call(name, *args, **kwargs)

    @classmethod
    def _assert_nothing_mounted(cls):
        prefix = str(cls.scratch) + "/"
        left = [p for p in mount_points() if p.startswith(prefix)]  # below it, not itself
        for p in left:
            unmount(p)
        if left:
            raise AssertionError(f"mounts were left behind: {left}")

    @classmethod
    def new_dir(cls, name):
        return Path(tempfile.mkdtemp(prefix=name + "-", dir=cls.scratch))

    @classmethod
    def start_mount(cls, checkpoint, *options, cleanup):
        """`ckptfs -f [options] CHECKPOINT MNT` with MNT a new directory of the scratch
        directory, waited for until the views' index.json reads. `cleanup` registers the
        unmount (addCleanup or addClassCleanup). Returns MNT (this machine's path)."""
        mnt = cls.new_dir("mnt")
        log_path = cls.scratch / f"ckptfs-{mnt.name}.log"
        log = open(log_path, "w+b")
        # SIGTERM (which unmounts) when this process dies: a mount of this process's namespace
        # that nobody else can see must not outlive it with its daemon.
        proc = subprocess.Popen([str(CKPTFS), "-f", *options, str(checkpoint), str(mnt)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, preexec_fn=_die_with_parent)
        cleanup(cls._stop, proc, mnt, log)

        def ready(path):
            try:
                with open(views_dir(path) / "index.json", "rb") as f:
                    return bool(f.read(1))
            except OSError:
                return False

        why = wait_for_mount(mnt, proc, MOUNT_TIMEOUT, ready)
        if why is not None:
            log.seek(0)
            raise AssertionError(f"ckptfs -f {' '.join(options)} {checkpoint}: {why} before the "
                                 f"mount was ready: {log.read().decode(errors='replace')[-2000:]}")
        return mnt

    @staticmethod
    def _stop(proc, mnt, log):
        """Unmounts; ckptfs must then exit with status 0."""
        try:
            r = fusermount_u(mnt)
            if r.returncode != 0:
                unmount(mnt)
            try:
                status = proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"ckptfs serving {mnt} still ran {EXIT_TIMEOUT:g} s after "
                                     f"its unmount")
            if status != 0:
                log.seek(0)
                raise AssertionError(f"ckptfs serving {mnt} exited {status}: "
                                     f"{log.read().decode(errors='replace')[-2000:]}")
            if is_mounted(mnt):
                raise AssertionError(f"{mnt} still mounted")
        finally:
            log.close()

    def mount(self, checkpoint, *options):
        """A mount for this test: unmounted after it."""
        return self.start_mount(checkpoint, *options, cleanup=self.addCleanup)

    @classmethod
    def mount_for_class(cls, checkpoint, *options):
        """A mount for every test of the class: unmounted after the last."""
        return cls.start_mount(checkpoint, *options, cleanup=cls.addClassCleanup)
