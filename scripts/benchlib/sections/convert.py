# SPDX-License-Identifier: MIT
"""Section 11, --only convert: conversion on read (-o dtype=float16, bfloat16): the first read of
every tensor's data through a converted mount against the same read through an unconverted one,
warm and (with --cold) cold.
"""

import os

from benchlib.common import FLOAT_DTYPES, BenchError, human_bytes
from benchlib.readers import drop_page_cache, read_files
from benchlib.table import Group, measure


def run(bench):
    entries = [e for e in bench.seq_entries if not e["broken"]]
    stored = sum(e["nbytes"] for e in entries)
    served = {None: stored}
    for target in ("float16", "bfloat16"):
        served[target] = sum(e["nbytes"] * 2 // (4 if e["dtype"] == "float32" else
                                                 8 if e["dtype"] == "float64" else 2)
                             if e["dtype"] in FLOAT_DTYPES else e["nbytes"]
                             for e in entries)
    title = (f"11. Conversion on read (-o dtype): the first read of every tensor's data of "
             f"{bench.seq_file.name} ({human_bytes(stored)} stored), fresh mount; GB/s of "
             f"stored bytes")
    groups = {"warm": Group(title + ", the .pth warm")}
    if bench.args.cold:
        groups["cold"] = Group(title + ", cold page cache (dropped before each read)")
    rows = {}
    for cache, g in groups.items():
        for target in (None, "float16", "bfloat16"):
            label = (f"ckptfs -o dtype={target}, first read" if target else
                     "ckptfs (no conversion), first read")
            r = g.row(label + (", cold" if cache == "cold" else ""), "GB/s", ref=not target,
                      higher_better=True, extra_unit="GB/s served")
            if target:
                r.note = "target >= 0.8x"
            if cache == "cold" and os.geteuid() != 0:
                r.fail("dropping the page cache needs root")
            rows[cache, target] = r
    bench.groups += list(groups.values())

    def first_read(target, cache):
        row = rows[cache, target]
        if cache == "cold":
            drop_page_cache()
        options = ["-o", f"dtype={target}"] if target else []
        p = bench.procs.mount_foreground(
            [bench.ckptfs, "-f", *options, str(bench.seq_file), str(bench.mnt)], bench.mnt)
        try:
            n, dt = read_files([bench.mnt / e["path"] / "data" for e in entries])
            if n != served[target]:
                raise BenchError(f"read {n} bytes, expected {served[target]}")
            row.add(stored / dt / 1e9, n / dt / 1e9)
        finally:
            bench.procs.unmount(bench.mnt, p)

    for run in range(bench.runs):
        bench.progress("conversion on read", run)
        for cache in groups:
            for target in (None, "float16", "bfloat16"):
                # Before each: an unconverted first read leaves the checkpoint's pages to
                # the mount (they are dropped from the file's cache once the mount holds
                # them), so the next mount would read them from the disk.
                if cache == "warm":
                    bench.warm(bench.seq_file)
                measure(rows[cache, target],
                        lambda target=target, cache=cache: first_read(target, cache))
    bench.warm(bench.seq_file)
