# SPDX-License-Identifier: MIT
"""The Python package (python/ckptfs, docs/PYTHON.md) with the interop root's torch 2.x and
numpy 2, on mounts made outside the root by the binary under test:

  - torch 2.x checkpoints of every dtype torch saves (bfloat16, float8, uint16-64, complex32...),
    views, a training checkpoint, the legacy stream, and a safetensors file of every dtype
    safetensors saves: ckptfs.open of the mountpoint gives each tensor equal, bit for bit, to
    torch.load(tensor.pt) (weights_only, mmap=True too) and np.load(tensor.npy), each value to
    torch.load's; their plain tensors are read from the files themselves (path_of "file");
  - ckptfs.load_into of transformers models (GPT-2, its head tied to the embedding and left out
    of its file; a sharded Llama on the meta device; GPT-2 through -o dtype=bfloat16) to the
    same state dict and logits as from_pretrained.

The fixtures are written by the root's torch and transformers into /dev/shm, which the root
sees at the same path (scripts/interop-run binds /dev): the mount publishes the files' paths as
it opened them, and the package in the root checks them there, as it would on any machine.
The checks are tests/interop/root/python_checks.py. Run by ctest as
`/usr/bin/python3 -m unittest -v test_interop_python` (label interop).
"""

import shutil
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from interop_support import InteropCase, inside  # noqa: E402

SHARED = Path("/dev/shm")  # the same path, and file, inside the root and out


class PythonPackageTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.shm = Path(tempfile.mkdtemp(prefix="ckptfs-interop-python-", dir=SHARED))
        cls.addClassCleanup(shutil.rmtree, cls.shm, ignore_errors=True)
        (cls.shm / "models").mkdir()
        cls.torch_files = cls.call("torch_fixtures.write", str(cls.shm))
        cls.safetensors = cls.call("hf_fixtures.write_safetensors", str(cls.shm))
        cls.models = cls.call("hf_fixtures.write_models", str(cls.shm / "models"))

    def check(self, path, file_expected=True):
        mnt = self.mount(path)
        report = self.call("python_checks.check", str(path), inside(mnt))
        self.assertEqual(report["problems"], [], f"{path} (torch {report['torch']}, "
                                                 f"numpy {report['numpy']})")
        self.assertGreater(report["tensors"], 0)
        if file_expected:
            self.assertGreater(report["paths"]["file"], 0, report)
        return report

    def test_torch_checkpoints(self):
        for name in ("dtypes", "views", "training", "legacy"):
            with self.subTest(name):
                report = self.check(self.torch_files[name]["path"])
                if name == "training":
                    self.assertGreater(report["values"], 3, report)

    def test_safetensors_of_every_dtype(self):
        report = self.check(self.safetensors["path"])
        self.assertEqual(report["paths"]["mount"], 0, report)

    def test_load_into_transformers_models(self):
        for name, options, meta, dtype in (("gpt2", [], False, None),
                                           ("llama_sharded", [], True, None),
                                           ("gpt2_bin", [], True, None),
                                           ("gpt2", ["-o", "dtype=bfloat16"], False, "bfloat16")):
            with self.subTest(name, options=options, meta=meta):
                model = self.models[name]
                mnt = self.mount(model["path"], *options)
                report = self.call("python_checks.load_into_model", model["path"], inside(mnt),
                                   meta, dtype)
                self.assertEqual(report["problems"], [], report)
                self.assertTrue(report["logits_equal"], report)


if __name__ == "__main__":
    unittest.main()
