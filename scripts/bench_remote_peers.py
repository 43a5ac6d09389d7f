#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench_remote_peers.py: scripts/bench's section "peers" (20): a checkpoint on a real S3 server
(Ceph's RADOS Gateway of the interop root: radosgw, dbstore with the POSIX filter, on loopback;
tests/integration/rgw_server.py) read through ckptfs and through the FUSE mounts users pick
instead, `rclone mount` (VFS cache off, and full) and `s3fs`, side by side in one run, with the
same reader code through each: safetensors.safe_open of the interop root (torch 2.x), on the
object's file in the peers' mounts and on `.ckptfs/model.safetensors` in ckptfs's. The bytes the
server sent are counted by a relay on loopback between the mounts and the gateway
(remote_servers.CountingRelay), every request of the mount included.

The object: one safetensors file of 102 tensors (64 float32 matrices of 4096 x 1408, 23.1 MB
each, and 38 vectors of 4096), 1.48 GB, made with numpy into the workdir and put on the gateway
in one PUT. Each figure is on a fresh mount (and, for rclone's full VFS cache, a fresh cache):

  a. one tensor: safe_open + get_tensor of one 23.1 MB matrix (goal: the server sends at most
     1.1 x its bytes + 1 MiB, the mount included);
  b. 10 rows of every tensor: safe_open + get_slice(key)[:10] of each;
  c. every tensor once: safe_open + get_tensor of each, in the file's order;
  d. mount until keys: the mount, then safe_open + keys();
  e. eight ckptfs mounts of the object sharing one -o cache_dir, every one reading the whole of
     .ckptfs/model.safetensors at once (a thread each, 1 MiB reads): the bytes the server sent
     and the time until the last read ends, against eight mounts without a cache.

Times of a-c are the reader's alone (the mount comes before); d's is the mount and the reader.
Each worker runs in the root (scripts/interop-run: chroot, a mount namespace of its own), the
peers' mounts in it, ckptfs's made here before it starts at a path inside the root.

scripts/bench imports this module and calls section(bench, Group); the readers run as
`bench_remote_peers.py --worker OP ...` in the root and print one JSON document.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MB = 1e6
MiB = 1 << 20

# The object: (name, shape) of every tensor, in the file's order, like a model's layers.
MATRIX = (4096, 1408)
VECTOR = (4096,)
TENSORS = []
for _i in range(64):
    if _i < 38:
        TENSORS.append((f"model.layers.{_i}.norm.weight", VECTOR))
    TENSORS.append((f"model.layers.{_i}.mlp.weight", MATRIX))
ONE_TENSOR = "model.layers.32.mlp.weight"
OBJECT = "model.safetensors"
BUCKET = "models"


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def log(msg):
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Workers (run in the interop root as `bench_remote_peers.py --worker OP ARGS...`)
# ---------------------------------------------------------------------------------------------

def read_column(column, path, key):
    """Runs `column`'s reader on the safetensors file at `path`; its seconds. safe_open maps
    the file (torch's UntypedStorage.from_file): a tensor it gives is read when touched, so each
    is copied (clone()), as loading it into a model would."""
    import torch  # noqa: F401  (imported before the clock starts: safe_open imports it)
    from safetensors import safe_open
    t0 = now()
    with safe_open(path, "pt") as f:
        keys = list(f.keys())
        if column == "one":
            f.get_tensor(key).clone()
        elif column == "rows":
            for k in keys:
                f.get_slice(k)[:10].clone()
        elif column == "all":
            for k in keys:
                f.get_tensor(k).clone()
        elif column != "keys":
            raise ValueError(f"unknown column {column}")
    return now() - t0


def wait_mounted(mnt, name, proc, timeout=60):
    deadline = now() + timeout
    while now() < deadline:
        if os.path.ismount(mnt) and os.path.exists(os.path.join(mnt, name)):
            return
        if proc is not None and proc.poll() not in (None, 0):
            raise RuntimeError(f"the mount exited {proc.returncode}")
        time.sleep(0.002)
    raise RuntimeError(f"{mnt}: not mounted after {timeout} s")


def peer_command(kind, endpoint, mnt, work, access_key, secret_key):
    """The command that mounts bucket BUCKET at `mnt` with `kind`, and whether it returns once
    mounted (rclone --daemon waits for the mount; s3fs returns at once)."""
    if kind.startswith("rclone"):
        cache = "full" if kind == "rclone-full" else "off"
        return [
            "rclone", "mount", f":s3:{BUCKET}", mnt, "--s3-provider", "Ceph", "--s3-endpoint",
            endpoint, "--s3-access-key-id", access_key, "--s3-secret-access-key", secret_key,
            "--s3-force-path-style",
            "--read-only", "--vfs-cache-mode", cache, "--cache-dir", os.path.join(work, "cache"),
            "--config", "/dev/null", "--daemon"]
    if kind == "s3fs":
        secrets = os.path.join(work, "s3fs-passwd")
        with open(os.open(secrets, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(f"{access_key}:{secret_key}\n")
        return ["s3fs", BUCKET, mnt, "-o", f"url={endpoint}", "-o", "use_path_request_style",
                "-o", f"passwd_file={secrets}", "-o", "ro"]
    raise ValueError(f"unknown peer {kind}")


def worker_peer(kind, endpoint, access_key, secret_key, mnt, work, column, key):
    """Mounts the bucket with peer `kind` (the test gateway's keys, given as arguments:
    interop-run passes no environment), runs `column` on the object, unmounts."""
    import torch  # noqa: F401  (before the clock starts)
    t0 = now()
    proc = subprocess.Popen(peer_command(kind, endpoint, mnt, work, access_key, secret_key),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_mounted(mnt, OBJECT, proc)
        mounted = now() - t0
        read = read_column(column, os.path.join(mnt, OBJECT), key)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"mount": mounted, "read": read}


def worker_read(path, column, key):
    return {"read": read_column(column, path, key)}


def worker_main(argv):
    op, args = argv[0], argv[1:]
    out = {"peer": worker_peer, "read": worker_read}[op](*args)
    print(json.dumps(out), flush=True)


# ---------------------------------------------------------------------------------------------
# The section (called by scripts/bench)
# ---------------------------------------------------------------------------------------------

def write_object(path):
    """The safetensors object of TENSORS (random float32, seeded), written once."""
    import numpy as np
    header, offset = {}, 0
    for name, shape in TENSORS:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(0)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for _, shape in TENSORS:
            f.write(rng.standard_normal(int(np.prod(shape)), dtype=np.float32).tobytes())
    os.replace(tmp, path)


class Peers:
    """The gateway, the relay in front of it, and the mounts of one run of the section."""

    def __init__(self, bench, object_path):
        sys.path.insert(0, str(REPO / "tests" / "integration"))
        from remote_servers import CountingRelay
        from rgw_server import Rgw
        why = Rgw.missing()
        if why:
            raise RuntimeError(why)
        from fixtures import INTEROP_ROOT
        self.bench = bench
        self.root = INTEROP_ROOT
        self.rgw = Rgw(BUCKET, posix=True)
        self.relay = None
        self.scratch = Path(tempfile.mkdtemp(prefix="ckptfs-bench-peers-", dir=self.root / "tmp"))
        self.rgw.start()
        try:
            log(f"putting {object_path.name} on the gateway")
            self.rgw.put(OBJECT, object_path)
            self.relay = CountingRelay(self.rgw.port).start()
        except BaseException:
            self.stop()
            raise
        self.endpoint = f"http://127.0.0.1:{self.relay.port}"
        self.keys = (Rgw.ACCESS_KEY, Rgw.SECRET_KEY)
        self.env = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": Rgw.ACCESS_KEY,
                    "AWS_SECRET_ACCESS_KEY": Rgw.SECRET_KEY, "AWS_REGION": "us-east-1"}

    def stop(self):
        if self.relay is not None:
            self.relay.stop()
        self.rgw.stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def inside(self, path):
        return "/" + str(Path(path).relative_to(self.root))

    def fresh_dir(self, name):
        d = self.scratch / name
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    def worker(self, *args, timeout=1800):
        r = subprocess.run([str(REPO / "scripts" / "interop-run"), str(Path(__file__).resolve()),
                            "--worker", *map(str, args)], capture_output=True, text=True,
                           timeout=timeout)
        if r.returncode != 0:
            lines = r.stderr.strip().splitlines()
            raise RuntimeError(f"{args[0]} exited {r.returncode}" + (f": {lines[-1]}" if lines
                                                                    else ""))
        return json.loads(r.stdout.strip().splitlines()[-1])

    def counted(self, fn):
        """fn()'s result and the bytes the server sent while it ran: the relay's count once every
        connection it relayed has ended (fn unmounts, so the mount's process has closed them;
        a relayed answer still on its way is counted with its run)."""
        before = self.relay.received
        result = fn()
        deadline = now() + 30
        while self.relay.open_connections() and now() < deadline:
            time.sleep(0.01)
        return result, self.relay.received - before

    def ckptfs_mount(self, mnt, *options):
        """A ckptfs mount of the object at `mnt` (-f): (the daemon, seconds until mounted)."""
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            t0 = now()
            p = self.bench.procs.mount_foreground(
                [self.bench.ckptfs, "-f", *options, f"s3://{BUCKET}/{OBJECT}", str(mnt)], mnt)
            return p, now() - t0
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def ckptfs_column(self, column):
        """(seconds, bytes) of `column` through a fresh ckptfs mount."""
        mnt = self.fresh_dir("ckptfs-mnt")

        def run():
            p, mount_seconds = self.ckptfs_mount(mnt)
            try:
                import ckptfs_mounts
                path = self.inside(ckptfs_mounts.views_dir(mnt) / OBJECT)
                read = self.worker("read", path, column, ONE_TENSOR)["read"]
            finally:
                self.bench.procs.unmount(mnt, p)
            return read + (mount_seconds if column == "keys" else 0.0)
        return self.counted(run)

    def peer_column(self, kind, column):
        mnt = self.fresh_dir(f"{kind}-mnt")
        work = self.fresh_dir(f"{kind}-work")

        def run():
            out = self.worker("peer", kind, self.endpoint, *self.keys, self.inside(mnt),
                              self.inside(work), column, ONE_TENSOR)
            return out["read"] + (out["mount"] if column == "keys" else 0.0)
        return self.counted(run)

    def eight_mounts(self, shared_cache):
        """Eight ckptfs mounts reading the whole view at once: (seconds until the last read
        ends, bytes sent)."""
        cache = self.fresh_dir("cache") if shared_cache else None
        options = ("-o", f"cache_dir={cache}") if cache else ()
        mnts = [self.fresh_dir(f"eight-{i}") for i in range(8)]

        def run():
            daemons = []
            try:
                for mnt in mnts:
                    daemons.append(self.ckptfs_mount(mnt, *options)[0])
                import ckptfs_mounts
                errors = []

                def read(mnt):
                    try:
                        with open(ckptfs_mounts.views_dir(mnt) / OBJECT, "rb",
                                  buffering=0) as f:
                            while f.read(MiB):
                                pass
                    except OSError as e:
                        errors.append(e)
                threads = [threading.Thread(target=read, args=(m,)) for m in mnts]
                t0 = now()
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                seconds = now() - t0
                if errors:
                    raise errors[0]
                return seconds
            finally:
                for mnt, p in zip(mnts, daemons):
                    self.bench.procs.unmount(mnt, p)
        return self.counted(run)


def section(bench, Group):
    object_path = bench.work / f"peers-{len(TENSORS)}.safetensors"
    if not object_path.is_file():
        log(f"generating {object_path} with numpy")
        write_object(object_path)
    size = object_path.stat().st_size
    one_bytes = 4 * MATRIX[0] * MATRIX[1]
    what = (f"{object_path.name} ({size / 1e9:.2f} GB, {len(TENSORS)} tensors) on Ceph's RGW "
            f"(dbstore, POSIX filter, loopback), safetensors.safe_open (interop root); fresh "
            f"mounts; bytes the server sent, mount included, in the notes")
    systems = [("ckptfs", "ckptfs"), ("rclone-off", "rclone mount, VFS cache off"),
               ("rclone-full", "rclone mount, VFS cache full"), ("s3fs", "s3fs")]
    columns = [("one", f"20a. One tensor ({one_bytes / 1e6:.1f} MB): get_tensor"),
               ("rows", "20b. 10 rows of every tensor: get_slice(key)[:10]"),
               ("all", "20c. Every tensor once: get_tensor of each"),
               ("keys", "20d. Mount until keys: the mount, safe_open, keys()")]
    groups, rows = [], {}
    for column, title in columns:
        g = Group(f"{title}; {what}")
        groups.append(g)
        for kind, label in systems:
            rows[column, kind] = g.row(label, "s", ref=kind == "ckptfs", extra_unit="MB")
    rows["one", "ckptfs"].note = (f"goal: at most {(1.1 * one_bytes + MiB) / 1e6:.1f} MB "
                                  "(1.1x the tensor + 1 MiB); faster than every peer")
    for column in ("rows", "all", "keys"):
        rows[column, "ckptfs"].note = "goal: faster than every peer"
    e = Group(f"20e. Eight ckptfs mounts of {object_path.name}, every one reading the whole "
              f".ckptfs/{OBJECT} at once (1 MiB reads): until the last read ends; bytes the "
              "server sent in the notes (x the object)")
    e_alone = e.row("eight mounts, no disk cache", "s", ref=True, extra_unit="x")
    e_shared = e.row("eight mounts, one -o cache_dir (blocks in flight shared)", "s",
                     extra_unit="x")
    e_shared.note = "goal: at most 1.2x"
    groups.append(e)
    for g in groups:
        bench.groups.append(g)

    try:
        peers = Peers(bench, object_path)
    except (RuntimeError, AssertionError, OSError, subprocess.SubprocessError) as err:
        for g in groups:
            for r in g.rows:
                r.fail(str(err))
        return
    try:
        for run in range(bench.runs):
            bench.progress("peers", run)
            for column, _ in columns:
                for kind, _ in systems:
                    row = rows[column, kind]
                    if row.failed:
                        continue
                    try:
                        if kind == "ckptfs":
                            seconds, sent = peers.ckptfs_column(column)
                        else:
                            seconds, sent = peers.peer_column(kind, column)
                        row.add(seconds, sent / MB)
                    except (RuntimeError, OSError, subprocess.SubprocessError,
                            ValueError) as err:
                        row.fail(str(err) or type(err).__name__)
            for row, shared in ((e_alone, False), (e_shared, True)):
                if row.failed:
                    continue
                try:
                    seconds, sent = peers.eight_mounts(shared)
                    row.add(seconds, sent / size)
                except (RuntimeError, OSError, subprocess.SubprocessError) as err:
                    row.fail(str(err) or type(err).__name__)
    finally:
        peers.stop()
    for column, _ in columns:
        bytes_median = {kind: statistics.median(rows[column, kind].extra)
                        for kind, _ in systems if rows[column, kind].extra}
        log(f"20 {column}: MB sent " + ", ".join(f"{k} {v:.1f}" for k, v in
                                                   bytes_median.items()))


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
    else:
        print(__doc__)
