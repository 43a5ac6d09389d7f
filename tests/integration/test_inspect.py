# SPDX-License-Identifier: MIT
"""Integration tests of `ckptfs inspect`: the real binary against generated fixtures, the real
checkpoints of the corpus, and torch.load.

Run by ctest as `/usr/bin/python3 -m unittest -v tests/integration/test_inspect.py` with
    CKPTFS           the ckptfs binary                       (default: build/ckptfs)
    CKPTFS_FIXTURES  output of scripts/make_fixtures.py      (default: build/fixtures)
    CKPTFS_CORPUS    real checkpoints + PROVENANCE.tsv       (default: ../shared/corpus)
Needs Debian's /usr/bin/python3 (torch 1.13, numpy). Missing fixtures fail; the corpus tests are
skipped, with the reason, where there is no corpus (fixtures.needs_corpus).

The independent oracle is torch.load (ckptfs_reference.torch_load, in scripts/, shared with
make_fixtures.py and ckptfs-verify), through an unpickler that keeps BUILD state raw: classes
that cannot be imported and nn.Module subclasses become stub objects holding exactly their pickled
state (the flattening rule walks that state, e.g. `_modules.conv1._parameters.weight`), and
pre-0.4 `torch.cuda.*Tensor` objects are rebuilt as CPU tensors. Debian's torch 1.13 ignores
torch.load's `pickle_module` argument, so the unpickler is swapped in by patching
torch.serialization.pickle for the duration of one load.
"""

import csv
import hashlib
import json
import pickle
import random
import re
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

import numpy as np  # noqa: E402

# The reference logic (torch.load with raw object state, the flattening rule, tensor bytes,
# values as JSON) is shared with scripts/make_fixtures.py and scripts/ckptfs-verify.
import ckptfs_reference as ref  # noqa: E402
from fixtures import (CKPTFS, CORPUS, FIXTURE_NAMES, NOT_TORCH_LOADABLE, REPO,  # noqa: E402
                      corpus_files, expected_doc, fixture_path, needs_corpus,
                      torchscript_corpus_files)

warnings.filterwarnings("ignore")

SAMPLE = REPO / "tests" / "data" / "sample.pth"

TENSOR_FIELDS = ("dtype", "shape", "stride", "storage_offset", "requires_grad", "nbytes")

INSPECT_TIMEOUT = 120  # seconds; generous for sanitizer builds
ERROR_TIME_LIMIT = 1.0  # seconds for a bad input to be rejected


# --------------------------------------------------------------------------------------------
# Running the binary
# --------------------------------------------------------------------------------------------

def run_ckptfs(*args, timeout=INSPECT_TIMEOUT):
    if not CKPTFS.is_file():
        raise AssertionError(f"ckptfs binary not found at {CKPTFS} (set CKPTFS)")
    return subprocess.run([str(CKPTFS), *map(str, args)], capture_output=True, timeout=timeout)


_inspect_cache = {}


def inspect_json(path):
    """The parsed output of `ckptfs inspect --json PATH`; fails unless it exits 0."""
    path = Path(path)
    if path not in _inspect_cache:
        if not path.is_file():
            raise AssertionError(f"missing checkpoint {path}")
        r = run_ckptfs("inspect", "--json", path)
        if r.returncode != 0:
            raise AssertionError(f"ckptfs inspect --json {path} exited {r.returncode}: "
                                 f"{r.stderr.decode(errors='replace').strip()}")
        try:
            doc = json.loads(r.stdout.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise AssertionError(f"ckptfs inspect --json {path}: invalid JSON: {e}") from e
        _inspect_cache[path] = doc
    return _inspect_cache[path]


# --------------------------------------------------------------------------------------------
# torch.load, flattened
# --------------------------------------------------------------------------------------------

def torch_entries(root):
    """torch.load's result flattened by the contract's rule: a list of entry dicts, tensors
    with their layout (and "_bytes", the elements as in memory, and "_storage" for the test's
    own use)."""
    flat = ref.flatten(root, with_containers=True)
    return entries_of(flat, ref.key_paths(flat), ref.key_containers(flat))


def torch_entries_of_file(path):
    """torch_entries() of what torch reads from `path`: torch.load's result, or for a
    TorchScript archive ckptfs_reference.torchscript_flatten (torch.jit.load's state_dict, then
    torch's reading of constants.pkl and of data.pkl's other tensors)."""
    if ref.torchscript_prefix(path) is not None:
        flat = ref.torchscript_flatten(path, with_containers=True)
        return entries_of(flat, ref.torchscript_key_paths(flat),
                          ref.torchscript_key_containers(flat))
    return torch_entries(ref.torch_load(path))


def entries_of(flat, key_paths, containers):
    entries = []
    for (key, v, *_), key_path, kinds in zip(flat, key_paths, containers):
        key = ref.json_text(key)  # as ckptfs's JSON holds it (a lone surrogate's bytes \udcXX)
        if ref.is_torch_tensor(v):
            e = {"key": key, "kind": "tensor", "dtype": ref.dtype_name(v.dtype),
                 "shape": list(v.shape), "stride": list(v.stride()),
                 "storage_offset": v.storage_offset(), "requires_grad": bool(v.requires_grad),
                 "nbytes": v.numel() * v.element_size(), "contiguous": v.is_contiguous(),
                 "quantization": ref.quantization(v, key),
                 "_storage": ref.storage_of(v)[0], "_bytes": ref.tensor_bytes(v)}
        else:
            e = ref.value_entry(key, v)
        if key_path is not None:
            e["key_path"] = key_path
        if kinds:
            e["containers"] = kinds
        entries.append(e)
    for e in entries:
        if e["kind"] == "tensor":
            e["shared_with"] = [o["key"] for o in entries if o is not e and o["kind"] == "tensor"
                                and o["_storage"] == e["_storage"]]
    return entries


# --------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------

class CheckMixin:
    def assert_text_lines(self, stdout, n, where):
        """Text mode: one line per entry and a totals line, after an optional column header
        (a line starting with KEY). Returns the entry lines."""
        lines = [ln for ln in stdout.decode("utf-8").split("\n") if ln.strip()]
        if lines and len(lines) == n + 2 and lines[0].split()[:1] == ["KEY"]:
            lines = lines[1:]
        self.assertEqual(len(lines), n + 1, f"{where}: want one line per entry + a totals line")
        return lines[:-1]

    def assert_header(self, doc, where):
        self.assertIsInstance(doc, dict, where)
        self.assertIn(doc.get("format"), ("zip", "legacy", "torchscript"), where)
        self.assertIn(doc.get("byteorder"), ("little", "big"), where)
        self.assertIsInstance(doc.get("entries"), list, where)
        for e in doc["entries"]:
            self.assertIsInstance(e.get("key"), str, where)
            self.assertIn(e.get("kind"), ("tensor", "value"), f"{where}: {e.get('key')!r}")

    def assert_keys(self, got, want, where):
        self.assertEqual([e["key"] for e in got], [e["key"] for e in want],
                         f"{where}: flattened keys differ")
        self.assertEqual([e["kind"] for e in got], [e["kind"] for e in want],
                         f"{where}: entry kinds differ")
        self.assertEqual([e.get("key_path") for e in got], [e.get("key_path") for e in want],
                         f"{where}: key paths differ")
        self.assertEqual([e.get("containers") for e in got], [e.get("containers") for e in want],
                         f"{where}: containers differ")

    def assert_tensor_layout(self, g, w, where):
        for field in TENSOR_FIELDS + ("contiguous",):
            if field in w:
                self.assertEqual(g.get(field), w[field], f"{where}: {field}")
        # shared_with may be cut to a first few keys; shared_with_count is then the full count.
        shared, want = g.get("shared_with"), set(w["shared_with"])
        self.assertIsInstance(shared, list, f"{where}: shared_with")
        if "shared_with_count" in g:
            self.assertEqual(g["shared_with_count"], len(want), f"{where}: shared_with_count")
        if len(shared) < len(want) and "shared_with_count" in g:
            self.assertLess(set(shared), want, f"{where}: shared_with")
        else:
            self.assertEqual(set(shared), want, f"{where}: shared_with")
        self.assertIsNone(g.get("broken"), f"{where}: reported broken")
        self.assertEqual(g.get("quantization"), w.get("quantization"), f"{where}: quantization")

    def file_bytes(self, path, g, where):
        """The tensor's elements in C order as stored in the file, gathered with the storage
        offset and sizes ckptfs reports."""
        elsize = ref.DTYPE_SIZES[g["dtype"]]
        numel = int(np.prod(g["shape"])) if g["shape"] else 1
        self.assertEqual(g["nbytes"], numel * elsize, f"{where}: nbytes")
        st = g.get("storage")
        self.assertIsInstance(st, dict, f"{where}: storage")
        self.assertIsInstance(st.get("file_offset"), int, f"{where}: storage.file_offset")
        self.assertIsInstance(st.get("nbytes"), int, f"{where}: storage.nbytes")
        self.assertIn("key", st, f"{where}: storage.key")
        size = Path(path).stat().st_size
        self.assertLessEqual(st["file_offset"] + st["nbytes"], size, f"{where}: storage past EOF")
        if numel:
            extent = (g["storage_offset"] + 1
                      + sum((n - 1) * s for n, s in zip(g["shape"], g["stride"]))) * elsize
            self.assertLessEqual(extent, st["nbytes"], f"{where}: view past its storage")
        if g.get("file_offset") is not None:
            self.assertEqual(g["file_offset"], st["file_offset"] + g["storage_offset"] * elsize,
                             f"{where}: file_offset")
        with open(path, "rb") as f:
            f.seek(st["file_offset"])
            raw = f.read(st["nbytes"])
        return ref.gather(raw, elsize, g["shape"], g["stride"], g["storage_offset"])

    def assert_records(self, doc, path, where):
        """Zip storages name their record, whose size is the storage's; legacy ones have none."""
        sizes = {}
        if doc["format"] in ("zip", "torchscript"):
            with zipfile.ZipFile(path) as zf:
                sizes = {i.filename: i.file_size for i in zf.infolist()}
        # TorchScript: data.pkl's storages are data/<key>, constants.pkl's constants/<key>.
        dirs = ("/data/", "/constants/") if doc["format"] == "torchscript" else ("/data/",)
        for e in doc["entries"]:
            if e["kind"] != "tensor" or not isinstance(e.get("storage"), dict):
                continue
            at = f"{where}: {e['key']!r}"
            rec = e["storage"].get("record")
            if doc["format"] == "legacy":
                self.assertIsNone(rec, f"{at}: legacy record")
            else:
                self.assertIsInstance(rec, str, f"{at}: record")
                self.assertTrue(rec.endswith(tuple(d + e["storage"]["key"] for d in dirs)),
                                f"{at}: {rec!r}")
                self.assertIn(rec, sizes, f"{at}: no record {rec!r}")
                self.assertEqual(sizes[rec], e["storage"]["nbytes"], f"{at}: storage.nbytes")

    def assert_matches_torch(self, doc, path, where, check_values=True):
        """ckptfs agrees with torch.load (torch.jit.load for TorchScript): keys, kinds, tensor
        layouts, bytes, simple values."""
        want = torch_entries_of_file(path)
        got = doc["entries"]
        self.assert_keys(got, want, where)
        for g, w in zip(got, want):
            at = f"{where}: {g['key']!r}"
            if w["kind"] == "tensor":
                self.assert_tensor_layout(g, w, at)
                data = self.file_bytes(path, g, at)
                if doc["byteorder"] == "little":
                    self.assertEqual(hashlib.sha256(data).hexdigest(),
                                     hashlib.sha256(w["_bytes"]).hexdigest(), f"{at}: bytes")
            elif check_values and "value" in w and not ref.has_opaque(g.get("value")):
                self.assertEqual(g.get("value"), w["value"], f"{at}: value")


# --------------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------------

class FixtureTests(unittest.TestCase, CheckMixin):
    def check_expected(self, name):
        path, want = fixture_path(name), expected_doc(name)
        doc = inspect_json(path)
        self.assert_header(doc, name)
        self.assertEqual(doc["format"], want["format"], f"{name}: format")
        self.assertEqual(doc["byteorder"], want["byteorder"], f"{name}: byteorder")
        self.assert_keys(doc["entries"], want["entries"], name)
        for g, w in zip(doc["entries"], want["entries"]):
            at = f"{name}: {g['key']!r}"
            if w["kind"] == "tensor":
                self.assert_tensor_layout(g, w, at)
                data = self.file_bytes(path, g, at)
                self.assertEqual(hashlib.sha256(data).hexdigest(), w["sha256"], f"{at}: bytes")
            elif "value" in w:
                self.assertEqual(g.get("value"), w["value"], f"{at}: value")
        self.assert_records(doc, path, name)

    def check_torch(self, name):
        path = fixture_path(name)
        self.assert_matches_torch(inspect_json(path), path, name)

    def check_oracles(self, name):
        """No binary needed: torch.load flattened here agrees with expected.json."""
        want = expected_doc(name)
        got = torch_entries_of_file(fixture_path(name))
        self.assert_keys(got, want["entries"], name)
        for g, w in zip(got, want["entries"]):
            at = f"{name}: {g['key']!r}"
            if w["kind"] == "tensor":
                self.assert_tensor_layout(g, w, at)
                self.assertEqual(g["contiguous"], w["contiguous"], at)
                # bigendian.pth: torch 1.13 reads the big-endian bytes as they are.
                self.assertEqual(hashlib.sha256(g["_bytes"]).hexdigest(), w["sha256"], at)
            else:
                self.assertEqual(g.get("value"), w.get("value"), at)

    def check_text(self, name):
        path = fixture_path(name)
        n = len(expected_doc(name)["entries"])
        r = run_ckptfs("inspect", path)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assert_text_lines(r.stdout, n, name)

    def test_expected_files_complete(self):
        for name in FIXTURE_NAMES:
            fixture_path(name)
            doc = expected_doc(name)
            self.assertTrue(doc["entries"], name)

    def test_text_keys_in_order(self):
        r = run_ckptfs("inspect", fixture_path("convnet"))
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        lines = self.assert_text_lines(r.stdout, len(expected_doc("convnet")["entries"]), "convnet")
        keys = [e["key"] for e in expected_doc("convnet")["entries"]]
        for key, line in zip(keys, lines):
            self.assertIn(key, line)

    def test_sample(self):
        self.assertTrue(SAMPLE.is_file(), f"missing {SAMPLE}")
        self.assertLess(SAMPLE.stat().st_size, 4096)
        doc = inspect_json(SAMPLE)
        self.assert_header(doc, "sample")
        self.assertEqual([e["key"] for e in doc["entries"]],
                         ["encoder.weight", "encoder.bias", "decoder.weight", "decoder.bias",
                          "step"])
        self.assert_matches_torch(doc, SAMPLE, "sample")


def _safe(name):
    return re.sub(r"\W", "_", name)


for _name in FIXTURE_NAMES:
    setattr(FixtureTests, f"test_expected_{_name}", lambda self, n=_name: self.check_expected(n))
    setattr(FixtureTests, f"test_text_{_name}", lambda self, n=_name: self.check_text(n))
    if _name not in NOT_TORCH_LOADABLE:
        setattr(FixtureTests, f"test_torch_{_name}", lambda self, n=_name: self.check_torch(n))
        setattr(FixtureTests, f"test_oracles_{_name}", lambda self, n=_name: self.check_oracles(n))


# --------------------------------------------------------------------------------------------
# The corpus of real checkpoints
# --------------------------------------------------------------------------------------------

def provenance():
    path = CORPUS / "PROVENANCE.tsv"
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {row["local_name"]: row for row in csv.DictReader(f, delimiter="\t")}


@needs_corpus
class CorpusTests(unittest.TestCase, CheckMixin):
    def test_corpus_present(self):
        self.assertTrue(corpus_files(), f"no checkpoints in {CORPUS} (set CKPTFS_CORPUS)")
        prov = provenance()
        self.assertTrue(prov, f"no PROVENANCE.tsv in {CORPUS}")
        for p in corpus_files():
            self.assertIn(p.name, prov, f"{p.name} is not in PROVENANCE.tsv")

    def check_corpus(self, path):
        name = path.name
        doc = inspect_json(path)
        self.assert_header(doc, name)
        row = provenance().get(name, {})
        detected = row.get("detected_format", "")
        if detected:
            self.assertEqual(doc["format"], detected.split()[0], f"{name}: format")
        self.assertEqual(doc["byteorder"], "little", name)
        self.assert_records(doc, path, name)
        try:
            root = ref.torch_load(path)
        except Exception as e:  # only the inspect side can be checked
            tensors = [e for e in doc["entries"] if e["kind"] == "tensor"]
            for t in tensors:
                self.assertIsNone(t.get("broken"), f"{name}: {t['key']!r}")
                self.file_bytes(path, t, f"{name}: {t['key']!r}")
            static = row.get("n_tensors(static)", "")
            if static.isdigit():
                self.assertEqual(len(tensors), int(static),
                                 f"{name}: tensors vs PROVENANCE (torch.load failed: {e!r})")
            return
        del root
        self.assert_matches_torch(doc, path, name)

    def check_corpus_text(self, path):
        n = len(inspect_json(path)["entries"])
        r = run_ckptfs("inspect", path)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assert_text_lines(r.stdout, n, path.name)


for _path in corpus_files():
    setattr(CorpusTests, f"test_corpus_{_safe(_path.name)}",
            lambda self, p=_path: self.check_corpus(p))
    setattr(CorpusTests, f"test_corpus_text_{_safe(_path.name)}",
            lambda self, p=_path: self.check_corpus_text(p))


@needs_corpus
class TorchScriptCorpusTests(unittest.TestCase, CheckMixin):
    """The real TorchScript archives of CORPUS/formats/: format torchscript; first exactly the
    keys and order of torch.jit.load(f).state_dict(), then constants.N and attributes.*; every
    tensor's layout and bytes as torch reads them."""

    def test_present(self):
        self.assertEqual(len(torchscript_corpus_files()), 2,
                         f"the two silero-vad archives in {CORPUS / 'formats'}")

    def check(self, path):
        doc = inspect_json(path)
        self.assert_header(doc, path.name)
        self.assertEqual(doc["format"], "torchscript", path.name)
        self.assertEqual(doc["byteorder"], "little", path.name)
        import torch
        state_dict = list(torch.jit.load(str(path), map_location="cpu").state_dict())
        keys = [e["key"] for e in doc["entries"]]
        self.assertEqual(keys[:len(state_dict)], state_dict, f"{path.name}: state_dict keys")
        for e in doc["entries"][len(state_dict):]:
            self.assertIn(e["key_path"][0], ({"__part__": "constants"}, {"__part__": "attributes"}),
                          f"{path.name}: {e['key']!r} after the state_dict")
            self.assertIsNone(e["broken"], f"{path.name}: {e['key']!r}")
        self.assert_records(doc, path, path.name)
        self.assert_matches_torch(doc, path, path.name)

    def test_micro_quantized_weights(self):
        """The 2021 archive's dynamically quantized layers: their qint8 weights are served
        (under attributes.), though state_dict() lists none of them."""
        path = next(p for p in torchscript_corpus_files() if "micro" in p.name)
        doc = inspect_json(path)
        packed = [e for e in doc["entries"] if e["key"].endswith("._packed_params.__state__.0")]
        self.assertEqual(len(packed), 16)
        for e in packed:
            self.assertEqual(e["dtype"], "qint8", e["key"])
            self.assertEqual(e["quantization"]["qscheme"], "per_tensor_affine", e["key"])
        self.assertEqual(sum(e["kind"] == "tensor" for e in doc["entries"]), 88)


for _path in torchscript_corpus_files():
    setattr(TorchScriptCorpusTests, f"test_{_safe(_path.name)}",
            lambda self, p=_path: self.check(p))


# --------------------------------------------------------------------------------------------
# Command line and bad inputs
# --------------------------------------------------------------------------------------------

class CliTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory(prefix="ckptfs-test-")
        cls.tmp = Path(cls._tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_help(self):
        r = run_ckptfs("--help")
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertIn("inspect", r.stdout.decode(errors="replace"))

    def test_version(self):
        r = run_ckptfs("--version")
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertRegex(r.stdout.decode(errors="replace"), r"\d+\.\d+\.\d+")

    def test_usage_errors(self):
        for args in (["inspect"], ["inspect", "--json"], ["--no-such-option"]):
            r = run_ckptfs(*args)
            self.assertEqual(r.returncode, 1, f"{args}: {r.stderr.decode(errors='replace')}")
            self.assertTrue(r.stderr.strip(), f"{args}: no message on stderr")

    def assert_rejected(self, path, codes):
        for args in (["inspect", "--json", path], ["inspect", path]):
            start = time.monotonic()
            r = run_ckptfs(*args, timeout=30)
            elapsed = time.monotonic() - start
            err = r.stderr.decode("utf-8", errors="replace")
            where = f"{' '.join(map(str, args))}: exit {r.returncode}, stderr {err!r}"
            self.assertIn(r.returncode, codes, where)
            self.assertLess(elapsed, ERROR_TIME_LIMIT, where)
            lines = err.rstrip("\n").split("\n")
            self.assertEqual(len(lines), 1, f"{where}: want exactly one line")
            self.assertTrue(err.endswith("\n"), where)
            prefixes = (f"ckptfs: {path}: ", f"ckptfs: {json.dumps(str(path))}: ")
            self.assertTrue(lines[0].startswith(prefixes), f"{where}: want 'ckptfs: FILE: ...'")
            self.assertGreater(len(lines[0]), max(map(len, prefixes)), where)

    def write(self, name, data):
        path = self.tmp / name
        path.write_bytes(data)
        return path

    def test_missing_file(self):
        self.assert_rejected(self.tmp / "no-such-file.pth", {2})

    def test_directory(self):
        d = self.tmp / "a-directory.pth"
        d.mkdir(exist_ok=True)
        self.assert_rejected(d, {2, 3, 4, 5})

    def test_empty_file(self):
        self.assert_rejected(self.write("empty.pth", b""), {2, 3, 4, 5})

    def test_random_bytes(self):
        rng = random.Random(1)
        data = bytes(rng.randrange(256) for _ in range(4096))
        self.assert_rejected(self.write("random.pth", data), {2, 3, 4, 5})

    def test_truncated_zip(self):
        data = fixture_path("convnet").read_bytes()
        self.assert_rejected(self.write("truncated.pth", data[:len(data) // 2]), {2, 3, 4, 5})

    def test_truncated_zip_tail(self):
        data = fixture_path("convnet").read_bytes()
        self.assert_rejected(self.write("truncated-tail.pth", data[:-30]), {2, 3, 4, 5})

    def test_truncated_legacy(self):
        data = fixture_path("legacy").read_bytes()
        self.assert_rejected(self.write("truncated-legacy.pth", data[:len(data) // 2]),
                             {2, 3, 4, 5})

    def test_compressed_data_pkl(self):
        src = fixture_path("convnet")
        path = self.tmp / "deflated.pth"
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w") as zout:
            for info in zin.infolist():
                method = (zipfile.ZIP_DEFLATED if info.filename.endswith("/data.pkl")
                          else zipfile.ZIP_STORED)
                zi = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
                zout.writestr(zi, zin.read(info), compress_type=method)
        self.assert_rejected(path, {5})

    def test_zip_without_data_pkl(self):
        path = self.tmp / "no-data-pkl.pth"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(zipfile.ZipInfo("archive/version", date_time=(1980, 1, 1, 0, 0, 0)),
                       b"3\n")
        self.assert_rejected(path, {2, 3, 4, 5})

    def test_garbage_after_legacy_magic(self):
        magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
        self.assert_rejected(self.write("legacy-garbage.pth", magic + b"\xff" * 64), {2, 3, 4, 5})


# --------------------------------------------------------------------------------------------
# Split and RFC directories (what `ckptfs pack` also reads)
# --------------------------------------------------------------------------------------------

class DirectoryTests(unittest.TestCase, CheckMixin):
    """`ckptfs inspect DIR` of a split directory (key directories with meta.json and data, or
    value.json, as a mount shows them) and of an RFC directory (map.pt and <name>.pt files
    written by torch.save), both made here from the training fixture: the same keys, dtypes,
    shapes and values as inspect of the fixture itself, each tensor's bytes in its own file."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="ckptfs-inspect-dirs-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)
        self.src = fixture_path("training")
        self.doc = inspect_json(self.src)
        self.flat = ref.flatten(ref.torch_load(self.src))
        self.assertEqual([k for k, _ in self.flat], [e["key"] for e in self.doc["entries"]])

    def split_dir(self):
        d = self.tmp / "split"
        d.mkdir()
        keys = [k for k, _ in self.flat]
        for name, (key, obj), e in zip(ref.entry_names(keys), self.flat, self.doc["entries"]):
            (d / name).mkdir()
            if e["kind"] == "value":
                (d / name / "value.json").write_text(json.dumps(e["value"]))
                continue
            data = ref.tensor_bytes(obj)
            (d / name / "data").write_bytes(data)
            (d / name / "meta.json").write_text(json.dumps(
                {"key": key, "dtype": e["dtype"], "shape": e["shape"], "nbytes": len(data),
                 "requires_grad": e["requires_grad"]}))
        return d

    def inspect_dir(self, d):
        r = run_ckptfs("inspect", "--json", d)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        return json.loads(r.stdout)

    def assert_same_entries(self, doc, want, where):
        self.assertEqual([e["key"] for e in doc["entries"]], [e["key"] for e in want], where)
        for got, e in zip(doc["entries"], want):
            with self.subTest(where=where, key=e["key"]):
                self.assertEqual(got["kind"], e["kind"])
                if e["kind"] == "value":
                    self.assertTrue(ref.json_equal(got["value"], e["value"]))
                    continue
                for field in ("dtype", "shape", "nbytes", "requires_grad"):
                    self.assertEqual(got[field], e[field], field)
                self.assertTrue(got["contiguous"])

    def test_split_directory(self):
        d = self.split_dir()
        doc = self.inspect_dir(d)
        self.assertEqual(doc["format"], "split")
        # Without index.json, the entries come sorted by key.
        want = sorted(self.doc["entries"], key=lambda e: e["key"].encode())
        self.assert_same_entries(doc, want, "split")
        flat = dict(self.flat)
        for e in doc["entries"]:
            if e["kind"] == "tensor":
                self.assertEqual(e["source"], f"{e['key']}/data")
                self.assertEqual(e["file_offset"], 0)
                data = (d / e["source"]).read_bytes()
                self.assertEqual(data, ref.tensor_bytes(flat[e["key"]]), e["key"])
        r = run_ckptfs("inspect", d)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        lines = self.assert_text_lines(r.stdout, len(want), "split")
        for e, line in zip(want, lines):
            self.assertEqual(line.split()[0], e["key"])
        self.assertIn(", format split,", r.stdout.decode().splitlines()[-1])

    def test_rfc_directory(self):
        d = self.tmp / "rfc"
        d.mkdir()
        items = [(k, v) for (k, v), e in zip(self.flat, self.doc["entries"])
                 if e["kind"] == "tensor" or ref.simple_json(v) is not ref.NOT_JSON]
        import torch
        torch.save([k for k, _ in items], d / "map.pt")
        for name, (_, v) in zip(ref.rfc_file_names([k for k, _ in items]), items):
            torch.save(v, d / name)
        doc = self.inspect_dir(d)
        self.assertEqual(doc["format"], "rfc")
        keys = {k for k, _ in items}
        self.assert_same_entries(doc, [e for e in self.doc["entries"] if e["key"] in keys], "rfc")
        r = run_ckptfs("inspect", d)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        lines = self.assert_text_lines(r.stdout, len(items), "rfc")
        self.assertEqual([ln.split()[0] for ln in lines], [k for k, _ in items])
        self.assertIn(", format rfc,", r.stdout.decode().splitlines()[-1])

    def test_hostile_directories_one_line(self):
        d = self.split_dir()
        key = next(e["key"] for e in self.doc["entries"] if e["kind"] == "tensor")
        meta = json.loads((d / key / "meta.json").read_text())
        (d / key / "meta.json").write_text(json.dumps({**meta, "nbytes": meta["nbytes"] + 4}))
        for args in (["inspect", d], ["inspect", "--json", d]):
            r = run_ckptfs(*args)
            err = r.stderr.decode(errors="replace")
            self.assertEqual(r.returncode, 4, err)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertRegex(err, rf'^ckptfs: {re.escape(str(d))}: "{re.escape(key)}/meta.json": '
                                  r"nbytes \d+, but a \w+ tensor of shape .* holds \d+\n$")
            self.assertEqual(r.stdout, b"")
        (d / key / "meta.json").write_text(json.dumps(meta))
        (d / key / "data").unlink()
        (d / key / "data").symlink_to("/etc/passwd")
        r = run_ckptfs("inspect", d)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn(b"leads out of the directory", r.stderr)
        self.assertNotIn(b"root:", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
