# SPDX-License-Identifier: MIT
"""scripts/interop-run and the mount namespaces of the interop tests, on their own:

  - a command runs in the root with its exit status, a clean environment, the repository
    read-only at /opt/ckptfs, and a ckptfs mount made before at a path inside the root;
  - what it mounts is never seen outside;
  - neither a run nor a test process of the interop group (interop_support, which moves into
    a mount namespace of its own) keeps another process's FUSE mount alive: a ckptfs mount made
    and unmounted outside while they run ends, its daemon exits, as without them.

This module stays in this machine's mount namespace (it does not import interop_support).
Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_runner` (label interop).
"""

import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from ckptfs_mounts import is_mounted, unmount, wait_for_mount  # noqa: E402
from fixtures import CKPTFS, INTEROP_ROOT, REPO  # noqa: E402

RUNNER = REPO / "scripts" / "interop-run"
SAMPLE = REPO / "tests" / "data" / "sample.pth"
SAMPLE_FILE = "encoder.weight/meta.json"  # a file of its mount in every layout of the root
TIMEOUT = 60.0
EXIT_TIMEOUT = 10.0


def run(*command, **kwargs):
    return subprocess.run([str(RUNNER), *command], capture_output=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, **kwargs)


class RunnerTests(unittest.TestCase):
    def setUp(self):
        self.scratch = Path(tempfile.mkdtemp(prefix="ckptfs-interop-runner-",
                                             dir=INTEROP_ROOT / "tmp"))
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", str(self.scratch)]))

    def mount(self, where):
        """ckptfs -f SAMPLE WHERE from this namespace, waited for; unmounted after the test."""
        where.mkdir()
        proc = subprocess.Popen([str(CKPTFS), "-f", str(SAMPLE), str(where)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(self.stop, proc, where)
        self.assertIsNone(wait_for_mount(where, proc, TIMEOUT,
                                         lambda p: (p / SAMPLE_FILE).is_file()))
        return proc

    @staticmethod
    def stop(proc, where):
        unmount(where)
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    def test_command_in_the_root(self):
        r = run("sh", "-c", "echo $HOME $LANG; test -e /etc/ckptfs-interop; exit 7")
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertEqual(r.stdout.decode().split(), ["/root", "C.UTF-8"])
        r = run("env")
        names = {line.split("=", 1)[0] for line in r.stdout.decode().splitlines()}
        self.assertNotIn("CKPTFS", names)  # nothing of this environment leaks in
        self.assertIn("HF_HUB_OFFLINE", names)
        r = run("sh", "-c", "test -f /opt/ckptfs/scripts/interop-run && "
                "! touch /opt/ckptfs/x 2>/dev/null")
        self.assertEqual(r.returncode, 0, "the repository is there, read-only")

    def test_missing_root(self):
        r = run("true", env={**os.environ, "CKPTFS_INTEROP_ROOT": str(self.scratch / "none")})
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr.decode(), r"^interop-run: no interop root at .*none \(make it: "
                                            r"scripts/interop-root\)\n$")

    def test_mount_made_before_is_seen(self):
        self.mount(self.scratch / "mnt")
        inside = "/" + str((self.scratch / "mnt").relative_to(INTEROP_ROOT))
        r = run("cat", f"{inside}/{SAMPLE_FILE}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, (self.scratch / "mnt" / SAMPLE_FILE).read_bytes())

    def test_mounts_inside_stay_inside(self):
        (self.scratch / "d").mkdir()
        inside = "/" + str((self.scratch / "d").relative_to(INTEROP_ROOT))
        r = run("sh", "-c", f"mount -t tmpfs none {inside} && touch {inside}/x && ls {inside}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, b"x\n")
        self.assertFalse(is_mounted(self.scratch / "d"))
        self.assertEqual(list((self.scratch / "d").iterdir()), [])

    def assert_unmount_ends_daemon_while(self, holder):
        """A ckptfs mount outside the root, made before `holder` (a Popen that is up once it
        printed a line) started and unmounted while it runs: the daemon exits, as alone."""
        with tempfile.TemporaryDirectory(prefix="ckptfs-interop-runner-") as tmp:
            where = Path(tmp) / "mnt"
            proc = self.mount(where)
            p = subprocess.Popen(holder, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)
            try:
                self.assertTrue(p.stdout.readline(), p.stderr.read() if p.poll() else "")
                self.assertEqual(subprocess.run(["fusermount3", "-u", str(where)]).returncode, 0)
                start = time.monotonic()
                try:
                    status = proc.wait(timeout=EXIT_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.fail(f"ckptfs still ran {EXIT_TIMEOUT:g} s after its unmount, while "
                              f"{holder[0]} ran")
                self.assertEqual(status, 0)
                self.assertLess(time.monotonic() - start, EXIT_TIMEOUT)
            finally:
                p.stdin.close()
                p.wait(timeout=TIMEOUT)
                p.stdout.close()
                p.stderr.close()

    def test_a_run_keeps_no_outside_mount(self):
        self.assert_unmount_ends_daemon_while([str(RUNNER), "sh", "-c", "echo up; cat >/dev/null"])

    def test_a_test_process_keeps_no_outside_mount(self):
        holder = [sys.executable, "-c",
                  "import sys; sys.path.insert(0, sys.argv[1]); import interop_support; "
                  "print('up', flush=True); sys.stdin.read()", str(HERE)]
        self.assert_unmount_ends_daemon_while(holder)


if __name__ == "__main__":
    unittest.main()
