# SPDX-License-Identifier: MIT
"""Section 4, --only first: time to the first tensor of a 4.7 GiB checkpoint (mount + np.load of
one small tensor), from a process's start and from a warm process, against torch.load of the
whole file.
"""

import statistics

from benchlib.common import TORCH_PY, KiB, human_bytes, now
from benchlib.table import Group, measure


def run(bench):
    f = bench.big_file
    entries = bench.inspect(f)
    small = min(entries, key=lambda e: e["nbytes"])
    npy = f"{small['path']}/tensor.npy"
    g = Group(f"4. Time to the first tensor, {human_bytes(f.stat().st_size)} checkpoint "
              f"({len(entries)} tensors; np.load of {small['key']}, {small['nbytes']} bytes)")
    ref = g.row("torch.load whole file, from process start (python3 -c)", "ms", ref=True)
    ck = g.row("ckptfs mount + np.load, from process start (CLI, python3 -c)", "ms")
    ref_w = g.row("torch.load whole file, warm process", "ms")
    ck_w = g.row("ckptfs mount + np.load, warm process (numpy imported)", "ms")
    bench.groups.append(g)
    rss = []
    bench.warm(f)
    for run in range(bench.runs):
        bench.progress("time to first tensor", run)

        def torch_ps():
            wall, maxrss, _ = bench.procs.run(
                [TORCH_PY, "-c", "import torch, sys; torch.load(sys.argv[1])", str(f)])
            ref.add(wall * 1e3)
            rss.append(maxrss)
        measure(ref, torch_ps)

        def ck_ps():
            bench.procs.mounts.add(str(bench.mnt))
            try:
                t0 = now()
                bench.procs.run([bench.ckptfs, str(f), str(bench.mnt)])
                bench.procs.run([TORCH_PY, "-c", "import numpy, sys; numpy.load(sys.argv[1])",
                                str(bench.mnt / npy)])
                ck.add((now() - t0) * 1e3)
            finally:
                bench.procs.unmount(bench.mnt)
        measure(ck, ck_ps)

        measure(ref_w, lambda: ref_w.add(bench.worker.call("torch_load", str(f)) * 1e3))

        def ck_warm():
            bench.procs.mounts.add(str(bench.mnt))
            try:
                r = bench.worker.call("mount_np_load", bench.ckptfs, str(f), str(bench.mnt), npy)
                ck_w.add(r["seconds"] * 1e3)
            finally:
                bench.procs.unmount(bench.mnt)
        measure(ck_w, ck_warm)
    if rss:
        ref.note = f"peak RSS {human_bytes(statistics.median(rss) * KiB)}"
