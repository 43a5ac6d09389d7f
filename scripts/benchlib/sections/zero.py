# SPDX-License-Identifier: MIT
"""Section 14, --only zero: DeepSpeed ZeRO-2 and ZeRO-3 checkpoints of about 1.5 GB (bf16, 4
ranks; written in the interop root in DeepSpeed's layout by
tests/interop/root/zero_fixtures.py): consolidating each to one safetensors file with
DeepSpeed's zero_to_fp32.py (the corpus's, run with torch 2.x in the root by
scripts/zero_reference.py) against `cp MNT/.ckptfs/model.safetensors` (mount included) and
`ckptfs pack` of its fp32 keys, time and peak RSS of each; and one layer's weights read from a
fresh mount against zero_to_fp32's whole load (get_fp32_state_dict_from_zero_checkpoint).
Needs the interop root, the corpus's zero_to_fp32.py ($CKPTFS_CORPUS, default
../shared/corpus) and GNU time.
"""

import json
import os
import shutil
from pathlib import Path

import ckptfs_mounts  # scripts/: views_dir
from benchlib.common import (ROOT, BenchError, human_bytes, interop_root, log, now,
                             read_status_kib)
from benchlib.readers import read_files
from benchlib.table import Group, measure


def run(bench):
    root = interop_root()
    corpus = Path(os.environ.get("CKPTFS_CORPUS") or clone_of(ROOT).parent / "shared" /
                  "corpus")
    script = corpus / "formats" / ZERO_CORPUS / "zero_to_fp32.py"
    runner = ROOT / "scripts" / "interop-run"
    reference = ROOT / "scripts" / "zero_reference.py"
    gnu_time = shutil.which("time", path="/usr/bin:/bin")
    inside = Path("/tmp/ckptfs-bench-zero")  # as the root sees it
    work = root / inside.relative_to("/")
    why = None
    if not (root / "etc" / "ckptfs-interop").is_file():
        why = f"needs the interop root at {root} (scripts/interop-root)"
    elif not script.is_file():
        why = f"needs the corpus's zero_to_fp32.py ({script})"
    elif not gnu_time:
        why = "needs GNU time (/usr/bin/time; Debian: apt-get install time)"
    if why is None:
        work.mkdir(parents=True, exist_ok=True)
        shutil.copy(script, work / "zero_to_fp32.py")
    for stage, (layers, hidden) in sorted(bench.cfg["zero"].items()):
        _zero(bench, stage, layers, hidden, why, root, runner, reference, gnu_time, inside,
                   work)


def _zero(bench, stage, layers, hidden, why, root, runner, reference, gnu_time, inside, work):
    name = f"zero{stage}-{layers}x{hidden}"
    ckpt_in, ckpt = inside / name, work / name
    g = Group(f"14. DeepSpeed ZeRO-{stage} ({layers} bf16 layers of {hidden}x{hidden}, 4 "
              f"ranks) consolidated to one safetensors file of its fp32 weights, warm page "
              f"cache; seconds")
    rss = Group(f"14. Peak RSS of each consolidation of ZeRO-{stage}")
    one = Group(f"14. One layer's fp32 weights of ZeRO-{stage}: a fresh mount (mount "
                f"included) against zero_to_fp32's whole load")
    ref = g.row("zero_to_fp32.py CKPT OUT --safe_serialization (torch 2.x)", "s", ref=True)
    ref.note = "its `import torch` included"
    cp = g.row("cp MNT/.ckptfs/model.safetensors OUT (mount included)", "s",
               extra_unit="GB/s")
    pack = g.row("ckptfs pack CKPT OUT.safetensors --keys 'layers.*'", "s", extra_unit="GB/s")
    for r in (cp, pack):
        r.note = "target <= 1.5x"
    ref_rss = rss.row("zero_to_fp32.py (ru_maxrss)", "MiB", ref=True)
    cp_rss = rss.row("ckptfs daemon VmHWM after the cp", "MiB")
    pack_rss = rss.row("ckptfs pack (GNU time's %M)", "MiB")
    for r in (cp_rss, pack_rss):
        r.note = "target <= 64 MiB"
    key = f"layers.{layers // 2}.weight"
    load = one.row(f"get_fp32_state_dict_from_zero_checkpoint(CKPT)[{key!r}]", "s",
                   ref=True, extra_unit="MiB peak")
    read = one.row(f"mount + read MNT/{key}/data", "s", extra_unit="MiB VmHWM")
    bench.groups += [g, rss, one]
    rows = (ref, cp, pack, ref_rss, cp_rss, pack_rss, load, read)
    if why is not None:
        for r in rows:
            r.fail(why)
        return
    try:
        if not (ckpt / "latest").is_file():
            log(f"generating {ckpt} in the interop root with torch 2.x")
            t0 = now()
            bench.procs.run([str(runner), "python3", "-c",
                            "import sys, zero_fixtures as z; z.write_bench(sys.argv[1], "
                            "*map(int, sys.argv[2:6]), sys.argv[6])", str(ckpt_in),
                            str(stage), str(layers), str(hidden), "4",
                            str(inside / "zero_to_fp32.py")], timeout=3600)
            log(f"  in {now() - t0:.1f} s")
        files = sorted(p for p in ckpt.rglob("*.pt"))
        size = sum(p.stat().st_size for p in files)
        entries = bench.inspect_entries(ckpt)
    except BenchError as e:
        for r in rows:
            r.fail(str(e))
        return
    fp32 = sum(e["nbytes"] for e in entries if e["key"].startswith("layers."))
    exported = sum(e["nbytes"] for e in entries)
    g.title += (f"; {name}: {len(files)} files, {human_bytes(size)}; the fp32 weights "
                f"{human_bytes(fp32)}" + (f", the mount's model.safetensors also holds the "
                                          f"module's bf16 weights ({human_bytes(exported)})"
                                          if exported != fp32 else ""))
    out = work / "out"
    ref_out, ref_out_in = out / "ref", inside / "out" / "ref"
    cp_out = out / "model.safetensors"
    pack_out = out / "packed.safetensors"
    rss_file = out / ".maxrss"

    def clear():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        os.sync()

    def run_reference():
        clear()
        _, _, stdout = bench.procs.run([str(runner), str(reference), "convert", str(ckpt_in),
                                       str(ref_out_in)], timeout=3600)
        r = json.loads(stdout.strip().splitlines()[-1])
        ref.add(r["seconds"])
        ref_rss.add(r["peak_kib"] / 1024)

    def run_cp():
        clear()
        t0 = now()
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(ckpt), str(bench.mnt)],
                                        bench.mnt)
        try:
            bench.procs.run(["cp", str(ckptfs_mounts.views_dir(bench.mnt) / "model.safetensors"),
                            str(cp_out)], timeout=3600)
            wall = now() - t0
            cp_rss.add(read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(bench.mnt, p)
        cp.add(wall, cp_out.stat().st_size / wall / 1e9)

    def run_pack():
        clear()
        wall, _, _ = bench.procs.run([gnu_time, "-f", "%M", "-o", str(rss_file), bench.ckptfs,
                                     "pack", str(ckpt), str(pack_out), "--keys", "layers.*"],
                                    timeout=3600)
        pack.add(wall, pack_out.stat().st_size / wall / 1e9)
        pack_rss.add(int(rss_file.read_text().split()[-1]) / 1024)

    def check():
        """Once: zero_to_fp32's file, the mount's and pack's hold the same fp32 tensors."""
        import ckptfs_safetensors
        clear()
        bench.procs.run([str(runner), str(reference), "convert", str(ckpt_in),
                        str(ref_out_in)], timeout=3600)
        bench.procs.run([bench.ckptfs, "pack", str(ckpt), str(pack_out), "--keys", "layers.*"],
                       timeout=3600)
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(ckpt), str(bench.mnt)],
                                        bench.mnt)
        try:
            mounted = ckptfs_mounts.views_dir(bench.mnt) / "model.safetensors"
            want = safetensors_digests(ckptfs_safetensors, ref_out / "model.safetensors")
            for path in (pack_out, mounted):
                got = safetensors_digests(ckptfs_safetensors, path)
                if {k: got.get(k) for k in want} != want:
                    raise BenchError(f"{path.name}: not zero_to_fp32's tensors")
        finally:
            bench.procs.unmount(bench.mnt, p)

    def run_load():
        _, _, stdout = bench.procs.run([str(runner), str(reference), "load", str(ckpt_in),
                                       key], timeout=3600)
        r = json.loads(stdout.strip().splitlines()[-1])
        load.add(r["seconds"], r["peak_kib"] / 1024)

    def run_read():
        t0 = now()
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(ckpt), str(bench.mnt)],
                                        bench.mnt)
        try:
            n, _ = read_files([bench.mnt / key / "data"])
            wall = now() - t0
            if n != hidden * hidden * 4:
                raise BenchError(f"read {n} bytes of {key}")
            read.add(wall, read_status_kib(p.pid, "VmHWM") / 1024)
        finally:
            bench.procs.unmount(bench.mnt, p)

    measure(ref, check)  # one run more of the reference, which checks the outputs
    for run in range(bench.runs):
        bench.progress(f"ZeRO-{stage}", run)
        for row, fn in ((ref, run_reference), (cp, run_cp), (pack, run_pack),
                        (load, run_load), (read, run_read)):
            read_files(files)  # the checkpoint warm for each
            measure(row, fn)
    for r, rr in ((ref, ref_rss), (cp, cp_rss), (pack, pack_rss)):
        if r.failed:
            rr.fail(r.failed)
    shutil.rmtree(out, ignore_errors=True)


def clone_of(repo):
    """The clone `repo` belongs to: itself, or for a linked git worktree (whose .git is a file
    "gitdir: CLONE/.git/worktrees/NAME") the main clone: ../shared/corpus is beside it."""
    try:
        gitdir = Path((repo / ".git").read_text().strip().removeprefix("gitdir: "))
    except OSError:
        return repo
    return gitdir.parents[2] if gitdir.parent.name == "worktrees" else repo


# The corpus's real ZeRO-3 checkpoint, whose zero_to_fp32.py section 14 runs.
ZERO_CORPUS = "bigyanghimire__deepspeed-experiments__zero3-bert-model-states-only"


def safetensors_digests(reader, path):
    """{key: the tensor's dtype, shape and the SHA-256 of its bytes} of a safetensors file."""
    import hashlib
    _, tensors = reader.read_safetensors(path, strict=True)
    out = {}
    with open(path, "rb") as f:
        for t in tensors:
            f.seek(t.file_offset)
            out[t.name] = (t.dtype, tuple(t.shape), hashlib.sha256(f.read(t.nbytes)).hexdigest())
    return out
