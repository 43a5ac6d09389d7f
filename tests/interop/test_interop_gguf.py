# SPDX-License-Identifier: MIT
"""GGUF against the real tools of the interop root: files written by gguf-py's GGUFWriter,
llama-quantize (every type it offers; the IQ1-IQ3 types with an importance matrix) and
gguf-convert-endian, mounted by ckptfs and compared, tensor by tensor and value by value, with
gguf-py's GGUFReader and gguf.quants.dequantize (tests/interop/root/gguf_checks.py); the exports
read by safetensors' safe_open and torch.load; `ckptfs pack`; dequantize() of random blocks of
every type, on each code path, against gguf-py; the GGUF files of CORPUS/formats.

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_gguf` (label interop).
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
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from fixtures import CKPTFS, CORPUS, REPO  # noqa: E402
from interop_support import InteropCase, inside, outside, views_dir  # noqa: E402
from ckptfs_mounts import wait_for_mount  # noqa: E402

TOOL = Path(os.environ.get("CKPTFS_DEQUANTIZE_TOOL",
                           REPO / "build" / "tests" / "ckptfs_dequantize_tool")).absolute()

# Every type the issue names, which llama-quantize must write and ckptfs dequantize.
DEQUANTIZED = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
               "IQ4_NL", "IQ4_XS", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS",
               "IQ3_S", "TQ1_0", "TQ2_0"]


def run(args, timeout=300):
    return subprocess.run([str(a) for a in args], capture_output=True, timeout=timeout)


class GgufTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.out = cls.new_dir("fixtures")
        cls.manifest = cls.call("gguf_fixtures.write", inside(cls.out), timeout=1200)
        cls.versions = cls.call("versions.tools")

    def path(self, name):
        return self.out / name

    def check(self, specs):
        """gguf_checks in the root on each spec (paths of this machine); their reports, which
        must hold no problem."""
        def inside_all(value):
            if isinstance(value, list):
                return [inside_all(v) for v in value]
            return inside(value) if isinstance(value, (str, Path)) and str(value).startswith("/") \
                else value
        reports = []
        for spec in specs:
            if "mount" in spec and "views" not in spec:
                spec = {**spec, "views": views_dir(spec["mount"])}
            doc = {k: inside_all(str(v) if isinstance(v, Path) else v) for k, v in spec.items()}
            function = "gguf_checks.check_packed" if "packed" in spec else "gguf_checks.check_mount"
            report = self.call(function, doc, timeout=900)
            self.assertEqual(report["problems"], [], f"{spec} against {self.versions}")
            reports.append(report)
        return reports

    def test_every_quantized_type_against_gguf_py(self):
        quantized = self.manifest["quantized"]
        self.assertEqual(self.manifest["skipped"], {}, "types llama-quantize did not write")
        names = {t for _, t in quantized}
        for t in DEQUANTIZED:
            self.assertIn(t, names)
        specs = []
        for name, _ in quantized + [["llama-f32.gguf", "F32"], ["raw.gguf", "raw"]]:
            mnt = self.mount(self.path(name))
            specs.append({"mount": mnt, "files": [self.path(name)]})
        reports = dict(zip([s["files"][0].name for s in specs], self.check(specs)))
        for name, t in quantized:
            r = reports[name]
            self.assertEqual(r["tensors"], 21, name)
            if t in ("Q1_0", "Q2_0"):  # no reference dequantization: their blocks as data only
                self.assertEqual(r["data_only"], 16, name)
            elif t not in ("F16", "BF16"):
                self.assertEqual(r["dequantized"], 16, f"{name}: every weight matrix")
        self.assertEqual(reports["raw.gguf"]["dequantized"], 4)  # NVFP4, MXFP4, Q4_0, IQ4_XS
        self.assertEqual(reports["raw.gguf"]["data_only"], 2)  # Q8_1, Q8_K

    def test_split_set_from_any_file_and_its_directory(self):
        names = self.manifest["split"]
        self.assertEqual(len(names), 3, names)
        files = [self.path(n) for n in names]
        alone = self.new_dir("split")  # the set alone, for the directory mount
        for n in names:
            os.link(self.path(n), alone / n)
        specs = []
        for location in (files[1], files[2], alone):
            mnt = self.mount(location)
            index = json.loads((views_dir(mnt) / "index.json").read_text())
            self.assertEqual(index["format"], "gguf")
            self.assertEqual(index["sources"], names, location)
            specs.append({"mount": mnt, "files": files})
        for r in self.check(specs):
            self.assertEqual(r["tensors"], 21)
        os.unlink(alone / names[1])  # a file of the set missing: the error names it
        r = run([CKPTFS, "inspect", alone / names[0]])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn(f'split file "{names[1]}"', r.stderr.decode())

    def test_big_endian_file_plain_tensors_swapped_blocks_dequantized(self):
        be = self.manifest["big_endian"]
        self.assertIsNotNone(be, self.manifest["skipped"].get("big-endian"))
        mnt = self.mount(self.path(be))
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertEqual(index["byteorder"], "big")
        meta = json.loads((mnt / "blk.0.attn_norm.weight" / "meta.json").read_text())
        self.assertEqual((meta["byteorder"], meta["numpy"]), ("big", ">f4"))
        r = self.check([{"mount": mnt, "files": [self.path(be)],
                         "twins": [self.path("llama-Q4_K_M.gguf")]}])[0]
        self.assertEqual((r["tensors"], r["dequantized"]), (21, 16))

    def test_dtype_option_converts_the_values_as_torch(self):
        specs = []
        for name, dtype in (("llama-Q4_K_M.gguf", "float16"), ("llama-IQ4_XS.gguf", "bfloat16"),
                            ("llama-f32.gguf", "bfloat16"), ("llama-BF16.gguf", "float16")):
            mnt = self.mount(self.path(name), "-o", f"dtype={dtype}")
            specs.append({"mount": mnt, "files": [self.path(name)], "dtype": dtype})
        for r in self.check(specs):
            self.assertEqual(r["tensors"], 21)

    def test_shard_size_export_and_pack(self):
        name = "llama-Q6_K.gguf"
        mnt = self.mount(self.path(name), "-o", "shard_size=1MB")
        shards = sorted(p.name for p in views_dir(mnt).glob("model-*.safetensors"))
        self.assertGreater(len(shards), 3, shards)
        out = self.new_dir("packed")
        for suffix in ("safetensors", "pth"):
            r = run([CKPTFS, "pack", self.path(name), out / f"packed.{suffix}"])
            self.assertEqual(r.returncode, 0, r.stderr)
        r = run([CKPTFS, "pack", "--dtype", "bfloat16", self.path(name),
                 out / "packed-bf16.safetensors"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # Types without values are left out, saying why.
        r = run([CKPTFS, "pack", self.path("llama-Q1_0.gguf"), out / "q1.safetensors"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Q1_0 blocks", r.stderr.decode())
        reports = self.check([
            {"mount": mnt, "files": [self.path(name)]},
            {"packed": out / "packed.safetensors", "files": [self.path(name)]},
            {"packed": out / "packed.pth", "files": [self.path(name)]},
            {"packed": out / "packed-bf16.safetensors", "files": [self.path(name)],
             "dtype": "bfloat16"},
            {"packed": out / "q1.safetensors", "files": [self.path("llama-Q1_0.gguf")]},
        ])
        self.assertEqual([r["tensors"] for r in reports], [21, 21, 21, 21, 5])

    def test_150k_token_vocabulary_lists_and_reads_quickly(self):
        # Mounted without touching index.json, so that the first listing makes its size.
        mnt = self.new_dir("mnt")
        log = open(self.scratch / "vocab.log", "w+b")
        proc = subprocess.Popen([str(CKPTFS), "-f", str(self.path("vocab150k.gguf")), str(mnt)],
                                stdout=log, stderr=log, start_new_session=True)
        self.addCleanup(log.close)
        self.addCleanup(self._stop, proc, mnt, open(self.scratch / "vocab-stop.log", "w+b"))
        self.assertIsNone(wait_for_mount(mnt, proc, 30))
        index_path = views_dir(mnt) / "index.json"
        start = time.monotonic()
        listing = os.listdir(views_dir(mnt))
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
        self.check([{"mount": mnt, "files": [self.path("vocab150k.gguf")]}])

    def test_corpus_gguf_files(self):
        corpus = sorted((CORPUS / "formats").glob("*.gguf"))
        if not corpus:
            self.skipTest(f"no GGUF files in {CORPUS / 'formats'}")
        self.assertEqual(len(corpus), 4, corpus)
        specs = []
        for path in corpus:
            copy = self.path(path.name)
            shutil.copy(path, copy)
            mnt = self.mount(copy)
            index = json.loads((views_dir(mnt) / "index.json").read_text())
            if path.read_bytes()[4:8] == b"\x01\0\0\0":
                # gguf-py reads versions 2 and 3 only: GGUF v1 is checked against a reader of the
                # format's description.
                want = read_gguf_v1_metadata(path)
                self.assertEqual(index["metadata_types"], {k: t for k, (t, _) in want.items()})
                self.assertEqual(index["metadata"], {k: v for k, (_, v) in want.items()})
                self.assertEqual(index["entries"], [])
                continue
            specs.append({"mount": mnt, "files": [copy]})
        self.assertEqual(sorted(r["tensors"] for r in self.check(specs)), [0, 0, 48])

    def test_random_blocks_every_type_and_path(self):
        if not TOOL.is_file():
            self.fail(f"missing {TOOL} (build the ckptfs_dequantize_tool target)")
        types = run([TOOL, "formats"]).stdout.decode().split()
        paths = run([TOOL, "paths"]).stdout.decode().split()
        self.assertEqual(len(types), 23, types)
        d = self.new_dir("random")
        self.call("gguf_fixtures.random_blocks", inside(d), types)
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
                                  f"{want[first:first + 4].hex()} ({self.versions})")


def read_gguf_v1_metadata(path):
    """{key: (type, value)} of a GGUF version 1 file's metadata, read from the format's
    description (32-bit counts and lengths), for the corpus file gguf-py does not read."""
    import math
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

    def shortest_float32(v):
        """The float32 `v` as the shortest decimal that reads back as it, as JSON gives it."""
        if not math.isfinite(v):
            return v
        for digits in range(1, 10):
            text = f"{v:.{digits}g}"
            if struct.unpack("<f", struct.pack("<f", float(text)))[0] == v:
                return float(text)
        return v

    def value(t):
        if t == 8:
            return string()
        v = take(formats[t])
        return shortest_float32(v) if t == 6 else v

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


if __name__ == "__main__":
    unittest.main()
