# SPDX-License-Identifier: MIT
"""What runs in /usr/bin/python3 (or $BENCH_PYTHON) with torch and numpy, as worker processes of
scripts/bench: the generation of the bench's checkpoints (`scripts/bench --worker gen KIND PATH
ARGS...`) and the operations of the long-lived warm worker (`scripts/bench --worker-server`:
one JSON request a line on stdin, one JSON answer a line on stdout; processes.Worker is its
parent side). Standard library only at import: torch and numpy are imported where used."""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import ckptfs_mounts  # scripts/: views_dir
from benchlib.common import BenchError, now


def _save(obj, path):
    """torch.save into a temporary directory under the same basename, then rename: the archive's
    top folder is named after the file, and a killed generation leaves no half file behind."""
    import torch
    path = Path(path)
    tmpdir = Path(tempfile.mkdtemp(prefix=".gen-", dir=path.parent))
    try:
        torch.save(obj, tmpdir / path.name)
        os.replace(tmpdir / path.name, path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _fill(t, g):
    for chunk in t.view(-1).split(1 << 24):
        chunk.uniform_(-0.05, 0.05, generator=g)
    return t


def worker_gen(kind, path, *args):
    import torch
    g = torch.Generator().manual_seed(1234)
    if kind == "seq":
        n, rows, cols = map(int, args)
        sd = {f"layer{i}.weight": _fill(torch.empty(rows, cols), g) for i in range(n)}
    elif kind == "many":
        n = int(args[0])
        sizes = torch.randint(64, 257, (n,), generator=g).tolist()
        sd = {f"layer{i}.weight": torch.randn(s, generator=g) for i, s in enumerate(sizes)}
    elif kind == "big":
        n, rows, cols = map(int, args)
        sd = {f"block{i}.weight": _fill(torch.empty(rows, cols), g) for i in range(n)}
        sd["head.bias"] = torch.randn(1024, generator=g)
    else:
        raise SystemExit(f"unknown checkpoint kind {kind}")
    _save(sd, path)



class WorkerOps:
    """Operations of the long-lived worker (a warm Python process with torch and numpy)."""

    def imports(self):
        import numpy
        import torch
        return {"torch": torch.__version__, "numpy": numpy.__version__,
                "python": platform.python_version()}

    def torch_load(self, path):
        import torch
        t0 = now()
        obj = torch.load(path)
        seconds = now() - t0
        del obj
        return seconds

    def np_load_all(self, mnt):
        """np.load of every tensor.npy of a fresh mount, then again on the same mount."""
        import numpy as np
        idx = json.load(open(ckptfs_mounts.views_dir(mnt) / "index.json"))
        paths = [f"{mnt}/{e['path']}/tensor.npy" for e in idx["entries"] if e["kind"] == "tensor"]
        t0 = now()
        nbytes = sum(np.load(p).nbytes for p in paths)
        t1 = now()
        for p in paths:
            np.load(p)
        t2 = now()
        return {"first": t1 - t0, "again": t2 - t1, "count": len(paths), "bytes": nbytes}

    def np_load_tree(self, root, again):
        """np.load of every ENTRY/tensor.npy under `root` (sorted by name), once, or twice when
        `again`: the seconds of each pass."""
        import numpy as np
        paths = sorted(str(p) for p in Path(root).glob("*/tensor.npy"))
        times = []
        for _ in range(2 if again else 1):
            t0 = now()
            for p in paths:
                np.load(p)
            times.append(now() - t0)
        return {"times": times, "count": len(paths)}

    def np_load_mapped(self, mnt, dirs):
        """np.load(mmap_mode="r") of every DIR/tensor.npy, each compared with DIR/data."""
        import numpy as np
        t0 = now()
        for d in dirs:
            a = np.load(f"{mnt}/{d}/tensor.npy", mmap_mode="r")
            if not isinstance(a, np.memmap):
                raise BenchError(f"{d}/tensor.npy: np.load did not map it")
            with open(f"{mnt}/{d}/data", "rb") as fh:
                if a.tobytes() != fh.read():
                    raise BenchError(f"{d}/tensor.npy: the mapped bytes differ from data")
            del a
        return {"seconds": now() - t0}

    def mount_np_load(self, ckptfs, checkpoint, mnt, npy):
        """From this warm process: `ckptfs CHECKPOINT MNT` (returns once mounted), np.load."""
        import numpy as np
        t0 = now()
        r = subprocess.run([ckptfs, checkpoint, mnt], capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"ckptfs exited {r.returncode}: {r.stderr.strip()}")
        a = np.load(f"{mnt}/{npy}")
        seconds = now() - t0
        return {"seconds": seconds, "bytes": a.nbytes}


def worker_server():
    ops = WorkerOps()
    for line in sys.stdin:
        req = json.loads(line)
        try:
            out = {"ok": True, "result": getattr(ops, req["op"])(*req.get("args", []))}
        except Exception as e:  # reported to the parent, which marks the cell failed
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
