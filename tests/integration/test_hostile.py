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

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import make_fixtures  # noqa: E402
from ckptfs_mounts import is_mounted  # noqa: E402
from fixtures import CKPTFS, fixture_path  # noqa: E402
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
    socket, a character device, a directory, or a symlink to one of them: inspect and the mount,
    in the foreground and as a daemon, fail at once with exit 2 and one line, never opening it."""

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
                 "directory": (self.new_dir("dir"), r"is a directory")}
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
        """inspect exits 0; `broken` keys are marked broken (meta.json only), `fine` keys
        (key -> expected data bytes) are served."""
        r = self.inspect(path)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        doc = {e["key"]: e for e in json.loads(r.stdout)["entries"]}
        for key, why in broken.items():
            self.assertRegex(doc[key]["broken"] or "", why, key)
        mnt, proc = self.mount(path)
        for key, why in broken.items():
            self.assertEqual(os.listdir(mnt / key), ["meta.json"], key)
            meta = json.loads((mnt / key / "meta.json").read_bytes())
            self.assertRegex(meta["broken"] or "", why, key)
        for key, data in fine.items():
            self.assertEqual((mnt / key / "data").read_bytes(), data, key)
            self.assertIsNone(json.loads((mnt / key / "meta.json").read_bytes())["broken"])
        index = json.loads((mnt / "index.json").read_bytes())
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
        index = json.loads((mnt / "index.json").read_bytes())
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
        for key in ("wraps_u64", "past_off_t"):
            self.assertRegex(doc[key]["broken"] or "", "do not fit a file", key)
        self.assertIsNone(doc["fits"]["broken"])
        self.assertEqual(doc["fits"]["nbytes"], 1 << 62)
        self.assertIsNone(doc["empty_far"]["file_offset"])
        mnt, proc = self.mount(path)
        index = json.loads((mnt / "index.json").read_bytes())
        # 9 tensors of 2^62 bytes: more than 2^64 in all, written exactly.
        self.assertEqual(index["total_bytes"], 9 * (1 << 62))
        for entry in os.listdir(mnt):
            os.stat(mnt / entry)
            if (mnt / entry).is_dir():
                for name in os.listdir(mnt / entry):
                    st = os.stat(mnt / entry / name)  # never EIO, never a negative size
                    self.assertGreaterEqual(st.st_size, 0, f"{entry}/{name}")
        self.assertEqual(os.listdir(mnt / "wraps_u64"), ["meta.json"])
        meta = json.loads((mnt / "past_off_t" / "meta.json").read_bytes())
        self.assertRegex(meta["broken"], "do not fit a file")
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


if __name__ == "__main__":
    unittest.main()
