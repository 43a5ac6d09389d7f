# SPDX-License-Identifier: MIT
"""Section 12, --only pack: `ckptfs pack` of the 1.6 GB and the 4.7 GiB checkpoints to .pth and to
.safetensors: the file written per second against `cp` of the .pth (with `sync OUT`: pack
fsyncs OUT before naming it; and without, for the 1.6 GB one), and each one's peak RSS (GNU
time's %M; /usr/bin/time). Each output is checked once: a .pth's CRCs read back by zipfile, a
.safetensors by the strict reader, every tensor there.
"""

import os
import shutil

from benchlib.common import BenchError, describe_storage, human_bytes
from benchlib.table import Group, measure


def run(bench):
    out = bench.work / "pack-out"
    out.mkdir(exist_ok=True)
    files = [bench.seq_file] + ([bench.big_file] if bench.big_file else [])
    checked = set()

    def clear():
        for p in out.iterdir():
            if p.name != ".maxrss":
                p.unlink()
        os.sync()  # what earlier runs left dirty is written back before the next is timed

    # Peak RSS by GNU time, which forks its small self before exec: this process's own
    # ru_maxrss from wait4 starts at the RSS of the Python that spawned the command (Linux
    # carries the hiwater mark of the mm an exec replaces), about 22 MiB here.
    gnu_time = shutil.which("time", path="/usr/bin:/bin")
    rss_file = out / ".maxrss"

    def timed(cmd, dst, row, rss_row=None):
        """Runs cmd into dst (removed first); GB/s of dst's size, and its peak RSS (the
        command's and its children's: GNU time's %M)."""
        clear()
        if rss_row is not None and gnu_time:
            cmd = [gnu_time, "-f", "%M", "-o", str(rss_file), *cmd]
        wall, _, _ = bench.procs.run(cmd, timeout=3600)
        n = dst.stat().st_size
        row.add(n / wall / 1e9)
        if rss_row is not None:
            if not gnu_time:
                rss_row.fail("needs GNU time (/usr/bin/time; Debian: apt-get install time)")
            else:
                rss_row.add(int(rss_file.read_text().split()[-1]) / 1024)
        return n

    def check(f, dst, kind, entries):
        """Once per file and format: OUT holds every tensor's bytes (a .pth's CRCs read
        back by zipfile, a .safetensors by the strict reader), ckptfs reads it again."""
        if (f, kind) in checked:
            return
        import zipfile
        import ckptfs_safetensors
        total = sum(e["nbytes"] for e in entries)
        if kind == "pth":
            with zipfile.ZipFile(dst) as z:
                bad = z.testzip()
            if bad is not None:
                raise BenchError(f"{dst.name}: record {bad} has a wrong CRC")
            back = bench.inspect_entries(dst)
        else:
            _, tensors = ckptfs_safetensors.read_safetensors(dst, strict=True)
            back = [{"nbytes": t.nbytes} for t in tensors]
        if sum(e["nbytes"] for e in back) != total or len(back) != len(entries):
            raise BenchError(f"{dst.name}: {len(back)} tensors, not every one of {f.name}")
        checked.add((f, kind))

    for f in files:
        entries = bench.seq_entries if f == bench.seq_file else bench.inspect_entries(f)
        size = f.stat().st_size
        g = Group(f"12. ckptfs pack: {f.name} ({len(entries)} tensors, {human_bytes(size)}) "
                  f"written back as one file, against cp of the same bytes (warm page "
                  f"cache; into {describe_storage(out)}); GB/s of the file written")
        ref = g.row("cp FILE OUT && sync OUT (on disk, as pack leaves OUT)", "GB/s",
                    ref=True, higher_better=True)
        plain_cp = g.row("cp FILE OUT (no sync: OUT's pages still dirty)", "GB/s",
                         higher_better=True) if f == bench.seq_file else None
        to_pth = g.row("ckptfs pack FILE OUT.pth (torch's zip format)", "GB/s",
                       higher_better=True)
        to_st = g.row("ckptfs pack FILE OUT.safetensors", "GB/s", higher_better=True)
        for r in (to_pth, to_st):
            r.note = "fsync included; target >= 0.8x"
        rss = Group(f"12. Peak RSS of pack and cp (GNU time's %M): {f.name}")
        cp_rss = rss.row("cp FILE OUT && sync OUT", "MiB", ref=True)
        pth_rss = rss.row("ckptfs pack FILE OUT.pth", "MiB")
        st_rss = rss.row("ckptfs pack FILE OUT.safetensors", "MiB")
        for r in (pth_rss, st_rss):
            r.note = "target <= 64 MiB"
        bench.groups += [g, rss]
        dst = out / f"{f.stem}-copy{f.suffix}"
        pth = out / f"{f.stem}-packed.pth"
        st_file = out / f"{f.stem}-packed.safetensors"

        def cp_sync():
            timed(["sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", str(f), str(dst)], dst,
                  ref, cp_rss)

        def pack_to(dst_file, kind, row, rss_row):
            timed([bench.ckptfs, "pack", str(f), str(dst_file)], dst_file, row, rss_row)
            check(f, dst_file, kind, entries)

        for run in range(bench.runs):
            bench.progress(f"pack {f.name}", run)
            bench.warm(f)
            measure(ref, cp_sync)
            if plain_cp is not None:
                measure(plain_cp, lambda: timed(["cp", str(f), str(dst)], dst, plain_cp))
            measure(to_pth, lambda: pack_to(pth, "pth", to_pth, pth_rss))
            measure(to_st, lambda: pack_to(st_file, "safetensors", to_st, st_rss))
        for r, rr in ((to_pth, pth_rss), (to_st, st_rss), (ref, cp_rss)):
            if r.failed:
                rr.fail(r.failed)
    clear()
    if rss_file.exists():
        rss_file.unlink()
