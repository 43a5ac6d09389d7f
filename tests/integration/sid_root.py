# SPDX-License-Identifier: MIT
"""sid_root: running the real current tools of the Debian sid interop root (gguf-py, numpy 2,
llama.cpp's tools, safetensors) from a test, on files the test shares with it.

    CKPTFS_SID_ROOT   the root (default: /var/cache/ckptfs/sid-root)

The root is a test environment only. Commands run chrooted in a private mount namespace
(unshare -m), with /proc and /dev bound inside it for that process alone, so that nothing stays
mounted and other users of the root are never disturbed. A FUSE mount made from outside at a
path inside the root before the command starts is visible to it. Files to share go in a
scratch directory under the root's /tmp (scratch_dir()), which the test removes.

The one place that knows how to enter the root: when the interop group's runner exists, run()
is the line to change.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(os.environ.get("CKPTFS_SID_ROOT", "/var/cache/ckptfs/sid-root"))


def missing():
    """Why the root cannot be used here, or None."""
    if not (ROOT / "usr" / "bin" / "python3").exists():
        return f"no sid interop root at {ROOT} (set CKPTFS_SID_ROOT)"
    if os.geteuid() != 0:
        return "entering the sid root needs root (unshare -m, chroot)"
    if not shutil.which("unshare"):
        return "unshare is not on PATH (util-linux)"
    return None


def inside(path):
    """The path that the host path `path` (under ROOT) has inside the root."""
    return "/" + str(Path(path).resolve().relative_to(ROOT.resolve()))


def scratch_dir(prefix):
    """A new directory under the root's /tmp (host path); the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=ROOT / "tmp"))


def run(argv, timeout=600, check=True):
    """`argv` run in the root (paths in it as inside() gives them); its CompletedProcess, text
    output. check: raise AssertionError with its stderr when it exits non-zero."""
    script = 'mount --bind /proc "$0/proc" && mount --bind /dev "$0/dev" && exec chroot "$0" "$@"'
    r = subprocess.run(["unshare", "-m", "sh", "-c", script, str(ROOT), *map(str, argv)],
                       capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"in the sid root, {' '.join(map(str, argv))} exited {r.returncode}:"
                             f"\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r
