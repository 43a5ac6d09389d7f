# SPDX-License-Identifier: MIT
"""Section 13, --only dcp: a PyTorch Distributed Checkpoint of 1.5 GiB written by 4 gloo ranks
(torch 2.x of the interop root, scripts/interop-root; generated there by
scripts/bench_dcp_root.py, which also runs torch's side): consolidated to one file by
`cp MNT/.ckptfs/model.safetensors` and by `ckptfs pack` (.safetensors, .pth), against torch's
dcp_to_torch_save: time and peak RSS of each (the daemon's VmHWM; pack's and torch's process);
and one layer read from the mount (np.load of its tensor.npy) against
torch.distributed.checkpoint.load of the whole checkpoint, and of that one key (which DCP can do
alone), time and peak RSS. Needs the interop root and GNU time.
"""

import json
import os
import shutil
from pathlib import Path

import ckptfs_mounts  # scripts/: views_dir
from benchlib.common import (ROOT, TORCH_PY, BenchError, describe_storage, human_bytes,
                             interop_root, log, read_status_kib)
from benchlib.readers import read_files
from benchlib.table import Group, measure


def run(bench):
    root = interop_root()
    runner = ROOT / "scripts" / "interop-run"
    helper = ROOT / "scripts" / "bench_dcp_root.py"
    gib = 0.2 if bench.args.quick else 1.5
    inside = Path("/tmp") / f"ckptfs-bench-dcp-{gib:g}"  # as the root sees it
    work = root / inside.relative_to("/")
    directory, out = work / "dcp4", work / "out"
    g = Group(f"13. A PyTorch DCP checkpoint of {gib:g} GiB (4 ranks, 24 layers Shard(0)) "
              f"consolidated to one file, against torch 2.x's dcp_to_torch_save (warm page "
              f"cache); seconds")
    ref = g.row("dcp_to_torch_save(DIR, OUT.pt) (the interop root's torch)", "s", ref=True)
    cp = g.row("cp MNT/.ckptfs/model.safetensors OUT, fresh mount", "s")
    pack_st = g.row("ckptfs pack DIR OUT.safetensors", "s")
    pack_pth = g.row("ckptfs pack DIR OUT.pth", "s")
    for r in (cp, pack_st, pack_pth):
        r.note = "target <= 1.5x"
    rss = Group("13. Peak RSS of each way (MiB): torch's process (import included), ckptfs's "
                "daemon (VmHWM) during cp, pack's process (GNU time's %M)")
    rref = rss.row("dcp_to_torch_save: its process", "MiB", ref=True)
    rbase = rss.row("  of which torch's import alone", "MiB")
    rcp = rss.row("ckptfs daemon during cp MNT/.ckptfs/model.safetensors", "MiB")
    rst = rss.row("ckptfs pack DIR OUT.safetensors", "MiB")
    rpth = rss.row("ckptfs pack DIR OUT.pth", "MiB")
    for r in (rcp, rst, rpth):
        r.note = "target <= 64 MiB"
    one = Group("13. One layer (layers.0.weight) of the checkpoint: read from a fresh mount "
                "(np.load of its tensor.npy) against torch's loads; seconds, peak RSS in the "
                "note (MiB: the reader's process; for the mount, + the daemon's VmHWM)")
    whole = one.row("dcp.load of the whole checkpoint into full tensors", "s", ref=True,
                    extra_unit="MiB")
    key = one.row("dcp.load of that one key", "s", extra_unit="MiB")
    mounted = one.row("np.load(MNT/layers.0.weight/tensor.npy), fresh mount", "s",
                      extra_unit="MiB")
    bench.groups += [g, rss, one]
    rows = (ref, cp, pack_st, pack_pth, rref, rbase, rcp, rst, rpth, whole, key, mounted)
    if not (root / "usr" / "bin" / "python3").exists():
        for r in rows:
            r.fail(f"needs the interop root at {root} (scripts/interop-root)")
        return
    gnu_time = shutil.which("time", path="/usr/bin:/bin")

    def in_root(*args, timeout=3600):
        _, _, stdout = bench.procs.run([str(runner), str(helper), *map(str, args)],
                                      timeout=timeout)
        return json.loads(stdout.strip().splitlines()[-1])

    if not (directory / ".metadata").exists():
        log(f"13: writing a {gib:g} GiB DCP checkpoint with 4 ranks in the interop root")
        shutil.rmtree(directory, ignore_errors=True)
        directory.parent.mkdir(parents=True, exist_ok=True)
        in_root("make", inside / "dcp4", gib, 4)
    files = sorted(directory.iterdir())
    total = sum(f.stat().st_size for f in files)
    out.mkdir(exist_ok=True)
    g.title += f"; {human_bytes(total)} in {len(files)} files, written to {describe_storage(out)}"
    out.mkdir(exist_ok=True)

    def clear():
        for p in out.iterdir():
            p.unlink()
        os.sync()

    def warm():
        read_files(files)

    def timed(cmd, row, rss_row):
        clear()
        warm()
        rss_file = work / ".maxrss"
        wall, _, _ = bench.procs.run([gnu_time, "-f", "%M", "-o", str(rss_file), *cmd])
        row.add(wall)
        rss_row.add(int(rss_file.read_text().split()[-1]) / 1024)

    def reference():
        clear()
        warm()
        r = in_root("consolidate", inside / "dcp4", inside / "out" / "ref.pt")
        ref.add(r["seconds"])
        rref.add(r["maxrss_mib"])
        rbase.add(in_root("baseline")["maxrss_mib"])

    def mounted_cp():
        clear()
        warm()
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(directory), str(bench.mnt)],
                                        bench.mnt)
        try:
            views = ckptfs_mounts.views_dir(bench.mnt)
            wall, _, _ = bench.procs.run(["cp", str(views / "model.safetensors"),
                                         str(out / "cp.safetensors")])
            cp.add(wall)
            rcp.add(read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(bench.mnt, p)

    def one_layer():
        warm()
        r = in_root("load", inside / "dcp4")
        whole.add(r["seconds"], r["maxrss_mib"])
        r = in_root("load", inside / "dcp4", "layers.0.weight")
        key.add(r["seconds"], r["maxrss_mib"])
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(directory), str(bench.mnt)],
                                        bench.mnt)
        try:
            code = ("import json, resource, sys, time, numpy as np\n"
                    "t = time.monotonic(); a = np.load(sys.argv[1]); s = time.monotonic() - t\n"
                    "print(json.dumps([s, a.nbytes, resource.getrusage("
                    "resource.RUSAGE_SELF).ru_maxrss / 1024]))")
            _, _, stdout = bench.procs.run([TORCH_PY, "-c", code,
                                           str(bench.mnt / "layers.0.weight" / "tensor.npy")])
            seconds, nbytes, client = json.loads(stdout)
            if nbytes == 0:
                raise BenchError("layers.0.weight read empty")
            mounted.add(seconds, client + read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(bench.mnt, p)

    for run in range(bench.runs):
        bench.progress("dcp", run)
        measure(ref, reference)
        measure(cp, mounted_cp)
        if gnu_time:
            measure(pack_st, lambda: timed([bench.ckptfs, "pack", str(directory),
                                            str(out / "pack.safetensors")], pack_st, rst))
            measure(pack_pth, lambda: timed([bench.ckptfs, "pack", str(directory),
                                             str(out / "pack.pth")], pack_pth, rpth))
        else:
            for r in (pack_st, pack_pth, rst, rpth):
                r.fail("needs GNU time (/usr/bin/time)")
        measure(mounted, one_layer)
    clear()
    for r, failed_by in ((rref, ref), (rbase, ref), (rcp, cp), (key, mounted),
                         (whole, mounted)):
        if failed_by.failed and not r.samples:
            r.fail(failed_by.failed)
