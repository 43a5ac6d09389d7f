#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench_dcp_root: the PyTorch DCP side of scripts/bench's section 13, run in the interop root
(scripts/interop-run: the root's torch 2.x), one command a process, its result as JSON on the
last line of stdout:

    make DIR GIB RANKS     a DCP checkpoint of about GIB GiB written by torch.distributed's
                           dcp.save from RANKS gloo processes: 24 fp32 layers, each a DTensor
                           Shard(0) of 4096 columns, every rank writing its own rows
    consolidate DIR OUT    dcp_to_torch_save(DIR, OUT): {"seconds", "maxrss_mib"}
    load DIR [KEY]         torch.distributed.checkpoint.load of DIR (no process group) into a
                           state dict of full tensors (all keys, or KEY alone): {"seconds",
                           "maxrss_mib", "bytes"}

maxrss_mib is this process's peak RSS (getrusage), torch's import included (about 300 MiB),
which is also reported alone by `baseline`.
"""

import json
import os
import resource
import socket
import subprocess
import sys
import time

import torch

LAYERS = 24
COLUMNS = 4096


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(**values):
    print(json.dumps(values), flush=True)


def make(directory, gib, ranks):
    rows = int(float(gib) * (1 << 30) / 4 / COLUMNS / LAYERS)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, "rank", directory, str(rows), str(rank),
                               ranks, str(port)],
                              env={**os.environ, "USE_LIBUV": "0", "GLOO_SOCKET_IFNAME": "lo"})
             for rank in range(int(ranks))]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise SystemExit(f"ranks exited {codes}")
    report(rows=rows, columns=COLUMNS, layers=LAYERS,
           bytes=sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)))


def rank(directory, rows, rank, world, port):
    rows, rank, world = int(rows), int(rank), int(world)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                      WORLD_SIZE=str(world))
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import DTensor, Shard, init_device_mesh
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    per = -(-rows // world)  # torch.chunk's split: the last rank holds fewer
    mine = max(0, min(per, rows - rank * per))
    gen = torch.Generator().manual_seed(rank)
    sd = {}
    for layer in range(LAYERS):
        local = torch.randn(mine, COLUMNS, generator=gen)
        sd[f"layers.{layer}.weight"] = DTensor.from_local(
            local, mesh, [Shard(0)], run_check=False, shape=(rows, COLUMNS),
            stride=(COLUMNS, 1))
    dcp.save(sd, checkpoint_id=directory)
    dist.barrier()
    dist.destroy_process_group()


def consolidate(directory, out):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    start = time.monotonic()
    dcp_to_torch_save(directory, out)
    report(seconds=time.monotonic() - start, maxrss_mib=peak_mib())


def load(directory, key=None):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    start = time.monotonic()
    metadata = FileSystemReader(directory).read_metadata()
    sd = {k: torch.empty(tuple(md.size), dtype=md.properties.dtype)
          for k, md in metadata.state_dict_metadata.items() if key is None or k == key}
    dcp.load(sd, checkpoint_id=directory)  # no process group: torch reads it alone
    report(seconds=time.monotonic() - start, maxrss_mib=peak_mib(),
           bytes=sum(t.numel() * t.element_size() for t in sd.values()))


def baseline():
    report(maxrss_mib=peak_mib())


if __name__ == "__main__":
    {"make": make, "rank": rank, "consolidate": consolidate, "load": load,
     "baseline": baseline}[sys.argv[1]](*sys.argv[2:])
