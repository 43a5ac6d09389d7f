# SPDX-License-Identifier: MIT
"""The safetensors export of a mount, on real mounts: model.safetensors at the root of every
mount, the sharded set of -o shard_size=SIZE, both under -o dtype=float16|bfloat16.

The oracles, none of them ckptfs:
  - the reader of scripts/ckptfs_safetensors.py in its strict mode (the format's rules, as a
    writer must follow them: padded header, data one run from offset 0 to the end of the file,
    valid dtypes, keys Unicode the safetensors library takes); StrictReaderTests shows that it
    refuses each way of breaking them;
  - torch.load of every fixture and corpus file (torch.jit.load for TorchScript archives,
    through ckptfs_reference), make_fixtures.py's reader for the two fixtures torch 1.13 cannot
    load, and the safetensors reference reader for safetensors sources: keys, dtypes, shapes,
    bytes; torch's own .to() for the converted bytes;
  - the split rule of transformers' shard_checkpoint(), computed here from the tensors' sizes.

Run by ctest as `/usr/bin/python3 -m unittest -v test_export` (see fixtures.py).
"""

import errno
import json
import os
import random
import re
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ckptfs_reference as ref  # noqa: E402
import ckptfs_safetensors as st  # noqa: E402
import make_fixtures  # noqa: E402
from fixtures import (CKPTFS, CORPUS, FIXTURE_NAMES, NOT_TORCH_LOADABLE,  # noqa: E402
                      SAFETENSORS_FIXTURES, SHARDED_FIXTURES, TORCHSCRIPT_FIXTURES, corpus_files,
                      fixture_path, formats_corpus, model_fixture_path, needs_corpus,
                      torchscript_corpus_files)
from test_mount import MountTestCase, run, torch_loadable  # noqa: E402

FLOATS = ("float16", "bfloat16", "float32", "float64")
# torch dtype name -> the format's name (F4 is handled apart: its shape counts halves of bytes).
FORMAT_NAME = {name: fmt for fmt, (name, bits) in st.DTYPES.items() if name and bits >= 8}
CONVERSIONS = (None, "float16", "bfloat16")
# The root files of an export (an entry's directory never has these names: the naming rule
# reserves them).
EXPORT_NAME = re.compile(r"model(-\d+-of-\d+)?\.safetensors(\.index\.json)?")


# --------------------------------------------------------------------------------------------
# What the export must hold, computed without ckptfs
# --------------------------------------------------------------------------------------------

class Want:
    """One tensor of a checkpoint as its oracle has it: its key (the Python str, or for a key
    that is not valid UTF-8 the str that index.json spells), torch's dtype name, shape, and its
    elements in C order as little-endian bytes; broken: ckptfs cannot serve it."""

    def __init__(self, key, dtype, shape, data, broken=False):
        self.key, self.dtype, self.shape = key, dtype, list(shape)
        self.data, self.broken = data, broken


def raw_key(key, spelled_by):
    """The bytes of a key, from a str as `spelled_by` spells it: "python" (torch.load: pickle
    writes a lone surrogate as its 3 bytes) or "json" (index.json: a byte that is not UTF-8 is
    the escape \\udcXX of that byte)."""
    return key.encode("utf-8", "surrogatepass" if spelled_by == "python" else "surrogateescape")


def torch_wants(path, big_endian):
    """[Want] of a checkpoint torch.load reads, in flattening order. torch 1.13 ignores the
    byteorder record: the elements of a big-endian file come as its bytes, so swapping them gives
    the true little-endian bytes."""
    out = []
    for key, obj in ref.flatten(ref.torch_load(path)):
        if ref.is_torch_tensor(obj):
            out.append(Want(key, ref.dtype_name(obj.dtype), obj.shape,
                            ref.tensor_bytes(obj, "big" if big_endian else "little")))
        else:
            out.append(None)
    return out


def torchscript_wants(path):
    return [Want(key, ref.dtype_name(t.dtype), t.shape, ref.tensor_bytes(t, "little"))
            for key, t, _, _ in ref.torchscript_flatten(path)]


def reader_wants(path):
    """[Want] from make_fixtures.py's reader (the fixtures torch 1.13 cannot load)."""
    _, byteorder, root = make_fixtures.reference_read(path)
    out = []
    for key, obj in ref.flatten(root, make_fixtures.is_tensor):
        if isinstance(obj, make_fixtures.TensorDesc):
            data = ref.gather(obj.storage_bytes, ref.DTYPE_SIZES[obj.dtype], obj.shape,
                              obj.stride, obj.offset)
            if byteorder == "big":
                data = ref.byteswap(data, ref.swap_unit(obj.dtype))
            out.append(Want(key, obj.dtype, obj.shape, data))
        elif ref.is_torch_tensor(obj):
            out.append(Want(key, ref.dtype_name(obj.dtype), obj.shape, ref.tensor_bytes(obj)))
        else:
            out.append(None)
    return out


def safetensors_wants(path):
    """([Want], metadata) of a safetensors file or sharded set, from the reference reader."""
    model = st.expected_model(path)
    wants = []
    for e in model["entries"]:
        if e["kind"] != "tensor":
            wants.append(None)
        elif e["broken"]:
            wants.append(Want(e["key"], None, [], b"", broken=True))
        else:
            wants.append(Want(e["key"], e["dtype"], e["shape"], e.data()))
    return wants, model["metadata"]


def as_torch(data, dtype, shape):
    """A torch tensor of `dtype` and `shape` holding little-endian `data`."""
    t = getattr(torch, dtype)
    if not data:
        return torch.empty(shape, dtype=t)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(t).reshape(shape)


def converted(data, dtype, shape, target):
    """torch's .to(target) of the tensor, as little-endian bytes. Computed over the elements
    padded to a multiple of 16 (at least 16), so that every element goes through torch's vector
    loop: its scalar remainder writes a float64 NaN as bfloat16 0x7fc0, the vector loop 0xffff,
    and ckptfs always gives the latter (include/ckptfs/view/convert.hpp)."""
    flat = as_torch(data, dtype, shape).reshape(-1)
    n = flat.numel()
    pad = 16 - n if n < 16 else -n % 16
    padded = torch.cat([flat, torch.zeros(pad, dtype=flat.dtype)])
    out = padded.to(getattr(torch, target))[:n]
    return ref.tensor_bytes(out, "little")


def header_name(raw):
    """A key as the header can hold it: its bytes as UTF-8, each byte that starts no well-formed
    sequence replaced by U+FFFD (JSON's lone surrogate escapes are refused by the safetensors
    library)."""
    out, i = [], 0
    while i < len(raw):
        for n in (1, 2, 3, 4):
            try:
                ch = raw[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(ch) == 1:
                out.append(ch)
                i += n
                break
        else:
            out.append("\ufffd")
            i += 1
    return "".join(out)


class Expected:
    """The tensors an export must hold, in order: [(header key, format dtype, shape, bytes)],
    its __metadata__, and what it lacks: [(index.json key, why)], "broken" for a broken tensor
    (the export then fails to read), else the format's reason."""

    def __init__(self, tensors, metadata, lacks=()):
        self.tensors, self.metadata, self.lacks = tensors, metadata, list(lacks)

    @property
    def fails(self):
        return any(why == "broken" for _, why in self.lacks)

    @property
    def total(self):
        return sum(len(d) for _, _, _, d in self.tensors)


def expected_export(index, wants, source_metadata, target=None):
    """What model.safetensors of a mount holds, from the mount's index.json (its keys, checked
    against the oracle's, in order) and the oracle's tensors: every tensor that is not broken and
    whose dtype the format has (F4: torch's float4_e2m1fn_x2 pairs, its last dimension doubled),
    converted to `target` when floating; keys made unique (the first of a text keeps it, the
    next get %#2, %#3..., numbers no other key has; "__metadata__" is the format's own) and
    valid Unicode (header_name); {"format": "pt"} and a safetensors source's metadata."""
    entries = index["entries"]
    assert len(entries) == len(wants), f"{len(entries)} entries, the oracle has {len(wants)}"
    rows = []
    for e, w in zip(entries, wants):
        if e["kind"] != "tensor":
            assert w is None, f"{e['key']!r}: a value in the mount, a tensor for the oracle"
            continue
        assert w is not None, f"{e['key']!r}: a tensor in the mount, a value for the oracle"
        assert raw_key(e["key"], "json") == raw_key(w.key, "python"), \
            f"keys differ: {e['key']!r}, {w.key!r}"
        rows.append((header_name(raw_key(e["key"], "json")), w, e["key"]))
    texts = {name for name, _, _ in rows}
    used = {"__metadata__"}
    tensors, lacks = [], []
    for name, w, index_key in rows:
        if w.broken:
            lacks.append((index_key, "broken"))
            continue
        dtype, shape, data = w.dtype, list(w.shape), w.data
        if target and dtype in FLOATS:
            data, dtype = converted(data, dtype, shape, target), target
        if dtype == "float4_e2m1fn_x2" and shape:
            fmt = "F4"
            shape[-1] *= 2
        elif dtype in FORMAT_NAME:
            fmt = FORMAT_NAME[dtype]
        else:
            lacks.append((index_key, "a 0-d float4_e2m1fn_x2: safetensors' F4 holds no half byte"
                          if dtype == "float4_e2m1fn_x2" else f"safetensors has no dtype {dtype}"))
            continue
        key, n = name, 1
        while key in used or (key != name and key in texts):
            n += 1
            key = f"{name}%#{n}"
        used.add(key)
        tensors.append((key, fmt, shape, data))
    metadata = {"format": "pt", **source_metadata}
    return Expected(tensors, metadata, lacks)


def shard_split(sizes, limit):
    """transformers' shard_checkpoint(): tensors in order; a new shard when the current one
    holds a tensor and the next would take it past `limit`. [[index]] per shard."""
    shards, current = [[]], 0
    for i, size in enumerate(sizes):
        if shards[-1] and current + size > limit:
            shards.append([])
            current = 0
        shards[-1].append(i)
        current += size
    return shards


# --------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------

class ExportTestCase(MountTestCase):
    def assert_file(self, path, want_tensors, want_metadata, where):
        """A file of the export: valid by the strict reader, holding `want_tensors` in that
        order ([(key, format dtype, shape, bytes)]) from offset 0, and `want_metadata`. Returns
        the file's bytes."""
        try:
            metadata, tensors = st.read_safetensors(path, strict=True)
        except st.FormatError as e:
            self.fail(f"{where}: not a valid safetensors file: {e}")
        self.assertEqual(metadata, want_metadata, f"{where}: __metadata__")
        self.assertEqual([t.name for t in tensors], [k for k, _, _, _ in want_tensors],
                         f"{where}: keys, in data order")
        whole = Path(path).read_bytes()
        self.assertEqual(len(whole), os.stat(path).st_size, f"{where}: size")
        for t, (key, dtype, shape, data) in zip(tensors, want_tensors):
            self.assertEqual((t.dtype, t.shape), (dtype, shape), f"{where}: {key!r}")
            got = whole[t.file_offset:t.file_offset + t.nbytes]
            if got != data:
                self.fail(f"{where}: {key!r}: {len(got)} bytes differ from the oracle's "
                          f"{len(data)}")
        # The header lists the tensors in the order of their data, as the library writes it.
        n = int.from_bytes(whole[:8], "little")
        header = json.loads(whole[8:8 + n])
        self.assertEqual([k for k in header if k != "__metadata__"],
                         [k for k, _, _, _ in want_tensors], f"{where}: header order")
        return whole

    def assert_exports(self, index, want, where):
        """index.json's "exports": the one safetensors export, what it lacks and why, in the
        mount's order; "fails" says why when it would lack a broken tensor, and is null else."""
        [export] = index["exports"]
        self.assertEqual([(x["key"], x["why"]) for x in export["lacks"]], want.lacks,
                         f"{where}: what index.json says the export lacks")
        if want.fails:
            self.assertRegex(export["fails"], r"would lack \d+ broken tensors?: ", where)
        else:
            self.assertIsNone(export["fails"], where)

    def check_export(self, path, wants, source_metadata, where):
        """model.safetensors of `path` mounted plain and under each -o dtype; one that would lack a
        broken tensor fails to read (EIO) instead."""
        for target in CONVERSIONS:
            options = ("-o", f"dtype={target}") if target else ()
            mnt, proc = self.mount(path, *options)
            try:
                index = self.read_json(views_dir(mnt) / "index.json")
                want = expected_export(index, wants, source_metadata, target)
                self.assertNotIn("model.safetensors.index.json", os.listdir(views_dir(mnt)))
                self.assert_exports(index, want, f"{where} dtype={target}")
                if want.fails:
                    with self.assertRaises(OSError, msg=where) as caught:
                        (views_dir(mnt) / "model.safetensors").read_bytes()
                    self.assertEqual(caught.exception.errno, errno.EIO, where)
                    continue
                self.assert_file(views_dir(mnt) / "model.safetensors", want.tensors, want.metadata,
                                 f"{where} dtype={target}")
            finally:
                self.unmount(mnt, proc)


class StrictReaderTests(unittest.TestCase):
    """The strict reader refuses every way of breaking the format's rules that the export is
    checked for (so that the tests below can fail)."""

    def write(self, header_bytes, data):
        fd, path = tempfile.mkstemp(suffix=".safetensors")
        os.close(fd)
        self.addCleanup(os.unlink, path)
        Path(path).write_bytes(len(header_bytes).to_bytes(8, "little") + header_bytes + data)
        return path

    def header(self, doc, pad=b" "):
        text = json.dumps(doc, separators=(",", ":")).encode()
        return text + pad * (-len(text) % 8)

    def test_refusals(self):
        t = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
        u = {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}
        good = {"__metadata__": {"format": "pt"}, "a": t, "b": u}
        path = self.write(self.header(good), bytes(12))
        metadata, tensors = st.read_safetensors(path, strict=True)
        self.assertEqual((metadata, [x.name for x in tensors]), ({"format": "pt"}, ["a", "b"]))
        unpadded = json.dumps({"a": t}, separators=(",", ":")).encode()
        self.assertNotEqual(len(unpadded) % 8, 0)
        bad = {
            "unpadded": (unpadded, bytes(8)),
            "padded with newlines": (self.header({"a": t}, b"\n") + b"\n" * 8, bytes(8)),
            "padded with NULs": (self.header({"a": t}, b"\0"), bytes(8)),
            "leading space": (b" " * 8 + self.header({"a": t}), bytes(8)),
            "a gap": (self.header({"a": t, "b": {**u, "data_offsets": [9, 13]}}), bytes(13)),
            "an overlap": (self.header({"a": t, "b": {**u, "data_offsets": [4, 8]}}), bytes(8)),
            "not from 0": (self.header({"b": u}), bytes(12)),
            "bytes after the data": (self.header({"a": t}), bytes(9)),
            "data short": (self.header({"a": t}), bytes(7)),
            "a bad dtype": (self.header({"a": {**t, "dtype": "float32"}}), bytes(8)),
            "a length that is not the shape's": (self.header({"a": {**t, "shape": [3]}}),
                                                 bytes(8)),
            "__metadata__ null": (self.header({"__metadata__": None, "a": t}), bytes(8)),
            "metadata not strings": (self.header({"__metadata__": {"n": 1}, "a": t}), bytes(8)),
            "a lone surrogate": (self.header({"\udcff": t}), bytes(8)),
            "a key twice": (b'{"a":' + json.dumps(t).encode() + b',"a":'
                            + json.dumps(t).encode() + b'}', bytes(8)),
            "NaN": (self.header({"a": t, "__metadata__": {"x": "y"}}).replace(b'"y"', b"NaN"),
                    bytes(8)),
        }
        for why, (header, data) in bad.items():
            with self.subTest(why):
                if why == "a key twice":
                    header += b" " * (-len(header) % 8)
                path = self.write(header, data)
                with self.assertRaises((st.FormatError, ValueError), msg=why):
                    st.read_safetensors(path, strict=True)


class FixtureExportTests(ExportTestCase):
    def test_every_fixture(self):
        """model.safetensors of every fixture, plain, float16 and bfloat16."""
        for name in FIXTURE_NAMES:
            path = fixture_path(name)
            with self.subTest(fixture=name):
                if name in TORCHSCRIPT_FIXTURES:
                    wants = torchscript_wants(path)
                elif name in NOT_TORCH_LOADABLE:
                    wants = reader_wants(path)
                else:
                    wants = torch_wants(path, name == "bigendian")
                self.check_export(path, wants, {}, name)

    def test_safetensors_fixtures(self):
        """Safetensors files and sharded sets as sources: their metadata kept."""
        for name in SAFETENSORS_FIXTURES + SHARDED_FIXTURES:
            path = model_fixture_path(name)
            with self.subTest(fixture=name):
                wants, metadata = safetensors_wants(path)
                self.check_export(path, wants, metadata, name)


@needs_corpus
class CorpusExportTests(ExportTestCase):
    def test_corpus(self):
        """Every corpus checkpoint torch 1.13 loads."""
        files = [p for p in corpus_files() if torch_loadable(p)]
        self.assertTrue(files, f"torch loads no checkpoint of {CORPUS}")
        for path in files:
            with self.subTest(path.name):
                self.check_export(path, torch_wants(path, False), {}, path.name)

    def test_formats_corpus(self):
        """The real safetensors files, the sharded set and the TorchScript archives."""
        files = formats_corpus() + torchscript_corpus_files()
        self.assertTrue(files, f"no files in {CORPUS / 'formats'}")
        for path in files:
            with self.subTest(path.name):
                if path.suffix == ".jit":
                    wants, metadata = torchscript_wants(path), {}
                else:
                    wants, metadata = safetensors_wants(path)
                self.check_export(path, wants, metadata, path.name)


def edge_checkpoint(path):
    """Keys the export must rename, tied and strided tensors, dtypes it leaves out or converts."""
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(4, 6, generator=gen)
    nan64 = torch.tensor([float("nan"), -float("nan"), 1e300, -1e-310, 0.5], dtype=torch.float64)
    obj = {
        "__metadata__": torch.arange(3, dtype=torch.int32),   # the format's own key
        "bad\udcff.weight": torch.ones(2),                   # a key that is not UTF-8...
        "bad\ufffd\ufffd\ufffd.weight": torch.zeros(3),      # ...and what it becomes
        "w": w, "w_tied": w, "w.T": w.t(), "w.col": w[:, 2],
        "nan64": nan64,
        "c128": torch.ones(2, dtype=torch.complex128),        # no such dtype in the format
        "q": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8),
        "bf": torch.randn(5, generator=gen).to(torch.bfloat16),
        "model.safetensors": torch.ones(1, dtype=torch.int8),
        "step": 7,
    }
    torch.save(obj, path)


class EdgeTests(ExportTestCase):
    def test_keys_and_kinds(self):
        """Renamed keys, tied and strided tensors, dtypes left out."""
        tmp = Path(self.new_dir("ckpt"))
        edge_checkpoint(tmp / "edge.pth")
        wants = torch_wants(tmp / "edge.pth", False)
        self.check_export(tmp / "edge.pth", wants, {}, "edge.pth")
        # What the rule above gives, spelled out once.
        mnt, proc = self.mount(tmp / "edge.pth")
        try:
            _, tensors = st.read_safetensors(views_dir(mnt) / "model.safetensors", strict=True)
            # pickle writes U+DCFF as 3 bytes, none of which starts a UTF-8 sequence
            bad = "bad\ufffd\ufffd\ufffd.weight"
            self.assertEqual([t.name for t in tensors], [
                "__metadata__%#2", bad, bad + "%#2", "w", "w_tied", "w.T", "w.col", "nan64", "bf",
                "model.safetensors"])
        finally:
            self.unmount(mnt, proc)

    def test_bigendian_random_reads(self):
        """A big-endian checkpoint's export is little-endian, whatever the read's offsets."""
        tmp = Path(self.new_dir("ckpt"))
        gen = torch.Generator().manual_seed(9)
        m = torch.randn(300, 200, generator=gen)
        obj = {"m": m, "m.T": m.t(), "i": torch.arange(5000, dtype=torch.int64),
               "c": torch.randn(700, generator=gen).to(torch.complex64),
               "h": torch.randn(999, generator=gen).half(),
               "u": torch.arange(77, dtype=torch.uint8)}
        torch.save(obj, tmp / "le.pth")
        (tmp / "be.pth").write_bytes(make_fixtures.bigendian_from(
            make_fixtures.torch_save_bytes(obj), "be"))
        for target in CONVERSIONS:
            wants = torch_wants(tmp / "le.pth", False)
            self.check_export(tmp / "be.pth", wants, {}, f"be.pth dtype={target}")
        mnt, proc = self.mount(tmp / "be.pth")
        try:
            index = self.read_json(views_dir(mnt) / "index.json")
            self.assertEqual(index["byteorder"], "big")
            want = expected_export(index, torch_wants(tmp / "le.pth", False), {})
            full = self.assert_file(views_dir(mnt) / "model.safetensors", want.tensors, want.metadata, "be")
            random_reads(self, views_dir(mnt) / "model.safetensors", full, boundaries(full),
                         random.Random(3), "be.pth model.safetensors")
        finally:
            self.unmount(mnt, proc)


# --------------------------------------------------------------------------------------------
# Sharded sets
# --------------------------------------------------------------------------------------------

def shard_names(count):
    return [f"model-{i:05}-of-{count:05}.safetensors" for i in range(1, count + 1)]


class ShardTests(ExportTestCase):
    def check_sharded(self, path, wants, metadata, where, target=None):
        """-o shard_size= below the largest tensor, for about 5 shards, above the whole model;
        and 1 byte (every tensor alone). Returns nothing; asserts everything."""
        mnt, proc = self.mount(path)
        try:
            plain = expected_export(self.read_json(views_dir(mnt) / "index.json"), wants, metadata, target)
        finally:
            self.unmount(mnt, proc)
        sizes = [len(d) for _, _, _, d in plain.tensors]
        self.assertGreater(len(sizes), 2, f"{where}: too few tensors to shard")
        largest, total = max(sizes), sum(sizes)
        cases = {"below the largest tensor": largest - 1, "about 5 shards": total // 5,
                 "above the model": total + 1, "1 byte": 1}
        for why, limit in cases.items():
            options = ["-o", f"shard_size={limit}"] + (["-o", f"dtype={target}"] if target else [])
            with self.subTest(where=where, case=why, shard_size=limit):
                mnt, proc = self.mount(path, *options)
                try:
                    self.check_set(mnt, plain, shard_split(sizes, limit), limit,
                                   f"{where} {why} ({limit})")
                finally:
                    self.unmount(mnt, proc)

    def check_set(self, mnt, want, split, limit, where):
        names = sorted(n for n in os.listdir(views_dir(mnt)) if EXPORT_NAME.fullmatch(n))
        self.assertFalse([n for n in os.listdir(mnt) if EXPORT_NAME.fullmatch(n)],
                         f"{where}: export files at the root, not in .ckptfs")
        if len(split) == 1:
            # save_pretrained writes one model.safetensors, and no index, for one shard.
            self.assertEqual(names, ["model.safetensors"], f"{where}: one file")
            self.assert_file(views_dir(mnt) / "model.safetensors", want.tensors, want.metadata, where)
            return
        files = shard_names(len(split))
        self.assertEqual(names, files + ["model.safetensors.index.json"], f"{where}: files")
        index = json.loads((views_dir(mnt) / "model.safetensors.index.json").read_bytes(),
                           object_pairs_hook=st._unique_pairs)  # a key twice fails
        self.assertEqual(set(index), {"metadata", "weight_map"}, where)
        self.assertEqual(index["metadata"], {"total_size": want.total}, f"{where}: total_size")
        keys = [k for k, _, _, _ in want.tensors]
        self.assertEqual(sorted(index["weight_map"]), sorted(keys), f"{where}: weight_map keys")
        for i, (name, members) in enumerate(zip(files, split)):
            shard_tensors = [want.tensors[j] for j in members]
            self.assertEqual({k: v for k, v in index["weight_map"].items() if v == name},
                             {k: name for k, _, _, _ in shard_tensors},
                             f"{where}: weight_map of {name}")
            data = sum(len(d) for _, _, _, d in shard_tensors)
            self.assertTrue(data <= limit or len(shard_tensors) == 1,
                            f"{where}: {name} holds {data} bytes of {len(shard_tensors)} tensors")
            full = self.assert_file(views_dir(mnt) / name, shard_tensors, want.metadata,
                                    f"{where}: {name}")
            if i in (0, len(files) - 1):
                random_reads(self, views_dir(mnt) / name, full, boundaries(full), random.Random(i),
                             f"{where}: {name}", count=60)

    def test_fixtures_and_sets(self):
        for name in ("convnet", "views", "training"):
            with self.subTest(fixture=name):
                self.check_sharded(fixture_path(name), torch_wants(fixture_path(name), False), {},
                                   name)
        for name in SHARDED_FIXTURES:
            wants, metadata = safetensors_wants(model_fixture_path(name))
            self.check_sharded(model_fixture_path(name), wants, metadata, name)

    @needs_corpus
    def test_corpus_sets(self):
        hf = [p for p in formats_corpus() if p.is_dir()]
        self.assertTrue(hf, "no sharded set in the corpus")
        for path in hf:
            wants, metadata = safetensors_wants(path)
            self.check_sharded(path, wants, metadata, path.name)
            self.check_sharded(path, wants, metadata, path.name, target="bfloat16")

    @needs_corpus
    def test_corpus_file(self):
        path = CORPUS / "leftthomas__SRGAN__epochs-netG_epoch_4_100.pth"
        self.assertTrue(path.is_file(), f"{path} is missing")
        wants = torch_wants(path, False)
        self.check_sharded(path, wants, {}, path.name)
        self.check_sharded(path, wants, {}, path.name, target="float16")

    def test_size_units(self):
        """shard_size takes the units of save_pretrained's max_shard_size: KB = 1000, KiB = 1024;
        and K = 1024 (the man page)."""
        path = fixture_path("convnet")
        mnt, proc = self.mount(path)
        try:
            want = expected_export(self.read_json(views_dir(mnt) / "index.json"),
                                   torch_wants(path, False), {})
        finally:
            self.unmount(mnt, proc)
        sizes = [len(d) for _, _, _, d in want.tensors]
        for text, limit, other in (("1KB", 1000, 1024), ("1KiB", 1024, 1000), ("1K", 1024, 1000)):
            with self.subTest(text):
                split = shard_split(sizes, limit)
                # The fixture tells the units apart (else this test could not fail).
                self.assertNotEqual(split, shard_split(sizes, other), text)
                mnt, proc = self.mount(path, "-o", f"shard_size={text}")
                try:
                    self.check_set(mnt, want, split, limit, f"shard_size={text}")
                finally:
                    self.unmount(mnt, proc)

    def test_size_limits(self):
        """shard_size at its limits: up to 2^63 - 1 bytes in any unit, the largest mounting one
        model.safetensors; past it, even by a fraction of a unit (18446744.1TB once wrapped to
        some 26 GB), status 1 "invalid shard_size" and nothing mounted."""
        path = fixture_path("convnet")
        for text in ("18446744.1TB", "9223372036854775808", "18446744073709551616", "8388608T",
                     "9223372.036854775808TB", "16777216TiB", "0", "0.0001", "-1", "1.5.5"):
            with self.subTest(text):
                mnt = self.new_dir()
                r = run([CKPTFS, "-o", f"shard_size={text}", path, mnt])
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(f"invalid shard_size '{text}'", r.stderr.decode())
                self.assertEqual(os.listdir(mnt), [])
        mnt, proc = self.mount(path)
        try:
            want = expected_export(self.read_json(views_dir(mnt) / "index.json"),
                                   torch_wants(path, False), {})
        finally:
            self.unmount(mnt, proc)
        sizes = [len(d) for _, _, _, d in want.tensors]
        for text, limit in (("9223372036854775807", 2**63 - 1), ("8388607.999999TiB", None)):
            with self.subTest(text):
                mnt, proc = self.mount(path, "-o", f"shard_size={text}")
                try:
                    self.check_set(mnt, want, shard_split(sizes, 2**62), limit or 2**62,
                                   f"shard_size={text}")
                finally:
                    self.unmount(mnt, proc)


# --------------------------------------------------------------------------------------------
# Reads at random offsets
# --------------------------------------------------------------------------------------------

def boundaries(full):
    """Offsets where a read may go wrong in a safetensors file: the header's end, every tensor's
    start, and the end of the file."""
    n = int.from_bytes(full[:8], "little")
    header = json.loads(full[8:8 + n])
    out = {8, 8 + n, len(full)}
    for k, v in header.items():
        if k != "__metadata__":
            out.add(8 + n + v["data_offsets"][0])
    return sorted(out)


def random_reads(case, path, full, marks, rng, where, count=300):
    """`count` preads of random (offset, length) of `path` equal `full`'s slices: a third across
    one of `marks`, the others anywhere and of any size, some past the end."""
    size = len(full)
    fd = os.open(path, os.O_RDONLY)
    try:
        case.assertEqual(os.fstat(fd).st_size, size, f"{where}: size")
        for i in range(count):
            if i % 3 == 0:
                offset = max(0, rng.choice(marks) - rng.randint(0, 300))
                length = rng.randint(1, 700)
            elif i % 3 == 1:
                offset = rng.randint(0, size)
                length = rng.choice([1, 2, 3, 5, 7, 64, 4095, 4097, 65537])
            else:
                offset = rng.randint(0, size)
                length = rng.randint(1, max(1, min(size, 1_500_000)))
            got = os.pread(fd, length, offset)
            if got != full[offset:offset + length]:
                case.fail(f"{where}: pread({length}, {offset}) differs from the expected bytes "
                          f"(read {len(got)} bytes)")
    finally:
        os.close(fd)


class RandomReadTests(ExportTestCase):
    """A checkpoint of a few MiB: every byte of model.safetensors, of a sharded set's files, of
    converted data and tensor.npy comes from a reference built here from torch's tensors."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = Path(tempfile.mkdtemp(prefix="ckptfs-export-"))
        gen = torch.Generator().manual_seed(42)
        big = torch.randn(384, 1024, generator=gen)
        cls.tensors = {
            "big": big,                                       # 1.5 MiB, one range
            "big.T": big.t(),                                 # gathered
            "big.rows": big[::3],                             # strided rows
            "half": torch.randn(1000, 333, generator=gen).half(),
            "bf": torch.randn(70001, generator=gen).to(torch.bfloat16),
            "f64": torch.randn(50000, generator=gen).double(),
            "ints": torch.arange(100000, dtype=torch.int64),
            "tiny": torch.tensor([1.5, -0.0, float("inf")]),
        }
        cls.path = cls.dir / "reads.pth"
        torch.save(cls.tensors, cls.path)
        cls.wants = torch_wants(cls.path, False)

    @classmethod
    def tearDownClass(cls):
        for p in cls.dir.iterdir():
            p.unlink()
        cls.dir.rmdir()

    def reference_file(self, mnt, want, where):
        """The export as the test builds it: the header the mount serves, once checked against
        `want` by the strict reader (assert_file), then the oracle's bytes."""
        full = self.assert_file(views_dir(mnt) / "model.safetensors", want.tensors, want.metadata, where)
        n = int.from_bytes(full[:8], "little")
        built = full[:8 + n] + b"".join(d for _, _, _, d in want.tensors)
        self.assertEqual(built, full, f"{where}: the file is not its header and the bytes")
        return built

    def test_model_safetensors(self):
        for target in CONVERSIONS:
            options = ("-o", f"dtype={target}") if target else ()
            mnt, proc = self.mount(self.path, *options)
            try:
                index = self.read_json(views_dir(mnt) / "index.json")
                want = expected_export(index, self.wants, {}, target)
                where = f"model.safetensors dtype={target}"
                built = self.reference_file(mnt, want, where)
                random_reads(self, views_dir(mnt) / "model.safetensors", built, boundaries(built),
                             random.Random(f"st{target}"), where)
                if target:
                    self.check_converted_files(mnt, index, target)
            finally:
                self.unmount(mnt, proc)

    def check_converted_files(self, mnt, index, target):
        """data and tensor.npy of every converted tensor, read at random offsets."""
        for e, w in zip(index["entries"], self.wants):
            if w.dtype not in FLOATS:
                continue
            data = converted(w.data, w.dtype, w.shape, target)
            d = mnt / e["path"]
            where = f"{e['key']} dtype={target}"
            rng = random.Random(where)
            # The middle, and where the 64 KiB staging buffer of the source ends.
            step = 65536 // ref.DTYPE_SIZES[w.dtype] * ref.DTYPE_SIZES[target]
            marks = [0, len(data) // 2, len(data)] + list(range(step, len(data), step))[:4]
            random_reads(self, d / "data", data, marks, rng, f"{where} data", count=80)
            npy = d / "tensor.npy"
            with open(npy, "rb") as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, fortran, dtype = read_header(f)
                header_len = f.tell()
            self.assertEqual((list(shape), fortran, dtype.str),
                             (w.shape, False, ref.numpy_descr(target, "little")), where)
            with open(npy, "rb") as f:
                header = f.read(header_len)
            self.assertEqual(header_len % 64, 0, f"{where}: tensor.npy header")
            random_reads(self, npy, header + data, [header_len, header_len + len(data)], rng,
                         f"{where} tensor.npy", count=80)

    def test_sharded(self):
        mnt, proc = self.mount(self.path)
        try:
            want = expected_export(self.read_json(views_dir(mnt) / "index.json"), self.wants, {})
        finally:
            self.unmount(mnt, proc)
        sizes = [len(d) for _, _, _, d in want.tensors]
        limit = sum(sizes) // 5
        split = shard_split(sizes, limit)
        self.assertGreater(len(split), 3)
        mnt, proc = self.mount(self.path, "-o", f"shard_size={limit}")
        try:
            files = shard_names(len(split))
            for i, (name, members) in enumerate(zip(files, split)):
                shard = Expected([want.tensors[j] for j in members], want.metadata)
                full = self.assert_file(views_dir(mnt) / name, shard.tensors, shard.metadata, name)
                n = int.from_bytes(full[:8], "little")
                built = full[:8 + n] + b"".join(d for _, _, _, d in shard.tensors)
                self.assertEqual(built, full, name)
                random_reads(self, views_dir(mnt) / name, built, boundaries(built), random.Random(name),
                             name, count=100)
        finally:
            self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
