# SPDX-License-Identifier: MIT
"""Integration tests of `ckptfs pack`, the real binary, without mounting (test_pack_mount.py
packs what rsync copied out of a mount):

    - round trips of every fixture and corpus file: SRC -> pack OUT.pth -> torch.load equals the
      source: nested as torch.load of SRC gives it (ckptfs_reference.packed_nesting: the type of
      every container, keys of every type in order, attributes, tensors, values), and with
      --flat the flattened keys (keys and their order, dtypes, shapes, strides, storage
      offsets, bytes, storages still shared, values); SRC -> pack OUT.safetensors -> the
      reference reader of scripts/ckptfs_safetensors.py equals it (little-endian bytes,
      {"format": "pt"}); a training checkpoint packed resumes its optimizer as the source does;
    - RFC directories written by torch in the test, from the RFC's text alone
      (torch.save(list_of_keys, "map.pt"), torch.save(tensor, f"{name}.pt")) -> pack -> equals;
    - --keys subsets, --dtype, --force, usage errors;
    - hostile split directories (lying meta.json, a link leading out, data shorter than meta.json
      says, keys claimed twice, huge and deep JSON): one line, the documented exit code, nothing
      under OUT's name and no temporary file beside it;
    - a pack killed (SIGKILL) in the middle of a large file leaves nothing under OUT's name.

The oracles: the fixtures' expected.json (sha256 of every tensor's bytes as stored, made by
scripts/make_fixtures.py with torch and its own reader), torch.load (ckptfs_reference's loader
for the sources; plain torch.load for what pack wrote), make_fixtures' reference reader for the
files torch 1.13 cannot load, and `ckptfs inspect --json` of SRC for what ckptfs itself reads
there (values, quantization, which storage each tensor views).
"""

import collections
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import warnings
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("torch")  # else the module exits 77: skipped, with the reason

import torch  # noqa: E402

import ckptfs_reference as ref  # noqa: E402
import ckptfs_safetensors as st  # noqa: E402
import make_fixtures  # noqa: E402
from fixtures import (CKPTFS, CORPUS, FIXTURE_NAMES, NOT_TORCH_LOADABLE,  # noqa: E402
                      SAFETENSORS_FIXTURES, SHARDED_FIXTURES, TORCHSCRIPT_FIXTURES, corpus_files,
                      expected_doc, fixture_path, formats_corpus, model_fixture_path,
                      needs_corpus)
from test_export import header_name  # noqa: E402
from test_writers import data_offsets  # noqa: E402

warnings.filterwarnings("ignore")

TIMEOUT = 300  # seconds for one ckptfs run; generous for sanitizer builds
EXIT = {"ok": 0, "usage": 1, "io": 2, "zip": 3, "checkpoint": 4, "unsupported": 5}

# torch dtype name -> safetensors dtype, for the dtypes ckptfs writes to safetensors
# (float4_e2m1fn_x2 as F4, but a 0-d one: half a byte), as the mount's export does.
SAFETENSORS_DTYPE = {torch_name: name for name, (torch_name, _) in st.DTYPES.items()
                     if torch_name is not None}
TORCH_QUANTIZED = {"qint8", "quint8", "qint32"}
# The dtypes without a storage class, which torch 1.13 cannot load.
NOT_IN_TORCH_1_13 = {"uint16", "uint32", "uint64", "float8_e5m2", "float8_e4m3fn",
                     "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2",
                     "complex32", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2"}
QUANTIZED = TORCH_QUANTIZED | {"quint4x2", "quint2x4"}


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def run(*args, timeout=TIMEOUT):
    return subprocess.run([str(CKPTFS), *map(str, args)], capture_output=True, timeout=timeout)


def inspect(path):
    """`ckptfs inspect --json PATH`, parsed (a file or a directory)."""
    r = run("inspect", "--json", path)
    if r.returncode != 0:
        raise AssertionError(f"ckptfs inspect --json {path}: exit {r.returncode}: "
                             f"{r.stderr.decode(errors='replace')}")
    return json.loads(r.stdout)


def json_key(entry):
    """An entry's key path as compact JSON ("null" without one): with its key, what tells
    entries apart."""
    return json.dumps(entry.get("key_path"), separators=(",", ":"))


def plain(value):
    """Whether ckptfs's JSON of a value describes a plain Python value (pack writes it): what
    value.json's rule reads back (ref.value_from_json)."""
    try:
        ref.value_from_json(value)
        return True
    except ref.NotPlain:
        return False


def unique_keys(keys):
    """pack's keys: the first of a text keeps it, later ones the smallest "%#N" that is no
    entry's own key (the mount's rule)."""
    own, used, out = set(keys), set(), []
    for text in keys:
        key, n = text, 2
        while key in used:
            key = f"{text}%#{n}"
            if key in own:
                key = text
            n += 1
        used.add(key)
        out.append(key)
    return out


def is_part(entry):
    path = entry.get("key_path")
    return not path or (isinstance(path[-1], dict) and "__part__" in path[-1])


def torch_plan(doc):
    """[(index into doc's entries, key in OUT)] of what `pack OUT.pth` writes of a model
    `ckptfs inspect --json` describes."""
    entries = doc["entries"]
    inside = set()
    for e in entries:
        q = e.get("quantization") if e["kind"] == "tensor" else None
        if q and "scales" in q and e["dtype"] in TORCH_QUANTIZED and e["broken"] is None:
            inside |= {q["scales"], q["zero_points"]}
    want = []
    for i, e in enumerate(entries):
        if e["kind"] == "value":
            if not plain(e["value"]):
                continue
        elif e["dtype"] in QUANTIZED and e["dtype"] not in TORCH_QUANTIZED:
            continue
        elif e["key"] in inside and e["dtype"] not in QUANTIZED and is_part(e):
            continue
        want.append(i)
    # OUT's keys are the keys themselves: a str with a lone surrogate, which index.json writes
    # as \udcXX escapes of its bytes, is that str again.
    return list(zip(want, unique_keys([ref.text_of_json(entries[i]["key"]) for i in want])))


def safetensors_plan(doc, dtype=None):
    """The same for `pack OUT.safetensors`: the tensors of a dtype safetensors has."""
    entries = doc["entries"]
    want = [i for i, e in enumerate(entries)
            if e["kind"] == "tensor" and converted(e["dtype"], dtype) in SAFETENSORS_DTYPE
            and not (e["dtype"] == "float4_e2m1fn_x2" and e["shape"] == [])]
    # OUT's keys are the keys as the format's JSON can hold them: a byte that is not UTF-8 (a
    # lone surrogate's, which index.json writes as \udcXX) is U+FFFD, as the mount's export has
    # it.
    return list(zip(want, unique_keys([
        header_name(ref.text_of_json(entries[i]["key"]).encode("utf-8", "surrogatepass"))
        for i in want])))


def converted(dtype, to):
    return to if to and dtype in ("float16", "bfloat16", "float32", "float64") else dtype


def to_json(v):
    """A value torch.load gave back, as ckptfs writes values in JSON (value.json's rule)."""
    j = ref.simple_json(v)
    if j is ref.NOT_JSON:
        raise AssertionError(f"pack wrote a {type(v).__name__}, which is no plain value")
    return j


def weights_only_loads(path):
    """Whether torch.load(path, weights_only=True) reads it (False: the weights-only unpickler
    refused something; any other failure is raised)."""
    try:
        torch.load(path, map_location="cpu", weights_only=True)
        return True
    except Exception as e:  # noqa: BLE001: torch raises UnpicklingError or RuntimeError
        if "Weights only load failed" not in str(e):
            raise
        return False


def record_names(path):
    with zipfile.ZipFile(path) as z:
        return [i.filename for i in z.infolist()]


class PackTestCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="ckptfs-pack-test-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)

    def new_dir(self, name):
        d = Path(tempfile.mkdtemp(prefix=name + "-", dir=self.tmp))
        return d

    def split_dir(self, name):
        """A valid split directory of two tensors and a value, as a mount shows them."""
        d = self.new_dir(name)
        w = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        for key, t in (("w", w), ("b", torch.ones(4, dtype=torch.float64))):
            (d / key).mkdir()
            data = ref.tensor_bytes(t, "little")
            (d / key / "meta.json").write_text(
                meta_json(key, ref.dtype_name(t.dtype), list(t.shape), len(data)))
            (d / key / "data").write_bytes(data)
        (d / "epoch").mkdir()
        (d / "epoch" / "value.json").write_text("7\n")
        return d

    def pack(self, src, out, *args):
        """Runs pack, which must succeed and print nothing but what it left out, what it
        renamed (keys of equal text) and, last, its one-line summary (off a terminal: no
        progress)."""
        r = run("pack", src, out, *args)
        err = r.stderr.decode(errors="replace")
        self.assertEqual(r.returncode, 0, f"ckptfs pack {src} {out} {' '.join(args)}: {err}")
        lines = err.splitlines()
        self.assertTrue(lines, "no summary")
        self.assertRegex(lines[-1], r"^ckptfs: .*: packed \d+ tensors?, \d+ values? \(.*\) in "
                                    r"[\d.]+ s \(.*/s\)(, left out \d+ entr(y|ies) \(above\))?$")
        for line in lines[:-1]:
            self.assertRegex(line, r"^ckptfs: .*: ((left out|renamed) \d+ entr(y|ies)|flattened "
                                   r"\d+ places?) \(")
        return "".join(line + "\n" for line in lines[:-1])

    def assert_refused(self, src, out, code, message, *args):
        """pack fails with `code`, one line matching `message`, and leaves nothing beside OUT:
        not OUT, not a temporary file."""
        before = sorted(os.listdir(out.parent))
        r = run("pack", src, out, *args)
        err = r.stderr.decode(errors="replace")
        self.assertEqual(r.returncode, EXIT[code], f"{src}: {err}")
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertRegex(err, r"^ckptfs: " + message)
        self.assertEqual(sorted(os.listdir(out.parent)), before, "pack left files behind")
        return err

    # ---- torch ---------------------------------------------------------------------------

    def check_torch_pack(self, src, out, reference=None, expected=None, args=()):
        """Packs SRC into OUT (.pth) and compares torch.load(OUT) with what ckptfs reads in SRC
        (inspect), the bytes with `expected` (expected.json's sha256 by entry index) or with
        `reference` ([(key, torch object)] aligned with ckptfs's entries)."""
        doc = inspect(src)
        self.pack(src, out, "--flat", *args)
        plan = torch_plan(doc)
        with zipfile.ZipFile(out) as z:
            self.assertIsNone(z.testzip(), "a CRC is wrong")
            prefix = out.stem
            # Little-endian whatever SRC's order: torch before 2.1 ignores the record.
            self.assertEqual(z.read(f"{prefix}/byteorder").decode(), "little")
        for name, offset in data_offsets(out).items():
            if "/data/" in name:
                self.assertEqual(offset % 64, 0, name)
        if any(doc["entries"][i].get("dtype") in NOT_IN_TORCH_1_13 for i, _ in plan):
            # torch 1.13 cannot load these dtypes (torch >= 2.2 writes and reads them through
            # _rebuild_tensor_v3): ckptfs reads OUT again, make_fixtures' reader the bytes.
            back = inspect(out)["entries"]
            self.assertEqual([e["key"] for e in back], [k for _, k in plan])
            for (index, key), got in zip(plan, back):
                e = doc["entries"][index]
                for field in ("kind", "dtype", "shape", "stride", "storage_offset", "value"):
                    self.assertEqual(got.get(field), e.get(field), f"{key}: {field}")
            if expected is not None:
                stored = dict(reference_bytes(out))
                for index, key in plan:
                    e = doc["entries"][index]
                    if e["kind"] == "tensor":
                        self.assertEqual(
                            sha256(little_endian(stored[key], e["dtype"], e["byteorder"])),
                            expected[index]["sha256"], key)
            return doc, None
        packed = torch.load(out, map_location="cpu")
        self.assertIsInstance(packed, collections.OrderedDict)
        # torch's weights-only loader reads OUT exactly when it reads torch.save's own file of
        # the same state_dict (torch 1.13's refuses floats and quantized tensors in both).
        resaved = out.with_name(out.stem + "-resaved.pth")
        torch.save(packed, resaved)
        self.assertEqual(weights_only_loads(out), weights_only_loads(resaved))
        resaved.unlink()
        self.assertEqual(list(packed.keys()), [k for _, k in plan])
        storages = {}  # source storage -> packed storage, and back: the same partition
        for index, key in plan:
            e = doc["entries"][index]
            v = packed[key]
            with self.subTest(key=key):
                if e["kind"] == "value":
                    self.assertTrue(ref.json_equal(to_json(v), e["value"]),
                                    f"{to_json(v)!r} != {e['value']!r}")
                    if reference is not None:
                        # What torch.load of the source gave, of the same types all the way
                        # down (a tuple stays a tuple, an int key an int).
                        self.assertTrue(ref.same_value(v, reference[index][1]),
                                        f"{ref.show(v)} != {ref.show(reference[index][1])}")
                    continue
                self.assertIsInstance(v, torch.Tensor)
                self.assertEqual(ref.dtype_name(v.dtype), e["dtype"])
                self.assertEqual(list(v.shape), e["shape"])
                self.assertEqual(list(v.stride()), e["stride"])
                self.assertEqual(v.storage_offset(), e["storage_offset"])
                self.assertEqual(v.requires_grad, e["requires_grad"])
                # OUT is little-endian, its values right in any torch: their bytes in SRC's
                # order are SRC's bytes.
                data = ref.tensor_bytes(v, e["byteorder"])
                if expected is not None:
                    self.assertEqual(sha256(data), expected[index]["sha256"])
                if reference is not None:
                    self.assertEqual(data, ref.checkpoint_bytes(reference[index][1],
                                                                e["byteorder"]))
                if e.get("quantization"):
                    self.assertEqual(ref.quantization(v, key),
                                     {**e["quantization"],
                                      **({"scales": f"{key}.q_per_channel_scales",
                                          "zero_points": f"{key}.q_per_channel_zero_points"}
                                         if "scales" in e["quantization"] else {})})
                source_storage = (e["source"], e["storage"]["record"], e["storage"]["key"],
                                  e["dtype"])
                packed_storage = ref.storage_of(v)[0]
                storages.setdefault(("src", source_storage), set()).add(packed_storage)
                storages.setdefault(("out", packed_storage), set()).add(source_storage)
        for (side, what), partners in storages.items():
            self.assertEqual(len(partners), 1, f"{side} storage {what} maps to {partners}")
        return doc, packed

    # ---- safetensors ----------------------------------------------------------------------

    def check_safetensors_pack(self, src, out, expected_bytes=None, args=(), dtype=None,
                               check=None):
        """Packs SRC into OUT (.safetensors) and reads it with the reference reader: each
        tensor's bytes must be `expected_bytes(index, entry)` (little-endian, C order), or pass
        `check(index, entry, bytes)`."""
        doc = inspect(src)
        self.pack(src, out, *args)
        plan = safetensors_plan(doc, dtype)
        metadata, tensors = st.read_safetensors(out)
        self.assertEqual([t.name for t in tensors], [k for _, k in plan])
        self.assertEqual(metadata.get("format"), doc["metadata"].get("format", "pt"))
        for (index, key), t in zip(plan, tensors):
            e = doc["entries"][index]
            with self.subTest(key=key):
                self.assertEqual(t.dtype, SAFETENSORS_DTYPE[converted(e["dtype"], dtype)])
                self.assertEqual(st.torch_view(t)[1], e["shape"])  # F4: [..., 2n] for [..., n]
                data = t.read(out)
                if check is not None:
                    self.assertTrue(check(index, e, data), "bytes differ")
                else:
                    self.assertEqual(data, expected_bytes(index, e))
        return doc


def little_endian(data, dtype, byteorder):
    """Bytes of a file's byte order made little-endian."""
    return ref.byteswap(data, ref.swap_unit(dtype)) if byteorder == "big" else data


def reference_bytes(path):
    """[(key, bytes as stored)] of the tensors make_fixtures' own reader finds (no torch), in
    flatten order."""
    _, _, root = make_fixtures.reference_read(path)
    out = []
    for key, obj in ref.flatten(root, make_fixtures.is_tensor):
        if isinstance(obj, make_fixtures.TensorDesc):
            out.append((key, ref.gather(obj.storage_bytes, ref.DTYPE_SIZES[obj.dtype], obj.shape,
                                        obj.stride, obj.offset)))
    return out


class FixtureRoundTrips(PackTestCase):
    def test_every_fixture_to_pth(self):
        for name in FIXTURE_NAMES:
            with self.subTest(name):
                src = fixture_path(name)
                out = self.new_dir(name) / f"{name}.pth"
                expected = expected_doc(name)["entries"]
                if name in NOT_TORCH_LOADABLE:
                    # torch 1.13 cannot load these: ckptfs reads OUT again, and the independent
                    # reader gives the same bytes on both sides.
                    self.pack(src, out)
                    self.assertEqual([e["key"] for e in inspect(out)["entries"]],
                                     [k for _, k in torch_plan(inspect(src))])
                    self.assertEqual(reference_bytes(out), reference_bytes(src))
                    continue
                if name in TORCHSCRIPT_FIXTURES:
                    reference = [(k, t) for k, t, *_ in ref.torchscript_flatten(src)]
                else:
                    reference = ref.flatten(ref.torch_load(src))
                self.check_torch_pack(src, out, reference, expected)

    def test_every_fixture_nested(self):
        """Without --flat, torch.load(OUT) is what torch.load(SRC) gives, as PACK.md's rule
        rebuilds it (ckptfs_reference.packed_nesting): every container of its type, keys of every
        type in their order, OrderedDicts' attributes (a state_dict()'s _metadata), tensors
        (dtype, layout, bytes, requires_grad, storages shared as in SRC), values of their types.
        Where nothing is left out or flattened, ckptfs reads OUT as it reads SRC (inspect: the
        root, keys, key paths, containers, dtypes, shapes). A TorchScript archive, which
        torch.jit.load makes a module, is its flattened keys."""
        for name in FIXTURE_NAMES:
            with self.subTest(name):
                src = fixture_path(name)
                out = self.new_dir(name) / f"{name}.pth"
                err = self.pack(src, out)
                doc, back = inspect(src), inspect(out)
                if name in TORCHSCRIPT_FIXTURES:
                    self.assertRegex(err, r"flattened 1 place \(.*\): the checkpoint itself\n")
                    # The keys pack writes of each (a per-channel quantized tensor's parts
                    # inside it), in order.
                    self.assertEqual([k for _, k in torch_plan(back)],
                                     [k for _, k in torch_plan(doc)])
                    continue
                if "left out" not in err and "flattened" not in err:
                    def shown(d):
                        return [(d.get("root"),)] + [
                            tuple(e.get(f) for f in ("key", "key_path", "containers", "kind",
                                                     "dtype", "shape", "value"))
                            for e in d["entries"]]
                    self.assertEqual(shown(back), shown(doc))
                if name in NOT_TORCH_LOADABLE:
                    self.assertEqual(reference_bytes(out), reference_bytes(src))
                    continue
                pairs = []
                got = torch.load(out)
                want = ref.packed_nesting(ref.torch_load(src))
                self.assertIsNone(ref.nesting_difference(got, want, doc["byteorder"],
                                                         tensors=pairs))
                storages = {}  # each side's storage -> the other's: the same partition
                for g, w in pairs:
                    if g.is_quantized:
                        continue
                    storages.setdefault(("src", ref.storage_of(w)[0]), set()).add(
                        ref.storage_of(g)[0])
                    storages.setdefault(("out", ref.storage_of(g)[0]), set()).add(
                        ref.storage_of(w)[0])
                for what, partners in storages.items():
                    self.assertEqual(len(partners), 1, f"{what} maps to {partners}")

    def test_a_training_checkpoint_resumes(self):
        """The issue's case: {"model": state_dict, "optimizer": Adam's state_dict, "epoch": 3}
        packed is that checkpoint again, exactly (int keys of the optimizer's state, its
        param_groups, the model's _metadata); the model and the optimizer loaded from it and
        stepped once give the very tensors the source gives."""
        def model_and_optimizer():
            torch.manual_seed(30)
            model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4),
                                        torch.nn.Linear(4, 2))
            return model, torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.9))

        def step(model, optimizer, seed):
            gen = torch.Generator().manual_seed(seed)
            optimizer.zero_grad()
            model(torch.randn(6, 5, generator=gen)).square().sum().backward()
            optimizer.step()

        model, optimizer = model_and_optimizer()
        for seed in (1, 2):
            step(model, optimizer, seed)
        src = self.tmp / "train.pth"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": 3}, src)
        out = self.tmp / "packed.pth"
        self.assertEqual(self.pack(src, out), "")
        packed, source = torch.load(out), torch.load(src)
        self.assertIsNone(ref.nesting_difference(packed, source))
        self.assertEqual(list(packed["optimizer"]["state"]), [0, 1, 2, 3, 4, 5])
        resumed = []
        for checkpoint in (source, packed):
            m, o = model_and_optimizer()
            m.load_state_dict(checkpoint["model"])
            o.load_state_dict(checkpoint["optimizer"])
            step(m, o, 3)
            resumed.append([t.clone() for t in (*m.state_dict().values(),
                                                *(v for s in o.state_dict()["state"].values()
                                                  for v in s.values()))])
        self.assertEqual(len(resumed[0]), len(resumed[1]))
        for a, b in zip(*resumed):
            self.assertTrue(torch.equal(a, b))

    def test_every_model_fixture_to_pth(self):
        # safetensors files and sharded sets: a flat OrderedDict of their tensors.
        for name in SAFETENSORS_FIXTURES + SHARDED_FIXTURES:
            with self.subTest(name):
                src = model_fixture_path(name)
                self.check_torch_pack(src, self.new_dir(name) / f"{name}.pth",
                                      expected=expected_doc(name)["entries"])

    def test_every_fixture_to_safetensors(self):
        for name in FIXTURE_NAMES + SAFETENSORS_FIXTURES + SHARDED_FIXTURES:
            with self.subTest(name):
                src = (fixture_path(name) if name in FIXTURE_NAMES else model_fixture_path(name))
                expected = expected_doc(name)["entries"]
                flat = ref.torchscript_flatten(src) if name in TORCHSCRIPT_FIXTURES else None

                def check(index, e, data, expected=expected, flat=flat):
                    if flat is not None:  # TorchScript: torch's own tensors
                        return data == ref.tensor_bytes(flat[index][1], "little")
                    # expected.json's sha256 is of the bytes as stored, in the file's order.
                    stored = little_endian(data, e["dtype"], e["byteorder"])
                    return sha256(stored) == expected[index]["sha256"]

                self.check_safetensors_pack(src, self.new_dir(name) / f"{name}.safetensors",
                                            check=check)

    def test_weights_only_loads_what_it_can(self):
        for name in ("convnet", "views", "dtypes", "keys", "bigendian", "legacy"):
            with self.subTest(name):
                out = self.new_dir(name) / f"{name}.pth"
                self.pack(fixture_path(name), out, "--flat")
                self.assertTrue(weights_only_loads(out))
                flat = dict(ref.flatten(ref.torch_load(fixture_path(name))))
                order = "big" if name == "bigendian" else "little"
                for k, v in torch.load(out, weights_only=True).items():
                    if isinstance(v, torch.Tensor):
                        self.assertEqual(ref.tensor_bytes(v, order),
                                         ref.checkpoint_bytes(flat[k], order), k)

    def test_big_endian_to_one_little_endian_file(self):
        """A big-endian checkpoint packs to one little-endian .pth (torch before 2.1 ignores the
        byteorder record): as it is, and with --dtype float16 (the floats converted, the other
        tensors swapped: one byte order, not a refusal). torch 1.13 loads the right values."""
        src = fixture_path("bigendian")
        source = ref.flatten(ref.torch_load(src))  # torch 1.13: the file's bytes, values swapped

        def right(t):
            """The tensor torch 1.13 loaded from a big-endian file, with its values right."""
            little = ref.byteswap(ref.tensor_bytes(t), ref.swap_unit(ref.dtype_name(t.dtype)))
            if not little:
                return t.clone()
            return torch.frombuffer(bytearray(little), dtype=t.dtype).reshape(t.shape)

        floating = {torch.float16, torch.bfloat16, torch.float32, torch.float64}
        for args in ((), ("--dtype", "float16")):
            with self.subTest(args=args):
                out = self.new_dir("big") / "be.pth"
                self.pack(src, out, *args)
                with zipfile.ZipFile(out) as z:
                    self.assertEqual(z.read("be/byteorder"), b"little")
                packed = torch.load(out)
                self.assertEqual(list(packed), [k for k, _ in source])
                for key, t in source:
                    if not isinstance(t, torch.Tensor):
                        self.assertTrue(ref.same_value(packed[key], t), key)
                        continue
                    want = right(t)
                    if args and want.dtype in floating:
                        want = want.to(torch.float16)
                    self.assertEqual(packed[key].dtype, want.dtype, key)
                    self.assertEqual(ref.tensor_bytes(packed[key]), ref.tensor_bytes(want), key)

    def test_subset_with_keys(self):
        """--keys: the containers pruned to the entries selected (nested), or those flattened
        keys alone (--flat)."""
        src = fixture_path("training")
        source = ref.torch_load(src)
        out = self.tmp / "subset.pth"
        self.pack(src, out, "--keys", "model.conv*", "--keys=epoch", "--keys=optimizer.state.1.*")
        want = {"model": collections.OrderedDict(
                    (k, v) for k, v in source["model"].items() if k.startswith("conv")),
                "optimizer": {"state": {1: source["optimizer"]["state"][1]}},
                "epoch": 7}
        want["model"]._metadata = source["model"]._metadata
        self.assertIsNone(ref.nesting_difference(torch.load(out), want))
        self.pack(src, out, "--keys", "model.conv*", "--keys=epoch", "--flat", "--force")
        packed = torch.load(out)
        self.assertEqual(list(packed), ["model.conv1.weight", "model.conv1.bias",
                                        "model.conv2.weight", "model.conv2.bias", "epoch"])
        flat = dict(ref.flatten(source))
        for k, v in packed.items():
            if isinstance(v, torch.Tensor):
                self.assertTrue(torch.equal(v, flat[k]), k)
        self.assertEqual(packed["epoch"], 7)

    def test_dtype_conversion(self):
        src = fixture_path("convnet")
        for dtype in ("float16", "bfloat16", "float32"):
            with self.subTest(dtype):
                out = self.tmp / f"convnet-{dtype}.pth"
                self.pack(src, out, "--dtype", dtype)
                packed = torch.load(out)
                source = dict(ref.flatten(ref.torch_load(src)))
                for k, v in packed.items():
                    want = source[k].to(getattr(torch, dtype)) if source[k].is_floating_point() \
                        else source[k]
                    self.assertEqual(v.dtype, want.dtype, k)
                    self.assertEqual(ref.tensor_bytes(v), ref.tensor_bytes(want.contiguous()), k)
                st_out = self.tmp / f"convnet-{dtype}.safetensors"
                self.pack(src, st_out, "--dtype", dtype)
                _, tensors = st.read_safetensors(st_out)
                for t in tensors:
                    want = source[t.name].to(getattr(torch, dtype)) \
                        if source[t.name].is_floating_point() else source[t.name]
                    self.assertEqual(t.read(st_out), ref.tensor_bytes(want, "little"), t.name)

    def test_what_is_renamed_is_said(self):
        """Keys written under another text are said in one line: keys of equal text in both
        formats (test_pack_mount.test_keys_of_equal_text_one_rule), and in safetensors keys
        that are not UTF-8 (a lone surrogate's bytes, each U+FFFD)."""
        src = fixture_path("keys")
        err = self.pack(src, self.tmp / "keys.pth")
        self.assertNotIn("renamed", err)  # its keys are all distinct: a .pth holds them as str
        doc = inspect(src)
        plan = safetensors_plan(doc)
        renamed = [(ref.text_of_json(doc["entries"][i]["key"]), k) for i, k in plan
                   if ref.text_of_json(doc["entries"][i]["key"]) != k]
        self.assertEqual(len(renamed), 2, renamed)  # the two tensors of lone surrogates
        err = self.pack(src, self.tmp / "keys.safetensors")
        self.assertRegex(err, rf"renamed 2 entries \(.*; safetensors keys are Unicode: a byte "
                              r"that is not UTF-8 is U\+FFFD\): .*lone .* surrogate")
        self.assertEqual(len([ln for ln in err.splitlines() if "renamed" in ln]), 1, err)

    def test_what_is_left_out_is_said(self):
        out = self.tmp / "training.pth"
        err = self.pack(fixture_path("training"), out)
        self.assertRegex(err, r'left out 1 entry \(not a plain value: an instance of '
                              r'argparse.Namespace, which ckptfs never builds\): "cli"')
        # An object holding a tensor is an OrderedDict of what is below it.
        self.assertRegex(err, r'flattened 1 place \(not a container pack builds \(an object of '
                              r'a class, a tensor.s parts\): written as an OrderedDict of the '
                              r'flattened keys below it\): "ema"\n')
        st_out = self.tmp / "training.safetensors"
        err = self.pack(fixture_path("training"), st_out)
        self.assertRegex(err, r"left out 7 entries \(a value: safetensors holds tensors only\)")
        err = self.pack(fixture_path("dtypes"), self.tmp / "dtypes.safetensors")
        self.assertIn("(safetensors has no dtype complex128)", err)


@needs_corpus
class CorpusRoundTrips(PackTestCase):
    def test_corpus_present(self):
        self.assertTrue(corpus_files(), f"no corpus in {CORPUS}")

    def test_every_torch_loadable_corpus_file(self):
        checked = 0
        for path in corpus_files():
            try:
                source = ref.flatten(ref.torch_load(path))
            except Exception:  # noqa: BLE001: the corpus file torch 1.13 cannot load
                continue
            checked += 1
            with self.subTest(path.name):
                d = self.new_dir("corpus")
                doc, _ = self.check_torch_pack(path, d / "model.pth", reference=source)
                tensors = dict(zip(range(len(source)), source))

                def want(index, e, tensors=tensors):
                    return ref.tensor_bytes(tensors[index][1], "little")
                self.check_safetensors_pack(path, d / "model.safetensors", want)
        self.assertGreater(checked, 15)

    def test_every_safetensors_corpus_file(self):
        for path in formats_corpus():
            with self.subTest(path.name):
                model = st.expected_model(path)
                d = self.new_dir("formats")

                def want(index, e, model=model):
                    return model["entries"][index].data()
                self.check_safetensors_pack(path, d / "model.safetensors", want)
                doc, packed = self.check_torch_pack(path, d / "model.pth")
                stored = dict(reference_bytes(d / "model.pth")) if packed is None else None
                for index, key in torch_plan(doc):
                    got = stored[key] if packed is None else ref.tensor_bytes(packed[key])
                    self.assertEqual(got, want(index, None), key)


class RfcDirectories(PackTestCase):
    """RFC directories as the RFC's text says to write them, with torch alone."""

    def write_rfc(self, directory, items):
        """torch.save(list_of_keys, "map.pt"), then each key's object to "<name>.pt", <name>
        the key's name by the mount's naming rule within 252 bytes (-o layout=rfc's)."""
        keys = [k for k, _ in items]
        torch.save(keys, directory / "map.pt")
        for name, (_, obj) in zip(ref.rfc_file_names(keys), items):
            # Opened here: torch's own file writer cannot name a file whose name is not UTF-8
            # (a key with a lone surrogate).
            with open(directory / name, "wb") as f:
                torch.save(obj, f)

    def test_fixtures_through_rfc_directories(self):
        for name in ["convnet", "views", "dtypes", "keys", "collisions", "training", "quantized",
                     "legacy", "sparse"]:
            with self.subTest(name):
                src = fixture_path(name)
                flat = ref.flatten(ref.torch_load(src))
                doc = inspect(src)
                # Tensors, and the values a plain torch.save can write.
                items = [(k, v) for (k, v), e in zip(flat, doc["entries"])
                         if e["kind"] == "tensor" or ref.simple_json(v) is not ref.NOT_JSON]
                d = self.new_dir(f"rfc-{name}")
                self.write_rfc(d, items)
                rfc = inspect(d)
                self.assertEqual(rfc["format"], "rfc")
                self.assertEqual([e["key"] for e in rfc["entries"]],
                                 [ref.json_text(k) for k, _ in items])
                out = self.tmp / f"{name}-from-rfc.pth"
                self.pack(d, out)
                packed = torch.load(out)
                plan = torch_plan(rfc)
                self.assertEqual(list(packed), [k for _, k in plan])
                for index, key in plan:
                    v, got = items[index][1], packed[key]
                    if isinstance(v, torch.Tensor):
                        self.assertEqual(got.dtype, v.dtype, key)
                        self.assertEqual(got.shape, v.shape, key)
                        self.assertEqual(ref.tensor_bytes(got), ref.tensor_bytes(v), key)
                        # torch.save of a view saved its storage whole: pack keeps the view.
                        self.assertEqual(got.stride(), v.stride(), key)
                        self.assertEqual(got.storage_offset(), v.storage_offset(), key)
                    else:
                        # <key>.pt read from its pickle: the very value, types and all.
                        self.assertTrue(ref.same_value(got, v), f"{key}: {ref.show(got)}")
                st_out = self.tmp / f"{name}-from-rfc.safetensors"
                self.check_safetensors_pack(
                    d, st_out, lambda index, e: ref.tensor_bytes(items[index][1], "little"))

    def test_keys_with_slashes_reserved_and_long_names(self):
        d = self.new_dir("rfc-names")
        t = torch.arange(6, dtype=torch.int16).reshape(2, 3)
        items = [("a/b", t), ("map", t.t()), ("index.json", torch.ones(2)),
                 ("x" * 300, torch.zeros(1)), ("lr", 0.5), ("%", torch.tensor(True)),
                 # 253 bytes: a directory's name as it is, but cut before ".pt" (NAME_MAX)
                 ("y" * 253, torch.ones(3)), ("z" * 252, torch.ones(1))]
        self.write_rfc(d, items)
        self.assertIn("z" * 252 + ".pt", os.listdir(d))
        self.assertTrue(any(n.startswith("y" * 200 + "%~") for n in os.listdir(d)))
        out = self.tmp / "names.pth"
        self.pack(d, out)
        packed = torch.load(out)
        self.assertEqual(list(packed), [k for k, _ in items])
        self.assertTrue(torch.equal(packed["map"], t.t()))
        self.assertEqual(packed["map"].stride(), (1, 3))
        self.assertEqual(packed["lr"], 0.5)
        self.assertEqual(packed["x" * 300].shape, (1,))
        self.assertTrue(torch.equal(packed["y" * 253], torch.ones(3)))
        self.assertTrue(torch.equal(packed["z" * 252], torch.ones(1)))

    def test_a_key_file_missing(self):
        d = self.new_dir("rfc-missing")
        torch.save(["w", "gone"], d / "map.pt")
        torch.save(torch.zeros(2), d / "w.pt")
        out = self.tmp / "m.pth"
        self.assert_refused(d, out, "io", rf'{d}: "gone.pt": No such file or directory$')


class Options(PackTestCase):
    def test_force_and_existing_output(self):
        src = fixture_path("bare")
        out = self.tmp / "bare.pth"
        out.write_bytes(b"precious")
        self.assert_refused(src, out, "usage",
                            rf"{out}: exists: pack does not overwrite it without --force$")
        self.assertEqual(out.read_bytes(), b"precious")
        self.pack(src, out, "--force")
        self.assertTrue(torch.equal(torch.load(out), ref.torch_load(src)))  # the bare tensor
        self.assertEqual(os.listdir(self.tmp), ["bare.pth"])

    def test_permissions_as_cp_gives_them(self):
        """OUT gets the source's permission bits masked by the umask (a 0600 checkpoint is not
        packed into a 0644 file), every source's for a model of many files (a split directory:
        the bits all of them grant); an existing OUT replaced with --force keeps its own."""
        def mode(path):
            return stat.S_IMODE(os.stat(path).st_mode)

        def pack_with_umask(mask, *args):
            old = os.umask(mask)
            try:
                return self.pack(*args)
            finally:
                os.umask(old)

        bare = self.tmp / "bare.pth"
        shutil.copy(fixture_path("bare"), bare)
        for source_mode, mask, want in ((0o600, 0o022, 0o600), (0o640, 0o022, 0o640),
                                        (0o644, 0o077, 0o600), (0o444, 0o002, 0o444),
                                        (0o666, 0o002, 0o664)):
            os.chmod(bare, source_mode)
            for suffix in ("pth", "safetensors"):
                with self.subTest(source=oct(source_mode), umask=oct(mask), out=suffix):
                    out = self.new_dir("mode") / f"out.{suffix}"
                    pack_with_umask(mask, bare, out)
                    self.assertEqual(oct(mode(out)), oct(want))
        # --force over an existing file: its mode stays, whatever the source's and the umask.
        os.chmod(bare, 0o644)
        for existing in (0o600, 0o640, 0o444):
            with self.subTest(existing=oct(existing)):
                out = self.new_dir("force") / "out.pth"
                out.write_bytes(b"old")
                os.chmod(out, existing)
                pack_with_umask(0o022, bare, out, "--force")
                self.assertEqual(oct(mode(out)), oct(existing))
                self.assertTrue(torch.equal(torch.load(out), ref.torch_load(bare)))
        # A split directory: one data file of 0600 among 0644 ones makes OUT 0600.
        d = self.split_dir("modes")
        for f in d.glob("*/data"):
            os.chmod(f, 0o644)
        os.chmod(d / "w" / "data", 0o600)
        out = self.new_dir("split") / "out.pth"
        pack_with_umask(0o022, d, out)
        self.assertEqual(oct(mode(out)), oct(0o600))

    def test_force_replaces_only_a_file_or_a_link(self):
        """Issue 29, item 2: with --force, OUT that is a symbolic link is replaced by the file
        (what it leads to is neither written nor lends its owner or mode); a FIFO, a device or a
        directory is refused at once (status 1), never replaced nor waited on; and in a sticky
        directory others may write, a file another user put there is not replaced."""
        src = self.tmp / "bare.pth"
        shutil.copy(fixture_path("bare"), src)
        os.chmod(src, 0o640)
        old = os.umask(0o022)
        self.addCleanup(os.umask, old)
        root = os.geteuid() == 0
        theirs = self.tmp / "theirs"  # another user's file, anyone may write it
        theirs.write_bytes(b"theirs")
        os.chmod(theirs, 0o666)
        if root:
            os.chown(theirs, 65534, 65534)
        for name, target in (("a link", theirs), ("a dangling link", self.tmp / "nowhere")):
            with self.subTest(name):
                out = self.new_dir("link") / "out.pth"
                out.symlink_to(target)
                self.pack(src, out, "--force")
                st = out.lstat()
                self.assertTrue(stat.S_ISREG(st.st_mode))
                self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (os.geteuid(), 0o640))
                self.assertTrue(torch.equal(torch.load(out), ref.torch_load(src)))  # bare
        self.assertEqual(theirs.read_bytes(), b"theirs")
        self.assertFalse(os.path.lexists(self.tmp / "nowhere"))
        kinds = [("a FIFO", os.mkfifo, "a FIFO"), ("a directory", os.mkdir, "a directory")]
        if root:
            kinds.append(("a device", lambda p: os.mknod(p, stat.S_IFCHR | 0o666,
                                                        os.makedev(1, 3)), "a character device"))
        for name, make, said in kinds:
            with self.subTest(name):
                out = self.new_dir("kind") / "out.pth"
                make(out)
                self.assert_refused(src, out, "usage", re.escape(f"{out}: {said}, not a regular "
                                                                 "file: pack writes and replaces "
                                                                 "regular files only"), "--force")
                self.assertFalse(stat.S_ISREG(out.lstat().st_mode))  # still there, as it was
        if root:
            shared = self.new_dir("sticky")
            os.chmod(shared, 0o1777)
            out = shared / "out.pth"
            out.write_bytes(b"planted")
            os.chmod(out, 0o666)
            os.chown(out, 65534, 65534)
            self.assert_refused(src, out, "usage", re.escape(f"{out}: owned by uid 65534 in a "
                                                             "sticky directory others may write"),
                                "--force")
            self.assertEqual(out.read_bytes(), b"planted")
            # The user's own file there is replaced as anywhere, keeping its mode.
            mine = shared / "mine.pth"
            mine.write_bytes(b"old")
            os.chmod(mine, 0o600)
            self.pack(src, mine, "--force")
            self.assertEqual(stat.S_IMODE(mine.stat().st_mode), 0o600)
        else:
            print("not root: the other-user cases are left out", file=sys.stderr)

    def test_usage_errors(self):
        src = fixture_path("bare")
        cases = [(["pack"], r"needs SRC and OUT"),
                 (["pack", src, self.tmp / "x.npz"], r"must end in \.pth, \.pt, \.bin"),
                 (["pack", src, self.tmp / "x.pth", "--dtype", "int8"], r"invalid --dtype"),
                 (["pack", src, self.tmp / "x.pth", "--keys"], r"--keys needs a GLOB"),
                 (["pack", src, self.tmp / "x.pth", "--frobnicate"], r"unknown option"),
                 (["pack", src, self.tmp / "x.pth", "--keys", "nothing*"],
                  r'--keys "nothing\*" matches no key')]
        for args, message in cases:
            with self.subTest(args):
                r = run(*args)
                self.assertEqual(r.returncode, EXIT["usage"], r.stderr)
                self.assertRegex(r.stderr.decode(), r"^ckptfs: .*" + message)
                self.assertEqual(os.listdir(self.tmp), [])
        r = run("pack", "--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"usage: ckptfs pack SRC OUT", r.stdout)

    def test_output_problems_name_the_output(self):
        src = fixture_path("bare")
        r = run("pack", src, self.tmp / "missing" / "x.pth")
        self.assertEqual(r.returncode, EXIT["io"])
        self.assertRegex(r.stderr.decode(), rf"^ckptfs: {self.tmp}/missing/x.pth: cannot create "
                                            r"it: No such file or directory\n$")
        r = run("pack", self.tmp / "nothing.pth", self.tmp / "x.pth")
        self.assertEqual(r.returncode, EXIT["io"])
        self.assertRegex(r.stderr.decode(), rf"^ckptfs: {self.tmp}/nothing.pth: ")

    def test_a_broken_tensor_is_refused_unless_left_out(self):
        # A sharded set whose index names a key its shard lacks: ckptfs marks it broken.
        d = self.new_dir("broken")
        st.write_safetensors(d / "a.safetensors", [("w", "F32", [2], b"\0" * 8)])
        st.write_index(d / "model.safetensors.index.json",
                       [("w", "a.safetensors"), ("gone", "a.safetensors")], 8)
        out = self.tmp / "b.pth"
        self.assert_refused(d, out, "checkpoint", rf'{d}: tensor "gone" is broken \(the index '
                                                  r"puts it in .*leave it out with --keys$")
        self.pack(d, out, "--keys", "w")
        self.assertEqual(list(torch.load(out)), ["w"])


def meta_json(key, dtype, shape, nbytes, **extra):
    """A meta.json as the mount writes one (the members pack reads, and some it ignores)."""
    doc = {"key": key, "dtype": dtype, "stored_dtype": dtype, "shape": shape,
           "stride": [1] * len(shape), "storage_offset": 0, "contiguous": True,
           "nbytes": nbytes, "source": "model.pth", "file_offset": 64, "numpy": "<f4",
           "byteorder": "little", "requires_grad": False, "quantization": None,
           "storage": {"key": "0", "record": "archive/data/0", "file_offset": 64,
                       "nbytes": nbytes}, "shared_with": [], "shared_with_count": 0,
           "broken": None}
    doc.update(extra)
    return json.dumps(doc, indent=2) + "\n"


class HostileSplitDirectories(PackTestCase):
    def out(self):
        return self.new_dir("out") / "model.pth"

    def test_the_valid_one_packs(self):
        d = self.split_dir("valid")
        out = self.out()
        self.pack(d, out)
        packed = torch.load(out)
        self.assertEqual(list(packed), ["b", "epoch", "w"])  # without index.json: by key
        self.assertTrue(torch.equal(packed["w"], torch.arange(12.).reshape(3, 4)))
        self.assertEqual(packed["epoch"], 7)

    def test_lying_meta_json(self):
        cases = {
            "nbytes": (dict(nbytes=40), r'"w/meta.json": nbytes 40, but a float32 tensor of '
                                        r"shape \[3, 4\] holds 48$"),
            "shape": (dict(shape=[4, 4]), r"holds 64$"),
            "dtype": (dict(dtype="float64"), r"a float64 tensor of shape \[3, 4\] holds 96$"),
            "unknown dtype": (dict(dtype="float33"), r'unknown dtype "float33"$'),
            "negative": (dict(shape=[-3, 4]), r"a dimension of shape is not an integer"),
            "overflow": (dict(shape=[2 ** 62, 8]), r"has more elements than 64 bits count$"),
            "bytes": (dict(shape=[2 ** 61, 2]), r"holds more bytes than a file can"),
            "broken": (dict(broken="its record is missing"),
                       r'tensor "w" is broken \(its record is missing\)'),
            "key path": (dict(key_path=[[0]]), r"a key_path part is not a key$"),
            "no key": (dict(key=None), r"key is not a string$"),
        }
        for what, (changes, message) in cases.items():
            with self.subTest(what):
                d = self.split_dir(what.replace(" ", "_"))
                meta = json.loads((d / "w" / "meta.json").read_text())
                meta.update(changes)
                (d / "w" / "meta.json").write_text(json.dumps(meta))
                code = "checkpoint"
                self.assert_refused(d, self.out(), code, rf"{d}: .*{message}")

    def test_lying_key_paths(self):
        """Key paths and containers that say no nesting torch.load could give are refused in
        one line, before anything is written."""
        def path(key, key_path, containers):
            return dict(key=key, key_path=key_path, containers=containers)

        cases = {
            "not its key": ({"w": path("w", ["x", "y"], ["dict", "dict"])},
                            r'entry "w": its key_path does not spell its key$'),
            "unknown container": ({"w": path("w", ["w"], ["hash"])},
                                  r'"w/meta.json": .*a part of containers is not "dict"'),
            "parts": ({"w": path("w", ["w"], ["dict", "dict"])},
                      r'"w/meta.json": .*containers has 2 parts, key_path 1$'),
            "one place twice": ({"w": path("w", ["w"], ["dict"]),
                                 "b": path("w.b", ["w", "b"], ["dict", "dict"])},
                                r'entry "w.b": its key_path puts it where entry "w" is too$'),
            "kinds disagree": ({"w": path("x.w", ["x", "w"], ["dict", "dict"]),
                                "b": path("x.b", ["x", "b"], ["dict", "OrderedDict"])},
                               r'entry "x.w": its key_path puts it where entry "x.b" is too$'),
            "far position": ({"b": path("l.99999999999", ["l", 99999999999], ["dict", "list"])},
                             r"puts an item at position 99999999999 of a list$"),
            "str in a list": ({"b": path("l.x", ["l", "x"], ["dict", "list"])},
                              r'its key_path puts the key "x" in a list$'),
            "root twice": ({"w": path("tensor", [], []), "b": path("b", ["b"], ["dict"])},
                           r"says it is the whole checkpoint, beside other entries$"),
        }
        for what, (changes, message) in cases.items():
            with self.subTest(what):
                d = self.split_dir(what.replace(" ", "_"))
                for directory, change in changes.items():
                    meta = json.loads((d / directory / "meta.json").read_text())
                    meta.update(change)
                    (d / directory / "meta.json").write_text(json.dumps(meta))
                self.assert_refused(d, self.out(), "checkpoint", rf"{d}: .*{message}")

    def test_data_shorter_or_longer_than_meta_json_says(self):
        for size, word in ((47, "short"), (49, "long"), (0, "empty")):
            with self.subTest(word):
                d = self.split_dir(word)
                (d / "w" / "data").write_bytes(b"\0" * size)
                self.assert_refused(d, self.out(), "checkpoint",
                                    rf'{d}: "w/data": holds {size} bytes, but meta.json says '
                                    r"nbytes 48$")

    def test_missing_data_file(self):
        d = self.split_dir("missing")
        (d / "w" / "data").unlink()
        self.assert_refused(d, self.out(), "io", rf'{d}: "w/data": No such file or directory$')

    def test_links_leading_out_are_refused_and_never_read(self):
        secret = self.new_dir("secret") / "shadow"
        secret.write_bytes(b"TOP-SECRET" * 4 + b"12345678")  # 48 bytes, as w/data should be
        cases = {
            "data": lambda d: ((d / "w" / "data").unlink(), (d / "w" / "data").symlink_to(secret)),
            "relative": lambda d: ((d / "w" / "data").unlink(),
                                   (d / "w" / "data").symlink_to(
                                       os.path.relpath(secret, d / "w"))),
            "etc": lambda d: ((d / "b" / "data").unlink(),
                              (d / "b" / "data").symlink_to("/etc/passwd")),
            "directory": lambda d: (os.rename(d / "w", secret.parent / "w"),
                                    (d / "w").symlink_to(secret.parent / "w")),
        }
        for what, corrupt in cases.items():
            with self.subTest(what):
                d = self.split_dir(f"link-{what}")
                corrupt(d)
                out = self.out()
                err = self.assert_refused(d, out, "checkpoint",
                                          rf"{d}: .*leads out of the directory")
                self.assertNotIn("TOP-SECRET", err)
        # Links that stay inside are followed.
        d = self.split_dir("inside")
        os.rename(d / "w" / "data", d / "w" / "data.real")
        (d / "w" / "data").symlink_to("data.real")
        self.pack(d, self.out())

    def test_keys_claimed_twice(self):
        d = self.split_dir("twice")
        os.system(f"cp -a {d / 'w'} {d / 'w.copy'}")
        self.assert_refused(d, self.out(), "checkpoint",
                            rf'{d}: key "w" is claimed by two directories, "w" and "w.copy"$')

    def test_huge_and_deep_meta_json(self):
        d = self.split_dir("huge")
        (d / "w" / "meta.json").write_text('{"key": "' + "k" * (4 << 20) + '"}')
        start = time.monotonic()
        self.assert_refused(d, self.out(), "unsupported",
                            rf'{d}: "w/meta.json": \d+ bytes, over the limit of 1048576$')
        d = self.split_dir("deep")
        (d / "w" / "meta.json").write_text('{"key": "w", "x": ' + "[" * 500_000 + "]" * 500_000
                                           + "}")
        self.assert_refused(d, self.out(), "checkpoint",
                            rf'{d}: "w/meta.json": invalid JSON at byte 49: arrays and objects '
                            r"nested deeper than 32 levels$")
        d = self.split_dir("deep_value")
        (d / "epoch" / "value.json").write_text("[" * 300_000 + "]" * 300_000)
        self.assert_refused(d, self.out(), "checkpoint", rf'{d}: "epoch/value.json": invalid JSON')
        self.assertLess(time.monotonic() - start, 60)

    def test_directories_that_are_no_key_directories(self):
        d = self.split_dir("stray")
        (d / "notes").mkdir()
        (d / "notes" / "todo.txt").write_text("x")
        self.assert_refused(d, self.out(), "checkpoint",
                            rf'{d}: "notes": holds neither meta.json nor value.json')
        d = self.split_dir("both")
        (d / "w" / "value.json").write_text("1")
        self.assert_refused(d, self.out(), "checkpoint",
                            rf'{d}: "w": holds both meta.json and value.json$')


class KilledPack(PackTestCase):
    def test_sigkill_mid_write_leaves_nothing(self):
        # A 3 GiB tensor of a sparse file: packing it to .pth reads it all for its CRC.
        src = self.tmp / "big.safetensors"
        size = 3 << 30
        header = json.dumps({"big": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
        header += " " * (-len(header) % 8)
        with open(src, "wb") as f:
            f.write(len(header).to_bytes(8, "little") + header.encode())
            f.truncate(8 + len(header) + size)
        out_dir = self.new_dir("killed")
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            with self.subTest(sig.name):
                out = out_dir / "big.pth"
                proc = subprocess.Popen([str(CKPTFS), "pack", str(src), str(out)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    written = wait_for_output(proc.pid, out_dir, 8 << 20, 60)
                    self.assertTrue(written, "pack never started writing")
                    self.assertIsNone(proc.poll(), "pack ended before it was killed")
                    proc.send_signal(sig)
                    proc.wait(timeout=30)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                self.assertEqual(proc.returncode, -sig)
                self.assertEqual(os.listdir(out_dir), [], "a file was left behind")


def wait_for_output(pid, directory, at_least, timeout):
    """Waits until process `pid` holds a file open for writing in `directory` (an unnamed
    O_TMPFILE shows as "directory/#inode (deleted)") with at least `at_least` bytes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(str(directory) + "/"):
                    if os.stat(f"/proc/{pid}/fd/{fd}").st_size >= at_least:
                        return True
        except OSError:
            return False
        time.sleep(0.01)
    return False


if __name__ == "__main__":
    unittest.main()
