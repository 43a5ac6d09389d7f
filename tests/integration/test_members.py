# SPDX-License-Identifier: MIT
"""The files of a checkpoint made of several files (its members: a sharded set's shards, a GGUF
split set's files, a PyTorch DCP checkpoint's .distcp files, the file a directory mount chooses)
are read only beneath the checkpoint's directory, as an archive unpacked by the user could have
put symbolic links anywhere in it: a member that leads out is refused (sets, a directory's one
checkpoint) or breaks its tensors (DCP), with the reason, in the mount, inspect and pack. A
Hugging Face hub cache snapshot, whose every file is a link to its repository's blobs/, mounts
and packs all the same. The modes of a mount are the strictest of all the files it reads.

Run by ctest as `/usr/bin/python3 -m unittest -v test_members`.
"""

import json
import os
import shutil
import stat
import struct
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from fixtures import require  # noqa: E402

require("fuse", "torch")

import torch  # noqa: E402

from ckptfs_mounts import views_dir  # noqa: E402
from ckptfs_safetensors import read_safetensors, write_index, write_safetensors  # noqa: E402
from fixtures import CKPTFS, CORPUS, needs_corpus  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402

DCP = CORPUS / "formats" / "Lightning-AI__pytorch-lightning__dcp-fsdp-world2"
ZERO = CORPUS / "formats" / "bigyanghimire__deepspeed-experiments__zero3-bert-model-states-only"
LEADS_OUT = "leads out of the directory"
EXIT_IO, EXIT_CHECKPOINT = 2, 4


def safetensors_of(path, tensors):
    """A safetensors file of {name: bytes} (uint8 vectors)."""
    write_safetensors(path, [(k, "U8", [len(v)], v) for k, v in tensors.items()])


def gguf_split(path, number, count, name, values):
    """One file of a GGUF split set (as llama.cpp's gguf-split writes its split.* keys): one
    float32 vector `name`."""
    def text(s):
        return struct.pack("<Q", len(s)) + s.encode()
    data = struct.pack(f"<{len(values)}f", *values)
    out = b"GGUF" + struct.pack("<IQQ", 3, 1, 2)
    out += text("split.no") + struct.pack("<IH", 2, number - 1)  # type 2: uint16
    out += text("split.count") + struct.pack("<IH", 2, count)
    out += text(name) + struct.pack("<I", 1) + struct.pack("<Q", len(values))
    out += struct.pack("<IQ", 0, 0)  # F32, at offset 0 of the data
    out += b"\0" * (-len(out) % 32)
    Path(path).write_bytes(out + data)


class MemberTestCase(MountTestCase):
    def refused(self, path, code, pattern):
        """inspect, the mount and pack of `path` fail with `code` and one line matching
        `pattern`; pack leaves no file."""
        out = self.tmp / "packed.safetensors"
        for args in (["inspect", path], [path, self.new_dir()], ["pack", path, out]):
            with self.subTest(args=args[0]):
                r = run([CKPTFS, *args])
                err = r.stderr.decode("utf-8", "replace")
                self.assertEqual(r.returncode, code, err)
                self.assertEqual(err.count("\n"), 1, err)
                self.assertRegex(err, pattern)
        self.assertFalse(out.exists())

    def keys(self, mnt):
        return [e["key"] for e in json.loads((views_dir(mnt) / "index.json").read_text())
                ["entries"]]


class LinksOutTests(MemberTestCase):
    def setUp(self):
        super().setUp()
        self.outside = self.new_dir("outside")
        self.secret = b"the user's own file, never to be served"

    def test_sharded_set_with_a_shard_leading_out(self):
        d = self.new_dir("set")
        safetensors_of(d / "model-00001-of-00002.safetensors", {"a": b"aaaa"})
        safetensors_of(self.outside / "secret.safetensors", {"b": self.secret})
        (d / "model-00002-of-00002.safetensors").symlink_to(self.outside / "secret.safetensors")
        write_index(d / "model.safetensors.index.json",
                    {"a": "model-00001-of-00002.safetensors",
                     "b": "model-00002-of-00002.safetensors"}, 4 + len(self.secret))
        for path in (d, d / "model.safetensors.index.json"):
            with self.subTest(path=path.name):
                self.refused(path, EXIT_CHECKPOINT, r'shard "model-00002-of-00002.safetensors" '
                             r"\(named by the index\): " + LEADS_OUT)
        # A shard in a folder that is a link out.
        (self.outside / "sub").mkdir()
        safetensors_of(self.outside / "sub" / "b.safetensors", {"b": self.secret})
        (d / "sub").symlink_to(self.outside / "sub")
        write_index(d / "model.safetensors.index.json",
                    {"a": "model-00001-of-00002.safetensors", "b": "sub/b.safetensors"}, 0)
        self.refused(d / "model.safetensors.index.json", EXIT_CHECKPOINT,
                     r'shard "sub/b.safetensors" \(named by the index\): ' + LEADS_OUT)

    def test_gguf_split_set_with_a_file_leading_out(self):
        d = self.new_dir("gguf")
        gguf_split(d / "m-00001-of-00002.gguf", 1, 2, "a", [1.0, 2.0])
        gguf_split(self.outside / "m-00002-of-00002.gguf", 2, 2, "b", [3.0])
        (d / "m-00002-of-00002.gguf").symlink_to(self.outside / "m-00002-of-00002.gguf")
        for path in (d, d / "m-00001-of-00002.gguf"):
            with self.subTest(path=path.name):
                self.refused(path, EXIT_CHECKPOINT,
                             r'split file "m-00002-of-00002.gguf": ' + LEADS_OUT)
        # The set itself, all beneath its directory, mounts.
        (d / "m-00002-of-00002.gguf").unlink()
        shutil.copy(self.outside / "m-00002-of-00002.gguf", d)
        mnt, _ = self.mount(d)
        self.assertEqual(self.keys(mnt), ["a", "b"])

    def test_a_directory_whose_checkpoint_leads_out(self):
        """The user named the directory, not the file in it: a link out is refused. Named
        itself, the link is followed (the user named it)."""
        d = self.new_dir("single")
        torch.save({"w": torch.arange(4.0)}, self.outside / "private.pth")
        (d / "model.pth").symlink_to(self.outside / "private.pth")
        self.refused(d, EXIT_CHECKPOINT, r'"model.pth": ' + LEADS_OUT)
        mnt, _ = self.mount(d / "model.pth")
        self.assertEqual(self.keys(mnt), ["w"])

    @needs_corpus
    def test_dcp_item_files_of_the_corpus_leading_out(self):
        """A .distcp file that is a link out, and a `relative_path` through a folder that is
        one: the tensors whose chunks are there are broken saying so, the rest served; pack
        refuses them. The outside file holds the very bytes the item should (a copy), so that
        following the link would serve them as rows of the tensors."""
        for variant in ("file", "folder"):
            with self.subTest(variant):
                d = self.new_dir("dcp") / "ckpt"
                shutil.copytree(DCP, d)
                outside = self.new_dir("outside")
                if variant == "file":
                    shutil.move(d / "__1_0.distcp", outside / "outside.distcp")
                    (d / "__1_0.distcp").symlink_to("../../" + outside.name + "/outside.distcp")
                    member = "__1_0.distcp"
                else:
                    meta = (d / ".metadata").read_bytes()
                    # The same length: the pickle's string lengths stay right.
                    (d / ".metadata").write_bytes(meta.replace(b"__1_0.distcp", b"s/1_0.distcp"))
                    shutil.move(d / "__1_0.distcp", outside / "1_0.distcp")
                    (d / "s").symlink_to(outside)
                    member = "s/1_0.distcp"
                r = run([CKPTFS, "inspect", "--json", d])
                self.assertEqual(r.returncode, 0, r.stderr)
                model = json.loads(r.stdout)
                tensors = [e for e in model["entries"] if e["kind"] == "tensor"]
                broken = [e for e in tensors if e["broken"]]
                self.assertTrue(broken, "no tensor is broken: the link was followed")
                for e in broken:
                    self.assertIn(f'"{member}" cannot be opened: {LEADS_OUT}', e["broken"])
                self.assertNotIn(member, model["sources"])
                mnt, _ = self.mount(d)
                paths = {e["key"]: e["path"] for e in
                         json.loads((views_dir(mnt) / "index.json").read_text())["entries"]}
                meta = json.loads((mnt / paths[broken[0]["key"]] / "meta.json").read_text())
                self.assertIn(LEADS_OUT, meta["broken"])
                out = self.tmp / "dcp.safetensors"
                r = run([CKPTFS, "pack", d, out])
                self.assertEqual(r.returncode, EXIT_CHECKPOINT, r.stderr)
                self.assertIn(LEADS_OUT, r.stderr.decode())
                self.assertFalse(out.exists())


class HubCacheTests(MemberTestCase):
    """A hub cache laid out as huggingface_hub lays it out: models--ORG--NAME/blobs/<sha>,
    refs/main, snapshots/<rev>/<file> -> ../../blobs/<sha> (relative links; a nested file's
    -> ../../../blobs/<sha>)."""

    def make_cache(self):
        repo = self.new_dir("hub") / "models--org--tiny"
        blobs, snapshot = repo / "blobs", repo / "snapshots" / "0123456789abcdef"
        for p in (blobs, snapshot / "sub", repo / "refs"):
            p.mkdir(parents=True)
        (repo / "refs" / "main").write_text(snapshot.name)
        tensors = {"model-00001-of-00002.safetensors": {"a": b"aaaa", "b": b"bb"},
                   "sub/model-00002-of-00002.safetensors": {"c": b"cccccc"}}
        weight_map = {}
        for i, (name, content) in enumerate(tensors.items()):
            safetensors_of(blobs / f"sha{i}", content)
            weight_map.update({k: name for k in content})
            up = "../" * (name.count("/") + 2)
            (snapshot / name).symlink_to(f"{up}blobs/sha{i}")
        write_index(blobs / "shaindex", weight_map, 12)
        (snapshot / "model.safetensors.index.json").symlink_to("../../blobs/shaindex")
        (blobs / "shaconfig").write_text('{"model_type": "tiny"}')
        (snapshot / "config.json").symlink_to("../../blobs/shaconfig")
        return repo, snapshot, {k: v for c in tensors.values() for k, v in c.items()}

    def test_a_snapshot_mounts_and_packs(self):
        repo, snapshot, want = self.make_cache()
        for path in (snapshot, snapshot / "model.safetensors.index.json"):
            with self.subTest(path=path.name):
                mnt, _ = self.mount(path)
                self.assertEqual(self.keys(mnt), list(want))
                for key, data in want.items():
                    self.assertEqual((mnt / key / "data").read_bytes(), data)
                out = self.tmp / f"packed-{path.name}.safetensors"
                r = run([CKPTFS, "pack", path, out])
                self.assertEqual(r.returncode, 0, r.stderr)
                _, tensors = read_safetensors(out)
                self.assertEqual({t.name: t.read(out) for t in tensors}, want)

    def test_a_snapshot_leading_elsewhere_is_refused(self):
        """A link to another snapshot, to refs/, to a blob that is a link itself, or out of the
        repository: refused as any link out."""
        repo, snapshot, _ = self.make_cache()
        other = repo / "snapshots" / "fedcba"
        other.mkdir()
        safetensors_of(other / "model-00001-of-00002.safetensors", {"a": b"AAAA", "b": b"BB"})
        secret = self.new_dir("outside") / "secret.safetensors"
        safetensors_of(secret, {"a": b"SSSS", "b": b"SS"})
        (repo / "blobs" / "shalink").symlink_to(secret)
        shard = snapshot / "model-00001-of-00002.safetensors"
        for target in ("../fedcba/model-00001-of-00002.safetensors", "../../refs/main",
                       "../../blobs/shalink", str(secret), "../../../" + secret.parent.name
                       + "/" + secret.name):
            with self.subTest(target):
                shard.unlink()
                shard.symlink_to(target)
                self.refused(snapshot, EXIT_CHECKPOINT,
                             r'"model.safetensors.index.json": shard '
                             r'"model-00001-of-00002.safetensors" \(named by the index\): '
                             + LEADS_OUT)


class ModeTests(MemberTestCase):
    """A mount of several files is as strict as the strictest: one 0600 file among 0644 ones
    makes every file of the mount 0600 (and its directories 0700), whatever was named."""

    def assert_modes(self, path, file_mode):
        mnt, _ = self.mount(path)
        index = views_dir(mnt) / "index.json"
        self.assertEqual(oct(stat.S_IMODE(index.stat().st_mode)), oct(file_mode), path)
        directory_mode = {0o644: 0o755, 0o600: 0o700}[file_mode]
        self.assertEqual(oct(stat.S_IMODE(mnt.stat().st_mode)), oct(directory_mode), path)

    def check(self, files_and_paths, strict_file):
        """Every file 0644: the mounts are 0644; `strict_file` 0600: 0600."""
        files, paths = files_and_paths
        for f in files:
            os.chmod(f, 0o644)
        for path in paths:
            with self.subTest(path=str(path), mode="0644"):
                self.assert_modes(path, 0o644)
        os.chmod(strict_file, 0o600)
        for path in paths:
            with self.subTest(path=str(path), mode="0600"):
                self.assert_modes(path, 0o600)

    def test_sharded_set(self):
        d = self.new_dir("set")
        os.chmod(d, 0o755)
        safetensors_of(d / "a.safetensors", {"a": b"aaaa"})
        safetensors_of(d / "b.safetensors", {"b": b"bb"})
        write_index(d / "model.safetensors.index.json",
                    {"a": "a.safetensors", "b": "b.safetensors"}, 6)
        files = list(d.iterdir())
        self.check((files, [d, d / "model.safetensors.index.json"]), d / "b.safetensors")

    def test_gguf_split_set(self):
        d = self.new_dir("gguf")
        os.chmod(d, 0o755)
        gguf_split(d / "m-00001-of-00002.gguf", 1, 2, "a", [1.0])
        gguf_split(d / "m-00002-of-00002.gguf", 2, 2, "b", [2.0])
        self.check((list(d.iterdir()), [d, d / "m-00001-of-00002.gguf"]),
                   d / "m-00002-of-00002.gguf")

    @needs_corpus
    def test_corpus_dcp(self):
        d = self.new_dir("dcp") / "ckpt"
        shutil.copytree(DCP, d)
        os.chmod(d, 0o755)
        self.check((list(d.iterdir()), [d, d / ".metadata"]), d / "__1_0.distcp")

    @needs_corpus
    def test_corpus_zero(self):
        d = self.new_dir("zero") / "run"
        shutil.copytree(ZERO, d)
        os.chmod(d, 0o755)
        os.chmod(d / "global_step99", 0o755)
        # Its first model states file is read (the second holds only what the optimizer states
        # it lacks would need).
        states = sorted((d / "global_step99").iterdir())
        self.check((states + [d / "latest"], [d, d / "global_step99"]), states[0])

    def split_copy(self, layout):
        """A split (or RFC) directory: what `cp -r` of a mount's tree gives."""
        src = self.new_dir("src") / "model.pth"
        torch.save({"w": torch.arange(4.0), "v": torch.ones(2)}, src)
        options = ("-o", "layout=rfc") if layout == "rfc" else ("-o", "files=data,meta.json")
        mnt, proc = self.mount(src, *options)
        d = self.new_dir(layout) / "copy"
        shutil.copytree(mnt, d)
        self.unmount(mnt, proc)
        os.chmod(d, 0o755)
        return d

    def test_split_directory(self):
        d = self.split_copy("split")
        files = [p for p in d.rglob("*") if p.is_file()]
        self.check((files, [d]), d / "v" / "data")

    def test_rfc_directory(self):
        d = self.split_copy("rfc")
        files = [p for p in d.rglob("*") if p.is_file()]
        self.check((files, [d]), d / "v.pt")


if __name__ == "__main__":
    unittest.main()
