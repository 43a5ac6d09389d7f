# SPDX-License-Identifier: MIT
"""-o names=hf against transformers' own GGUF loader (the interop root's transformers 5): tiny
random models of 15 architectures saved by save_pretrained, converted by llama.cpp's
convert_hf_to_gguf.py (F16, a split set) and quantized by llama-quantize (Q8_0, Q4_K_M, Q5_K_M),
mounted with -o names=hf; from_pretrained(MNT/.ckptfs) must give the model
from_pretrained(DIR, gguf_file=F) gives: its class, its config, its state dict bit for bit and
its logits (tests/interop/root/gguf_hf_checks.py). Also: -o dtype=bfloat16 against dtype=
torch.bfloat16, the tokenizer files (AutoTokenizer.from_pretrained(MNT/.ckptfs) against
AutoTokenizer.from_pretrained(DIR, gguf_file=F)), `ckptfs pack --names hf`, safetensors'
load_model and accelerate's
load_checkpoint_and_dispatch of the export, an architecture the loader does not load, and the
README's recipe "Load a GGUF into transformers" run as written (its blocks marked
`<!-- interop-test: gguf -->`: sh blocks here, python blocks in the root).

Run by ctest as `/usr/bin/python3 -m unittest -v test_interop_gguf_hf` (label interop).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "integration"))

from fixtures import require  # noqa: E402

require("fuse", "interop")  # else the module exits 77: skipped, with the reason

from fixtures import CKPTFS, REPO  # noqa: E402
from ckptfs_mounts import is_mounted, unmount  # noqa: E402
from interop_support import InteropCase, inside, views_dir  # noqa: E402

RECIPE = re.compile(r"^<!-- interop-test: gguf -->\n```(\w+)\n(.*?)^```$", re.M | re.S)


def recipe_blocks():
    """The README's blocks of the recipe "Load a GGUF into transformers": [(lang, code)]."""
    return RECIPE.findall((REPO / "README.md").read_text())


class GgufHfTests(InteropCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.out = cls.new_dir("fixtures")
        cls.manifest = cls.call("gguf_hf_fixtures.write", inside(cls.out), timeout=1200)
        cls.versions = cls.call("versions.tools")

    def compare(self, name, reference=None, options=(), dtype=None):
        """Mounts OUT/NAME with -o names=hf (and OPTIONS); its views against the loader's model
        of OUT/REFERENCE (NAME). Returns the report and the mount."""
        mnt = self.mount(self.out / name, "-o", "names=hf", *options)
        report = self.call("gguf_hf_checks.compare", inside(self.out), reference or name,
                           inside(views_dir(mnt)), dtype)
        self.assertEqual(report["problems"], [], f"{name} against {self.versions}")
        return report, mnt

    def test_fixtures_were_written(self):
        self.assertEqual(self.manifest["skipped"], {})

    def test_architectures(self):
        # Each architecture's F16 file: the loader's names, processors and config.
        self.assertGreaterEqual(len(self.manifest["f16"]), 15, self.manifest["skipped"])
        for arch, name in self.manifest["f16"].items():
            with self.subTest(arch):
                report, _ = self.compare(name)
                self.assertEqual(report["dtype"], "torch.float32")

    def test_tokenizers(self):
        # Where the loader makes a tokenizer (a BPE vocabulary), the mount's files make the same;
        # where it fails (Gemma's converter on a BPE vocabulary; LFM2), the mount has none and a
        # note says why.
        made = 0
        for arch, name in self.manifest["f16"].items():
            with self.subTest(arch):
                mnt = self.mount(self.out / name, "-o", "names=hf")
                report = self.call("gguf_hf_checks.tokenizers", inside(self.out), name,
                                   inside(views_dir(mnt)))
                files = {p.name for p in views_dir(mnt).iterdir()}
                index = json.loads((views_dir(mnt) / "index.json").read_text())
                if report["loader"]:
                    self.assertNotIn("tokenizer.json", files, report["loader"])
                    self.assertTrue(any("no tokenizer files" in n
                                        for n in index.get("notes", [])), index.get("notes"))
                    continue
                self.assertTrue({"tokenizer.json", "tokenizer_config.json"} <= files, files)
                self.assertEqual(report["problems"], [], f"{name} against {self.versions}")
                made += 1
        self.assertGreaterEqual(made, 12)

    def test_quantized(self):
        # Dequantized, and un-permuted (llama), w - 1 (gemma3), transposed (gpt2) or merged
        # (qwen3moe) on read.
        count = 0
        for arch, files in self.manifest["quantized"].items():
            for qtype, name in files.items():
                with self.subTest(arch, qtype=qtype):
                    self.compare(name)
                    count += 1
        self.assertEqual(count, 10)

    def test_split_set(self):
        # The loader reads one file of a set: the reference is the same model unsplit.
        self.assertEqual(len(self.manifest["split"]), 3)
        self.compare(self.manifest["split"][1], self.manifest["f16"]["llama"])

    def test_dtype(self):
        report, mnt = self.compare(self.manifest["quantized"]["llama"]["Q4_K_M"],
                                   options=("-o", "dtype=bfloat16"), dtype="bfloat16")
        self.assertEqual(report["dtype"], "torch.bfloat16")
        config = json.loads((views_dir(mnt) / "config.json").read_text())
        self.assertEqual(config["dtype"], "bfloat16")

    def test_index_json_says_each_tensors_origin(self):
        mnt = self.mount(self.out / self.manifest["f16"]["llama"], "-o", "names=hf")
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        entries = {e["key"]: e for e in index["entries"]}
        q = entries["model.layers.1.self_attn.q_proj.weight"]
        self.assertEqual(q["original_key"], "blk.1.attn_q.weight")
        self.assertIn("un-permuted", q["transform"])
        self.assertEqual(entries["model.norm.weight"]["original_key"], "output_norm.weight")
        self.assertIsNone(entries["model.norm.weight"]["transform"])
        meta = json.loads((mnt / "model.layers.1.self_attn.q_proj.weight" / "meta.json")
                          .read_text())
        self.assertEqual(meta["original_key"], "blk.1.attn_q.weight")

    def test_pack_names_hf(self):
        name = self.manifest["quantized"]["gemma3"]["Q4_K_M"]
        out = self.new_dir("pack") / "model.safetensors"
        r = subprocess.run([str(CKPTFS), "pack", "--names", "hf", "--quiet",
                            str(self.out / name), str(out)], capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        mnt = self.mount(self.out / name, "-o", "names=hf")
        # pack and the mount share the naming: the same bytes.
        self.assertEqual(out.read_bytes(), (views_dir(mnt) / "model.safetensors").read_bytes())

    def other_client(self, check):
        """gguf_hf_checks.CHECK of the names=hf export of llama's and gpt2's Q8_0 files (issue
        30, item 4)."""
        for arch in ("llama", "gpt2"):
            with self.subTest(arch):
                name = self.manifest["quantized"][arch]["Q8_0"]
                mnt = self.mount(self.out / name, "-o", "names=hf")
                report = self.call(f"gguf_hf_checks.{check}", inside(self.out), name,
                                   inside(views_dir(mnt)))
                self.assertEqual(report["problems"], [], f"{name} against {self.versions}")

    def test_safetensors_load_model(self):
        self.other_client("load_model")

    def test_accelerate_load_checkpoint_and_dispatch(self):
        self.other_client("load_checkpoint_and_dispatch")

    def test_readme_recipe(self):
        blocks = recipe_blocks()
        self.assertEqual([lang for lang, _ in blocks], ["sh", "python", "sh"])
        work = self.new_dir("recipe")
        shutil.copy(self.out / self.manifest["quantized"]["llama"]["Q4_K_M"], work / "model.gguf")
        self.addCleanup(lambda: is_mounted(work / "mnt") and unmount(work / "mnt"))
        env = {**os.environ, "PATH": f"{CKPTFS.parent}:{os.environ['PATH']}"}
        for lang, code in blocks:
            if lang == "sh":
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=work, env=env,
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(r.returncode, 0, f"{code}\n{r.stderr}")
            else:
                # The block's `model` against the loader's model of model.gguf.
                report = self.call("gguf_hf_checks.run_recipe", code, inside(work), "model.gguf")
                self.assertEqual(report["problems"], [], f"{code}\nagainst {self.versions}")
        self.assertFalse(is_mounted(work / "mnt"))
        self.assertGreater((work / "model.safetensors").stat().st_size, 0)

    def test_unknown_architecture_keeps_llama_cpp_names(self):
        path = self.out / self.manifest["unknown"]
        r = subprocess.run([str(CKPTFS), "inspect", "-o", "names=hf", str(path)],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("rwkv7", lines[0])
        self.assertIn("keep llama.cpp's names", lines[0])
        mnt = self.mount(path, "-o", "names=hf")
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertEqual([e["key"] for e in index["entries"]],
                         ["token_embd.weight", "blk.0.time_mix_w0.weight"])
        self.assertEqual(index["notes"], [lines[0].split(": ", 2)[2]])
        self.assertFalse((views_dir(mnt) / "config.json").exists())


if __name__ == "__main__":
    unittest.main()
