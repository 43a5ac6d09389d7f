# SPDX-License-Identifier: MIT
"""The messages for the mistakes people make (issue 21, items 6-10): every one is one line
naming the file and what to do, with the documented exit code.

- ImpostorTests: a Git LFS pointer, an HTML or XML page, a gzip, zstd, xz, bzip2 or 7-Zip file,
  a tar archive and an empty file, each saved under the name of every format ckptfs reads (.pth,
  .bin, .safetensors, .gguf, .npz, an *.index.json, a DCP .metadata), a shard of a sharded set
  and a DCP .distcp file: inspect and the mount say what the file is and what to do.
- TruncatedTests: a .pth, an .npz and a safetensors file cut short (an interrupted download).
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
import shutil
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
from fixtures import CKPTFS, CORPUS  # noqa: E402
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
        header = json.dumps({"w": {"dtype": "F32", "shape": [4096],
                                   "data_offsets": [0, 16384]}}).encode()
        header += b" " * (-len(header) % 8)
        path = self.tmp / "model.safetensors"
        path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(16384))
        self.cut(path)
        self.assert_refused(path, "checkpoint", r".*the file is truncated$")


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
        r = run([CKPTFS, "-o", f"log={self.tmp}/no/such/dir/x.log", src, self.new_dir()])
        self.assertEqual(r.returncode, EXIT["mount"])
        self.assertIn("No such file or directory", r.stderr.decode())

    def test_lost_log_is_said_once(self):
        if os.path.exists("/dev/log"):
            self.skipTest("a syslog listens here (the line is said only without one)")
        src = self.tmp / "m.pth"
        torch.save({"w": torch.zeros(2)}, src)
        mnt = self.new_dir()
        r = run([CKPTFS, src, mnt])
        self.addCleanup(lambda: run(["fusermount3", "-u", "-z", mnt]))
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stderr, b"ckptfs: warning: no syslog listens on /dev/log: the mount's "
                         b"log (read and server errors) is lost; -o log=FILE keeps it\n")
        run(["fusermount3", "-u", mnt])


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
