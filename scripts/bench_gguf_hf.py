# SPDX-License-Identifier: MIT
"""bench_gguf_hf: scripts/bench's section 18, "GGUF to a transformers model" (--only gguf_hf).

A Llama GGUF quantized to Q4_K_M by the interop root's llama-quantize (8 layers, 2048 wide,
0.54 G parameters, 2.2 GB of float32 values; --quick: 2 layers, 1024 wide), loaded as a
transformers model three ways, each in a fresh process of the interop root
(scripts/ckptfs_bench_gguf_hf.py):
  - transformers' own GGUF loader: from_pretrained(DIR, gguf_file=F), the reference;
  - a -o names=hf mount, then from_pretrained(MNT/.ckptfs) (mount included);
  - a -o names=hf mount, then cp MNT/.ckptfs/model.safetensors FILE (the model converted into
    one safetensors file transformers loads as any other).
For each: the time until every weight has been read once (a safetensors file's weights are
mapped, read when touched; the loading process's imports are not counted, the mount is), the
loading process's peak RSS above its imports (mapped file pages count), and the ckptfs daemon's
peak RSS (VmHWM). The file is warm in the page cache. Called by scripts/bench's run_all().
"""

import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def run(bench, b):
    """Section 18 for Bench `bench`; `b` is scripts/bench's namespace (Group, measure...)."""
    root = Path(os.environ.get("CKPTFS_INTEROP_ROOT", "/var/cache/ckptfs/sid-root"))
    g = b.Group("18. GGUF to a transformers model")
    bench.groups.append(g)
    if not (root / "usr" / "bin" / "python3").exists():
        g.row("transformers", "s").fail(f"needs the interop root ({root}: scripts/interop-root)")
        return
    work = root / "tmp" / "ckptfs-bench-gguf-hf"
    mnt = work / "mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    layers, hidden = (2, 1024) if bench.args.quick else (8, 2048)

    def in_root(*args, timeout=3600):
        r = subprocess.run([str(ROOT / "scripts" / "interop-run"),
                            str(HERE / "ckptfs_bench_gguf_hf.py"), *map(str, args)],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise b.BenchError(f"in the interop root: {r.stderr.strip()[-300:]}")
        return json.loads(r.stdout)

    def inside(path):
        return "/" + str(Path(path).relative_to(root))

    path = work / f"llama-{layers}-{hidden}-q4_k_m.gguf"
    if not path.is_file():
        b.log(f"generating {path} (gguf-py, then llama-quantize in the interop root)")
        t0 = b.now()
        in_root("make", inside(work), layers, hidden)
        b.log(f"  {b.human_bytes(path.stat().st_size)} in {b.now() - t0:.0f} s")
    entries = bench.inspect_entries(path)
    values = sum(e["nbytes"] for e in entries)
    g.title = (f"18. GGUF to a transformers model: {path.name} ({b.human_bytes(path.stat().st_size)}"
               f" of Q4_K_M, {b.human_bytes(values)} of float32 values), warm page cache: "
               f"from_pretrained(DIR, gguf_file=F) against a -o names=hf mount")
    ref_t = g.row("transformers: from_pretrained(DIR, gguf_file=F), every weight read", "s",
                  ref=True)
    mount_t = g.row("ckptfs -o names=hf: mount + from_pretrained(MNT/.ckptfs), every weight read",
                    "s")
    cp_t = g.row("ckptfs -o names=hf: mount + cp MNT/.ckptfs/model.safetensors FILE", "s")
    rss = b.Group("18. GGUF to a transformers model: peak memory")
    ref_m = rss.row("transformers' GGUF loader: its process's peak RSS above its imports",
                    "MiB", ref=True)
    mount_m = rss.row("from_pretrained(MNT/.ckptfs): its process's peak RSS above its imports",
                      "MiB")
    daemon_load = rss.row("ckptfs daemon VmHWM, from_pretrained(MNT/.ckptfs)", "MiB")
    daemon_cp = rss.row("ckptfs daemon VmHWM, cp MNT/.ckptfs/model.safetensors", "MiB")
    daemon_load.note = daemon_cp.note = "target: a few MiB plus caches"
    bench.groups.append(rss)
    out = bench.work / "gguf-hf-out"
    out.mkdir(exist_ok=True)
    dst = out / "model.safetensors"

    def mount():
        return bench.procs.mount_foreground(
            [bench.ckptfs, "-f", "-o", "names=hf", str(path), str(mnt)], mnt)

    def reference():
        r = in_root("gguf", inside(work), path.name)
        ref_t.add(r["seconds"])
        ref_m.add(r["peak_mib"] - r["base_mib"])

    def mounted_load():
        t0 = b.now()
        p = mount()
        mounted = b.now() - t0
        try:
            r = in_root("mount", inside(mnt) + "/.ckptfs")
            mount_t.add(mounted + r["seconds"])
            mount_m.add(r["peak_mib"] - r["base_mib"])
            daemon_load.add(b.read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(mnt, p)

    def mounted_cp():
        if dst.exists():
            dst.unlink()
        t0 = b.now()
        p = mount()
        try:
            bench.procs.run(["cp", str(mnt / ".ckptfs" / "model.safetensors"), str(dst)])
            cp_t.add(b.now() - t0)
            daemon_cp.add(b.read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(mnt, p)
        dst.unlink()

    for run_ in range(bench.runs):
        bench.progress("gguf_hf", run_)
        bench.warm(path)
        b.measure(ref_t, reference)
        b.measure(mount_t, mounted_load)
        b.measure(cp_t, mounted_cp)
