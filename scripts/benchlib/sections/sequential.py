# SPDX-License-Identifier: MIT
"""Section 1, --only sequential: sequential read (1 MiB reads) of every tensor's `data` through the
mount, first read on a fresh mount and re-read on the same mount, against the warm .pth file
itself and against fuse-zip reading the same zip records.

--only cold, with --cold: both first reads from a cold page cache (the checkpoint on disk; the
system's page cache dropped before each read, as root).

Section 5 (peak_rss.py) shows each daemon's VmHWM after these reads, which run() records.
"""

import os

import ckptfs_pagecache  # scripts/: large folios of the page cache
from benchlib.common import BenchError, describe_storage, human_bytes, read_status_kib
from benchlib.readers import drop_page_cache, in_child, read_files, write_new_memory
from benchlib.table import Group, Row, measure


def run(bench):
    entries = bench.seq_entries
    total = sum(e["nbytes"] for e in entries)
    size = bench.seq_file.stat().st_size
    g = Group(f"1. Sequential read, 1 MiB reads: every tensor's data of {bench.seq_file.name} "
              f"({len(entries)} tensors, {human_bytes(total)})")
    ref = g.row(".pth file itself, warm page cache", "GB/s", ref=True, higher_better=True)
    fresh = g.row("new memory written once (what a first read must fill)", "GB/s",
                  higher_better=True)
    fresh.note = ("1 MiB copies into anonymous pages never touched (faults, zeroing, copy); "
                  "a first read through the mount fills as many new page-cache pages")
    first = g.row("ckptfs, first read (fresh mount)", "GB/s", higher_better=True)
    again = g.row("ckptfs, re-read (same mount)", "GB/s", higher_better=True)
    zfirst = g.row("fuse-zip, first read (fresh mount)", "GB/s", higher_better=True)
    zagain = g.row("fuse-zip, re-read (same mount)", "GB/s", higher_better=True)
    ref.note = f"whole file, {human_bytes(size)}"
    bench.groups.append(g)
    bench.rss_seq_ckptfs = Row("ckptfs daemon VmHWM, after reading all data twice", "MiB")
    bench.rss_seq_fz = Row("fuse-zip daemon VmHWM, after reading all records twice", "MiB")
    records = sorted({e["storage"]["record"] for e in entries})
    if not bench.fusezip:
        for r in (zfirst, zagain, bench.rss_seq_fz):
            r.fail("fuse-zip not installed")
    bench.warm(bench.seq_file)
    for run in range(bench.runs):
        bench.progress("sequential read", run)

        def pth():
            bench.warm(bench.seq_file)
            n, dt = read_files([bench.seq_file])
            ref.add(n / dt / 1e9)
        measure(ref, pth)

        def new_memory():
            fresh.add(in_child(write_new_memory, size) / 1e9)
        measure(fresh, new_memory)

        def ck():
            bench.warm(bench.seq_file)
            p = bench.procs.mount_foreground(
                [bench.ckptfs, "-f", str(bench.seq_file), str(bench.mnt)], bench.mnt)
            try:
                paths = [bench.mnt / e["path"] / "data" for e in entries]
                n, dt = read_files(paths)
                if n != total:
                    raise BenchError(f"read {n} bytes, expected {total}")
                first.add(n / dt / 1e9)
                n, dt = read_files(paths)
                again.add(n / dt / 1e9)
                bench.rss_seq_ckptfs.add(read_status_kib(p.pid, "VmHWM") / 1024)
                # Why a re-read is slower than the warm .pth: the folios each one copies from.
                mount_share = ckptfs_pagecache.large_folio_share(paths[0])
                file_share = ckptfs_pagecache.large_folio_share(bench.seq_file)
                if mount_share is not None and file_share is not None:
                    again.note = (f"target >= 0.9x; large folios: {mount_share:.0%} of the "
                                  f"mount's cached pages, {file_share:.0%} of the .pth's "
                                  "(the rest: 4 KiB pages, one copy step each)")
            finally:
                bench.procs.unmount(bench.mnt, p)
        measure(first, ck)

        def fz():
            bench.warm(bench.seq_file)
            p = bench.procs.mount_foreground(
                ["fuse-zip", "-f", "-r", str(bench.seq_file), str(bench.zmnt)], bench.zmnt)
            try:
                paths = [bench.zmnt / r for r in records]
                n, dt = read_files(paths)
                zfirst.add(n / dt / 1e9)
                n, dt = read_files(paths)
                zagain.add(n / dt / 1e9)
                bench.rss_seq_fz.add(read_status_kib(p.pid, "VmHWM") / 1024)
            finally:
                bench.procs.unmount(bench.zmnt, p)
        measure(zfirst, fz)
    for r, src in ((again, first), (zagain, zfirst), (bench.rss_seq_ckptfs, first),
                   (bench.rss_seq_fz, zfirst)):
        if src.failed:
            r.fail(src.failed)


def run_cold(bench):
    if not bench.args.cold:  # --only cold alone runs nothing without --cold
        return
    entries = bench.seq_entries
    total = sum(e["nbytes"] for e in entries)
    g = Group(f"1. Sequential read, 1 MiB reads, cold page cache (dropped before each read): "
              f"{bench.seq_file.name} on {describe_storage(bench.seq_file)}")
    ref = g.row(".pth file itself, cold", "GB/s", ref=True, higher_better=True)
    first = g.row("ckptfs, first read (fresh mount), cold", "GB/s", higher_better=True)
    bench.groups.append(g)
    if os.geteuid() != 0:
        for r in (ref, first):
            r.fail("dropping the page cache needs root")
        return
    for run in range(bench.runs):
        bench.progress("sequential read, cold", run)

        def pth():
            drop_page_cache()
            n, dt = read_files([bench.seq_file])
            ref.add(n / dt / 1e9)
        measure(ref, pth)

        def ck():
            drop_page_cache()
            p = bench.procs.mount_foreground(
                [bench.ckptfs, "-f", str(bench.seq_file), str(bench.mnt)], bench.mnt)
            try:
                n, dt = read_files([bench.mnt / e["path"] / "data" for e in entries])
                if n != total:
                    raise BenchError(f"read {n} bytes, expected {total}")
                first.add(n / dt / 1e9)
            finally:
                bench.procs.unmount(bench.mnt, p)
        measure(first, ck)
    bench.warm(bench.seq_file)
