# SPDX-License-Identifier: MIT
"""Section 16, --only requests: the cost of each FUSE request (issue 25): np.load of every
tensor.npy of the 10,000-tensor checkpoint (fresh mount, again) and `find MNT -type f | xargs
stat` against the same tree copied to tmpfs; random 4 KiB (1 and 2 readers) and 1 MiB reads on
a fresh mount against the .pth; each for ckptfs, ckptfs -o no_open and (where built with
libfuse 3.18 and the kernel allows it) ckptfs -o io_uring; one request the daemon answers at
once (16c), and the floors it sets for each target.
"""

import os
import random
import subprocess
from pathlib import Path

from benchlib.common import KiB, MiB, BenchError, now
from benchlib.readers import in_child, random_reads
from benchlib.table import Group, measure


def mount_variants(bench):
    """[(label, binary, options, why not)]: the mounts section 16 compares. -o io_uring needs
    a ckptfs built with libfuse 3.18 (--ckptfs-uring; scripts/build-libfuse-uring) and the
    kernel's enable_uring; `why not` says what is missing (its rows then show it)."""
    variants = [("ckptfs", bench.ckptfs, [], None),
                ("ckptfs -o no_open", bench.ckptfs, ["-o", "no_open"], None)]
    why = None
    if not bench.ckptfs_uring:
        why = ("no ckptfs built with libfuse 3.18 (scripts/build-libfuse-uring; cmake "
               "-DCKPTFS_LIBFUSE_PREFIX=...; --ckptfs-uring)")
    else:
        param = Path("/sys/module/fuse/parameters/enable_uring")
        if not param.exists():
            why = "this kernel has no FUSE over io_uring (Linux 6.14+)"
        elif param.read_text().strip() != "Y":
            why = f"{param} is N (root: echo Y > {param})"
    variants.append(("ckptfs -o io_uring (libfuse 3.18)", bench.ckptfs_uring or bench.ckptfs,
                     ["-o", "io_uring"], why))
    return variants


def tmpfs_copy(bench, src_mnt, name):
    """A copy of a mounted tree in /dev/shm (tmpfs): the anchor of section 16's rows."""
    dst = Path("/dev/shm") / f"ckptfs-bench-{os.getpid()}-{name}"
    if not dst.exists():
        subprocess.run(["cp", "-r", f"{src_mnt}/.", str(dst)], check=True)
        bench.shm_dirs.append(dst)
    return dst


def run(bench):
    n = bench.cfg["many"]
    f = bench.many_file
    variants = mount_variants(bench)
    g = Group(f"16. Many small files, {n:,}-tensor checkpoint: each file costs FUSE requests "
              "(np.load of each file a glob found: OPEN, IOCTL, RELEASE, the first open also "
              "storing the file's first 64 KiB; -o no_open: IOCTL and READ the first time, "
              "IOCTL again)")
    bench.groups.append(g)
    np_ref = g.row(f"np.load of all {n:,} tensor.npy, copy in tmpfs", "ms", ref=True)
    np_rows = []
    for label, _, _, why in variants:
        fresh = g.row(f"{label}: np.load of all, fresh mount", "ms")
        again = g.row(f"{label}: np.load of all, again (same mount)", "ms")
        fresh.note, again.note = "target: <= 1.3x tmpfs", "target: <= 1.1x tmpfs"
        np_rows.append((fresh, again))
        if why:
            fresh.fail(why)
            again.fail(why)
    st_ref = g.row("find DIR -type f | xargs stat, copy in tmpfs", "ms", ref=True)
    st_rows = []
    for label, _, _, why in variants:
        r = g.row(f"{label}: find MNT -type f | xargs stat, fresh mount", "ms")
        r.ref_row = st_ref
        r.note = "target: <= 1.5x tmpfs"
        st_rows.append(r)
        if why:
            r.fail(why)

    # What the targets cost at the least: each request a reader waits for, at the time of a
    # request the daemon answers at once (16c), on top of tmpfs's own time.
    # The glob before the timed loop has looked every file up, so the loop waits for OPEN and
    # IOCTL per file (-o no_open: IOCTL, and READ the first time; -o io_uring: OPEN, IOCTL,
    # and READ the first time, as its opens store nothing). RELEASE is not waited for.
    def waited(options):  # (fresh, again)
        return (2, 1) if "no_open" in options else (3, 2) if "io_uring" in options else (2, 2)
    np_floor = []
    for (label, _, options, why), (fresh, again) in zip(variants, np_rows):
        k_fresh, k_again = waited(options)
        ff = g.row(f"{label}: floor of the fresh np.load, tmpfs + {k_fresh} waited requests "
                   "per file at 16c's time", "ms")
        fa = g.row(f"{label}: floor of np.load again, tmpfs + {k_again} waited "
                   f"request{'s' * (k_again > 1)} per file", "ms")
        ff.note = fa.note = "a lower bound: the requests the reader waits for, doing nothing"
        if why:
            ff.fail(why)
            fa.fail(why)
        np_floor.append(((ff, k_fresh), (fa, k_again)))
    # find | xargs stat: each directory's listing and its end (READDIRPLUS x2), nothing more
    # (test_requests.test_listing_names_need_no_lookup).
    st_floor = []
    for label, _, _, why in variants:
        r = g.row(f"{label}: floor of find | xargs stat, tmpfs + 2 waited requests per "
                  "directory", "ms")
        r.ref_row = st_ref
        r.note = "a lower bound, as above"
        if why:
            r.fail(why)
        st_floor.append(r)

    g2 = Group("16b. Random reads in the tensors' data, fresh mount, against the .pth itself "
               f"({bench.seq_file.name}); one READ per 4 KiB read that misses the page cache")
    bench.groups.append(g2)
    rand = {}
    for bs, nproc, target in ((4 * KiB, 1, 0.2), (4 * KiB, 2, 0.3), (MiB, 1, 0.3)):
        label = f"{'4 KiB' if bs == 4 * KiB else '1 MiB'}, {nproc} reader{'s' * (nproc > 1)}"
        unit, extra = ("IOPS", "GB/s") if bs == 4 * KiB else ("GB/s", "IOPS")
        ref = g2.row(f".pth file itself, {label}", unit, ref=True, higher_better=True,
                     extra_unit=extra)
        rows = []
        for vlabel, _, _, why in variants:
            r = g2.row(f"{vlabel}, {label}", unit, higher_better=True, extra_unit=extra)
            r.ref_row = ref
            r.note = f"target: >= {target}x"
            if why:
                r.fail(why)
            rows.append(r)
        rand[bs, nproc] = (ref, rows)
    rand_floor = []
    for label, _, _, why in variants:
        r = g2.row(f"{label}, 4 KiB, 1 reader: floor, one request per read at 16c's time",
                   "IOPS", higher_better=True)
        r.ref_row = rand[4 * KiB, 1][0]
        r.note = "an upper bound: 1 / the time of a request the daemon answers at once"
        if why:
            r.fail(why)
        rand_floor.append(r)

    cpu = min(os.sched_getaffinity(0))
    g3 = Group("16c. One request the daemon answers at once (ioctl TCGETS of an open "
               "tensor.npy: ENOSYS; Python's open() sends one per file), microseconds each: "
               "the least any request costs on this machine")
    bench.groups.append(g3)
    null_ref = g3.row("tmpfs: the same ioctl (the kernel answers ENOTTY)", "us", ref=True)
    null_rows = []
    for label, _, _, why in variants:
        r = g3.row(f"{label}: one request", "us")
        pinned = g3.row(f"{label}: one request, reader and daemon on CPU {cpu} (taskset)",
                        "us")
        pinned.note = ("a wake-up on the same CPU; another CPU's costs an interrupt "
                       "to a vCPU that may be halted")
        if why:
            r.fail(why)
            pinned.fail(why)
        null_rows.append((r, pinned))
    null_count = 20000 if not bench.args.quick else 2000

    cands = [e for e in bench.seq_entries if e["contiguous"] and not e["broken"]
             and e["nbytes"] >= MiB]

    def mounted(binary, options, fn, checkpoint=f, pin=None):
        taskset = ["taskset", "-c", str(pin)] if pin is not None else []
        p = bench.procs.mount_foreground(
            [*taskset, binary, "-f", *options, str(checkpoint), str(bench.mnt)], bench.mnt)
        try:
            return fn()
        finally:
            bench.procs.unmount(bench.mnt, p)

    # The tmpfs copy of the tree, made through a mount once.
    shm = mounted(bench.ckptfs, [], lambda: tmpfs_copy(bench, bench.mnt, "many"))
    stat_cmd = "find \"$1\" -type f -print0 | xargs -0 stat > /dev/null"
    first_npy = min(shm.glob("*/tensor.npy")).relative_to(shm)  # 16c's file
    fd_pth = os.open(bench.seq_file, os.O_RDONLY)
    try:
        for run in range(bench.runs):
            bench.progress("many small files (16)", run)

            def tmpfs_np():
                r = bench.worker.call("np_load_tree", str(shm), False)
                if r["count"] != n:
                    raise BenchError(f"loaded {r['count']} tensors from tmpfs")
                np_ref.add(r["times"][0] * 1e3)
            measure(np_ref, tmpfs_np)
            measure(st_ref, lambda: st_ref.add(bench.procs.run(
                ["sh", "-c", stat_cmd, "sh", str(shm)])[0] * 1e3))
            for (label, binary, options, _), (fresh, again), st in zip(variants, np_rows,
                                                                       st_rows):
                def np_mount():
                    bench.warm(f)  # as warm as tmpfs: the run before dropped what it read
                    r = mounted(binary, options,
                                lambda: bench.worker.call("np_load_tree", str(bench.mnt), True))
                    if r["count"] != n:
                        raise BenchError(f"loaded {r['count']} tensors")
                    fresh.add(r["times"][0] * 1e3)
                    again.add(r["times"][1] * 1e3)
                measure(fresh, np_mount)
                measure(st, lambda: st.add(mounted(binary, options, lambda: bench.procs.run(
                    ["sh", "-c", stat_cmd, "sh", str(bench.mnt)])[0]) * 1e3))
            measure(null_ref, lambda: null_ref.add(
                in_child(null_requests, str(shm / first_npy), null_count)))
            for (_, binary, options, _), (r, pinned) in zip(variants, null_rows):
                measure(r, lambda r=r, binary=binary, options=options: r.add(mounted(
                    binary, options, lambda: in_child(
                        null_requests, str(bench.mnt / first_npy), null_count))))
                measure(pinned, lambda p=pinned, binary=binary, options=options: p.add(
                    mounted(binary, options, lambda: in_child(
                        null_requests, str(bench.mnt / first_npy), null_count, cpu),
                        pin=cpu)))
            for ((ff, kf), (fa, ka)), (r, _), floor4k, fst in zip(np_floor, null_rows,
                                                                    rand_floor, st_floor):
                if r.failed or not r.samples or not np_ref.samples or not st_ref.samples:
                    for row in (ff, fa, floor4k, fst):
                        row.fail(r.failed or "no request time measured")
                    continue
                ff.add(np_ref.samples[-1] + n * kf * r.samples[-1] / 1e3)
                fa.add(np_ref.samples[-1] + n * ka * r.samples[-1] / 1e3)
                floor4k.add(1e6 / r.samples[-1])
                # the entries' directories, the root and .ckptfs
                fst.add(st_ref.samples[-1] + 2 * (n + 2) * r.samples[-1] / 1e3)
            for (bs, nproc), (ref, rows) in rand.items():
                rng = random.Random(f"16-{run}-{bs}-{nproc}")
                weights = [e["nbytes"] - bs + 1 for e in cands]
                count = bench.cfg["rand_ops"][bs]
                picks = rng.choices(range(len(cands)), weights=weights, k=count)
                ops = [(i, rng.randrange(0, (cands[i]["nbytes"] - bs) // 4096 + 1) * 4096)
                       for i in picks]
                split = [ops[w::nproc] for w in range(nproc)]

                def record(row, result, bs=bs):
                    nbytes, k, dt = result
                    if nbytes != k * bs:
                        raise BenchError(f"short reads: {nbytes} bytes for {k} reads")
                    if bs == 4 * KiB:
                        row.add(k / dt, nbytes / dt / 1e9)
                    else:
                        row.add(nbytes / dt / 1e9, k / dt)

                def pth(ref=ref, split=split, bs=bs):
                    bench.warm(bench.seq_file)
                    per = [[(fd_pth, cands[i]["file_offset"] + off) for i, off in part]
                           for part in split]
                    record(ref, random_reads(per, bs))
                measure(ref, pth)
                for (_, binary, options, _), row in zip(variants, rows):
                    def on_mount(row=row, split=split, bs=bs):
                        # The variant before dropped the source pages it read (one page
                        # cache): each variant starts from the warm .pth, as the ref did.
                        bench.warm(bench.seq_file)
                        fds = [os.open(bench.mnt / e["path"] / "data", os.O_RDONLY)
                               for e in cands]
                        try:
                            per = [[(fds[i], off) for i, off in part] for part in split]
                            record(row, random_reads(per, bs))
                        finally:
                            for fd in fds:
                                os.close(fd)
                    measure(row, lambda on_mount=on_mount: mounted(
                        binary, options, on_mount, bench.seq_file))
    finally:
        os.close(fd_pth)


def null_requests(path, count, cpu=None):
    """Microseconds per ioctl(TCGETS) of `path`, `count` times, in this process (pinned to `cpu`
    when given). On a FUSE file each is one round trip the daemon answers at once (ckptfs has no
    ioctl: ENOSYS) and Python's open() sends one per file (isatty): what one request costs when
    the daemon does no work. On tmpfs the kernel answers (ENOTTY) without leaving the call."""
    import fcntl
    import termios
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    fd = os.open(path, os.O_RDONLY)
    try:
        arg = bytearray(64)
        t0 = now()
        for _ in range(count):
            try:
                fcntl.ioctl(fd, termios.TCGETS, arg)
            except OSError:
                pass
        return (now() - t0) / count * 1e6
    finally:
        os.close(fd)
