# SPDX-License-Identifier: MIT
"""Section 17, --only python: the Python package (python/ckptfs, docs/PYTHON.md) against the
file itself, tmpfs and torch.load, side by side in one run:

  a. random 4 KiB slices (one row of a 4096x1024 float32 tensor) of the 1.6 GB .pth: os.preadv of
     the same bytes of the .pth (the anchor; and each into a new array, what any slice costs at
     least), get_slice(key)[row:row + 1] (numpy and torch: a pread of the file on the fast
     path) and get_slice(key).readinto(buffer, row) (a pread into the caller's buffer: no array
     made per read), rows of ck.numpy(key) and of ck[key] (torch)
     copied out (the file mapped: first touches, a page fault each), and os.preadv of the
     mount's data files (the mount, fresh: a FUSE round trip each);
  b. every tensor of that .pth read once (copied into one buffer), warm: ck[key] of each against
     torch.load(mmap=True) of the file (torch 2.x: in the interop root, the file in /dev/shm,
     which the root sees at the same path);
  c. the 10,000-tensor checkpoint: ck.numpy(key) of every key (and with a copy of each, as np.load
     makes one) against np.load of the same arrays as .npy files in tmpfs, and through the mount
     (fast_path=False);
  d. load_into a model of 1.6 GB (96 float32 4096x1024 weights) in a fresh process: peak RSS above
     `import torch` and the model's size, against torch.load + load_state_dict;
  e. from `import ckptfs` to the first tensor of the 4.7 GiB checkpoint (a fresh process): the
     mount (ckptfs.open) and the rest, numpy alone and with torch imported first.

The measurements run in worker processes of scripts/bench_python.py (`--worker OP ...`:
/usr/bin/python3, or the interop root's python3 through scripts/interop-run), which print JSON.
"""

import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from benchlib.common import SCRIPTS, TORCH_PY, MiB, interop_root, log
from benchlib.table import Group

WORKERS = SCRIPTS / "bench_python.py"


def _run(bench, args, timeout=3600, python=TORCH_PY, root=False):
    env = {**os.environ, "CKPTFS_BINARY": bench.ckptfs, "TMPDIR": str(bench.work / "mnt")}
    cmd = ([str(SCRIPTS / "interop-run"), str(WORKERS)] if root
           else [python, str(WORKERS)]) + ["--worker", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        raise RuntimeError(f"{args[0]} exited {r.returncode}" + (f": {lines[-1]}" if lines else ""))
    return json.loads(r.stdout.strip().splitlines()[-1])


def _sample(row, fn):
    if row.failed:
        return
    try:
        fn()
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError, KeyError) as e:
        row.fail(str(e) or type(e).__name__)


def run(bench):
    cfg = bench.cfg
    n, rows, cols = cfg["seq"]
    seq = getattr(bench, "seq_file", None) or bench.generate(
        "seq", f"seq-{n}x{rows}x{cols}.pth", n, rows, cols)
    many = getattr(bench, "many_file", None) or bench.generate(
        "many", f"many-{cfg['many']}.pth", cfg["many"])
    n, rows, cols = cfg["big"]
    big = getattr(bench, "big_file", None) or bench.generate(
        "big", f"big-{n}x{rows}x{cols}.pth", n, rows, cols)
    runs = bench.runs
    ops = cfg["rand_ops"][4096]
    (bench.work / "mnt").mkdir(parents=True, exist_ok=True)
    size = f"{seq.stat().st_size / 1e9:.1f} GB"

    g = Group(f"17a. The Python package: random 4 KiB slices (a row each) of the tensors of "
              f"{seq.name} ({size}), warm, 1 reader, {ops} reads a run")
    ref = g.row("os.preadv of the same bytes of the .pth itself", "IOPS", ref=True,
                higher_better=True)
    array_row = g.row("  the same, each into a new numpy array (np.empty + os.preadv)", "IOPS",
                      higher_better=True)
    slice_row = g.row("ck.get_slice(key, numpy=True)[row:row + 1] (a pread of the file)",
                      "IOPS", higher_better=True)
    slice_row.note = "target >= 0.8x"
    slice_torch = g.row("ck.get_slice(key)[row:row + 1], torch", "IOPS", higher_better=True)
    slice_torch.note = "target >= 0.8x"
    readinto_row = g.row("ck.get_slice(key).readinto(buffer, row) (the caller's buffer)",
                         "IOPS", higher_better=True)
    readinto_row.note = "target >= 0.8x"
    numpy_row = g.row("ck.numpy(key)[row] copied out (the file mapped: first touches)", "IOPS",
                      higher_better=True)
    again_row = g.row("  the same rows again (their pages mapped now)", "IOPS",
                      higher_better=True)
    torch_row = g.row("ck[key][row] copied out, torch (the file mapped: first touches)", "IOPS",
                      higher_better=True)
    mount_row = g.row("os.preadv of the mount's data (fresh mount; before the package)", "IOPS",
                      higher_better=True)
    b = Group(f"17b. The Python package: every tensor of {seq.name} read once (copied into "
              f"one buffer), warm, the file in /dev/shm; torch 2.x (interop root)")
    b_ref = b.row("torch.load(FILE, mmap=True) (torch 2.x)", "s", ref=True)
    b_ck = b.row("ckptfs.open(MNT): ck[key] of each (the file mapped)", "s")
    b_ck.note = "target <= 1/0.9 = 1.11x"
    c = Group(f"17c. The Python package: {cfg['many']} small tensors of {many.name}, warm")
    c_ref = c.row("np.load of each as .npy in tmpfs", "ms", ref=True)
    c_np = c.row("ck.numpy(key) of each (mapped)", "ms")
    c_np.note = "target <= 1.2x"
    c_copy = c.row("ck.numpy(key).copy() of each (the bytes read, as np.load)", "ms")
    c_mount = c.row("ck.numpy(key) of each through the mount (fast_path=False, fresh mount)",
                    "ms")
    c_open = c.row("  ckptfs.open (the mount; not in the rows above)", "ms")
    d = Group(f"17d. The Python package: load a model of {size} (fresh process); peak RSS above "
              "`import torch` + the package")
    d_ref = d.row("torch.load + model.load_state_dict", "MiB", ref=True, extra_unit="s")
    d_ck = d.row("ckptfs.load_into(model, FILE)", "MiB", extra_unit="s")
    d_model = d.row("  the model's parameters", "MiB")
    d_ck.note = "target <= model + largest tensor + 64 MiB"
    e = Group(f"17e. The Python package: from `import ckptfs` to the first tensor of "
              f"{big.name} ({big.stat().st_size / 2**30:.1f} GiB), fresh process")
    e_np = e.row("total, ck.numpy(key) (no torch)", "ms", ref=True)
    e_np_open = e.row("  of which ckptfs.open (the mount)", "ms")
    e_np_rest = e.row("  the rest (import ckptfs, index.json, the tensor)", "ms")
    e_np_rest.note = "target < 100 ms"
    e_np_import = e.row("    of which import ckptfs (numpy's import in it)", "ms")
    e_t = e.row("total, ck[key] (torch imported before)", "ms")
    e_t_rest = e.row("  the rest, but ckptfs.open", "ms")
    e_t_rest.note = "target < 100 ms"
    bench.groups += [g, b, c, d, e]

    # b.'s file in /dev/shm (the root sees it there), mounted from here at a path inside the
    # root, before the root's process starts (its namespace copies the mount).
    root = interop_root()
    shm_dir = mnt_b = daemon = None
    if not (root / "etc" / "ckptfs-interop").is_file():
        for r in (b_ref, b_ck):
            r.fail(f"needs the interop root ({root}: scripts/interop-root)")
    else:
        shm_dir = Path(tempfile.mkdtemp(prefix="ckptfs-bench-python-", dir="/dev/shm"))
        bench.shm_dirs.append(shm_dir)
        shutil.copy(seq, shm_dir / seq.name)
        mnt_b = root / "tmp" / "ckptfs-bench-python-mnt"
        mnt_b.mkdir(parents=True, exist_ok=True)
        daemon = bench.procs.mount_foreground([bench.ckptfs, "-f", str(shm_dir / seq.name),
                                               str(mnt_b)], mnt_b)
    npy_dir = Path(tempfile.mkdtemp(prefix="ckptfs-bench-npy-", dir="/dev/shm"))
    bench.shm_dirs.append(npy_dir)
    _run(bench, ["npy_copies", many, npy_dir])
    try:
        for run in range(runs):
            log(f"python: run {run + 1}/{runs}")
            bench.warm(seq)

            def random_reads():
                out = _run(bench, ["random", seq, ops, run])
                if out["paths"] != ["file"]:
                    raise RuntimeError(f"the fast path was not taken: {out['paths']}")
                ref.add(out["file"])
                array_row.add(out["file_array"])
                numpy_row.add(out["numpy"])
                again_row.add(out["numpy_again"])
                torch_row.add(out["torch"])
                slice_row.add(out["get_slice"])
                slice_torch.add(out["get_slice_torch"])
                readinto_row.add(out["readinto"])
                mount_row.add(out["mount"])
            _sample(ref, random_reads)

            if daemon is not None:
                inside = "/" + str(mnt_b.relative_to(root))
                _sample(b_ref, lambda: b_ref.add(statistics.median(_run(
                    bench, ["read_all", "torch", shm_dir / seq.name, 3], root=True)["times"])))

                def read_all_ckptfs():
                    out = _run(bench, ["read_all", "ckptfs", inside, 3], root=True)
                    if out["paths"] != ["file"]:
                        raise RuntimeError(f"the fast path was not taken: {out['paths']}")
                    b_ck.add(statistics.median(out["times"]))
                _sample(b_ck, read_all_ckptfs)

            def many_reads():
                out = _run(bench, ["many", many, npy_dir])
                if out["paths"] != ["file"]:
                    raise RuntimeError(f"the fast path was not taken: {out['paths']}")
                c_ref.add(out["tmpfs"] * 1e3)
                c_np.add(out["numpy"] * 1e3)
                c_copy.add(out["numpy_copy"] * 1e3)
                c_mount.add(out["mount"] * 1e3)
                c_open.add(out["open"] * 1e3)
            _sample(c_ref, many_reads)

            def load(row, mode):
                out = _run(bench, ["load_into", mode, seq])
                row.add(out["above_kib"] / 1024, out["seconds"])
                if mode == "ckptfs":
                    d_model.add(out["model_bytes"] / MiB)
                    d_ck.note = (f"target <= model + largest tensor ({out['largest'] / MiB:.0f}"
                                 " MiB) + 64 MiB")
            _sample(d_ref, lambda: load(d_ref, "torch"))
            _sample(d_ck, lambda: load(d_ck, "ckptfs"))

            def first(with_torch):
                out = _run(bench, ["first", big, "head.bias", int(with_torch)])
                if out["path"] != "file":
                    raise RuntimeError(f"the fast path was not taken: {out['path']}")
                if with_torch:
                    e_t.add(out["total"] * 1e3)
                    e_t_rest.add((out["total"] - out["open"]) * 1e3)
                else:
                    e_np.add(out["total"] * 1e3)
                    e_np_open.add(out["open"] * 1e3)
                    e_np_rest.add((out["total"] - out["open"]) * 1e3)
                    e_np_import.add(out["import"] * 1e3)
            _sample(e_np, lambda: first(False))
            _sample(e_t, lambda: first(True))
    finally:
        if daemon is not None:
            bench.procs.unmount(mnt_b, daemon)
