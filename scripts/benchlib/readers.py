# SPDX-License-Identifier: MIT
"""How the bench reads and times bytes: whole files with 1 MiB reads, random reads by forked
reader processes released together, a function in a forked child (its memory never counts in
this process's peak RSS), the page cache dropped, new memory written once."""

import mmap
import os
import signal

from benchlib.common import READ_SIZE, BenchError, now


def read_files(paths, bufsize=READ_SIZE):
    """Reads every file start to end with 1 MiB os.readv calls into one preallocated buffer.
    (Measured against `cat` and `dd bs=1M` on this machine: the same speed or faster, and
    no process start per file.) Returns (bytes, seconds)."""
    buf = [memoryview(bytearray(bufsize))]
    n = 0
    t0 = now()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            while (k := os.readv(fd, buf)) > 0:
                n += k
        finally:
            os.close(fd)
    return n, now() - t0


def drop_page_cache():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def write_new_memory(nbytes, bufsize=READ_SIZE):
    """Bytes per second of copying 1 MiB blocks into `nbytes` of anonymous memory never touched
    before: the page allocation and first-touch cost a first read through a page cache pays for
    every page it fills (on a VM that returns free memory to its host, it dominates)."""
    chunk = b"\1" * bufsize
    n = nbytes - nbytes % bufsize
    m = mmap.mmap(-1, n)
    try:
        t0 = now()
        for off in range(0, n, bufsize):
            m[off:off + bufsize] = chunk
        return n / (now() - t0)
    finally:
        m.close()


def in_child(fn, *args):
    """fn(*args) in a forked child; returns its float result. Memory it touches never counts in
    this process's peak RSS, which every child started with vfork (subprocess does) inherits
    in its own ru_maxrss."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            os.write(w, repr(float(fn(*args))).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    data = b""
    while (chunk := os.read(r, 4096)):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        raise BenchError(f"{fn.__name__} failed in its child process")
    return float(data)



def random_reads(per_worker, bs):
    """per_worker: for each reader process, a list of (fd, offset). The readers are forked,
    released together, and each times itself; returns (bytes, ops, seconds from the first
    start to the last end)."""
    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    pids = []
    try:
        for ops in per_worker:
            pid = os.fork()
            if pid == 0:  # the reader
                status = 1
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    os.close(go_w)
                    os.close(res_r)
                    buf = [memoryview(bytearray(bs))]
                    os.read(go_r, 1)
                    t0 = now()
                    n = 0
                    for fd, off in ops:
                        n += os.preadv(fd, buf, off)
                    t1 = now()
                    os.write(res_w, f"{t0!r} {t1!r} {n} {len(ops)}\n".encode())
                    status = 0
                except BaseException as e:
                    os.write(res_w, f"ERR {type(e).__name__}: {e}\n".encode()[:500])
                finally:
                    os._exit(status)
            pids.append(pid)
        os.close(go_r)
        go_r = -1
        os.close(res_w)
        res_w = -1
        os.write(go_w, b"g" * len(pids))
        data = b""
        while (chunk := os.read(res_r, 65536)):
            data += chunk
    finally:
        for fd in (go_r, go_w, res_r, res_w):
            if fd >= 0:
                os.close(fd)
        for pid in pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    lines = data.decode().splitlines()
    errors = [l[4:] for l in lines if l.startswith("ERR ")]
    if errors or len(lines) != len(pids):
        raise BenchError(errors[0] if errors else "a reader process died")
    rows = [l.split() for l in lines]
    start = min(float(r[0]) for r in rows)
    end = max(float(r[1]) for r in rows)
    return sum(int(r[2]) for r in rows), sum(int(r[3]) for r in rows), end - start

