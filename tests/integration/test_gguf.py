# SPDX-License-Identifier: MIT
"""Integration tests of GGUF: files written by the real tools of the sid interop root (gguf-py's
GGUFWriter, llama-quantize to every type it offers, gguf-convert-endian), mounted by ckptfs and
compared, tensor by tensor and value by value, with the reference reader (gguf-py's GGUFReader
and gguf.quants.dequantize, run in the root by gguf_check.py); the exports read by safetensors;
`ckptfs pack`; dequantize() on random blocks of every type against gguf-py; the real GGUF files
of CORPUS/formats.

Needs FUSE, and the sid root (sid_root.py); without the root the module is skipped.
Run by ctest as `/usr/bin/python3 -m unittest -v test_gguf` (see fixtures.py).
"""

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

from fixtures import SKIP_EXIT_STATUS, require  # noqa: E402

require("fuse")
import sid_root  # noqa: E402

if sid_root.missing():
    print(f"SKIPPED: {sid_root.missing()}", file=sys.stderr, flush=True)
    sys.exit(SKIP_EXIT_STATUS)

from fixtures import CKPTFS, CORPUS, REPO  # noqa: E402
from ckptfs_mounts import wait_for_mount  # noqa: E402
from test_mount import MOUNT_TIMEOUT, MountTestCase, run  # noqa: E402

TOOL = Path(os.environ.get("CKPTFS_DEQUANTIZE_TOOL",
                           REPO / "build" / "tests" / "ckptfs_dequantize_tool")).absolute()
SCRIPTS = ["gguf_make.py", "gguf_check.py", "gguf_random.py"]


def views_dir(mnt):
    """Where a mount's whole-model views (index.json, model.safetensors) are: the root today;
    MNT/.ckptfs/ once the views move there."""
    return Path(mnt)


class Fixtures:
    """The files gguf_make.py writes in the root, made once for the module (in the directory
    CKPTFS_GGUF_FIXTURES names, kept and reused, when set: for working on these tests)."""
    dir = None
    manifest = None
    kept = os.environ.get("CKPTFS_GGUF_FIXTURES")

    @classmethod
    def make(cls):
        if cls.dir is None:
            if cls.kept:
                cls.dir = Path(cls.kept)
                cls.dir.mkdir(exist_ok=True)
            else:
                cls.dir = sid_root.scratch_dir("ckptfs-test-gguf-")
            for name in SCRIPTS:
                shutil.copy(HERE / name, cls.dir / name)
            if not (cls.dir / "out" / "manifest.json").exists():
                sid_root.run(["python3", sid_root.inside(cls.dir / "gguf_make.py"),
                              sid_root.inside(cls.dir / "out")], timeout=900)
            cls.manifest = json.loads((cls.dir / "out" / "manifest.json").read_text())
        return cls.dir

    @classmethod
    def out(cls, name=""):
        return cls.make() / "out" / name


def tearDownModule():
    if Fixtures.dir is not None and not Fixtures.kept:
        shutil.rmtree(Fixtures.dir, ignore_errors=True)


class GgufMountTests(MountTestCase):
    """Mounts of the fixtures, checked in the root against gguf-py."""

    def mount_in_root(self, location, *options):
        """A mount at a new directory under the fixtures' (visible in the root)."""
        mnt = Path(self.new_dir_in_root())
        return self.mount(location, *options, mnt=mnt)

    def new_dir_in_root(self):
        import tempfile
        d = tempfile.mkdtemp(prefix="mnt-", dir=Fixtures.make())
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def check(self, specs):
        """gguf_check.py in the root on `specs` (host paths); its summaries."""
        def inside(value):
            if isinstance(value, list):
                return [inside(v) for v in value]
            return sid_root.inside(value) if isinstance(value, str) and value.startswith("/") \
                else value
        doc = [{k: inside(v) for k, v in s.items()} for s in specs]
        spec = Path(self.new_dir_in_root()) / "spec.json"
        spec.write_text(json.dumps(doc))
        r = sid_root.run(["python3", sid_root.inside(Fixtures.dir / "gguf_check.py"),
                          sid_root.inside(spec)], timeout=900, check=False)
        if r.returncode != 0:
            self.fail(f"gguf_check.py: {r.stderr.strip()[-4000:]}")
        return json.loads(r.stdout)

    def test_every_quantized_type_against_gguf_py(self):
        Fixtures.make()
        quantized = Fixtures.manifest["quantized"]
        self.assertEqual(Fixtures.manifest["skipped"], {}, "types llama-quantize did not write")
        names = {t for _, t in quantized}
        for t in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                  "IQ4_NL", "IQ4_XS", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS",
                  "IQ3_S", "TQ1_0", "TQ2_0"]:
            self.assertIn(t, names)
        specs = []
        for name, _ in quantized + [["llama-f32.gguf", "F32"], ["raw.gguf", "raw"]]:
            mnt, _ = self.mount_in_root(Fixtures.out(name))
            specs.append({"mount": str(mnt), "files": [str(Fixtures.out(name))]})
        summaries = self.check(specs)
        by_file = {s["files"][0].split("/")[-1]: r for s, r in zip(specs, summaries)}
        for name, t in quantized:
            r = by_file[name]
            self.assertEqual(r["tensors"], 21, name)
            if t in ("Q1_0", "Q2_0"):  # no reference dequantization: their blocks as data only
                self.assertEqual(r["data_only"], 16, name)
            elif t not in ("F16", "BF16"):
                self.assertEqual(r["dequantized"], 16, f"{name}: every weight matrix")
        self.assertEqual(by_file["raw.gguf"]["dequantized"], 4)  # NVFP4, MXFP4, Q4_0, IQ4_XS
        self.assertEqual(by_file["raw.gguf"]["data_only"], 2)  # Q8_1, Q8_K


    def test_split_set_from_any_file_and_its_directory(self):
        names = Fixtures.manifest["split"]
        self.assertEqual(len(names), 3, names)
        files = [str(Fixtures.out(n)) for n in names]
        # Alone in a directory, for the directory mount.
        alone = Path(self.new_dir_in_root())
        for n in names:
            os.link(Fixtures.out(n), alone / n)
        specs = []
        for location in (Fixtures.out(names[1]), Fixtures.out(names[2]), alone):
            mnt, _ = self.mount_in_root(location)
            index = json.loads((views_dir(mnt) / "index.json").read_text())
            self.assertEqual(index["format"], "gguf")
            self.assertEqual(index["sources"], names, location)
            specs.append({"mount": str(mnt), "files": files})
        for r in self.check(specs):
            self.assertEqual(r["tensors"], 21)
        # A file of the set missing: the error names it.
        os.unlink(alone / names[1])
        r = run([CKPTFS, "inspect", alone / names[0]])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f'split file "{names[1]}"', r.stderr.decode())

    def test_big_endian_file_its_plain_tensors_swapped_its_blocks_dequantized(self):
        be = Fixtures.manifest["big_endian"]
        self.assertIsNotNone(be, Fixtures.manifest["skipped"].get("big-endian"))
        mnt, _ = self.mount_in_root(Fixtures.out(be))
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertEqual(index["byteorder"], "big")
        meta = json.loads((mnt / "blk.0.attn_norm.weight" / "meta.json").read_text())
        self.assertEqual((meta["byteorder"], meta["numpy"]), ("big", ">f4"))
        r = self.check([{"mount": str(mnt), "files": [str(Fixtures.out(be))],
                         "twins": [str(Fixtures.out("llama-Q4_K_M.gguf"))]}])[0]
        self.assertEqual((r["tensors"], r["dequantized"]), (21, 16))

    def test_dtype_option_converts_the_dequantized_values_as_torch(self):
        specs = []
        for name, dtype in (("llama-Q4_K_M.gguf", "float16"), ("llama-IQ4_XS.gguf", "bfloat16"),
                            ("llama-f32.gguf", "bfloat16"), ("llama-BF16.gguf", "float16")):
            mnt, _ = self.mount_in_root(Fixtures.out(name), "-o", f"dtype={dtype}")
            specs.append({"mount": str(mnt), "files": [str(Fixtures.out(name))], "dtype": dtype})
        for r in self.check(specs):
            self.assertEqual(r["tensors"], 21)

    def test_shard_size_export_and_pack(self):
        name = "llama-Q6_K.gguf"
        mnt, _ = self.mount_in_root(Fixtures.out(name), "-o", "shard_size=1MB")
        shards = sorted(p.name for p in views_dir(mnt).glob("model-*.safetensors"))
        self.assertGreater(len(shards), 3, shards)
        out = Path(self.new_dir_in_root())
        for suffix in ("safetensors", "pth"):
            r = run([CKPTFS, "pack", Fixtures.out(name), out / f"packed.{suffix}"])
            self.assertEqual(r.returncode, 0, r.stderr)
        r = run([CKPTFS, "pack", "--dtype", "bfloat16", Fixtures.out(name),
                 out / "packed-bf16.safetensors"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # Types without values are left out, saying why.
        r = run([CKPTFS, "pack", Fixtures.out("llama-Q1_0.gguf"), out / "q1.safetensors"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Q1_0 blocks", r.stderr.decode())
        results = self.check([
            {"mount": str(mnt), "files": [str(Fixtures.out(name))]},
            {"packed": str(out / "packed.safetensors"), "files": [str(Fixtures.out(name))]},
            {"packed": str(out / "packed.pth"), "files": [str(Fixtures.out(name))]},
            {"packed": str(out / "packed-bf16.safetensors"), "files": [str(Fixtures.out(name))],
             "dtype": "bfloat16"},
            {"packed": str(out / "q1.safetensors"), "files": [str(Fixtures.out("llama-Q1_0.gguf"))]},
        ])
        self.assertEqual([r["tensors"] for r in results], [21, 21, 21, 21, 5])

    def test_150k_token_vocabulary_lists_and_reads_quickly(self):
        # Mounted without touching index.json, so that the first listing makes its size.
        mnt, proc = self.start(Fixtures.out("vocab150k.gguf"), mnt=Path(self.new_dir_in_root()))
        self.assertIsNone(wait_for_mount(mnt, proc, MOUNT_TIMEOUT))
        index_path = views_dir(mnt) / "index.json"
        start = time.monotonic()
        listing = os.listdir(mnt)
        size = os.stat(index_path).st_size
        listed = time.monotonic() - start
        start = time.monotonic()
        text = index_path.read_bytes()
        read = time.monotonic() - start
        self.assertEqual(len(text), size)
        self.assertIn("index.json", listing)
        index = json.loads(text)
        self.assertEqual(len(index["metadata"]["tokenizer.ggml.tokens"]), 150_000)
        self.assertEqual(index["metadata_types"]["tokenizer.ggml.merges"], "ARRAY[STRING]")
        print(f"\n150k-token vocabulary: index.json {size} bytes, listed and sized in "
              f"{listed * 1000:.1f} ms, read in {read * 1000:.1f} ms", file=sys.stderr)
        self.assertLess(listed + read, 2.0)
        self.check([{"mount": str(mnt), "files": [str(Fixtures.out("vocab150k.gguf"))]}])

    def test_corpus_gguf_files(self):
        corpus = sorted((CORPUS / "formats").glob("*.gguf"))
        self.assertEqual(len(corpus), 4, corpus)
        specs = []
        for path in corpus:
            copy = Fixtures.out(path.name)
            shutil.copy(path, copy)
            mnt, _ = self.mount_in_root(copy)
            index = json.loads((views_dir(mnt) / "index.json").read_text())
            if index["metadata"] and path.read_bytes()[4:8] == b"\x01\0\0\0":
                # gguf-py reads versions 2 and 3 only: GGUF v1 is checked against gguf_v1.py.
                want = read_gguf_v1_metadata(path)
                self.assertEqual(index["metadata_types"], {k: t for k, (t, _) in want.items()})
                self.assertEqual(index["metadata"], {k: v for k, (_, v) in want.items()})
                self.assertEqual(index["entries"], [])
                continue
            specs.append({"mount": str(mnt), "files": [str(copy)]})
        results = self.check(specs)
        self.assertEqual(sorted(r["tensors"] for r in results), [0, 0, 48])


def read_gguf_v1_metadata(path):
    """{key: (type, value)} of a GGUF version 1 file's metadata, read from the format's
    description (32-bit counts and lengths), for the corpus file gguf-py does not read."""
    import struct
    data = Path(path).read_bytes()
    at = 8
    names = ["UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING",
             "ARRAY", "UINT64", "INT64", "FLOAT64"]
    formats = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
               11: "<q", 12: "<d"}

    def take(fmt):
        nonlocal at
        v = struct.unpack_from(fmt, data, at)[0]
        at += struct.calcsize(fmt)
        return v

    def string():
        nonlocal at
        n = take("<I")
        at += n
        return data[at - n:at].decode("utf-8")

    def value(t):
        if t == 8:
            return string()
        v = take(formats[t])
        if t == 6:
            import math
            if math.isfinite(v):
                # As JSON numbers reads it back: the shortest float32 text ckptfs writes.
                import numpy as np
                v = float(repr(np.float32(v)).replace("np.float32(", "").rstrip(")"))
        return v

    tensors, kvs = take("<I"), take("<I")
    out = {}
    for _ in range(kvs):
        key = string()
        t = take("<I")
        if t == 9:
            item, n = take("<I"), take("<I")
            out[key] = (f"ARRAY[{names[item]}]", [value(item) for _ in range(n)])
        else:
            out[key] = (names[t], value(t))
    assert tensors == 0
    return out


class DequantizeTests(unittest.TestCase):
    """dequantize() on random blocks of every type, each code path, against gguf-py."""

    def test_random_blocks_every_type_and_path(self):
        if not TOOL.is_file():
            self.fail(f"missing {TOOL} (build the ckptfs_dequantize_tool target)")
        types = run([TOOL, "formats"]).stdout.decode().split()
        paths = run([TOOL, "paths"]).stdout.decode().split()
        self.assertEqual(len(types), 23, types)
        d = Fixtures.make() / "random"
        d.mkdir(exist_ok=True)
        sid_root.run(["python3", sid_root.inside(Fixtures.dir / "gguf_random.py"),
                      sid_root.inside(d), *types])
        for t in types:
            want = (d / f"{t}.values").read_bytes()
            for path in paths:
                with self.subTest(type=t, path=path):
                    got = d / f"{t}.{path}"
                    r = run([TOOL, "dequantize", t, path, d / f"{t}.blocks", got])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    data = got.read_bytes()
                    self.assertEqual(len(data), len(want))
                    if data != want:
                        first = next(i for i in range(0, len(data), 4)
                                     if data[i:i + 4] != want[i:i + 4])
                        self.fail(f"{t} ({path}): value {first // 4} is "
                                  f"{data[first:first + 4].hex()}, gguf-py's "
                                  f"{want[first:first + 4].hex()}")


if __name__ == "__main__":
    unittest.main()
