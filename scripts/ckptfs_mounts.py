# SPDX-License-Identifier: MIT
"""Mounts as the tools and tests see them: what /proc/self/mountinfo lists, waiting for a mount to
come up, and unmounting that always ends with nothing mounted.

The one copy that scripts/ckptfs-verify, scripts/bench and the integration tests
(tests/integration/) share. Standard library only, so that anything can import it (bench's
parent process has no torch); tools import it from their own directory, where it sits beside
them (scripts/ in the repository, or wherever ckptfs-verify is installed).

Paths are compared as /proc/self/mountinfo writes them: absolute, symlinks resolved. A path is
resolved without touching what may be mounted on it (its parent directory is resolved, not the
path itself), since a mount whose daemon is stopped or dead does not answer.
"""

import os
import subprocess
import time
from pathlib import Path
from typing import NamedTuple


class Mount(NamedTuple):
    point: str    # the mount point
    fstype: str   # "fuse.ckptfs", "ext4"...
    source: str   # what was mounted: the checkpoint for ckptfs
    options: set  # the mount's options and its file system's ("ro", "nodev", "max_read=8192"...)


def _unescape(field):
    """A path field of mountinfo with its octal escapes (\\040 for a space...) undone."""
    out, i = "", 0
    while i < len(field):
        digits = field[i + 1:i + 4]
        if field[i] == "\\" and len(digits) == 3 and all(c in "01234567" for c in digits):
            out += chr(int(digits, 8))
            i += 4
        else:
            out += field[i]
            i += 1
    return out


def mounts():
    """Every mount of this process's mount namespace, in /proc/self/mountinfo order (a path twice
    when two mounts are stacked on it). Raises OSError when /proc is not there."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            # ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS
            left, _, right = line.rstrip("\n").partition(" - ")
            fields, tail = left.split(" "), right.split(" ")
            if len(fields) < 6 or len(tail) < 3:
                continue
            out.append(Mount(_unescape(fields[4]), tail[0], _unescape(tail[1]),
                             set(fields[5].split(",")) | set(tail[2].split(","))))
    return out


def mount_points():
    """The mount points of mounts(), in order."""
    return [m.point for m in mounts()]


def resolve(path):
    """`path` absolute with its directory's symlinks resolved; the path itself is not touched."""
    path = os.path.abspath(os.fspath(path))
    head, tail = os.path.split(path)
    return os.path.join(os.path.realpath(head), tail) if tail else path


def mount_count(path):
    """How many mounts are stacked on `path`."""
    path = resolve(path)
    return sum(1 for p in mount_points() if p == path)


def is_mounted(path):
    return mount_count(path) > 0


def mount_of(path):
    """The topmost Mount on `path`, or None."""
    path = resolve(path)
    found = [m for m in mounts() if m.point == path]
    return found[-1] if found else None


def fusermount_u(path, lazy=False, timeout=10.0):
    """`fusermount3 -u [-z] PATH`, its CompletedProcess (output captured)."""
    return subprocess.run(["fusermount3", "-u", *(["-z"] if lazy else []), str(path)],
                          capture_output=True, timeout=timeout)


def unmount(path, attempts=50, lazy_after=10, delay=0.05):
    """Unmounts every mount stacked on `path`: fusermount3 -u, retried while the mount is busy,
    lazily (-z) from attempt `lazy_after` on. Returns whether nothing is mounted there now."""
    for attempt in range(attempts):
        if not is_mounted(path):
            return True
        try:
            r = fusermount_u(path, lazy=attempt >= lazy_after)
            failed = r.returncode != 0
        except subprocess.TimeoutExpired:
            failed = True
        if failed:
            time.sleep(delay)
    return not is_mounted(path)


# The hidden folder at a mount's root that holds the whole-checkpoint views: index.json and
# model.safetensors (or, with -o shard_size, model-0000N-of-0000M.safetensors and
# model.safetensors.index.json). The root lists key directories only (in -o layout=rfc: map.pt
# and the <name>.pt files) and this folder. Every tool and test finds the views through
# views_dir(), the one place that knows where they are.
VIEWS_FOLDER = ".ckptfs"


def views_dir(mnt):
    """The folder of the whole-checkpoint views of the mount on `mnt`, as a Path."""
    return Path(mnt) / VIEWS_FOLDER


def index_readable(path):
    """Whether `path` is mounted and its index.json (ckptfs's) gives a first byte."""
    if not is_mounted(path):
        return False
    try:
        with open(views_dir(path) / "index.json", "rb") as f:
            return bool(f.read(1))
    except OSError:
        return False


def wait_for_mount(path, proc=None, timeout=20.0, ready=None, interval=0.02):
    """Waits until `path` is mounted and `ready(path)` (when given) is true. Returns None once it
    is, or why not: "exited N" when the process `proc` (a Popen serving the mount) ended first,
    "timed out" after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if is_mounted(path) and (ready is None or ready(path)):
            return None
        if proc is not None and proc.poll() is not None:
            return f"exited {proc.returncode}"
        if time.monotonic() > deadline:
            return "timed out"
        time.sleep(interval)
