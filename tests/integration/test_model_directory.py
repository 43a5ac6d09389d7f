# SPDX-License-Identifier: MIT
"""A Hugging Face model directory stays a model directory: mounting it (or its weights file, or
its sharded set's index, or the same in a hub cache snapshot whose files are links to its
blobs) serves its config and tokenizer files in .ckptfs/ beside the export, byte for byte,
read-only; never its weights twice nor a file that is not the model's; config.json's dtype set
in place under -o dtype; a file that leads out of the directory, is not a regular file or is
over the limit left out with a note. (transformers' from_pretrained on the mount:
test_interop_transformers in the interop root.)

Run by ctest as `/usr/bin/python3 -m unittest -v test_model_directory`.
"""

import errno
import json
import os
import stat
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from fixtures import require  # noqa: E402

require("fuse", "torch")

from ckptfs_mounts import views_dir  # noqa: E402
from ckptfs_safetensors import write_index, write_safetensors  # noqa: E402
from test_mount import MountTestCase  # noqa: E402

# A config as transformers writes it: indented, keys in its order, a nested sub-config.
CONFIG = ('{\n  "architectures": [\n    "GPT2LMHeadModel"\n  ],\n  "n_embd": 8,\n'
          '  "text_config": {\n    "torch_dtype": "float32"\n  },\n'
          '  "torch_dtype": "float32",\n  "transformers_version": "4.57.0"\n}\n')
MODEL_FILES = {
    "config.json": CONFIG.encode(),
    "generation_config.json": b'{"bos_token_id": 0}\n',
    "tokenizer.json": '{"model": {"vocab": {"\u00e9": 0}}}'.encode(),
    "tokenizer_config.json": b'{"model_max_length": 8}',
    "special_tokens_map.json": b"{}",
    "vocab.json": b'{"a": 0}',
    "merges.txt": b"#version: 0.2\na b\n",
    "tokenizer.model": bytes(range(256)),
    "chat_template.jinja": b"{{ messages }}",
    "preprocessor_config.json": b'{"size": 4}',
}
NOT_THE_MODELS = {"README.md": b"card", "LICENSE": b"MIT", "modeling_x.py": b"import os",
                  "trainer_state.json": b"{}", "notes.json": b"{}"}


def weights(path, names):
    """A float32 safetensors file of tensors `names` (4 elements each)."""
    write_safetensors(path, [(n, "F32", [4], bytes(16)) for n in names])


class ModelDirectoryTests(MountTestCase):
    def model_dir(self, root=None):
        d = root or self.new_dir("model")
        for name, data in {**MODEL_FILES, **NOT_THE_MODELS}.items():
            (d / name).write_bytes(data)
        return d

    def served(self, mnt):
        views = views_dir(mnt)
        names = set(os.listdir(views)) & (set(MODEL_FILES) | set(NOT_THE_MODELS))
        return {n: (views / n).read_bytes() for n in names}

    def assert_model_files(self, mnt, config=CONFIG.encode()):
        self.assertEqual(self.served(mnt), {**MODEL_FILES, "config.json": config})
        views = views_dir(mnt)
        for name in MODEL_FILES:
            self.assertTrue(stat.S_ISREG((views / name).stat().st_mode), name)
        with self.assertRaises(OSError) as refused:  # read-only: EROFS, whatever the modes say
            (views / "config.json").open("r+b")
        self.assertEqual(refused.exception.errno, errno.EROFS)

    def test_directory_single_file_and_its_file_named(self):
        d = self.model_dir()
        weights(d / "model.safetensors", ["wte.weight", "h.0.w"])
        for what in (d, d / "model.safetensors"):
            with self.subTest(named=what.name):
                mnt, proc = self.mount(what)
                self.assert_model_files(mnt)
                listing = os.listdir(views_dir(mnt))
                self.assertEqual(sorted(n for n in listing if n.endswith(".safetensors")),
                                 ["model.safetensors"])
                self.unmount(mnt, proc)

    def test_sharded_set_with_shard_size(self):
        d = self.model_dir()
        weights(d / "model-00001-of-00002.safetensors", ["a"])
        weights(d / "model-00002-of-00002.safetensors", ["b"])
        write_index(d / "model.safetensors.index.json",
                    {"a": "model-00001-of-00002.safetensors",
                     "b": "model-00002-of-00002.safetensors"}, 32)
        for what, options in ((d, ()), (d / "model.safetensors.index.json", ("-o", "shard_size=16"))):
            with self.subTest(named=what.name, options=options):
                mnt, proc = self.mount(what, *options)
                self.assert_model_files(mnt)
                if options:
                    index = json.loads((views_dir(mnt) / "model.safetensors.index.json")
                                       .read_text())
                    self.assertEqual(len(set(index["weight_map"].values())), 2)
                self.unmount(mnt, proc)

    def test_dtype_sets_configs_dtype_in_place(self):
        d = self.model_dir()
        weights(d / "model.safetensors", ["w"])
        mnt, proc = self.mount(d, "-o", "dtype=bfloat16")
        want = CONFIG.replace('"float32"', '"bfloat16"').encode()
        self.assert_model_files(mnt, config=want)
        self.unmount(mnt, proc)

    def test_hub_cache_snapshot(self):
        repo = self.new_dir("hub") / "models--org--tiny"
        blobs, snapshot = repo / "blobs", repo / "snapshots" / "0123456789abcdef"
        for p in (blobs, snapshot, repo / "refs"):
            p.mkdir(parents=True)
        (repo / "refs" / "main").write_text("0123456789abcdef")
        files = dict(MODEL_FILES)
        weights(blobs / "shaw", ["w"])
        (snapshot / "model.safetensors").symlink_to("../../blobs/shaw")
        for i, (name, data) in enumerate(files.items()):
            (blobs / f"sha{i}").write_bytes(data)
            (snapshot / name).symlink_to(f"../../blobs/sha{i}")
        for what in (snapshot, snapshot / "model.safetensors"):
            with self.subTest(named=what.name):
                mnt, proc = self.mount(what)
                self.assert_model_files(mnt)
                self.unmount(mnt, proc)

    def test_left_out_files_are_noted(self):
        d = self.new_dir("model")
        weights(d / "model.safetensors", ["w"])
        (d / "config.json").write_bytes(CONFIG.encode())
        secret = self.tmp / "secret.json"
        secret.write_text('{"secret": 1}')
        (d / "tokenizer.json").symlink_to(secret)           # leads out: refused
        (d / "vocab.json").symlink_to("../" + secret.name)  # the same by ".."
        os.mkfifo(d / "merges.txt")                          # not a regular file
        (d / "tokenizer_config.json").mkdir()
        with open(d / "tokenizer.model", "wb") as f:         # over the 64 MiB of one file
            f.truncate((64 << 20) + 1)
        mnt, proc = self.mount(d)
        views = views_dir(mnt)
        self.assertEqual(self.served(mnt), {"config.json": CONFIG.encode()})
        notes = json.loads((views / "index.json").read_text()).get("notes", [])
        for name, why in (("tokenizer.json", "leads out of the directory"),
                          ("vocab.json", "leads out of the directory"),
                          ("merges.txt", "not a regular file"),
                          ("tokenizer_config.json", "is a directory"),
                          ("tokenizer.model", "over the limit")):
            with self.subTest(name=name):
                self.assertTrue(any(f'"{name}"' in n and why in n for n in notes), notes)
        self.unmount(mnt, proc)

    def test_a_file_among_others_takes_no_files(self):
        # Two checkpoints, the one named not transformers' name: the directory's config is not
        # this file's.
        d = self.model_dir()
        weights(d / "a.safetensors", ["w"])
        weights(d / "b.safetensors", ["v"])
        mnt, proc = self.mount(d / "a.safetensors")
        self.assertEqual(self.served(mnt), {})
        self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
