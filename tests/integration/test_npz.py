# SPDX-License-Identifier: MIT
"""Integration tests of .npz files (numpy.savez, savez_compressed): every key mounted and compared
with numpy.load's arrays (data, tensor.npy, tensor.pt, model.safetensors), Fortran order,
big-endian arrays, arrays ckptfs refuses to serve (object arrays are never unpickled), a large
savez_compressed member inflated on read (sequential, random and concurrent reads), pack, shapes
whose size overflows (broken), members whose CRC-32 does not match (EIO, pack and inspect
--verify refuse them), and the .npz files of CORPUS/formats.

The oracle: numpy.load of the same file (this Python's numpy), and torch.load for tensor.pt.
Run by ctest as `/usr/bin/python3 -m unittest -v test_npz` (see fixtures.py).
"""

import errno
import json
import mmap
import os
import sys
import unittest
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import ckptfs_safetensors as st  # noqa: E402
from fixtures import (CKPTFS, CORPUS, assert_random_and_concurrent_reads,  # noqa: E402
                      needs_corpus, views_dir)
from test_mount import MountTestCase, run  # noqa: E402

MiB = 1 << 20


def arrays():
    """The arrays of the stored fixture: every dtype torch has, layouts and byte orders."""
    rng = np.random.default_rng(3)
    out = {name: rng.standard_normal((3, 5)).astype(dtype)
           for name, dtype in [("f32", np.float32), ("f16", np.float16), ("f64", np.float64),
                               ("c64", np.complex64), ("c128", np.complex128)]}
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                  np.uint64):
        out[np.dtype(dtype).name] = rng.integers(0, 100, (4, 2, 3)).astype(dtype)
    out["bool"] = rng.random(7) > 0.5
    out["scalar"] = np.float64(2.5)
    out["empty"] = np.zeros((0, 3), np.float32)
    out["fortran"] = np.asfortranarray(rng.standard_normal((4, 6, 2)).astype(np.float32))
    out["big_f4"] = rng.standard_normal(9).astype(">f4")
    out["big_i8"] = np.arange(6, dtype=">i8").reshape(2, 3)
    out["big_fortran"] = np.asfortranarray(np.arange(12, dtype=">u2").reshape(3, 4))
    out["a key/with slash"] = np.arange(3, dtype=np.int32)
    return out


class NpzTests(MountTestCase):
    def write(self, name, compressed=False, **arrays_):
        path = self.tmp / name
        (np.savez_compressed if compressed else np.savez)(path, **arrays_)
        return path

    def check_mount(self, path, mnt):
        """Every key of numpy.load(path) against the mount: values bit for bit."""
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        with np.load(path, allow_pickle=False) as z:
            self.assertEqual([e["key"] for e in index["entries"]], z.files)
            _, exported = st.read_safetensors(views_dir(mnt) / "model.safetensors")
            exported = {t.name: t for t in exported}
            for entry in index["entries"]:
                key = entry["key"]
                d = mnt / entry["path"]
                meta = json.loads((d / "meta.json").read_text())
                try:
                    want = z[key]
                except ValueError:  # an object array: numpy will not either, unasked
                    self.assertIn("object array", meta["broken"])
                    self.assertEqual(os.listdir(d), ["meta.json"])
                    continue
                self.assertIsNone(meta["broken"], key)
                self.assertEqual(meta["shape"], list(want.shape), key)
                got = np.load(d / "tensor.npy")
                self.assertEqual(got.dtype, want.dtype, key)  # byte order included
                self.assertEqual(got.tobytes(), np.ascontiguousarray(want).tobytes(), key)
                # data: C order, the array's byte order
                self.assertEqual((d / "data").read_bytes(),
                                 np.ascontiguousarray(want).tobytes(), key)
                pt = torch.load(d / "tensor.pt")
                native = want.astype(want.dtype.newbyteorder("="))
                self.assertTrue(np.array_equal(pt.numpy(), native, equal_nan=True), key)
                if want.dtype != np.uint16 and want.dtype != np.uint32 and key in exported:
                    t = exported[key]
                    raw = t.read(views_dir(mnt) / "model.safetensors")
                    self.assertEqual(raw, np.ascontiguousarray(native).astype(
                        native.dtype.newbyteorder("<")).tobytes(), key)
        return index

    def test_stored_arrays_of_every_dtype_and_layout(self):
        data = arrays()
        path = self.write("plain.npz", **data)
        # What numpy.load gives as bytes (no .npy magic), an object array and a structured one.
        with zipfile.ZipFile(path, "a") as z:
            z.writestr("notes.txt", b"hello")
            z.writestr("objects.npy", _npy(np.array([{"a": 1}, None], dtype=object)))
            z.writestr("structured.npy",
                       _npy(np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")])))
        mnt, _ = self.mount(path)
        index = self.check_mount_with_extras(path, mnt)
        entries = {e["key"]: e for e in index["entries"]}
        self.assertIsNone(entries["objects"]["nbytes"])
        meta = json.loads((mnt / "structured" / "meta.json").read_text())
        self.assertIn("structured", meta["broken"])
        self.assertEqual((mnt / "notes.txt" / "data").read_bytes(), b"hello")
        meta = json.loads((mnt / "fortran" / "meta.json").read_text())
        self.assertFalse(meta["contiguous"])
        self.assertEqual(meta["stride"], [1, 4, 24])
        meta = json.loads((mnt / "big_f4" / "meta.json").read_text())
        self.assertEqual((meta["byteorder"], meta["numpy"]), ("big", ">f4"))

    def check_mount_with_extras(self, path, mnt):
        """check_mount() for the keys numpy.load reads as arrays; the others by hand."""
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        with np.load(path, allow_pickle=False) as z:
            self.assertEqual([e["key"] for e in index["entries"]], z.files)
            for entry in index["entries"]:
                key = entry["key"]
                if key in ("notes.txt", "objects", "structured"):
                    continue
                want = z[key]
                d = mnt / entry["path"]
                got = np.load(d / "tensor.npy")
                self.assertEqual(got.dtype, want.dtype, key)
                self.assertEqual(got.shape, want.shape, key)
                self.assertEqual(got.tobytes(), np.ascontiguousarray(want).tobytes(), key)
                self.assertEqual((d / "data").read_bytes(), np.ascontiguousarray(want).tobytes())
                native = want.astype(want.dtype.newbyteorder("="))
                # torch 1.13 loads no uint16 and up, and ignores a big-endian file's byteorder
                # record (test_gguf checks those with the sid root's torch).
                if (want.dtype.kind != "u" or want.dtype.itemsize == 1) and \
                        want.dtype.byteorder != ">":
                    pt = torch.load(d / "tensor.pt")
                    self.assertTrue(np.array_equal(pt.numpy(), native, equal_nan=True), key)
        return index

    def test_savez_compressed_inflated_on_read(self):
        rng = np.random.default_rng(9)
        big = rng.standard_normal(3_000_000).astype(np.float32)  # 12 MB, deflated ~11
        big[1_000_000:2_000_000] = 0  # a run that deflates well
        small = np.arange(10, dtype=np.int64)
        path = self.write("compressed.npz", compressed=True, big=big, small=small,
                          fortran=np.asfortranarray(np.arange(24.0).reshape(2, 3, 4)))
        mnt, proc = self.mount(path)
        self.check_mount(path, mnt)
        raw = big.tobytes()
        data = mnt / "big" / "data"
        # Random reads, behind and ahead of each other, and two threads at once.
        assert_random_and_concurrent_reads(self, data, raw,
                                           [len(raw) - 4096, 17, 6_000_000, 5, 11_999_000, 0])
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertEqual(index["sources"], ["compressed.npz", "compressed.npz/big.npy",
                                            "compressed.npz/small.npy",
                                            "compressed.npz/fortran.npy"])
        out = self.tmp / "packed.pth"
        r = run([CKPTFS, "pack", path, out])
        self.assertEqual(r.returncode, 0, r.stderr)
        packed = torch.load(out)
        self.assertTrue(np.array_equal(packed["big"].numpy(), big))

    def test_deflated_member_read_backwards_is_inflated_about_once(self):
        # Reads of 128 KiB (one request each) at every MiB of a deflated member, from its end to
        # its start, by O_DIRECT (each reaches the daemon; none is readahead's). Each resumes
        # from an access point kept as the first read inflated the member: the daemon reads
        # the deflated bytes about twice in all, where restarting from the member's start for
        # each read behind the last read them n / 2 times over (issue 29: quadratic).
        n, chunk = 24, 128 * 1024
        rng = np.random.default_rng(11)
        x = rng.standard_normal(n * MiB // 4).astype(np.float32)  # barely deflates: ~22 MiB
        path = self.write("backwards.npz", compressed=True, x=x)
        raw = x.tobytes()
        mnt, proc = self.mount(path)
        buf = mmap.mmap(-1, chunk)  # page-aligned, as O_DIRECT wants
        fd = os.open(mnt / "x" / "data", os.O_RDONLY | os.O_DIRECT)
        try:
            before = _bytes_read_by(proc.pid)
            for k in reversed(range(n)):
                os.lseek(fd, k * MiB, os.SEEK_SET)
                self.assertEqual(os.readv(fd, [buf]), chunk, k)
                self.assertEqual(buf[:], raw[k * MiB:k * MiB + chunk], k)
            read = _bytes_read_by(proc.pid) - before
        finally:
            os.close(fd)
            buf.close()
        self.assertLessEqual(read, 4 * path.stat().st_size,
                             f"the daemon read {read} bytes of a {path.stat().st_size}-byte "
                             f"file to serve {n} reads backwards")

    def test_shapes_whose_size_overflows_are_broken(self):
        # Counts past 2^64 (2^64 wraps to 0, 2^64 + 2 to 2) and bytes past a file: broken with
        # the reason, never an empty or a two-byte tensor; stored and deflated alike.
        path = self.tmp / "huge.npz"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("zero.npy", _npy_header("|u1", (1 << 32, 1 << 32)))
            z.writestr("two.npy", _npy_header("|u1", (3, 6148914691236517206)) + b"ab")
            z.writestr("bytes.npy", _npy_header("<f4", ((1 << 32) + 1, (1 << 32) - 1)))
            z.writestr("deflated.npy", _npy_header("<f8", (1 << 32, 1 << 32)),
                       compress_type=zipfile.ZIP_DEFLATED)
            z.writestr("fine.npy", _npy(np.arange(3, dtype=np.int16)))
        r = run([CKPTFS, "inspect", "--json", path])
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = {e["key"]: e for e in json.loads(r.stdout)["entries"]}
        for key, why in [("zero", "more elements than 64 bits count"),
                         ("two", "more elements than 64 bits count"),
                         ("bytes", "holds more bytes than a file can"),
                         ("deflated", "more elements than 64 bits count")]:
            self.assertIn(why, doc[key]["broken"] or "", key)
        mnt, _ = self.mount(path)
        for key in ("zero", "two", "bytes", "deflated"):
            meta = json.loads((mnt / key / "meta.json").read_text())
            self.assertIn("64 bits count" if key != "bytes" else "file can", meta["broken"], key)
        self.assertEqual(np.load(mnt / "fine" / "tensor.npy").tolist(), [0, 1, 2])

    def test_members_whose_crc_does_not_match_fail_with_eio(self):
        rng = np.random.default_rng(5)
        good = rng.standard_normal(50_000).astype(np.float32)  # 200 KB: several reads
        bad = rng.standard_normal(300_000).astype(np.float32)
        small = np.arange(100, dtype=np.int64)  # read whole by the open's first pages
        path = self.write("crc.npz", good=good, bad=bad, small=small)
        deflated = self.write("crc_deflated.npz", compressed=True, good=good, bad=bad)
        _flip_member_byte(path, "bad.npy", 1000)
        _flip_member_byte(path, "small.npy", 200)
        _set_member_crc(deflated, "bad.npy")
        # The oracle: numpy refuses both, by zipfile's CRC check.
        for p in (path, deflated):
            with np.load(p) as z, self.assertRaisesRegex(zipfile.BadZipFile, "Bad CRC-32"):
                z["bad"]
        for p in (path, deflated):
            mnt, proc = self.mount(p)
            self.assertEqual((mnt / "good" / "data").read_bytes(), good.tobytes(), p)
            self.assertTrue(np.array_equal(np.load(mnt / "good" / "tensor.npy"), good))
            for key in ["bad", "small"] if p == path else ["bad"]:
                d = mnt / key
                # A whole read, in order: the read that ends the member fails, so cp and
                # np.load fail; after that no read of it returns its bytes.
                with self.assertRaises(OSError) as e:
                    (d / "data").read_bytes()
                self.assertEqual(e.exception.errno, errno.EIO, (p, key))
                with self.assertRaises(OSError):
                    np.load(d / "tensor.npy")
                r = run(["cp", d / "tensor.pt", self.tmp / "copy.pt"])
                self.assertNotEqual(r.returncode, 0, (p, key))
                # Once the pages read before are dropped, even the first bytes fail.
                fd = os.open(d / "data", os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    with self.assertRaises(OSError):
                        os.pread(fd, 4096, 0)
                finally:
                    os.close(fd)
            with self.assertRaises(OSError):
                (views_dir(mnt) / "model.safetensors").read_bytes()
            self.assertRegex(self.output(proc), r"do not match the CRC-32 its zip records")
        # pack writes no member it could not check; without the bad ones it packs.
        out = self.tmp / "out.safetensors"
        for p in (path, deflated):
            r = run([CKPTFS, "pack", p, out])
            self.assertEqual(r.returncode, 4, r.stderr)
            self.assertIn(b"do not match the CRC-32", r.stderr)
            self.assertFalse(out.exists())
        r = run([CKPTFS, "pack", path, out, "--keys", "good"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # inspect --verify: every record checked, in one pass; the corrupt ones named.
        r = run([CKPTFS, "inspect", "--verify", path])
        self.assertEqual(r.returncode, 4, r.stderr)
        err = r.stderr.decode()
        self.assertIn('record "bad.npy"', err)
        self.assertIn('record "small.npy"', err)
        self.assertNotIn('"good.npy"', err)
        self.assertIn("3 of 3 records checked", r.stdout.decode())
        r = run([CKPTFS, "inspect", "--verify", deflated])
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn('record "bad.npy"', r.stderr.decode())
        sound = self.write("sound.npz", compressed=True, good=good)
        r = run([CKPTFS, "inspect", "--verify", sound])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("every CRC-32 matches", r.stdout.decode())

    @needs_corpus
    def test_corpus_npz_files(self):
        corpus = sorted((CORPUS / "formats").glob("*.npz"))
        self.assertEqual(len(corpus), 2, corpus)
        for path in corpus:
            mnt, _ = self.mount(path)
            self.check_mount(path, mnt)
            r = run([CKPTFS, "inspect", path])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("format npz", r.stdout.decode())


def _bytes_read_by(pid):
    """What process `pid` got from read(2) and pread(2) so far (/proc/PID/io rchar)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError(f"no rchar in /proc/{pid}/io")


def _npy_header(descr, shape):
    """A .npy header alone (version 1.0), for a shape no array can have."""
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, repr(tuple(shape)))
    d += " " * ((-(10 + len(d) + 1)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(d).to_bytes(2, "little") + d.encode()


def _member_data_offset(path, name):
    """Where a member's payload begins in its zip."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo(name)
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        n, e = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    return info, info.header_offset + 30 + n + e


def _flip_member_byte(path, name, at):
    """Corrupts one byte of a stored member: its CRC no longer matches."""
    _, data = _member_data_offset(path, name)
    with open(path, "r+b") as f:
        f.seek(data + at)
        b = f.read(1)
        f.seek(data + at)
        f.write(bytes([b[0] ^ 0x40]))


def _set_member_crc(path, name):
    """Records a wrong CRC-32 for a member (its bytes intact) in the central directory."""
    info, _ = _member_data_offset(path, name)
    raw = bytearray(path.read_bytes())
    wrong = (info.CRC ^ 0x1).to_bytes(4, "little")
    at = raw.find(b"PK\x01\x02")  # the central directory's entries: zipfile checks theirs
    while at >= 0:
        n = int.from_bytes(raw[at + 28:at + 30], "little")
        if raw[at + 46:at + 46 + n] == name.encode():
            raw[at + 16:at + 20] = wrong
        at = raw.find(b"PK\x01\x02", at + 4)
    path.write_bytes(raw)


def _npy(array):
    """The .npy bytes numpy writes for `array` (pickles allowed: to test that ckptfs refuses)."""
    import io
    f = io.BytesIO()
    np.lib.format.write_array(f, array, allow_pickle=True)
    return f.getvalue()


if __name__ == "__main__":
    unittest.main()
