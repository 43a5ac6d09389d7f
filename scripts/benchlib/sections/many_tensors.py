# SPDX-License-Identifier: MIT
"""Section 3, --only many: mount time of a 10,000-tensor checkpoint (until the root is listed;
until index.json is read) against fuse-zip (until its root is listed; until its whole listing
is read) and torch.load; each daemon's RSS after the mount and the root's listing; np.load of
every tensor.npy through the mount.

Section 5 (peak_rss.py) shows the RSS rows that run() records.
"""

import json
import os
import time

import ckptfs_mounts  # scripts/: views_dir
from benchlib.common import TORCH_PY, BenchError, human_bytes, log, now, read_status_kib
from benchlib.processes import daemon_pids
from benchlib.table import Group, Row, measure


def run(bench):
    n = bench.cfg["many"]
    f = bench.many_file
    g = Group(f"3. Mount and load, {n:,}-tensor checkpoint ({human_bytes(f.stat().st_size)})")
    ref = g.row("torch.load, warm process (torch imported)", "ms", ref=True)
    full = g.row("python3 -c 'import torch; torch.load(FILE)'", "ms")
    root = g.row("ckptfs FILE MNT, until its root is listed", "ms")
    zroot = g.row("fuse-zip -r FILE MNT, until its root is listed", "ms")
    root.note = "target: <= fuse-zip's"
    zroot.note = "its root: the zip's top folder"
    mount = g.row("ckptfs FILE MNT, until index.json is read", "ms")
    zmount = g.row("fuse-zip -r FILE MNT, until the listing is read", "ms")
    npfirst = g.row(f"np.load of all {n:,} tensor.npy, fresh mount", "ms")
    npagain = g.row(f"np.load of all {n:,} tensor.npy, again (same mount)", "ms")
    npfirst.note = "target: well under 1 s"
    bench.groups.append(g)
    bench.rss_many_torch = Row("torch.load (python3 -c, peak RSS)", "MiB", ref=True)
    bench.rss_many_ckptfs = Row(f"ckptfs daemon VmHWM, after np.load of all {n:,}", "MiB")
    bench.rss_mount_ckptfs = Row("ckptfs daemon RSS after the mount and its root's listing",
                                "MiB")
    bench.rss_mount_ckptfs.note = "target: <= 10 MiB"
    bench.rss_mount_fz = Row("fuse-zip daemon RSS after the mount and its root's listing",
                            "MiB")
    if not bench.fusezip:
        for r in (zmount, zroot, bench.rss_mount_fz):
            r.fail("fuse-zip not installed")
    bench.warm(f)
    log("torch.load once in the worker (warm-up)")
    measure(ref, lambda: bench.worker.call("torch_load", str(f)))
    for run in range(bench.runs):
        bench.progress("10k-tensor checkpoint", run)
        measure(ref, lambda: ref.add(bench.worker.call("torch_load", str(f)) * 1e3))

        def py():
            wall, rss, _ = bench.procs.run(
                [TORCH_PY, "-c", "import torch, sys; torch.load(sys.argv[1])", str(f)])
            full.add(wall * 1e3)
            bench.rss_many_torch.add(rss / 1024)
        measure(full, py)

        def listed(cmd, mnt, row, rss_row):
            """`cmd` mounts on `mnt` and returns once ready; the time until os.listdir of the
            root returns, and the daemon's RSS then."""
            bench.procs.mounts.add(str(mnt))
            t0 = now()
            bench.procs.run(cmd)
            try:
                names = os.listdir(mnt)
                row.add((now() - t0) * 1e3)
                if not names:
                    raise BenchError("an empty root")
                pids = daemon_pids(cmd[0], mnt)
                if len(pids) != 1:
                    raise BenchError(f"{len(pids)} daemons for {mnt}")
                rss_row.add(read_status_kib(pids[0], "VmRSS") / 1024)
            finally:
                bench.procs.unmount(mnt)
        measure(root, lambda: listed([bench.ckptfs, str(f), str(bench.mnt)], bench.mnt, root,
                                     bench.rss_mount_ckptfs))
        measure(zroot, lambda: listed(["fuse-zip", "-r", str(f), str(bench.zmnt)], bench.zmnt,
                                      zroot, bench.rss_mount_fz))

        def ck():
            bench.procs.mounts.add(str(bench.mnt))
            t0 = now()
            bench.procs.run([bench.ckptfs, str(f), str(bench.mnt)])
            try:
                while True:
                    try:
                        with open(ckptfs_mounts.views_dir(bench.mnt) / "index.json", "rb") as fh:
                            data = fh.read()
                        break
                    except OSError:
                        if now() - t0 > 60:
                            raise
                        time.sleep(0.0005)
                mount.add((now() - t0) * 1e3)
                if json.loads(data)["tensors"] < n:
                    raise BenchError("index.json lists too few tensors")
            finally:
                bench.procs.unmount(bench.mnt)
        measure(mount, ck)

        def fz():
            bench.procs.mounts.add(str(bench.zmnt))
            t0 = now()
            bench.procs.run(["fuse-zip", "-r", str(f), str(bench.zmnt)])
            try:
                while True:
                    files = sum(len(fs) for _, _, fs in os.walk(bench.zmnt))
                    if files >= n:
                        break
                    if now() - t0 > 60:
                        raise BenchError(f"only {files} files listed after 60 s")
                    time.sleep(0.0005)
                zmount.add((now() - t0) * 1e3)
            finally:
                bench.procs.unmount(bench.zmnt)
        measure(zmount, fz)

        def npl():
            p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(f), str(bench.mnt)],
                                            bench.mnt)
            try:
                r = bench.worker.call("np_load_all", str(bench.mnt))
                if r["count"] != n:
                    raise BenchError(f"loaded {r['count']} tensors")
                npfirst.add(r["first"] * 1e3)
                npagain.add(r["again"] * 1e3)
                bench.rss_many_ckptfs.add(read_status_kib(p.pid, "VmHWM") / 1024)
            finally:
                bench.procs.unmount(bench.mnt, p)
        measure(npfirst, npl)
    if npfirst.failed:
        npagain.fail(npfirst.failed)
        bench.rss_many_ckptfs.fail(npfirst.failed)
    for r, src in ((bench.rss_mount_ckptfs, root), (bench.rss_mount_fz, zroot)):
        if src.failed:
            r.fail(src.failed)
    if full.failed:
        bench.rss_many_torch.fail(full.failed)
