"""-o layout=rfc: the layout of the transformers RFC on split checkpoints (transformers#13548):
one file per key, named by the key, that torch.load reads on its own, and map.pt, the list of
keys in their order. Checked with a loader written from the RFC's text alone, on every fixture,
against torch.load of the source; and on a copy of the mount, as a user would rsync it."""

import collections
import errno
import json
import os
import shutil
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import (FIXTURE_NAMES, NOT_TORCH_LOADABLE, TORCHSCRIPT_FIXTURES,  # noqa: E402
                      fixture_path, require)

require("fuse", "torch")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import ckptfs_reference as ref  # noqa: E402
from fixtures import CKPTFS  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402


def rfc_load(directory):
    """The RFC's loader, from its text: map.pt holds the keys in order; each key's tensor is the
    file named by the key, with .pt, which torch.load reads on its own."""
    keys = torch.load(os.path.join(directory, "map.pt"))
    return collections.OrderedDict(
        (k, torch.load(os.path.join(directory, f"{k}.pt"), map_location="cpu")) for k in keys)


def value_file_expected(j):
    """Whether the RFC layout has a file for a value whose ckptfs JSON is `j` (a plain value:
    value.json's rule reads it back), and the value it says (ref.value_from_json)."""
    try:
        return True, ref.value_from_json(j)
    except ref.NotPlain:
        return False, None


def torch_has(dtype):
    """Whether the installed torch loads tensors of a dtype: 1.13 lacks float8, uint16... and
    has complex32 without a storage type (those files need _rebuild_tensor_v3, torch >= 2.1)."""
    d = getattr(torch, dtype, None)
    if not isinstance(d, torch.dtype):
        return False
    return (hasattr(torch._utils, "_rebuild_tensor_v3")
            or d in torch.storage._dtype_to_storage_type_map())


def source_entries(name, path):
    """[(key, object)] of a fixture as torch reads it, in ckptfs's entry order; [] when torch
    cannot load it."""
    if name in TORCHSCRIPT_FIXTURES:
        return [(key, t) for key, t, _, _ in ref.torchscript_flatten(path)]
    if name in NOT_TORCH_LOADABLE:
        return []
    return ref.flatten(ref.torch_load(path))


class RfcLayoutTests(MountTestCase):
    def inspect(self, path):
        r = run([CKPTFS, "inspect", "--json", path])
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return json.loads(r.stdout)

    def check_mount(self, name, mnt, index, described):
        """Every entry of the fixture against the mount: files, names, map.pt, contents."""
        path = fixture_path(name)
        entries = index["entries"]
        flat = source_entries(name, path)
        self.assertTrue(not flat or len(flat) == len(entries), name)
        with_files = [e for e in entries if e["path"] is not None]
        # The root: map.pt (where the RFC's loaders look for it, beside the files), one file per
        # entry that has one, and .ckptfs, which holds index.json; nothing else.
        self.assertEqual(sorted(os.listdir(mnt)),
                         sorted([VIEWS_FOLDER, "map.pt"] + [e["path"] for e in with_files]))
        self.assertEqual(os.listdir(views_dir(mnt)), ["index.json"])
        # The names: the naming rule within 252 bytes among the keys with a file (map.pt's), then
        # ".pt".
        names = ref.rfc_file_names([ref.text_of_json(e["key"]) for e in with_files])
        for e, want_name in zip(with_files, names):
            self.assertEqual(e["path"], want_name, e["key"])
            self.assertLessEqual(len(os.fsencode(e["path"])), 255)
        # map.pt: the keys of the entries with a file, in order, as a list of str; torch 1.13's
        # weights_only loader reads it.
        keys = torch.load(mnt / "map.pt", weights_only=True)
        self.assertIs(type(keys), list)
        self.assertEqual(keys, [ref.text_of_json(e["key"]) for e in with_files])
        for i, e in enumerate(entries):
            with self.subTest(fixture=name, key=e["key"]):
                if e["kind"] == "tensor":
                    # A tensor has a file unless torch cannot hold it alone; a broken one's
                    # fails to read (EIO).
                    if e["nbytes"] is None and e["path"] is not None:
                        with self.assertRaises(OSError) as caught:
                            (mnt / e["path"]).read_bytes()
                        self.assertEqual(caught.exception.errno, errno.EIO)
                        continue
                    if e["nbytes"] is None:
                        self.assertIsNone(e["path"])
                        continue
                    self.assertIsNotNone(e["path"], "a readable tensor has its file")
                    if not torch_has(e["dtype"]):
                        continue  # a newer torch's dtype: test_views checks its archive
                    t = ref.load_tensor_file(mnt / e["path"])
                    self.assertEqual(list(t.shape), e["shape"])
                    self.assertEqual(ref.dtype_name(t.dtype), e["dtype"])
                    if flat and ref.is_torch_tensor(flat[i][1]):
                        want = flat[i][1]
                        self.assertEqual(t.dtype, want.dtype)
                        # <key>.pt is little-endian: its values right in any torch, their
                        # bytes in the checkpoint's order the checkpoint's bytes.
                        order = described[i]["byteorder"]
                        self.assertEqual(ref.tensor_bytes(t, order),
                                         ref.checkpoint_bytes(want, order))
                        self.assertEqual(t.requires_grad, want.requires_grad)
                else:
                    has_file, want = value_file_expected(described[i]["value"])
                    if not has_file:
                        self.assertIsNone(e["path"], "a value JSON only describes has no file")
                        continue
                    self.assertIsNotNone(e["path"])
                    got = torch.load(mnt / e["path"])
                    self.assertTrue(ref.same_value(got, want, types=False),
                                    f"{ref.show(got)} != {ref.show(want)}")
                    # The file holds what the checkpoint holds, types and all (a tuple, an int
                    # key, an OrderedDict, a numpy scalar).
                    if flat:
                        self.assertTrue(ref.same_value(got, flat[i][1]),
                                        f"{ref.show(got)} != {ref.show(flat[i][1])}")
        return with_files

    def test_every_fixture(self):
        loaded_by_the_rfc_loader = []
        for name in FIXTURE_NAMES:
            path = fixture_path(name)
            described = self.inspect(path)["entries"]
            mnt, proc = self.mount(path, "-o", "layout=rfc")
            try:
                index = json.loads((views_dir(mnt) / "index.json").read_bytes())
                self.assertEqual(len(index["entries"]), len(described))
                with_files = self.check_mount(name, mnt, index, described)
                # The RFC's own loader, where every key is a file name as it is.
                if (with_files and all(e["path"] == e["key"] + ".pt" for e in with_files)
                        and all(torch_has(e["dtype"]) for e in with_files if e["dtype"])):
                    state = rfc_load(mnt)
                    self.assertEqual(list(state), [e["key"] for e in with_files])
                    loaded_by_the_rfc_loader.append(name)
            finally:
                self.unmount(mnt, proc)
        for name in ("convnet", "dtypes", "views", "training", "params", "bigendian", "legacy"):
            self.assertIn(name, loaded_by_the_rfc_loader)

    def test_a_copy_loads_as_the_mount(self):
        """cp -r of the mount is an RFC directory on disk: the loader reads it the same."""
        path = fixture_path("training")
        mnt, proc = self.mount(path, "-o", "layout=rfc")
        try:
            copy = self.tmp / "copy"
            shutil.copytree(mnt, copy)
            from_mount = rfc_load(mnt)
        finally:
            self.unmount(mnt, proc)
        from_copy = rfc_load(copy)
        self.assertEqual(list(from_copy), list(from_mount))
        flat = dict(ref.flatten(ref.torch_load(path)))
        for key, v in from_copy.items():
            if isinstance(v, torch.Tensor):
                self.assertTrue(torch.equal(v, from_mount[key]), key)
                self.assertEqual(ref.tensor_bytes(v), ref.tensor_bytes(flat[key]), key)
            else:
                self.assertTrue(ref.same_value(v, from_mount[key]), key)
                self.assertTrue(ref.same_value(v, flat[key]), key)

    def test_names_that_need_the_rule(self):
        """The collisions and keys fixtures: "map" is %map.pt (map.pt is the keys), keys past
        252 bytes are cut so that the name with .pt fits 255, keys with one text get %#N."""
        for name in ("collisions", "keys"):
            mnt, proc = self.mount(fixture_path(name), "-o", "layout=rfc")
            try:
                index = json.loads((views_dir(mnt) / "index.json").read_bytes())
                paths = {e["key"]: e["path"] for e in index["entries"]}
                if name == "collisions":
                    self.assertEqual(paths["map"], "%map.pt")
                    self.assertEqual(torch.load(mnt / "%map.pt").shape, (1,))
                    self.assertIn("%map.pt", os.listdir(mnt))
                else:
                    long = paths["k" * 300]
                    self.assertTrue(long.endswith(".pt") and "%~" in long)
                    self.assertEqual(paths["a/b"], "a%2Fb.pt")
                    self.assertEqual(paths["index.json"], "%index.json.pt")
                for p in os.listdir(mnt):
                    self.assertLessEqual(len(os.fsencode(p)), 255)
            finally:
                self.unmount(mnt, proc)
        # A key of 252 bytes keeps its name; of 253, it is cut.
        keys = ["x" * 252, "y" * 253]
        self.assertEqual(ref.rfc_file_names(keys)[0], "x" * 252 + ".pt")
        self.assertIn("%~", ref.rfc_file_names(keys)[1])

    def test_converted(self):
        """-o dtype=float16 with the RFC layout: the tensor files hold the converted tensors."""
        path = fixture_path("dtypes")
        mnt, proc = self.mount(path, "-o", "layout=rfc,dtype=float16")
        try:
            state = rfc_load(mnt)
        finally:
            self.unmount(mnt, proc)
        source = dict(ref.flatten(ref.torch_load(path)))
        floating = {torch.float16, torch.float32, torch.float64, torch.bfloat16}
        self.assertTrue(any(t.dtype in floating for t in source.values()))
        for key, t in state.items():
            want = source[key]
            if want.dtype in floating:
                want = want.to(torch.float16)
            self.assertEqual(t.dtype, want.dtype, key)
            self.assertEqual(ref.tensor_bytes(t), ref.tensor_bytes(want), key)

    def test_bad_layout_is_a_usage_error(self):
        r = run([CKPTFS, "-o", "layout=flat", fixture_path("convnet"), self.new_dir()])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"layout", r.stderr)


if __name__ == "__main__":
    unittest.main()
