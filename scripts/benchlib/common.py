# SPDX-License-Identifier: MIT
"""What every part of the bench shares: where things are, the sizes of the generated
checkpoints, units, BenchError and log, and facts read from /proc and /sys (a process's RSS,
the machine's memory, the storage under a path, how idle CPUs wait)."""

import os
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent
ROOT = SCRIPTS.parent
BENCH = SCRIPTS / "bench"  # the entry point, which the worker processes run too (--worker...)
TORCH_PY = os.environ.get("BENCH_PYTHON", "/usr/bin/python3")
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
READ_SIZE = 1 << 20  # sequential reads: 1 MiB per read(2)

# Sizes of the generated checkpoints: (tensors, rows, cols) float32, and random-read op counts.
FULL = {
    "seq": (96, 4096, 1024),      # 96 x 16 MiB = 1.61 GB
    "many": 10000,                # 10,000 tensors of 64..256 floats
    "big": (4, 154000, 2048),     # 4 x 1.17 GiB + 1 small = 4.70 GiB
    "rand_ops": {4 * KiB: 16384, MiB: 384},
    "st": (96, 4096, 1024),       # a safetensors file of 96 x 16 MiB
    "shards": (100, 4, 1024, 1024),  # 100 shards of 4 x 4 MiB = 1.68 GB
    # ZeRO: stage -> (layers, hidden) of bf16 linear layers on 4 ranks: 1.41 GB (stage 2: 14
    # bytes a parameter, the module's bf16 weights included), 1.41 GB (stage 3: 12 bytes).
    "zero": {2: (6, 4097), 3: (7, 4097)},
    "npz": 128 * MiB,             # one savez_compressed member (section 19)
}
QUICK = {
    "seq": (32, 2048, 1024),      # 32 x 8 MiB = 268 MB
    "many": 2000,
    "big": (4, 16000, 2048),      # 4 x 125 MiB
    "rand_ops": {4 * KiB: 4096, MiB: 96},
    "st": (32, 2048, 1024),
    "shards": (100, 4, 256, 1024),  # 100 shards of 4 x 1 MiB
    "zero": {2: (3, 1025), 3: (3, 1025)},
    "npz": 16 * MiB,
}
FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


class BenchError(Exception):
    pass


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)  # system-wide: comparable across processes


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def human_bytes(n):
    if n >= GiB:
        return f"{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    return f"{n / KiB:.1f} KiB"


def read_status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise BenchError(f"no {field} for pid {pid}")


def read_meminfo_kib(field):
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise BenchError(f"no {field} in /proc/meminfo")


def read_status_meminfo():
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * KiB
    return 0


def loadavg():
    with open("/proc/loadavg") as fh:
        return fh.read().split()[0]


def cpu_idle():
    """How this machine's idle CPUs wait, which sets what waking one costs: every FUSE request
    whose reader sleeps on a CPU that went idle pays it (section 16c)."""
    base = Path("/sys/devices/system/cpu/cpuidle")
    try:
        driver = (base / "current_driver").read_text().strip()
    except OSError:
        return "unknown (no /sys/devices/system/cpu/cpuidle)"
    out = f"cpuidle driver {driver}"
    poll = Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
    if driver == "haltpoll" and poll.exists():
        ns = int(poll.read_text())
        out += (f", guest_halt_poll_ns={ns}" +
                (" (a vCPU halts as soon as it is idle: waking it costs an exit to the host)"
                 if ns == 0 else ""))
    return out


def describe_storage(path):
    r = subprocess.run(["findmnt", "-n", "-o", "SOURCE,FSTYPE,SIZE", "-T", str(path)],
                       capture_output=True, text=True)
    parts = r.stdout.split()
    if len(parts) < 3:
        return "?"
    source, fstype, size = parts[:3]
    desc = f"{source} ({fstype}, {size})"
    dev = Path(source).name
    sysblk = Path("/sys/class/block") / dev
    if sysblk.exists():
        base = sysblk.resolve()
        disk = base.parent if (base / "partition").exists() else base
        driver = disk / "device" / "driver"
        drv = driver.resolve().name if driver.exists() else "?"
        rot = (disk / "queue" / "rotational")
        rot = rot.read_text().strip() if rot.exists() else "?"
        desc += f", {drv}, rotational={rot}"
    return desc


def interop_root():
    """The interop root (scripts/interop-root) that sections 13-15, 17 and 18 run torch
    2.x, DeepSpeed's, gguf-py's and transformers' code in."""
    return Path(os.environ.get("CKPTFS_INTEROP_ROOT", "/var/cache/ckptfs/sid-root"))
