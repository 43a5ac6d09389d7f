# SPDX-License-Identifier: MIT
"""The bench's sections, one file each, registered in SECTIONS below: their --only names, their
order (the number their groups' titles carry), the module that runs them and the generated
checkpoints they need. scripts/bench --help lists them from here.

Adding a section (see also the top of scripts/bench):
  1. a module here, benchlib/sections/NAME.py, whose docstring says what it measures against what,
     with run(bench): it appends its table.Group()s to bench.groups and measures each row with
     table.measure(), run by run (range(bench.runs)). `bench` (base.Bench) has the options
     (bench.args, bench.cfg: QUICK or FULL sizes), the private copy of the binary (bench.ckptfs), a
     mount point (bench.mnt), the processes and mounts (bench.procs: mount_foreground, run,
     unmount), the warm torch worker (bench.worker) and the checkpoints it needs (bench.seq_file,
     seq_entries, many_file, big_file). A worker process of its own, if it needs one: `scripts/bench
     --worker NAME ARGS...` runs the module's worker(*ARGS).
  2. one entry in SECTIONS: Section(NAME, ORDER, MODULE, SUMMARY, needs=(...)).
"""

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Section:
    name: str          # its --only name
    order: int         # its number in the table's titles; sections run in this order
    module: str        # the module whose `function`(bench) runs it: ".NAME" is
    #                    benchlib/sections/NAME.py
    summary: str       # one line for --help
    needs: tuple = ()  # what Bench.setup generates before any section runs, when this one is
    #                    asked for: "seq" (the 1.6 GB state_dict, or --checkpoint; its entries:
    #                    bench.seq_entries), "many" (10,000 tensors), "big" (4.7 GiB)
    function: str = "run"

    def run(self, bench):
        getattr(importlib.import_module(self.module, __name__), self.function)(bench)

    def worker(self, *args):
        """`scripts/bench --worker NAME ARGS...`: the module's worker process."""
        importlib.import_module(self.module, __name__).worker(*args)


SECTIONS = (
    Section("sequential", 1, ".sequential", needs=("seq",),
            summary="1 MiB reads of every tensor's data, fresh mount and re-read; the .pth, "
                    "fuse-zip"),
    Section("cold", 1, ".sequential", function="run_cold", needs=("seq",),
            summary="with --cold: those first reads from a cold page cache (root)"),
    Section("random", 2, ".random_reads", needs=("seq",),
            summary="random 4 KiB and 1 MiB reads in the tensors, 1, 2, 4 readers; the .pth"),
    Section("many", 3, ".many_tensors", needs=("many",),
            summary="mount and np.load of a 10,000-tensor checkpoint; fuse-zip, torch.load"),
    Section("first", 4, ".first_tensor", needs=("big",),
            summary="time to the first tensor of a 4.7 GiB checkpoint; torch.load of it"),
    Section("rss", 5, ".peak_rss", needs=("seq", "many"),
            summary="peak RSS of the daemons and of torch.load (with sequential and many)"),
    Section("fp16", 6, ".fp16_model", needs=("seq",),
            summary="fp32 checkpoint into an fp16 model, peak RSS of each way (pytorch#75242)"),
    Section("remote", 7, ".remote_http", needs=("seq", "big"),
            summary="over loopback HTTP (nginx): reads, mount, first tensor, bytes sent; curl"),
    Section("safetensors", 8, ".safetensors_sets",
            summary="a safetensors file and a 100-shard set: mount time, first read"),
    Section("pagecache", 9, ".page_cache", needs=("seq",),
            summary="the page cache a read through a mount adds; fuse-zip; np.load mmap_mode"),
    Section("export", 10, ".export", needs=("seq",),
            summary="cp MNT/.ckptfs/model.safetensors against a copy of the .pth; daemon RSS"),
    Section("convert", 11, ".convert", needs=("seq",),
            summary="-o dtype=float16, bfloat16: first read against an unconverted mount"),
    Section("pack", 12, ".pack", needs=("seq", "big"),
            summary="ckptfs pack to .pth and .safetensors against cp + sync; peak RSS"),
    Section("dcp", 13, ".dcp",
            summary="a PyTorch DCP checkpoint consolidated, one layer read; torch 2.x (interop "
                    "root)"),
    Section("zero", 14, ".zero",
            summary="DeepSpeed ZeRO-2/3 consolidated, one layer read; zero_to_fp32.py (interop "
                    "root)"),
    Section("gguf", 15, ".gguf_file",
            summary="a Q4_K GGUF: mount, first tensor, dequantized reads, cp; gguf-py (interop "
                    "root)"),
    Section("requests", 16, ".fuse_requests", needs=("seq", "many"),
            summary="the cost of each FUSE request: small files, random reads, no_open, "
                    "io_uring"),
    Section("python", 17, ".python",
            summary="the Python package: slices, reads, small tensors, load_into, first tensor"),
    Section("gguf_hf", 18, ".gguf_hf",
            summary="a Q4_K_M GGUF as a transformers model: gguf_file= against -o names=hf "
                    "(interop root)"),
    Section("npz", 19, ".npz",
            summary="a deflated .npz member: whole, two readers, backwards; Python's zipfile"),
    Section("peers", 20, "bench_remote_peers",
            summary="S3 on Ceph's RGW (interop root): ckptfs against rclone mount and s3fs"),
)


def in_order():
    """The sections in the order they run (by order; in SECTIONS's order for the same one)."""
    return sorted(SECTIONS, key=lambda s: s.order)


def by_name(name):
    return next((s for s in SECTIONS if s.name == name), None)


_names = [s.name for s in SECTIONS]
if len(set(_names)) != len(_names):
    raise RuntimeError(f"benchlib.sections: two sections of one name in {_names}")
