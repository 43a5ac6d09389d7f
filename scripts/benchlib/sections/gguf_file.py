# SPDX-License-Identifier: MIT
"""Section 15, --only gguf: a 1.5 GB Q4_K GGUF (random weights quantized by the interop root's
llama-quantize), against the interop root's gguf-py (scripts/ckptfs_bench_gguf.py, run there):
the mount's time against GGUFReader's, the time to the first tensor (a 4096x4096 matrix
dequantized), the dequantized read of every tensor.npy (GB/s of float32 served) against
gguf.quants.dequantize of every tensor (GB/s of float32 made), and
`cp MNT/.ckptfs/model.safetensors` (every tensor dequantized into one file) against gguf-py
dequantizing everything, with the daemon's peak RSS against gguf-py's. Needs the interop root.
"""

import json
import os
import subprocess

import ckptfs_mounts  # scripts/: views_dir
from benchlib.common import (ROOT, SCRIPTS, BenchError, human_bytes, interop_root, log, now,
                             read_status_kib)
from benchlib.readers import read_files
from benchlib.table import Group, measure


def in_root(*args, timeout=3600):
    """scripts/ckptfs_bench_gguf.py ARGS run in the interop root: its JSON."""
    r = subprocess.run([str(ROOT / "scripts" / "interop-run"),
                        str(SCRIPTS / "ckptfs_bench_gguf.py"), *map(str, args)],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise BenchError(f"in the interop root: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def run(bench):
    root = interop_root()
    g = Group("15. GGUF: a Q4_K file mounted, against gguf-py (the interop root's)")
    if not (root / "usr" / "bin" / "python3").exists():
        g.row("gguf-py", "ms").fail(f"needs the interop root ({root}: scripts/interop-root)")
        bench.groups.append(g)
        return
    gdir = root / "tmp" / "ckptfs-bench-gguf"
    gdir.mkdir(parents=True, exist_ok=True)
    layers = 2 if bench.args.quick else 12  # 12: 1.5 GB of Q4_K (2.7 G weights)
    path = gdir / f"llama-q4_k-{layers}.gguf"
    inside = "/" + str(path.relative_to(root))
    if not path.is_file():
        log(f"generating {path} (gguf-py, then llama-quantize in the interop root)")
        t0 = now()
        made = in_root("make", "/" + str(gdir.relative_to(root)), layers)
        os.replace(root / made["path"].lstrip("/"), path)
        log(f"  {human_bytes(path.stat().st_size)} in {now() - t0:.0f} s")
    entries = bench.inspect(path)
    values = sum(e["nbytes"] for e in entries)  # the float32 values tensor.npy serves
    first_tensor = next(e for e in entries if e["key"] == "blk.0.attn_q.weight")
    size = path.stat().st_size
    g.title = (f"15. GGUF: {path.name} ({len(entries)} tensors, {human_bytes(size)} of Q4_K, "
               f"{human_bytes(values)} of float32 values), against gguf-py (the interop "
               f"root's), warm page cache: mount and first tensor")
    ref_open = g.row("gguf-py: GGUFReader(FILE)", "ms", ref=True)
    mount_t = g.row("ckptfs mount, until index.json is read", "ms")
    ref_first = g.row("gguf-py: GGUFReader + dequantize blk.0.attn_q.weight (64 MiB f32)",
                      "ms", ref=True)
    first_t = g.row("ckptfs: mount + read its tensor.npy (dequantized on read)", "ms")
    first_t.ref_row = ref_first
    tp = Group(f"15. GGUF: every tensor's values, float32 (GB/s of float32 made or served)")
    ref_deq = tp.row("gguf-py: gguf.quants.dequantize of every tensor", "GB/s", ref=True,
                     higher_better=True)
    read_t = tp.row("ckptfs: read every tensor.npy, fresh mount (1 MiB reads)", "GB/s",
                    higher_better=True)
    read_t.note = "target >= 1x"
    cpg = Group(f"15. GGUF: the whole model dequantized: cp MNT/.ckptfs/model.safetensors (a file of "
                f"{human_bytes(values)}) against gguf-py dequantizing every tensor")
    ref_all = cpg.row("gguf-py: dequantize every tensor, one after the other", "s", ref=True)
    cp_t = cpg.row("ckptfs: cp MNT/.ckptfs/model.safetensors FILE, fresh mount", "s")
    rss = Group("15. GGUF: peak RSS")
    ref_rss = rss.row("gguf-py dequantizing every tensor (its process's peak)", "MiB",
                      ref=True)
    hwm = rss.row("ckptfs daemon VmHWM after cp MNT/.ckptfs/model.safetensors", "MiB")
    hwm.note = "target <= 64 MiB"
    bench.groups += [g, tp, cpg, rss]
    out = bench.work / "gguf-out"
    out.mkdir(exist_ok=True)
    dst = out / "model.safetensors"
    mnt = bench.mnt

    def mount():
        return bench.procs.mount_foreground([bench.ckptfs, "-f", str(path), str(mnt)], mnt)

    def mount_until_index():
        t0 = now()
        p = mount()
        (ckptfs_mounts.views_dir(mnt) / "index.json").read_bytes()
        mount_t.add((now() - t0) * 1e3)
        bench.procs.unmount(mnt, p)

    def first():
        t0 = now()
        p = mount()
        read_files([mnt / first_tensor["path"] / "tensor.npy"])
        first_t.add((now() - t0) * 1e3)
        bench.procs.unmount(mnt, p)

    def read_all():
        p = mount()
        try:
            paths = [mnt / e["path"] / "tensor.npy" for e in entries]
            nbytes, dt = read_files(paths)
            if nbytes < values:
                raise BenchError(f"read {nbytes} bytes of {values}")
            read_t.add(values / dt / 1e9)
        finally:
            bench.procs.unmount(mnt, p)

    def cp():
        if dst.exists():
            dst.unlink()
        os.sync()
        p = mount()
        try:
            wall, _, _ = bench.procs.run(["cp", str(ckptfs_mounts.views_dir(mnt) / "model.safetensors"), str(dst)])
            cp_t.add(wall)
            hwm.add(read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(mnt, p)
        dst.unlink()

    def gguf_py(what, *args):
        r = in_root(what, inside, *args)
        return r

    for run in range(bench.runs):
        bench.progress("gguf", run)
        bench.warm(path)
        measure(ref_open, lambda: ref_open.add(gguf_py("open")["seconds"] * 1e3))
        measure(mount_t, mount_until_index)
        measure(ref_first, lambda: ref_first.add(
            gguf_py("first", "blk.0.attn_q.weight")["seconds"] * 1e3))
        measure(first_t, first)

        def all_values():
            r = gguf_py("dequantize")
            ref_deq.add(r["bytes"] / r["seconds"] / 1e9)
            ref_all.add(r["seconds"])
            ref_rss.add(r["maxrss_mib"])
        measure(ref_deq, all_values)
        measure(read_t, read_all)
        measure(cp_t, cp)
