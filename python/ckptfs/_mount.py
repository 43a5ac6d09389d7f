# SPDX-License-Identifier: MIT
"""Mounts: finding the ckptfs program, mounting a checkpoint on a private directory, telling a
ckptfs mount from any other directory, and unmounting what this process mounted."""

import errno as errnos
import os
import shutil
import subprocess
import tempfile

from ._errors import Error

# The variable naming the ckptfs program (else `ckptfs` is looked up on PATH).
BINARY_VARIABLE = "CKPTFS_BINARY"
# The file system type of a ckptfs mount in /proc/self/mountinfo.
FSTYPE = "fuse.ckptfs"
VIEWS_FOLDER = ".ckptfs"

# -o options that would change what the package reads (the split layout's key directories,
# their tensor.npy and value.json), or that it sets itself.
_REFUSED_OPTIONS = {
    "layout": "the package reads the split layout's key directories",
    "files": "the package reads each key directory's tensor.npy or value.json",
    "notify_fd": "the package waits for the mount with its own",
}


def find_binary():
    """find_binary() -> str: the ckptfs program: $CKPTFS_BINARY, else `ckptfs` on PATH.

    ERRORS
        Error (status 2) when neither names an executable file.
    """
    named = os.environ.get(BINARY_VARIABLE)
    if named:
        if not (os.path.isfile(named) and os.access(named, os.X_OK)):
            raise Error(f"ckptfs: {named}: ${BINARY_VARIABLE} names no executable file: set it "
                        "to the ckptfs program, or unset it to use the one on PATH", status=2)
        return named
    found = shutil.which("ckptfs")
    if not found:
        raise Error("ckptfs: the ckptfs program is not on PATH: install ckptfs (its .deb, or "
                    f"cmake --install), or set ${BINARY_VARIABLE} to it", status=2)
    return found


def _unescape(field):
    """A path of /proc/self/mountinfo with its octal escapes (\\040 for a space) undone."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        digits = field[i + 1:i + 4]
        if field[i] == "\\" and len(digits) == 3 and all(c in "01234567" for c in digits):
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def resolve(path):
    """`path` absolute with its directory's symbolic links resolved, as mountinfo writes mount
    points; the path itself is not touched (a dead mount does not answer)."""
    path = os.path.abspath(os.fspath(path))
    head, tail = os.path.split(path)
    return os.path.join(os.path.realpath(head), tail) if tail else path


def fstype_of(path):
    """The file system type of the topmost mount on `path` ("fuse.ckptfs", "ext4"...), or None
    when nothing is mounted there (or /proc is not there)."""
    point = resolve(path)
    found = None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                # ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS
                left, _, right = line.rstrip("\n").partition(" - ")
                fields, tail = left.split(" "), right.split(" ")
                if len(fields) >= 5 and tail and _unescape(fields[4]) == point:
                    found = tail[0]
    except OSError:
        return None
    return found


def is_ckptfs_mount(path):
    """Whether a ckptfs mount is on `path` (mountinfo says fuse.ckptfs) and answers: its
    .ckptfs/index.json is a file."""
    return fstype_of(path) == FSTYPE and os.path.isfile(
        os.path.join(path, VIEWS_FOLDER, "index.json"))


def option_arguments(options):
    """The -o arguments of keyword options: name=value, or name alone for True (False and None
    leave an option out). A torch dtype is named as torch names it (torch.float16: float16)."""
    out = []
    for name, value in options.items():
        if name in _REFUSED_OPTIONS:
            raise Error(f"ckptfs: -o {name}: not an option of ckptfs.open ("
                        f"{_REFUSED_OPTIONS[name]}): mount with the ckptfs program and open "
                        "the mountpoint for that", status=1)
        if value is None or value is False:
            continue
        if value is True:
            out.append(name)
            continue
        text = str(value)
        if text.startswith("torch."):
            text = text[len("torch."):]
        if "," in text or "," in name:
            raise Error(f"ckptfs: -o {name}={text}: a comma would split the option: name a "
                        "path without one", status=1)
        out.append(f"{name}={text}")
    return [a for o in out for a in ("-o", o)]


def _last_line(stderr):
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith("ckptfs: warning:")]
    return (errors or lines or [""])[-1]


class Mount:
    """A checkpoint mounted by this process on a private directory (mode 0700), until close().

    The ckptfs program mounts it as a daemon and returns once the mount is ready, which it also
    says on a pipe (-o notify_fd=: "1" ready, "0" failed). close() unmounts (fusermount3 -u,
    then -u -z while a file is still open) and removes the directory; only the process that
    mounted does (a forked child's copy of this object never unmounts its parent's mount).
    """

    def __init__(self, source, options):
        binary = find_binary()
        source = os.fspath(source)
        if "://" not in source:
            source = os.path.abspath(source)  # never taken for an option, whatever its name
        arguments = option_arguments(options)
        self.path = tempfile.mkdtemp(prefix="ckptfs-")  # 0700: only this user sees the tree
        self.pid = os.getpid()
        self._closed = False
        ready_r, ready_w = os.pipe()
        try:
            try:
                done = subprocess.run(
                    [binary, "-o", f"notify_fd={ready_w}", *arguments, source, self.path],
                    pass_fds=(ready_w,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, check=False)
            finally:
                os.close(ready_w)
            os.set_blocking(ready_r, False)
            try:
                said = os.read(ready_r, 16)
            except BlockingIOError:
                said = b""
        except OSError as e:
            os.rmdir(self.path)
            raise Error(f"ckptfs: {binary}: cannot run it: {e.strerror}", status=2,
                        errno=e.errno) from None
        finally:
            os.close(ready_r)
        if done.returncode != 0 or said != b"1\n":
            line = _last_line(done.stderr) or (
                f"ckptfs: {source}: the mount did not come up (ckptfs exited "
                f"{done.returncode}, said {said!r})")
            if fstype_of(self.path) is not None:  # never: ckptfs leaves nothing mounted
                self._unmount()
            try:
                os.rmdir(self.path)
            except OSError:
                pass
            raise Error(line, status=done.returncode or None)

    def close(self):
        """Unmounts and removes the mountpoint (once; in the process that mounted only)."""
        if self._closed or os.getpid() != self.pid:
            return
        self._closed = True
        self._unmount()
        try:
            os.rmdir(self.path)
        except OSError:
            pass  # still mounted (lazily unmounted: it goes with the last open file)

    def _unmount(self):
        for lazy in (False, True):
            if fstype_of(self.path) is None:
                return
            try:
                subprocess.run(["fusermount3", "-u", *(["-z"] if lazy else []), self.path],
                               stdin=subprocess.DEVNULL, capture_output=True, check=False)
            except OSError as e:
                if e.errno == errnos.ENOENT:
                    raise Error("ckptfs: fusermount3 is not on PATH: install fuse3 to "
                                f"unmount {self.path}", status=6) from None
                raise
