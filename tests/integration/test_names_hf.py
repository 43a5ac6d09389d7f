# SPDX-License-Identifier: MIT
"""Integration tests of -o names=hf through the command line, on a tiny GGUF file written here
from the format's description: the mount's keys and files, each tensor's values (Q and K rows
un-permuted as the definition says: computed here with numpy), .ckptfs/config.json and
index.json's notes, `inspect -o names=hf`, `pack --names hf` read back by torch.load, the one line
said for a file that is no GGUF, the fsname, and the usage errors. Whether the names, values and
config are transformers' own is tests/interop/test_interop_gguf_hf.py's to say, against
transformers itself.

Run by ctest as `/usr/bin/python3 -m unittest -v test_names_hf` (see fixtures.py).
"""

import json
import struct
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from ckptfs_mounts import mount_of  # noqa: E402
from fixtures import CKPTFS, views_dir  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402

HEADS, KV_HEADS, HIDDEN = 2, 1, 4


def gguf_bytes(metadata, tensors):
    """A GGUF v3 file: metadata [(key, "u32"|"f32"|"str", value)], tensors [(name, array)]
    (float32 or float16, C order), each at a multiple of 32 bytes."""
    def string(s):
        b = s.encode()
        return struct.pack("<Q", len(b)) + b
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata))
    for key, kind, value in metadata:
        out += string(key)
        if kind == "u32":
            out += struct.pack("<II", 4, value)
        elif kind == "f32":
            out += struct.pack("<If", 6, value)
        else:
            out += struct.pack("<I", 8) + string(value)
    offset, data = 0, b""
    for name, a in tensors:
        ggml_type = {np.float32: 0, np.float16: 1}[a.dtype.type]
        out += string(name) + struct.pack("<I", a.ndim)
        out += b"".join(struct.pack("<Q", n) for n in reversed(a.shape))  # ne[0] innermost
        out += struct.pack("<IQ", ggml_type, offset)
        raw = a.tobytes()
        data += raw + b"\0" * (-len(raw) % 32)
        offset += len(raw) + (-len(raw) % 32)
    return out + b"\0" * (-len(out) % 32) + data


def unpermuted(rows, heads):
    """convert_hf_to_gguf.py's RoPE permutation undone: row h*2d + j*d + i is the file's row
    h*2d + 2i + j (numpy's reshape and swapaxes, as the definition writes it)."""
    dim = rows.shape[0] // heads // 2
    return rows.reshape(heads, dim, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


class NamesHfTests(MountTestCase):
    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(30)
        self.q = rng.standard_normal((8, HIDDEN)).astype(np.float32)
        self.k = rng.standard_normal((4, HIDDEN)).astype(np.float16)
        self.embed = rng.standard_normal((6, HIDDEN)).astype(np.float32)
        self.path = self.tmp / "tiny.gguf"
        self.path.write_bytes(gguf_bytes(
            [("general.architecture", "str", "llama"), ("general.name", "str", "tiny"),
             ("llama.block_count", "u32", 1), ("llama.embedding_length", "u32", HIDDEN),
             ("llama.attention.head_count", "u32", HEADS),
             ("llama.attention.head_count_kv", "u32", KV_HEADS),
             ("llama.attention.layer_norm_rms_epsilon", "f32", 1e-5)],
            [("token_embd.weight", self.embed), ("blk.0.attn_q.weight", self.q),
             ("blk.0.attn_k.weight", self.k),
             ("rope_freqs.weight", np.ones(2, np.float32))]))

    def test_mount(self):
        mnt, proc = self.mount(self.path, "-o", "names=hf")
        self.assertEqual(sorted(p.name for p in mnt.iterdir() if p.name != ".ckptfs"),
                         ["model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight",
                          "model.layers.0.self_attn.q_proj.weight"])
        q = np.load(mnt / "model.layers.0.self_attn.q_proj.weight" / "tensor.npy")
        self.assertTrue(np.array_equal(q, unpermuted(self.q, HEADS)))
        k = np.load(mnt / "model.layers.0.self_attn.k_proj.weight" / "tensor.npy")
        self.assertEqual(k.dtype, np.float32)  # the loader gives every tensor as float32
        self.assertTrue(np.array_equal(k, unpermuted(self.k.astype(np.float32), KV_HEADS)))
        meta = json.loads((mnt / "model.layers.0.self_attn.q_proj.weight" / "meta.json")
                          .read_text())
        self.assertEqual(meta["original_key"], "blk.0.attn_q.weight")
        self.assertIn("un-permuted", meta["transform"])
        config = json.loads((views_dir(mnt) / "config.json").read_text())
        self.assertEqual(config["model_type"], "llama")
        self.assertEqual(config["num_key_value_heads"], KV_HEADS)
        self.assertEqual(config["rms_norm_eps"], float(np.float32(1e-5)))
        self.assertTrue(config["tie_word_embeddings"])  # no output.weight
        self.assertEqual(config["dtype"], "float32")
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        self.assertIn('"rope_freqs.weight"', index["notes"][0])
        self.assertIn("[names=hf]", mount_of(mnt).source)
        # The left-out tensor is said on stderr too, before the mount is ready.
        self.assertIn("left out 1 tensor transformers' GGUF loader does not load",
                      self.output(proc))
        self.unmount(mnt, proc)

    def test_inspect_and_pack(self):
        r = run([CKPTFS, "inspect", "--json", "-o", "names=hf", self.path])
        self.assertEqual(r.returncode, 0, r.stderr)
        keys = [e["key"] for e in json.loads(r.stdout)["entries"]]
        self.assertIn("model.layers.0.self_attn.q_proj.weight", keys)
        out = self.tmp / "tiny.pth"
        r = run([CKPTFS, "pack", "--names", "hf", "--quiet", self.path, out])
        self.assertEqual(r.returncode, 0, r.stderr)
        state = torch.load(out)
        self.assertEqual(list(state), keys)
        self.assertTrue(torch.equal(state["model.layers.0.self_attn.q_proj.weight"],
                                    torch.from_numpy(unpermuted(self.q, HEADS))))
        self.assertEqual(state["model.layers.0.self_attn.k_proj.weight"].dtype, torch.float32)

    def test_a_file_that_is_no_gguf_keeps_its_keys(self):
        pth = self.tmp / "w.pth"
        torch.save({"w": torch.zeros(2)}, pth)
        r = run([CKPTFS, "inspect", "-o", "names=hf", pth])
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stderr.decode().splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertIn("names=hf names a GGUF file's tensors as transformers does: a zip model "
                      "keeps its keys", lines[0])

    def test_usage_errors(self):
        for args, say in (
                (["-o", "names=transformers", self.path, self.tmp], "invalid names 'transformers'"),
                (["inspect", "-o", "names=x", self.path], "invalid names"),
                (["pack", "--names", "x", self.path, self.tmp / "o.pth"], "invalid --names"),
                (["pack", self.path, self.tmp / "o.pth", "--names"], "--names needs")):
            with self.subTest(args=args):
                r = run([CKPTFS, *args])
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(say, r.stderr.decode())


if __name__ == "__main__":
    unittest.main()
