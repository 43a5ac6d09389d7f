# SPDX-License-Identifier: MIT
"""Integration tests of the Python package (python/ckptfs, docs/PYTHON.md) with Debian's python3
and torch 1.13, against real mounts made by the binary under test:

  - every kind of checkpoint through ckptfs.open: each tensor equal, bit for bit, to torch.load
    of its tensor.pt and to np.load of its tensor.npy (the mount's own files), values decoded
    as torch.load gives them;
  - the fast path taken exactly where it may be: a .pth's records (zip and legacy), safetensors,
    a GGUF F32 tensor and a stored .npz member are read from the file itself (path_of "file");
    a big-endian .pth, -o dtype= converted tensors, assembled DCP and ZeRO tensors, a remote
    file over nginx, a deflated .npz member and a quantized GGUF tensor through the mount; and
    a file changed under the mount (rewritten in place with its size, or replaced) refused;
  - get_slice, meta, path_of, key selection, errors (ckptfs.Error with the program's line and
    status), the mount's life (with, close, garbage collection, a fork, an existing mountpoint);
  - load_into: strict as torch's load_state_dict, a prefix, the meta device, dtype conversion.

The package is imported from python/ of this repository; its ckptfs program is CKPTFS (through
CKPTFS_BINARY). Run by ctest as `/usr/bin/python3 -m unittest -v test_python`.
"""

import gc
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import ckptfs_reference as ref  # noqa: E402
from ckptfs_mounts import is_mounted, unmount  # noqa: E402
from fixtures import CKPTFS, CORPUS, fixture_path, model_fixture_path, needs_corpus  # noqa: E402
from remote_servers import Nginx  # noqa: E402

sys.path.insert(0, str(REPO / "python"))
os.environ["CKPTFS_BINARY"] = str(CKPTFS)
import ckptfs  # noqa: E402

FORMATS = CORPUS / "formats"
ZERO_SEED = REPO / "tests" / "fuzz" / "corpus" / "zero" / "zero3-fp16-ws3"


def bits(t):
    """A tensor's bytes in C order, whatever its dtype (bfloat16, complex32, quantized)."""
    if t.is_quantized:
        t = t.int_repr()
    t = t.contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def write_gguf(path, tensors):
    """A GGUF v3 file of [(name, ggml type, dims in GGUF order, raw bytes)], alignment 32."""
    def string(s):
        s = s.encode()
        return struct.pack("<Q", len(s)) + s
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    head += string("general.architecture") + struct.pack("<I", 8) + string("test")
    offset = 0
    infos, data = b"", b""
    for name, kind, dims, raw in tensors:
        infos += string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", kind, offset)
        padded = raw + b"\0" * (-len(raw) % 32)
        data += padded
        offset += len(padded)
    out = head + infos
    out += b"\0" * (-len(out) % 32)
    Path(path).write_bytes(out + data)


def unpack_zero_seed(seed, out):
    """A ZeRO checkpoint directory from a fuzz seed (tests/fuzz/zero_seed.py's records)."""
    b, i = seed.read_bytes(), 0
    while i < len(b):
        n = b[i]
        name = b[i + 1:i + 1 + n].decode()
        i += 1 + n
        size = int.from_bytes(b[i:i + 4], "little")
        i += 4
        p = out / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b[i:i + size])
        i += size
    return out


class PythonTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="ckptfs-python-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def open(self, source, **options):
        ck = ckptfs.open(source, **options)
        self.addCleanup(ck.close)
        return ck

    def check_against_mount(self, ck, limit=None):
        """Every tensor (the first `limit`) equal to the mount's tensor.pt and tensor.npy, and
        of the dtype and shape index.json says; every value as its value.json says."""
        checked = 0
        for key in list(ck)[:limit]:
            entry = ck._entries[key]
            d = Path(ck.mountpoint) / entry["path"]
            with self.subTest(key=key, format=ck.format):
                if entry["kind"] == "value":
                    j = json.loads((d / "value.json").read_text())
                    try:
                        want = ref.value_from_json(j)
                    except ref.NotPlain:  # described, not rebuilt: a Described somewhere
                        self.assertIn("ckptfs.Described", repr(ck[key]))
                        continue
                    if "ckptfs.Described" in ref.show(ck[key], 1 << 20):
                        continue  # a plain value holding what is not: as value.json says
                    self.assertTrue(ref.same_value(ck[key], want), ref.show(want))
                    continue
                if entry["nbytes"] is None:
                    with self.assertRaises(ckptfs.Error):
                        ck[key]
                    continue
                want_npy = np.load(d / "tensor.npy")
                got_npy = ck.numpy(key)
                self.assertEqual(got_npy.dtype.str, want_npy.dtype.str)
                self.assertEqual(got_npy.shape, want_npy.shape)
                self.assertEqual(got_npy.tobytes(), want_npy.tobytes())
                if entry["dtype"] in ("uint16", "uint32", "uint64") or (
                        entry["dtype"].startswith(("float8", "float4", "bits", "bcomplex"))):
                    with self.assertRaises(ckptfs.Error):  # torch 1.13 has no such dtype
                        ck[key]
                    continue
                want = ref.load_tensor_file(d / "tensor.pt")
                got = ck[key]
                self.assertIsInstance(got, torch.Tensor)
                self.assertEqual(got.dtype, want.dtype)
                self.assertEqual(got.shape, want.shape)
                self.assertEqual(bits(got), bits(want))
                if got.is_quantized:
                    self.assertEqual(got.qscheme(), want.qscheme())
                    self.assertEqual(bits(got.dequantize()), bits(want.dequantize()))
                checked += 1
        return checked


class FormatsTests(PythonTestCase):
    """Every kind of checkpoint through the API equals the mount's own files."""

    def test_fixtures(self):
        for name in ("dtypes", "views", "training", "values", "keys", "bigendian", "legacy",
                     "quantized", "params", "sparse"):
            with self.subTest(name):
                ck = self.open(fixture_path(name))
                self.assertGreater(self.check_against_mount(ck), 0)
                ck.close()
        for name in ("st_dtypes", "st_keys", "sharded_st", "sharded_bin"):
            with self.subTest(name):
                ck = self.open(model_fixture_path(name))
                self.assertGreater(self.check_against_mount(ck), 0)
                ck.close()

    def test_values_are_torch_loads(self):
        loaded = dict(ref.flatten(torch.load(fixture_path("values"))))
        with self.open(fixture_path("values")) as ck:
            values = [k for k in ck if ck._entries[k]["kind"] == "value"]
            self.assertGreater(len(values), 5)
            for key in values:
                if "ckptfs.Described" in ref.show(ck[key], 1 << 20):
                    continue  # not plain data (a float16 numpy scalar...): described
                self.assertTrue(ref.same_value(ck[key], loaded[key], types=False),
                                f"{key}: {ref.show(ck[key])} against {ref.show(loaded[key])}")
        with self.open(fixture_path("training")) as ck:
            self.assertEqual(ck["epoch"], 7)
            self.assertEqual(ck["args"]["betas"], (0.9, 0.999))
            self.assertIsInstance(ck["cli"], ckptfs.Described)
            self.assertEqual(ck["cli"]["__class__"], "argparse.Namespace")

    @needs_corpus
    def test_corpus(self):
        sources = [p for p in sorted(CORPUS.iterdir())
                   if p.is_file() and p.name != "PROVENANCE.tsv"]
        sources += [FORMATS / n for n in (
            "AliBayatMokhtari__mnist-tinygrad__model.safetensors",
            "FluxML__SafeTensors.jl__test-sharded",
            "Lightning-AI__pytorch-lightning__dcp-fsdp-world2",
            "huggingface__candle__candle-core-tests-test.npz",
            "cozy-creator__python-gen-worker__tests-testdata-stories260K.gguf",
            "Lightning-AI__pytorch-lightning__lightning_log-my-test.2b6c947da59e4ea8964c25ed"
            "7782eed9-artifacts-confusion_matrix-confusion_matrix.npz")]
        for source in sources:
            with self.subTest(source.name):
                try:
                    ck = self.open(source)
                except ckptfs.Error as e:
                    self.assertIn(e.status, (4, 5), e)  # refused by the program: said so
                    continue
                self.check_against_mount(ck, limit=12)
                ck.close()


class FastPathTests(PythonTestCase):
    """path_of(): "file" exactly where the mount publishes a plain local range."""

    def paths(self, ck):
        for key in ck:
            if ck._entries[key]["kind"] == "tensor" and ck._entries[key]["nbytes"]:
                ck.numpy(key)
        return {k: ck.path_of(k) for k in ck if ck._entries[k]["kind"] == "tensor"
                and ck._entries[k]["nbytes"]}

    def assert_all(self, ck, path):
        taken = self.paths(ck)
        self.assertTrue(taken)
        self.assertEqual({k for k, p in taken.items() if p != path}, set(),
                         f"not {path}: {taken}")
        self.check_against_mount(ck)

    def assert_contiguous_from_file(self, ck):
        """Every tensor that is one range of its file (meta.json's contiguous) is read from
        it, every other (a strided view, gathered) through the mount."""
        taken = self.paths(ck)
        for key, path in taken.items():
            contiguous = ck.meta(key)["contiguous"] and ck._entries[key]["dtype"] not in (
                "qint8", "quint8", "qint32")
            self.assertEqual(path, "file" if contiguous else "mount", key)
        self.assertIn("file", taken.values())
        self.check_against_mount(ck)
        return taken

    def test_pth_and_safetensors_records_are_read_from_the_file(self):
        # A directory's one checkpoint, and a Hugging Face hub cache snapshot (its file a link
        # to ../../blobs/SHA): members opened beneath the directory are local files too.
        folder = self.tmp / "folder"
        folder.mkdir()
        shutil.copy(model_fixture_path("st_dtypes"), folder / "model.safetensors")
        repo = self.tmp / "hub" / "models--org--name"
        (repo / "blobs").mkdir(parents=True)
        (repo / "snapshots" / "rev").mkdir(parents=True)
        shutil.copy(model_fixture_path("st_dtypes"), repo / "blobs" / "0123abcd")
        os.symlink("../../blobs/0123abcd", repo / "snapshots" / "rev" / "model.safetensors")
        for source in (fixture_path("dtypes"), fixture_path("legacy"),
                       model_fixture_path("st_dtypes"), model_fixture_path("sharded_st"),
                       folder, repo / "snapshots" / "rev"):
            with self.subTest(source.name):
                ck = self.open(source)
                index = ck.index
                self.assertTrue(all(f and f["path"].startswith("/") for f in
                                    index["source_files"]))
                self.assert_contiguous_from_file(ck)
                ck.close()

    def test_strided_views_read_through_the_mount(self):
        ck = self.open(fixture_path("views"))
        taken = self.assert_contiguous_from_file(ck)
        self.assertIn("mount", taken.values())

    def test_big_endian_is_read_through_the_mount(self):
        ck = self.open(fixture_path("bigendian"))
        self.assertEqual(ck.index["byteorder"], "big")
        taken = self.paths(ck)
        # One-byte elements are the same bytes in either order: only those may be mapped.
        for key, path in taken.items():
            meta = ck.meta(key)
            size = np.dtype(meta["numpy"]).itemsize
            self.assertEqual(path, "file" if size == 1 and meta["contiguous"] else "mount", key)
            if meta["contiguous"]:  # published as the big-endian range it is
                self.assertEqual(ck._entries[key]["file_range"]["byteorder"], "big")
        self.assertIn("file", taken.values())
        self.assertIn("mount", taken.values())
        self.check_against_mount(ck)

    def test_converted_tensors_are_read_through_the_mount(self):
        ck = self.open(fixture_path("dtypes"), dtype="float16")
        taken = self.paths(ck)
        for key, path in taken.items():
            meta = ck.meta(key)
            converted = meta["stored_dtype"] != meta["dtype"]
            self.assertEqual(path, "mount" if converted else "file", key)
        self.assertIn("mount", taken.values())
        self.check_against_mount(ck)

    @needs_corpus
    def test_assembled_dcp_tensors_are_read_through_the_mount(self):
        ck = self.open(FORMATS / "Lightning-AI__pytorch-lightning__dcp-fsdp-world2")
        for key in ck:
            if ck._entries[key]["kind"] == "tensor":
                self.assertIsNotNone(ck.meta(key)["pieces"], key)
        self.assert_all(ck, "mount")

    def test_assembled_zero_tensors_are_read_through_the_mount(self):
        d = unpack_zero_seed(ZERO_SEED, self.tmp / "zero")
        ck = self.open(d)
        self.assertEqual(ck.format, "zero")
        self.assertTrue(any(ck.meta(k)["pieces"] for k in ck))
        self.assert_all(ck, "mount")

    def test_remote_files_are_read_through_the_mount(self):
        root = self.tmp / "www"
        root.mkdir()
        shutil.copy(fixture_path("dtypes"), root / "dtypes.pth")
        shutil.copy(model_fixture_path("st_dtypes"), root / "st.safetensors")
        nginx = Nginx(root, self.tmp / "nginx", tls=False).start()
        self.addCleanup(nginx.stop)
        for name in ("dtypes.pth", "st.safetensors"):
            with self.subTest(name):
                ck = self.open(nginx.url(name))
                self.assertEqual(ck.index["source_files"], [None])
                self.assert_all(ck, "mount")
                ck.close()

    def test_npz_stored_members_are_mapped_deflated_ones_are_not(self):
        a = np.arange(24, dtype=np.float32).reshape(4, 6)
        b = np.arange(10, dtype=np.int64)
        np.savez(self.tmp / "stored.npz", a=a, b=b)
        np.savez_compressed(self.tmp / "deflated.npz", a=a, b=b)
        ck = self.open(self.tmp / "stored.npz")
        self.assert_all(ck, "file")
        self.assertEqual(ck.numpy("a").tobytes(), a.tobytes())
        ck = self.open(self.tmp / "deflated.npz")
        self.assert_all(ck, "mount")
        self.assertEqual(ck.numpy("b").tobytes(), b.tobytes())

    def test_gguf_f32_is_mapped_quantized_is_not(self):
        w = np.linspace(-1, 1, 64, dtype=np.float32)
        # Q8_0: blocks of 32, a float16 scale then 32 int8.
        q = b"".join(np.float16(0.5).tobytes() + bytes(range(i, i + 32)) for i in (0, 32))
        write_gguf(self.tmp / "m.gguf", [("w", 0, [64], w.tobytes()), ("q", 8, [64], q)])
        ck = self.open(self.tmp / "m.gguf")
        self.assertEqual(self.paths(ck), {"w": "file", "q": "mount"})
        self.assertEqual(ck.numpy("w").tobytes(), w.tobytes())
        want = np.concatenate([np.arange(0, 32), np.arange(32, 64)]).astype(np.float32) * 0.5
        self.assertEqual(ck.numpy("q").tolist(), want.tolist())
        self.check_against_mount(ck)

    def test_fast_path_false(self):
        ck = self.open(fixture_path("dtypes"), fast_path=False)
        self.assert_all(ck, "mount")

    def test_a_file_changed_under_the_mount_is_refused(self):
        for how in ("rewritten", "replaced"):
            with self.subTest(how):
                src = self.tmp / f"{how}.pth"
                torch.save({"w": torch.arange(4096, dtype=torch.float32)}, src)
                ck = self.open(src)
                self.assertEqual(ck.path_of("w"), "file")
                kept = ck["w"]  # made before the change: mapped, as documented
                data = src.read_bytes()
                st = src.stat()
                record = data.index(np.arange(4096, dtype=np.float32).tobytes())
                changed = bytearray(data)
                changed[record:record + 4] = np.float32(-1).tobytes()
                if how == "rewritten":  # the same inode and size, another mtime
                    with open(src, "r+b") as f:
                        f.write(changed)
                else:  # another inode, the same size and mtime
                    other = self.tmp / "other.pth"
                    other.write_bytes(changed)
                    os.replace(other, src)
                os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + (10**9 if how ==
                                                                       "rewritten" else 0)))
                self.assertEqual(ck.path_of("w"), "file")  # the path last taken
                with self.assertRaises(ckptfs.Error) as caught:
                    ck["w"]  # the mount refuses a changed checkpoint: EIO, never other bytes
                self.assertEqual(caught.exception.errno, 5, caught.exception)
                self.assertEqual(ck.path_of("w"), "mount")
                with self.assertRaises(ckptfs.Error):
                    ck.get_slice("w")[0:2]
                self.assertEqual(kept.shape, (4096,))
                ck.close()


class ApiTests(PythonTestCase):
    def test_keys_order_selection_and_mapping(self):
        index = None
        with self.open(fixture_path("training")) as ck:
            index = ck.index
            self.assertEqual(list(ck), [e["key"] for e in index["entries"]])
            self.assertEqual(len(ck), len(index["entries"]))
            self.assertIn("epoch", ck)
            self.assertIsNone(ck.get("nope"))
            with self.assertRaises(KeyError):
                ck["nope"]
            with self.assertRaises(ckptfs.Error):
                ck["nope"]
        sd = ckptfs.load_state_dict(fixture_path("training"), keys=["model.*"])
        self.assertEqual(list(sd), [e["key"] for e in index["entries"]
                                    if e["key"].startswith("model.")])
        ref_sd = torch.load(fixture_path("training"))["model"]
        for key, value in sd.items():
            self.assertTrue(torch.equal(value, ref_sd[key.removeprefix("model.")]), key)
        mnt = sd.mountpoint
        del sd
        gc.collect()
        self.assertFalse(is_mounted(mnt), "garbage collection left the mount")
        self.assertFalse(os.path.exists(mnt))

    def test_same_key_text_twice(self):
        with self.open(fixture_path("collisions")) as ck:
            keys = [e["key"] for e in ck.index["entries"]]
            self.assertEqual(len(list(ck)), len(keys))
            self.assertEqual(len(set(ck)), len(keys))
            self.assertGreater(len(keys), len(set(keys)))
            self.check_against_mount(ck)

    def test_get_slice(self):
        t = torch.arange(7 * 5 * 3, dtype=torch.float64).reshape(7, 5, 3)
        torch.save({"t": t, "s": torch.tensor(2.5), "bf": t.to(torch.bfloat16)}, self.tmp / "s.pth")
        for fast in (True, False):
            ck = self.open(self.tmp / "s.pth", fast_path=fast)
            for key in ("t", "bf"):
                s = ck.get_slice(key)
                self.assertEqual(s.path, "file" if fast else "mount")
                self.assertEqual(s.get_shape(), [7, 5, 3])
                self.assertEqual(s.get_dtype(), "float64" if key == "t" else "bfloat16")
                whole = ck[key]
                for index in (slice(2, 5), slice(None), slice(5, 2), slice(6, None, -2),
                              slice(-3, None), 3, -1, (slice(1, 4), 2), (0, slice(1, 3), 1),
                              (Ellipsis, 1), [0, 6]):
                    with self.subTest(key=key, index=index, fast=fast):
                        got = s[index]
                        want = whole.numpy()[index] if key == "t" else \
                            whole.view(torch.int16).numpy()[index]
                        got_bits = got.numpy() if key == "t" else got.view(torch.int16).numpy()
                        self.assertEqual(got_bits.shape, want.shape)
                        self.assertEqual(got_bits.tolist(), want.tolist())
                self.assertEqual(ck.get_slice(key, numpy=True)[1:2].shape, (1, 5, 3))
                with self.assertRaises(IndexError):
                    s[7]
                with self.subTest(key=key, fast=fast, call="readinto"):
                    self.check_readinto(s, whole)
            self.assertEqual(float(ck.get_slice("s")[()]), 2.5)
            ck.close()

    def check_readinto(self, s, whole):
        """Slice.readinto into each kind of buffer it takes, and refusals of the others."""
        bits = whole.view(torch.int16) if whole.dtype == torch.bfloat16 else whole
        row_bytes = bits[0].numel() * bits.element_size()
        array = np.zeros((2, 5, 3), np.uint16 if whole.dtype == torch.bfloat16 else np.float64)
        self.assertEqual(s.readinto(array, 5), 2)  # (numpy's dtype of the bits, as ck.numpy)
        self.assertEqual(array.tobytes(), bits[5:7].numpy().tobytes())
        tensor = torch.zeros(3, 5, 3, dtype=whole.dtype)
        self.assertEqual(s.readinto(tensor, 0), 3)
        self.assertTrue(torch.equal(tensor.view(bits.dtype), bits[0:3]))
        raw = bytearray(row_bytes)
        self.assertEqual(s.readinto(memoryview(raw), 6), 1)
        self.assertEqual(bytes(raw), bits[6].numpy().tobytes())
        self.assertEqual(s.readinto(bytearray(0), 7), 0)  # no rows, at the end: nothing read
        for bad in (np.empty((1, 5, 3), np.int8), np.empty(row_bytes + 1, np.uint8),
                    np.empty((4, 5, 3), array.dtype)[::2], bytes(row_bytes),
                    torch.zeros(15, dtype=torch.float16 if whole.dtype != torch.float16
                                else torch.float32), "text"):
            with self.assertRaises(ValueError, msg=type(bad)):
                s.readinto(bad, 0)
        for start in (-1, 7):
            with self.assertRaises(IndexError):
                s.readinto(bytearray(row_bytes), start)

    def test_meta_and_errors(self):
        mountpoints = self.tmp / "mountpoints"  # where the package makes its mountpoints here
        mountpoints.mkdir()
        self.addCleanup(setattr, tempfile, "tempdir", tempfile.tempdir)
        tempfile.tempdir = str(mountpoints)
        with self.open(fixture_path("training")) as ck:
            key = next(k for k in ck if k.startswith("model."))
            meta = ck.meta(key)
            self.assertEqual(meta["key"], key)
            self.assertEqual(meta, json.loads(
                (Path(ck.mountpoint) / ck._entries[key]["path"] / "meta.json").read_text()))
            for call in (ck.meta, ck.numpy, ck.get_slice):
                with self.assertRaises(ckptfs.Error):
                    call("epoch")
        with self.assertRaises(ckptfs.Error) as caught:
            ckptfs.open(self.tmp / "missing.pth")
        self.assertEqual(caught.exception.status, 2)
        self.assertRegex(str(caught.exception), r"^ckptfs: .*missing\.pth")
        with self.assertRaises(ckptfs.Error) as caught:
            ckptfs.open(fixture_path("dtypes"), bogus_option=3)
        self.assertEqual(caught.exception.status, 1)
        self.assertIn("bogus_option", str(caught.exception))
        for option in ({"layout": "rfc"}, {"files": "npy"}):
            with self.assertRaises(ckptfs.Error):
                ckptfs.open(fixture_path("dtypes"), **option)
        (self.tmp / "bad.pth").write_bytes(b"PK\x03\x04 not a zip at all" * 10)
        with self.assertRaises(ckptfs.Error) as caught:
            ckptfs.open(self.tmp / "bad.pth")
        self.assertIn(caught.exception.status, (3, 4))
        self.assertNotIn("\n", str(caught.exception))
        old = os.environ["CKPTFS_BINARY"]
        os.environ["CKPTFS_BINARY"] = str(self.tmp / "no-such-ckptfs")
        try:
            with self.assertRaises(ckptfs.Error) as caught:
                ckptfs.open(fixture_path("dtypes"))
            self.assertIn("CKPTFS_BINARY", str(caught.exception))
        finally:
            os.environ["CKPTFS_BINARY"] = old
        # No failed open left a mountpoint behind (only this test's: other tests mount too).
        self.assertEqual(os.listdir(mountpoints), [])

    def test_lifecycle(self):
        with self.open(fixture_path("dtypes")) as ck:
            mnt = ck.mountpoint
            self.assertTrue(is_mounted(mnt))
            self.assertTrue(os.path.basename(mnt).startswith("ckptfs-"))
            kept = ck["f32"] if "f32" in ck else ck[next(iter(ck))]
        self.assertFalse(is_mounted(mnt))
        self.assertFalse(os.path.exists(mnt))
        self.assertGreaterEqual(kept.numel(), 0)  # still readable: it maps the file
        with self.assertRaises(ckptfs.Error):
            ck[next(iter(ck._entries))]
        ck.close()  # again: nothing

        # A mountpoint that exists is used as it is, and stays mounted.
        mnt = self.tmp / "mnt"
        mnt.mkdir()
        r = subprocess.run([CKPTFS, fixture_path("dtypes"), mnt], capture_output=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.addCleanup(unmount, mnt)
        with ckptfs.open(mnt) as ck:
            self.assertEqual(ck.mountpoint, str(mnt))
            self.check_against_mount(ck, limit=3)
        self.assertTrue(is_mounted(mnt))
        with self.assertRaises(ckptfs.Error) as caught:
            ckptfs.open(mnt, dtype="float16")
        self.assertEqual(caught.exception.status, 1)

        # A forked child's exit never unmounts its parent's mount.
        ck = self.open(fixture_path("dtypes"))
        pid = os.fork()
        if pid == 0:
            ck.close()
            os._exit(0)
        os.waitpid(pid, 0)
        self.assertTrue(is_mounted(ck.mountpoint))
        self.check_against_mount(ck, limit=2)

    def test_without_torch(self):
        code = ("import sys; sys.modules['torch'] = None\n"
                f"sys.path.insert(0, {str(REPO / 'python')!r})\n"
                "import ckptfs, numpy\n"
                f"with ckptfs.open({str(fixture_path('dtypes'))!r}) as ck:\n"
                "    values = [ck[k] for k in ck]\n"
                "    assert all(isinstance(v, numpy.ndarray) for v in values), values\n"
                "    print(len(values))\n")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "CKPTFS_BINARY": str(CKPTFS)})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertGreater(int(r.stdout), 5)


class Net(nn.Module):
    def __init__(self, device=None, dtype=None):
        super().__init__()
        self.fc1 = nn.Linear(8, 16, device=device, dtype=dtype)
        self.bn = nn.BatchNorm1d(16, device=device, dtype=dtype)
        self.fc2 = nn.Linear(16, 4, device=device, dtype=dtype)


class LoadIntoTests(PythonTestCase):
    def setUp(self):
        super().setUp()
        torch.manual_seed(5)
        self.net = Net()
        self.net.bn.running_mean.uniform_()
        self.net.bn.num_batches_tracked.fill_(9)
        self.path = self.tmp / "train.pth"
        torch.save({"model": self.net.state_dict(), "epoch": 3}, self.path)

    def assert_loaded(self, model, dtype=None):
        for key, want in self.net.state_dict().items():
            got = model.state_dict()[key]
            if dtype is not None and want.is_floating_point():
                want = want.to(dtype)
            self.assertEqual(bits(got), bits(want), key)

    def test_into_a_model(self):
        model = Net()
        result = ckptfs.load_into(model, self.path, prefix="model.")
        self.assertEqual(result, ([], []))
        self.assert_loaded(model)
        with self.open(self.path) as ck:
            model = Net()
            ck.load_into(model, prefix="model.")
            self.assert_loaded(model)
            self.assertEqual({ck.path_of(k) for k in ck if k.startswith("model.")}, {"file"})
            model = Net()
            ckptfs.load_into(model, ck, prefix="model.")
            self.assert_loaded(model)
        model = Net()
        ckptfs.load_into(model, self.path, prefix="model.", fast_path=False)
        self.assert_loaded(model)

    def test_strict_as_torch(self):
        class Bigger(nn.Module):  # (no BatchNorm: torch 1.13's own hook fills a missing
            def __init__(self):   # num_batches_tracked, which load_into does not run)
                super().__init__()
                self.fc1 = nn.Linear(8, 16)
                self.fc2 = nn.Linear(16, 4)
                self.extra = nn.Linear(2, 2)
        torch.save({"model": {k: v for k, v in self.net.state_dict().items()
                              if k.startswith("fc")}, "epoch": 3}, self.tmp / "fc.pth")
        model = Bigger()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with self.assertRaises(ckptfs.Error) as caught:
            ckptfs.load_into(model, self.tmp / "fc.pth")  # no prefix: every key unexpected
        with self.assertRaises(RuntimeError) as torch_says:
            Bigger().load_state_dict(dict(ref.flatten(torch.load(self.tmp / "fc.pth"))))
        self.assertEqual(str(caught.exception), str(torch_says.exception))
        for k, v in model.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), f"{k} changed by a refused load")
        result = ckptfs.load_into(model, self.tmp / "fc.pth", prefix="model.", strict=False)
        self.assertEqual(result.missing_keys, ["extra.weight", "extra.bias"])
        self.assertEqual(result.unexpected_keys, [])
        for k, v in self.net.state_dict().items():
            if k.startswith("fc"):
                self.assertTrue(torch.equal(model.state_dict()[k], v), k)

        small = nn.Sequential(nn.Linear(8, 15))
        torch.save({"0.weight": torch.zeros(16, 8), "0.bias": torch.zeros(16)},
                   self.tmp / "m.pth")
        with self.assertRaises(ckptfs.Error) as caught:
            ckptfs.load_into(small, self.tmp / "m.pth", strict=False)
        with self.assertRaises(RuntimeError) as torch_says:
            small.load_state_dict(torch.load(self.tmp / "m.pth"), strict=False)
        self.assertEqual(str(caught.exception), str(torch_says.exception))

    def test_meta_device_and_another_dtype(self):
        model = Net(device="meta")
        with self.assertRaises(ckptfs.Error):
            ckptfs.load_into(model, self.path, prefix="model.")
        ckptfs.load_into(model, self.path, prefix="model.", device="cpu")
        self.assertEqual({p.device.type for p in model.state_dict().values()}, {"cpu"})
        self.assertIsInstance(model.fc1.weight, nn.Parameter)
        self.assert_loaded(model)
        model = Net(dtype=torch.float16)
        ckptfs.load_into(model, self.path, prefix="model.")
        self.assert_loaded(model, dtype=torch.float16)
        model = Net(dtype=torch.bfloat16)  # from a -o dtype=bfloat16 mount: no conversion here
        ckptfs.load_into(model, self.path, prefix="model.", dtype="bfloat16")
        self.assert_loaded(model, dtype=torch.bfloat16)
        model = Net()  # bfloat16 served, copy_'d into float32 parameters
        ckptfs.load_into(model, self.path, prefix="model.", dtype="bfloat16")
        for key, want in self.net.state_dict().items():
            if want.is_floating_point():
                want = want.to(torch.bfloat16).float()
            self.assertEqual(bits(model.state_dict()[key]), bits(want), key)

    def test_tied_weights_on_meta(self):
        class Tied(nn.Module):
            def __init__(self, device=None):
                super().__init__()
                self.a = nn.Linear(4, 4, bias=False, device=device)
                self.b = nn.Linear(4, 4, bias=False, device=device)
                self.b.weight = self.a.weight
        src = Tied()
        torch.save(src.state_dict(), self.tmp / "tied.pth")
        model = Tied(device="meta")
        ckptfs.load_into(model, self.tmp / "tied.pth", device="cpu")
        self.assertIs(model.a.weight, model.b.weight)
        self.assertTrue(torch.equal(model.a.weight, src.a.weight))


if __name__ == "__main__":
    unittest.main()
