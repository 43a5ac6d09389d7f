# SPDX-License-Identifier: MIT
"""The life of a ckptfs mount, on real mounts: paths relative to where ckptfs was started, the
readiness report (only once the kernel's INIT is answered), mounts that never come up, and the
-o options (each accepted one works, every other one is refused before anything is mounted).

Run by ctest as `/usr/bin/python3 -m unittest -v test_lifecycle` with CKPTFS, CKPTFS_FIXTURES
(see fixtures.py) and
    CKPTFS_INIT_FAULT_LIBRARY  tests/support/init_fault.cpp built (default: next to CKPTFS, in
                               tests/): preloaded into ckptfs to break the kernel's INIT request
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import torch  # noqa: E402

from ckptfs_mounts import is_mounted, mount_of, unmount  # noqa: E402
from fixtures import CKPTFS, fixture_path, processes_with_arg  # noqa: E402
from fixtures import wait_until  # noqa: E402
from test_mount import EXIT_TIMEOUT, MOUNT_TIMEOUT, MountTestCase, run  # noqa: E402

INIT_FAULT_LIBRARY = Path(os.environ.get(
    "CKPTFS_INIT_FAULT_LIBRARY", CKPTFS.parent / "tests" / "libckptfs_init_fault.so")).absolute()
READY_LINE = re.compile(r"ckptfs: mounted .+ on .+ \(\d+ tensors, \d+ values, \d+ bytes\)\n")


def read_all(fd):
    """Everything written to the pipe `fd` until end-of-file (the writers are all gone)."""
    data = b""
    while chunk := os.read(fd, 64):
        data += chunk
    return data


class LifecycleTestCase(MountTestCase):
    def run_ckptfs(self, args, cwd=None, env=None, notify=False, timeout=MOUNT_TIMEOUT):
        """Runs ckptfs ARGS to its end (a daemon's parent returns); with `notify`, with
        --notify-fd on a pipe. Returns (CompletedProcess, what the pipe got or None)."""
        if not notify:
            return run([CKPTFS, *args], timeout=timeout, cwd=cwd, env=env,
                       stdin=subprocess.DEVNULL), None
        r_fd, w_fd = os.pipe()
        try:
            r = run([CKPTFS, "--notify-fd", w_fd, *args], timeout=timeout, cwd=cwd, env=env,
                    stdin=subprocess.DEVNULL, pass_fds=[w_fd])
            os.close(w_fd)
            w_fd = None
            # A daemon that is ready holds no copy of the pipe: end-of-file comes at once.
            return r, read_all(r_fd)
        finally:
            os.close(r_fd)
            if w_fd is not None:
                os.close(w_fd)

    def assert_nothing_left(self, mnt, where):
        self.assertFalse(is_mounted(mnt), f"{where}: {mnt} is mounted")
        self.assertTrue(wait_until(lambda: not processes_with_arg(mnt), EXIT_TIMEOUT),
                        f"{where}: a ckptfs process still runs")

    def assert_one_error_line(self, r, mnt, pattern, where):
        err = r.stderr.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 6, f"{where}: exit status; stderr {err!r}")
        self.assertRegex(err, rf"\Ackptfs: {re.escape(str(mnt))}: {pattern}\n\Z", where)


# --------------------------------------------------------------------------------------------
# Relative paths: the daemon changes directory to "/"
# --------------------------------------------------------------------------------------------

class RelativePathTests(LifecycleTestCase):
    """`ckptfs model.pth mnt` started in the checkpoint's directory: the mount is made on the
    absolute path (as libfuse's own command-line parser does), so the unmount that SIGTERM or
    SIGINT starts works from any directory, and the checkpoint is still found by its path (each
    open checks it) after the daemon's chdir("/")."""

    def setUp(self):
        super().setUp()
        self.work = self.new_dir("work")
        shutil.copyfile(fixture_path("convnet"), self.work / "model.pth")
        (self.work / "mnt").mkdir()
        (self.work / "link-to-mnt").symlink_to("mnt")
        self.mnt = self.work / "mnt"

    def assert_serves(self, mnt):
        """index.json and a tensor's data read (an open checks the checkpoint by its path)."""
        index = self.read_json(views_dir(mnt) / "index.json")
        self.assertEqual(index["source"], str(self.work / "model.pth"))
        entry = next(e for e in index["entries"] if e["kind"] == "tensor")
        self.assertEqual(len((mnt / entry["path"] / "data").read_bytes()), entry["nbytes"])

    def test_foreground_signals(self):
        for mountpoint in ("mnt", "./link-to-mnt", "../" + self.work.name + "/mnt"):
            for signum in (signal.SIGTERM, signal.SIGINT):
                with self.subTest(mountpoint=mountpoint, signal=signum.name):
                    log = open(self.tmp / "foreground.log", "w+b")
                    self.addCleanup(log.close)
                    proc = subprocess.Popen([CKPTFS, "-f", "model.pth", mountpoint],
                                            cwd=self.work, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=log, start_new_session=True)
                    proc.log = log
                    self.addCleanup(self._stop, proc, self.mnt)
                    self.assertTrue(wait_until(lambda: is_mounted(self.mnt), MOUNT_TIMEOUT),
                                    self.output(proc))
                    self.assertEqual(mount_of(self.mnt).source, str(self.work / "model.pth"))
                    self.assert_serves(self.mnt)
                    proc.send_signal(signum)
                    self.assert_exits_cleanly(proc, signum.name)
                    self.assertFalse(is_mounted(self.mnt), self.output(proc))
                    self.assertRegex(self.output(proc), rf"\A{READY_LINE.pattern}\Z")

    def test_daemon(self):
        """Without -f: SIGTERM to the daemon, and fusermount3 -u with the relative path."""
        for how in ("SIGTERM", "fusermount3 -u mnt"):
            with self.subTest(how):
                self.addCleanup(unmount, self.mnt)
                r, _ = self.run_ckptfs(["model.pth", "mnt"], cwd=self.work)
                self.assertEqual((r.returncode, r.stderr), (0, b""))
                self.assertTrue(is_mounted(self.mnt))
                self.assert_serves(self.mnt)
                daemons = processes_with_arg("mnt")
                self.assertEqual(len(daemons), 1, "one ckptfs daemon serves the mount")
                self.assertEqual(os.readlink(f"/proc/{daemons[0]}/cwd"), "/")
                if how == "SIGTERM":
                    os.kill(daemons[0], signal.SIGTERM)
                else:
                    r = run(["fusermount3", "-u", "mnt"], cwd=self.work)
                    self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(wait_until(lambda: not is_mounted(self.mnt), EXIT_TIMEOUT),
                                f"still mounted after {how}")
                self.assert_nothing_left("mnt", how)


# --------------------------------------------------------------------------------------------
# Readiness: reported once the kernel's INIT is answered, and never for a mount that failed
# --------------------------------------------------------------------------------------------

class ReadinessTests(LifecycleTestCase):
    def fault_env(self, fault):
        if not INIT_FAULT_LIBRARY.is_file():
            self.fail(f"missing {INIT_FAULT_LIBRARY} (set CKPTFS_INIT_FAULT_LIBRARY)")
        # An ASan build wants its runtime first among the loaded libraries; this one is not.
        asan = os.environ.get("ASAN_OPTIONS", "")
        return {**os.environ, "LD_PRELOAD": str(INIT_FAULT_LIBRARY), "CKPTFS_INIT_FAULT": fault,
                "ASAN_OPTIONS": f"{asan}:verify_asan_link_order=0".lstrip(":")}

    def test_ready_line_after_the_init_reply(self):
        """With -d, libfuse logs INIT and its answer: the "mounted" line comes after."""
        mnt, proc = self.mount(fixture_path("bare"), "-d")
        self.unmount(mnt, proc)
        log = self.output(proc)
        init = re.search(r"unique: (\d+), opcode: INIT \(26\)", log)
        self.assertIsNotNone(init, log[:2000])
        reply = re.search(rf"unique: {init.group(1)}, success", log)
        self.assertIsNotNone(reply, log[:2000])
        ready = READY_LINE.search(log)
        self.assertIsNotNone(ready, log[:2000])
        self.assertGreater(ready.start(), reply.end(), "ready before INIT was answered")

    def test_init_refused(self):
        """libfuse refuses the kernel's INIT (here: an old protocol version), which leaves a
        dead mount: exit 6, one line saying so, "0" on the notify fd, nothing mounted, no
        process left; with -f, no "mounted" line; without it, the parent waited for the child."""
        for foreground in ([], ["-f"]):
            with self.subTest(foreground=foreground):
                mnt = self.new_dir()
                r, notified = self.run_ckptfs([*foreground, fixture_path("bare"), mnt],
                                              env=self.fault_env("old_kernel"), notify=True)
                self.assert_one_error_line(
                    r, mnt, r"the kernel's INIT request was refused: unsupported protocol "
                            r"version: 6\.\d+", "INIT refused")
                self.assertEqual(notified, b"0\n")
                self.assert_nothing_left(mnt, "INIT refused")

    def test_daemon_died_before_ready(self):
        """The daemon child dies before answering INIT: its parent says so, exits 6, tells the
        notify fd "0" and unmounts the dead mount the child left."""
        mnt = self.new_dir()
        r, notified = self.run_ckptfs([fixture_path("bare"), mnt], env=self.fault_env("die"),
                                      notify=True)
        self.assert_one_error_line(r, mnt, r"the daemon was killed by signal 9 \(Killed\) before "
                                           r"the mount was ready", "daemon died")
        self.assertEqual(notified, b"0\n")
        self.assert_nothing_left(mnt, "daemon died")

    def test_ready_daemon(self):
        """Without -f and without a fault: "1" on the notify fd, exit 0, the tree readable."""
        mnt = self.new_dir()
        self.addCleanup(unmount, mnt)
        r, notified = self.run_ckptfs([fixture_path("bare"), mnt], notify=True)
        self.assertEqual((r.returncode, r.stderr, notified), (0, b"", b"1\n"))
        self.assertEqual(self.read_json(views_dir(mnt) / "index.json")["tensors"], 1)
        self.unmount(mnt, None)
        self.assert_nothing_left(mnt, "fusermount3 -u")


# --------------------------------------------------------------------------------------------
# -o options passed to libfuse and the kernel
# --------------------------------------------------------------------------------------------

NOBODY = 65534


def read_as_nobody(path):
    """Reads `path` as uid/gid 65534 in a child; returns its bytes, or the errno of the failure."""
    r_fd, w_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            os.close(r_fd)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with open(path, "rb") as f:
                os.write(w_fd, b"ok " + f.read(64))
        except OSError as e:
            os.write(w_fd, f"errno {e.errno}".encode())
        except BaseException:
            status = 1
        os._exit(status)
    os.close(w_fd)
    try:
        out = read_all(r_fd)
    finally:
        os.close(r_fd)
        os.waitpid(pid, 0)
    return out


class MountOptionTests(LifecycleTestCase):
    def test_mount_flags_and_names(self):
        """Each accepted option mounts, serves, and shows where the kernel shows it."""
        cases = {
            "default_permissions": {"default_permissions"},
            "nodev,nosuid,noexec,noatime,sync,dirsync": {"nodev", "nosuid", "noexec",
                                                         "noatime", "sync", "dirsync"},
            "dev,suid,exec,atime,async": set(),
            "allow_other": {"allow_other"},
            "allow_root": {"allow_other"},  # libfuse lets the kernel allow all, then filters
            "auto_unmount": set(),
            "max_read=8192": {"max_read=8192"},
        }
        for option, shown in cases.items():
            with self.subTest(option):
                mnt, proc = self.mount(fixture_path("convnet"), "-o", option)
                m = mount_of(mnt)
                self.assertEqual(m.fstype, "fuse.ckptfs")
                self.assertEqual(m.source, os.path.realpath(fixture_path("convnet")))
                self.assertGreaterEqual(m.options, shown | {"ro"})
                self.assertNotIn("rw", m.options)
                self.assertEqual(self.read_json(views_dir(mnt) / "index.json")["tensors"], 16)
                self.unmount(mnt, proc)
        with self.subTest("fsname and subtype"):
            mnt, proc = self.mount(fixture_path("bare"), "-o", "fsname=my-model,subtype=weights")
            m = mount_of(mnt)
            self.assertEqual((m.fstype, m.source), ("fuse.weights", "my-model"))
            self.unmount(mnt, proc)

    def test_who_may_read(self):
        """Without allow_other only the mounting user reads; allow_other lets everyone (the
        files being 0644, as the fixture is); allow_root lets root and the mounting user only."""
        want = {(): b"errno 13", ("-o", "allow_other"): b"ok {", ("-o", "allow_root"): b"errno 13"}
        os.chmod(self.tmp, 0o755)  # the mountpoint's path must be searchable by nobody
        for options, expected in want.items():
            with self.subTest(options=options):
                mnt, proc = self.mount(fixture_path("bare"), *options)
                got = read_as_nobody(views_dir(mnt) / "index.json")
                self.assertTrue(got.startswith(expected), got)
                self.unmount(mnt, proc)

    def test_auto_unmount(self):
        """A ckptfs killed by SIGKILL leaves no mount behind with auto_unmount (fusermount3
        watches it), and a dead one without."""
        for option, left in ((["-o", "auto_unmount"], False), ([], True)):
            with self.subTest(options=option):
                mnt, proc = self.mount(fixture_path("bare"), *option)
                proc.kill()
                proc.wait(timeout=EXIT_TIMEOUT)
                if left:
                    time.sleep(0.5)
                    self.assertTrue(is_mounted(mnt), "the dead mount went away by itself")
                    unmount(mnt)
                else:
                    self.assertTrue(wait_until(lambda: not is_mounted(mnt), EXIT_TIMEOUT),
                                    "auto_unmount left the mount of a killed ckptfs")

    def test_max_read(self):
        """max_read=8192 (libfuse 3.14 refused the INIT unless ckptfs's init agreed): READ
        requests are at most 8192 bytes, and a large tensor reads right through them."""
        path = self.tmp / "big.pth"
        big = torch.arange(1 << 18, dtype=torch.float32)  # 1 MiB
        torch.save({"big": big}, path)
        mnt, proc = self.mount(path, "-d", "-o", "max_read=8192")
        with open(mnt / "big" / "data", "rb") as f:
            data = f.read()
        self.assertEqual(data, big.numpy().tobytes())
        self.unmount(mnt, proc)
        log = self.output(proc)
        reads = set(re.findall(r"unique: (\d+), opcode: READ \(15\)", log))
        replies = dict(re.findall(r"unique: (\d+), success, outsize: (\d+)", log))
        sizes = [int(replies[u]) - 16 for u in reads if u in replies]  # less the reply header
        self.assertGreater(len(sizes), 4, "too few READs in the debug log")
        self.assertEqual(max(sizes), 8192)

    def test_refused_up_front(self):
        """What is not known to work is a usage error naming it: exit 1, one line, nothing
        mounted, no daemon, "0" on the notify fd (also when the option comes first)."""
        refused = ["kernel_cache", "debug", "blkdev", "blksize=4096", "context=system_u",
                   "fd=3", "rootmode=40000", "user_id=0", "max_write=4096", "nonempty",
                   "fsname=", "max_read=4095", "max_read=x", "clone_fd", "entry_timeout=1"]
        for option in refused:
            for foreground in ([], ["-f"]):
                with self.subTest(option, foreground=foreground):
                    mnt = self.new_dir()
                    r, notified = self.run_ckptfs(
                        [*foreground, "-o", f"{option},uid=0", fixture_path("bare"), mnt],
                        notify=True)
                    err = r.stderr.decode("utf-8", "replace")
                    self.assertEqual(r.returncode, 1, err)
                    self.assertRegex(err, r"\Ackptfs: [^\n]*" + re.escape(option.split("=")[0])
                                     + r"[^\n]*\(try 'ckptfs --help'\)\n\Z")
                    self.assertEqual(notified, b"0\n")
                    self.assert_nothing_left(mnt, option)

    def test_ignored(self):
        """fstab's, mount(8)'s and systemd's own options, and "user=" that mount(8) adds for a
        user mount, mount as if absent."""
        mnt, proc = self.mount(fixture_path("bare"), "-o",
                               "rw,defaults,noauto,nofail,_netdev,user=someone,x-systemd.idle=1")
        self.assertIn("ro", mount_of(mnt).options)
        self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
