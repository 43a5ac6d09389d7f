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
from test_mount import MountTestCase, run  # noqa: E402

TOOL = Path(os.environ.get("CKPTFS_DEQUANTIZE_TOOL",
                           REPO / "build" / "tests" / "ckptfs_dequantize_tool")).absolute()
SCRIPTS = ["gguf_make.py", "gguf_check.py", "gguf_random.py"]


def views_dir(mnt):
    """Where a mount's whole-model views (index.json, model.safetensors) are: the root today;
    MNT/.ckptfs/ once the views move there."""
    return Path(mnt)


class Fixtures:
    """The files gguf_make.py writes in the root, made once for the module."""
    dir = None
    manifest = None

    @classmethod
    def make(cls):
        if cls.dir is None:
            cls.dir = sid_root.scratch_dir("ckptfs-test-gguf-")
            for name in SCRIPTS:
                shutil.copy(HERE / name, cls.dir / name)
            sid_root.run(["python3", sid_root.inside(cls.dir / "gguf_make.py"),
                          sid_root.inside(cls.dir / "out")], timeout=900)
            cls.manifest = json.loads((cls.dir / "out" / "manifest.json").read_text())
        return cls.dir

    @classmethod
    def out(cls, name=""):
        return cls.make() / "out" / name


def tearDownModule():
    if Fixtures.dir is not None:
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
        def inside(p):
            return sid_root.inside(p) if p else p
        doc = [{**s, "mount": inside(s["mount"]), "views": inside(s.get("views")),
                "files": [inside(f) for f in s["files"]]} for s in specs]
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
