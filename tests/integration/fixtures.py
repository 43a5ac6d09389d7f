# SPDX-License-Identifier: MIT
"""What the integration tests share: where they find what they run and read,

    CKPTFS             the ckptfs binary                     (default: build/ckptfs)
    CKPTFS_FIXTURES    output of scripts/make_fixtures.py    (default: build/fixtures)
    CKPTFS_CORPUS      real checkpoints + PROVENANCE.tsv     (default: ../shared/corpus beside
                                                              the clone, or a worktree's main
                                                              clone, when it exists)
    CKPTFS_FUSE_DEVICE the FUSE device require() checks      (default: /dev/fuse; a missing path
                                                              shows what a machine without FUSE
                                                              does: every module that mounts skips)
    CKPTFS_INTEROP_ROOT the interop root (scripts/interop-root; default /var/cache/ckptfs/sid-root):
                       the tests of tests/interop/ need it
    CKPTFS_INTEROP_REQUIRED=1  a missing interop root fails those tests instead (.ci/run)

what each test module needs from the machine (require(): skipped as a whole, exit 77, when it is
missing), which fixtures there are (a missing fixture is a failure, never a skip), and how they
wait for and find ckptfs daemons.

The corpus is optional: where CKPTFS_CORPUS is not set and ../shared/corpus does not exist (a
user's fresh clone), every test that reads it is skipped with the reason (@needs_corpus), and the
others run. Where CKPTFS_CORPUS is set (.ci/run sets it), the corpus tests always run: a missing
corpus then fails them.
"""

import importlib
import json
import os
import shutil
import sys
import threading
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

# Where a mount keeps its whole-checkpoint views (index.json, model.safetensors, the shard set):
# MNT/.ckptfs. Tests find them through views_dir(mnt), never by a path of their own.
from ckptfs_mounts import VIEWS_FOLDER, views_dir  # noqa: E402,F401
CKPTFS = Path(os.environ.get("CKPTFS", REPO / "build" / "ckptfs")).absolute()
FIXTURES = Path(os.environ.get("CKPTFS_FIXTURES", REPO / "build" / "fixtures")).absolute()


def clone_of(repo):
    """The clone `repo` belongs to: itself, or for a linked git worktree (whose .git is a file
    "gitdir: CLONE/.git/worktrees/NAME") the main clone."""
    try:
        gitdir = Path((repo / ".git").read_text().strip().removeprefix("gitdir: "))
    except OSError:  # a directory (a clone), or none (an exported tree)
        return repo
    return gitdir.parents[2] if gitdir.parent.name == "worktrees" else repo


CORPUS_SETTING = os.environ.get("CKPTFS_CORPUS") or None
CORPUS = Path(CORPUS_SETTING or clone_of(REPO).parent / "shared" / "corpus").absolute()


def corpus_absent():
    """Why the tests of the corpus are skipped here: a reason, or None when they run. They run
    whenever CKPTFS_CORPUS is set (a missing corpus then fails them: whoever set it asked for
    them) or the default, ../shared/corpus beside the clone (a worktree's: beside its main clone),
    is a directory."""
    if CORPUS_SETTING is not None or CORPUS.is_dir():
        return None
    return (f"no corpus at {CORPUS} (the default: ../shared/corpus beside the clone): set "
            "CKPTFS_CORPUS to a copy of it")


# A decorator for each test (or class of tests) that reads the corpus: skipped with the reason
# where corpus_absent() gives one.
needs_corpus = unittest.skipIf(corpus_absent() is not None, corpus_absent() or "")

# The exit status of a test module that cannot run on this machine: ctest reports it as skipped
# (SKIP_RETURN_CODE in tests/CMakeLists.txt), not as passed or failed.
SKIP_EXIT_STATUS = 77
FUSE_DEVICE = os.environ.get("CKPTFS_FUSE_DEVICE", "/dev/fuse")
INTEROP_ROOT = Path(os.environ.get("CKPTFS_INTEROP_ROOT", "/var/cache/ckptfs/sid-root"))
# What scripts/interop-root writes last, once every package of the root is installed.
INTEROP_STAMP = "etc/ckptfs-interop"


def missing(*needs):
    """Why this machine lacks what `needs` names ("fuse": a FUSE device that opens read-write
    and fusermount3; "torch": torch and numpy for this Python; "corpus": the corpus, see
    corpus_absent(); "interop": the interop root, complete, and root's rights to chroot into
    it): a list of reasons, empty when nothing is missing."""
    reasons = []
    if "fuse" in needs:
        try:
            os.close(os.open(FUSE_DEVICE, os.O_RDWR | os.O_CLOEXEC))
        except OSError as e:
            reasons.append(f"{FUSE_DEVICE} cannot be opened ({e.strerror})")
        if not shutil.which("fusermount3"):
            reasons.append("fusermount3 is not on PATH (package fuse3)")
    if "torch" in needs:
        for module in ("numpy", "torch"):
            try:
                importlib.import_module(module)
            except ImportError as e:
                reasons.append(f"{sys.executable} cannot import {module} ({e})")
    if "corpus" in needs and corpus_absent() is not None:
        reasons.append(corpus_absent())
    if "interop" in needs:
        if not (INTEROP_ROOT / INTEROP_STAMP).is_file():
            made = "is not complete" if INTEROP_ROOT.exists() else "does not exist"
            reasons.append(f"the interop root {INTEROP_ROOT} {made} (make it: "
                           f"scripts/interop-root; CKPTFS_INTEROP_ROOT names another)")
        elif os.geteuid() != 0:
            reasons.append("the interop tests chroot into the interop root: they need root")
    return reasons


def require(*needs):
    """Called by a test module before it imports what it needs: when missing() finds anything,
    prints "SKIPPED: reasons" and exits SKIP_EXIT_STATUS, so that the whole module is reported
    skipped with its reason instead of failing on a machine without FUSE or torch.
    With CKPTFS_INTEROP_REQUIRED=1 (CI, which makes the root), a missing "interop" need is a
    failure (exit 1) instead."""
    reasons = missing(*needs)
    if reasons and "interop" in needs and os.environ.get("CKPTFS_INTEROP_REQUIRED") == "1":
        print(f"FAILED (CKPTFS_INTEROP_REQUIRED=1): {'; '.join(reasons)}", file=sys.stderr,
              flush=True)
        sys.exit(1)
    if reasons:
        print(f"SKIPPED: {'; '.join(reasons)}", file=sys.stderr, flush=True)
        sys.exit(SKIP_EXIT_STATUS)


# Every fixture scripts/make_fixtures.py writes. A missing one is a failure.
FIXTURE_NAMES = ["convnet", "dtypes", "views", "training", "values", "keys", "collisions",
                 "quantized", "params", "module", "bare", "sparse", "zip64", "zip64_cd", "legacy",
                 "bigendian", "new_dtypes", "ts_script", "ts_trace", "ts_quantized", "ts_frozen",
                 "ts_layout2x"]
# The TorchScript archives (torch.jit.save) among them: torch.load hands them to torch.jit.load,
# so their oracle is ckptfs_reference.torchscript_flatten, not torch.load flattened.
TORCHSCRIPT_FIXTURES = {"ts_script", "ts_trace", "ts_quantized", "ts_frozen", "ts_layout2x"}
# Fixtures torch 1.13 cannot load: new dtypes and the torch >= 2.7 layout (hand-built), and a
# zip64 central directory whose zero-length record carries only a zip64 offset (valid; miniz 2.1
# checks the saturated 32-bit offset against the file size). bigendian.pth does load (1.13 ignores
# the byteorder record, so the values are swapped, but keys, dtypes and layouts are right).
NOT_TORCH_LOADABLE = {"new_dtypes", "zip64_cd"}


# The safetensors files (<name>.safetensors) and sharded sets (<name>/, a directory) that
# scripts/safetensors_fixtures.py writes, each with its <name>.expected.json. A missing one fails.
SAFETENSORS_FIXTURES = ["st_dtypes", "st_mlx", "st_keys", "st_empty"]
SHARDED_FIXTURES = ["sharded_st", "sharded_bin"]


def model_fixture_path(name):
    """FIXTURES/<name>.safetensors or the directory FIXTURES/<name>; fails when it is missing."""
    path = FIXTURES / name if name in SHARDED_FIXTURES else FIXTURES / f"{name}.safetensors"
    if not path.exists():
        raise AssertionError(f"missing fixture {path} (run scripts/make_fixtures.py)")
    return path


def formats_corpus():
    """The safetensors files and the sharded sets (directories holding an *.index.json) of
    CORPUS/formats, sorted. Its other files (TorchScript) are not read by these tests."""
    d = CORPUS / "formats"
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir()
                  if (p.is_file() and p.name.endswith(".safetensors"))
                  or (p.is_dir() and any(p.glob("*.index.json"))))


def fixture_path(name):
    """FIXTURES/<name>.pth; fails when it is missing."""
    path = FIXTURES / f"{name}.pth"
    if not path.is_file():
        raise AssertionError(f"missing fixture {path} (run scripts/make_fixtures.py)")
    return path


def expected_doc(name):
    """The parsed FIXTURES/<name>.expected.json; fails when it is missing."""
    path = FIXTURES / f"{name}.expected.json"
    if not path.is_file():
        raise AssertionError(f"missing {path} (run scripts/make_fixtures.py)")
    return json.loads(path.read_text(encoding="utf-8"))


def corpus_files():
    """The checkpoints of CORPUS, sorted (PROVENANCE.tsv and hidden files left out)."""
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.iterdir() if p.is_file() and p.name != "PROVENANCE.tsv"
                  and not p.name.startswith("."))


def torchscript_corpus_files():
    """The TorchScript archives of CORPUS/formats/ (*.jit), sorted."""
    formats = CORPUS / "formats"
    return sorted(formats.glob("*.jit")) if formats.is_dir() else []


def assert_random_and_concurrent_reads(case, data, raw, offsets):
    """Reads of file `data` (a member decoded on read: inflated, chunks decompressed) agree with
    `raw`: 4 KiB preads at `offsets`, behind and ahead of each other, then two threads reading
    it whole at once."""
    fd = os.open(data, os.O_RDONLY)
    try:
        for offset in offsets:
            case.assertEqual(os.pread(fd, 4096, offset), raw[offset:offset + 4096], offset)
    finally:
        os.close(fd)
    errors = []

    def read_all():
        try:
            if Path(data).read_bytes() != raw:
                errors.append("a concurrent read differs")
        except OSError as e:
            errors.append(str(e))
    threads = [threading.Thread(target=read_all) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    case.assertEqual(errors, [])


def wait_until(predicate, timeout):
    """Polls `predicate` until it is true or `timeout` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def processes_with_arg(arg):
    """PIDs of the ckptfs processes whose command line has `arg` (e.g. a mountpoint)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.fsencode(str(arg)) in argv and argv[0].endswith(b"ckptfs"):
            pids.append(int(d.name))
    return pids


def syslog_listens():
    """Whether something listens on /dev/log, as ckptfs checks it (datagram, then stream)."""
    import socket
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_UNIX, kind) as s:
            try:
                s.connect("/dev/log")
                return True
            except OSError:
                pass
    return False
