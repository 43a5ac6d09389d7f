# SPDX-License-Identifier: MIT
"""Section 2, --only random: random 4 KiB and 1 MiB reads (1, 2, 4 reader processes, os.preadv)
inside the tensors' `data` files on a fresh mount, against the same reads of the same bytes in
the .pth.
"""

import os
import random

from benchlib.common import KiB, MiB, BenchError
from benchlib.readers import random_reads
from benchlib.table import Group, measure


def run(bench):
    fd_pth = os.open(bench.seq_file, os.O_RDONLY)
    try:
        _random(bench, fd_pth)
    finally:
        os.close(fd_pth)


def _random(bench, fd_pth):
    rows = {}
    for bs in (4 * KiB, MiB):
        label = "4 KiB" if bs == 4 * KiB else "1 MiB"
        cands = [e for e in bench.seq_entries
                 if e["contiguous"] and not e["broken"] and e["nbytes"] >= bs]
        g = Group(f"2. Random {label} reads (4 KiB-aligned offsets in the tensors' data), "
                  f"{bench.cfg['rand_ops'][bs]} reads per run, fresh mount")
        bench.groups.append(g)
        for procs in (1, 2, 4):
            unit, extra = ("IOPS", "GB/s") if bs == 4 * KiB else ("GB/s", "IOPS")
            ref = g.row(f".pth file itself, {procs} reader process{'es' * (procs > 1)}",
                        unit, ref=True, higher_better=True, extra_unit=extra)
            ck = g.row(f"ckptfs, {procs} reader process{'es' * (procs > 1)}", unit,
                       higher_better=True, extra_unit=extra)
            ck.ref_row = ref
            rows[bs, procs] = (ref, ck, cands)
            if not cands:
                ref.fail(f"no tensor of {label} or more")
                ck.fail(f"no tensor of {label} or more")
    for run in range(bench.runs):
        bench.progress("random reads", run)
        for bs in (4 * KiB, MiB):
            for nproc in (1, 2, 4):
                ref, ck, cands = rows[bs, nproc]
                if not cands:
                    continue
                rng = random.Random(f"{run}-{bs}-{nproc}")
                weights = [e["nbytes"] - bs + 1 for e in cands]
                count = bench.cfg["rand_ops"][bs]
                picks = rng.choices(range(len(cands)), weights=weights, k=count)
                ops = [(i, rng.randrange(0, (cands[i]["nbytes"] - bs) // 4096 + 1) * 4096)
                       for i in picks]
                split = [ops[w::nproc] for w in range(nproc)]

                def record(row, result):
                    n, k, dt = result
                    if n != k * bs:
                        raise BenchError(f"short reads: {n} bytes for {k} reads")
                    if bs == 4 * KiB:
                        row.add(k / dt, n / dt / 1e9)
                    else:
                        row.add(n / dt / 1e9, k / dt)

                def pth():
                    bench.warm(bench.seq_file)
                    per = [[(fd_pth, cands[i]["file_offset"] + off) for i, off in part]
                           for part in split]
                    record(ref, random_reads(per, bs))
                measure(ref, pth)

                def mount():
                    p = bench.procs.mount_foreground(
                        [bench.ckptfs, "-f", str(bench.seq_file), str(bench.mnt)], bench.mnt)
                    fds = []
                    try:
                        fds = [os.open(bench.mnt / e["path"] / "data", os.O_RDONLY)
                               for e in cands]
                        per = [[(fds[i], off) for i, off in part] for part in split]
                        record(ck, random_reads(per, bs))
                    finally:
                        for fd in fds:
                            os.close(fd)
                        bench.procs.unmount(bench.mnt, p)
                measure(ck, mount)
    for (bs, nproc), (ref, ck, _) in rows.items():
        one = rows[bs, 1][0].median()
        if nproc > 1 and ref.median() and one:
            ref.note = f"{ref.median() / one:.2f}x the 1-reader .pth"
