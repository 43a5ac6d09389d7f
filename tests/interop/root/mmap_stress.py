# SPDX-License-Identifier: MIT
"""Runs in the interop root: many threads page-faulting a mount's model.safetensors at once, as
transformers and safetensors read it (mmap), against the tensors torch.load gives.

    write_checkpoint(path, tensors, tensor_kib)  a torch.save'd state dict of float32 tensors
    expected(source)                             {key: [crc32, nbytes]} of torch.load's tensors
    storm(path, expected, threads, mode, limit)  the threads' reads of PATH, timed

PATH is the mount's model.safetensors, or for mode "npy" the mount itself. Modes: "mmap" maps
the file once (Python's mmap, MAP_SHARED, as safetensors' Rust does) and each
thread CRCs tensors of it through memoryviews, in an order of its own (zlib.crc32 lets go of the
GIL: the page faults of the threads are concurrent, each fault a READ of the mount);
"safe_open" has each thread open the file with safe_open (its own mapping) and get_tensor each
key, as transformers' loading does; "npy" has each thread np.load(KEY/tensor.npy,
mmap_mode="r") each key (many opens of many files, each first open of one filling its first
pages into the page cache, and faults), as a numpy user of the tree does. Each thread reads
`share` of the tensors (all when 1).
"""

import json
import mmap
import os
import random
import struct
import threading
import time
import zlib

import torch

import ckptfs_reference as ref


def write_checkpoint(path, tensors, tensor_kib):
    """PATH: torch.save of `tensors` random float32 tensors of `tensor_kib` KiB each."""
    gen = torch.Generator().manual_seed(22)
    n = tensor_kib * 1024 // 4
    state = {f"layers.{i}.weight": torch.randn(n, generator=gen) for i in range(tensors)}
    torch.save(state, path)
    return {"path": path, "bytes": os.path.getsize(path)}


def crc(data):
    return zlib.crc32(data) & 0xFFFFFFFF


def expected(source, dtype=None):
    """{key: [crc32, nbytes]} of the tensors of torch.load(source), in C order (converted by
    Tensor.to(torch.<dtype>) when `dtype` is given)."""
    out = {}
    for key, t in ref.flatten(torch.load(source, map_location="cpu", weights_only=True)):
        raw = ref.tensor_bytes(t.to(getattr(torch, dtype)) if dtype else t)
        out[key] = [crc(raw), len(raw)]
    return out


def header(path):
    """{key: (begin, end)} of a safetensors file: absolute offsets of each tensor's bytes."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        doc = json.loads(f.read(n))
    return {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
            for k, v in doc.items() if k != "__metadata__"}


def storm(path, want, threads=64, mode="mmap", limit=120.0, share=1.0):
    """`threads` threads reading PATH (the mount's model.safetensors) at once, each its share
    of the tensors in a random order of its own, from a cold page cache. Returns {"seconds",
    "reads", "bytes", "mismatches": [...], "stuck": threads not done after `limit` seconds,
    "slowest": the longest single tensor read in seconds}."""
    offsets = header(path) if mode != "npy" else {k: None for k in want}
    keys = sorted(want)
    if sorted(offsets) != keys:
        return {"mismatches": [f"keys: {sorted(set(offsets) ^ set(keys))[:10]}"], "stuck": 0,
                "seconds": 0, "reads": 0, "bytes": 0, "slowest": 0}
    lock = threading.Lock()
    result = {"reads": 0, "bytes": 0, "mismatches": [], "slowest": 0.0}
    start = threading.Barrier(threads + 1)
    f = None
    if mode != "npy":
        # Cold: the file's pages leave the page cache first, so that every first touch is a
        # fault that the mount must answer (a FUSE file drops its clean pages as any file does).
        # (For "npy", a fresh mount: the first open of each file is among the threads'.)
        f = open(path, "rb")
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    mapping = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) if mode == "mmap" else None

    def record(key, got, seconds):
        with lock:
            result["reads"] += 1
            result["bytes"] += got[1]
            result["slowest"] = max(result["slowest"], seconds)
            if got != want[key] and len(result["mismatches"]) < 20:
                result["mismatches"].append(f"{key}: crc32 {got}, torch.load's {want[key]}")

    def worker(seed):
        order = random.Random(seed).sample(keys, max(1, int(len(keys) * share)))
        start.wait()
        if mode == "mmap":
            view = memoryview(mapping)
            try:
                for key in order:
                    begin, end = offsets[key]
                    t0 = time.monotonic()
                    piece = view[begin:end]
                    got = [crc(piece), len(piece)]
                    piece.release()
                    record(key, got, time.monotonic() - t0)
            finally:
                view.release()
        elif mode == "npy":
            import numpy as np
            for key in order:
                t0 = time.monotonic()
                array = np.load(os.path.join(path, key, "tensor.npy"), mmap_mode="r")
                view = memoryview(array).cast("B")
                got = [crc(view), len(view)]
                view.release()
                del array
                record(key, got, time.monotonic() - t0)
        else:
            from safetensors import safe_open
            with safe_open(path, framework="pt") as st:
                for key in order:
                    t0 = time.monotonic()
                    raw = ref.tensor_bytes(st.get_tensor(key))
                    record(key, [crc(raw), len(raw)], time.monotonic() - t0)

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.monotonic()
    deadline = t0 + limit
    for t in pool:
        t.join(max(0.0, deadline - time.monotonic()))
    result["seconds"] = time.monotonic() - t0
    result["stuck"] = sum(t.is_alive() for t in pool)
    if result["stuck"] == 0:
        if mapping is not None:
            mapping.close()
        if f is not None:
            f.close()
    return result
