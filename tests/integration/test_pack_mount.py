# SPDX-License-Identifier: MIT
"""Integration tests of `ckptfs pack` on what a mount gives: every fixture (and some corpus files)
mounted, a subset of its key directories copied out with `rsync -a` (with the mount's
.ckptfs/index.json, in dest/.ckptfs/ or at dest's root, or without), packed back into one file,
which must hold exactly that subset: with --flat the same keys, the bytes of the checkpoint
(expected.json's sha256 of each tensor as stored, made by scripts/make_fixtures.py), dtypes,
shapes, requires_grad and values, in index.json's order when it was copied along, else sorted by
key; nested (without --flat), the entries ckptfs finds in the file are the copy's, key paths and
containers included (the nesting rebuilt from meta.json and index.json). Also: a whole mount copied (its .ckptfs too) packs
everything; an `-o layout=rfc` mount copied out (map.pt, <name>.pt, .ckptfs) packs back to what
torch.load reads in the source, every key that has a file, in map.pt's order; a split directory
mounts, and `ckptfs inspect` reads it.

Needs /dev/fuse, fusermount3, rsync and /usr/bin/python3's torch (see fixtures.require()).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import torch  # noqa: E402

import ckptfs_reference as ref  # noqa: E402
from ckptfs_mounts import index_readable, unmount, wait_for_mount  # noqa: E402
from fixtures import (CKPTFS, FIXTURE_NAMES, NOT_TORCH_LOADABLE,  # noqa: E402
                      TORCHSCRIPT_FIXTURES, expected_doc, fixture_path)
from test_pack import (NOT_IN_TORCH_1_13, inspect, json_key, reference_bytes,  # noqa: E402
                       run, sha256, to_json, torch_plan)

warnings.filterwarnings("ignore")

TIMEOUT = 120


class PackFromMount(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("rsync"):
            raise AssertionError("rsync is not installed (apt-get install rsync)")

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="ckptfs-pack-mount-test-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)

    def mount(self, checkpoint, *options):
        mnt = Path(tempfile.mkdtemp(prefix="mnt-", dir=self.tmp))
        r = subprocess.run([str(CKPTFS), *options, str(checkpoint), str(mnt)],
                           capture_output=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.addCleanup(unmount, mnt)
        self.assertIsNone(wait_for_mount(mnt, None, TIMEOUT, index_readable))
        return mnt

    def copy_out(self, mnt, names, with_index):
        """`rsync -a` of the named key directories into a fresh directory, and with `with_index`
        the mount's index.json: "views" in dest/.ckptfs/ as the mount has it (rsync -R, the
        path after /./ kept), "root" at dest's root (`rsync -a MNT/k... MNT/.ckptfs/index.json
        dest/`, and copies made before the views moved into .ckptfs)."""
        dest = Path(tempfile.mkdtemp(prefix="split-", dir=self.tmp))
        sources = [f"{mnt}/./{n}" for n in names]
        if with_index == "views":
            sources.append(f"{mnt}/./{VIEWS_FOLDER}/index.json")
        elif with_index:
            sources.append(str(views_dir(mnt) / "index.json"))
        if sources:
            relative = ["--relative"] if with_index == "views" else []
            if not relative:
                sources = [s.replace("/./", "/", 1) for s in sources]
            r = subprocess.run(["rsync", "-a", *relative, *sources, str(dest) + "/"],
                               capture_output=True, timeout=TIMEOUT)
            self.assertEqual(r.returncode, 0, r.stderr)
        return dest

    def chosen_entries(self, mnt, entries, with_index, pick):
        """The entries `pick(i)` chooses that a split directory can hold on its own: not a
        broken tensor, a per-channel quantized tensor with its scales and zero points, and
        without index.json no value whose name does not say its key."""
        chosen = set()
        for i, e in enumerate(entries):
            if not pick(i) or (e["kind"] == "tensor" and e["nbytes"] is None):
                continue
            if e["kind"] == "value" and not with_index and ("%#" in e["path"] or
                                                            "%~" in e["path"]):
                continue
            chosen.add(i)
            if e["kind"] == "tensor":
                q = json.loads((mnt / e["path"] / "meta.json").read_text())["quantization"]
                if q and "scales" in q:
                    chosen |= {j for j, f in enumerate(entries)
                               if f["key"] in (q["scales"], q["zero_points"])}
        # An empty copy is no split directory: then the first entry that can go.
        if not chosen:
            return self.chosen_entries(mnt, entries, with_index, lambda i: True)[:1]
        return sorted(chosen)

    def check(self, name, checkpoint, expected, pick, with_index):
        mnt = self.mount(checkpoint)
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        entries = index["entries"]
        chosen = self.chosen_entries(mnt, entries, with_index, pick)
        dest = self.copy_out(mnt, [entries[i]["path"] for i in chosen], with_index)
        doc = inspect(dest)
        self.assertEqual(doc["format"], "split")

        # What tells entries apart: the key, and the key path, which only index.json keeps for
        # a value (it has no meta.json).
        def identity(e):
            return e["key"], json_key(e) if with_index or e["kind"] == "tensor" else None

        # The split directory's entries are the chosen ones, in index.json's order or by key.
        got = [identity(e) for e in doc["entries"]]
        want = [identity(entries[i]) for i in chosen]
        if with_index:
            self.assertEqual(got, want)
        else:
            self.assertEqual(sorted(got), sorted(want))
            raw = [k.encode("utf-8", "surrogatepass") for k, _ in got]
            self.assertEqual(raw, sorted(raw))
        original = {identity(entries[i]): i for i in chosen}
        self.check_nested(dest, doc)
        out = self.tmp / f"{name}-{'index' if with_index else 'bare'}.pth"
        r = run("pack", dest, out, "--flat")
        self.assertEqual(r.returncode, 0, r.stderr)
        plan = torch_plan(doc)
        exact = [original[identity(doc["entries"][i])] for i, _ in plan]
        if any(doc["entries"][i].get("dtype") in NOT_IN_TORCH_1_13 for i, _ in plan):
            stored = dict(reference_bytes(out))
            for (i, key), j in zip(plan, exact):
                if doc["entries"][i]["kind"] == "tensor":
                    self.assertEqual(sha256(stored[key]), expected[j]["sha256"], key)
            return dest
        packed = torch.load(out)
        self.assertEqual(list(packed), [k for _, k in plan])
        for (i, key), j in zip(plan, exact):
            e, v = doc["entries"][i], packed[key]
            with self.subTest(name=name, key=key):
                if e["kind"] == "value":
                    # From value.json: the value up to the types JSON does not tell apart.
                    self.assertTrue(ref.json_equal(to_json(v), e["value"]))
                    if "value" in expected[j]:
                        self.assertTrue(ref.json_equal(to_json(v), expected[j]["value"]))
                        self.assertTrue(ref.same_value(v, ref.value_from_json(
                            expected[j]["value"]), types=False))
                    continue
                self.assertEqual(ref.dtype_name(v.dtype), expected[j]["dtype"])
                self.assertEqual(list(v.shape), expected[j]["shape"])
                self.assertEqual(v.requires_grad, expected[j]["requires_grad"])
                self.assertTrue(v.is_contiguous())  # the mount's data: C order
                self.assertEqual(sha256(ref.tensor_bytes(v, expected_doc(name)["byteorder"])),
                                 expected[j]["sha256"])
        return dest

    def check_nested(self, dest, doc):
        """pack DEST OUT.pth (nested): when the copy's key paths say a nesting pack builds whole
        (no object, no tuple key, no value left out), ckptfs reads in OUT the copy's entries:
        keys, where they are (key path and containers, or one str key of the root), kinds,
        dtypes, shapes and values, the root too. OUT may hold more only as None at positions of
        a list the copy has not; a dict of the copy that holds values alone is, as in any
        checkpoint, one value in OUT (the dict of those values)."""
        out = self.tmp / "nested.pth"
        r = run("pack", dest, out, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        err = r.stderr.decode(errors="replace")
        if "left out" in err or "flattened" in err or "renamed" in err:
            return
        back = inspect(out)
        self.assertEqual(back["root"], doc["root"])

        def place(d, e):
            # Where an entry is: its key path and containers; without them, one str key of the
            # root (a key path that only set it apart from entries not copied says the same).
            if "key_path" in e:
                return e["key_path"], e.get("containers")
            return [e["key"]], [d["root"]]

        def shown(d, e):
            path, containers = place(d, e)
            return (e["key"], json.dumps(path), json.dumps(containers), e["kind"], e.get("dtype"),
                    e.get("shape"), json.dumps(e.get("value")))
        want = sorted(shown(doc, e) for e in doc["entries"])
        got = [shown(back, e) for e in back["entries"]]
        extra = [(g, e) for g, e in zip(got, back["entries"]) if g not in want]
        for g, e in extra:
            if g[3] != "value":
                self.fail(f"{g} is not in the copy")
            if e["value"] is None:
                continue  # a list's position the copy has not
            # The copy's values below this place, all of them in dicts, are this dict.
            path, _ = place(back, e)
            below = [w for w in doc["entries"] if place(doc, w)[0][:len(path)] == path and
                     len(place(doc, w)[0]) > len(path)]
            self.assertTrue(below, g)
            rebuilt = {}
            for w in below:
                parts, containers = place(doc, w)
                self.assertEqual(w["kind"], "value", g)
                self.assertTrue(all(c == "dict" for c in containers[len(path):]), g)
                at = rebuilt
                for part in parts[len(path):-1]:
                    at = at.setdefault(part, {})
                at[parts[-1]] = w["value"]
                want.remove(shown(doc, w))
            self.assertEqual(e["value"], rebuilt, g)
        self.assertEqual(sorted(g for g in got if g in want), want)

    def test_every_fixture_subset_with_and_without_index(self):
        for n, name in enumerate(FIXTURE_NAMES):
            # index.json where the mount has it, and at the root as copies made before had it.
            for with_index in ("views" if n % 2 else "root", None):
                with self.subTest(name=name, with_index=with_index):
                    expected = expected_doc(name)["entries"]
                    # Every other entry, starting with the first or the second.
                    self.check(name, fixture_path(name), expected,
                               lambda i, n=n: i % 2 == n % 2, with_index)

    def test_a_whole_mount_copied_packs_everything(self):
        src = fixture_path("training")
        mnt = self.mount(src)
        dest = Path(tempfile.mkdtemp(prefix="whole-", dir=self.tmp))
        r = subprocess.run(["rsync", "-a", f"{mnt}/", f"{dest}/"], capture_output=True,
                           timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue((dest / VIEWS_FOLDER / "model.safetensors").is_file())
        self.assertTrue((dest / VIEWS_FOLDER / "index.json").is_file())
        out = self.tmp / "whole.pth"
        r = run("pack", dest, out, "--flat")
        self.assertEqual(r.returncode, 0, r.stderr)
        packed = torch.load(out)
        source = ref.flatten(ref.torch_load(src))
        want = [(k, v) for k, v in source if k != "cli"]  # an argparse.Namespace: left out
        self.assertEqual(list(packed), [k for k, _ in want])
        for k, v in want:
            if isinstance(v, torch.Tensor):
                self.assertEqual(ref.tensor_bytes(packed[k]), ref.tensor_bytes(v), k)
            else:
                self.assertTrue(ref.same_value(packed[k], v, types=False), k)
        # Nested: the checkpoint torch.load gives, but for what the copy's JSON does not keep
        # (a state_dict's _metadata; the types of values JSON does not tell apart).
        r = run("pack", dest, out, "--force")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(ref.nesting_difference(
            torch.load(out), ref.packed_nesting(ref.torch_load(src)), attributes=False,
            value_types=False))

    def test_a_layout_rfc_mount_copied_packs_back(self):
        packed_by_torch = []
        for name in FIXTURE_NAMES:
            with self.subTest(name):
                src = fixture_path(name)
                expected = expected_doc(name)["entries"]
                described = inspect(src)["entries"]
                mnt = self.mount(src, "-o", "layout=rfc")
                entries = json.loads((views_dir(mnt) / "index.json").read_text())["entries"]
                dest = Path(tempfile.mkdtemp(prefix="rfc-", dir=self.tmp))
                r = subprocess.run(["rsync", "-a", f"{mnt}/", f"{dest}/"], capture_output=True,
                                   timeout=TIMEOUT)
                self.assertEqual(r.returncode, 0, r.stderr)
                unmount(mnt)
                self.assertTrue((dest / "map.pt").is_file())
                # ckptfs reads the copy as an RFC directory: the entries that have a file, in
                # map.pt's order.
                doc = inspect(dest)
                self.assertEqual(doc["format"], "rfc")
                with_files = [i for i, e in enumerate(entries) if e["path"] is not None]
                self.assertEqual([e["key"] for e in doc["entries"]],
                                 [entries[i]["key"] for i in with_files])
                out = self.tmp / f"{name}-rfc.pth"
                r = run("pack", dest, out)
                self.assertEqual(r.returncode, 0, r.stderr)
                plan = torch_plan(doc)
                source = [with_files[i] for i, _ in plan]  # each packed key's source entry
                if any(entries[j]["kind"] == "tensor" and
                       expected[j]["dtype"] in NOT_IN_TORCH_1_13 for j in source):
                    # torch 1.13 cannot load these: make_fixtures' reader reads OUT's bytes.
                    stored = dict(reference_bytes(out))
                    for (_, key), j in zip(plan, source):
                        if entries[j]["kind"] == "tensor":
                            self.assertEqual(sha256(stored[key]), expected[j]["sha256"], key)
                    continue
                packed = torch.load(out)
                self.assertEqual(list(packed), [k for _, k in plan])
                flat = ([(k, t) for k, t, _, _ in ref.torchscript_flatten(src)]
                        if name in TORCHSCRIPT_FIXTURES else
                        [] if name in NOT_TORCH_LOADABLE else ref.flatten(ref.torch_load(src)))
                for (_, key), j in zip(plan, source):
                    v = packed[key]
                    with self.subTest(name=name, key=key):
                        if entries[j]["kind"] == "value":
                            self.assertTrue(ref.json_equal(to_json(v), described[j]["value"]))
                            if flat and ref.simple_json(flat[j][1]) is not ref.NOT_JSON:
                                # map.pt's <key>.pt files hold the value itself.
                                self.assertTrue(ref.same_value(v, flat[j][1]), key)
                            continue
                        self.assertEqual(ref.dtype_name(v.dtype), expected[j]["dtype"])
                        self.assertEqual(list(v.shape), expected[j]["shape"])
                        self.assertEqual(v.requires_grad, expected[j]["requires_grad"])
                        # OUT is little-endian: its values right in any torch, their bytes in
                        # the checkpoint's order the checkpoint's bytes.
                        order = expected_doc(name)["byteorder"]
                        if flat and ref.is_torch_tensor(flat[j][1]):
                            self.assertEqual(ref.tensor_bytes(v, order),
                                             ref.checkpoint_bytes(flat[j][1], order))
                        else:
                            self.assertEqual(sha256(ref.tensor_bytes(v, order)),
                                             expected[j]["sha256"])
                packed_by_torch.append(name)
        for name in ("convnet", "dtypes", "views", "training", "keys", "collisions", "quantized",
                     "bigendian", "legacy"):
            self.assertIn(name, packed_by_torch)

    def test_keys_of_equal_text_one_rule(self):
        """Keys of equal text (the int 0 and the str "0"; "a.b" and a -> b beside a real key
        "a.b%#2"): the mount's names, the RFC layout's files and pack's keys follow one rule
        (docs/NAMES.md): the n-th of a text is "<text>%#<n>", n skipping a number whose
        "<text>%#<n>" is a key of its own, and pack says what it renamed."""
        src = fixture_path("collisions")
        out = self.tmp / "collisions.pth"
        r = run("pack", src, out, "--quiet", "--flat")  # the renamed line alone: no summary
        self.assertEqual(r.returncode, 0, r.stderr)
        packed = list(torch.load(out))
        err = r.stderr.decode(errors="replace")
        texts = [ref.text_of_json(e["key"]) for e in inspect(src)["entries"]]
        renamed = [(t, k) for t, k in zip(texts, packed) if t != k]
        self.assertIn(("a.b", "a.b%#3"), renamed)  # "a.b%#2" is a key of its own
        self.assertIn(("0", "0%#2"), renamed)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertRegex(err, rf"^ckptfs: .*: renamed {len(renamed)} entries \(a key an earlier "
                              r"entry has: the n-th of a text is written <key>%#<n>, as the "
                              r"mount names it\): ")
        for t, k in renamed[:5]:
            self.assertIn(f'"{t}" -> "{k}"', err)
        self.assertIn(f"and {len(renamed) - 5} more", err)
        for layout in ("split", "rfc"):
            with self.subTest(layout):
                mnt = self.mount(src, "-o", f"layout={layout}")
                entries = json.loads((views_dir(mnt) / "index.json").read_text())["entries"]
                self.assertEqual(len(entries), len(packed))
                for e, t, k in zip(entries, texts, packed):
                    name = ref.directory_name(t) + k[len(t):]  # "%#<n>" after the name
                    self.assertEqual(e["path"], name + (".pt" if layout == "rfc" else ""), k)
                if layout == "rfc":
                    # A copy of the RFC mount packs to the same keys, said the same way.
                    dest = Path(tempfile.mkdtemp(prefix="rfc-", dir=self.tmp))
                    r = subprocess.run(["rsync", "-a", f"{mnt}/", f"{dest}/"],
                                       capture_output=True, timeout=TIMEOUT)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    again = self.tmp / "collisions-rfc.pth"
                    r = run("pack", dest, again, "--quiet", "--flat")
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(list(torch.load(again)), packed)
                    self.assertEqual(r.stderr.decode(errors="replace").split(": ", 2)[2],
                                     err.split(": ", 2)[2])
                unmount(mnt)

    def test_a_split_directory_mounts(self):
        src = fixture_path("views")
        mnt = self.mount(src)
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        names = [e["path"] for e in index["entries"]]
        dest = self.copy_out(mnt, names, with_index="views")
        again = self.mount(dest)
        back = json.loads((views_dir(again) / "index.json").read_text())
        self.assertEqual(back["format"], "split")
        self.assertEqual([e["key"] for e in back["entries"]], [e["key"] for e in index["entries"]])
        for e in index["entries"]:
            if e["kind"] == "tensor" and e["nbytes"] is not None:
                self.assertEqual((again / e["path"] / "data").read_bytes(),
                                 (mnt / e["path"] / "data").read_bytes(), e["key"])
                npy = (again / e["path"] / "tensor.npy").read_bytes()
                self.assertEqual(npy, (mnt / e["path"] / "tensor.npy").read_bytes(), e["key"])


if __name__ == "__main__":
    unittest.main()
