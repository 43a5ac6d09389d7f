# SPDX-License-Identifier: MIT
"""Broken tensors on real mounts (issue 29, item 3): no view ever lacks a tensor without saying so.
  - a broken tensor's directory keeps its files (data, tensor.npy, tensor.pt, as -o files= says),
    at the sizes its dtype and shape give them; opening or reading them fails with EIO, and the
    log says why once per tensor; cp and rsync of them fail loudly;
  - .ckptfs/model.safetensors, the -o shard_size= set and its index fail with EIO rather than lack
    a broken tensor; index.json says per export what it lacks and why ("exports");
  - -o layout=rfc: map.pt lists the broken key, whose <key>.pt fails with EIO;
  - the mount says how many tensors are broken on stderr (daemon and -f) and on the -f "mounted"
    line, as `ckptfs pack` (which refuses them) and `ckptfs inspect` count them.
Inputs: a torch.save file with one storage record taken out, a sharded set whose index names a key
its shard lacks, and (with the corpus) the partial ZeRO-3 directory of the issue, all 110 of whose
tensors are broken.

Run by ctest as `/usr/bin/python3 -m unittest -v test_broken` with CKPTFS and CKPTFS_CORPUS (see
fixtures.py). Needs /dev/fuse, fusermount3, torch, cp and rsync.
"""

import errno
import os
import re
import subprocess
import sys
import unittest
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import torch  # noqa: E402

import ckptfs_safetensors as st  # noqa: E402
from fixtures import (CKPTFS, CORPUS, needs_corpus, processes_with_arg, views_dir,  # noqa: E402
                      wait_until)
from test_mount import (EXIT_TIMEOUT, MOUNT_TIMEOUT, MountTestCase, force_unmount,  # noqa: E402
                        run)

KEY_FILES = ["data", "meta.json", "tensor.npy", "tensor.pt"]
EXPORT_FILE = re.compile(r"model(-\d{5}-of-\d{5})?\.safetensors(\.index\.json)?")
ZERO3 = "bigyanghimire__deepspeed-experiments__zero3-bert-model-states-only"


def some_broken(path):
    """A torch.save file of {"a": 3x4 float32, "gone": 5 float32, "i": 4 int64, "epoch": 3}
    whose "gone" storage record was taken out of the zip: "gone" is broken, the rest sound.
    Returns the sound tensors' bytes by key."""
    tensors = {"a": torch.arange(12.0).reshape(3, 4), "gone": torch.ones(5),
               "i": torch.arange(4, dtype=torch.int64)}
    whole = path.with_suffix(".whole.pth")
    torch.save({**tensors, "epoch": 3}, whole)
    with zipfile.ZipFile(whole) as z:
        # Each tensor has a storage of its own: the one of 5 floats is "gone"'s.
        record = next(i.filename for i in z.infolist()
                      if "/data/" in i.filename and i.file_size == 20)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
            for info in z.infolist():
                if info.filename != record:
                    out.writestr(info, z.read(info.filename))
    whole.unlink()
    return {k: t.numpy().tobytes() for k, t in tensors.items() if k != "gone"}


class BrokenTestCase(MountTestCase):
    def setUp(self):
        super().setUp()
        self.ckpt = self.tmp / "some_broken.pth"
        self.sound = some_broken(self.ckpt)

    def assert_eio(self, path, where=None):
        """Opening `path` and reading it fails with EIO."""
        with self.assertRaises(OSError, msg=where or str(path)) as caught:
            with open(path, "rb") as f:
                f.read()
        self.assertEqual(caught.exception.errno, errno.EIO, f"{where or path}: {caught.exception}")

    def summary(self, broken, tensors, checkpoint):
        verb = "is" if broken == 1 else "are"
        return f"{broken} of {tensors} tensors {verb} broken (see: ckptfs inspect {checkpoint})"


class KeyFileTests(BrokenTestCase):
    def test_a_broken_tensors_files_fail_with_eio_and_say_why_once(self):
        mnt, proc = self.mount(self.ckpt)
        gone = mnt / "gone"
        self.assertEqual(sorted(os.listdir(gone)), KEY_FILES)
        meta = self.read_json(gone / "meta.json")
        self.assertRegex(meta["broken"], r'record "[^"]*/data/\d+" is missing')
        # The sizes its dtype and shape give: 5 float32.
        self.assertEqual(meta["nbytes"], 20)
        self.assertEqual(os.stat(gone / "data").st_size, 20)
        self.assertGreater(os.stat(gone / "tensor.npy").st_size, 20)
        self.assertGreater(os.stat(gone / "tensor.pt").st_size, 20)
        for _ in range(2):
            for name in ("data", "tensor.npy", "tensor.pt"):
                self.assert_eio(gone / name)
        # cp and rsync fail, saying so; the sound keys copy.
        r = run(["cp", gone / "data", self.tmp / "copied"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"Input/output error", r.stderr)
        r = run(["rsync", "-a", f"{gone}/", self.tmp / "synced"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"Input/output error", r.stderr)
        for key, data in self.sound.items():
            self.assertEqual((mnt / key / "data").read_bytes(), data, key)
        self.unmount(mnt, proc)
        # One line, whichever of its files was read and how often; the mount's own lines too.
        out = self.output(proc)
        said = re.findall(r'ckptfs: tensor "gone" is broken \(record "[^"]*" is missing from the '
                          r"zip\): every read of its bytes fails with EIO \(ckptfs inspect lists "
                          r"the broken tensors\)\n", out)
        self.assertEqual(len(said), 1, out)
        summary = self.summary(1, 3, self.ckpt)
        self.assertIn(f"ckptfs: {summary}\n", out)
        self.assertRegex(out, rf"ckptfs: mounted {re.escape(str(self.ckpt))} on .* \(3 tensors, 1 "
                              rf"values, \d+ bytes\); {re.escape(summary)}\n")

    def test_files_option_keeps_a_broken_tensors_chosen_files(self):
        for files, listed in (("data,meta.json", ["data", "meta.json"]), ("npy", ["tensor.npy"]),
                              ("pt", ["tensor.pt"])):
            with self.subTest(files):
                mnt, proc = self.mount(self.ckpt, "-o", f"files={files}")
                self.assertEqual(sorted(os.listdir(mnt / "gone")), listed)
                for name in listed:
                    if name != "meta.json":
                        self.assert_eio(mnt / "gone" / name)
                self.unmount(mnt, proc)

    def test_no_open_fails_the_read(self):
        """-o no_open: once the kernel opens files without asking, the read itself fails."""
        mnt, proc = self.mount(self.ckpt, "-o", "no_open")
        self.assertEqual((mnt / "a" / "data").read_bytes(), self.sound["a"])  # the first open
        for name in ("data", "tensor.npy", "tensor.pt"):
            self.assert_eio(mnt / "gone" / name)
        self.unmount(mnt, proc)

    def test_a_daemon_says_it_and_logs_why(self):
        mnt, log = self.new_dir(), self.tmp / "ckptfs.log"
        self.addCleanup(force_unmount, mnt)
        r = run([CKPTFS, "-o", f"log={log}", self.ckpt, mnt], timeout=MOUNT_TIMEOUT,
                stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr.decode(), f"ckptfs: {self.summary(1, 3, self.ckpt)}\n")
        self.assert_eio(mnt / "gone" / "data")
        self.assert_eio(views_dir(mnt) / "model.safetensors")
        text = log.read_text()
        self.assertEqual(text.count('tensor "gone" is broken ('), 1, text)
        self.assertEqual(text.count(".ckptfs/model.safetensors would lack 1 broken tensor: "
                                    '"gone" ('), 1, text)
        self.unmount(mnt, None)
        self.assertTrue(wait_until(lambda: not processes_with_arg(mnt), EXIT_TIMEOUT))

    def test_pack_and_inspect_count_them_as_the_mount_does(self):
        r = run([CKPTFS, "pack", self.ckpt, self.tmp / "out.pth"])
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertRegex(r.stderr.decode(), r'tensor "gone" is broken \(record ".*" is missing from '
                                            r"the zip\): it cannot be packed; leave it out with "
                                            r"--keys\n$")
        self.assertFalse((self.tmp / "out.pth").exists())
        r = run([CKPTFS, "pack", self.ckpt, self.tmp / "out.pth", "--keys", "a", "--keys", "i"])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([CKPTFS, "inspect", self.ckpt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(b", 1 broken", r.stdout)


class ExportTests(BrokenTestCase):
    def test_exports_fail_rather_than_lack_it_and_index_json_says_why(self):
        mnt, proc = self.mount(self.ckpt)
        views = views_dir(mnt)
        self.assertIn("model.safetensors", os.listdir(views))
        self.assertGreater(os.stat(views / "model.safetensors").st_size, 0)
        self.assert_eio(views / "model.safetensors")
        r = run(["cp", views / "model.safetensors", self.tmp / "model.safetensors"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"Input/output error", r.stderr)
        index = self.read_json(views / "index.json")
        gone = next(e for e in index["entries"] if e["key"] == "gone")
        self.assertIsNone(gone["nbytes"])
        [export] = index["exports"]
        self.assertEqual(export["files"], ["model.safetensors"])
        self.assertEqual(export["lacks"], [{"key": "gone", "why": "broken"}])
        self.assertRegex(export["fails"], r'^\.ckptfs/model\.safetensors would lack 1 broken '
                                          r'tensor: "gone" \(.*\); it fails with EIO')
        self.unmount(mnt, proc)
        self.assertIn(f"ckptfs: {export['fails']}\n", self.output(proc))

    def test_every_file_of_a_shard_set(self):
        mnt, proc = self.mount(self.ckpt, "-o", "shard_size=1")
        names = sorted(n for n in os.listdir(views_dir(mnt)) if EXPORT_FILE.fullmatch(n))
        self.assertEqual(len(names), 3, names)  # two shards and their index
        for name in names:
            self.assert_eio(views_dir(mnt) / name)
        [export] = self.read_json(views_dir(mnt) / "index.json")["exports"]
        self.assertEqual(sorted(export["files"]), names)
        self.assertRegex(export["fails"], r"^\.ckptfs/model\.safetensors\.index\.json and its 2 "
                                          r"shards would lack 1 broken tensor")
        self.unmount(mnt, proc)

    def test_rfc_layout_lists_it_and_its_file_fails(self):
        mnt, proc = self.mount(self.ckpt, "-o", "layout=rfc")
        keys = torch.load(mnt / "map.pt", weights_only=True)
        self.assertEqual(keys, ["a", "gone", "i", "epoch"])
        self.assert_eio(mnt / "gone.pt")
        self.assertTrue(torch.equal(torch.load(mnt / "a.pt", weights_only=True),
                                    torch.arange(12.0).reshape(3, 4)))
        [export] = self.read_json(views_dir(mnt) / "index.json")["exports"]
        self.assertEqual(export, {"files": ["map.pt"], "fails": None, "lacks": []})
        self.unmount(mnt, proc)

    def test_a_key_its_shard_lacks(self):
        """A sharded set whose index names a key no shard holds (the class beyond .pth)."""
        d = self.new_dir("set")
        st.write_safetensors(d / "model-1.safetensors", [("w", "F32", [2], bytes(8))])
        st.write_index(d / "model.safetensors.index.json",
                       [("w", "model-1.safetensors"), ("ghost", "model-1.safetensors")], 8)
        mnt, proc = self.mount(d)
        self.assertEqual(sorted(os.listdir(mnt / "ghost")), KEY_FILES)
        self.assert_eio(mnt / "ghost" / "data")
        self.assert_eio(views_dir(mnt) / "model.safetensors")
        self.assertEqual((mnt / "w" / "data").read_bytes(), bytes(8))
        self.unmount(mnt, proc)
        self.assertIn(f"ckptfs: {self.summary(1, 2, d)}\n", self.output(proc))


@needs_corpus
class PartialZeroCorpusTests(BrokenTestCase):
    def test_partial_zero3_directory_of_the_corpus(self):
        """The issue's input: every fp32 weight is in optimizer states this copy lacks."""
        path = CORPUS / "formats" / ZERO3
        self.assertTrue(path.is_dir(), f"{path} is missing")
        mnt, proc = self.mount(path)
        # No 40-byte model.safetensors that holds nothing: cp fails, saying why.
        r = run(["cp", views_dir(mnt) / "model.safetensors", self.tmp / "out.safetensors"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"Input/output error", r.stderr)
        self.assertRegex(self.output(proc), r"model\.safetensors would lack 110 broken tensors: "
                                            r'"[^"]+" \(no \*_optim_states\.pt in .*\), "[^"]+", '
                                            r'"[^"]+" and 107 more')
        index = self.read_json(views_dir(mnt) / "index.json")
        self.assertEqual(len(index["exports"][0]["lacks"]), 110)
        for e in index["entries"]:
            with self.subTest(e["key"]):
                self.assertEqual(sorted(os.listdir(mnt / e["path"])), KEY_FILES)
                meta = self.read_json(mnt / e["path"] / "meta.json")
                numel = 1
                for n in meta["shape"]:
                    numel *= n
                self.assertEqual(os.stat(mnt / e["path"] / "data").st_size, 4 * numel)
        first = index["entries"][0]["path"]
        r = run(["cp", "-r", mnt / first, self.tmp / "copied"])
        self.assertNotEqual(r.returncode, 0)
        self.unmount(mnt, proc)
        summary = self.summary(110, 110, path)
        out = self.output(proc)
        self.assertIn(f"ckptfs: {summary}\n", out)
        self.assertRegex(out, rf"\(110 tensors, 0 values, 0 bytes\); {re.escape(summary)}\n")
        r = run([CKPTFS, "pack", path, self.tmp / "out.safetensors"])
        self.assertEqual(r.returncode, 4)
        self.assertRegex(r.stderr.decode(), r", and 109 more: 110 of the 110 tensors selected are "
                                            r"broken")


if __name__ == "__main__":
    unittest.main()
