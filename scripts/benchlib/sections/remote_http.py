# SPDX-License-Identifier: MIT
"""Section 7, --only remote: remote checkpoints over loopback HTTP (nginx, started and stopped
here: tests/integration/remote_servers.py): a sequential read of every tensor against
`curl -o FILE` of the same URL to the workdir's disk (and, as information, `curl -o /dev/null`
and a download to tmpfs), the mount against downloading the file with curl, the time to the
first tensor of the 4.7 GiB file, and the bytes and requests nginx served for one tensor and
for the first 8 MiB of another. Needs nginx and curl.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchlib.common import (ROOT, TORCH_PY, KiB, BenchError, describe_storage, human_bytes,
                             now)
from benchlib.readers import in_child, read_files, write_new_memory
from benchlib.table import Group, measure


def run(bench):
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from remote_servers import Nginx
    if shutil.which("curl") is None:
        raise BenchError("section 7 needs curl (scripts/install-deps.sh)")
    nginx = Nginx(bench.work, bench.work / "nginx", tls=False)
    nginx.start()
    try:
        _remote(bench, nginx)
    finally:
        nginx.stop()


def _remote(bench, nginx):
    entries = sorted(bench.seq_entries, key=lambda e: e["file_offset"])
    total = sum(e["nbytes"] for e in entries)
    size = bench.seq_file.stat().st_size
    url = nginx.url(bench.seq_file.name)
    big_url = nginx.url(bench.big_file.name)
    big_entries = bench.inspect(bench.big_file)
    small = min(big_entries, key=lambda e: e["nbytes"])
    g = Group(f"7. Remote over loopback HTTP (nginx, sendfile from a warm page cache): "
              f"{bench.seq_file.name}, every tensor's data in file order, 1 MiB reads")
    # The fair anchor: what a user does instead of mounting, download the file to the disk
    # (its bytes land in new page-cache pages, as a first read through the mount's do).
    curl_disk = g.row(f"curl -o FILE of the URL (FILE on {describe_storage(bench.work)})",
                      "GB/s", ref=True, higher_better=True)
    curl_read = g.row("curl -o /dev/null of the URL", "GB/s", higher_better=True)
    curl_read.note = "information: /dev/null keeps no byte (was this group's anchor)"
    curl_shm = g.row("curl -o a file in /dev/shm (tmpfs)", "GB/s", higher_better=True)
    curl_shm.note = ("the download lands in new page-cache pages, as a first read through "
                     "any mount's page cache must; /dev/null keeps nothing")
    fresh = g.row("new memory written once", "GB/s", higher_better=True)
    fresh.note = "as in section 1: what filling new pages costs on this machine now"
    ck_read = g.row("ckptfs URL MNT, first read (fresh mount)", "GB/s", higher_better=True)
    ck_direct = g.row("ckptfs -o direct_io URL MNT, first read (fresh mount)", "GB/s",
                      higher_better=True)
    ck_direct.note = "no page cache: the replies go straight into the reader's buffer"
    m = Group(f"7. Remote: mount over HTTP against downloading the file ({bench.seq_file.name}, "
              f"{human_bytes(size)}; {bench.big_file.name}, "
              f"{human_bytes(bench.big_file.stat().st_size)})")
    curl_get = m.row(f"curl download of {bench.seq_file.name} (to /dev/null)", "ms", ref=True)
    ck_mount = m.row(f"ckptfs mount of {bench.seq_file.name} over HTTP, until index.json is read",
                     "ms")
    curl_big = m.row(f"curl download of {bench.big_file.name} (to /dev/null)", "ms")
    ck_first = m.row(f"ckptfs mount + np.load of {small['key']} over HTTP, warm process", "ms")
    ck_first.ref_row = curl_big
    b = Group(f"7. Remote: bytes nginx sent for one tensor, fresh mount of "
              f"{bench.big_file.name}")
    own = b.row(f"{small['key']}: its own bytes", "KiB", ref=True)
    sent = b.row(f"{small['key']}: np.load of tensor.npy, bytes sent after the mount", "KiB")
    mid = max(big_entries, key=lambda e: e["nbytes"])
    b8 = Group(f"7. Remote: bytes nginx sent for the first 8 MiB of {mid['key']}'s data "
               f"(1 MiB reads), fresh mount of {bench.big_file.name}")
    own_mid = b8.row("its own bytes", "KiB", ref=True)
    sent_mid = b8.row("bytes sent after the mount", "KiB")
    bench.groups += [g, m, b, b8]
    bench.warm(bench.seq_file)
    bench.warm(bench.big_file)
    npy = f"{small['path']}/tensor.npy"

    def curl(u):
        t0 = now()
        bench.procs.run(["curl", "-sf", "-o", "/dev/null", u])
        return now() - t0

    for run in range(bench.runs):
        bench.progress("remote", run)
        measure(curl_read, lambda: curl_read.add(size / curl(url) / 1e9))

        def to_disk():
            target = bench.work / "curl-out"
            try:
                target.unlink(missing_ok=True)
                os.sync()  # what earlier runs left dirty is not written back meanwhile
                t0 = now()
                bench.procs.run(["curl", "-sf", "-o", str(target), url])
                dt = now() - t0
                if target.stat().st_size != size:
                    raise BenchError(f"curl wrote {target.stat().st_size} bytes of {size}")
                curl_disk.add(size / dt / 1e9)
            finally:
                target.unlink(missing_ok=True)
        measure(curl_disk, to_disk)

        def to_shm():
            shm = Path("/dev/shm") / f"ckptfs-bench-{os.getpid()}"
            try:
                t0 = now()
                bench.procs.run(["curl", "-sf", "-o", str(shm), url])
                curl_shm.add(size / (now() - t0) / 1e9)
            finally:
                shm.unlink(missing_ok=True)
        measure(curl_shm, to_shm)
        measure(fresh, lambda: fresh.add(in_child(write_new_memory, size) / 1e9))

        def direct():
            p = bench.procs.mount_foreground(
                [bench.ckptfs, "-f", "-o", "direct_io", url, str(bench.mnt)], bench.mnt)
            try:
                n, dt = read_files([bench.mnt / e["path"] / "data" for e in entries])
                if n != total:
                    raise BenchError(f"read {n} bytes, expected {total}")
                ck_direct.add(n / dt / 1e9)
            finally:
                bench.procs.unmount(bench.mnt, p)
        measure(ck_direct, direct)

        def ck():
            mark = nginx.mark()
            p = bench.procs.mount_foreground([bench.ckptfs, "-f", url, str(bench.mnt)], bench.mnt)
            try:
                mount_requests = len(nginx.since(mark))
                mark = nginx.mark()
                n, dt = read_files([bench.mnt / e["path"] / "data" for e in entries])
                if n != total:
                    raise BenchError(f"read {n} bytes, expected {total}")
                ck_read.add(n / dt / 1e9)
            finally:
                bench.procs.unmount(bench.mnt, p)
            got = nginx.since(mark)
            ck_read.note = (f"target >= 1.0x; {mount_requests} requests at mount; the read: "
                            f"{len(got)} requests, "
                            f"{human_bytes(sum(r['bytes'] for r in got))}")
        measure(ck_read, ck)
        measure(curl_get, lambda: curl_get.add(curl(url) * 1e3))

        def mount_time():
            mark = nginx.mark()
            bench.procs.mounts.add(str(bench.mnt))
            try:
                t0 = now()
                p = bench.procs.mount_foreground([bench.ckptfs, "-f", url, str(bench.mnt)],
                                                bench.mnt)
                ck_mount.add((now() - t0) * 1e3)
            finally:
                bench.procs.unmount(bench.mnt, p)
            ck_mount.note = f"{len(nginx.since(mark))} requests"
        measure(ck_mount, mount_time)
        measure(curl_big, lambda: curl_big.add(curl(big_url) * 1e3))

        def first():
            mark = nginx.mark()
            bench.procs.mounts.add(str(bench.mnt))
            try:
                r = bench.worker.call("mount_np_load", bench.ckptfs, big_url, str(bench.mnt), npy)
                ck_first.add(r["seconds"] * 1e3)
            finally:
                bench.procs.unmount(bench.mnt)
            got = nginx.since(mark)
            ck_first.note = f"{len(got)} requests, {human_bytes(sum(r['bytes'] for r in got))}"
        measure(ck_first, first)

        def one_tensor():
            p = bench.procs.mount_foreground([bench.ckptfs, "-f", big_url, str(bench.mnt)],
                                            bench.mnt)
            try:
                mark = nginx.mark()
                subprocess.run([TORCH_PY, "-c", "import numpy, sys; numpy.load(sys.argv[1])",
                                str(bench.mnt / npy)], check=True, timeout=120)
                got = nginx.since(mark)
                sent.add(sum(r["bytes"] for r in got) / KiB)
                own.add(small["nbytes"] / KiB)
                sent.note = f"{len(got)} requests"
                mark = nginx.mark()
                with open(bench.mnt / mid["path"] / "data", "rb") as f:
                    want = 8 << 20
                    while want > 0 and (k := len(f.read(min(want, 1 << 20)))) > 0:
                        want -= k
                got = nginx.since(mark)
                sent_mid.add(sum(r["bytes"] for r in got) / KiB)
                own_mid.add((8 << 20) / KiB)
                sent_mid.note = (f"{len(got)} requests; the kernel's readahead (2 MiB) and "
                                 "ckptfs's (as much as was read, 1 to 64 MiB) run past the 8 MiB")
            finally:
                bench.procs.unmount(bench.mnt, p)
        measure(sent, one_tensor)
    for r in (own, own_mid, sent_mid):
        if sent.failed:
            r.fail(sent.failed)
