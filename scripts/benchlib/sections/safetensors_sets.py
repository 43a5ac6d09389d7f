# SPDX-License-Identifier: MIT
"""Section 8, --only safetensors: a safetensors file and a Hugging Face sharded set (100 shards),
both written here with random bytes as the safetensors library lays them out: mount time (until
index.json is read) against reading and parsing their headers in Python, and the first
sequential read of every tensor against reading the files themselves.
"""

import json
import os
import time

import ckptfs_mounts  # scripts/: views_dir
from benchlib.common import MiB, BenchError, human_bytes, log, now
from benchlib.readers import read_files
from benchlib.table import Group, measure


def run(bench):
    block = os.urandom(16 * MiB)
    n, rows, cols = bench.cfg["st"]
    st_file = bench.work / f"st-{n}x{rows}x{cols}.safetensors"
    if not st_file.is_file():
        log(f"generating {st_file}")
        write_safetensors_file(st_file, [(f"layer{i}.weight", rows, cols) for i in range(n)],
                               block)
    shards, per, srows, scols = bench.cfg["shards"]
    set_dir = bench.work / f"sharded-{shards}x{per}x{srows}x{scols}"
    index = set_dir / "model.safetensors.index.json"
    if not index.is_file():
        log(f"generating {set_dir}")
        set_dir.mkdir(exist_ok=True)
        weight_map = {}
        for i in range(shards):
            f = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            names = [f"layers.{i}.w{j}" for j in range(per)]
            write_safetensors_file(set_dir / f, [(k, srows, scols) for k in names], block)
            weight_map.update({k: f for k in names})
        tmp = set_dir / ".index.tmp"
        tmp.write_text(json.dumps({"metadata": {"total_size": shards * per * srows * scols * 4},
                                   "weight_map": dict(sorted(weight_map.items()))},
                                  indent=2) + "\n")
        os.replace(tmp, index)
    shard_files = sorted(set_dir.glob("*.safetensors"))
    n_set = shards * per

    g = Group(f"8. Mount, safetensors: {st_file.name} ({n} tensors, "
              f"{human_bytes(st_file.stat().st_size)}) and a {shards}-shard set "
              f"({n_set} tensors, {human_bytes(sum(p.stat().st_size for p in shard_files))})")
    ref_one = g.row("read + json.loads the file's header (Python)", "ms", ref=True)
    mount_one = g.row("ckptfs FILE MNT, until index.json is read", "ms")
    ref_set = g.row(f"read + json.loads the {shards} shards' headers and the index (Python)",
                    "ms")
    mount_set = g.row(f"ckptfs DIR MNT ({shards} shards), until index.json is read", "ms")
    mount_set.ref_row = ref_set
    seq = Group("8. Sequential read, 1 MiB reads: every tensor's data, safetensors")
    file_ref = seq.row(f"{st_file.name} itself, warm page cache", "GB/s", ref=True,
                       higher_better=True)
    file_first = seq.row("ckptfs, first read (fresh mount)", "GB/s", higher_better=True)
    set_ref = seq.row(f"the {shards} shard files themselves, warm page cache", "GB/s",
                      higher_better=True)
    set_first = seq.row(f"ckptfs, {shards}-shard set, first read (fresh mount)", "GB/s",
                        higher_better=True)
    set_first.ref_row = set_ref
    bench.groups += [g, seq]

    def mounted_until_index(location, row, tensors):
        bench.procs.mounts.add(str(bench.mnt))
        t0 = now()
        bench.procs.run([bench.ckptfs, str(location), str(bench.mnt)])
        try:
            while True:
                try:
                    with open(ckptfs_mounts.views_dir(bench.mnt) / "index.json", "rb") as fh:
                        data = fh.read()
                    break
                except OSError:
                    if now() - t0 > 60:
                        raise
                    time.sleep(0.0005)
            row.add((now() - t0) * 1e3)
            if json.loads(data)["tensors"] != tensors:
                raise BenchError("index.json lists the wrong number of tensors")
        finally:
            bench.procs.unmount(bench.mnt)

    def first_read(location, row, files):
        total = sum(p.stat().st_size for p in files)
        p = bench.procs.mount_foreground([bench.ckptfs, "-f", str(location), str(bench.mnt)],
                                        bench.mnt)
        try:
            index_doc = json.load(open(ckptfs_mounts.views_dir(bench.mnt) / "index.json"))
            paths = [bench.mnt / e["path"] / "data" for e in index_doc["entries"]]
            nbytes, dt = read_files(paths)
            if nbytes != index_doc["total_bytes"] or nbytes > total:
                raise BenchError(f"read {nbytes} bytes, expected {index_doc['total_bytes']}")
            row.add(nbytes / dt / 1e9)
        finally:
            bench.procs.unmount(bench.mnt, p)

    bench.warm(st_file)
    read_files(shard_files)
    for run in range(bench.runs):
        bench.progress("safetensors", run)

        def header_one():
            t0 = now()
            read_headers([st_file])
            ref_one.add((now() - t0) * 1e3)
        measure(ref_one, header_one)

        def header_set():
            t0 = now()
            json.loads(index.read_bytes())
            if read_headers(shard_files) != n_set:
                raise BenchError("the shards hold the wrong number of tensors")
            ref_set.add((now() - t0) * 1e3)
        measure(ref_set, header_set)
        measure(mount_one, lambda: mounted_until_index(st_file, mount_one, n))
        measure(mount_set, lambda: mounted_until_index(set_dir, mount_set, n_set))

        def whole_file():
            nbytes, dt = read_files([st_file])
            file_ref.add(nbytes / dt / 1e9)
        measure(file_ref, whole_file)
        measure(file_first, lambda: first_read(st_file, file_first, [st_file]))

        def whole_set():
            nbytes, dt = read_files(shard_files)
            set_ref.add(nbytes / dt / 1e9)
        measure(set_ref, whole_set)
        measure(set_first, lambda: first_read(set_dir, set_first, shard_files))


def write_safetensors_file(path, tensors, block):
    """A safetensors file as the library writes it, of [(name, rows, cols)] float32 tensors,
    each filled with `block` repeated (random bytes: the page cache cannot share them), written
    a tensor at a time; renamed into place when complete."""
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name, rows, cols in tensors:
        header[name] = {"dtype": "F32", "shape": [rows, cols],
                        "data_offsets": [at, at + rows * cols * 4]}
        at += rows * cols * 4
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path.with_name(".gen-" + path.name)
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text)
        for _, rows, cols in tensors:
            left = rows * cols * 4
            while left:
                n = min(left, len(block))
                f.write(block[:n])
                left -= n
    os.replace(tmp, path)


def read_headers(paths):
    """What reading a safetensors file's layout takes at least: open, read the 8-byte length and
    the header, json.loads it. Returns the tensors' count."""
    count = 0
    for p in paths:
        with open(p, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            count += len(json.loads(f.read(n))) - 1
    return count
