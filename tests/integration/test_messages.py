# SPDX-License-Identifier: MIT
"""The messages for the mistakes people make (issue 21, items 6-10): every one is one line
naming the file and what to do, with the documented exit code.

- ImpostorTests: a Git LFS pointer, an HTML or XML page, a gzip, zstd, xz, bzip2 or 7-Zip file,
  a tar archive and an empty file, each saved under the name of every format ckptfs reads (.pth,
  .bin, .safetensors, .gguf, .npz, an *.index.json, a DCP .metadata), a shard of a sharded set
  and a DCP .distcp file: inspect and the mount say what the file is and what to do.
- ValidLookalikeTests: a valid file of every format with "ustar" at byte 257 (a tar archive's
  signature) is read as what it is, and said to be cut short when it is (issue 29, item 10).
- TruncatedTests: a file of every format cut short (an interrupted download): .pth (zip and
  legacy), TorchScript, .npz, safetensors, GGUF, a DCP .metadata and item file, a ZeRO rank's
  file; each says "the file looks truncated" and what to do, as README's troubleshooting does.
- MountpointTests: a mountpoint that does not exist, is no directory, is not empty; -o rw,
  -o nonempty.
- CommandLineTests: -h/--help of every subcommand, --dtype given to a mount, pack's outputs
  (.ckpt, upper-case suffixes).
"""
import bz2
import gzip
import io
import json
import lzma
import os
import re
import select
import shutil
import stat
import struct
import subprocess
import sys
import tarfile
import unittest
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from fixtures import require  # noqa: E402

require("fuse", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ckptfs_mounts import is_mounted  # noqa: E402
from fixtures import (CKPTFS, CORPUS, processes_with_arg, syslog_listens,  # noqa: E402
                      wait_until)
from test_mount import MountTestCase, run  # noqa: E402

EXIT = {"usage": 1, "io": 2, "zip": 3, "checkpoint": 4, "unsupported": 5, "mount": 6}

LFS_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
               b"size 2336927755\n")


def tar_bytes():
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        data = b"not a checkpoint\n"
        info = tarfile.TarInfo("checkpoints/model.pth")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# (name, bytes, exit code, what the line says, what it tells to do)
IMPOSTORS = [
    ("lfs", LFS_POINTER, "io", r"a Git LFS pointer, not the file it stands for "
     r"\(2336927755 bytes, never downloaded\)", r"run `git lfs pull`"),
    ("html", b"\n<!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>\n", "io",
     r"an HTML page, not a checkpoint", r"download the file itself again"),
    ("html_bom", b"\xef\xbb\xbf<HTML><body>Access denied</body></HTML>", "io",
     r"an HTML page, not a checkpoint", r"download the file itself again"),
    ("xml", b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code></Error>',
     "io", r"an XML document, not a checkpoint", r"download the file itself again"),
    ("gzip", gzip.compress(b"x" * 1000), "unsupported", r"a gzip-compressed file",
     r"decompress it first \(gunzip"),
    ("zstd", b"(\xb5/\xfd\x04X1\x00\x00hello\nS\x88\xbd\x91", "unsupported",
     r"a zstd-compressed file", r"decompress it first \(unzstd"),
    ("xz", lzma.compress(b"x" * 1000), "unsupported", r"an xz-compressed file",
     r"decompress it first \(unxz"),
    ("bzip2", bz2.compress(b"x" * 1000), "unsupported", r"a bzip2-compressed file",
     r"decompress it first \(bunzip2"),
    ("7z", b"7z\xbc\xaf\x27\x1c\x00\x04" + bytes(24), "unsupported", r"a 7-Zip archive",
     r"extract it first \(7z x\)"),
    ("tar", tar_bytes(), "unsupported",
     r'a tar archive \(its first member "checkpoints/model.pth"\)', r"extract it first \(tar -xf\)"),
    ("empty", b"", "checkpoint", r"an empty file \(an interrupted download\?\)", r""),
]

# The names an impostor is saved under: one per format ckptfs reads.
NAMES = ["model.pth", "pytorch_model.bin", "model.safetensors", "model.gguf", "arrays.npz",
         "model.safetensors.index.json", "model.ckpt"]


class MessageTestCase(MountTestCase):
    def assert_refused(self, path, code, pattern, mount=True, shown=None):
        """inspect (and the mount) of `path` fail with `code`, nothing on stdout, and one line
        on stderr: "ckptfs: PATH: " then `pattern`."""
        shown = str(shown or path)
        commands = [["inspect", path]]
        if mount:
            commands.append([path, self.new_dir()])
        for args in commands:
            r = run([CKPTFS, *args])
            err = r.stderr.decode("utf-8", "replace")
            where = f"ckptfs {' '.join(map(str, args))}"
            self.assertEqual(r.returncode, EXIT[code], f"{where}: exit status; stderr: {err}")
            self.assertEqual(r.stdout, b"", f"{where}: stdout")
            self.assertEqual(err.count("\n"), 1, f"{where}: not one line: {err!r}")
            self.assertRegex(err, "^ckptfs: " + re.escape(shown) + ": " + pattern, where)
        return err


class ImpostorTests(MessageTestCase):
    def test_every_reader_names_every_impostor(self):
        for kind, data, code, what, todo in IMPOSTORS:
            for name in NAMES:
                with self.subTest(kind=kind, name=name):
                    d = self.new_dir("impostor")
                    path = d / name
                    path.write_bytes(data)
                    # The mount is tried for a few (each is a mount attempt): inspect for all.
                    err = self.assert_refused(path, code, what,
                                              mount=name in ("model.pth", "model.safetensors"))
                    self.assertIn(re.sub(r"\\(.)", r"\1", todo), err)

    def test_dcp_metadata_and_directory(self):
        """A DCP .metadata that is an impostor: named by its path, the directory's too."""
        for kind, data, code, what, _ in IMPOSTORS:
            if kind == "empty":
                continue  # an empty .metadata is the DCP reader's own case
            with self.subTest(kind=kind):
                d = self.new_dir("dcp")
                (d / ".metadata").write_bytes(data)
                (d / "__0_0.distcp").write_bytes(b"\0" * 64)
                self.assert_refused(d / ".metadata", code, what, mount=False)
                self.assert_refused(d, code, r'"\.metadata": ' + what)

    def test_a_shard_that_is_an_lfs_pointer(self):
        """A clone without `git lfs pull`: the index is JSON, its shards are pointers."""
        d = self.new_dir("sharded")
        (d / "model.safetensors.index.json").write_text(json.dumps({
            "metadata": {"total_size": 8},
            "weight_map": {"a": "model-00001-of-00002.safetensors",
                           "b": "model-00002-of-00002.safetensors"}}))
        for i in (1, 2):
            (d / f"model-0000{i}-of-00002.safetensors").write_bytes(LFS_POINTER)
        self.assert_refused(d / "model.safetensors.index.json", "io",
                            r'shard "model-00001-of-00002.safetensors" \(named by the index\): '
                            r"a Git LFS pointer, not the file it stands for")

    def test_a_distcp_file_that_is_an_lfs_pointer(self):
        """Its tensors are broken, each saying why (DCP reads its files as needed)."""
        corpus = CORPUS / "formats" / "Lightning-AI__pytorch-lightning__dcp-fsdp-world2"
        if not corpus.is_dir():
            self.skipTest(f"{corpus} is missing")
        src = self.new_dir("dcp-src") / "dcp"
        shutil.copytree(corpus, src)
        distcp = sorted(src.glob("*.distcp"))
        self.assertTrue(distcp)
        for f in distcp:
            f.write_bytes(LFS_POINTER)
        r = run([CKPTFS, "inspect", src])
        text = (r.stdout + r.stderr).decode()
        self.assertIn("a Git LFS pointer", text, text)

    def test_a_real_checkpoint_is_no_impostor(self):
        """A safetensors file whose header length's low bytes spell gzip's magic (1f 8b 08)
        is still read: its ninth byte opens the JSON header."""
        header = {"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
        text = json.dumps(header).encode()
        length = 0x088B1F  # 1f 8b 08 00 ...: gzip's magic, deflate, no flags
        text += b" " * (length - len(text))
        path = self.tmp / "gzip-like.safetensors"
        path.write_bytes(struct.pack("<Q", length) + text + b"\x07")
        r = run([CKPTFS, "inspect", path])
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        self.assertIn(b"1 tensors", r.stdout)


def gguf_bytes(name, tensor=b"\0" * 16):
    """A GGUF v3 file with general.name `name` and one float32 tensor "w" of `tensor`'s bytes."""
    def text(b):
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    out += text(b"general.name") + struct.pack("<I", 8) + text(name)
    out += text(b"w") + struct.pack("<IQIQ", 1, len(tensor) // 4, 0, 0)
    return out + b"\0" * (-len(out) % 32) + tensor


def spelled_at_257(write, word=b"ustar"):
    """What `write(text)` writes (a file with `text` as a key, a name or a value), with `text`
    chosen so that the file's bytes 257-261 spell `word`. Written again until they do: a writer
    may move the text between two writes (torch.jit.script names a class scripted twice
    anew)."""
    text = "m" * 400
    for _ in range(5):
        data = write(text)
        if data[257:257 + len(word)] == word:
            return text
        at = data.find(text.encode())
        assert 0 <= at <= 257 and at + len(text) >= 257 + len(word), at
        text = "m" * (257 - at) + word.decode() + "m" * (400 - (257 - at) - len(word))
    raise AssertionError(f"{word!r} is not at byte 257 of what {write} writes")


class ValidLookalikeTests(MessageTestCase):
    """Valid files whose bytes happen to spell an impostor's signature, where their format lets
    them: "ustar" at byte 257 from a key, a member's name or a value (a key "mustard"). Each is
    read as what it is: the impostor test only names what a file is once its own format has
    failed to read it (issue 29, item 10). Their first bytes are the format's own, so byte 257
    is the one place left (a safetensors header length's low bytes: test_a_real_checkpoint_is_
    no_impostor)."""

    def lookalikes(self, d):
        """{file name: (path, key, the key's values)} of a file per format, each with "ustar" at
        257."""
        values = torch.arange(4, dtype=torch.float32)

        def torch_save(name, **kw):
            def write(key):
                torch.save({key: values}, d / name, **kw)
                return (d / name).read_bytes()
            return write

        def torchscript(key):
            m = torch.jit.script(Buffered(key, values))
            m.save(str(d / "model.jit"))
            return (d / "model.jit").read_bytes()

        def npz(key):
            np.savez(d / "arrays.npz", **{key: values.numpy()})
            return (d / "arrays.npz").read_bytes()

        def safetensors(key):
            (d / "model.safetensors").write_bytes(safetensors_bytes(key, values))
            return (d / "model.safetensors").read_bytes()

        def gguf(name):
            (d / "model.gguf").write_bytes(gguf_bytes(name.encode(), values.numpy().tobytes()))
            return (d / "model.gguf").read_bytes()

        def index(key):
            (d / "model.safetensors.index.json").write_text(json.dumps(
                {"metadata": {"total_size": 16},
                 "weight_map": {key: "model-00001-of-00001.safetensors"}}))
            return (d / "model.safetensors.index.json").read_bytes()

        out = {}
        for name, write in [("model.pth", torch_save("model.pth")),
                            ("legacy.pth", torch_save("legacy.pth",
                                                      _use_new_zipfile_serialization=False)),
                            ("model.jit", torchscript), ("arrays.npz", npz),
                            ("model.safetensors", safetensors)]:
            out[name] = (d / name, spelled_at_257(write), values)
        out["model.gguf"] = (d / "model.gguf", "w", values)
        spelled_at_257(gguf)
        key = spelled_at_257(index)
        (d / "model-00001-of-00001.safetensors").write_bytes(safetensors_bytes(key, values))
        out["model.safetensors.index.json"] = (d / "model.safetensors.index.json", key, values)
        return out

    def test_every_format_with_ustar_at_257_is_read(self):
        d = self.new_dir("lookalikes")
        lookalikes = self.lookalikes(d)
        for name, (path, key, values) in lookalikes.items():
            with self.subTest(name=name):
                self.assertEqual(path.read_bytes()[257:262], b"ustar")
                r = run([CKPTFS, "inspect", "--json", path])
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                self.assertIn(key, [e["key"] for e in json.loads(r.stdout)["entries"]])
        # Mounted, its values are the ones written; a directory holding one is chosen and read.
        for name in ("model.pth", "model.gguf"):
            path, key, values = lookalikes[name]
            alone = self.new_dir("alone")
            shutil.copy(path, alone / name)
            for what in (path, alone):
                m, proc = self.mount(what)
                index = json.loads((m / ".ckptfs" / "index.json").read_bytes())
                entry = next(e for e in index["entries"] if e["key"] == key)
                got = np.load(m / entry["path"] / "tensor.npy")
                self.assertTrue(np.array_equal(got, values.numpy()), (name, what))
                self.unmount(m, proc)

    def test_a_file_cut_short_is_not_named_for_its_bytes(self):
        """Once its format has failed, a file with "ustar" at 257 but no tar header (no
        checksum) is no tar archive: its reader's own error is told."""
        d = self.new_dir("cut-lookalikes")
        for name, (path, _, _) in self.lookalikes(d).items():
            if name.endswith(".json"):
                continue  # a JSON text cut short is no JSON: test_index_not_an_index
            with self.subTest(name=name):
                data = path.read_bytes()
                path.write_bytes(data[:max(300, len(data) * 6 // 10)])
                r = run([CKPTFS, "inspect", path])
                self.assertNotEqual(r.returncode, 0)
                self.assertNotIn(b"tar", r.stderr)


class Buffered(torch.nn.Module):
    """A module of one buffer named `key`, for torch.jit.script."""

    def __init__(self, key, values):
        super().__init__()
        self.register_buffer(key, values)

    def forward(self, x):
        return x


def safetensors_bytes(key, values):
    header = json.dumps({key: {"dtype": "F32", "shape": list(values.shape),
                               "data_offsets": [0, values.numel() * 4]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + values.numpy().tobytes()


LOOKS_TRUNCATED = (r"the file looks truncated \(an interrupted download or copy\?\): download "
                   r"or copy it again$")


class TruncatedTests(MessageTestCase):
    def cut(self, path, fraction=0.6):
        data = path.read_bytes()
        path.write_bytes(data[:int(len(data) * fraction)])
        return path

    def test_truncated_pth(self):
        path = self.tmp / "model.pth"
        torch.save({"w": torch.zeros(4096), "b": torch.ones(16)}, path)
        self.cut(path)
        self.assert_refused(path, "zip", r"no end of central directory record in the last \d+ "
                            r"bytes: the file looks truncated \(an interrupted download or "
                            r"copy\?\): download or copy it again$")

    def test_truncated_npz(self):
        path = self.tmp / "arrays.npz"
        np.savez(path, a=np.zeros(4096), b=np.ones(16))
        self.cut(path)
        self.assert_refused(path, "zip", r".*the file looks truncated")

    def test_truncated_safetensors(self):
        path = self.tmp / "model.safetensors"
        path.write_bytes(safetensors_bytes("w", torch.zeros(4096)))
        self.cut(path)
        self.assert_refused(path, "checkpoint", r"the tensors' data runs to byte 16464 of the "
                            r"file, past its end \(\d+ bytes\): " + LOOKS_TRUNCATED)
        path.write_bytes(path.read_bytes()[:40])  # in the header
        self.assert_refused(path, "checkpoint", r"safetensors header length \d+ runs past the "
                            r"end of the file \(\d+ bytes\): " + LOOKS_TRUNCATED, mount=False)

    def test_truncated_legacy_stream(self):
        """Cut in its storages, or in its pickles: every cut says so."""
        path = self.tmp / "legacy.pth"
        torch.save({"w": torch.zeros(4096), "b": torch.ones(16)}, path,
                   _use_new_zipfile_serialization=False)
        whole = path.read_bytes()
        self.cut(path)
        self.assert_refused(path, "checkpoint", r'storage "\d+" declares 4096 elements of 4 bytes '
                            r"at byte \d+, past the end of the file \(\d+ bytes\): " +
                            LOOKS_TRUNCATED)
        for cut in (5, 40, 200, 400):
            path.write_bytes(whole[:cut])
            with self.subTest(cut=cut):
                self.assert_refused(path, "checkpoint", r".*: " + LOOKS_TRUNCATED, mount=False)

    def test_truncated_torchscript(self):
        path = self.tmp / "model.jit"
        torch.jit.script(torch.nn.Linear(64, 64)).save(str(path))
        self.cut(path)
        self.assert_refused(path, "zip", r"no end of central directory record in the last \d+ "
                            r"bytes: " + LOOKS_TRUNCATED)

    def test_truncated_gguf(self):
        """Cut in its tensors' data or in its header: the tensor or the byte, and the words of
        README's troubleshooting table."""
        path = self.tmp / "model.gguf"
        whole = gguf_bytes(b"cut", bytes(16384))
        path.write_bytes(whole)
        self.cut(path)
        self.assert_refused(path, "checkpoint", r'GGUF tensor "w" \(info at byte \d+\): its '
                            r"16384 bytes at offset 0 of the data \(byte \d+\) run past the end of "
                            r"the file \(\d+ bytes\): " + LOOKS_TRUNCATED)
        path.write_bytes(whole[:50])
        self.assert_refused(path, "checkpoint", r"GGUF header: byte \d+ needs \d+ more bytes, past "
                            r"the end of the file \(50 bytes; or a count or length lies\): " +
                            LOOKS_TRUNCATED, mount=False)

    def test_truncated_dcp_item_file(self):
        """A .distcp file cut short: the tensors whose items it lacks are broken, saying so."""
        corpus = CORPUS / "formats" / "Lightning-AI__pytorch-lightning__dcp-fsdp-world2"
        if not corpus.is_dir():
            self.skipTest(f"{corpus} is missing")
        d = self.tmp / "dcp"
        shutil.copytree(corpus, d)
        d.chmod(0o755)
        for f in d.iterdir():
            f.chmod(0o644)
        self.cut(d / "__1_0.distcp")
        r = run([CKPTFS, "inspect", "--json", d])
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        broken = [e["broken"] for e in json.loads(r.stdout)["entries"] if e.get("broken")]
        self.assertTrue(broken)
        for why in broken:
            self.assertRegex(why, r'of "__1_0.distcp" runs past the end of the file \(\d+ bytes\): ' +
                             LOOKS_TRUNCATED)

    def test_truncated_dcp_metadata(self):
        corpus = CORPUS / "formats" / "Lightning-AI__pytorch-lightning__dcp-fsdp-world2"
        if not corpus.is_dir():
            self.skipTest(f"{corpus} is missing")
        d = self.tmp / "dcp-meta"
        shutil.copytree(corpus, d)
        d.chmod(0o755)
        for f in d.iterdir():
            f.chmod(0o644)
        self.cut(d / ".metadata")
        self.assert_refused(d / ".metadata", "checkpoint", r"\.metadata: invalid pickle at byte "
                            r"\d+: .*: " + LOOKS_TRUNCATED, mount=False)

    def test_truncated_zero_file(self):
        """A DeepSpeed rank's file cut short: named, and said to be cut short."""
        corpus = CORPUS / "formats" / ("bigyanghimire__deepspeed-experiments__"
                                       "zero3-bert-model-states-only")
        if not corpus.is_dir():
            self.skipTest(f"{corpus} is missing")
        d = self.tmp / "zero"
        shutil.copytree(corpus, d)
        d.chmod(0o755)
        for f in d.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)
        self.cut(d / "global_step99" / "zero_pp_rank_0_mp_rank_00_model_states.pt")
        self.assert_refused(d, "zip", r'"global_step99/zero_pp_rank_0_mp_rank_00_model_states\.pt": '
                            r"no end of central directory record in the last \d+ bytes: " +
                            LOOKS_TRUNCATED, mount=False)


class MountpointTests(MessageTestCase):
    def checkpoint(self):
        path = self.tmp / "model.pth"
        torch.save({"w": torch.zeros(4)}, path)
        return path

    def test_missing_mountpoint(self):
        missing = self.tmp / "not" / "there"
        r = run([CKPTFS, self.checkpoint(), missing])
        self.assertEqual(r.returncode, EXIT["mount"], r.stderr)
        self.assertEqual(r.stderr.decode(),
                         f"ckptfs: {missing}: the mountpoint does not exist: create it with "
                         f"mkdir -p {missing}\n")

    def test_missing_mountpoint_with_a_space(self):
        missing = self.tmp / "my models"
        r = run([CKPTFS, self.checkpoint(), missing])
        self.assertEqual(r.returncode, EXIT["mount"])
        self.assertIn(f"mkdir -p '{missing}'", r.stderr.decode())

    def test_mountpoint_that_is_a_file(self):
        f = self.tmp / "file"
        f.write_text("x")
        r = run([CKPTFS, self.checkpoint(), f])
        self.assertEqual(r.returncode, EXIT["mount"])
        self.assertEqual(r.stderr.decode(), f"ckptfs: {f}: the mountpoint is not a directory\n")

    def test_nonempty_mountpoint_is_mounted_with_a_warning(self):
        """As fusermount3 does (fuse3 has no `nonempty`: it always mounts over), and said once:
        what the directory held is hidden until the unmount."""
        mnt = self.new_dir()
        (mnt / "mine.txt").write_text("x")
        (mnt / "other").mkdir()
        m, proc = self.mount(self.checkpoint(), mnt=mnt)
        self.assertTrue((m / "w" / "data").is_file())
        self.assertIn(f'ckptfs: warning: "{mnt}" is not empty: its 2 entries are hidden until '
                      f"it is unmounted\n", self.output(proc))
        self.unmount(m, proc)
        self.assertTrue((mnt / "mine.txt").is_file())

    def test_nonempty_option_is_refused_as_fusermount3_does(self):
        r = run([CKPTFS, "-o", "nonempty", self.checkpoint(), self.new_dir()])
        self.assertEqual(r.returncode, EXIT["usage"])
        self.assertIn("unsupported mount option 'nonempty'", r.stderr.decode())

    def test_rw_is_ignored_with_a_warning(self):
        m, proc = self.mount(self.checkpoint(), "-o", "rw")
        self.assertIn("ckptfs: warning: -o rw ignored: the mount is read-only (writes fail "
                      "with EROFS); say ro\n", self.output(proc))
        with self.assertRaises(OSError) as caught:
            open(m / "new", "w")
        self.assertEqual(caught.exception.errno, 30)  # EROFS
        self.unmount(m, proc)

    def test_busy_mountpoint_says_how_to_unmount(self):
        m, proc = self.mount(self.checkpoint())
        r = run([CKPTFS, self.checkpoint(), m])
        self.assertEqual(r.returncode, EXIT["mount"])
        self.assertIn(f"already a mount point: unmount it first (fusermount3 -u {m})",
                      r.stderr.decode())
        self.unmount(m, proc)


class CommandLineTests(MessageTestCase):
    def test_every_subcommand_takes_help(self):
        for args, first in ((["-h"], "usage: ckptfs [options]"),
                            (["--help"], "usage: ckptfs [options]"),
                            (["inspect", "-h"], "usage: ckptfs inspect"),
                            (["inspect", "--help"], "usage: ckptfs inspect"),
                            (["inspect", "model.pth", "--help"], "usage: ckptfs inspect"),
                            (["pack", "-h"], "usage: ckptfs pack"),
                            (["pack", "--help"], "usage: ckptfs pack")):
            with self.subTest(args=args):
                r = run([CKPTFS, *args])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.decode().startswith(first), r.stdout[:80])
                self.assertEqual(r.stderr, b"")

    def test_inspect_usage_errors_point_at_its_help(self):
        r = run([CKPTFS, "inspect", "--frobnicate", "x.pth"])
        self.assertEqual(r.returncode, EXIT["usage"])
        self.assertEqual(r.stderr.decode(), "ckptfs: inspect: unknown option \"--frobnicate\" "
                         "(try 'ckptfs inspect --help')\n")

    def test_mount_options_given_as_long_options(self):
        for arg, hint in (("--dtype", "-o dtype=VALUE"), ("--dtype=float16", "-o dtype=VALUE"),
                          ("--layout=rfc", "-o layout=VALUE"), ("--allow_other", "-o allow_other"),
                          ("--keys", "an option of ckptfs pack"),
                          ("--json", "an option of ckptfs inspect")):
            with self.subTest(arg=arg):
                r = run([CKPTFS, arg, "float16", "model.pth", self.tmp])
                self.assertEqual(r.returncode, EXIT["usage"])
                self.assertEqual(r.stderr.decode(),
                                 f"ckptfs: unknown option '{arg}': {'a mount takes it as ' if '-o' in hint else ''}"
                                 f"{hint} (try 'ckptfs --help')\n")

    def test_pack_writes_ckpt_and_any_case(self):
        src = self.tmp / "model.pth"
        sd = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4)}
        torch.save(sd, src)
        for name in ("out.ckpt", "OUT.PTH", "Out.Bin", "MODEL.SAFETENSORS"):
            with self.subTest(name=name):
                out = self.tmp / name
                r = run([CKPTFS, "pack", src, out])
                self.assertEqual(r.returncode, 0, r.stderr)
                if name.lower().endswith(".safetensors"):
                    self.assertEqual(out.read_bytes()[8:9], b"{")
                else:
                    self.assertTrue(zipfile.is_zipfile(out))
                    self.assertTrue(torch.equal(torch.load(out)["w"], sd["w"]))
        r = run([CKPTFS, "pack", src, self.tmp / "out.txt"])
        self.assertEqual(r.returncode, EXIT["usage"])
        self.assertIn(".ckpt (torch) or .safetensors (any case)", r.stderr.decode())


class DirectoryTests(MessageTestCase):
    """Item 4: a directory is mounted only when it is one checkpoint set."""

    def save(self, path, key="w"):
        torch.save({key: torch.zeros(2)}, path)

    def test_several_files_are_listed(self):
        d = self.new_dir("several")
        for name in ("a.pth", "b.pt", "model.safetensors"):
            if name.endswith(".safetensors"):
                header = json.dumps({"s": {"dtype": "U8", "shape": [1],
                                           "data_offsets": [0, 1]}}).encode()
                (d / name).write_bytes(struct.pack("<Q", len(header)) + header + b"x")
            else:
                self.save(d / name)
        (d / "config.json").write_text("{}")
        self.assert_refused(d, "io", r'a directory of 3 checkpoints: "a.pth", "b.pt", '
                            r'"model.safetensors": name the one to mount, as in: ckptfs '
                            + re.escape(str(d)) + r"/a.pth MOUNTPOINT\n\Z")

    def test_a_stray_file_beside_a_set(self):
        """A DCP checkpoint (Megatron's common.pt is its own), and a stray .pth beside it."""
        corpus = CORPUS / "formats" / "LionRock-Research__Megatron-LM__dcp-ckpt"
        if not corpus.is_dir():
            self.skipTest(f"{corpus} is missing")
        d = self.new_dir("dcp") / "ckpt"
        shutil.copytree(corpus, d)
        r = run([CKPTFS, "inspect", d])
        self.assertEqual(r.returncode, 0, r.stderr)  # one set
        self.save(d / "stray.pth")
        self.assert_refused(d, "io", r'a directory of 2 checkpoints: "\.metadata" \(a PyTorch '
                            r'DCP checkpoint\), "stray.pth": name the one to mount')

    def test_gguf_split_set_counts_once(self):
        d = self.new_dir("gguf")
        for i in (1, 2, 3):
            (d / f"m-0000{i}-of-00003.gguf").write_bytes(b"GGUF")
        (d / "other.gguf").write_bytes(b"GGUF")
        self.assert_refused(d, "io", r'a directory of 2 checkpoints: "m-00001-of-00003.gguf" '
                            r'\(a GGUF split set of 3 files\), "other.gguf": name the one')

    def test_one_checkpoint_is_mounted_and_its_errors_name_it(self):
        d = self.new_dir("one")
        self.save(d / "only.pth")
        (d / "notes.txt").write_text("x")
        m, proc = self.mount(d)
        self.assertTrue((m / "w" / "data").is_file())
        self.unmount(m, proc)
        (d / "only.pth").write_bytes(LFS_POINTER)
        self.assert_refused(d, "io", r'"only.pth": a Git LFS pointer')


class ModelDirectoryTests(MessageTestCase):
    """Issue 29, item 12: a model directory's other files named by mistake, a Trainer's
    checkpoint-N/, a DeepSpeed `latest` whose tag is not there."""

    ZERO = CORPUS / "formats" / "bigyanghimire__deepspeed-experiments__zero3-bert-model-states-only"

    def safetensors(self, path, key="w"):
        header = json.dumps({key: {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})
        header = header.encode() + b" " * (-len(header) % 8)
        path.write_bytes(struct.pack("<Q", len(header)) + header + b"xy")

    def test_other_json_files_of_a_model(self):
        d = self.new_dir("model")
        self.safetensors(d / "model.safetensors")
        config = '{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}'
        for name, what in (("config.json", r"a model config \(transformers' config.json\), not a "
                                           r"checkpoint: name its directory, which holds the "
                                           r"weights$"),
                           ("generation_config.json", r"a model's generation config, not a "
                                                      r"checkpoint: name its directory"),
                           ("tokenizer.json", r"a tokenizer, not a checkpoint: name its "),
                           ("tokenizer_config.json", r"a tokenizer's config, not a checkpoint"),
                           ("trainer_state.json", r"a Hugging Face Trainer's state \(of a "
                                                  r"checkpoint-N directory\), not a checkpoint"),
                           ("adapter_config.json", r"a PEFT adapter's config, not a checkpoint: "
                                                   r"name its directory")):
            with self.subTest(name):
                (d / name).write_text(config)
                self.assert_refused(d / name, "io", what)
        m, proc = self.mount(d)  # its directory mounts the weights
        self.assertTrue((m / "w" / "data").is_file())
        self.unmount(m, proc)

    def test_latest_naming_a_tag_that_is_not_there(self):
        run_dir = self.new_dir("run")
        (run_dir / "latest").write_text("global_step9\n")
        missing = (r'latest names the tag "global_step9", which does not exist here: name the '
                   r"tag directory that holds the \*_model_states.pt files, or write its name "
                   r"into latest$")
        self.assert_refused(run_dir, "checkpoint", missing)
        self.assert_refused(run_dir / "latest", "checkpoint", missing)
        (run_dir / "global_step9").mkdir()
        self.assert_refused(run_dir, "io", r'latest names the tag "global_step9", which holds no '
                                           r"\*_model_states.pt: not a DeepSpeed checkpoint")

    def test_trainer_checkpoint_with_deepspeed(self):
        """checkpoint-N/ as transformers' Trainer writes it with DeepSpeed (ZeRO-3 with
        stage3_gather_16bit_weights_on_model_save, two processes): the model's weights, its
        config, the Trainer's state, arguments and RNG states, and DeepSpeed's checkpoint
        (`latest`, global_stepN/, zero_to_fp32.py). Naming checkpoint-N/ mounts the model, as
        from_pretrained(checkpoint-N) loads it; global_stepN/ (or `latest`) the ZeRO
        checkpoint; without the model's file (ZeRO-3 saving no gathered weights), the ZeRO one."""
        if not self.ZERO.is_dir():
            self.skipTest(f"{self.ZERO} is missing")
        ckpt = self.new_dir("run") / "checkpoint-99"
        ckpt.mkdir()
        shutil.copytree(self.ZERO / "global_step99", ckpt / "global_step99")
        shutil.copy(self.ZERO / "latest", ckpt / "latest")
        shutil.copy(self.ZERO / "zero_to_fp32.py", ckpt / "zero_to_fp32.py")
        self.safetensors(ckpt / "model.safetensors", "bert.embeddings.word_embeddings.weight")
        (ckpt / "config.json").write_text('{"model_type": "bert"}')
        (ckpt / "generation_config.json").write_text('{"_from_model_config": true}')
        (ckpt / "trainer_state.json").write_text('{"global_step": 99, "log_history": []}')
        torch.save({"output_dir": "run", "deepspeed": "ds.json"}, ckpt / "training_args.bin")
        for rank in (0, 1):
            torch.save({"python": (3, (), None), "cpu": torch.get_rng_state()},
                       ckpt / f"rng_state_{rank}.pth")
        torch.save({"last_epoch": 99}, ckpt / "scheduler.pt")
        m, proc = self.mount(ckpt)
        index = json.loads((m / ".ckptfs" / "index.json").read_text())
        self.assertEqual(index["format"], "safetensors")
        self.assertEqual([e["key"] for e in index["entries"]],
                         ["bert.embeddings.word_embeddings.weight"])
        self.unmount(m, proc)
        for path in (ckpt / "global_step99", ckpt / "latest"):
            r = run([CKPTFS, "inspect", "--json", path])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout)["format"], "zero")
        (ckpt / "model.safetensors").unlink()
        r = run([CKPTFS, "inspect", "--json", ckpt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["format"], "zero")


class LogTests(MessageTestCase):
    """Item 11: -o log=FILE in a daemon and in the foreground; the lost log said."""

    def test_log_file_in_a_daemon(self):
        src = self.tmp / "copy.pth"
        torch.save({"w": torch.zeros(100000)}, src)
        mnt = self.new_dir()
        log = Path("relative.log")  # made absolute as it is parsed
        r = run([CKPTFS, "-o", f"log={log}", src, mnt], cwd=self.tmp)
        self.addCleanup(lambda: run(["fusermount3", "-u", "-z", mnt]))
        self.assertEqual((r.returncode, r.stderr), (0, b""))  # the log has a home: nothing said
        self.assertTrue(is_mounted(mnt))
        os.truncate(src, 1000)  # the tensor's bytes are gone: the read fails, and is logged
        with self.assertRaises(OSError):
            (mnt / "w" / "data").read_bytes()
        self.assertTrue(run(["fusermount3", "-u", mnt]).returncode == 0)
        text = (self.tmp / log).read_text()
        self.assertRegex(text, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ckptfs\[\d+\]: .*copy.pth\" changed while mounted")

    def test_unwritable_log_fails_at_once(self):
        src = self.tmp / "m.pth"
        torch.save({"w": torch.zeros(2)}, src)
        log = self.tmp / "no" / "such" / "dir" / "x.log"
        r = run([CKPTFS, "-o", f"log={log}", src, self.new_dir()])
        self.assertEqual(r.returncode, EXIT["usage"])
        self.assertEqual(r.stderr.decode(), f'ckptfs: log="{log}": No such file or directory\n')

    def test_log_is_only_the_users_own_regular_file(self):
        """Issue 29, items 2 and 8: in a sticky directory others may write (/tmp), a name that
        leads anywhere but to a regular file of the user's, with one name, is refused at once
        (status 1, one line, nothing mounted), and nothing is written, created or waited on."""
        src = self.tmp / "m.pth"
        torch.save({"w": torch.zeros(2)}, src)
        shared = self.new_dir("sticky")
        os.chmod(shared, 0o1777)
        precious = self.tmp / "precious"  # root's, 0600
        precious.write_bytes(b"root only\n")
        os.chmod(precious, 0o600)
        root = os.geteuid() == 0

        def planted(name, make, chown=True):
            path = shared / name
            make(path)
            if root and chown:  # made by another user, as in /tmp
                os.chown(path, 65534, 65534, follow_symlinks=False)
            return path

        cases = [
            ("a link", planted("link.log", lambda p: p.symlink_to(precious)),
             r"a symbolic link: ckptfs does not follow one to its log"),
            ("a dangling link", planted("dangling.log",
                                        lambda p: p.symlink_to(self.tmp / "made-by-root")),
             r"a symbolic link"),
            ("a FIFO", planted("fifo.log", os.mkfifo), r"a FIFO, not a regular file"),
            ("a directory", planted("dir.log", os.mkdir), r"a directory, not a regular file"),
            ("a device", Path("/dev/null"), r"a character device, not a regular file"),
            # (another name of root's file: its owner is root's, whoever made the name)
            ("a hard link", planted("hard.log", lambda p: os.link(precious, p), chown=False),
             r"has 2 hard links"),
        ]
        if root:
            cases.append(("another user's file", planted("theirs.log", lambda p: p.write_bytes(b"")),
                          r"owned by uid 65534, not by uid 0 who mounts"))
        for name, log, pattern in cases:
            with self.subTest(name):
                mnt = self.new_dir()
                # A FIFO's open would wait for a reader for ever: run() gives up after its
                # timeout, and the test fails.
                r = run([CKPTFS, "-o", f"log={log}", src, mnt])
                err = r.stderr.decode()
                self.assertEqual((r.returncode, r.stdout, err.count("\n")), (EXIT["usage"], b"", 1),
                                 err)
                self.assertRegex(err, "^ckptfs: log=" + re.escape(f'"{log}"') + ": " + pattern)
                self.assertFalse(is_mounted(mnt))
                run(["fusermount3", "-u", "-z", mnt])  # were it mounted all the same
        self.assertEqual(precious.read_bytes(), b"root only\n")
        st = precious.stat()
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (os.geteuid(), 0o600))
        self.assertFalse(os.path.lexists(self.tmp / "made-by-root"))
        self.assertEqual(os.listdir(shared / "dir.log"), [])
        # A new name there is the user's own file from the start: created 0600, and appended to
        # by the next mount.
        log = shared / "new.log"
        for _ in range(2):
            mnt = self.new_dir()
            r = run([CKPTFS, "-o", f"log={log}", src, mnt])
            self.assertEqual((r.returncode, r.stderr), (0, b""))
            self.assertEqual(run(["fusermount3", "-u", mnt]).returncode, 0)
        st = log.lstat()
        self.assertTrue(stat.S_ISREG(st.st_mode))
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid), (0o600, os.geteuid()))

    def daemon_with_stderr(self, stderr):
        """A daemon mount of a checkpoint whose stderr is `stderr` (a descriptor); returns the
        checkpoint, the mountpoint and the daemon's pid, once the command has returned 0."""
        src = self.tmp / f"lost-{stderr}.pth"
        torch.save({"a": torch.zeros(100000), "b": torch.ones(100000)}, src)
        mnt = self.new_dir()
        r = subprocess.run([str(CKPTFS), str(src), str(mnt)], stdout=subprocess.PIPE,
                           stderr=stderr, timeout=60)
        self.addCleanup(lambda: run(["fusermount3", "-u", "-z", mnt]))
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, b"")
        pids = processes_with_arg(mnt)
        self.assertEqual(len(pids), 1)
        return src, mnt, pids[0]

    def unmount_and_wait(self, mnt, pid):
        self.assertEqual(run(["fusermount3", "-u", mnt]).returncode, 0)
        self.assertTrue(wait_until(lambda: not Path(f"/proc/{pid}").exists(), 60))

    def fail_reads(self, src, mnt):
        """Two reads that fail, each logged: the checkpoint's bytes are gone."""
        os.truncate(src, 1000)
        for key in ("a", "b"):
            with self.assertRaises(OSError):
                (mnt / key / "data").read_bytes()

    def lost_line(self, mnt):
        return (f"ckptfs: {mnt}: warning: no syslog listens on /dev/log: the mount's log (read "
                "and server errors) is lost; -o log=FILE keeps it\n").encode()

    def test_lost_log_is_said_at_the_first_line_once(self):
        """Issue 29, item 12: a daemon without a syslog to hear it says so when it first logs,
        once, on the file or terminal that was the mount's stderr; a mount that logs nothing says
        nothing (it used to say it at every mount)."""
        if syslog_listens():
            self.skipTest("a syslog listens here (the line is said only without one)")
        with self.subTest("stderr a file"):
            err = self.tmp / "stderr.txt"
            with open(err, "wb") as f:
                src, mnt, pid = self.daemon_with_stderr(f.fileno())
            self.assertEqual(err.read_bytes(), b"")  # mounted: nothing to say
            self.assertEqual((mnt / "a" / "data").read_bytes(), bytes(400000))
            self.assertEqual(err.read_bytes(), b"")  # read: nothing either
            self.fail_reads(src, mnt)
            self.assertTrue(wait_until(lambda: err.read_bytes() != b"", 60))
            self.unmount_and_wait(mnt, pid)
            self.assertEqual(err.read_bytes(), self.lost_line(mnt))
        with self.subTest("stderr a terminal"):
            master, slave = os.openpty()
            self.addCleanup(os.close, master)
            self.addCleanup(os.close, slave)  # open here, so that the master reads, not EIO
            src, mnt, pid = self.daemon_with_stderr(slave)
            # The daemon holds no descriptor of the terminal: it opens it again to say it.
            pts = os.path.realpath(f"/proc/self/fd/{master}")
            held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
            self.assertFalse([h for h in held if h.startswith("/dev/pts/")], (pts, held))
            self.fail_reads(src, mnt)
            said = b""
            while b"\n" not in said:
                ready, _, _ = select.select([master], [], [], 60)
                self.assertTrue(ready, f"nothing said on the terminal: {said!r}")
                said += os.read(master, 4096)
            self.unmount_and_wait(mnt, pid)
            ready, _, _ = select.select([master], [], [], 0)
            if ready:
                said += os.read(master, 4096)
            self.assertEqual(said.replace(b"\r\n", b"\n"), self.lost_line(mnt))


class ProgressTests(MessageTestCase):
    """Item 12: progress on a terminal (a PTY), nothing off one unless --progress, always a
    summary unless --quiet."""

    def source(self):
        src = self.tmp / "src.pth"
        torch.save({f"l{i}.w": torch.randn(256, 256) for i in range(20)}, src)
        return src

    def test_progress_on_a_terminal(self):
        import pty
        src = self.source()
        out = self.tmp / "out.safetensors"
        pid, fd = pty.fork()
        if pid == 0:
            os.execv(str(CKPTFS), [str(CKPTFS), "pack", str(src), str(out)])
        chunks = []
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        text = b"".join(chunks).decode()
        # A line redrawn in place: bytes, rate, ETA, tensors; erased; then the summary.
        self.assertRegex(text, r"\rckptfs: .*out.safetensors: 0 B of 5\.0 MiB \(0%\), .*/s, "
                               r"ETA -, 0/20 tensors\x1b\[K")
        self.assertRegex(text, r"\rckptfs: .*: 5\.0 MiB of 5\.0 MiB \(100%\), .*/s, in [\d.]+ s, "
                               r"20/20 tensors\x1b\[K\r\x1b\[K")
        self.assertRegex(text, r"ckptfs: .*out.safetensors: packed 20 tensors, 0 values "
                               r"\(5\.0 MiB\) in [\d.]+ s \(.*/s\)\r?\n\Z")

    def test_off_a_terminal(self):
        src = self.source()
        for args, lines in (([], 1), (["--progress"], 3), (["--quiet"], 0), (["-q"], 0)):
            with self.subTest(args=args):
                out = self.tmp / "o.pth"
                if out.exists():
                    out.unlink()
                r = run([CKPTFS, "pack", src, out, *args])
                self.assertEqual(r.returncode, 0, r.stderr)
                err = r.stderr.decode().splitlines()
                self.assertEqual(len(err), lines, err)
                if lines:
                    self.assertRegex(err[-1], r"^ckptfs: .*o.pth: packed 20 tensors, 0 values")
                if lines == 3:
                    self.assertRegex(err[0], r"0 B of .* \(0%\), .*, 0/20 tensors$")
                    self.assertRegex(err[1], r"\(100%\), .*, 20/20 tensors$")
                self.assertTrue(torch.equal(torch.load(out)["l3.w"], torch.load(src)["l3.w"]))
        r = run([CKPTFS, "pack", src, self.tmp / "x.pth", "--progress", "--quiet"])
        self.assertEqual(r.returncode, EXIT["usage"])


if __name__ == "__main__":
    unittest.main()
