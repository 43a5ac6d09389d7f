# SPDX-License-Identifier: MIT
"""The tree as a user's commands assume it, on real mounts (issue 21):
  - key globs: the root lists key directories and the hidden .ckptfs folder only, so that `P*`
    for every key prefix P matches key directories and nothing else, and `rsync -a
    MNT/model.* dest/` copies the keys asked for and nothing more;
  - -o files=LIST: what a key directory holds, so that the rsync and scp recipes move each
    tensor once (measured: rsync --stats, and ssh's own count of the bytes it sent);
  - modes that follow the checkpoint's, -o umask= over them, writes refused with EROFS, and
    copies that the user who made them (root, and nobody) can delete;
  - /proc/mounts: the view-changing options after the checkpoint in the mount's source.

Run by ctest as `/usr/bin/python3 -m unittest -v test_tree` with CKPTFS, CKPTFS_FIXTURES and
CKPTFS_CORPUS (see fixtures.py). Needs /dev/fuse, fusermount3, rsync; the scp recipe needs sshd
(package openssh-server; its test is skipped, with the reason, without it), the non-root checks
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

import torch  # noqa: E402

from ckptfs_mounts import mount_of  # noqa: E402
from fixtures import (CKPTFS, FIXTURE_NAMES, SAFETENSORS_FIXTURES,  # noqa: E402
                      SHARDED_FIXTURES, VIEWS_FOLDER, corpus_files, fixture_path,
                      formats_corpus, model_fixture_path, views_dir)
from remote_servers import Sshd  # noqa: E402
from test_mount import MountTestCase, run  # noqa: E402

NOBODY = 65534
KEY_FILES = ["data", "meta.json", "tensor.npy", "tensor.pt"]


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
# -o files=LIST, and the recipes that copy tensors out
# --------------------------------------------------------------------------------------------

def training_checkpoint(path):
    """A training checkpoint whose tensors are large enough for byte counts to mean something:
    model. (4 layers: a 128 KiB weight and a 1 KiB bias each), optimizer. (exp_avg and
    exp_avg_sq of each), and values (epoch, the param groups). Returns the model. keys."""
    g = torch.Generator().manual_seed(21)
    model = {}
    for i in range(4):
        model[f"layers.{i}.weight"] = torch.randn(256, 128, generator=g)
        model[f"layers.{i}.bias"] = torch.randn(256, generator=g)
    state = {i: {"exp_avg": torch.randn(t.shape, generator=g),
                 "exp_avg_sq": torch.rand(t.shape, generator=g)}
             for i, t in enumerate(model.values())}
    torch.save({"model": model, "optimizer": {"state": state, "param_groups": [{"lr": 0.1}]},
                "epoch": 3}, path)
    return [f"model.{k}" for k in model]


def transferred(stats):
    """rsync --stats: (Total bytes sent, Total transferred file size)."""
    def number(label):
        m = re.search(rb"^" + re.escape(label) + rb": ([\d,]+)", stats, re.M)
        return int(m.group(1).replace(b",", b""))
    return number(b"Total bytes sent"), number(b"Total transferred file size")


def ssh_sent(stderr):
    """What ssh -v says it sent over the connection, in bytes (encrypted, headers included)."""
    m = re.search(rb"Transferred: sent (\d+), received (\d+) bytes", stderr)
    if m is None:
        raise AssertionError(f"no byte count in ssh -v's output: {stderr[-2000:]!r}")
    return int(m.group(1))


class FilesTests(MountTestCase):
    def test_what_a_key_directory_holds(self):
        """Each list's files, in the listing order and nothing else, with the bytes of a mount
        of every file; a value keeps value.json (a broken tensor its chosen files: test_broken)."""
        path = fixture_path("training")
        full, full_proc = self.mount(path)
        entries = json.loads((views_dir(full) / "index.json").read_bytes())["entries"]
        cases = {"data,meta.json": ["data", "meta.json"], "npy": ["tensor.npy"],
                 "tensor.npy,meta.json": ["meta.json", "tensor.npy"],
                 "pt,data": ["data", "tensor.pt"], "meta.json,value.json": ["meta.json"],
                 "data,meta.json,tensor.npy,tensor.pt": KEY_FILES}
        for option, listed in cases.items():
            with self.subTest(files=option):
                # The list's names are items of the -o list, options may follow them.
                mnt, proc = self.mount(path, "-o", f"files={option},allow_other")
                self.assertIn("allow_other", mount_of(mnt).options)
                for e in entries:
                    d = mnt / e["path"]
                    if e["kind"] == "value":
                        self.assertEqual(os.listdir(d), ["value.json"])
                        continue
                    self.assertEqual(sorted(os.listdir(d)), listed, e["key"])
                    for name in KEY_FILES:
                        if name in listed:
                            self.assertEqual((d / name).read_bytes(),
                                             (full / e["path"] / name).read_bytes())
                        else:
                            self.assertFalse((d / name).exists(), f"{e['key']}/{name}")
                self.unmount(mnt, proc)
        self.unmount(full, full_proc)

    def test_refused(self):
        """A name no key directory holds, an empty list, a list without a tensor's file, and
        files= with layout=rfc: usage errors (exit 1), one line naming the option."""
        for options, pattern in (("files=npz", r"invalid files 'npz'"),
                                 ("files=", r"invalid files ''"),
                                 ("files=data,npz", r"unsupported mount option 'npz'"),
                                 ("files=value.json", r"files names no file"),
                                 ("layout=rfc,files=data", r"layout=rfc has none")):
            with self.subTest(options):
                mnt = self.new_dir()
                r = run([CKPTFS, "-o", options, fixture_path("bare"), mnt])
                err = r.stderr.decode()
                self.assertEqual(r.returncode, 1, err)
                self.assertRegex(err, rf"\Ackptfs: [^\n]*{pattern}[^\n]*\(try 'ckptfs --help'\)\n\Z")

    def recipe_mount(self, files):
        path = self.tmp / "train.pth"
        if not path.exists():
            training_checkpoint(path)
        mnt, proc = self.mount(path, *(["-o", f"files={files}"] if files else []))
        entries = json.loads((views_dir(mnt) / "index.json").read_bytes())["entries"]
        chosen = [e for e in entries if e["path"].startswith("model.")]
        tensors = sum(e["nbytes"] for e in chosen)
        meta = sum((mnt / e["path"] / "meta.json").stat().st_size for e in chosen
                   if (mnt / e["path"] / "meta.json").exists())
        return mnt, proc, chosen, tensors, meta

    def test_rsync_recipe_moves_each_tensor_once(self):
        """`rsync -a MNT/model.* dest/` with -o files=data,meta.json (what pack reads back),
        files=npy (what numpy reads) and files=npy,meta.json sends at most 1.05x the selected
        tensors' bytes plus their meta.json (rsync --stats: Total bytes sent); the default mount,
        every file of a key, about 3x (the limit is one the default breaks)."""
        ratios = {}
        for files in ("data,meta.json", "npy", "npy,meta.json", None):
            with self.subTest(files=files):
                mnt, proc, chosen, tensors, meta = self.recipe_mount(files)
                dest = self.new_dir("dest")
                r = run(["rsync", "-a", "--stats", *glob.glob(str(mnt / "model.*")), f"{dest}/"])
                self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
                sent, file_bytes = transferred(r.stdout)
                self.assertEqual(sorted(os.listdir(dest)), sorted(e["path"] for e in chosen))
                ratios[files] = sent / (tensors + meta)
                print(f"\nrsync -a MNT/model.* with files={files or 'all'}: {sent} bytes sent "
                      f"({file_bytes} of files) for {tensors} bytes of tensors + {meta} of "
                      f"meta.json: {ratios[files]:.3f}x", file=sys.stderr)
                if files is None:
                    self.assertGreater(sent, 2.9 * tensors, "the default moves every file")
                else:
                    self.assertLessEqual(sent, 1.05 * tensors + meta)
                if files == "data,meta.json":
                    # What the copy is for: a checkpoint of those tensors again.
                    out = self.tmp / "model.pth"
                    r = run([CKPTFS, "pack", dest, out])
                    self.assertEqual(r.returncode, 0, r.stderr.decode())
                    # Nested as the checkpoint was: meta.json says each tensor's key path.
                    packed = torch.load(out)["model"]
                    source = torch.load(self.tmp / "train.pth")["model"]
                    # Without index.json copied along, pack orders the keys by their bytes.
                    self.assertEqual(list(packed),
                                     [e["key"][len("model."):] for e in
                                      sorted(chosen, key=lambda e: e["key"].encode())])
                    for key, t in packed.items():
                        self.assertTrue(torch.equal(t, source[key]), key)
                self.unmount(mnt, proc)

    def test_scp_and_rsync_over_ssh_move_each_tensor_once(self):
        """The same recipes to another machine: `scp -r MNT/model.* host:dest/` and `rsync -a -e
        ssh`, against an sshd of this test's own on 127.0.0.1; ssh -v's count of the bytes it
        sent (encrypted, the handshake included) is at most 1.05x the tensors plus meta.json."""
        why = Sshd.missing()
        if why:
            self.skipTest(f"{why}: the rsync recipe is measured without ssh")
        sshd = Sshd(self.tmp / "sshd").start()
        self.addCleanup(sshd.stop)
        for files in ("data,meta.json", "npy"):
            mnt, proc, chosen, tensors, meta = self.recipe_mount(files)
            sources = glob.glob(str(mnt / "model.*"))
            with self.subTest("scp", files=files):
                dest = self.new_dir("scp")
                r = run(["scp", "-v", "-r", *sshd.ssh_options("-P"), *sources,
                         sshd.target(f"{dest}/")])
                self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace")[-3000:])
                self.assertEqual(sorted(os.listdir(dest)), sorted(e["path"] for e in chosen))
                sent = ssh_sent(r.stderr)
                print(f"\nscp -r MNT/model.* with files={files}: ssh sent {sent} bytes for "
                      f"{tensors} bytes of tensors + {meta} of meta.json: "
                      f"{sent / (tensors + meta):.3f}x", file=sys.stderr)
                self.assertLessEqual(sent, 1.05 * tensors + meta)
            with self.subTest("rsync -e ssh", files=files):
                dest = self.new_dir("rsync-ssh")
                shell = " ".join(["ssh", "-v", *sshd.ssh_options("-p")])
                r = run(["rsync", "-a", "--stats", "-e", shell, *sources, sshd.target(f"{dest}/")])
                self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace")[-3000:])
                sent = ssh_sent(r.stderr)
                rsync_sent, _ = transferred(r.stdout)
                print(f"rsync -a -e ssh MNT/model.* with files={files}: rsync sent {rsync_sent}, "
                      f"ssh {sent} bytes: {sent / (tensors + meta):.3f}x", file=sys.stderr)
                self.assertLessEqual(rsync_sent, 1.05 * tensors + meta)
                self.assertLessEqual(sent, 1.05 * tensors + meta)
            self.unmount(mnt, proc)

    def test_what_du_counts(self):
        """du counts every file's size as if it were stored: the key directories' files and
        .ckptfs's export; `du MNT/*` leaves .ckptfs out (the shell's * does not match it)."""
        for files in (None, "data,meta.json"):
            with self.subTest(files=files):
                mnt, proc, _, _, _ = self.recipe_mount(files)
                entries = json.loads((views_dir(mnt) / "index.json").read_bytes())["entries"]
                tensors = sum(e["nbytes"] or 0 for e in entries)
                sizes = {}
                for where, args in (("MNT", [mnt]), ("MNT/*", glob.glob(str(mnt / "*"))),
                                    (".ckptfs", [views_dir(mnt)])):
                    r = run(["du", "-scb", *args])
                    self.assertEqual(r.returncode, 0, r.stderr)
                    sizes[where] = int(r.stdout.split()[-2])
                files_bytes = sum(f.stat().st_size for d in mnt.iterdir()
                                  if d.name != VIEWS_FOLDER for f in d.iterdir())
                self.assertEqual(sizes["MNT/*"], files_bytes)  # directories count 0
                self.assertEqual(sizes["MNT"], sizes["MNT/*"] + sizes[".ckptfs"])
                r = run(["du", "-sh", mnt])
                print(f"\nfiles={files or 'all'}: du -sb MNT {sizes['MNT']} "
                      f"({sizes['MNT'] / tensors:.2f}x the tensors), MNT/* {sizes['MNT/*']} "
                      f"({sizes['MNT/*'] / tensors:.2f}x), .ckptfs {sizes['.ckptfs']}; "
                      f"du -sh: {r.stdout.decode().split()[0]}", file=sys.stderr)
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

    def test_a_directory_gives_the_strictest_mode(self):
        """A sharded set's directory, and a split directory copied out of a mount: the strictest
        of the directory's mode and its files' (a 0750 directory of 0444 files gives files 0440
        and directories 0750; of 0644 files, 0640 and 0750): a mount never shows more than the
        files it reads allow (issue 29)."""
        d = self.tmp / "set"
        shutil.copytree(model_fixture_path("sharded_st"), d)
        for f in d.iterdir():
            os.chmod(f, 0o444)
        mnt, proc = self.mount(fixture_path("convnet"))
        split = self.tmp / "split"
        shutil.copytree(mnt, split)
        self.unmount(mnt, proc)
        for f in split.rglob("*"):
            if f.is_file():
                os.chmod(f, 0o644)
        cases = {d: ((0o750, 0o440, 0o750), (0o755, 0o444, 0o755), (0o700, 0o400, 0o700)),
                 split: ((0o750, 0o640, 0o750), (0o755, 0o644, 0o755), (0o700, 0o600, 0o700))}
        for directory, modes in cases.items():
            for mode, file_mode, dir_mode in modes:
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


# --------------------------------------------------------------------------------------------
# /proc/mounts
# --------------------------------------------------------------------------------------------

class ProcMountsTests(MountTestCase):
    def test_view_options_in_the_source(self):
        """The source of /proc/mounts is the checkpoint, then the options that change the view
        in brackets, as -o takes them, in one order (dtype, layout, shard_size in bytes, files
        in listing order): mounts of one checkpoint with other views are told apart. Options
        that change no view are not there; -o fsname= replaces it all."""
        path = self.tmp / "a b,c[1].pth"  # a space, a comma and brackets in the path
        shutil.copyfile(fixture_path("convnet"), path)
        cases = [((), ""), (("-o", "dtype=float16"), "[dtype=float16]"),
                 (("-o", "layout=rfc"), "[layout=rfc]"),
                 (("-o", "shard_size=1MB"), "[shard_size=1000000]"),
                 (("-o", "files=meta.json,data"), "[files=data,meta.json]"),
                 (("-o", "files=tensor.pt,npy,meta.json,data"), ""),
                 (("-o", "files=npy", "-o", "layout=split,dtype=bfloat16,shard_size=2KiB"),
                  "[dtype=bfloat16,shard_size=2048,files=tensor.npy]"),
                 (("-o", "layout=rfc,dtype=float32"), "[dtype=float32,layout=rfc]"),
                 (("-o", "umask=027,direct_io,read_ahead_kb=0,allow_other"), ""),
                 (("-o", "dtype=float16,fsname=mine"), None)]
        sources = set()
        for options, suffix in cases:
            with self.subTest(options=options):
                mnt, proc = self.mount(path, *options)
                m = mount_of(mnt)
                self.assertEqual(m.fstype, "fuse.ckptfs")
                want = "mine" if suffix is None else str(path) + suffix
                self.assertEqual(m.source, want)
                sources.add(m.source)
                # findmnt and mount(8) show the same (they read the same table).
                r = run(["findmnt", "-n", "-o", "SOURCE", "--mountpoint", mnt])
                self.assertEqual(r.stdout.decode().rstrip("\n"), want)
                self.unmount(mnt, proc)
        self.assertEqual(len(sources), len(cases) - 2)  # three cases show the plain path


if __name__ == "__main__":
    unittest.main()
