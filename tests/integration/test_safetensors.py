# SPDX-License-Identifier: MIT
"""Integration tests of safetensors files and Hugging Face sharded sets: `ckptfs inspect`, the
mount, ckptfs-verify, the tree's times, a shard replaced while mounted, a hundred shards.

The oracles: each fixture's expected.json (computed by scripts/safetensors_fixtures.py from the
objects it wrote, never from the files), and the reference reader scripts/ckptfs_safetensors.py
(written from the format's description, cross-checked on those fixtures by make_fixtures.py),
which reads the real files of CORPUS/formats (written by the safetensors library, MLX, tinygrad,
candle, huggingface_hub) and gives every tensor's bytes from the file itself.

Run by ctest as `/usr/bin/python3 -m unittest -v test_safetensors` (see fixtures.py).
"""

import errno
import json
import os
import shutil
import subprocess
import sys
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import ckptfs_reference as ref  # noqa: E402
import ckptfs_safetensors as st  # noqa: E402
from fixtures import (CKPTFS, FIXTURES, REPO, SAFETENSORS_FIXTURES, SHARDED_FIXTURES,  # noqa: E402
                      formats_corpus, model_fixture_path, needs_corpus)
from test_mount import MOUNT_TIMEOUT, MountTestCase, index_readable, run, sha256  # noqa: E402

VERIFY = REPO / "scripts" / "ckptfs-verify"
ALL_FIXTURES = SAFETENSORS_FIXTURES + SHARDED_FIXTURES

# The fields of a tensor's meta.json and inspect --json entry (after "key").
TENSOR_FIELDS = ["dtype", "stored_dtype", "shape", "stride", "storage_offset", "contiguous",
                 "nbytes", "source", "file_offset", "numpy", "byteorder", "requires_grad",
                 "quantization", "storage", "shared_with", "shared_with_count", "pieces",
                 "broken"]
TENSOR_FILES = ["data", "meta.json", "tensor.npy", "tensor.pt"]


def inspect(location, *args):
    r = subprocess.run([str(CKPTFS), "inspect", *args, str(location)], capture_output=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"ckptfs inspect {' '.join(args)} {location} exited "
                             f"{r.returncode}: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def inspect_json(location):
    return json.loads(inspect(location, "--json").decode("utf-8"))


def expected_doc(name):
    return json.loads((FIXTURES / f"{name}.expected.json").read_text(encoding="utf-8"))


def source_path(location, source):
    """The file a source name of `location`'s model is relative to."""
    return st.model_location(location).parent / source


class Checks:
    """Assertions shared by the inspect and mount tests."""

    def assert_entry(self, g, w, location, where):
        """An inspect --json or meta.json tensor entry `g` against the reference entry `w`."""
        self.assertEqual(g.get("kind", "tensor"), "tensor", where)
        if w["broken"]:
            self.assertIsInstance(g.get("broken"), str, f"{where}: broken")
            self.assertIsNone(g.get("source"), f"{where}: source")
            return
        self.assertEqual(list(g)[list(g).index("dtype"):], TENSOR_FIELDS, f"{where}: fields")
        for field in ("dtype", "shape", "stride", "nbytes", "source"):
            self.assertEqual(g[field], w[field], f"{where}: {field}")
        self.assertEqual(g["stored_dtype"], w["dtype"], where)
        self.assertIsNone(g["quantization"], where)
        self.assertEqual(g["storage_offset"], 0, where)
        self.assertTrue(g["contiguous"], where)
        self.assertEqual(g["numpy"], ref.numpy_descr(w["dtype"], "little"), f"{where}: numpy")
        self.assertEqual(g["byteorder"], "little", where)
        self.assertFalse(g["requires_grad"], where)
        self.assertIsNone(g["broken"], where)
        if w["file_offset"] is not None:  # a safetensors shard: its own storage
            self.assertEqual(g["file_offset"], w["file_offset"], f"{where}: file_offset")
            self.assertEqual(g["storage"], {"key": w["key"], "record": None,
                                            "file_offset": w["file_offset"],
                                            "nbytes": w["nbytes"]}, f"{where}: storage")
            self.assertEqual((g["shared_with"], g["shared_with_count"]), ([], 0), where)
        # The bytes at file_offset in the file the entry names are the tensor's.
        if g["file_offset"] is not None and w["nbytes"]:
            with open(source_path(location, g["source"]), "rb") as f:
                raw = os.pread(f.fileno(), w["nbytes"], g["file_offset"])
            self.assertEqual(raw, w.data(), f"{where}: the bytes at file_offset in {g['source']}")

    def assert_model(self, doc, location, where):
        """inspect --json's document against the reference reader's model of `location`."""
        want = st.expected_model(location)
        for field in ("format", "sources", "metadata"):
            self.assertEqual(doc.get(field), want[field], f"{where}: {field}")
        self.assertEqual(doc.get("byteorder"), "little", where)
        self.assertEqual([e["key"] for e in doc["entries"]], [e["key"] for e in want["entries"]],
                         f"{where}: keys, in order")
        for g, w in zip(doc["entries"], want["entries"]):
            self.assert_entry(g, w, location, f"{where}: {w['key']!r}")
        return want


# --------------------------------------------------------------------------------------------
# inspect
# --------------------------------------------------------------------------------------------

class InspectTests(unittest.TestCase, Checks):
    def check_fixture(self, name):
        location = model_fixture_path(name)
        doc = inspect_json(location)
        want = expected_doc(name)
        for field in ("format", "sources", "metadata"):
            self.assertEqual(doc[field], want[field], f"{name}: {field}")
        self.assertEqual([e["key"] for e in doc["entries"]], [e["key"] for e in want["entries"]],
                         f"{name}: keys")
        for g, w in zip(doc["entries"], want["entries"]):
            for field in ("kind", "dtype", "shape", "stride", "nbytes", "source"):
                self.assertEqual(g[field], w[field], f"{name}: {w['key']!r}: {field}")
        self.assert_model(doc, location, name)
        lines = [ln for ln in inspect(location).decode("utf-8").split("\n") if ln.strip()]
        self.assertEqual(len(lines), len(want["entries"]) + 2, f"{name}: header, entries, total")
        self.assertTrue(lines[-1].startswith(f"{len(want['entries'])} tensors ("), lines[-1])

    @needs_corpus
    def test_corpus_formats_present(self):
        names = [p.name for p in formats_corpus()]
        self.assertGreaterEqual(len(names), 6, names)
        self.assertIn("FluxML__SafeTensors.jl__test-sharded", names)

    def check_corpus(self, path):
        doc = inspect_json(path)
        self.assert_model(doc, path, path.name)

    def test_one_model_three_ways(self):
        """A sharded set named by its directory, by its index, or by the directory with a slash:
        the same entries."""
        for name in SHARDED_FIXTURES:
            d = model_fixture_path(name)
            index = st.model_location(d)
            docs = [inspect_json(x) for x in (d, index, f"{d}/")]
            self.assertEqual(docs[0], docs[1], name)
            self.assertEqual(docs[0], docs[2], name)

    def test_sharded_table_names_files(self):
        out = inspect(model_fixture_path("sharded_st")).decode("utf-8").split("\n")
        self.assertTrue(out[0].split()[-1] == "SOURCE", out[0])
        self.assertTrue(out[1].endswith("model-00003-of-00003.safetensors"), out[1])
        self.assertIn(", 3 files", [ln for ln in out if ln][-1])

    def test_only_the_listed_tensors_count(self):
        """A shard's tensors the index does not list are no part of the model: inspect counts
        the storages of the listed tensors only (safetensors and torch shards; an unlisted
        tensor that shares a listed one's storage leaves it counted once)."""
        import tempfile
        import torch
        with tempfile.TemporaryDirectory(prefix="ckptfs-unlisted-") as tmp:
            d = Path(tmp) / "st"
            d.mkdir()
            st.write_safetensors(d / "a.safetensors", [("x", "F32", [2], bytes(8)),
                                                       ("extra", "U8", [3], b"abc")])
            st.write_safetensors(d / "b.safetensors", [("more", "U8", [1], b"m"),
                                                       ("y", "I16", [1], b"yy")])
            st.write_index(d / "model.safetensors.index.json",
                           {"x": "a.safetensors", "y": "b.safetensors"}, 10)
            b = Path(tmp) / "bin"
            b.mkdir()
            base = torch.arange(6.0)
            torch.save({"extra": torch.ones(3), "w": base[:2], "tied": base}, b / "p1.bin")
            torch.save({"v": torch.zeros(2, dtype=torch.int8), "more": torch.ones(1)},
                       b / "p2.bin")
            st.write_index(b / "pytorch_model.bin.index.json", {"w": "p1.bin", "v": "p2.bin"}, 10)
            for index in (d / "model.safetensors.index.json", b / "pytorch_model.bin.index.json"):
                with self.subTest(index.name):
                    lines = [ln for ln in inspect(index).decode().split("\n") if ln]
                    self.assertEqual(len(lines), 4, lines)  # the header, 2 tensors, the total
                    self.assertRegex(lines[-1], r"^2 tensors \(\d+ bytes\), 0 values, "
                                                r"2 storages, format sharded, ")
                    doc = inspect_json(index)
                    self.assertEqual(len(doc["entries"]), 2)
                    for e in doc["entries"]:
                        self.assertEqual(e["shared_with"], [], e["key"])


for _name in ALL_FIXTURES:
    setattr(InspectTests, f"test_fixture_{_name}", lambda self, n=_name: self.check_fixture(n))
for _path in formats_corpus():
    setattr(InspectTests, f"test_corpus_{_path.name.replace('.', '_').replace('-', '_')}",
            lambda self, p=_path: self.check_corpus(p))


# --------------------------------------------------------------------------------------------
# The mount
# --------------------------------------------------------------------------------------------

class MountTests(MountTestCase, Checks):
    def check_mount(self, location, where):
        """Mounts `location`; the tree agrees with inspect and the reference in every byte."""
        mnt, proc = self.mount(location)
        doc = inspect_json(location)
        want = self.assert_model(doc, location, where)
        index = self.read_json(views_dir(mnt) / "index.json")
        self.assertEqual(index["source"], os.path.realpath(location), where)
        for field in ("format", "sources", "metadata", "byteorder"):
            self.assertEqual(index[field], doc[field], f"{where}: index.json {field}")
        tensors = [w for w in want["entries"] if w["kind"] == "tensor"]
        self.assertEqual(index["tensors"], len(tensors), where)
        self.assertEqual(index["values"], len(want["entries"]) - len(tensors), where)
        self.assertEqual(index["total_bytes"],
                         sum(w["nbytes"] for w in tensors if not w["broken"]), where)
        self.assertEqual([e["key"] for e in index["entries"]], [w["key"] for w in want["entries"]])
        self.assertEqual(set(os.listdir(mnt)), {VIEWS_FOLDER} | {e["path"] for e in index["entries"]},
                         f"{where}: root listing")
        self.assertEqual(sorted(os.listdir(views_dir(mnt))), sorted(ref.VIEW_FILES), where)
        names = ref.entry_names([w["key"] for w in want["entries"]])
        for e, g, w, name in zip(index["entries"], doc["entries"], want["entries"], names):
            at = f"{where}: {w['key']!r}"
            self.assertEqual(e["path"], name, at)
            d = mnt / e["path"]
            meta = self.read_json(d / "meta.json")
            self.assertEqual(meta, {"key": w["key"], **{k: g[k] for k in g if k not in (
                "key", "kind")}}, f"{at}: meta.json is inspect's entry")
            if w["broken"]:
                # Its files all the same, whose reads fail with EIO.
                self.assertEqual(sorted(os.listdir(d)), TENSOR_FILES, at)
                with self.assertRaises(OSError, msg=at) as caught:
                    (d / "data").read_bytes()
                self.assertEqual(caught.exception.errno, errno.EIO, at)
                continue
            self.assertEqual(sorted(os.listdir(d)), TENSOR_FILES, at)
            for field in ("dtype", "shape", "nbytes"):
                self.assertEqual(e[field], w[field], f"{at}: index.json {field}")
            data = w.data()
            self.assertEqual(os.stat(d / "data").st_size, w["nbytes"], at)
            self.assertEqual(sha256((d / "data").read_bytes()), sha256(data), f"{at}: data")
            offset = self.assert_npy(d / "tensor.npy", meta["numpy"], w["shape"], sha256(data), at)
            self.assertEqual(os.stat(d / "tensor.npy").st_size, offset + w["nbytes"], at)
        self.unmount(mnt, proc)

    def test_fixtures(self):
        for name in ALL_FIXTURES:
            with self.subTest(name):
                self.check_mount(model_fixture_path(name), name)

    @needs_corpus
    def test_corpus_formats(self):
        self.assertTrue(formats_corpus(), "no safetensors file in the corpus")
        for path in formats_corpus():
            with self.subTest(path.name):
                self.check_mount(path, path.name)

    def test_index_named(self):
        for name in SHARDED_FIXTURES:
            with self.subTest(name):
                self.check_mount(st.model_location(model_fixture_path(name)), name)

    def test_verify(self):
        """ckptfs-verify agrees on every fixture."""
        self.check_verify([model_fixture_path(n) for n in ALL_FIXTURES])

    @needs_corpus
    def test_verify_corpus(self):
        """ckptfs-verify agrees on every corpus/formats file."""
        self.assertTrue(formats_corpus(), "no safetensors file in the corpus")
        self.check_verify(formats_corpus())

    def check_verify(self, locations):
        r = run([sys.executable, VERIFY, *locations], env=dict(os.environ, CKPTFS=str(CKPTFS)),
                timeout=600)
        out = (r.stdout + r.stderr).decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, f"ckptfs-verify:\n{out}")
        for location in locations:
            self.assertRegex(out, rf"{location}: \d+ tensors, 0 values checked: all agree")

    def copy_set(self, name):
        d = self.tmp / name
        shutil.copytree(model_fixture_path(name), d)
        return d

    def test_times_are_the_newest_files(self):
        d = self.copy_set("sharded_st")
        for i, p in enumerate(sorted(d.iterdir())):
            os.utime(p, (1_600_000_000 + i, 1_600_000_000 + i * 1000))
        newest = max(p.stat().st_mtime for p in d.iterdir())
        mnt, proc = self.mount(d)
        for p in (mnt, views_dir(mnt) / "index.json", mnt / "lm_head.weight" / "data"):
            self.assertEqual(os.stat(p).st_mtime, newest, p)
        self.unmount(mnt, proc)

    def test_replaced_shard_fails_only_its_tensors(self):
        d = self.copy_set("sharded_st")
        want = {e["key"]: e for e in st.expected_model(d)["entries"]}
        mnt, proc = self.mount(d)
        shard = d / "model-00002-of-00003.safetensors"
        replacement = d / "replacement"
        replacement.write_bytes(shard.read_bytes())
        os.replace(replacement, shard)  # the same bytes, but another file
        moved = [k for k, e in want.items() if e["source"] == shard.name]
        kept = [k for k, e in want.items() if e["source"] != shard.name]
        self.assertTrue(moved and kept)
        for key in moved:
            for name in ("data", "tensor.npy", "tensor.pt", "meta.json"):
                with self.assertRaises(OSError) as caught:
                    open(mnt / ref.directory_name(key) / name, "rb").close()
                self.assertEqual(caught.exception.errno, errno.EIO, f"{key}/{name}")
        for name in ref.VIEW_FILES:  # index.json and the export describe or read every shard
            with self.assertRaises(OSError) as caught:
                open(views_dir(mnt) / name, "rb").close()
            self.assertEqual(caught.exception.errno, errno.EIO, name)
        for key in kept:
            self.assertEqual((mnt / ref.directory_name(key) / "data").read_bytes(),
                             want[key].data(), key)
        self.unmount(mnt, proc)
        # The log quotes names (a shard's comes from the index.json it was named in).
        self.assertIn('model-00002-of-00003.safetensors" changed while mounted',
                      self.output(proc))

    def test_a_hundred_shards(self):
        """A 100-shard set mounts fast: the time until index.json is readable is printed."""
        d = self.tmp / "hundred"
        d.mkdir()
        rng = np.random.RandomState(5)
        weight_map, data = {}, {}
        for i in range(100):
            f = f"model-{i + 1:05d}-of-00100.safetensors"
            tensors = [(f"layers.{i}.{n}", "F32", [64, 64], rng.bytes(64 * 64 * 4))
                       for n in ("q", "k", "v", "o")]
            st.write_safetensors(d / f, tensors, {"format": "pt"})
            for k, _, _, b in tensors:
                weight_map[k], data[k] = f, b
        st.write_index(d / "model.safetensors.index.json", weight_map, sum(map(len, data.values())))
        times = []
        for _ in range(3):
            start = time.monotonic()
            mnt, proc = self.start(d)
            while not index_readable(mnt):
                self.assertIsNone(proc.poll(), self.output(proc))
                self.assertLess(time.monotonic() - start, MOUNT_TIMEOUT)
                time.sleep(0.002)
            times.append(time.monotonic() - start)
            for k, b in data.items():
                self.assertEqual((mnt / k / "data").read_bytes(), b, k)
            self.unmount(mnt, proc)
        print(f"\n100-shard set (400 tensors): ckptfs -f until index.json is readable: "
              f"{', '.join(f'{t * 1000:.0f}' for t in times)} ms", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
