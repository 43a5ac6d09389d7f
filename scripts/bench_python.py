#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench_python.py: the worker processes of scripts/bench's section "python" (17), the Python
package (scripts/benchlib/sections/python.py says what it measures). Each one is
`bench_python.py --worker OP ARGS...` (/usr/bin/python3, or the interop root's python3 through
scripts/interop-run) and prints one JSON document.
"""

import json
import os
import random
import resource
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TORCH_PY = os.environ.get("BENCH_PYTHON", "/usr/bin/python3")
MiB = 1 << 20


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Workers (run as `bench_python.py --worker OP ARGS...`; print one JSON document)
# ---------------------------------------------------------------------------------------------

def _package():
    for path in ("/opt/ckptfs/python", str(REPO / "python")):
        if os.path.isdir(path) and path not in sys.path:
            sys.path.insert(0, path)
            break
    import ckptfs
    return ckptfs


def worker_random(path, ops, seed):
    """Random 4 KiB rows of the 2-D float32 tensors of PATH, read five ways (see a.)."""
    import numpy as np
    import torch
    ckptfs = _package()
    ops, seed = int(ops), int(seed)
    out = {}
    with ckptfs.open(path) as ck:
        keys = [k for k in ck if ck._entries[k]["kind"] == "tensor"
                and len(ck._entries[k]["shape"]) == 2 and ck._entries[k]["dtype"] == "float32"]
        entries = {k: ck._entries[k] for k in keys}

        def picks(salt):
            rng = random.Random(seed * 7 + salt)
            return [(k, rng.randrange(entries[k]["shape"][0]))
                    for k in (rng.choice(keys) for _ in range(ops))]

        cols = entries[keys[0]]["shape"][1]
        row_bytes = cols * 4
        buf = memoryview(bytearray(row_bytes))
        fd = os.open(path, os.O_RDONLY)
        try:
            p = [(entries[k]["file_range"]["offset"] + r * row_bytes) for k, r in picks(1)]
            for off in p:  # once untimed: the first loop timed would pay for warming up alone
                os.preadv(fd, [buf], off)
            t0 = now()
            for off in p:
                os.preadv(fd, [buf], off)
            out["file"] = ops / (now() - t0)
            t0 = now()
            for off in p:  # the same reads, each into an array of its own (as a slice makes)
                os.preadv(fd, [np.empty((1, cols), np.float32)], off)
            out["file_array"] = ops / (now() - t0)
        finally:
            os.close(fd)
        arrays = {k: ck.numpy(k) for k in keys}
        target = np.empty(cols, np.float32)
        p = picks(2)
        t0 = now()
        for k, r in p:
            np.copyto(target, arrays[k][r])
        out["numpy"] = ops / (now() - t0)
        t0 = now()
        for k, r in p:  # the same rows again: their pages are mapped now
            np.copyto(target, arrays[k][r])
        out["numpy_again"] = ops / (now() - t0)
        tensors = {k: ck[k] for k in keys}
        target_t = torch.empty(cols)
        p = picks(3)
        t0 = now()
        for k, r in p:
            target_t.copy_(tensors[k][r])
        out["torch"] = ops / (now() - t0)
        slices = {k: ck.get_slice(k, numpy=True) for k in keys}
        p = picks(4)
        t0 = now()
        for k, r in p:
            slices[k][r:r + 1]
        out["get_slice"] = ops / (now() - t0)
        target_row = np.empty((1, cols), np.float32)
        p = picks(7)
        t0 = now()
        for k, r in p:
            slices[k].readinto(target_row, r)
        out["readinto"] = ops / (now() - t0)
        slices = {k: ck.get_slice(k) for k in keys}
        p = picks(6)
        t0 = now()
        for k, r in p:
            slices[k][r:r + 1]
        out["get_slice_torch"] = ops / (now() - t0)
        out["paths"] = sorted({ck.path_of(k) for k in keys})
        fds = {k: os.open(os.path.join(ck.mountpoint, entries[k]["path"], "data"), os.O_RDONLY)
               for k in keys}
        try:
            p = picks(5)
            t0 = now()
            for k, r in p:
                os.preadv(fds[k], [buf], r * row_bytes)
            out["mount"] = ops / (now() - t0)
        finally:
            for f in fds.values():
                os.close(f)
    print(json.dumps(out))


def worker_read_all(mode, path, runs):
    """Every tensor of PATH copied once into one buffer: ck[key] of the mount PATH ("ckptfs"),
    or torch.load(PATH, mmap=True) ("torch"); `runs` times, seconds each."""
    import torch
    times, paths = [], set()
    for _ in range(int(runs)):
        if mode == "ckptfs":
            ckptfs = _package()
            t0 = now()
            ck = ckptfs.open(path)
            tensors = ((k, ck[k]) for k in ck)
        else:
            t0 = now()
            tensors = torch.load(path, mmap=True, weights_only=True).items()
        buf = None
        for k, t in tensors:
            flat = t.reshape(-1)
            if buf is None or buf.numel() < flat.numel():
                buf = torch.empty(flat.numel(), dtype=flat.dtype)
            buf[:flat.numel()].copy_(flat)
        times.append(now() - t0)
        if mode == "ckptfs":
            paths |= {ck.path_of(k) for k in ck}
            ck.close()
    print(json.dumps({"times": times, "paths": sorted(paths), "torch": torch.__version__}))


def worker_many(path, npy_dir):
    """The 10,000 small tensors of PATH: np.load of NPY_DIR's copies (tmpfs), and ck.numpy."""
    import numpy as np
    ckptfs = _package()
    names = sorted(os.listdir(npy_dir))
    t0 = now()
    for n in names:
        np.load(os.path.join(npy_dir, n))
    out = {"tmpfs": now() - t0, "count": len(names)}
    t0 = now()
    ck = ckptfs.open(path)
    out["open"] = now() - t0
    keys = list(ck)
    t0 = now()
    for k in keys:
        ck.numpy(k)
    out["numpy"] = now() - t0
    t0 = now()
    for k in keys:
        ck.numpy(k).copy()
    out["numpy_copy"] = now() - t0
    out["paths"] = sorted({ck.path_of(k) for k in keys})
    ck.close()
    ck = ckptfs.open(path, fast_path=False)
    t0 = now()
    for k in keys:
        ck.numpy(k)
    out["mount"] = now() - t0
    ck.close()
    print(json.dumps(out))


def worker_npy_copies(path, npy_dir):
    """NPY_DIR/<i>.npy: each tensor of PATH as np.save writes it (the tmpfs anchor of c.)."""
    import numpy as np
    ckptfs = _package()
    with ckptfs.open(path) as ck:
        for i, k in enumerate(ck):
            np.save(os.path.join(npy_dir, f"{i:05d}.npy"), ck.numpy(k))
    print(json.dumps({}))


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def worker_load_into(mode, path):
    """A model of PATH's float32 2-D tensors (fresh process), loaded by ckptfs.load_into or by
    torch.load + load_state_dict: peak RSS above the imports, the model's bytes, seconds."""
    import torch
    from torch import nn
    ckptfs = _package()
    meta = ckptfs.open(path)
    shapes = {k: ck_e["shape"] for k, ck_e in meta._entries.items()}
    meta.close()
    baseline = _status_kib("VmRSS")

    class Holder(nn.Module):
        def __init__(self, shape):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(shape), requires_grad=False)

    model = nn.Module()
    for k, shape in shapes.items():
        model.add_module(k.rsplit(".", 1)[0], Holder(shape))
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    largest = max(p.numel() * p.element_size() for p in model.parameters())
    t0 = now()
    if mode == "ckptfs":
        ckptfs.load_into(model, path)
    else:
        model.load_state_dict(torch.load(path))
    seconds = now() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"above_kib": peak - baseline, "model_bytes": model_bytes,
                      "largest": largest, "seconds": seconds}))


def worker_first(path, key, with_torch):
    """From `import ckptfs` to the first tensor of PATH: total, of which ckptfs.open."""
    if with_torch == "1":
        __import__("torch")  # a torch user's process: torch imported already
    t0 = now()
    ckptfs = _package()
    t1 = now()
    ck = ckptfs.open(path)
    t2 = now()
    x = ck[key] if with_torch == "1" else ck.numpy(key)
    t3 = now()
    path_taken = ck.path_of(key)
    ck.close()
    print(json.dumps({"total": t3 - t0, "import": t1 - t0, "open": t2 - t1, "first": t3 - t2,
                      "type": type(x).__module__, "path": path_taken}))


WORKERS = {"random": worker_random, "read_all": worker_read_all, "many": worker_many,
           "npy_copies": worker_npy_copies, "load_into": worker_load_into,
           "first": worker_first}


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        WORKERS[sys.argv[2]](*sys.argv[3:])
        return 0
    print(__doc__, file=sys.stderr)
    print("run it through scripts/bench: scripts/bench --only python", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
