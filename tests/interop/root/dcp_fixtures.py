# SPDX-License-Identifier: MIT
"""Runs in the interop root: PyTorch Distributed Checkpoints written by the root's torch (2.x)
torch.distributed.checkpoint.save, and their references.

    write(out_dir)   the fixtures below, each a directory, with its reference beside it

Fixtures (each a model's and an optimizer's state, after one step of training):
  - single:      one process, no process group: plain tensors, float32 and bfloat16, Adam;
  - fsdp2_w2:    2 processes on gloo (CPU), FSDP2 (fully_shard) of a model of uneven sizes
                 (rows that do not divide by 2: a rank holds fewer), the state dicts of
                 torch.distributed.checkpoint.state_dict.get_state_dict: DTensors Shard(0);
  - fsdp2_bf16_w3: the same with 3 processes and bfloat16 parameters, a layer of 2 rows (a
                 rank holds none: FSDP's empty chunk); untrained, as gloo moves no bfloat16;
  - dtensor_w4:  4 processes, DTensors of a 1-d mesh placed Shard(0), Shard(1) (uneven),
                 Replicate(), and of a 2x2 mesh [Shard(0), Shard(1)]; float32 and bfloat16,
                 with an SGD momentum state of its own.
The reference of each is dcp_to_torch_save's file (`<name>.pt`, weights_only loads it); write()
also checks that torch.distributed.checkpoint.load of the directory into a state dict of full
tensors gives the same tensors (reported in "load_problems").
"""

import os
import socket
import subprocess
import sys

import torch

SEED = 23


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(kind, world, out):
    """Runs worker(kind, rank, world, ...) in `world` processes of this Python, on gloo over
    the loopback address."""
    port = free_port()
    here = os.path.dirname(os.path.abspath(__file__))
    procs = [subprocess.Popen(
        [sys.executable, "-c",
         f"import sys; sys.path.insert(0, {here!r}); import dcp_fixtures; "
         f"dcp_fixtures.worker({kind!r}, {rank}, {world}, {port}, {out!r})"],
        env={**os.environ, "USE_LIBUV": "0", "GLOO_SOCKET_IFNAME": "lo"})
        for rank in range(world)]
    codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        raise RuntimeError(f"{kind} with {world} ranks: exit statuses {codes}")


def step(model, optimizer, inputs):
    model(inputs).float().sum().backward()
    optimizer.step()


class Uneven(torch.nn.Module):
    """Layers of sizes that do not divide by the world sizes used."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6, dtype=dtype)
        self.proj = torch.nn.Linear(6, 9, dtype=dtype)
        self.head = torch.nn.Linear(9, 2, dtype=dtype)
        self.register_buffer("scale", torch.arange(5, dtype=dtype))

    def forward(self, ids):
        return self.head(torch.relu(self.proj(self.embed(ids)))) * self.scale[:2].sum()


def worker(kind, rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(SEED)
    if kind.startswith("fsdp2"):
        from torch.distributed.checkpoint.state_dict import get_state_dict
        from torch.distributed.fsdp import fully_shard
        dtype = torch.bfloat16 if "bf16" in kind else torch.float32
        model = Uneven(dtype)
        for layer in (model.embed, model.proj, model.head):
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        # gloo all-gathers no bfloat16 ("Invalid scalar type"): the bfloat16 model is saved
        # untrained, its optimizer without state.
        if dtype == torch.float32:
            step(model, optimizer, torch.randint(0, 11, (4, 3)))
        msd, osd = get_state_dict(model, optimizer)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=out)
    elif kind == "dtensor":
        from torch.distributed.tensor import DTensor, Replicate, Shard, init_device_mesh

        def distribute_tensor(full, mesh, placements):
            """The DTensor of `full` placed so, made from this rank's chunk (torch.chunk's, as
            Shard splits) without communication: gloo moves no bfloat16."""
            local = full
            for dim, placement in enumerate(placements):
                if isinstance(placement, Shard):
                    n = mesh.size(dim)
                    chunks = list(torch.chunk(local, n, dim=placement.dim))
                    empty = list(local.shape)
                    empty[placement.dim] = 0
                    chunks += [local.new_empty(empty)] * (n - len(chunks))
                    local = chunks[mesh.get_coordinate()[dim]]
            return DTensor.from_local(local.contiguous(), mesh, placements, run_check=False,
                                      shape=full.shape, stride=full.stride())

        mesh = init_device_mesh("cpu", (world,))
        grid = init_device_mesh("cpu", (2, world // 2))
        gen = torch.Generator().manual_seed(SEED)
        full = {
            "rows": torch.randn(10, 3, generator=gen),
            "columns": torch.randn(4, 7, generator=gen),
            "replicated": torch.randn(3, 2, generator=gen).to(torch.bfloat16),
            "uneven_bf16": torch.randn(5, 6, generator=gen).to(torch.bfloat16),
            "grid": torch.randn(7, 5, generator=gen),
            "scalar": torch.tensor(2.5),
        }
        sd = {
            "rows": distribute_tensor(full["rows"], mesh, [Shard(0)]),
            "columns": distribute_tensor(full["columns"], mesh, [Shard(1)]),
            "replicated": distribute_tensor(full["replicated"], mesh, [Replicate()]),
            "uneven_bf16": distribute_tensor(full["uneven_bf16"], mesh, [Shard(0)]),
            "grid": distribute_tensor(full["grid"], grid, [Shard(0), Shard(1)]),
            "scalar": full["scalar"],
            "momentum": {"rows": distribute_tensor(full["rows"] * 0.5, mesh, [Shard(0)]),
                         "lr": 0.01, "nesterov": True, "milestones": [3, 7]},
        }
        dcp.save(sd, checkpoint_id=out)
    else:
        raise ValueError(kind)
    dist.barrier()
    dist.destroy_process_group()


def single(out):
    """One process, no process group: dcp.save of a model's and an optimizer's state."""
    import torch.distributed.checkpoint as dcp
    torch.manual_seed(SEED)
    model = Uneven()
    model.half_precision = torch.nn.Linear(3, 4, dtype=torch.bfloat16)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    step(model, optimizer, torch.randint(0, 11, (4, 3)))
    dcp.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
              "epoch": 3, "tag": "single"}, checkpoint_id=out)


def full_load_problems(directory, reference):
    """torch.distributed.checkpoint.load of `directory` into a state dict of full tensors shaped
    as the reference's (no process group): the tensors must be the reference's."""
    import torch.distributed.checkpoint as dcp
    problems = []

    def empty_like(v):
        if isinstance(v, torch.Tensor):
            return torch.zeros_like(v)
        if isinstance(v, dict):
            return {k: empty_like(x) for k, x in v.items()}
        if isinstance(v, list):
            return [empty_like(x) for x in v]
        return v

    target = empty_like(reference)
    dcp.load(target, checkpoint_id=directory)

    def compare(a, b, where):
        if isinstance(b, torch.Tensor):
            if not (isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                    and torch.equal(a.view(torch.uint8) if a.dim() else a, b.view(torch.uint8)
                                    if b.dim() else b)):
                problems.append(f"{where}: dcp.load differs from dcp_to_torch_save")
        elif isinstance(b, dict):
            for k in b:
                compare(a.get(k), b[k], f"{where}.{k}")
        elif isinstance(b, list):
            for i, x in enumerate(b):
                compare(a[i], x, f"{where}.{i}")

    compare(target, reference, "")
    return problems


def resume_problems(name, packed, reference):
    """A model and its optimizer resumed in one process (no process group) from the packed file
    and from dcp_to_torch_save's, each stepped once: [] when they give the same tensors. For
    single, whose state dicts are state_dict()'s: load_state_dict of each. For fsdp2_w2, whose
    state dicts are get_state_dict's (FQN keys): set_state_dict, as
    torch.distributed.checkpoint.state_dict resumes them on another world size."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    import ckptfs_reference as ref
    if name not in ("single", "fsdp2_w2"):
        raise ValueError(name)
    results = []
    for path in (packed, reference):
        sd = torch.load(path, weights_only=True, mmap=True)
        torch.manual_seed(SEED)
        model = Uneven()
        if name == "single":
            model.half_precision = torch.nn.Linear(3, 4, dtype=torch.bfloat16)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        if name == "single":
            model.load_state_dict(sd["model"])
            optimizer.load_state_dict(sd["optimizer"])
        else:
            set_state_dict(model, optimizer, model_state_dict=sd["model"],
                           optim_state_dict=sd["optim"])
        inputs = torch.randint(0, 11, (4, 3), generator=torch.Generator().manual_seed(5))
        step(model, optimizer, inputs)
        if name == "single":
            results.append((model.state_dict(), optimizer.state_dict()))
        else:
            results.append(get_state_dict(model, optimizer))
    problems = []
    why = ref.nesting_difference(results[0], results[1])
    if why is not None:
        problems.append(f"resumed from the packed file: {why}")
    # The optimizer's state was taken, not made afresh: one step saved, one step after. Not for
    # single: DCP keys a plain optimizer.state_dict()'s state by str ("0"), in its files as in
    # dcp_to_torch_save's, which load_state_dict then does not match to a parameter (what the
    # DCP docs' get_state_dict avoids); there the packed file resumes as that file does.
    steps = [float(s["step"]) for s in results[0][1]["state"].values()]
    if name == "fsdp2_w2" and (not steps or steps != [2.0] * len(steps)):
        problems.append(f"the optimizer's steps after resuming: {steps}, not 2 each")
    return problems


def write(out_dir):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    out = {}
    makers = {
        "single": lambda d: single(d),
        "fsdp2_w2": lambda d: run_ranks("fsdp2", 2, d),
        "fsdp2_bf16_w3": lambda d: run_ranks("fsdp2_bf16", 3, d),
        "dtensor_w4": lambda d: run_ranks("dtensor", 4, d),
    }
    for name, make in makers.items():
        directory = os.path.join(out_dir, name)
        make(directory)
        reference = directory + ".pt"
        dcp_to_torch_save(directory, reference)
        loaded = torch.load(reference, weights_only=True)
        out[name] = {"path": directory, "reference": reference,
                     "files": sorted(os.listdir(directory)),
                     "load_problems": full_load_problems(directory, loaded)}
    return out


def reference_of(directory, reference):
    """dcp_to_torch_save of a directory made elsewhere (the corpus's): its file."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(directory, reference)
    return reference
