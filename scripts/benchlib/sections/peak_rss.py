# SPDX-License-Identifier: MIT
"""Section 5, --only rss (with sequential and many, whose runs measure most of its rows): peak RSS
of the ckptfs daemon (VmHWM) after reading everything, against torch.load's (python3 -c) and
fuse-zip's; with `import torch` alone as a baseline.
"""

from benchlib.common import TORCH_PY, human_bytes
from benchlib.table import Group, measure


def run(bench):
    if not (bench.wanted("sequential") and bench.wanted("many")):
        return  # its rows are measured by those sections
    f = bench.seq_file
    g = Group(f"5. Peak RSS: {f.name} ({human_bytes(f.stat().st_size)}), every tensor read")
    torch_seq = g.row(f"torch.load of {f.name} (python3 -c, peak RSS)", "MiB", ref=True)
    g.rows.append(bench.rss_seq_ckptfs)
    g.rows.append(bench.rss_seq_fz)
    base = g.row("python3 -c 'import torch' (baseline, peak RSS)", "MiB")
    bench.groups.append(g)
    g2 = Group(f"5. RSS: {bench.cfg['many']:,}-tensor checkpoint, mounted; every tensor loaded")
    g2.rows += [bench.rss_many_torch, bench.rss_mount_ckptfs, bench.rss_mount_fz,
                bench.rss_many_ckptfs]
    bench.groups.append(g2)
    for run in range(bench.runs):
        bench.progress("peak RSS of torch.load", run)

        def t():
            bench.warm(f)
            _, maxrss, _ = bench.procs.run(
                [TORCH_PY, "-c", "import torch, sys; torch.load(sys.argv[1])", str(f)])
            torch_seq.add(maxrss / 1024)
        measure(torch_seq, t)

        def b():
            _, maxrss, _ = bench.procs.run([TORCH_PY, "-c", "import torch"])
            base.add(maxrss / 1024)
        measure(base, b)
