# SPDX-License-Identifier: MIT
"""PyTorch Distributed Checkpoint directories mounted for real: the corpus's two real ones (a
Lightning FSDP checkpoint of world size 2, a Megatron one of one rank and two writer threads),
each tensor's data, tensor.npy and tensor.pt against the tensor this test assembles itself from
the chunks .metadata lists (its items loaded by this machine's torch 1.13, placed at their
boxes); the same directory by URL (its files fetched by range); and hostile variants: a file
name that leaves the directory, a truncated .distcp, a .metadata of another class.

The current torch's own consolidation (dcp_to_torch_save) is the reference of the interop test
(tests/interop/test_interop_dcp.py); this one needs no interop root.
Run by ctest as `/usr/bin/python3 -m unittest -v test_dcp`.
"""

import io
import json
import pickle
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

from fixtures import CKPTFS, CORPUS, needs_corpus, require

require("fuse", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from remote_servers import Nginx  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402

from ckptfs_mounts import views_dir  # noqa: E402  (scripts/, on the path test_mount sets)

DCP_CORPUS = ["Lightning-AI__pytorch-lightning__dcp-fsdp-world2",
              "LionRock-Research__Megatron-LM__dcp-ckpt"]


class _Inert:
    """What the stub unpickler makes of any class: its arguments and state, nothing run."""

    def __init__(self, *args):
        self.args = args

    def __setstate__(self, state):
        self.state = state


class MetadataUnpickler(pickle.Unpickler):
    """.metadata read without torch.distributed's classes (torch 1.13 lacks some): every class
    inert, torch.Size a tuple, a dtype its name."""

    def find_class(self, module, name):
        if (module, name) == ("torch", "Size"):
            return tuple
        if module == "torch":
            return f"dtype:{name}"
        return type(name, (_Inert,), {})


def fields(obj):
    state = getattr(obj, "state", None) or {}
    return state if isinstance(state, dict) else {}


def assembled_tensors(directory):
    """{fqn: tensor} of every tensor of the checkpoint, assembled from its chunks' items."""
    with open(directory / ".metadata", "rb") as f:
        metadata = fields(MetadataUnpickler(f).load())
    items = {}
    for index, info in metadata["storage_data"].items():
        i, s = fields(index), fields(info)
        items[(i["fqn"], tuple(i.get("offset") or ()))] = (s["relative_path"], s["offset"],
                                                           s["length"])
    out = {}
    for fqn, md in metadata["state_dict_metadata"].items():
        md = fields(md)
        if "chunks" not in md:
            continue
        dtype = getattr(torch, md["properties"].state[0].removeprefix("dtype:"))
        full = torch.empty(tuple(md["size"]), dtype=dtype)
        for chunk in md["chunks"]:
            c = fields(chunk)
            if 0 in c["sizes"]:
                continue
            path, offset, length = items[(fqn, tuple(c["offsets"]))]
            with open(directory / path, "rb") as f:
                f.seek(offset)
                piece = torch.load(io.BytesIO(f.read(length)))
            box = tuple(slice(o, o + n) for o, n in zip(c["offsets"], c["sizes"]))
            full[box] = piece
        out[fqn] = full
    return out


def raw(t):
    return t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.dim() else \
        t.reshape(1).view(torch.uint8).numpy().tobytes()


class DcpMountTests(MountTestCase):
    def check_mount(self, mnt, want):
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertEqual(index["format"], "dcp")
        entries = {e["key"]: e for e in index["entries"]}
        self.assertGreater(len(want), 0)
        for key, t in want.items():
            with self.subTest(key=key):
                e = entries[key]
                d = mnt / e["path"]
                meta = json.loads((d / "meta.json").read_text())
                self.assertIsNone(meta["broken"])
                self.assertEqual(meta["shape"], list(t.shape))
                self.assertGreaterEqual(meta["pieces"]["count"], 1)
                self.assertEqual((d / "data").read_bytes(), raw(t))
                self.assertEqual(np.load(d / "tensor.npy").tobytes(), raw(t))
                self.assertTrue(torch.equal(torch.load(d / "tensor.pt"), t))

    @needs_corpus
    def test_corpus(self):
        for name in DCP_CORPUS:
            directory = CORPUS / "formats" / name
            with self.subTest(name):
                self.assertTrue((directory / ".metadata").is_file(), f"{directory} is missing")
                want = assembled_tensors(directory)
                mnt, _ = self.mount(directory)
                self.check_mount(mnt, want)
                # The .metadata named instead of its directory: the same checkpoint.
                r = run([CKPTFS, "inspect", "--json", directory / ".metadata"])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(json.loads(r.stdout)["format"], "dcp")

    @needs_corpus
    def test_remote(self):
        """By URL of its .metadata: the files it names fetched by range beside it."""
        work = Path(tempfile.mkdtemp(prefix="ckptfs-dcp-remote-"))
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        root = work / "root"
        root.mkdir()
        name = DCP_CORPUS[0]
        shutil.copytree(CORPUS / "formats" / name, root / "ckpt")
        nginx = Nginx(root, work / "nginx")
        nginx.start()
        self.addCleanup(nginx.stop)
        mnt, _ = self.mount(nginx.url("ckpt/.metadata"))
        self.check_mount(mnt, assembled_tensors(root / "ckpt"))

    def hostile_copy(self, name=DCP_CORPUS[0]):
        d = Path(tempfile.mkdtemp(prefix="ckptfs-dcp-hostile-"))
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        shutil.copytree(CORPUS / "formats" / name, d / "ckpt")
        return d / "ckpt"

    def inspect_json(self, path):
        r = run([CKPTFS, "inspect", "--json", path])
        return r, (json.loads(r.stdout) if r.returncode == 0 else None)

    @needs_corpus
    def test_hostile_names_and_truncation(self):
        # A name that leaves the directory (the same length: the pickle stays valid), beside a
        # file of that name outside, which must never be read.
        d = self.hostile_copy()
        meta = (d / ".metadata").read_bytes()
        self.assertIn(b"__1_0.distcp", meta)
        (d / ".metadata").write_bytes(meta.replace(b"__1_0.distcp", b"../_0.distcp"))
        shutil.copy(d / "__1_0.distcp", d.parent / "_0.distcp")
        r, model = self.inspect_json(d)
        self.assertEqual(r.returncode, 0, r.stderr)
        broken = {e["key"]: e["broken"] for e in model["entries"] if e["kind"] == "tensor"}
        self.assertTrue(broken and all("leaves the checkpoint's directory" in b
                                       for b in broken.values()), broken)
        self.assertNotIn("../_0.distcp", model["sources"])

        # A truncated rank file: its chunks' tensors broken, saying where; the values stay.
        d = self.hostile_copy()
        with open(d / "__1_0.distcp", "r+b") as f:
            f.truncate(1000)
        r, model = self.inspect_json(d)
        self.assertEqual(r.returncode, 0, r.stderr)
        tensors = [e for e in model["entries"] if e["kind"] == "tensor"]
        self.assertTrue(any(e["broken"] and "__1_0.distcp" in e["broken"] for e in tensors),
                        tensors)
        mnt, _ = self.mount(d)
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertTrue(any(e["kind"] == "value" for e in index["entries"]))

    @needs_corpus
    def test_hostile_metadata(self):
        # A .metadata of another class, and one that is no pickle: one line, exit status 4.
        for what, data in (("another class", pickle.dumps({"state_dict_metadata": {}})),
                           ("no pickle", b"\x00" * 64)):
            with self.subTest(what):
                d = self.hostile_copy()
                (d / ".metadata").write_bytes(data)
                r = run([CKPTFS, "inspect", d])
                self.assertEqual(r.returncode, 4, r.stderr)
                lines = r.stderr.decode().strip().splitlines()
                self.assertEqual(len(lines), 1, lines)
                self.assertIn(".metadata", lines[0])


if __name__ == "__main__":
    unittest.main()
