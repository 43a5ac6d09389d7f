# SPDX-License-Identifier: MIT
"""The tree as a user's commands assume it, on real mounts (issue 21): the root lists key
directories and the hidden .ckptfs folder only, so that `P*` for every key prefix P matches key
directories and nothing else, and `rsync -a MNT/model.* dest/` copies the keys asked for and
nothing more.

Run by ctest as `/usr/bin/python3 -m unittest -v test_tree` with CKPTFS, CKPTFS_FIXTURES and
CKPTFS_CORPUS (see fixtures.py). Needs /dev/fuse, fusermount3 and rsync.
"""

import glob
import json
import os
import re
import shutil
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

from fixtures import (FIXTURE_NAMES, SAFETENSORS_FIXTURES, SHARDED_FIXTURES,  # noqa: E402
                      VIEWS_FOLDER, corpus_files, fixture_path, formats_corpus,
                      model_fixture_path, views_dir)
from test_mount import MountTestCase, run  # noqa: E402


def key_prefixes(name):
    """The prefixes of a key's name that a user types before `*`: up to and with each '.' or
    '_' (`model.`, `model.layer1.`, `optimizer.state.0.`), its first one and two characters, and
    the whole name."""
    out = {name[:1], name[:2], name}
    for i, c in enumerate(name):
        if c in "._":
            out.add(name[:i + 1])
    return out


def every_checkpoint():
    """(label, path) of every fixture and corpus checkpoint a mount can show."""
    out = [(n, fixture_path(n)) for n in FIXTURE_NAMES]
    out += [(n, model_fixture_path(n)) for n in SAFETENSORS_FIXTURES + SHARDED_FIXTURES]
    out += [(p.name, p) for p in corpus_files()]
    out += [(p.name, p) for p in formats_corpus()]
    return out


class KeyGlobTests(MountTestCase):
    def entries(self, mnt):
        return json.loads((views_dir(mnt) / "index.json").read_bytes())["entries"]

    def test_key_prefix_globs_match_key_directories_only(self):
        """For every key prefix P of every fixture and corpus checkpoint, glob(MNT/P*) is the
        key directories whose names start with P: never .ckptfs nor a view; `*` is every key."""
        checked = 0
        for label, path in every_checkpoint():
            with self.subTest(label):
                mnt, proc = self.mount(path)
                names = [e["path"] for e in self.entries(mnt)]
                listed = os.listdir(mnt)
                self.assertEqual(sorted(listed), sorted(names + [VIEWS_FOLDER]), "root listing")
                self.assertEqual([n for n in names if n.startswith(".")], [], "a hidden key")
                for name in names:
                    self.assertTrue((mnt / name).is_dir(), name)
                prefixes = {""}.union(*(key_prefixes(n) for n in names))
                for prefix in sorted(prefixes):
                    got = {os.path.basename(p)
                           for p in glob.glob(str(mnt / (glob.escape(prefix) + "*")))}
                    self.assertEqual(got, {n for n in names if n.startswith(prefix)},
                                     f"glob {prefix}*")
                checked += len(prefixes)
                self.unmount(mnt, proc)
        print(f"\n{checked} key prefixes globbed", file=sys.stderr)

    def test_rfc_layout_globs(self):
        """-o layout=rfc: P* matches <name>.pt files, and map.pt (the one view at the root, where
        the RFC's loaders look for it) when P is a prefix of "map.pt"; never .ckptfs."""
        mnt, proc = self.mount(fixture_path("training"), "-o", "layout=rfc")
        files = [e["path"] for e in self.entries(mnt) if e["path"] is not None]
        self.assertEqual(sorted(os.listdir(mnt)), sorted(files + ["map.pt", VIEWS_FOLDER]))
        self.assertEqual(os.listdir(views_dir(mnt)), ["index.json"])
        for prefix in {""}.union(*(key_prefixes(n) for n in files), {"m", "map"}):
            got = {os.path.basename(p) for p in glob.glob(str(mnt / (glob.escape(prefix) + "*")))}
            want = {n for n in files + ["map.pt"] if n.startswith(prefix)}
            self.assertEqual(got, want, f"glob {prefix}*")
        self.unmount(mnt, proc)

    def test_rsync_of_model_prefix_copies_those_keys_only(self):
        """`rsync -a MNT/model.* dest/` on a training checkpoint (model., optimizer. and other
        keys) copies the model. key directories and nothing else: its byte count is theirs."""
        if not shutil.which("rsync"):
            self.skipTest("rsync is not installed")
        mnt, proc = self.mount(fixture_path("training"))
        names = [e["path"] for e in self.entries(mnt)]
        chosen = sorted(n for n in names if n.startswith("model."))
        self.assertTrue(chosen and len(chosen) < len(names), names)
        dest = self.new_dir("dest")
        r = run(["rsync", "-a", "--stats", *glob.glob(str(mnt / "model.*")), f"{dest}/"])
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertEqual(sorted(os.listdir(dest)), chosen)
        want = sum(f.stat().st_size for n in chosen for f in (mnt / n).iterdir())
        sent = int(re.search(rb"Total transferred file size: ([\d,]+) bytes", r.stdout)
                   .group(1).replace(b",", b""))
        self.assertEqual(sent, want, "rsync moved more than the model. keys' files")
        # The same through a shell's glob, as a user types it.
        dest2 = self.new_dir("dest2")
        r = run(["sh", "-c", f'rsync -a "$0"/model.* "$1"/', mnt, dest2])
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertEqual(sorted(os.listdir(dest2)), chosen)
        self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
