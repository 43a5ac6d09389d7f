# SPDX-License-Identifier: MIT
"""Hostile checkpoints: each built here at test time, each with its expected outcome.

Either a clear one-line error (`ckptfs: FILE: what`), the documented exit code, and nothing
mounted, or a safe mount where the bad part is marked broken and the rest is served. Every case
runs `ckptfs inspect` (and the failing ones also the mount) under a time bound, and measures the
peak RSS of inspect (os.wait4): no crash, no hang, bounded memory. Pickles that call os.system,
eval or exec must run nothing: a marker file is never created.

Run by ctest as `/usr/bin/python3 -m unittest -v test_hostile` with CKPTFS, CKPTFS_FIXTURES and
CKPTFS_CORPUS (see fixtures.py). The sanitizer build runs the same tests against its binary
(the bounds grow for ASan's shadow memory and slower code).
"""

import errno
import io
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import make_fixtures  # noqa: E402
from ckptfs_mounts import is_mounted  # noqa: E402
from fixtures import CKPTFS, expected_doc, fixture_path  # noqa: E402
from make_fixtures import PID, G, PickleAsm, R, ordered_dict  # noqa: E402
from test_mount import MountTestCase  # noqa: E402


def sanitized():
    """Whether CKPTFS was built with AddressSanitizer (the sanitizer suite)."""
    try:
        return b"__asan_init" in CKPTFS.read_bytes()
    except OSError:
        return False


SANITIZED = sanitized()
SLOWDOWN = 3 if SANITIZED else 1
TIME_LIMIT = 10.0 * SLOWDOWN        # seconds for one inspect or one failing mount
RSS_LIMIT_MB = 128 * SLOWDOWN       # peak RSS of inspect on a small hostile file
EXIT = {"io": 2, "zip": 3, "checkpoint": 4, "unsupported": 5}


# --------------------------------------------------------------------------------------------
# Builders: zip archives that lie, pickles that call things, torch-like checkpoints
# --------------------------------------------------------------------------------------------

def build_zip(entries, *, count=None, cd_offset=None, cd_size=None, zip64=False):
    """A stored zip. `entries`: dicts with name, data and optional lies: header_offset, size
    (both sizes), method, local_name (the local header's name). count, cd_offset and cd_size lie
    in the end records. Payloads are aligned to 64 like torch's writer."""
    out = bytearray()
    central = []
    for e in entries:
        name = e["name"].encode()
        data = e.get("data", b"")
        local_name = e.get("local_name", e["name"]).encode()
        lho = len(out)
        pad = (-(lho + 30 + len(local_name) + 4)) % 64
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        crc = zlib.crc32(data)
        size = e.get("size", len(data))
        method = e.get("method", 0)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, size, size,
                           len(local_name), len(extra))
        out += local_name + extra + data
        central.append((name, method, crc, size, e.get("header_offset", lho)))
    cd_at = len(out)
    for name, method, crc, size, lho in central:
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0, crc, size,
                           size, len(name), 0, 0, 0, 0, 0, lho)
        out += name
    real_size = len(out) - cd_at
    n = len(central) if count is None else count
    size = real_size if cd_size is None else cd_size
    offset = cd_at if cd_offset is None else cd_offset
    if zip64:
        z64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, size, offset)
        out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                           0xFFFFFFFF, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n & 0xFFFF, n & 0xFFFF, size,
                           offset & 0xFFFFFFFF, 0)
    return bytes(out)


def v2(key, numel, shape, stride=None, offset=0, storage="FloatStorage"):
    """torch._utils._rebuild_tensor_v2 of storage `key` (numel elements)."""
    if stride is None:
        stride, step = [], 1
        for d in reversed(shape):
            stride.insert(0, step)
            step *= d
    pid = PID(("storage", G("torch", storage), key, "cpu", numel))
    return R(G("torch._utils", "_rebuild_tensor_v2"),
             (pid, offset, tuple(shape), tuple(stride), False, ordered_dict()))


def assert_read_fails(test, path):
    """Opening and reading `path` fails with EIO (a broken tensor's files: never empty, never
    missing)."""
    with test.assertRaises(OSError, msg=str(path)) as caught:
        with open(path, "rb") as f:
            f.read()
    test.assertEqual(caught.exception.errno, errno.EIO, f"{path}: {caught.exception}")


BROKEN_FILES = ["data", "meta.json", "tensor.npy", "tensor.pt"]  # as a sound tensor's


def floats(n, start=0):
    return struct.pack(f"<{n}f", *range(start, start + n))


def checkpoint(pkl, storages, prefix="archive", **zip_lies):
    """A torch-layout zip: data.pkl, data/<key>..., version."""
    entries = [{"name": f"{prefix}/data.pkl", "data": pkl}]
    entries += [{"name": f"{prefix}/data/{k}", "data": d} for k, d in storages.items()]
    entries.append({"name": f"{prefix}/version", "data": b"3\n"})
    return build_zip(entries, **zip_lies)


def good_checkpoint():
    """{"w": 3x4 float32, "b": 5 float32, "t": w transposed, "step": 7}, bytes exact."""
    pkl = PickleAsm().dump({"w": v2("0", 12, (3, 4)), "b": v2("1", 5, (5,)),
                            "t": v2("0", 12, (4, 3), (1, 4)), "step": 7})
    return checkpoint(pkl, {"0": floats(12), "1": floats(5, 100)})


def zip_with_pickle(pkl):
    return checkpoint(pkl, {})


# --------------------------------------------------------------------------------------------
# Running ckptfs with a time limit and a peak RSS
# --------------------------------------------------------------------------------------------

class Run:
    def __init__(self, returncode, stdout, stderr, seconds, peak_mb):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.seconds, self.peak_mb = seconds, peak_mb


# Forks and execs the command, then reports its peak RSS (KiB) from wait4. A child of this test
# would report at least the RSS of the test process itself (a forked child starts with its
# parent's high-water mark, which exec keeps), so the command is started by this small process.
_MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def run_measured(args, timeout=TIME_LIMIT):
    """Runs args; fails after `timeout` seconds. The peak RSS comes from wait4's rusage."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r") as result:
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _MEASURE, result.name,
                                 *[str(a) for a in args]],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for group in (proc.pid, None):
                try:
                    os.killpg(proc.pid, 9) if group else proc.kill()
                except ProcessLookupError:
                    pass
            proc.wait()
            raise AssertionError(f"{' '.join(map(str, args))}: still running after "
                                 f"{timeout:g} s") from None
        seconds = time.monotonic() - start
        code, peak_kb = (int(x) for x in result.read().split())
        out.seek(0)
        err.seek(0)
        return Run(code, out.read(), err.read(), seconds, peak_kb / 1024)


FIGURES = []  # (case, exit code, seconds, peak MB) of every inspect, printed at the end


def tearDownModule():
    print(f"\n{'case':40} exit  seconds  peak RSS of inspect", file=sys.stderr)
    for case, code, seconds, peak in FIGURES:
        print(f"{case:40} {code:4} {seconds:8.2f}  {peak:6.1f} MB", file=sys.stderr)


class HostileTestCase(MountTestCase):
    def write(self, name, data):
        path = self.tmp / name
        path.write_bytes(data)
        return path

    def inspect(self, path, rss_limit_mb=RSS_LIMIT_MB, timeout=TIME_LIMIT, json_output=True):
        r = run_measured([CKPTFS, "inspect", *(["--json"] if json_output else []), path],
                         timeout)
        FIGURES.append((path.name, r.returncode, r.seconds, r.peak_mb))
        self.assertGreaterEqual(r.returncode, 0, f"{path.name}: killed by signal "
                                f"{-r.returncode}: {r.stderr.decode(errors='replace')[-2000:]}")
        self.assertLessEqual(r.peak_mb, rss_limit_mb, f"{path.name}: peak RSS {r.peak_mb:.0f} MB")
        return r

    def assert_refused(self, path, code, pattern, rss_limit_mb=RSS_LIMIT_MB,
                       timeout=TIME_LIMIT):
        """inspect and the mount both fail with `code` and one line matching `pattern`, and
        nothing is mounted."""
        r = self.inspect(path, rss_limit_mb, timeout)
        err = r.stderr.decode("utf-8", "replace")
        where = f"{path.name}: inspect"
        self.assertEqual(r.returncode, code, f"{where}: exit status; stderr: {err.strip()}")
        self.assertEqual(r.stdout, b"", f"{where}: printed something on stdout")
        self.assert_one_line(err, path, pattern, where)
        mnt = self.new_dir()
        m = run_measured([CKPTFS, path, mnt], timeout)
        err = m.stderr.decode("utf-8", "replace")
        where = f"{path.name}: mount"
        self.assertEqual(m.returncode, code, f"{where}: exit status; stderr: {err.strip()}")
        self.assert_one_line(err, path, pattern, where)
        self.assertFalse(is_mounted(mnt), f"{where}: {mnt} is mounted")
        self.assertEqual(os.listdir(mnt), [], f"{where}: the mountpoint is not empty")

    def assert_one_line(self, err, path, pattern, where):
        self.assertTrue(err.endswith("\n") and err.count("\n") == 1,
                        f"{where}: not one line: {err!r}")
        self.assertTrue(err.startswith(f"ckptfs: {path}: "), f"{where}: {err!r}")
        self.assertRegex(err, pattern, where)
        self.assertNotIn("Sanitizer", err, where)


# --------------------------------------------------------------------------------------------
# Not a checkpoint at all, or cut short
# --------------------------------------------------------------------------------------------

class NotACheckpointTests(HostileTestCase):
    def test_empty_file(self):
        self.assert_refused(self.write("empty.pth", b""), EXIT["checkpoint"], r"empty file")

    def test_random_bytes(self):
        rng = random.Random(5)
        for i, size in enumerate([1, 7, 100, 4096, 1 << 20]):
            data = bytes(rng.getrandbits(8) for _ in range(min(size, 4096)))
            data = (data * (size // len(data) + 1))[:size]
            if data.startswith(b"PK\x03\x04"):
                data = b"X" + data[1:]
            self.assert_refused(self.write(f"random{i}.pth", data), EXIT["checkpoint"],
                                r"not a PyTorch checkpoint|invalid pickle")

    def test_random_bytes_behind_a_zip_signature(self):
        rng = random.Random(6)
        for i, size in enumerate([4, 30, 5000, 1 << 20]):
            data = b"PK\x03\x04" + bytes(rng.getrandbits(8) for _ in range(min(size, 4096)))
            data = (data * (size // len(data) + 1))[:size]
            self.assert_refused(self.write(f"random_zip{i}.pth", data), EXIT["zip"],
                                r"end of central directory|too small")

    def test_truncated_zip_at_many_points(self):
        data = good_checkpoint()
        cuts = sorted({0, 1, 3, 4, 29, 30, 64, 100, len(data) // 3, len(data) // 2,
                       len(data) - 200, len(data) - 99, len(data) - 23, len(data) - 22,
                       len(data) - 1})
        for cut in cuts:
            path = self.write(f"cut{cut}.pth", data[:cut])
            if cut == 0:
                self.assert_refused(path, EXIT["checkpoint"], r"empty file")
            elif cut < 4:
                self.assert_refused(path, EXIT["checkpoint"], r"not a PyTorch checkpoint")
            else:
                self.assert_refused(path, EXIT["zip"], r"end of central directory|too small")

    def test_truncated_legacy_stream_at_many_points(self):
        data = fixture_path("legacy").read_bytes()
        for cut in sorted({1, 10, 11, 40, len(data) // 2, len(data) - 8, len(data) - 1}):
            self.assert_refused(self.write(f"legacy_cut{cut}.pth", data[:cut]),
                                EXIT["checkpoint"], r"truncated|exceeds|not a PyTorch checkpoint")


# --------------------------------------------------------------------------------------------
# A zip container that lies
# --------------------------------------------------------------------------------------------

class NotARegularFileTests(HostileTestCase):
    """A checkpoint path that names a FIFO (whose open would wait for a writer forever), a
    socket, a character device, a directory that holds no model, or a symlink to one of them:
    inspect and the mount, in the foreground and as a daemon, fail at once with exit 2 and one
    line, never opening it."""

    def test_not_regular_files(self):
        fifo = self.tmp / "fifo"
        os.mkfifo(fifo)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(listener.close)
        listener.bind(str(self.tmp / "socket"))
        listener.listen(1)
        cases = {"FIFO": (fifo, r"not a regular file"),
                 "socket": (self.tmp / "socket", r"not a regular file"),
                 "character device": (Path("/dev/zero"), r"not a regular file"),
                 "directory": (self.new_dir("dir"), r"a directory without a checkpoint "
                                                    r".*: nothing to mount")}
        for what, (target, message) in cases.items():
            link = self.tmp / f"link-to-{target.name}"
            link.symlink_to(target)
            for path in (target, link):
                with self.subTest(what, path=path):
                    self.assert_refused(path, EXIT["io"], rf"\A[^\n]*: {message}\n")
                    mnt = self.new_dir()
                    m = run_measured([CKPTFS, "-f", path, mnt])
                    self.assertEqual(m.returncode, EXIT["io"], m.stderr)
                    self.assert_one_line(m.stderr.decode("utf-8", "replace"), path,
                                         rf"\A[^\n]*: {message}\n", f"{path}: mount -f")
                    self.assertFalse(is_mounted(mnt))
        # Nothing ever opened the FIFO: a writer that does not wait finds no reader.
        with self.assertRaises(OSError) as caught:
            os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        self.assertEqual(caught.exception.errno, errno.ENXIO)


class LyingZipTests(HostileTestCase):
    def entries(self):
        pkl = PickleAsm().dump({"w": v2("0", 4, (4,))})
        return [{"name": "archive/data.pkl", "data": pkl},
                {"name": "archive/data/0", "data": floats(4)},
                {"name": "archive/version", "data": b"3\n"}]

    def test_central_directory_offset_past_the_end(self):
        for zip64 in (False, True):
            data = build_zip(self.entries(), cd_offset=1 << 31, zip64=zip64)
            self.assert_refused(self.write(f"cd_past_end{int(zip64)}.pth", data), EXIT["zip"],
                                r"central directory at offset \d+ .* runs past")

    def test_entry_counts_that_lie(self):
        for count in (2, 4, 1000, 65535):
            data = build_zip(self.entries(), count=count)
            self.assert_refused(self.write(f"count{count}.pth", data), EXIT["zip"],
                                r"entries|central directory")
        data = build_zip(self.entries(), count=1 << 40, zip64=True)
        self.assert_refused(self.write("count_huge.pth", data), EXIT["zip"], r"entries")

    def test_central_directory_size_that_lies(self):
        real = build_zip(self.entries())
        for size in (10, 1 << 20):
            data = build_zip(self.entries(), cd_size=size)
            self.assertEqual(len(data), len(real))
            self.assert_refused(self.write(f"cd_size{size}.pth", data), EXIT["zip"],
                                r"central directory|entries")

    def test_overlapping_entries(self):
        entries = self.entries()
        entries[1]["header_offset"] = 0  # data/0 claims data.pkl's local header
        self.assert_refused(self.write("overlap.pth", build_zip(entries)), EXIT["zip"],
                            r"signature|runs past")
        entries = self.entries()
        entries[2]["header_offset"] = 64  # version's header inside data.pkl's payload
        self.assert_refused(self.write("overlap2.pth", build_zip(entries)), EXIT["zip"],
                            r"runs past the next record's header|signature")

    def test_record_claiming_more_bytes_than_the_file_has(self):
        for size in (1000, 1 << 31, 0xFFFFFFFE):
            entries = self.entries()
            entries[1]["size"] = size
            self.assert_refused(self.write(f"record_size{size}.pth", build_zip(entries)),
                                EXIT["zip"], r"runs past the (central directory|next record's "
                                             r"header)")

    def test_local_header_past_the_end(self):
        entries = self.entries()
        entries[1]["header_offset"] = 1 << 30
        self.assert_refused(self.write("lho_past_end.pth", build_zip(entries)), EXIT["zip"],
                            r"local header .* (outside the file|not before)")

    def test_zip_bomb_of_a_million_entries(self):
        # data.pkl then 1,000,000 empty records: a valid zip of 95 MB. It is read (the
        # central directory, every local header) in bounded time and memory, and it mounts.
        n = 1_000_000
        pkl = PickleAsm().dump({"w": v2("0", 4, (4,))})
        head = build_zip([{"name": "archive/data.pkl", "data": pkl},
                          {"name": "archive/data/0", "data": floats(4)}])
        head = head[:head.index(b"PK\x01\x02")]  # the local part
        local, central = [head], []
        offsets = [0, head.index(b"PK\x03\x04", 4)]
        names = [b"archive/data.pkl", b"archive/data/0"]
        crcs = [zlib.crc32(pkl), zlib.crc32(floats(4))]
        sizes = [len(pkl), 16]
        at = len(head)
        lfh = struct.Struct("<IHHHHHIIIHH")
        for i in range(n):
            name = b"archive/x/%07d" % i
            local.append(lfh.pack(0x04034B50, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name)
            names.append(name)
            offsets.append(at)
            crcs.append(0)
            sizes.append(0)
            at += 30 + len(name)
        cdh = struct.Struct("<IHHHHHHIIIHHHHHII")
        for name, offset, crc, size in zip(names, offsets, crcs, sizes):
            central.append(cdh.pack(0x02014B50, 45, 20, 0, 0, 0, 0, crc, size, size, len(name),
                                    0, 0, 0, 0, 0, offset) + name)
        body = b"".join(local)
        cd = b"".join(central)
        total = len(names)
        tail = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, total, total, len(cd),
                           len(body))
        tail += struct.pack("<IIQI", 0x07064B50, 0, len(body) + len(cd), 1)
        tail += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, len(cd), len(body),
                            0)
        path = self.write("bomb.pth", body + cd + tail)
        r = self.inspect(path, rss_limit_mb=640 * SLOWDOWN)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        doc = json.loads(r.stdout)
        self.assertEqual([e["key"] for e in doc["entries"]], ["w"])
        self.assertIsNone(doc["entries"][0]["broken"])
        mnt, proc = self.mount(path)
        self.assertEqual((mnt / "w" / "data").read_bytes(), floats(4))
        self.unmount(mnt, proc)

    def test_declared_million_entries_in_a_small_file(self):
        data = build_zip(self.entries(), count=1_000_000, zip64=True)
        self.assert_refused(self.write("bomb_declared.pth", data), EXIT["zip"],
                            r"1000000 entries")


# --------------------------------------------------------------------------------------------
# A valid zip with an inconsistent checkpoint inside
# --------------------------------------------------------------------------------------------

class InconsistentCheckpointTests(HostileTestCase):
    def test_missing_data_pkl(self):
        data = build_zip([{"name": "archive/data/0", "data": floats(4)},
                          {"name": "archive/version", "data": b"3\n"}])
        self.assert_refused(self.write("no_data_pkl.pth", data), EXIT["checkpoint"],
                            r"no data\.pkl")
        data = build_zip([{"name": "readme.txt", "data": b"hello"}])
        self.assert_refused(self.write("plain.zip", data), EXIT["checkpoint"],
                            r"without data\.pkl")

    def test_compressed_record(self):
        pkl = PickleAsm().dump({"w": v2("0", 4, (4,))})
        for which in (0, 1):
            entries = [{"name": "archive/data.pkl", "data": pkl},
                       {"name": "archive/data/0", "data": floats(4)}]
            entries[which]["method"] = 8
            path = self.write(f"compressed{which}.pth", build_zip(entries))
            self.assert_refused(path, EXIT["unsupported"], r"compressed \(method 8\)")

    def assert_broken_mount(self, path, broken, fine):
        """inspect exits 0; `broken` keys are marked broken (their files there, reads failing
        with EIO), `fine` keys (key -> expected data bytes) are served."""
        r = self.inspect(path)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        doc = {e["key"]: e for e in json.loads(r.stdout)["entries"]}
        for key, why in broken.items():
            self.assertRegex(doc[key]["broken"] or "", why, key)
        mnt, proc = self.mount(path)
        for key, why in broken.items():
            self.assertEqual(sorted(os.listdir(mnt / key)), BROKEN_FILES, key)
            for name in ("data", "tensor.npy", "tensor.pt"):
                assert_read_fails(self, mnt / key / name)
            meta = json.loads((mnt / key / "meta.json").read_bytes())
            self.assertRegex(meta["broken"] or "", why, key)
        for key, data in fine.items():
            self.assertEqual((mnt / key / "data").read_bytes(), data, key)
            self.assertIsNone(json.loads((mnt / key / "meta.json").read_bytes())["broken"])
        index = json.loads((views_dir(mnt) / "index.json").read_bytes())
        self.assertEqual(index["total_bytes"], sum(len(d) for d in fine.values()))
        self.unmount(mnt, proc)

    def test_missing_storage_record(self):
        pkl = PickleAsm().dump({"w": v2("0", 4, (4,)), "gone": v2("1", 4, (2, 2))})
        path = self.write("missing_storage.pth", checkpoint(pkl, {"0": floats(4)}))
        self.assert_broken_mount(path, {"gone": r"record \"archive/data/1\" is missing"},
                                 {"w": floats(4)})

    def test_storage_shorter_than_its_tensors_need(self):
        # The pickle declares 12 elements, the record has 8: refused like torch (the size
        # mismatch behind CVE-2026-24747).
        pkl = PickleAsm().dump({"w": v2("0", 4, (4,)), "short": v2("1", 12, (3, 4))})
        path = self.write("short_storage.pth",
                          checkpoint(pkl, {"0": floats(4), "1": floats(8)}))
        self.assert_broken_mount(path, {"short": r"holds 32 bytes but the pickle declares 12"},
                                 {"w": floats(4)})
        # The declaration agrees with the record, but the view runs past it.
        pkl = PickleAsm().dump({"w": v2("0", 4, (4,)), "view": v2("1", 8, (3, 4)),
                                "strided": v2("1", 8, (2, 2), (5, 2), 3),
                                "ok": v2("1", 8, (2, 2), (1, 2), 3)})
        path = self.write("short_view.pth", checkpoint(pkl, {"0": floats(4), "1": floats(8)}))
        ok = floats(8)[12:16] + floats(8)[20:24] + floats(8)[16:20] + floats(8)[24:28]
        self.assert_broken_mount(path, {"view": r"needs 48 bytes .* it has 32",
                                        "strided": r"needs 44 bytes .* it has 32"},
                                 {"w": floats(4), "ok": ok})


# --------------------------------------------------------------------------------------------
# Pickles that are hostile
# --------------------------------------------------------------------------------------------

class HostilePickleTests(HostileTestCase):
    def test_calls_run_nothing(self):
        marker = self.tmp / "MARKER"
        touch = f"touch {marker}"
        py = f"open({str(marker)!r}, 'w').write('ran')"

        class Evil:
            def __reduce__(self):
                return (os.system, (touch,))

        calls = {
            "os.system": R(G("os", "system"), (touch,)),
            "posix.system": R(G("posix", "system"), (touch,)),
            "builtins.eval": R(G("builtins", "eval"), (py,)),
            "builtins.exec": R(G("builtins", "exec"), (py,)),
            "__builtin__.eval": R(G("__builtin__", "eval"), (py,)),
            "subprocess.Popen": R(G("subprocess", "Popen"), (["touch", str(marker)],)),
            "nested": R(G("builtins", "getattr"),
                        (R(G("builtins", "__import__"), ("os",)), "system")),
        }
        root = {"w": v2("0", 4, (4,)), **calls}
        pkl = PickleAsm().dump(root)
        # The same attacks through other opcodes: STACK_GLOBAL + NEWOBJ, INST, OBJ, BUILD, and
        # what Python's own pickler writes for a __reduce__.
        import pickle
        extra = [
            b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94\x8c" + bytes([len(touch)]) +
            touch.encode() + b"\x85\x81.",
            b"(V" + touch.encode() + b"\nios\nsystem\n.",
            b"(cos\nsystem\nV" + touch.encode() + b"\no.",
            b"\x80\x02cbuiltins\nobject\n)\x81}X\x0c\x00\x00\x00__setstate__cos\nsystem\nsb.",
            pickle.dumps(Evil(), protocol=2),
            pickle.dumps({"x": Evil()}, protocol=4),
        ]
        cases = [("calls.pth", checkpoint(pkl, {"0": floats(4)}))]
        cases += [(f"call{i}.pth", zip_with_pickle(p)) for i, p in enumerate(extra)]
        for name, data in cases:
            path = self.write(name, data)
            r = self.inspect(path)
            self.assertEqual(r.returncode, 0, f"{name}: {r.stderr.decode(errors='replace')}")
            self.assertFalse(marker.exists(), f"{name}: inspect ran the pickle's call")
            mnt, proc = self.mount(path)
            for d in os.listdir(mnt):
                if (mnt / d).is_dir():
                    for f in os.listdir(mnt / d):
                        (mnt / d / f).read_bytes()
            self.unmount(mnt, proc)
            self.assertFalse(marker.exists(), f"{name}: the mount ran the pickle's call")
        # What a user sees: the call as an inert record.
        r = self.inspect(self.tmp / "calls.pth")
        values = {e["key"]: e.get("value") for e in json.loads(r.stdout)["entries"]}
        self.assertEqual(values["os.system"], {"__class__": "os.system", "args": [touch]})
        self.assertEqual(values["builtins.eval"]["__class__"], "builtins.eval")

    def deep(self, name, pkl, expect_code=0, rss_limit_mb=RSS_LIMIT_MB):
        path = self.write(name, zip_with_pickle(pkl))
        r = self.inspect(path, rss_limit_mb=rss_limit_mb)
        self.assertEqual(r.returncode, expect_code, f"{name}: {r.stderr.decode(errors='replace')}")
        return r

    def test_nested_two_million_deep(self):
        n = 2_000_000
        lists = b"\x80\x02" + b"]" * n + b"a" * (n - 1) + b"."
        tuples = b"\x80\x02)" + b"\x85" * n + b"."
        marks = b"\x80\x02" + b"(" * n + b"l" * n + b"."
        dicts = b"\x80\x02}" + b"K\x01}" * (n - 1) + b"s" * (n - 1) + b"."  # {1: {1: ...}}
        for name, pkl in [("deep_lists", lists), ("deep_tuples", tuples),
                          ("deep_marks", marks), ("deep_dicts", dicts)]:
            r = self.deep(f"{name}.pth", pkl, rss_limit_mb=384 * SLOWDOWN)
            doc = json.loads(r.stdout)
            self.assertGreaterEqual(len(doc["entries"]), 1, name)
            self.assertIn("depth_limit", json.dumps(doc), name)
        path = self.tmp / "deep_lists.pth"
        mnt, proc = self.mount(path)
        self.assertIn("depth_limit", (mnt / "0" / "value.json").read_text())
        self.unmount(mnt, proc)

    def test_tensor_at_the_bottom_of_two_million_levels(self):
        # A legal key of 4 MB: the tensor is found and served (no limit on one key's length but
        # the budget of all keys), in bounded time and memory.
        n = 2_000_000
        tensor = PickleAsm().dump(v2("0", 4, (4,)))[2:-1]
        pkl = b"\x80\x02" + b"]" * n + tensor + b"a" * n + b"."
        path = self.write("deep_tensor.pth", checkpoint(pkl, {"0": floats(4)}))
        r = self.inspect(path, rss_limit_mb=512 * SLOWDOWN)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        (entry,) = json.loads(r.stdout)["entries"]
        self.assertEqual(entry["key"], ".".join(["0"] * n))
        mnt, proc = self.mount(path)
        index = json.loads((views_dir(mnt) / "index.json").read_bytes())
        name = index["entries"][0]["path"]
        self.assertLessEqual(len(os.fsencode(name)), 255)
        self.assertEqual((mnt / name / "data").read_bytes(), floats(4))
        self.unmount(mnt, proc)

    def test_huge_length_prefixes(self):
        cases = {
            "binunicode8_4g": b"\x80\x04\x8d" + struct.pack("<Q", 1 << 32) + b"abc.",
            "binbytes8_4g": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 32) + b"abc.",
            "bytearray8_max": b"\x80\x05\x96" + struct.pack("<Q", (1 << 64) - 1) + b"abc.",
            "binunicode_4g": b"\x80\x02X\xff\xff\xff\xff" + b"abc.",
            "binbytes_4g": b"\x80\x03B\xff\xff\xff\xff" + b"abc.",
            "binstring_negative": b"\x80\x02T\xff\xff\xff\xff" + b"abc.",
            "long4_4g": b"\x80\x02\x8b\xff\xff\xff\x7f" + b"abc.",
            "frame_4g": b"\x80\x04\x95" + struct.pack("<Q", 1 << 32) + b"N.",
        }
        for name, pkl in cases.items():
            path = self.write(f"{name}.pth", zip_with_pickle(pkl))
            self.assert_refused(path, EXIT["checkpoint"],
                                r"length|exceeds|negative|truncated|frame")

    def test_memo_index_out_of_range(self):
        cases = {
            "binget": b"\x80\x02h\x05.",
            "long_binget": b"\x80\x02j\xff\xff\xff\xff.",
            "get": b"\x80\x02g99999999999999999999\n.",
            "get_negative": b"\x80\x02g-1\n.",
            "put_then_get_other": b"\x80\x02Nq\x00h\x01.",
        }
        for name, pkl in cases.items():
            self.assert_refused(self.write(f"memo_{name}.pth", zip_with_pickle(pkl)),
                                EXIT["checkpoint"], r"memo")

    def test_unknown_opcode(self):
        for code in (0x00, 0xFF, 0x99, 0xC0):
            pkl = b"\x80\x02" + bytes([code]) + b"."
            self.assert_refused(self.write(f"opcode{code:02x}.pth", zip_with_pickle(pkl)),
                                EXIT["checkpoint"], r"unknown opcode|opcode 0x")

    def test_pickles_that_break_the_machine(self):
        cases = {
            "underflow": b"\x80\x02a.",
            "no_stop": b"\x80\x02N",
            "stop_on_empty": b"\x80\x02.",
            "pop_mark_without_mark": b"\x80\x021.",
            "setitems_on_int": b"\x80\x02K\x01(K\x01K\x02u.",
            "ext": b"\x80\x02\x82\x01.",
            "out_of_band": b"\x80\x05\x97.",
        }
        for name, pkl in cases.items():
            self.assert_refused(self.write(f"machine_{name}.pth", zip_with_pickle(pkl)),
                                EXIT["checkpoint"], r"invalid pickle|pickle")


# --------------------------------------------------------------------------------------------
# Small pickles that multiply: objects shared along many paths
# --------------------------------------------------------------------------------------------

def dag_pickle(depth, key_bytes, leaf=None):
    """{k0: X, k1: X} nested `depth` times over one memoized leaf (a tensor by default): 2^depth
    flattened entries with keys of about depth * key_bytes bytes, from a pickle of a few KB."""
    leaf = leaf if leaf is not None else PickleAsm().dump(v2("0", 4, (4,)))[:-1]
    out = bytearray(leaf) + b"r" + struct.pack("<I", 1000)
    for level in range(depth):
        out += b"}("
        for side in b"ab":
            key = (bytes([side]) + b"%05d" % level).ljust(key_bytes, b"_")
            out += b"X" + struct.pack("<I", len(key)) + key + b"j" + struct.pack("<I", 1000 + level)
        out += b"ur" + struct.pack("<I", 1001 + level)
    return bytes(out + b".")


class HugeSizeTests(HostileTestCase):
    """Views whose sizes or offsets do not fit the file system's off_t (stride-0 views of a
    one-element storage): each is broken with its reason or served exactly; no size, offset or
    total wraps, and every entry of the mount can be stat'ed."""

    def test_sizes_past_off_t(self):
        big = 1 << 31
        pkl = PickleAsm().dump({
            "wraps_u64": v2("0", 1, (big, big, 4), (0, 0, 0)),      # 2^64 elements: wraps
            "past_off_t": v2("0", 1, (big, 1 << 30), (0, 0)),       # 2^63 bytes: past off_t
            "fits": v2("0", 1, (1 << 30, 1 << 30), (0, 0)),         # 2^62 bytes: served
            "empty_far": v2("0", 1, (0,), (1,), offset=1 << 62),    # empty, far past the end
            **{f"many{i}": v2("0", 1, (1 << 30, 1 << 30), (0, 0)) for i in range(8)},
            "step": 7,
        })
        path = self.write("huge_views.pth", checkpoint(pkl, {"0": floats(1)}))
        r = self.inspect(path)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        doc = {e["key"]: e for e in json.loads(r.stdout)["entries"]}
        self.assertRegex(doc["wraps_u64"]["broken"] or "", "has more elements than 64 bits count")
        self.assertRegex(doc["past_off_t"]["broken"] or "", "holds more bytes than a file can")
        self.assertIsNone(doc["fits"]["broken"])
        self.assertEqual(doc["fits"]["nbytes"], 1 << 62)
        self.assertIsNone(doc["empty_far"]["file_offset"])
        mnt, proc = self.mount(path)
        index = json.loads((views_dir(mnt) / "index.json").read_bytes())
        # 9 tensors of 2^62 bytes: more than 2^64 in all, written exactly.
        self.assertEqual(index["total_bytes"], 9 * (1 << 62))
        for entry in os.listdir(mnt):
            os.stat(mnt / entry)
            if (mnt / entry).is_dir():
                for name in os.listdir(mnt / entry):
                    st = os.stat(mnt / entry / name)  # never EIO, never a negative size
                    self.assertGreaterEqual(st.st_size, 0, f"{entry}/{name}")
        # Broken: its files all the same, data of 0 bytes (no file can have its size), no
        # tensor.pt (torch cannot hold it), reads failing with EIO.
        self.assertEqual(sorted(os.listdir(mnt / "wraps_u64")), ["data", "meta.json", "tensor.npy"])
        self.assertEqual(os.stat(mnt / "wraps_u64" / "data").st_size, 0)
        assert_read_fails(self, mnt / "wraps_u64" / "data")
        meta = json.loads((mnt / "past_off_t" / "meta.json").read_bytes())
        self.assertRegex(meta["broken"], "holds more bytes than a file can")
        fits = mnt / "fits"
        self.assertEqual(os.stat(fits / "data").st_size, 1 << 62)
        header = os.stat(fits / "tensor.npy").st_size - (1 << 62)
        self.assertTrue(0 < header <= 4096, header)
        with open(fits / "data", "rb") as f:
            self.assertEqual(os.pread(f.fileno(), 8, (1 << 62) - 8), floats(1) * 2)
        self.assertIsNone(json.loads((mnt / "empty_far" / "meta.json").read_bytes())["file_offset"])
        r = run_measured([str(CKPTFS), "inspect", str(path)])
        self.assertRegex(r.stdout.decode(), r"\b%d bytes" % (9 * (1 << 62)))
        self.unmount(mnt, proc)


class CorruptRecordTests(HostileTestCase):
    """Records whose bytes do not match their CRC-32: torch.load (1.13 here, 2.14 in the interop
    root) loads them without a word; the mount fails every read that completes one, pack and
    inspect --verify refuse them."""

    def test_torch_records_whose_crc_does_not_match(self):
        import torch
        import zipfile
        w = torch.arange(200_000, dtype=torch.float32)  # 800 KB: read in several requests
        b = torch.ones(10)
        path = self.tmp / "corrupt.pth"
        torch.save({"w": w, "b": b, "c": torch.zeros(3)}, path)
        raw = bytearray(path.read_bytes())
        with zipfile.ZipFile(path) as z:
            infos = {i.filename.split("/", 1)[1]: i for i in z.infolist()}

        def data_offset(info):
            n, e = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
            return info.header_offset + 30 + n + e
        raw[data_offset(infos["data/0"]) + 400_000] ^= 0x01  # w's record
        # c's record says CRC 0: what torch >= 2.6 writes when told not to compute CRCs.
        at = raw.find(b"PK\x01\x02")
        while at >= 0:
            n = struct.unpack("<H", raw[at + 28:at + 30])[0]
            if raw[at + 46:at + 46 + n].endswith(b"data/2"):
                raw[at + 16:at + 20] = b"\0\0\0\0"
            at = raw.find(b"PK\x01\x02", at + 4)
        path.write_bytes(raw)
        loaded = torch.load(path)  # torch checks no CRC
        self.assertFalse(torch.equal(loaded["w"], w))
        mnt, proc = self.mount(path)
        with self.assertRaises(OSError) as e:
            (mnt / "w" / "data").read_bytes()
        self.assertEqual(e.exception.errno, errno.EIO)
        r = subprocess.run(["cp", mnt / "w" / "tensor.pt", self.tmp / "w.pt"],
                           capture_output=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual((mnt / "b" / "data").read_bytes(), b.numpy().tobytes())
        self.assertEqual((mnt / "c" / "data").read_bytes(), bytes(12))  # no CRC: not checked
        self.assertRegex(self.output(proc), r'record "corrupt/data/0": its 800000 bytes do not '
                                            r"match the CRC-32 its zip records")
        out = self.tmp / "out.pth"
        r = run_measured([CKPTFS, "pack", path, out])
        self.assertEqual(r.returncode, EXIT["checkpoint"], r.stderr)
        self.assertRegex(r.stderr.decode(), r'^ckptfs: .*record "corrupt/data/0": .*do not match')
        self.assertFalse(out.exists())
        r = run_measured([CKPTFS, "pack", path, out, "--keys", "b", "--keys", "c"])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run_measured([CKPTFS, "inspect", "--verify", path])
        self.assertEqual(r.returncode, EXIT["checkpoint"], r.stderr)
        self.assertRegex(r.stderr.decode(), r'^ckptfs: .*: record "corrupt/data/0": its 800000 '
                                            r"bytes do not match .*: the file is corrupt")
        self.assertIn('record "corrupt/data/2": no CRC-32 recorded (0): not checked',
                      r.stdout.decode())
        # A pickle is read whole at mount: a corrupt one is refused before it is parsed (this
        # one still parses: a key renamed).
        pkl = data_offset(infos["data.pkl"])
        at = raw.find(b"w", pkl, pkl + infos["data.pkl"].file_size)
        raw[at] = ord("v")
        path.write_bytes(raw)
        self.assertEqual(list(torch.load(path)), ["v", "b", "c"])
        self.assert_refused(path, EXIT["checkpoint"],
                            r'record "corrupt/data.pkl": its \d+ bytes do not match the CRC-32')


class MultiplyingPickleTests(HostileTestCase):
    def test_shared_dicts_with_long_keys(self):
        # 2^20 entries with 3 KB keys: 3 TB of keys, refused once they pass 64 MiB.
        path = self.write("dag_long_keys.pth", checkpoint(dag_pickle(20, 150), {"0": floats(4)}))
        self.assert_refused(path, EXIT["checkpoint"], r"keys and values of its \d+ entries "
                            r"take more than 67108864 bytes", rss_limit_mb=384 * SLOWDOWN)

    def test_shared_dicts_with_short_keys(self):
        # 2^24 entries with short keys: refused at 65,536 entries (the pickle has 100 objects).
        path = self.write("dag_short_keys.pth", checkpoint(dag_pickle(24, 1), {"0": floats(4)}))
        self.assert_refused(path, EXIT["checkpoint"], r"more than 65536 entries from a pickle "
                            r"of \d+ objects", rss_limit_mb=256 * SLOWDOWN)

    def test_shared_dicts_at_the_limit_mount(self):
        # 2^16 entries, all over one storage: served; every meta.json lists a bounded number of
        # the others (O(N) work, not O(N^2)).
        path = self.write("dag16.pth", checkpoint(dag_pickle(16, 1), {"0": floats(4)}))
        r = self.inspect(path, rss_limit_mb=384 * SLOWDOWN)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        entries = json.loads(r.stdout)["entries"]
        self.assertEqual(len(entries), 1 << 16)
        self.assertEqual(entries[0]["shared_with_count"], (1 << 16) - 1)
        self.assertLessEqual(len(entries[0]["shared_with"]), 100)
        mnt, proc = self.mount(path)
        first = entries[-1]["key"]
        from ckptfs_reference import directory_name
        self.assertEqual((mnt / directory_name(first) / "data").read_bytes(), floats(4))
        self.unmount(mnt, proc)

    def test_shared_value_reached_many_times(self):
        # A value of ~1 MB of JSON, reached under 5,000 keys: 5 GB of value.json, refused.
        big = b"(" + b"".join(b"G" + struct.pack(">d", i + 0.5) for i in range(60_000)) + b"l"
        memo = struct.pack("<I", 100_000)  # beyond the indices PickleAsm uses
        pkl = bytearray(b"\x80\x02" + big + b"r" + memo + b"0")
        pkl += b"}(X\x01\x00\x00\x00w" + PickleAsm().dump(v2("0", 4, (4,)))[2:-1]
        for i in range(5000):
            key = b"v%d" % i
            pkl += b"X" + struct.pack("<I", len(key)) + key + b"j" + memo
        pkl += b"u."
        path = self.write("shared_value.pth", checkpoint(bytes(pkl), {"0": floats(4)}))
        self.assert_refused(path, EXIT["checkpoint"], r"take more than 67108864 bytes",
                            rss_limit_mb=384 * SLOWDOWN)


# --------------------------------------------------------------------------------------------
# Text that JSON's escaping expands: a control character is six bytes of JSON ("\u0001"). Every
# limit on JSON text is checked on the input's length, or on the escaped size before the text is
# made (issue 29, item 7): a file of 24 MiB of control characters costs about its size, not the
# six times its JSON would (or more, ckptfs's copies of it).
# --------------------------------------------------------------------------------------------

CONTROL = 24 << 20  # bytes of control characters: 144 MiB as JSON, past every limit on it


def gguf_file(kvs=(), tensors=()):
    """A GGUF v3 file of key-value pairs (key, type number, value bytes) and float32 tensors
    (name, 4 bytes)."""
    def text(b):
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, kind, value in kvs:
        out += text(key) + struct.pack("<I", kind) + value
    for i, name in enumerate(tensors):
        out += text(name) + struct.pack("<IQIQ", 1, 1, 0, 32 * i)
    out += b"\0" * (-len(out) % 32)
    return out + b"\0" * (32 * len(tensors))


class ExpandingTextTests(HostileTestCase):
    def test_gguf_string_value(self):
        path = self.write("control_value.gguf",
                          gguf_file([(b"k", 8, struct.pack("<Q", CONTROL) + b"\x01" * CONTROL)]))
        self.assert_refused(path, EXIT["unsupported"], r'GGUF metadata: more than 134217728 '
                            r'bytes of values as JSON \(at key "k"\)$', rss_limit_mb=64 * SLOWDOWN)

    def test_gguf_key_and_tensor_name(self):
        big = b"\x01" * CONTROL
        path = self.write("control_key.gguf", gguf_file([(big, 4, struct.pack("<I", 1))]))
        self.assert_refused(path, EXIT["unsupported"], r"GGUF metadata: more than 134217728 "
                            r"bytes of values as JSON \(at byte 24\)$", rss_limit_mb=64 * SLOWDOWN)
        path = self.write("control_name.gguf", gguf_file(tensors=[big]))
        self.assert_refused(path, EXIT["unsupported"], r"GGUF header: more than 67108864 bytes "
                            r"of tensor names as JSON \(at byte 24\)$", rss_limit_mb=64 * SLOWDOWN)

    def test_gguf_strings_past_the_header_limit_are_never_read(self):
        """A string of 2^30 bytes in a file of a hundred: refused by its length, unread."""
        path = self.write("huge_value.gguf",
                          gguf_file([(b"k", 8, struct.pack("<Q", 1 << 30) + b"x" * 64)]))
        self.assert_refused(path, EXIT["checkpoint"], r"past the end of the file",
                            rss_limit_mb=64 * SLOWDOWN)

    def test_pickle_key(self):
        """A key of control characters: charged as the JSON index.json writes, refused before
        its key path (JSON) is made."""
        import torch
        path = self.tmp / "control_key.pth"
        torch.save({"\x01" * CONTROL: torch.zeros(1)}, path)
        self.assert_refused(path, EXIT["checkpoint"], r"keys and values of its \d+ entries take "
                            r"more than 67108864 bytes", rss_limit_mb=128 * SLOWDOWN)

    def test_npz_member_names(self):
        """An .npz's keys are its members' names: as JSON, within the budget of a pickle's keys
        (64 MiB), else refused before index.json is made."""
        import numpy as np
        path = self.tmp / "control_names.npz"
        np.savez(path, **{"\x01" * 60_000 + str(i): np.zeros(1, np.uint8) for i in range(190)})
        self.assert_refused(path, EXIT["unsupported"], r"its members' names take more than "
                            r"67108864 bytes as JSON \(at member ", rss_limit_mb=96 * SLOWDOWN)

    def test_pickle_values(self):
        """Values of control characters (a str, bytes, a dict's key): value.json says they are
        cut, made without escaping them first."""
        import torch
        path = self.tmp / "control_values.pth"
        torch.save({"w": torch.zeros(1), "s": "\x01" * CONTROL, "b": b"\x01" * CONTROL,
                    "d": {"\x01" * CONTROL: 1}}, path)
        r = self.inspect(path, rss_limit_mb=192 * SLOWDOWN)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        values = {e["key"]: e["value"] for e in json.loads(r.stdout)["entries"]
                  if e["kind"] == "value"}
        cut = {"__truncated__": True, "bytes_limit": 1 << 20}
        self.assertEqual(values, {"s": cut, "b": cut, "d": cut})


# --------------------------------------------------------------------------------------------
# HDF5 files (h5py's, then altered): refused with one line, or mounted with the datasets that
# cannot be read broken; never unbounded memory or time
# --------------------------------------------------------------------------------------------

def _h5py():
    try:
        import h5py
        import numpy
        return h5py, numpy
    except ImportError:
        return None, None


class HostileHdf5Tests(HostileTestCase):
    def setUp(self):
        super().setUp()
        self.h5py, self.np = _h5py()
        if self.h5py is None:
            self.skipTest("no h5py (Debian: python3-h5py)")

    def h5(self, name, build, **kwargs):
        path = self.tmp / name
        with self.h5py.File(path, "w", **kwargs) as f:
            build(f)
        return path

    def test_truncated_at_many_points(self):
        np = self.np
        path = self.h5("whole.h5", lambda f: f.create_dataset(
            "w", data=np.arange(5000, dtype=np.float32), chunks=(100,), compression="gzip"))
        data = path.read_bytes()
        for cut in sorted({9, 40, 95, 200, len(data) // 2, len(data) - 1}):
            self.assert_refused(self.write(f"cut{cut}.h5", data[:cut]), EXIT["checkpoint"],
                                r"looks truncated|superblock")

    def test_a_grid_of_a_trillion_chunks(self):
        """A chunked dataset whose dimension says 2^40 (chunks of one element): refused before
        any chunk is listed, in bounded memory."""
        marker = 7777777
        path = self.h5("grid.h5", lambda f: f.create_dataset(
            "w", shape=(marker,), dtype="u1", chunks=(1,)))
        data = path.read_bytes()
        packed = struct.pack("<Q", marker)
        self.assertEqual(data.count(packed), 2)  # its size and maximum size
        path = self.write("trillion.h5", data.replace(packed, struct.pack("<Q", 1 << 40)))
        self.assert_refused(path, EXIT["unsupported"], r"more than \d+ chunks")

    def test_chunk_index_and_data_outside_the_file(self):
        """Addresses past the end: the datasets are broken, saying why; the others are served."""
        np = self.np

        def build(f):
            f.create_dataset("ok", data=np.arange(4, dtype=np.int32))
            f.create_dataset("chunked", data=np.arange(64, dtype=np.int32).reshape(8, 8),
                             chunks=(4, 4))
            f.create_dataset("contiguous", data=np.full(1000, 0x5a5a5a5a, dtype=np.uint32))
        path = self.h5("addresses.h5", build)
        with self.h5py.File(path, "r") as f:
            contiguous_at = f["contiguous"].id.get_offset()
        data = bytearray(path.read_bytes())
        # The contiguous dataset's address in its layout message, and the chunk B-tree's ("TREE").
        far = struct.pack("<Q", 1 << 50)
        # Layout messages of version 3: class 1 (contiguous) or 2 (chunked, then its rank + 1).
        at = data.index(struct.pack("<BB", 3, 1) + struct.pack("<Q", contiguous_at)) + 2
        data[at:at + 8] = far
        tree = data.index(b"TREE\x01")  # node type 1: a chunk B-tree (0: a group's)
        at = data.index(struct.pack("<BBB", 3, 2, 3) + struct.pack("<Q", tree)) + 3
        data[at:at + 8] = far
        bad = self.write("far.h5", bytes(data))
        mnt, _ = self.mount(bad)
        self.assertEqual((mnt / "ok" / "data").read_bytes(), np.arange(4, dtype="<i4").tobytes())
        for key in ("chunked", "contiguous"):
            meta = json.loads((mnt / key / "meta.json").read_text())
            self.assertRegex(meta["broken"], "outside the file", key)
            with self.assertRaises(OSError) as raised:  # broken: its files fail with EIO
                (mnt / key / "data").read_bytes()
            self.assertEqual(raised.exception.errno, errno.EIO, key)

    def test_groups_in_a_cycle(self):
        """A group linked inside itself (hard links may make cycles): each group read once."""
        np = self.np

        def build(f):
            g = f.create_group("a/b")
            g.create_dataset("w", data=np.arange(3, dtype=np.int8))
            g["up"] = f["a"]
        path = self.h5("cycle.h5", build)
        mnt, _ = self.mount(path)
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertEqual([e["key"] for e in index["entries"]], ["a.b.w"])

    def test_object_header_continuing_into_itself(self):
        """Object header continuations that lead back to a block already read."""
        np = self.np
        attrs = {f"attribute_{i}": np.arange(40, dtype=np.int64) for i in range(12)}

        def build(f):
            ds = f.create_dataset("w", data=np.arange(3, dtype=np.int8))
            for k, v in attrs.items():
                ds.attrs[k] = v  # enough to need a continuation block
        path = self.h5("continued.h5", build)
        data = bytearray(path.read_bytes())
        # Version 1 headers: a continuation message is type 0x10, 16 bytes (offset, length).
        marker = struct.pack("<HH", 0x10, 16)
        at = data.find(marker)
        self.assertGreater(at, 0)
        block, length = struct.unpack_from("<QQ", data, at + 8)
        # The continuation block's own first message made a continuation back to itself.
        data[block:block + 8] = marker + b"\0" * 4
        data[block + 8:block + 24] = struct.pack("<QQ", block, length)
        path = self.write("loop.h5", bytes(data))
        self.assert_refused(path, EXIT["checkpoint"], r"continues twice|reached twice")

    def test_keras_archive_without_weights(self):
        import zipfile
        path = self.tmp / "empty.keras"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("metadata.json", "{}")
            z.writestr("config.json", "{}")
        self.assert_refused(path, EXIT["checkpoint"], r"without model\.weights\.h5")


# --------------------------------------------------------------------------------------------
# TorchScript archives that are damaged or hostile
# --------------------------------------------------------------------------------------------

def rezip(src, *, methods=None, drop=(), replace=None, append=()):
    """The records of zip `src` written again by Python's zipfile, in order: `methods` maps a
    record name to its compression (stored otherwise), `drop` leaves records out, `replace` maps
    names to new payloads (bytes, or a function writing chunks to a file object, for payloads
    too big to hold), `append` adds (name, payload) records at the end."""
    import zipfile
    methods, replace = methods or {}, replace or {}
    out = io.BytesIO()
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w") as zout:
        records = [(i.filename, None) for i in zin.infolist()] + list(append)
        for name, payload in records:
            if name in drop:
                continue
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = methods.get(name, zipfile.ZIP_STORED)
            payload = replace.get(name, payload)
            if payload is None:
                payload = zin.read(name)
            with zout.open(info, "w", force_zip64=True) as w:
                payload(w) if callable(payload) else w.write(payload)
    return out.getvalue()


class TorchScriptTests(HostileTestCase):
    """Damaged and hostile TorchScript archives, made from the ts_trace fixture (torch.jit.save of
    a traced module: state_dict, constants, deflated code) or by torch here: each gives the
    documented error, or broken tensors with their reason while the rest is served exactly."""

    NAME = "ts_trace"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.source = fixture_path(cls.NAME)
        cls.expected = {e["key"]: e for e in expected_doc(cls.NAME)["entries"]}
        import zipfile
        with zipfile.ZipFile(cls.source) as z:
            cls.names = [i.filename for i in z.infolist()]
            cls.code = [i.filename for i in z.infolist() if "/code/" in i.filename
                        and i.filename.endswith(".py")]
            cls.deflated = {i.filename for i in z.infolist() if i.compress_type != 0}
        r = subprocess.run([str(CKPTFS), "inspect", "--json", str(cls.source)],
                           capture_output=True, check=True)
        cls.records = {e["key"]: e["storage"]["record"] for e in json.loads(r.stdout)["entries"]}

    def assert_served(self, path, broken=None):
        """inspect exits 0 with exactly the fixture's keys; `broken` keys (key -> pattern) are
        broken, every other tensor is served with the fixture's bytes, in the mount too."""
        import hashlib
        broken = broken or {}
        r = self.inspect(path)
        self.assertEqual(r.returncode, 0, f"{path.name}: {r.stderr.decode(errors='replace')}")
        entries = json.loads(r.stdout)["entries"]
        self.assertEqual([e["key"] for e in entries], list(self.expected), path.name)
        for e in entries:
            self.assertEqual(e.get("key_path"), self.expected[e["key"]].get("key_path"))
            if e["key"] in broken:
                self.assertRegex(e["broken"] or "", broken[e["key"]], e["key"])
            else:
                self.assertIsNone(e["broken"], e["key"])
        mnt, proc = self.mount(path)
        for key, want in self.expected.items():
            if key in broken:
                self.assertIn("data", os.listdir(mnt / key), key)
                assert_read_fails(self, mnt / key / "data")
                continue
            data = (mnt / key / "data").read_bytes()
            self.assertEqual(hashlib.sha256(data).hexdigest(), want["sha256"], key)
        self.unmount(mnt, proc)

    def test_the_fixture_is_what_these_tests_assume(self):
        self.assertTrue(self.code and set(self.code) <= self.deflated, "torch deflates code")
        self.assertIn(f"{self.NAME}/constants.pkl", self.names)
        self.assertTrue(any(k.startswith("constants.") for k in self.expected))

    def test_compressed_tensor_records_are_broken(self):
        import zipfile
        key = next(iter(self.expected))
        other = next(k for k in self.expected if k.startswith("constants."))
        for target in (key, other):
            record = self.records[target]
            data = rezip(self.source, methods={record: zipfile.ZIP_DEFLATED})
            path = self.write(f"ts_compressed_{target}.pth", data)
            self.assert_served(path, {target: rf'"{record}" is compressed \(method 8\)'})

    def test_code_stored_deflated_or_compressed_otherwise(self):
        """Code as torch writes it (deflated), stored, or compressed by methods ckptfs does not
        read (then ignored: a traced module's parameters come before `training`, where ckptfs
        looks without the declarations)."""
        import zipfile
        for name, method in (("stored", zipfile.ZIP_STORED), ("deflated", zipfile.ZIP_DEFLATED),
                             ("bzip2", zipfile.ZIP_BZIP2), ("lzma", zipfile.ZIP_LZMA)):
            data = rezip(self.source, methods={c: method for c in self.code})
            self.assert_served(self.write(f"ts_code_{name}.pth", data))

    def test_declarations_decide_what_state_dict_is(self):
        """ts_script's code as torch wrote it (deflated) gives state_dict() exactly; the same code
        compressed with bzip2 is ignored, and the fallback (tensor attributes before `training`)
        then also takes the two tensors placed there that are no parameters: a plain attribute
        set before Module.__init__ and a TorchScript class object's tensor."""
        import zipfile
        source = fixture_path("ts_script")
        expected = [e["key"] for e in expected_doc("ts_script")["entries"]]
        with zipfile.ZipFile(source) as z:
            code = [i.filename for i in z.infolist() if "/code/" in i.filename]
        for name, method in (("deflated", zipfile.ZIP_DEFLATED), ("bzip2", zipfile.ZIP_BZIP2)):
            path = self.write(f"ts_script_{name}.pth",
                              rezip(source, methods={c: method for c in code}))
            r = self.inspect(path)
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            keys = [e["key"] for e in json.loads(r.stdout)["entries"]]
            if name == "deflated":
                self.assertEqual(keys, expected)
            else:
                moved = {"attributes.early.early": "early.early",
                         "attributes.holder.t": "holder.t"}
                self.assertEqual(sorted(keys), sorted(moved.get(k, k) for k in expected))

    def test_missing_records(self):
        key = next(iter(self.expected))
        constant = next(k for k in self.expected if k.startswith("constants."))
        for target in (key, constant):
            path = self.write(f"ts_missing_{target}.pth",
                              rezip(self.source, drop={self.records[target]}))
            self.assert_served(path, {target: r"is missing from the zip"})
        # No code at all: the declarations are not there, the tensors are.
        self.assert_served(self.write("ts_no_code.pth", rezip(self.source, drop=set(self.code))))
        self.assert_refused(self.write("ts_no_data_pkl.pth",
                                       rezip(self.source, drop={f"{self.NAME}/data.pkl"})),
                            EXIT["checkpoint"], r"TorchScript archive without data\.pkl")
        self.assert_refused(self.write("ts_no_constants_pkl.pth",
                                       rezip(self.source, drop={f"{self.NAME}/constants.pkl"})),
                            EXIT["checkpoint"], r'without its ".*/constants\.pkl" record')

    def test_constants_that_are_not_a_tuple(self):
        import pickle
        for i, value in enumerate(({"0": 1}, [1, 2], None, 7, "a string")):
            data = rezip(self.source,
                         replace={f"{self.NAME}/constants.pkl": pickle.dumps(value, protocol=2)})
            self.assert_refused(self.write(f"ts_constants_{i}.pth", data), EXIT["checkpoint"],
                                r"constants\.pkl.* is not a tuple")

    def test_compressed_pickles_are_refused(self):
        import zipfile
        for record in ("data.pkl", "constants.pkl"):
            data = rezip(self.source, methods={f"{self.NAME}/{record}": zipfile.ZIP_DEFLATED})
            self.assert_refused(self.write(f"ts_deflated_{record}.pth", data),
                                EXIT["unsupported"], r"compressed \(method 8\)")

    def test_huge_and_deep_code_is_never_run(self):
        """Code records of 256 MiB of text before the declarations (a deflate bomb of about
        1 MB), and code nested a million levels deep that would run a command: read within a
        budget, matched as text only, never run; the tensors are served."""
        import zipfile
        marker = self.tmp / "MARKER"

        def bomb(original):
            def write(w):
                line = b"#" * 1023 + b"\n"
                for _ in range(256 * 1024):
                    w.write(line)
                w.write(original)
            return write

        import zipfile as zf_module
        with zf_module.ZipFile(self.source) as z:
            originals = {c: z.read(c) for c in self.code}
        data = rezip(self.source, methods={c: zipfile.ZIP_DEFLATED for c in self.code},
                     replace={c: bomb(originals[c]) for c in self.code})
        self.assertLess(len(data), 8 << 20)
        self.assert_served(self.write("ts_code_bomb.pth", data))
        deep = ("(" * 1_000_000 + ")" * 1_000_000 + "\n").encode()
        evil = f"import os\nos.system('touch {marker}')\n".encode()
        for i, extra in enumerate((deep, evil, deep + evil)):
            data = rezip(self.source, methods={c: zipfile.ZIP_DEFLATED for c in self.code},
                         replace={c: originals[c] + extra for c in self.code})
            self.assert_served(self.write(f"ts_code_deep{i}.pth", data))
            data = rezip(self.source, replace={c: extra + originals[c] for c in self.code})
            self.assert_served(self.write(f"ts_code_first{i}.pth", data))
        self.assertFalse(marker.exists(), "a code record was run")

    def test_modules_nested_deep_and_shared_wide(self):
        """Modules nested 300,000 deep over one tensor: one key of 600 KB, in bounded time and
        memory; a module reached along 2^20 paths: refused at the entry limit, as any DAG."""
        import struct
        t = PickleAsm().dump(v2("0", 4, (4,)))[2:-1]
        module = b"c__torch__\nM\n)\x81}("
        training = b"X\x08\x00\x00\x00training\x89"
        n = 300_000
        pkl = (b"\x80\x02" + (module + b"X\x01\x00\x00\x00m") * n
               + module + b"X\x01\x00\x00\x00w" + t + training + b"ub"
               + (training + b"ub") * n + b".")
        code = b'class M(Module):\n  __parameters__ = ["w", ]\n  __buffers__ = []\n'
        entries = [{"name": "d/data.pkl", "data": pkl}, {"name": "d/code/__torch__.py",
                                                          "data": code},
                   {"name": "d/constants.pkl", "data": b"\x80\x02)."},
                   {"name": "d/data/0", "data": floats(4)}]
        path = self.write("ts_deep_modules.pth", build_zip(entries))
        r = self.inspect(path, rss_limit_mb=384 * SLOWDOWN)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        (entry,) = json.loads(r.stdout)["entries"]
        self.assertEqual(entry["key"], "m." * n + "w")
        # Its key path (what pack nests by): every module's attribute, bounded as the key is.
        self.assertEqual(entry.get("key_path"), ["m"] * n + ["w"])
        # {a: X, b: X} twenty levels deep, X a module: 2^20 keys from a small pickle.
        levels = 20
        out = bytearray(b"\x80\x02" + module + b"X\x01\x00\x00\x00w" + t + training + b"ub")
        out += b"r" + struct.pack("<I", 1000)
        for level in range(levels):
            out += module + b"X\x01\x00\x00\x00aj" + struct.pack("<I", 1000 + level)
            out += b"X\x01\x00\x00\x00bj" + struct.pack("<I", 1000 + level) + training + b"ub"
            out += b"r" + struct.pack("<I", 1001 + level)
        entries[0]["data"] = bytes(out + b".")
        path = self.write("ts_wide_modules.pth", build_zip(entries))
        self.assert_refused(path, EXIT["checkpoint"], r"more than 65536 entries",
                            rss_limit_mb=384 * SLOWDOWN)

    def test_archives_without_tensors_are_refused(self):
        import torch
        for i, module in enumerate((torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                    torch.nn.Sequential(torch.nn.Identity(), torch.nn.Tanh()))):
            buf = io.BytesIO()
            torch.jit.save(torch.jit.script(module), buf)
            self.assert_refused(self.write(f"ts_empty{i}.pth", buf.getvalue()),
                                EXIT["unsupported"], r"TorchScript archive without tensors")


if __name__ == "__main__":
    unittest.main()


# --------------------------------------------------------------------------------------------
# safetensors files and sharded-set indexes that are hostile
# --------------------------------------------------------------------------------------------

def safetensors_bytes(header, data=b"", length=None):
    """8 bytes of little-endian `length` (the header's own by default), the header, the data."""
    header = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def good_safetensors():
    """{"a": F32 [2, 2], "b": U8 [4]}, as the safetensors library lays it out."""
    header = ('{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],'
              '"data_offsets":[0,16]},"b":{"dtype":"U8","shape":[4],"data_offsets":[16,20]}}')
    header += " " * (-len(header) % 8)
    return safetensors_bytes(header, floats(4) + b"wxyz")


def metadata_header(n):
    """A header whose __metadata__ has n distinct entries ("k":"") and nothing else, the keys
    the shortest strings of 90 printable characters: 10 million fit in 100,000,000 bytes."""
    import numpy as np
    alphabet = np.frombuffer(bytes(c for c in range(0x21, 0x7f) if c not in b'"\\')[:90],
                             dtype=np.uint8)
    parts, done, width = [b'{"__metadata__":{'], 0, 1
    while done < n:
        count = min(n - done, 90 ** width)
        idx = np.arange(count, dtype=np.int64)
        rows = np.empty((count, width + 6), dtype=np.uint8)
        rows[:, 0] = ord('"')
        for col in range(width):
            rows[:, 1 + col] = alphabet[(idx // 90 ** (width - 1 - col)) % 90]
        rows[:, width + 1:] = np.frombuffer(b'":"",', dtype=np.uint8)
        parts.append(rows.tobytes())
        done += count
        width += 1
    text = b"".join(parts)[:-1] + b"}}"
    return text


class HostileSafetensorsTests(HostileTestCase):
    def st(self, name, header, data=b"", length=None):
        return self.write(f"{name}.safetensors", safetensors_bytes(header, data, length))

    def test_good_file_mounts(self):
        path = self.write("good.safetensors", good_safetensors())
        r = self.inspect(path)
        self.assertEqual(r.returncode, 0, r.stderr)
        mnt, proc = self.mount(path)
        self.assertEqual((mnt / "a" / "data").read_bytes(), floats(4))
        self.assertEqual((mnt / "b" / "data").read_bytes(), b"wxyz")
        self.unmount(mnt, proc)

    def test_header_length_lies(self):
        self.assert_refused(self.st("past_end", "{}", b"", 1000), EXIT["checkpoint"],
                            r"header length 1000 runs past the end of the file \(10 bytes\): "
                            r"the file looks truncated")
        self.assert_refused(self.st("over_100mb", "{}", b"", 100_000_001), EXIT["checkpoint"],
                            r"header length 100000001 is over the limit of 100000000 bytes")
        self.assert_refused(self.st("length_2_64", "{}", b"", (1 << 64) - 1), EXIT["checkpoint"],
                            r"is over the limit")
        self.assert_refused(self.write("short.safetensors", b"\x02\0\0"), EXIT["checkpoint"],
                            r"a 3-byte file: too short for a safetensors header length")
        # A header length that is right, but a file of 100 MB of spaces around it would be read
        # in bounded memory: the header is streamed, never held whole.
        header = b"{}" + b" " * 99_999_990
        self.assert_refused(self.st("huge_padding", header, b"x"), EXIT["checkpoint"],
                            r"the tensors' data ends at byte 100000000 of the file, but the file "
                            r"has 100000001 bytes", rss_limit_mb=64 * SLOWDOWN)

    def test_header_not_an_object(self):
        for i, header in enumerate(["[]", "5", '"x"', "null", "", "{", "{} {}", "{}\0",
                                    '{"__metadata__":{},}', "{'a':1}", '{"a":NaN}', '\xff']):
            path = self.st(f"not_object{i}", header.encode("latin-1"))
            self.assert_refused(path, EXIT["checkpoint"],
                                r"safetensors header: (at byte \d+: the header is not a JSON "
                                r"object|invalid JSON at byte \d+: )")

    def test_duplicate_keys(self):
        t = '"dtype":"U8","shape":[2],"data_offsets":[0,2]'
        self.assert_refused(self.st("dup_tensor", f'{{"t":{{{t}}},"t":{{{t}}}}}', b"ab"),
                            EXIT["checkpoint"], r'has the key "t" twice')
        self.assert_refused(self.st("dup_field", f'{{"t":{{{t},"dtype":"U8"}}}}', b"ab"),
                            EXIT["checkpoint"], r'has the key "dtype" twice')
        self.assert_refused(self.st("dup_metadata",
                                    '{"__metadata__":{"a":"1","a":"2"}}'), EXIT["checkpoint"],
                            r'has the key "a" twice')

    def test_offsets_that_lie(self):
        def two(a, b, data):
            return ('{"x":{"dtype":"U8","shape":[4],"data_offsets":' + a + '},'
                    '"y":{"dtype":"U8","shape":[4],"data_offsets":' + b + '}}', data)
        cases = {
            "overlap": (two("[0,4]", "[2,6]", b"0123456"), r'overlap those of tensor "x"'),
            "same": (two("[0,4]", "[0,4]", b"0123"), r"overlap"),
            "gap": (two("[0,4]", "[5,9]", b"012345678"), r"leave bytes \[4, 5\) of the data"),
            "out_of_order": (two("[4,8]", "[0,4]", b"01234567"), None),  # valid: data order
            "past_end": (two("[0,4]", "[4,8]", b"0123"), r"past its end .* truncated"),
            "trailing": (two("[0,4]", "[4,8]", b"0123456789"), r"but the file has"),
            "reversed": (('{"x":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}', b"0123"),
                         r"end before they begin"),
            "huge": (('{"x":{"dtype":"U8","shape":[1],"data_offsets":'
                      '[18446744073709551614,18446744073709551615]}}', b""), r"leave bytes"),
        }
        for name, ((header, data), pattern) in cases.items():
            path = self.st(name, header, data)
            if pattern is None:
                r = self.inspect(path)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual([e["key"] for e in json.loads(r.stdout)["entries"]], ["y", "x"])
            else:
                self.assert_refused(path, EXIT["checkpoint"], pattern)

    def test_bad_descriptions(self):
        cases = {
            "unknown_dtype": ('{"dtype":"F7","shape":[4],"data_offsets":[0,4]}',
                              r'unknown dtype "F7"'),
            "size_mismatch": ('{"dtype":"F32","shape":[2],"data_offsets":[0,4]}',
                              r"hold 4 bytes, but F32 \[2\] needs 8"),
            "negative": ('{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}',
                         r'shape holds "-4", not an integer'),
            "fraction": ('{"dtype":"U8","shape":[4],"data_offsets":[0,4.0]}',
                         r'data_offsets holds "4.0"'),
            "exponent": ('{"dtype":"U8","shape":[4e0],"data_offsets":[0,4]}', r'holds "4e0"'),
            "too_big": ('{"dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551620]}',
                        r"not an integer from 0 to 2\^64 - 1"),
            "three_offsets": ('{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}',
                              r"more than two numbers"),
            "no_dtype": ('{"shape":[4],"data_offsets":[0,4]}', r'tensor "t" has no dtype'),
            "not_object": ("[1]", r"its description is not an object"),
            "overflow": ('{"dtype":"F32","shape":[4294967296,4294967296,0],'
                         '"data_offsets":[0,4]}', r"more elements than 64 bits count"),
        }
        for name, (description, pattern) in cases.items():
            self.assert_refused(self.st(name, '{"t":' + description + '}', b"0123"),
                                EXIT["checkpoint"], pattern)

    def test_valid_but_not_servable(self):
        cases = {
            "f6": ('{"dtype":"F6_E2M3","shape":[4],"data_offsets":[0,3]}', b"012",
                   r"dtype F6_E2M3 \(6-bit elements\)"),
            "f4_odd": ('{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}', b"012",
                       r"last dimension"),
            "dims_65": ('{"dtype":"U8","shape":[' + ",".join(["1"] * 65) +
                        '],"data_offsets":[0,1]}', b"0", r"more than 64 dimensions"),
        }
        for name, (description, data, pattern) in cases.items():
            self.assert_refused(self.st(name, '{"t":' + description + '}', data),
                                EXIT["unsupported"], pattern)

    def test_ten_million_entry_header(self):
        """__metadata__ with 10,000,000 entries in a 99 MB header: refused at the 65,537th, in
        bounded time and memory."""
        header = metadata_header(10_000_000)
        self.assertLessEqual(len(header), 100_000_000)
        self.assertEqual(header.count(b'":"",') + 1, 10_000_000)
        path = self.st("ten_million", header)
        self.assert_refused(path, EXIT["unsupported"],
                            r"__metadata__ has more than 65536 entries or 67108864 bytes",
                            rss_limit_mb=64 * SLOWDOWN)

    def test_ten_million_dimensions(self):
        shape = b",".join([b"1"] * 10_000_000)
        header = b'{"t":{"dtype":"U8","shape":[' + shape + b'],"data_offsets":[0,1]}}'
        self.assert_refused(self.st("ten_million_dims", header, b"0"), EXIT["unsupported"],
                            r"more than 64 dimensions", rss_limit_mb=64 * SLOWDOWN)

    def test_deep_nesting_in_an_ignored_member(self):
        header = (b'{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":' +
                  b"[" * 2_000_000 + b"]" * 2_000_000 + b"}}")
        self.assert_refused(self.st("deep", header, b"0"), EXIT["checkpoint"],
                            r"nested deeper than 128 levels", rss_limit_mb=64 * SLOWDOWN)

    def test_invalid_utf8_names(self):
        header = b'{"\xc0\xaf":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
        self.assert_refused(self.st("utf8", header, b"0"), EXIT["checkpoint"],
                            r"not well-formed UTF-8")

    def test_truncated_at_many_points(self):
        data = good_safetensors()
        for cut in sorted({1, 7, 8, 9, 20, len(data) // 2, len(data) - 21, len(data) - 1}):
            path = self.write(f"st_cut{cut}.safetensors", data[:cut])
            self.assert_refused(path, EXIT["checkpoint"],
                                r"too short|runs past the end|truncated")


def index_bytes(weight_map, metadata=None):
    return json.dumps({"metadata": metadata or {"total_size": 0},
                       "weight_map": weight_map}).encode()


class HostileIndexTests(HostileTestCase):
    def set_with(self, name, weight_map, shards=None, index_name="model.safetensors.index.json"):
        d = self.tmp / name
        d.mkdir()
        for shard, data in (shards or {"model-1.safetensors": good_safetensors()}).items():
            (d / shard).write_bytes(data)
        (d / index_name).write_bytes(index_bytes(weight_map) if isinstance(weight_map, dict)
                                     else weight_map)
        return d, d / index_name

    def test_paths_out_of_the_directory(self):
        for i, target in enumerate(["../../etc/passwd", "/etc/passwd", "..", "./model-1.safetensors",
                                    "sub/../../x", ""]):
            d, index = self.set_with(f"out{i}", {"a": "model-1.safetensors", "b": target})
            for path in (d, index):
                self.assert_refused(path, EXIT["checkpoint"],
                                    r'index: at byte \d+: weight_map: key "b" names the file .*'
                                    r"which could lead out of the index's directory")

    def test_missing_shard(self):
        d, index = self.set_with("missing", {"a": "model-1.safetensors",
                                             "b": "model-2-of-2.safetensors"})
        for path in (d, index):
            self.assert_refused(path, EXIT["io"], r'shard "model-2-of-2.safetensors" \(named by the '
                                                  r"index\): No such file or directory$")

    def test_shard_is_a_directory_or_a_loop(self):
        d, index = self.set_with("dir_shard", {"a": "model-1.safetensors", "b": "sub"})
        (d / "sub").mkdir()
        self.assert_refused(index, EXIT["io"], r'shard "sub" \(named by the index\): is a '
                                               r"directory")
        d, index = self.set_with("loop", {"a": "loop.safetensors"})
        os.symlink("loop.safetensors", d / "loop.safetensors")
        self.assert_refused(index, EXIT["checkpoint"], r'shard "loop.safetensors" .*: leads '
                                                       r"through a loop of symbolic links")

    def test_shards_that_are_not_regular_files(self):
        """A FIFO, a socket or a device named by the index: refused at once, never opened (a
        FIFO's open would wait for a writer); in a directory, a FIFO named model.safetensors
        is not a model."""
        d, index = self.set_with("fifo_shard", {"a": "model-1.safetensors", "b": "fifo"})
        os.mkfifo(d / "fifo")
        self.assert_refused(index, EXIT["io"], r'shard "fifo" \(named by the index\): not a '
                                               r"regular file$")
        _, index = self.set_with("device_shard", {"a": "model-1.safetensors", "b": "zero"})
        os.symlink("/dev/zero", index.parent / "zero")  # a link out of the directory, to boot
        self.assert_refused(index, EXIT["checkpoint"], r'shard "zero" \(named by the index\): '
                                                       r"leads out of the directory")
        fifo_dir = self.tmp / "fifo_model"
        fifo_dir.mkdir()
        os.mkfifo(fifo_dir / "model.safetensors")
        self.assert_refused(fifo_dir, EXIT["io"], r"nothing to mount")
        with self.assertRaises(OSError) as caught:  # nothing ever opened the FIFOs
            os.open(d / "fifo", os.O_WRONLY | os.O_NONBLOCK)
        self.assertEqual(caught.exception.errno, errno.ENXIO)

    def test_hostile_shard(self):
        d, index = self.set_with("bad_shard", {"a": "model-1.safetensors", "b": "bad.safetensors"},
                                 {"model-1.safetensors": good_safetensors(),
                                  "bad.safetensors": good_safetensors()[:-3]})
        self.assert_refused(index, EXIT["checkpoint"],
                            r'shard "bad.safetensors" \(named by the index\): .*truncated')

    def test_index_not_an_index(self):
        cases = {"not_json": (b"{weight_map}", r"index: invalid JSON at byte 1"),
                 "no_map": (b'{"metadata": {}}', r"index: no weight_map"),
                 "number": (b'{"weight_map": {"a": 1}}',
                            r'weight_map: the file of key "a" is not a string'),
                 "dup": (b'{"weight_map": {"a": "model-1.safetensors", '
                         b'"a": "model-1.safetensors"}}', r'has the key "a" twice'),
                 "array": (b'{"weight_map": ["a"]}', r"weight_map is not an object")}
        for name, (text, pattern) in cases.items():
            _, index = self.set_with(name, text)
            self.assert_refused(index, EXIT["checkpoint"], pattern)

    def test_directories_without_one_model(self):
        empty = self.tmp / "empty_dir"
        empty.mkdir()
        self.assert_refused(empty, EXIT["io"], r"nothing to mount")
        d, _ = self.set_with("two_indexes", {"a": "model-1.safetensors"}, index_name="a.index.json")
        (d / "b.index.json").write_bytes(index_bytes({"a": "model-1.safetensors"}))
        self.assert_refused(d, EXIT["io"], r'a directory of 2 checkpoints: "a.index.json" \(a '
                                           r'sharded set\), "b.index.json" \(a sharded set\): '
                                           r"name the one to mount, as in: ckptfs .*/a.index.json "
                                           r"MOUNTPOINT$")

    def test_key_its_shard_lacks_is_broken(self):
        d, index = self.set_with("lacks", {"a": "model-1.safetensors",
                                           "ghost": "model-1.safetensors"})
        r = self.inspect(index)
        self.assertEqual(r.returncode, 0, r.stderr)
        mnt, proc = self.mount(d)
        self.assertEqual(sorted(os.listdir(mnt)), [VIEWS_FOLDER, "a", "ghost"])  # b: unlisted
        self.assertEqual((mnt / "a" / "data").read_bytes(), floats(4))
        self.assertEqual(sorted(os.listdir(mnt / "ghost")), BROKEN_FILES)
        assert_read_fails(self, mnt / "ghost" / "data")
        self.assertRegex(json.loads((mnt / "ghost" / "meta.json").read_bytes())["broken"],
                         r'the index puts it in "model-1.safetensors", which has no tensor')
        index = json.loads((views_dir(mnt) / "index.json").read_bytes())
        self.assertEqual(index["total_bytes"], 16)
        self.unmount(mnt, proc)

    def test_huge_weight_map(self):
        """A million keys naming one shard that has none of them: a million broken tensors,
        inspected in bounded time and memory."""
        weight_map = {f"k{i}": "model-1.safetensors" for i in range(1_000_000)}
        _, index = self.set_with("huge_map", weight_map)
        r = self.inspect(index, rss_limit_mb=1024 * SLOWDOWN, json_output=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b"1000000 tensors (0 bytes), 0 values", r.stdout)


# --------------------------------------------------------------------------------------------
# ONNX models: protobuf with lengths that lie, nesting without end, declared sizes the file does
# not hold, external data files named outside the model's directory (issue 33)
# --------------------------------------------------------------------------------------------

def pb_varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def pb_bytes(field, payload):
    return pb_varint(field << 3 | 2) + pb_varint(len(payload)) + payload


def pb_int(field, n):
    return pb_varint(field << 3) + pb_varint(n)


def onnx_tensor(name, data_type, dims, rest=b""):
    return b"".join(pb_int(1, d) for d in dims) + pb_int(2, data_type) + pb_bytes(8, name) + rest


def onnx_external(location, offset=None):
    kv = [(b"location", location)] + ([(b"offset", str(offset).encode())] if offset else [])
    return b"".join(pb_bytes(13, pb_bytes(1, k) + pb_bytes(2, v)) for k, v in kv) + pb_int(14, 1)


def onnx_model(graph):
    """A ModelProto as torch.onnx.export writes one: ir_version first, the graph, an opset."""
    return pb_int(1, 8) + pb_bytes(2, b"hostile") + pb_bytes(7, graph) + \
        pb_bytes(8, pb_bytes(1, b"") + pb_int(2, 17))


class HostileOnnxTests(HostileTestCase):
    def test_lengths_past_the_end(self):
        good = onnx_model(pb_bytes(5, onnx_tensor(b"w", 1, [2], pb_bytes(9, floats(2)))))
        for cut in (len(good) - 3, len(good) // 2, 12):
            with self.subTest(cut=cut):
                path = self.write(f"cut_{cut}.onnx", good[:cut])
                self.assert_refused(path, EXIT["checkpoint"], r"looks truncated")

    def test_graphs_nested_without_end(self):
        """A graph in an If's branch in a graph... 3000 deep: refused at the nesting limit,
        walked without recursion."""
        graph = pb_bytes(2, b"g")
        for _ in range(3000):
            node = pb_bytes(4, b"If") + pb_bytes(5, pb_bytes(1, b"then") + pb_bytes(6, graph) +
                                                 pb_int(20, 5))
            graph = pb_bytes(1, node)
        path = self.write("deep.onnx", onnx_model(graph))
        self.assert_refused(path, EXIT["checkpoint"], r"nested more than 64 deep")

    def test_declared_sizes_the_file_lacks(self):
        """2 GB of raw_data declared in a tensor of a few bytes, a shape of 2^60 elements over 8
        bytes, a typed field of 2 values for 2^40: each tensor broken alone, never allocated."""
        huge_raw = pb_varint(9 << 3 | 2) + pb_varint(2 << 30) + floats(1)
        tensors = [onnx_tensor(b"huge_raw", 1, [1 << 29], huge_raw),
                   onnx_tensor(b"huge_shape", 1, [1 << 30, 1 << 30], pb_bytes(9, floats(2))),
                   onnx_tensor(b"huge_typed", 7, [1 << 40], pb_bytes(7, b"\x01\x02")),
                   onnx_tensor(b"fine", 1, [2], pb_bytes(9, floats(2)))]
        graph = b"".join(pb_bytes(5, t) for t in tensors)
        path = self.write("declared.onnx", onnx_model(graph))
        r = self.inspect(path)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        doc = {e["key"]: e for e in json.loads(r.stdout)["entries"]}
        self.assertRegex(doc["huge_raw"]["broken"], r"no valid protobuf.*past the end")
        self.assertRegex(doc["huge_shape"]["broken"], r"raw_data is 8 bytes")
        self.assertRegex(doc["huge_typed"]["broken"], r"holds 2 values")
        self.assertIsNone(doc["fine"]["broken"])
        mnt, proc = self.mount(path)
        for key in ("huge_raw", "huge_shape", "huge_typed"):
            assert_read_fails(self, mnt / key / "data")
        self.assertEqual((mnt / "fine" / "data").read_bytes(), floats(2))
        self.unmount(mnt, proc)

    def test_external_data_outside_the_models_directory(self):
        """A location with "..", an absolute one, a link leading out: the tensor broken, the
        file outside never served; a file beside the model is."""
        model_dir = self.tmp / "model_dir"
        model_dir.mkdir()
        secret = self.tmp / "secret.bin"
        secret.write_bytes(floats(2, 7))
        (model_dir / "link.bin").symlink_to(secret)
        (model_dir / "w.bin").write_bytes(b"head" + floats(2))
        graph = b"".join(pb_bytes(5, onnx_tensor(name, 1, [2], onnx_external(location)))
                         for name, location in ((b"dotdot", b"../secret.bin"),
                                                (b"absolute", str(secret).encode()),
                                                (b"link", b"link.bin"),
                                                (b"sub_dotdot", b"sub/../../secret.bin")))
        graph += pb_bytes(5, onnx_tensor(b"beside", 1, [2], onnx_external(b"w.bin", 4)))
        path = model_dir / "model.onnx"
        path.write_bytes(onnx_model(graph))
        mnt, proc = self.mount(path)
        for key in ("dotdot", "absolute", "link", "sub_dotdot"):
            with self.subTest(key):
                meta = json.loads((mnt / key / "meta.json").read_bytes())
                self.assertTrue(meta["broken"], key)
                assert_read_fails(self, mnt / key / "data")
        self.assertEqual((mnt / "beside" / "data").read_bytes(), floats(2))
        meta = json.loads((mnt / "beside" / "meta.json").read_bytes())
        self.assertEqual(meta["onnx"]["external"]["location"], "w.bin")
        self.assertEqual(meta["onnx"]["external"]["offset"], 4)
        self.unmount(mnt, proc)
