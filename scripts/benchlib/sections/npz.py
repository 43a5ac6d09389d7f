# SPDX-License-Identifier: MIT
"""Section 19, --only npz: a deflated .npz member (numpy.savez_compressed, 128 MiB of float32
inflated; issue 29): its `data` read whole through a fresh mount (1 MiB reads), by two readers
at once, and as 32 reads of 1 MiB from its end backwards (every 4 MiB), against Python's zipfile
reading the member the same ways (ZipFile.open(); its seek() behind inflates from the start).
"""

import os
import threading

from benchlib.common import TORCH_PY, MiB, BenchError, human_bytes, log, now
from benchlib.readers import read_files
from benchlib.table import Group, measure


def run(bench):
    size = bench.cfg["npz"]
    path = bench.work / f"npz-{size // MiB}m.npz"
    if not path.is_file():
        log(f"generating {path} with numpy")
        code = ("import numpy as np, sys\n"
                "a = np.random.default_rng(0).standard_normal(int(sys.argv[2]) // 4)\n"
                "a = a.astype(np.float32)\n"
                "a[::3] = 0  # a little redundancy, as trained weights have some\n"
                "np.savez_compressed(sys.argv[1], x=a)\n")
        bench.procs.run([TORCH_PY, "-c", code, str(path), str(size)], timeout=3600)
    header = 128  # numpy's .npy header before the array, in the member
    backwards = [size - MiB - k * 4 * MiB for k in range(32) if size - MiB - k * 4 * MiB >= 0]
    g = Group(f"19. A deflated .npz member: {path.name}, x.npy ({human_bytes(size)} "
              f"inflated, {human_bytes(path.stat().st_size)} deflated), warm page cache; "
              f"seconds, against Python's zipfile")
    rows = {}
    for way, label in (("whole", "read whole, 1 MiB reads"),
                       ("two", "two readers at once, each whole"),
                       ("back", f"{len(backwards)} reads of 1 MiB from the end backwards, "
                                f"every 4 MiB")):
        rows["zipfile", way] = g.row(f"zipfile: {label}", "s", ref=True)
        rows["ckptfs", way] = g.row(f"ckptfs, fresh mount: {label}", "s")
        rows["ckptfs", way].ref_row = rows["zipfile", way]
    bench.groups.append(g)

    def in_two_threads(fn):
        errors = []

        def run():
            try:
                fn()
            except Exception as e:  # noqa: BLE001 (reported below, with the row)
                errors.append(e)
        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise BenchError(str(errors[0]))

    def zipfile_read(way):
        import zipfile

        def whole():
            with zipfile.ZipFile(path) as z, z.open("x.npy") as f:
                f.seek(header)
                while f.read(MiB):
                    pass
        t0 = now()
        if way == "whole":
            whole()
        elif way == "two":
            in_two_threads(whole)
        else:
            with zipfile.ZipFile(path) as z, z.open("x.npy") as f:
                for at in backwards:
                    f.seek(header + at)
                    if len(f.read(MiB)) != MiB:
                        raise BenchError("zipfile: a short read")
        return now() - t0

    def mounted_read(way):
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(path), str(bench.mnt)],
                                        bench.mnt)
        try:
            data = bench.mnt / "x" / "data"
            t0 = now()
            if way == "whole":
                n, _ = read_files([data])
                if n != size:
                    raise BenchError(f"read {n} bytes, not {size}")
            elif way == "two":
                in_two_threads(lambda: read_files([data]))
            else:
                fd = os.open(data, os.O_RDONLY)
                try:
                    for at in backwards:
                        if len(os.pread(fd, MiB, at)) != MiB:
                            raise BenchError("a short read")
                finally:
                    os.close(fd)
            return now() - t0
        finally:
            bench.procs.unmount(bench.mnt, p)

    bench.warm(path)
    for run in range(bench.runs):
        bench.progress("deflated .npz member", run)
        for way in ("whole", "two", "back"):
            measure(rows["zipfile", way], lambda way=way: rows["zipfile", way].add(
                zipfile_read(way)))
            measure(rows["ckptfs", way], lambda way=way: rows["ckptfs", way].add(
                mounted_read(way)))
