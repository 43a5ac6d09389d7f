# SPDX-License-Identifier: MIT
"""Section 9, --only pagecache: how much the page cache grows when every tensor's data is read
through a fresh mount (the mount's pages and the checkpoint's, counted with mincore(2); the
checkpoint's pages dropped first), against fuse-zip; that first read and a re-read;
np.load(mmap_mode="r") of every tensor.npy, its bytes checked.
"""

import ckptfs_pagecache  # scripts/: mincore, eviction
from benchlib.common import MiB, BenchError, human_bytes, read_meminfo_kib
from benchlib.readers import read_files
from benchlib.table import Group, measure


def run(bench):
    entries = bench.seq_entries
    total = sum(e["nbytes"] for e in entries)
    f = bench.seq_file
    g = Group(f"9. Page cache: every tensor's data of {f.name} ({human_bytes(total)}) read "
              f"through a fresh mount, the checkpoint's pages dropped before (mincore(2) counts)")
    read = g.row("bytes read through the mount", "MiB", ref=True)
    grown = g.row("ckptfs: page cache added (the mount's pages + the checkpoint's)", "MiB")
    grown.note = "target: <= 1.1x the bytes read"
    meminfo = g.row("ckptfs: Cached added in /proc/meminfo (the whole machine's)", "MiB")
    meminfo.note = "other work on the machine adds to it"
    zgrown = g.row("fuse-zip: page cache added (its mount's pages + the zip's)", "MiB")
    first = g.row("ckptfs, first read (the checkpoint not cached)", "GB/s", higher_better=True)
    again = g.row("ckptfs, re-read (same mount)", "GB/s", higher_better=True)
    again.note = "from the mount's page cache: the checkpoint is not read again"
    mapped = g.row(f"np.load(mmap_mode=\"r\") of all {len(entries)} tensor.npy, bytes "
                   f"compared with data", "ms")
    bench.groups.append(g)
    if not bench.fusezip:
        zgrown.fail("fuse-zip not installed")
    records = sorted({e["storage"]["record"] for e in entries})
    for run in range(bench.runs):
        bench.progress("page cache", run)

        def ck():
            p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(f), str(bench.mnt)],
                                            bench.mnt)
            try:
                paths = [bench.mnt / e["path"] / "data" for e in entries]
                ckptfs_pagecache.evict(f)
                before = ckptfs_pagecache.resident_bytes(f)
                cached = read_meminfo_kib("Cached")
                n, dt = read_files(paths)
                if n != total:
                    raise BenchError(f"read {n} bytes, expected {total}")
                added = (sum(ckptfs_pagecache.resident_bytes(x) for x in paths)
                         + ckptfs_pagecache.resident_bytes(f) - before)
                meminfo.add((read_meminfo_kib("Cached") - cached) / 1024)
                read.add(n / MiB)
                grown.add(added / MiB)
                first.add(n / dt / 1e9)
                left = ckptfs_pagecache.resident_bytes(f)
                n, dt = read_files(paths)
                again.add(n / dt / 1e9)
                if ckptfs_pagecache.resident_bytes(f) > left + 16 * MiB:
                    raise BenchError("the re-read read the checkpoint again")
            finally:
                bench.procs.unmount(bench.mnt, p)
        measure(grown, ck)

        def npy():
            p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(f), str(bench.mnt)],
                                            bench.mnt)
            try:
                r = bench.worker.call("np_load_mapped", str(bench.mnt),
                                     [e["path"] for e in entries])
                mapped.add(r["seconds"] * 1e3)
            finally:
                bench.procs.unmount(bench.mnt, p)
        measure(mapped, npy)

        def fz():
            p = bench.procs.mount_foreground(
                ["fuse-zip", "-f", "-r", str(f), str(bench.zmnt)], bench.zmnt)
            try:
                paths = [bench.zmnt / r for r in records]
                ckptfs_pagecache.evict(f)
                before = ckptfs_pagecache.resident_bytes(f)
                read_files(paths)
                added = (sum(ckptfs_pagecache.resident_bytes(x) for x in paths)
                         + ckptfs_pagecache.resident_bytes(f) - before)
                zgrown.add(added / MiB)
            finally:
                bench.procs.unmount(bench.zmnt, p)
        measure(zgrown, fz)
    for r in (read, meminfo, first, again):
        if grown.failed:
            r.fail(grown.failed)
    bench.warm(f)
