# SPDX-License-Identifier: MIT
"""Section 10, --only export: `cp MNT/.ckptfs/model.safetensors` (the checkpoint converted to
safetensors on read) against a user-space copy of the .pth itself (`cat FILE > OUT`: cp of any
FUSE file copies in user space, copy_file_range failing with EXDEV), with `cp` of the .pth
(copy_file_range) as information, warm and (with --cold) cold, and the daemon's peak RSS during
it.
"""

import os
from pathlib import Path

import ckptfs_mounts  # scripts/: views_dir
from benchlib.common import BenchError, describe_storage, human_bytes, read_status_kib
from benchlib.readers import drop_page_cache
from benchlib.table import Group, measure


def run(bench):
    f = bench.seq_file
    size = f.stat().st_size
    out = bench.work / "cp-out"
    out.mkdir(exist_ok=True)
    dst = out / "copy"
    g = Group(f"10. cp MNT/.ckptfs/model.safetensors: {f.name} ({human_bytes(size)}) converted to "
              f"safetensors on read, against a user-space copy of the .pth (to a file on "
              f"{describe_storage(out)})")
    # The anchor: a copy made in user space (read, write), as cp makes of any FUSE file: its
    # copy_file_range fails with EXDEV there. cp of the .pth itself copies in the kernel
    # (copy_file_range, reflinks), which no FUSE file can: information only.
    ref = g.row(".pth file itself: cat FILE > OUT (a user-space copy), warm page cache",
                "GB/s", ref=True, higher_better=True)
    kcp = g.row(".pth file itself: cp FILE (copy_file_range), warm page cache", "GB/s",
                higher_better=True)
    kcp.note = "information: no FUSE file can be copied in the kernel"
    first = g.row("cp MNT/.ckptfs/model.safetensors, fresh mount (the .pth warm)", "GB/s",
                  higher_better=True)
    again = g.row("cp MNT/.ckptfs/model.safetensors again (same mount)", "GB/s", higher_better=True)
    for r in (first, again):
        r.note = "target >= 0.8x"
    cold = Group(f"10. cp, cold page cache (dropped before each cp): {f.name} on "
                 f"{describe_storage(f)}")
    cref = cold.row(".pth file itself: cat FILE > OUT, cold", "GB/s", ref=True,
                    higher_better=True)
    ckcp = cold.row(".pth file itself: cp FILE (copy_file_range), cold", "GB/s",
                    higher_better=True)
    ckcp.note = "information"
    cfirst = cold.row("cp MNT/.ckptfs/model.safetensors, fresh mount, cold", "GB/s",
                      higher_better=True)
    cfirst.note = "target >= 0.8x"
    rss = Group("10. Peak RSS of the ckptfs daemon (VmHWM) after cp MNT/.ckptfs/model.safetensors "
                "(a fresh mount each time)")
    hwm = rss.row("ckptfs daemon VmHWM, warm cp (and the second cp)", "MiB")
    chwm = rss.row("ckptfs daemon VmHWM, cold cp", "MiB")
    for r in (hwm, chwm):
        r.note = "target <= 64 MiB"
    bench.groups += [g] + ([cold] if bench.args.cold else []) + [rss]
    if not bench.args.cold:
        chwm.fail("only with --cold")
    elif os.geteuid() != 0:
        for r in (cref, ckcp, cfirst, chwm):
            r.fail("dropping the page cache needs root")
    checked = []

    def cp(src, row, cold_cache=False, user_space=False):
        """cp SRC DST (or, `user_space`, cat SRC > DST) into a file removed first, after
        writing back what earlier runs left dirty; GB/s of the copy's size."""
        if dst.exists():
            dst.unlink()
        if cold_cache:
            drop_page_cache()
        else:
            os.sync()
        cmd = (["sh", "-c", 'cat "$1" > "$2"', "sh", str(src), str(dst)] if user_space
               else ["cp", str(src), str(dst)])
        wall, _, _ = bench.procs.run(cmd)
        n = dst.stat().st_size
        if n != Path(src).stat().st_size:
            raise BenchError(f"cp wrote {n} bytes of {Path(src).stat().st_size}")
        row.add(n / wall / 1e9)
        return n

    def check_copy():
        """Once: the copy is a safetensors file (the strict reader) holding every byte."""
        if checked:
            return
        import ckptfs_safetensors
        _, tensors = ckptfs_safetensors.read_safetensors(dst, strict=True)
        if sum(t.nbytes for t in tensors) != sum(e["nbytes"] for e in bench.seq_entries):
            raise BenchError("the copy does not hold every tensor")
        checked.append(True)

    def mounted_cp(rows, hwm_row, cold_cache):
        if cold_cache:
            drop_page_cache()
        else:
            bench.warm(f)
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(f), str(bench.mnt)],
                                        bench.mnt)
        try:
            for row in rows:
                cp(ckptfs_mounts.views_dir(bench.mnt) / "model.safetensors", row)
                check_copy()
            hwm_row.add(read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(bench.mnt, p)

    for run in range(bench.runs):
        bench.progress("cp model.safetensors", run)
        bench.warm(f)
        measure(ref, lambda: cp(f, ref, user_space=True))
        measure(kcp, lambda: cp(f, kcp))
        measure(first, lambda: mounted_cp([first, again], hwm, False))
        if bench.args.cold and os.geteuid() == 0:
            measure(cref, lambda: cp(f, cref, cold_cache=True, user_space=True))
            measure(ckcp, lambda: cp(f, ckcp, cold_cache=True))
            measure(cfirst, lambda: mounted_cp([cfirst], chwm, True))
    for r in (again, hwm):
        if first.failed:
            r.fail(first.failed)
    if cfirst.failed and not chwm.failed:
        chwm.fail(cfirst.failed)
    if dst.exists():
        dst.unlink()
    bench.warm(f)
