# SPDX-License-Identifier: MIT
"""The tree as a user's commands assume it, on real mounts (issue 21):
  - key globs: the root lists key directories and the hidden .ckptfs folder only, so that `P*`
    for every key prefix P matches key directories and nothing else, and `rsync -a
    MNT/model.* dest/` copies the keys asked for and nothing more;
  - modes that follow the checkpoint's, -o umask= over them, writes refused with EROFS, and
    copies that the user who made them (root, and nobody) can delete.

Run by ctest as `/usr/bin/python3 -m unittest -v test_tree` with CKPTFS, CKPTFS_FIXTURES and
CKPTFS_CORPUS (see fixtures.py). Needs /dev/fuse, fusermount3, rsync; the non-root checks
setpriv (util-linux).
"""

import glob
import json
import os
import re
import shutil
import stat
import subprocess
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

NOBODY = 65534


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
        r = run(["sh", "-c", 'rsync -a "$0"/model.* "$1"/', mnt, dest2])
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertEqual(sorted(os.listdir(dest2)), chosen)
        self.unmount(mnt, proc)



# --------------------------------------------------------------------------------------------
# Modes
# --------------------------------------------------------------------------------------------

def all_nodes(mnt):
    nodes = [Path(mnt)]
    for dirpath, dirnames, filenames in os.walk(mnt):
        nodes += [Path(dirpath) / n for n in dirnames + filenames]
    return nodes


def as_nobody(args, **kwargs):
    """`args` run as uid/gid 65534 with no supplementary groups (setpriv)."""
    return run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                *args], **kwargs)


class ModeTests(MountTestCase):
    def assert_modes(self, mnt, file_mode, dir_mode, where):
        seen = set()
        for p in all_nodes(mnt):
            st = os.stat(p)
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            want = dir_mode if kind == "dir" else file_mode
            self.assertEqual(oct(stat.S_IMODE(st.st_mode)), oct(want), f"{where}: {p}")
            seen.add(kind)
        self.assertEqual(seen, {"dir", "file"})

    def test_modes_follow_the_checkpoint(self):
        """A 0644 checkpoint gives files 0644 and directories 0755 (the root and .ckptfs too), a
        0600 one 0600 and 0700; read-only ones keep their files read-only, their directories
        the owner's to write; -o umask= overrides (0222: the 0444 and 0555 of before)."""
        path = self.tmp / "m.pth"
        shutil.copyfile(fixture_path("training"), path)
        cases = [(0o644, (), 0o644, 0o755), (0o600, (), 0o600, 0o700),
                 (0o640, (), 0o640, 0o750), (0o444, (), 0o444, 0o755),
                 (0o400, (), 0o400, 0o700), (0o755, (), 0o644, 0o755),
                 (0o644, ("-o", "umask=027"), 0o640, 0o750),
                 (0o600, ("-o", "umask=022"), 0o644, 0o755),
                 (0o644, ("-o", "umask=0222"), 0o444, 0o555)]
        for mode, options, file_mode, dir_mode in cases:
            with self.subTest(mode=oct(mode), options=options):
                os.chmod(path, mode)
                mnt, proc = self.mount(path, *options)
                self.assert_modes(mnt, file_mode, dir_mode, f"{oct(mode)} {options}")
                self.unmount(mnt, proc)

    def test_a_directory_gives_its_own_mode(self):
        """A sharded set's directory, and a split directory copied out of a mount: the
        directory's mode (a directory 0750 gives files 0640 and directories 0750), whatever its
        files' modes."""
        d = self.tmp / "set"
        shutil.copytree(model_fixture_path("sharded_st"), d)
        for f in d.iterdir():
            os.chmod(f, 0o444)
        mnt, proc = self.mount(fixture_path("convnet"))
        split = self.tmp / "split"
        shutil.copytree(mnt, split)
        self.unmount(mnt, proc)
        for directory in (d, split):
            for mode, file_mode, dir_mode in ((0o750, 0o640, 0o750), (0o755, 0o644, 0o755),
                                              (0o700, 0o600, 0o700)):
                with self.subTest(directory=directory.name, mode=oct(mode)):
                    os.chmod(directory, mode)
                    mnt, proc = self.mount(directory)
                    self.assert_modes(mnt, file_mode, dir_mode, oct(mode))
                    self.unmount(mnt, proc)

    def test_writes_fail_with_erofs(self):
        """Whatever the modes say (files 0644 owned by the user): every write fails with EROFS,
        for the owner (root) and for another user (nobody, through allow_other)."""
        path = self.tmp / "m.pth"
        shutil.copyfile(fixture_path("convnet"), path)
        os.chmod(path, 0o666)
        os.chmod(self.tmp, 0o755)
        mnt, proc = self.mount(path, "-o", "allow_other")
        key = json.loads((views_dir(mnt) / "index.json").read_bytes())["entries"][0]["path"]
        d = mnt / key
        script = r"""
import errno, os, sys
mnt, d, views = sys.argv[1:4]
data, index = d + "/data", views + "/index.json"
attempts = [
    lambda: os.close(os.open(data, os.O_WRONLY)),
    lambda: os.close(os.open(data, os.O_RDWR)),
    lambda: os.close(os.open(index, os.O_WRONLY | os.O_TRUNC)),
    lambda: os.close(os.open(data, os.O_WRONLY | os.O_APPEND)),
    lambda: os.close(os.open(mnt + "/new", os.O_CREAT | os.O_WRONLY, 0o644)),
    lambda: os.close(os.open(d + "/new", os.O_CREAT | os.O_WRONLY, 0o644)),
    lambda: os.mkdir(mnt + "/newdir"),
    lambda: os.mkdir(views + "/newdir"),
    lambda: os.symlink("data", d + "/link"),
    lambda: os.unlink(data),
    lambda: os.unlink(index),
    lambda: os.rmdir(d),
    lambda: os.rename(data, d + "/data2"),
    lambda: os.rename(d, mnt + "/renamed"),
    lambda: os.truncate(data, 0),
    lambda: os.chmod(data, 0o600),
    lambda: os.chmod(d, 0o700),
    lambda: os.utime(data, (0, 0)),
]
for i, attempt in enumerate(attempts):
    try:
        attempt()
        print(i, "succeeded")
    except OSError as e:
        print(i, errno.errorcode[e.errno])
"""
        for who in ("root", "nobody"):
            with self.subTest(who):
                cmd = [sys.executable, "-c", script, mnt, d, views_dir(mnt)]
                r = as_nobody(cmd) if who == "nobody" else run(cmd)
                self.assertEqual(r.returncode, 0, r.stderr.decode())
                lines = r.stdout.decode().splitlines()
                self.assertEqual(len(lines), 18, r.stdout)
                for line in lines:
                    self.assertTrue(line.endswith(" EROFS"), f"{who}: attempt {line}")
        self.unmount(mnt, proc)

    def test_copies_can_be_deleted_by_who_made_them(self):
        """rsync -a, cp -r and cp -a of key directories (and of the whole mount), made by root
        and by nobody, are removed by `rm -r` as the same user; with -o umask=0222 (the modes of
        before: directories 0555) nobody's rm fails, which is what this test would catch."""
        path = self.tmp / "m.pth"
        shutil.copyfile(fixture_path("training"), path)
        os.chmod(path, 0o644)
        os.chmod(self.tmp, 0o755)
        for options, removable in (((), True), (("-o", "umask=0222"), False)):
            mnt, proc = self.mount(path, "-o", "allow_other", *options)
            # Key directories and the views, as `rsync -a MNT/model.* MNT/.ckptfs dest/`.
            sources = sorted(glob.glob(str(mnt / "model.*"))) + [str(views_dir(mnt))]
            for who in ("root", "nobody"):
                for tool in (["rsync", "-a"], ["cp", "-r"], ["cp", "-a"]):
                    with self.subTest(options=options, who=who, tool=tool):
                        dest = self.new_dir("copy")
                        if who == "nobody":
                            os.chown(dest, NOBODY, NOBODY)
                        runner = as_nobody if who == "nobody" else run
                        r = runner([*tool, *sources, f"{dest}/"])
                        self.assertEqual(r.returncode, 0, r.stderr.decode())
                        self.assertTrue((dest / VIEWS_FOLDER / "index.json").is_file())
                        r = runner(["rm", "-rf", *[str(p) for p in dest.iterdir()]])
                        if removable or who == "root":
                            self.assertEqual(r.returncode, 0, r.stderr.decode())
                            self.assertEqual(os.listdir(dest), [])
                        else:
                            self.assertNotEqual(r.returncode, 0, "rm -r of 0555 copies worked")
                            self.assertIn(b"Permission denied", r.stderr)
                            subprocess.run(["chmod", "-R", "u+w", dest], check=True)
            self.unmount(mnt, proc)


if __name__ == "__main__":
    unittest.main()
