# SPDX-License-Identifier: MIT
"""Every process and mount a bench run starts (Procs), so that all of them are ended on exit,
errors and Ctrl-C included; the parent side of the warm Python worker (Worker); finding a
daemon by its mount point."""

import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

import ckptfs_mounts  # scripts/: mountinfo, waiting, unmounting
from benchlib.common import BENCH, TORCH_PY, BenchError, log, now


class Interrupted(BaseException):
    pass


def on_signal(signum, frame):
    raise Interrupted(f"signal {signum}")


def daemon_pids(program, mnt):
    """PIDs of the processes running `program` (by name) with `mnt` among their arguments."""
    name = os.path.basename(program).encode()
    want = os.fsencode(str(mnt))
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == name and want in argv:
            pids.append(int(d.name))
    return pids


class Procs:
    """Every process and mount this run starts, so that all of them are ended on exit."""

    def __init__(self):
        self.mounts = set()    # mount points we may have mounted
        self.daemons = {}      # pid -> Popen of foreground FUSE daemons
        self.children = {}     # pid -> Popen of other children (workers, timed commands)

    def _kill(self, p, grace):
        if p.poll() is not None:
            return
        try:
            p.terminate()
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
        except ProcessLookupError:
            pass

    def unmount(self, mnt, daemon=None):
        mnt = os.path.realpath(mnt)
        # Lazily only after 2 s of a busy mount (a reader not yet gone).
        if not ckptfs_mounts.unmount(mnt, attempts=21, lazy_after=20, delay=0.1):
            log(f"{mnt}: still mounted after fusermount3 -u and -u -z")
        self.mounts.discard(mnt)
        if daemon is not None:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                log(f"daemon {daemon.pid} still running after unmount; terminating it")
                self._kill(daemon, 5)
            self.daemons.pop(daemon.pid, None)

    def mount_foreground(self, cmd, mnt, timeout=300):
        """Start a FUSE daemon in the foreground (its own session: Ctrl-C is ours to handle)
        and wait until its mount appears. Returns the Popen (its pid is the daemon's)."""
        mnt = os.path.realpath(mnt)
        if ckptfs_mounts.is_mounted(mnt):
            self.unmount(mnt)
        self.mounts.add(mnt)
        err = tempfile.TemporaryFile()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err, start_new_session=True)
        self.daemons[p.pid] = p
        why = ckptfs_mounts.wait_for_mount(mnt, p, timeout, interval=0.002)
        if why == "timed out":
            self._kill(p, 5)
            raise BenchError(f"{Path(cmd[0]).name}: not mounted after {timeout} s")
        if why is not None:
            self.daemons.pop(p.pid, None)
            err.seek(0)
            msg = err.read().decode(errors="replace").strip().splitlines()
            raise BenchError(f"{Path(cmd[0]).name} {why}" + (f": {msg[-1]}" if msg else ""))
        return p

    def run(self, cmd, timeout=1800):
        """Run a command to its end; returns (wall seconds, peak RSS KiB, stdout). Wall time
        and rusage come from wait4 on this very child."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            t0 = now()
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            self.children[p.pid] = p
            timer = threading.Timer(timeout, p.kill)
            timer.start()
            try:
                _, status, ru = os.wait4(p.pid, 0)
                wall = now() - t0
            finally:
                timer.cancel()
            p.returncode = os.waitstatus_to_exitcode(status)
            self.children.pop(p.pid, None)
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode(errors="replace")
            if p.returncode != 0:
                lines = err.read().decode(errors="replace").strip().splitlines()
                raise BenchError(f"{Path(cmd[0]).name} exited {p.returncode}"
                                 + (f": {lines[-1]}" if lines else ""))
            return wall, ru.ru_maxrss, stdout

    def cleanup(self):
        for p in list(self.children.values()):
            self._kill(p, 5)
        for mnt in list(self.mounts):
            try:
                self.unmount(mnt)
            except Exception as e:
                log(f"unmounting {mnt}: {e}")
        for p in list(self.daemons.values()):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill(p, 5)
        self.children.clear()
        self.daemons.clear()


class Worker:
    """The long-lived warm Python process (torch and numpy imported): `scripts/bench
    --worker-server`, which runs benchlib.torch_workers.WorkerOps's operations."""

    def __init__(self, procs):
        self.p = subprocess.Popen([TORCH_PY, str(BENCH), "--worker-server"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, start_new_session=True)
        procs.children[self.p.pid] = self.p

    def call(self, op, *args):
        self.p.stdin.write(json.dumps({"op": op, "args": list(args)}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise BenchError(f"the worker process ended (exit {self.p.wait()})")
        out = json.loads(line)
        if not out["ok"]:
            raise BenchError(out["error"])
        return out["result"]
