# SPDX-License-Identifier: MIT
"""Integration tests of the ckptfs mount: the real binary mounts fixtures and real checkpoints,
and ordinary tools (open/pread, numpy, rsync, cp, tar, du, find) read the tree.

Run by ctest as `/usr/bin/python3 -m unittest -v tests/integration/test_mount.py` with
    CKPTFS           the ckptfs binary                       (default: build/ckptfs)
    CKPTFS_FIXTURES  output of scripts/make_fixtures.py      (default: build/fixtures)
    CKPTFS_CORPUS    real checkpoints + PROVENANCE.tsv       (default: ../shared/corpus)
Needs Debian's /usr/bin/python3 (torch 1.13, numpy), /dev/fuse and fusermount3.

Every test mounts on a fresh temporary directory and always unmounts, also when it fails
(fusermount3 -u, then -u -z), and then checks in /proc/self/mountinfo that nothing is left
mounted. The oracles: the fixtures' expected.json (sha256 of every tensor's C-order bytes in the
file's byte order), scripts/make_fixtures.py's independent reference reader (bytes for random
reads), `ckptfs inspect --json`, and torch.load (through scripts/ckptfs-verify; which files
torch loads is decided with the same loader, scripts/ckptfs_reference.py's).
"""

import contextlib
import errno
import fnmatch
import gc
import glob
import hashlib
import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

# The reference logic (torch.load with raw object state, the flattening rule, the naming rule,
# numpy descrs) is shared with test_inspect.py, scripts/make_fixtures.py and ckptfs-verify;
# mountinfo and unmounting (ckptfs_mounts) with ckptfs-verify and bench too; make_fixtures.py's
# reference reader gives every tensor's bytes without torch or ckptfs.
import ckptfs_reference as ref  # noqa: E402
import make_fixtures  # noqa: E402
from ckptfs_mounts import (fusermount_u, index_readable, is_mounted, mount_count,  # noqa: E402
                           mount_points, unmount, wait_for_mount)
from ckptfs_reference import (VIEW_FILES, directory_name, entry_names, fnv1a64,  # noqa: E402
                               text_of_json)
from fixtures import (CKPTFS, CORPUS, FIXTURE_NAMES, NOT_TORCH_LOADABLE, REPO,  # noqa: E402
                      corpus_files, expected_doc, fixture_path, needs_corpus,
                      processes_with_arg, torchscript_corpus_files, wait_until)
from test_inspect import inspect_json  # noqa: E402

warnings.filterwarnings("ignore")

VERIFY = REPO / "scripts" / "ckptfs-verify"

MOUNT_TIMEOUT = 20.0    # seconds until index.json must be readable (generous for sanitizers)
EXIT_TIMEOUT = 10.0     # seconds for ckptfs to exit after an unmount or a signal
COMMAND_TIMEOUT = 60.0  # seconds for one tool run (rsync, tar, ckptfs-verify, ...)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


_torch_loadable = {}


def torch_loadable(path):
    """Whether torch 1.13 (with ckptfs_reference's unpickler) loads the file."""
    if path not in _torch_loadable:
        try:
            ref.torch_load(path)
            _torch_loadable[path] = True
        except Exception:  # any failure of the oracle only limits what can be compared
            _torch_loadable[path] = False
    return _torch_loadable[path]


def reference_tensors(path):
    """{key: C-order bytes as stored in the file} from make_fixtures.py's reference reader."""
    _, _, root = make_fixtures.reference_read(path)
    out = {}
    for key, obj in ref.flatten(root, make_fixtures.is_tensor):
        if isinstance(obj, make_fixtures.TensorDesc):
            out[key] = ref.gather(obj.storage_bytes, ref.DTYPE_SIZES[obj.dtype], obj.shape,
                                  obj.stride, obj.offset)
    return out


# --------------------------------------------------------------------------------------------
# Mounting
# --------------------------------------------------------------------------------------------

def force_unmount(path):
    """Unmounts every layer mounted on `path`; lazily when a plain unmount does not work."""
    gc.collect()  # numpy memory maps of tensor.npy keep the file system busy
    unmount(path)


def run(args, timeout=COMMAND_TIMEOUT, **kwargs):
    return subprocess.run([str(a) for a in args], capture_output=True, timeout=timeout, **kwargs)


class MountTestCase(unittest.TestCase):
    """Fresh temporary directories, mounts that are always undone, and a final check."""

    @classmethod
    def setUpClass(cls):
        if not CKPTFS.is_file():
            raise AssertionError(f"ckptfs binary not found at {CKPTFS} (set CKPTFS)")

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="ckptfs-mount-test-")
        self.tmp = Path(tmp.name)
        self.addCleanup(tmp.cleanup)
        self.addCleanup(self._assert_nothing_mounted)

    def _assert_nothing_mounted(self):
        prefix = str(self.tmp) + "/"
        left = [p for p in mount_points() if p.startswith(prefix)]
        for p in left:
            force_unmount(p)
        self.assertEqual(left, [], "mounts were left behind")

    def new_dir(self, name="mnt"):
        return Path(tempfile.mkdtemp(prefix=name + "-", dir=self.tmp))

    def start(self, checkpoint, *options, mnt=None, env=None):
        """`ckptfs -f [options] CHECKPOINT MNT` in the background, without waiting."""
        mnt = mnt or self.new_dir()
        log = open(self.tmp / f"ckptfs-{mnt.name}.log", "w+b")
        self.addCleanup(log.close)
        proc = subprocess.Popen([str(CKPTFS), "-f", *options, str(checkpoint), str(mnt)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, env=env)
        self.addCleanup(self._stop, proc, mnt)
        proc.log = log
        return mnt, proc

    def _stop(self, proc, mnt):
        """Unmounts and ends the ckptfs process: it must exit once unmounted; a stuck or still
        starting one gets SIGTERM (which unmounts), then SIGKILL."""
        force_unmount(mnt)
        try:
            proc.wait(timeout=EXIT_TIMEOUT)
            return
        except subprocess.TimeoutExpired:
            pass
        for action in (proc.terminate, proc.kill):
            action()
            try:
                proc.wait(timeout=EXIT_TIMEOUT / 2)
                break
            except subprocess.TimeoutExpired:
                pass
        force_unmount(mnt)
        self.fail(f"ckptfs (pid {proc.pid}) still ran {EXIT_TIMEOUT:g} s after its unmount")

    @staticmethod
    def output(proc):
        proc.log.seek(0)
        return proc.log.read().decode("utf-8", "replace")

    def mount(self, checkpoint, *options, mnt=None, env=None):
        """Mounts in the foreground mode and waits until index.json is readable."""
        mnt, proc = self.start(checkpoint, *options, mnt=mnt, env=env)
        why = wait_for_mount(mnt, proc, MOUNT_TIMEOUT, index_readable)
        if why == "timed out":
            self.fail(f"{checkpoint}: index.json not readable {MOUNT_TIMEOUT:g} s after "
                      f"starting ckptfs -f")
        if why is not None:
            self.fail(f"ckptfs -f {' '.join(options)} {checkpoint} {why} before the mount was "
                      f"ready: {self.output(proc).strip()}")
        return mnt, proc

    def unmount(self, mnt, proc):
        """fusermount3 -u, which must work and end the ckptfs process with status 0."""
        gc.collect()
        r = fusermount_u(mnt)
        self.assertEqual(r.returncode, 0, f"fusermount3 -u {mnt}: {r.stderr.decode().strip()}")
        self.assertFalse(is_mounted(mnt), f"{mnt} still mounted after fusermount3 -u")
        if proc is not None:
            self.assert_exits_cleanly(proc, "fusermount3 -u")

    def assert_exits_cleanly(self, proc, after):
        """The ckptfs process ends within EXIT_TIMEOUT of `after`, with status 0."""
        try:
            rc = proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"ckptfs did not exit within {EXIT_TIMEOUT:g} s of {after}")
        self.assertEqual(rc, 0, f"ckptfs exit status after {after}: {self.output(proc).strip()}")

    def read_json(self, path):
        return json.loads(Path(path).read_bytes().decode("utf-8"))

    def assert_npy(self, path, descr, shape, digest, where):
        """tensor.npy: a 64-byte aligned NPY header, then the data; np.load agrees (also with
        mmap_mode="r")."""
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(f)
            else:
                np.lib.format.read_array_header_2_0(f)
            offset = f.tell()
        self.assertEqual(offset % 64, 0, f"{where}: npy data offset {offset}")
        if version != (1, 0):
            self.assertGreater(offset, 65535, f"{where}: npy {version} where 1.0 would do")
        for mode in (None, "r"):
            a = np.load(path, mmap_mode=mode, allow_pickle=False)
            try:
                self.assertEqual(a.dtype.str, descr, f"{where}: np.load dtype (mmap {mode})")
                self.assertEqual(a.shape, tuple(shape), f"{where}: np.load shape (mmap {mode})")
                self.assertEqual(sha256(np.ascontiguousarray(a).tobytes()), digest,
                                 f"{where}: np.load bytes (mmap {mode})")
            finally:
                del a
        return offset


# --------------------------------------------------------------------------------------------
# Fixtures and the corpus
# --------------------------------------------------------------------------------------------

class FixtureMountTests(MountTestCase):
    def check_fixture(self, name):
        path, want = fixture_path(name), expected_doc(name)
        mnt, proc = self.mount(path)
        index = self.read_json(views_dir(mnt) / "index.json")
        self.assertEqual(index.get("format"), want["format"], f"{name}: format")
        self.assertEqual(index.get("byteorder"), want["byteorder"], f"{name}: byteorder")
        self.assertEqual(index.get("root", "missing"), want["root"], f"{name}: root")
        entries = index["entries"]
        want_keys = [e["key"] for e in want["entries"]]
        self.assertEqual([e["key"] for e in entries], want_keys, f"{name}: index.json keys")
        self.assertEqual([e["key"] for e in entries],
                         [e["key"] for e in inspect_json(path)["entries"]],
                         f"{name}: index.json keys vs inspect --json")
        tensors = [w for w in want["entries"] if w["kind"] == "tensor"]
        self.assertEqual(index.get("tensors"), len(tensors), f"{name}: tensors")
        self.assertEqual(index.get("values"), len(want_keys) - len(tensors), f"{name}: values")
        self.assertEqual(index.get("total_bytes"), sum(w["nbytes"] for w in tensors),
                         f"{name}: total_bytes")
        self.assertEqual(set(os.listdir(mnt)), {VIEWS_FOLDER} | {e["path"] for e in entries},
                         f"{name}: root listing")
        self.assertEqual(sorted(os.listdir(views_dir(mnt))), sorted(VIEW_FILES),
                         f"{name}: .ckptfs listing")
        # Names are the rule's for the keys themselves (index.json's \udcXX undone).
        for e, w, path_name in zip(entries, want["entries"],
                                   entry_names([text_of_json(k) for k in want_keys])):
            at = f"{name}: {w['key']!r}"
            self.assertEqual(e["path"], path_name, f"{at}: path")
            self.assertEqual(e["kind"], w["kind"], f"{at}: kind")
            self.assertEqual(e.get("key_path"), w.get("key_path"), f"{at}: index.json key_path")
            self.assertEqual(e.get("containers"), w.get("containers"),
                             f"{at}: index.json containers")
            d = mnt / e["path"]
            if w["kind"] == "value":
                self.assertEqual(os.listdir(d), ["value.json"], at)
                value = self.read_json(d / "value.json")
                if "value" in w:
                    self.assertEqual(value, w["value"], f"{at}: value.json")
                continue
            for field in ("dtype", "shape", "nbytes"):
                self.assertEqual(e.get(field), w[field], f"{at}: index.json {field}")
            self.assertEqual(sorted(os.listdir(d)), ["data", "meta.json", "tensor.npy", "tensor.pt"],
                             at)
            meta = self.read_json(d / "meta.json")
            for field in ("key", "dtype", "shape", "stride", "storage_offset", "contiguous",
                          "nbytes", "requires_grad"):
                self.assertEqual(meta.get(field), w[field], f"{at}: meta.json {field}")
            self.assertEqual(meta.get("key_path"), w.get("key_path"), f"{at}: meta.json key_path")
            self.assertEqual(meta.get("containers"), w.get("containers"),
                             f"{at}: meta.json containers")
            self.assertEqual(meta.get("quantization", "missing"), w.get("quantization"),
                             f"{at}: meta.json quantization")
            descr = ref.numpy_descr(w["dtype"], want["byteorder"])
            self.assertIsNotNone(descr, f"{at}: no numpy descr for {w['dtype']}")
            self.assertEqual(meta.get("numpy"), descr, f"{at}: meta.json numpy")
            self.assertEqual(meta.get("byteorder"), want["byteorder"], f"{at}: meta.json")
            self.assertEqual(set(meta.get("shared_with", [None])), set(w["shared_with"]),
                             f"{at}: meta.json shared_with")
            self.assertEqual(meta.get("shared_with_count"), len(w["shared_with"]), at)
            self.assertIsNone(meta.get("broken", "missing"), f"{at}: meta.json broken")
            self.assertIsInstance(meta.get("storage"), dict, f"{at}: meta.json storage")
            st = os.stat(d / "data")
            self.assertEqual(st.st_size, w["nbytes"], f"{at}: data size")
            data = (d / "data").read_bytes()
            self.assertEqual(sha256(data), w["sha256"], f"{at}: data bytes")
            if meta.get("file_offset") is not None:
                with open(path, "rb") as f:
                    raw = os.pread(f.fileno(), w["nbytes"], meta["file_offset"])
                self.assertEqual(raw, data, f"{at}: the checkpoint's bytes at file_offset")
            offset = self.assert_npy(d / "tensor.npy", descr, w["shape"], w["sha256"], at)
            self.assertEqual(os.stat(d / "tensor.npy").st_size, offset + w["nbytes"], at)
        self.unmount(mnt, proc)

    def test_verify_fixtures(self):
        """scripts/ckptfs-verify agrees on every fixture torch 1.13 loads."""
        names = [n for n in FIXTURE_NAMES if n not in NOT_TORCH_LOADABLE]
        r = run([sys.executable, VERIFY, *(fixture_path(n) for n in names)],
                env=dict(os.environ, CKPTFS=str(CKPTFS)))
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, f"ckptfs-verify:\n{out}")
        for n in names:
            self.assertRegex(out, rf"{n}\.pth: \d+ tensors, \d+ values checked: all agree")

    def test_verify_pairs_entries_by_key_path(self):
        """When index.json's keys differ from torch's (here: torch's last entry dropped), the
        verifier pairs the others by key and key path: the int 0 and the str "0" (and every
        other text two keys share) are each checked against their own entry, so what it finds
        is only what differs, never a tensor compared with its namesake's."""
        import contextlib
        import importlib.machinery
        import importlib.util
        import io
        loader = importlib.machinery.SourceFileLoader("ckptfs_verify_module", str(VERIFY))
        verify = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name,
                                                                                 loader))
        loader.exec_module(verify)
        path = fixture_path("collisions")
        root = ref.torch_load(path)
        flat = ref.flatten(root)
        key_paths = ref.key_paths(ref.flatten(root, with_parts=True))
        texts = [k for k, _ in flat]
        self.assertNotIn(texts[-1], texts[:-1])  # the dropped one shares no text
        mnt, proc = self.mount(path)
        checker = verify.Checker(path, mnt)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            checker.run(flat[:-1], key_paths[:-1])
        self.unmount(mnt, proc)
        lines = out.getvalue().splitlines()
        self.assertTrue(any("index.json keys differ from torch.load's" in ln for ln in lines),
                        lines)
        # Problems of the whole (keys, counts, listing), none of an entry.
        self.assertEqual([ln for ln in lines if ln.startswith("  problem: '")], [])
        self.assertEqual(checker.problems, 4, lines)  # keys, tensors, total_bytes, listing


for _name in FIXTURE_NAMES:
    setattr(FixtureMountTests, f"test_fixture_{_name}",
            lambda self, n=_name: self.check_fixture(n))


@needs_corpus
class CorpusMountTests(MountTestCase):
    def test_corpus_present(self):
        self.assertTrue(corpus_files(), f"no checkpoints in {CORPUS} (set CKPTFS_CORPUS)")

    def test_corpus_mounts(self):
        """Every corpus file mounts; index.json agrees with inspect; every data file is
        readable, nbytes long, and holds the elements gathered from the file's storage."""
        for path in corpus_files():
            with self.subTest(path.name):
                mnt, proc = self.mount(path)
                index = self.read_json(views_dir(mnt) / "index.json")
                doc = inspect_json(path)
                self.assertEqual([e["key"] for e in index["entries"]],
                                 [e["key"] for e in doc["entries"]], "keys vs inspect --json")
                self.assertEqual(set(os.listdir(mnt)),
                                 {VIEWS_FOLDER} | {e["path"] for e in index["entries"]})
                with open(path, "rb") as f:
                    for e, g in zip(index["entries"], doc["entries"]):
                        d = mnt / e["path"]
                        if e["kind"] != "tensor" or g.get("broken") is not None:
                            continue
                        st = g["storage"]
                        raw = os.pread(f.fileno(), st["nbytes"], st["file_offset"])
                        want = ref.gather(raw, ref.DTYPE_SIZES[g["dtype"]], g["shape"],
                                          g["stride"], g["storage_offset"])
                        self.assertEqual(os.stat(d / "data").st_size, g["nbytes"], e["key"])
                        self.assertEqual(sha256((d / "data").read_bytes()), sha256(want),
                                         f"{e['key']!r}: data")
                        self.assertEqual(os.stat(d / "tensor.npy").st_size % 64,
                                         g["nbytes"] % 64, f"{e['key']!r}: tensor.npy size")
                self.unmount(mnt, proc)

    def test_torchscript_corpus(self):
        """The real TorchScript archives mount as torchscript, and scripts/ckptfs-verify finds
        every file of the mount as torch.jit.load (and torch's reading of the records) has it."""
        files = torchscript_corpus_files()
        self.assertTrue(files, f"no *.jit in {CORPUS / 'formats'}")
        for path in files:
            with self.subTest(path.name):
                mnt, proc = self.mount(path)
                index = self.read_json(views_dir(mnt) / "index.json")
                self.assertEqual(index["format"], "torchscript")
                self.assertEqual(index["tensors"], len(index["entries"]))
                self.unmount(mnt, proc)
        r = run([sys.executable, VERIFY, *files], env=dict(os.environ, CKPTFS=str(CKPTFS)))
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, f"ckptfs-verify:\n{out}")
        for path in files:
            self.assertRegex(out, rf"{path.name}: \d+ tensors, 0 values checked: all agree")

    def test_verify_corpus(self):
        """scripts/ckptfs-verify agrees on every corpus file torch 1.13 loads."""
        loadable = [p for p in corpus_files() if torch_loadable(p)]
        self.assertTrue(loadable, "torch loads no corpus file")
        r = run([sys.executable, VERIFY, *loadable], env=dict(os.environ, CKPTFS=str(CKPTFS)))
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, f"ckptfs-verify:\n{out}")


# --------------------------------------------------------------------------------------------
# Reads
# --------------------------------------------------------------------------------------------

class ReadTests(MountTestCase):
    def random_reads(self, path, full, boundary, rng, where, count=200):
        """`count` preads of random (offset, length), some across `boundary` and past the end."""
        size = len(full)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.assertEqual(os.fstat(fd).st_size, size, f"{where}: size")
            for i in range(count):
                kind = i % 4
                if kind == 0:  # across the boundary (the npy header's end)
                    offset = max(0, boundary - rng.randint(1, 100))
                    length = rng.randint(1, 300)
                elif kind == 1:  # small, anywhere
                    offset = rng.randint(0, size)
                    length = rng.randint(0, 64)
                elif kind == 2:  # large
                    offset = rng.randint(0, size)
                    length = rng.randint(1, max(1, min(size, 300_000)))
                else:  # near or past the end
                    offset = max(0, size - rng.randint(0, 200))
                    length = rng.randint(1, 400)
                got = os.pread(fd, length, offset)
                if got != full[offset:offset + length]:
                    self.fail(f"{where}: pread({length}, {offset}) differs from the expected "
                              f"bytes (read {len(got)} bytes)")
        finally:
            os.close(fd)

    def concurrent_reads(self, path, full, rng, where, threads=4, reads=50):
        seeds = [rng.random() for _ in range(threads)]
        errors = []

        def worker(seed):
            r = random.Random(seed)
            try:
                fd = os.open(path, os.O_RDONLY)
                try:
                    for _ in range(reads):
                        offset = r.randint(0, len(full))
                        length = r.randint(1, 200_000)
                        if os.pread(fd, length, offset) != full[offset:offset + length]:
                            errors.append((offset, length))
                finally:
                    os.close(fd)
            except OSError as e:
                errors.append(e)

        workers = [threading.Thread(target=worker, args=(s,)) for s in seeds]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=COMMAND_TIMEOUT)
        self.assertEqual(errors, [], f"{where}: concurrent preads differ")

    def check_tensor_reads(self, mnt, key, want_data, rng, where):
        d = mnt / directory_name(key)
        self.random_reads(d / "data", want_data, len(want_data) // 2, rng, f"{where} data")
        npy = (d / "tensor.npy").read_bytes()
        header_len = len(npy) - len(want_data)
        self.assertGreater(header_len, 0, f"{where}: tensor.npy")
        self.assertEqual(header_len % 64, 0, f"{where}: tensor.npy header")
        meta = self.read_json(d / "meta.json")
        # The header is checked by numpy; the rest must be the expected bytes.
        header = npy[:header_len]
        with open(d / "tensor.npy", "rb") as f:
            np.lib.format.read_magic(f)
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        self.assertEqual((list(shape), fortran, dtype.str),
                         (meta["shape"], False, meta["numpy"]), f"{where}: npy header")
        self.random_reads(d / "tensor.npy", header + want_data, header_len, rng,
                          f"{where} tensor.npy")
        return header + want_data

    def test_random_reads_fixtures(self):
        rng = random.Random(20240601)
        picks = {
            "views": ["transposed", "cols3", "permuted", "step2", "expanded", "channels_last",
                      "halves.bottom", "tiny_of_big", "elem", "full"],
            "dtypes": ["complex128.nd", "bool.nd", "bfloat16.vec"],
            "bigendian": None,  # its first three tensors
            "legacy": ["w_t", "slice"],
            "new_dtypes": ["uint64.t", "complex32.tail"],
        }
        for name, keys in picks.items():
            path = fixture_path(name)
            ref = reference_tensors(path)
            want = {w["key"]: w for w in expected_doc(name)["entries"] if w["kind"] == "tensor"}
            keys = keys or list(want)[:3]
            mnt, proc = self.mount(path)
            for key in keys:
                with self.subTest(f"{name}: {key}"):
                    self.assertEqual(sha256(ref[key]), want[key]["sha256"], "reference reader")
                    self.check_tensor_reads(mnt, key, ref[key], rng, f"{name}: {key!r}")
            self.unmount(mnt, proc)

    def test_random_reads_large(self):
        """Tensors of megabytes, strided and contiguous: reads larger than FUSE's max_read,
        from several threads at once."""
        gen = torch.Generator().manual_seed(7)
        big = {
            "transposed": torch.randn(700, 900, generator=gen).t(),
            "strided": torch.randn(1000, 999, generator=gen)[::2, 1::3],
            "ints": torch.arange(1 << 20, dtype=torch.int64),
        }
        path = self.tmp / "large.pth"
        torch.save(big, path)
        rng = random.Random(99)
        mnt, proc = self.mount(path)
        for key, t in big.items():
            with self.subTest(key):
                data = t.contiguous().numpy().tobytes()
                full = self.check_tensor_reads(mnt, key, data, rng, key)
                d = mnt / directory_name(key)
                self.assertEqual(sha256((d / "data").read_bytes()), sha256(data), key)
                self.concurrent_reads(d / "tensor.npy", full, rng, key)
        self.unmount(mnt, proc)

    def test_inodes_stable(self):
        path = fixture_path("views")

        def inodes(mnt):
            out = {}
            for dirpath, dirnames, filenames in os.walk(mnt):
                for n in dirnames + filenames:
                    p = os.path.join(dirpath, n)
                    out[os.path.relpath(p, mnt)] = os.stat(p).st_ino
            return out

        mnt, proc = self.mount(path)
        first = inodes(mnt)
        self.assertEqual(first, inodes(mnt), "inode numbers changed between two walks")
        self.assertEqual(len(set(first.values())), len(first), "inode numbers are not unique")
        self.unmount(mnt, proc)
        mnt2, proc2 = self.mount(path)
        self.assertEqual(inodes(mnt2), first, "inode numbers changed across a remount")
        self.unmount(mnt2, proc2)


# --------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------

class ToolTests(MountTestCase):
    def tree(self, root):
        """{relative path: bytes or None for directories}."""
        out = {}
        for dirpath, dirnames, filenames in os.walk(root):
            for n in dirnames:
                out[os.path.relpath(os.path.join(dirpath, n), root)] = None
            for n in filenames:
                p = os.path.join(dirpath, n)
                out[os.path.relpath(p, root)] = Path(p).read_bytes()
        return out

    def test_tools(self):
        name = "training"
        path, want = fixture_path(name), expected_doc(name)
        mnt, proc = self.mount(path)
        names = [directory_name(w["key"]) for w in want["entries"]]
        n_files = len(VIEW_FILES) + sum(4 if w["kind"] == "tensor" else 1 for w in want["entries"])

        with self.subTest("glob"):
            for pattern in ("model.bn1.*", "optimizer.state.*.exp_avg", "*.running_var"):
                got = sorted(os.path.basename(p) for p in glob.glob(str(mnt / pattern)))
                self.assertEqual(got, sorted(fnmatch.filter(names, pattern)), pattern)
                self.assertTrue(got, pattern)
            self.assertEqual(sorted(glob.glob(str(mnt / "model.fc.weight" / "*"))),
                             [str(mnt / "model.fc.weight" / n)
                              for n in ("data", "meta.json", "tensor.npy", "tensor.pt")])

        reference = self.tree(mnt)
        self.assertEqual(sum(1 for v in reference.values() if v is not None), n_files)

        with self.subTest("find"):
            r = run(["find", mnt, "-type", "f"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(len(r.stdout.splitlines()), n_files, "find MNT -type f | wc -l")

        with self.subTest("du"):
            total = sum(len(v) for v in reference.values() if v is not None)
            r = run(["du", "-sb", mnt])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(int(r.stdout.split()[0]), total, "du -sb")
            r = run(["du", "-sk", mnt])
            self.assertGreaterEqual(int(r.stdout.split()[0]) * 1024, total, "du -sk")
            for rel, v in reference.items():
                if v:
                    self.assertGreater(os.stat(mnt / rel).st_blocks, 0, f"{rel}: st_blocks")

        with self.subTest("rsync"):
            dest = self.new_dir("rsync")
            r = run(["rsync", "-a", f"{mnt}/", f"{dest}/"])
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            self.assertEqual(self.tree(dest), reference, "rsync -a copy")
            r = run(["rsync", "-a", "--itemize-changes", f"{mnt}/", f"{dest}/"])
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            self.assertEqual(r.stdout.decode(errors="replace"), "",
                             "a second rsync -a transfers something")
            r = run(["rsync", "-a", "--stats", f"{mnt}/", f"{dest}/"])
            self.assertRegex(r.stdout.decode(), r"Number of regular files transferred: 0\b")

        with self.subTest("cp"):
            dest = self.new_dir("cp") / "copy"
            r = run(["cp", "-r", mnt, dest])
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            self.assertEqual(self.tree(dest), reference, "cp -r copy")

        with self.subTest("tar"):
            archive = self.tmp / "mnt.tar"
            r = run(["tar", "cf", archive, "-C", mnt, "."])
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            with tarfile.open(archive) as tf:
                got = {}
                for m in tf.getmembers():
                    rel = os.path.normpath(m.name)
                    if rel == ".":
                        continue
                    got[rel] = tf.extractfile(m).read() if m.isfile() else None
            self.assertEqual(got, reference, "tar cf archive")
        self.unmount(mnt, proc)


# --------------------------------------------------------------------------------------------
# Attributes and read-only-ness
# --------------------------------------------------------------------------------------------

class AttributeTests(MountTestCase):
    def all_nodes(self, mnt):
        nodes = [mnt]
        for dirpath, dirnames, filenames in os.walk(mnt):
            nodes += [Path(dirpath) / n for n in dirnames + filenames]
        return nodes

    def check_modes(self, mnt, checkpoint, file_mode, dir_mode, uid, gid):
        src = os.stat(checkpoint)
        for p in self.all_nodes(mnt):
            st = os.stat(p)
            at = str(p.relative_to(mnt))
            if stat.S_ISDIR(st.st_mode):
                self.assertEqual(stat.S_IMODE(st.st_mode), dir_mode, f"{at}: mode")
            else:
                self.assertTrue(stat.S_ISREG(st.st_mode), f"{at}: not a regular file")
                self.assertEqual(stat.S_IMODE(st.st_mode), file_mode, f"{at}: mode")
            self.assertEqual((st.st_uid, st.st_gid), (uid, gid), f"{at}: owner")
            self.assertEqual(st.st_mtime_ns, src.st_mtime_ns, f"{at}: mtime")
            self.assertEqual(st.st_ctime_ns, src.st_ctime_ns, f"{at}: ctime")

    def test_default_modes_and_times(self):
        """The modes follow the checkpoint's (test_tree.ModeTests has the other cases)."""
        path = self.tmp / "convnet.pth"
        path.write_bytes(fixture_path("convnet").read_bytes())
        os.chmod(path, 0o644)
        os.utime(path, ns=(1_600_000_000_123_456_789, 1_500_000_000_987_654_321))
        mnt, proc = self.mount(path)
        self.check_modes(mnt, path, 0o644, 0o755, os.getuid(), os.getgid())
        self.unmount(mnt, proc)

    def test_umask_uid_gid(self):
        path = fixture_path("convnet")
        mnt, proc = self.mount(path, "-o", "umask=027,uid=1234,gid=5678")
        self.check_modes(mnt, path, 0o640, 0o750, 1234, 5678)
        self.unmount(mnt, proc)

    def test_writes_refused(self):
        path = fixture_path("convnet")
        mnt, proc = self.mount(path)
        d = mnt / directory_name("conv1.weight")
        data, index = d / "data", views_dir(mnt) / "index.json"
        before = self.tree_digest(mnt)
        attempts = {
            "open r+b": lambda: open(data, "r+b").close(),
            "open O_WRONLY": lambda: os.close(os.open(data, os.O_WRONLY)),
            "open O_RDWR": lambda: os.close(os.open(data, os.O_RDWR)),
            "open O_WRONLY|O_TRUNC": lambda: os.close(os.open(index, os.O_WRONLY | os.O_TRUNC)),
            "open O_APPEND": lambda: os.close(os.open(data, os.O_WRONLY | os.O_APPEND)),
            "create in root": lambda: os.close(os.open(mnt / "new", os.O_CREAT | os.O_WRONLY,
                                                       0o644)),
            "create in entry": lambda: os.close(os.open(d / "new", os.O_CREAT | os.O_RDWR,
                                                        0o644)),
            "create existing": lambda: os.close(os.open(data, os.O_CREAT | os.O_WRONLY, 0o644)),
            "mkdir in root": lambda: os.mkdir(mnt / "newdir"),
            "mkdir in entry": lambda: os.mkdir(d / "newdir"),
            "symlink": lambda: os.symlink("data", d / "link"),
            "unlink data": lambda: os.unlink(data),
            "unlink index.json": lambda: os.unlink(index),
            "rmdir entry": lambda: os.rmdir(d),
            "rename file": lambda: os.rename(data, d / "data2"),
            "rename dir": lambda: os.rename(d, mnt / "renamed"),
            "truncate data": lambda: os.truncate(data, 0),
            "truncate index.json": lambda: os.truncate(index, 10),
            "chmod file": lambda: os.chmod(data, 0o644),
            "chmod dir": lambda: os.chmod(d, 0o777),
            "chmod root": lambda: os.chmod(mnt, 0o777),
        }
        for what, attempt in attempts.items():
            with self.subTest(what):
                with self.assertRaises(OSError) as cm:
                    attempt()
                self.assertIn(cm.exception.errno, (errno.EROFS, errno.EACCES),
                              f"{what}: {cm.exception}")
        self.assertEqual(self.tree_digest(mnt), before, "the tree changed")
        self.unmount(mnt, proc)

    def tree_digest(self, mnt):
        out = {}
        for p in self.all_nodes(mnt):
            st = os.stat(p)
            out[str(p)] = (st.st_mode, st.st_size,
                           sha256(p.read_bytes()) if stat.S_ISREG(st.st_mode) else None)
        return out


# --------------------------------------------------------------------------------------------
# The process: signals, daemon mode, errors
# --------------------------------------------------------------------------------------------

class ProcessTests(MountTestCase):
    def check_signal(self, signum, *options, checkpoint="bare", busy=False):
        """The signal unmounts and ends ckptfs -f with status 0; with `busy`, while threads
        read (one serving thread polling, others asleep or answering)."""
        mnt, proc = self.mount(fixture_path(checkpoint), *options)
        files = sorted(p for p in mnt.rglob("*") if p.is_file()) if busy else []
        with concurrent_readers(files, threads=4 if busy else 0):
            if busy:
                time.sleep(0.5)
            proc.send_signal(signum)
            self.assert_exits_cleanly(proc, signal.Signals(signum).name)
        self.assertFalse(is_mounted(mnt), f"still mounted after {signal.Signals(signum).name}")

    def test_sigterm(self):
        self.check_signal(signal.SIGTERM)

    def test_sigint(self):
        self.check_signal(signal.SIGINT)

    def test_sigterm_while_busy(self):
        self.check_signal(signal.SIGTERM, "-o", "busy_poll_us=100000", checkpoint="views",
                          busy=True)

    def test_fusermount_ends_foreground(self):
        mnt, proc = self.mount(fixture_path("bare"))
        self.unmount(mnt, proc)

    def test_daemon_mode(self):
        """Without -f: returns once mounted, the tree is readable at once, fusermount3 -u
        unmounts and the daemon exits."""
        path, mnt = fixture_path("convnet"), self.new_dir()
        self.addCleanup(force_unmount, mnt)
        try:
            r = run([CKPTFS, path, mnt], timeout=MOUNT_TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            self.fail("ckptfs without -f did not return (or its daemon kept stdout/stderr open)")
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertEqual(r.stderr, b"", "ckptfs printed on stderr")
        self.assertTrue(is_mounted(mnt), "not mounted when ckptfs returned")
        index = self.read_json(views_dir(mnt) / "index.json")
        self.assertEqual(index["tensors"], 16)
        daemons = processes_with_arg(mnt)
        self.assertTrue(daemons, "no ckptfs daemon serves the mount")
        self.unmount(mnt, None)
        self.assertTrue(wait_until(lambda: not processes_with_arg(mnt), EXIT_TIMEOUT),
                        f"the daemon (pid {daemons}) still runs after fusermount3 -u")

    def run_rejected(self, args, codes, where):
        """A failing ckptfs: one line on stderr starting 'ckptfs: ', an exit status in `codes`,
        nothing mounted and no daemon left."""
        mnt = Path(args[-1])
        before = mount_count(mnt) if mnt.exists() else 0
        serving = set(processes_with_arg(mnt))  # an earlier mount's ckptfs may serve `mnt`
        try:
            r = run([CKPTFS, *args], timeout=MOUNT_TIMEOUT, stdin=subprocess.DEVNULL)
        finally:
            if mnt.exists():
                # Whatever a wrongly successful run mounted on top must go (the original stays).
                while mount_count(mnt) > before:
                    if fusermount_u(mnt, lazy=True).returncode != 0:
                        break
        err = r.stderr.decode("utf-8", "replace")
        self.assertNotEqual(r.returncode, 0, f"{where}: exit 0, stderr {err!r}")
        self.assertIn(r.returncode, codes, f"{where}: exit status, stderr {err!r}")
        lines = err.rstrip("\n").split("\n")
        self.assertEqual(len(lines), 1, f"{where}: want one line on stderr, got {err!r}")
        self.assertTrue(lines[0].startswith("ckptfs: ") and len(lines[0]) > 8,
                        f"{where}: stderr {err!r}")
        self.assertEqual(mount_count(mnt) if mnt.exists() else 0, before,
                         f"{where}: something was mounted")
        self.assertEqual(set(processes_with_arg(mnt)) - serving, set(),
                         f"{where}: a ckptfs process was left")

    def test_bad_checkpoints(self):
        convnet = fixture_path("convnet").read_bytes()
        rng = random.Random(5)
        cases = {
            "empty": b"",
            "random": bytes(rng.randrange(256) for _ in range(4096)),
            "truncated": convnet[:len(convnet) // 2],
        }
        for what, data in cases.items():
            path = self.tmp / f"{what}.pth"
            path.write_bytes(data)
            for foreground in ([], ["-f"]):
                with self.subTest(what, foreground=foreground):
                    self.run_rejected([*foreground, path, self.new_dir()], {2, 3, 4, 5},
                                      f"{what} checkpoint")
        with self.subTest("missing checkpoint"):
            self.run_rejected([self.tmp / "no-such.pth", self.new_dir()], {2}, "missing file")

    def test_bad_mountpoints(self):
        path = fixture_path("convnet")
        a_file = self.tmp / "a-file"
        a_file.write_bytes(b"x")
        with self.subTest("missing directory"):
            self.run_rejected([path, self.tmp / "no-such-dir"], {6}, "missing mountpoint")
        with self.subTest("a file"):
            self.run_rejected([path, a_file], {6}, "a file as mountpoint")
            self.assertEqual(a_file.read_bytes(), b"x")
        with self.subTest("already mounted"):
            mnt, proc = self.mount(fixture_path("bare"))
            for foreground in ([], ["-f"]):
                self.run_rejected([*foreground, path, mnt], {6}, "an already mounted mountpoint")
            self.assertEqual(self.read_json(views_dir(mnt) / "index.json")["tensors"], 1,
                             "the first mount was disturbed")
            self.unmount(mnt, proc)


# --------------------------------------------------------------------------------------------
# Serving: readahead, busy polling
# --------------------------------------------------------------------------------------------

@contextlib.contextmanager
def concurrent_readers(files, threads=4):
    """Threads reading whole files over and over, comparing their bytes with a first read, while
    the block runs; yields the list of their errors (a failed read ends its thread). They are
    stopped and joined when the block ends."""
    expected = {f: f.read_bytes() for f in files}
    stop, errors = threading.Event(), []

    def reader(first):
        i = first
        while not stop.is_set():
            f = files[i % len(files)]
            i += 1
            try:
                if f.read_bytes() != expected[f]:
                    errors.append(f"{f}: wrong bytes")
            except OSError as e:
                if not stop.is_set():
                    errors.append(f"{f}: {e}")
                return
    running = [threading.Thread(target=reader, args=(k,)) for k in range(threads)]
    for t in running:
        t.start()
    try:
        yield errors
    finally:
        stop.set()
        for t in running:
            t.join()


def mount_read_ahead_kb(mnt):
    dev = os.stat(mnt).st_dev
    return int(Path(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb").read_text())


class ServingTests(MountTestCase):
    @unittest.skipUnless(os.geteuid() == 0, "only root may set a mount's readahead")
    def test_read_ahead_kb(self):
        """Raised to 512 KiB by default, set to what -o read_ahead_kb asks, the kernel's own
        (128 KiB for FUSE) with 0; set again by every mount, whatever the device number."""
        for options, expected in (((), 512), (("-o", "read_ahead_kb=1024"), 1024),
                                  (("-o", "read_ahead_kb=0"), 128)):
            with self.subTest(options=options):
                mnt, proc = self.mount(fixture_path("convnet"), *options)
                self.assertEqual(mount_read_ahead_kb(mnt), expected)
                self.unmount(mnt, proc)

    def test_bad_values_are_usage_errors(self):
        for option in ("read_ahead_kb=-1", "read_ahead_kb=1048577", "read_ahead_kb=1k",
                       "busy_poll_us=", "busy_poll_us=1000001", "busy_poll_us=0x10"):
            with self.subTest(option):
                r = run([CKPTFS, "-o", option, fixture_path("convnet"), self.new_dir()])
                err = r.stderr.decode(errors="replace")
                self.assertEqual(r.returncode, 1, err)
                self.assertIn(option.split("=")[0], err)

    def test_busy_poll_settings_serve_the_same_bytes(self):
        """With polling off, short and long, many readers at once get the right bytes."""
        for value in ("0", "1", "200", "100000"):
            with self.subTest(busy_poll_us=value):
                mnt, proc = self.mount(fixture_path("views"), "-o", f"busy_poll_us={value}")
                with concurrent_readers(sorted(p for p in mnt.rglob("*") if p.is_file())) as errors:
                    time.sleep(1.0)
                self.assertEqual(errors, [])
                self.unmount(mnt, proc)

    def test_first_open_fills_the_page_cache(self):
        """The first open of a file stores its first 64 KiB in the kernel's page cache: reading
        a small file then sends no READ (libfuse's debug log lists every request)."""
        mnt, proc = self.mount(fixture_path("convnet"), "-d")
        d = mnt / directory_name("conv1.bias")
        small = [d / "tensor.npy", d / "meta.json"]
        expected = [p.stat().st_size for p in small]
        inodes = [p.stat().st_ino for p in small]
        for p, size in zip(small, expected):
            self.assertEqual(len(p.read_bytes()), size)
        self.unmount(mnt, proc)
        log = self.output(proc)
        for ino in inodes:
            self.assertRegex(log, rf"opcode: OPEN \(14\), nodeid: {ino},")
            self.assertNotRegex(log, rf"opcode: READ \(15\), nodeid: {ino},")

    def test_listing_leaves_whole_model_files_to_their_lookup(self):
        """A listing does not count the files made from every entry (.ckptfs's index.json and
        model.safetensors, the RFC layout's map.pt at the root): it gives their names and types
        only, and the kernel looks each up when it is stat'ed, with the size its bytes have."""
        cases = [((), VIEWS_FOLDER, ["index.json", "model.safetensors"]),
                 (("-o", "layout=rfc"), ".", ["map.pt"]),
                 (("-o", "layout=rfc"), VIEWS_FOLDER, ["index.json"])]
        for options, folder, names in cases:
            with self.subTest(options=options, folder=folder):
                mnt = self.new_dir()
                where = mnt / folder
                # Without waiting for index.json: nothing reads a view before the listing.
                mnt, proc = self.start(fixture_path("convnet"), "-d", *options, mnt=mnt)
                why = wait_for_mount(mnt, proc, MOUNT_TIMEOUT)
                self.assertIsNone(why, self.output(proc))
                parent = os.stat(where).st_ino if folder != "." else 1
                listed = os.listdir(where)
                for name in names:
                    self.assertIn(name, listed)
                sizes = [(where / name).stat().st_size for name in names]
                self.assertEqual(sizes, [len((where / name).read_bytes()) for name in names])
                self.unmount(mnt, proc)
                lookups = re.findall(rf"opcode: LOOKUP \(1\), nodeid: {parent},", self.output(proc))
                self.assertEqual(len(lookups), len(names), "one LOOKUP per file stat'ed")



# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------

class NameTests(MountTestCase):
    def test_naming_rule_examples(self):
        """The rule as the tests compute it (no binary involved)."""
        self.assertEqual(directory_name("a/b"), "a%2Fb")
        self.assertEqual(directory_name("100%"), "100%25")
        self.assertEqual(directory_name(""), "%")
        self.assertEqual(directory_name("."), "%.")
        self.assertEqual(directory_name(".."), "%..")
        self.assertEqual(directory_name(".ckptfs"), "%.ckptfs")
        self.assertEqual(directory_name(".hidden"), "%.hidden")
        self.assertEqual(directory_name("index.json"), "%index.json")
        self.assertEqual(directory_name("x\0y"), "x%00y")
        self.assertEqual(directory_name("index.json.x"), "index.json.x")
        for root_name in ("map", "model.safetensors", "model.safetensors.index.json",
                          "model-00001-of-00004.safetensors"):
            self.assertEqual(directory_name(root_name), "%" + root_name)
        long = directory_name("k" * 300)
        self.assertEqual(long, "k" * 200 + "%~" + f"{fnv1a64(b'k' * 300):016x}")
        self.assertEqual(len(directory_name("k" * 255).encode()), 255)
        # A cut never splits an escape nor a UTF-8 sequence.
        cut = directory_name("k" * 199 + "/" * 40)
        self.assertTrue(cut.startswith("k" * 199 + "%~"), cut)
        cut = directory_name("k" * 199 + "层" * 40)
        self.assertTrue(cut.startswith("k" * 199 + "%~"), cut)
        # Keys with the same text: the first has the rule's name, the others %#N after it; a
        # literal key never loses its name to a suffixed one.
        self.assertEqual(entry_names(["a.b", "a.b", "a.b#2", "a.b"]),
                         ["a.b", "a.b%#2", "a.b#2", "a.b%#3"])
        self.assertTrue(all(len(directory_name(k * n).encode()) <= 255
                            for k in ("a", "%", "层", "🔥") for n in range(60, 300, 7)))

    def test_collisions_fixture(self):
        """The issue's case: {0: A, "0": B, b"x": C, "x": D, (1, 2): E, "(1, 2)": F, None: G,
        "None": H, ...}: every tensor is reachable, each under the name the rule gives it, and
        index.json says which Python key each came from."""
        name = "collisions"
        want = expected_doc(name)
        mnt, proc = self.mount(fixture_path(name))
        index = self.read_json(views_dir(mnt) / "index.json")
        keys = [w["key"] for w in want["entries"]]
        names = entry_names(keys)
        self.assertEqual(len(index["entries"]), len(want["entries"]), "an entry was lost")
        self.assertEqual([e["path"] for e in index["entries"]], names)
        self.assertEqual(sorted(os.listdir(mnt)), sorted([VIEWS_FOLDER, *names]), "listing")
        by_name = dict(zip(names, want["entries"]))
        self.assertEqual(by_name["0"]["key_path"], [0])
        self.assertEqual(by_name["0%#2"]["key_path"], ["0"])
        # The second "a.b" is the third of its text: "a.b%#2" is a key of its own, which pack
        # writes as it is (docs/NAMES.md).
        self.assertEqual(by_name["a.b%#3"]["key_path"], ["a", "b"])
        # Literal keys that look like suffixed, cut or root names keep the rule's name.
        for literal in ("a.b#2", "a.b%#2", "map", "model.safetensors", "k" * 300):
            self.assertIn(directory_name(literal), names, literal)
        self.assertEqual(directory_name("a.b%#2"), "a.b%25#2")
        self.assertEqual(directory_name("map"), "%map")
        for w, n in zip(want["entries"], names):
            if w["kind"] != "tensor":
                continue
            meta = self.read_json(mnt / n / "meta.json")
            self.assertEqual(meta["key"], w["key"], n)
            self.assertEqual(meta.get("key_path"), w.get("key_path"), n)
            self.assertEqual(sha256((mnt / n / "data").read_bytes()), w["sha256"], n)
        self.unmount(mnt, proc)

    def test_keys_fixture(self):
        name = "keys"
        want = expected_doc(name)
        mnt, proc = self.mount(fixture_path(name))
        index = self.read_json(views_dir(mnt) / "index.json")
        keys = [w["key"] for w in want["entries"]]
        names = [directory_name(text_of_json(k)) for k in keys]
        self.assertEqual(len(set(names)), len(names), "the expected names collide")
        self.assertEqual({e["key"]: e["path"] for e in index["entries"]}, dict(zip(keys, names)),
                         "index.json key -> path")
        self.assertEqual(sorted(os.listdir(mnt)), sorted([VIEWS_FOLDER, *names]), "listing")
        for w, n in zip(want["entries"], names):
            with self.subTest(w["key"]):
                self.assertLessEqual(len(os.fsencode(n)), 255)
                d = mnt / n
                self.assertTrue(d.is_dir(), f"{n!r} is not a directory")
                if w["kind"] == "tensor":
                    self.assertEqual(self.read_json(d / "meta.json")["key"], w["key"])
                    self.assertEqual(sha256((d / "data").read_bytes()), w["sha256"])
                else:
                    self.assertEqual(self.read_json(d / "value.json"), w["value"])
        self.assertIn("k" * 200 + "%~" + f"{fnv1a64(b'k' * 300):016x}", os.listdir(mnt))
        for n in ("%", "%.", "%..", "%.ckptfs", "%.hidden.weight", "%index.json", "a%2Fb",
                  "100%25", "nested.x%2Fy"):
            self.assertTrue((mnt / n).is_dir(), n)
        self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
