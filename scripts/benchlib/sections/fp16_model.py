# SPDX-License-Identifier: MIT
"""Section 6, --only fp16: pytorch issue 75242: the fp32 checkpoint loaded into an fp16 model, peak
RSS of each way, each in its own process (worker() below): np.load of each tensor.npy through
the mount, copy_ into its fp16 parameter; the same from a -o dtype=float16 mount (the arrays
already fp16), and with np.load + .to() of an unconverted one; torch.load + load_state_dict,
and torch.load + .half().
"""

import json
import resource
import statistics

from benchlib.common import BENCH, FLOAT_DTYPES, TORCH_PY, MiB, now, read_status_kib
from benchlib.table import Group, measure


def run(bench):
    items = [{"key": e["key"], "path": e["path"], "dtype": e["dtype"], "shape": e["shape"]}
             for e in bench.seq_entries if e["dtype"] in FLOAT_DTYPES and not e["broken"]]
    items_file = bench.work / "fp16-items.json"
    items_file.write_text(json.dumps(items))
    model_mib = sum(2 * _numel(it["shape"]) for it in items) / MiB
    g = Group(f"6. fp32 {bench.seq_file.name} into an fp16 model (pytorch#75242), "
              f"peak RSS of each way in its own process")
    ref = g.row("fp16 model size (computed from the shapes)", "MiB", ref=True)
    # (worker mode, ckptfs options or None for torch.load of the file, label, note)
    ways = [
        ("mount", [], "ckptfs: np.load each tensor.npy -> copy_ into fp16 param",
         "target <= 1.1x"),
        ("converted", ["-o", "dtype=float16"],
         "ckptfs -o dtype=float16: np.load each tensor.npy (fp16) -> copy_",
         "target <= 1.05x above import torch"),
        ("mount_to", [], "ckptfs: np.load each tensor.npy -> .to(float16) -> copy_", ""),
        ("torch", None, "torch.load + load_state_dict into the fp16 model", ""),
        ("torch_half", None, "torch.load + .half() of each tensor + load_state_dict", ""),
    ]
    rows = {}
    for mode, _, label, note in ways:
        whole = g.row(label, "MiB")
        above = g.row("  same, above the import torch+numpy RSS", "MiB")
        whole.note = note
        rows[mode] = (whole, above)
    bench.groups.append(g)
    ref.add(model_mib)
    if not items:
        for r in g.rows[1:]:
            r.fail("no float tensor")
        return
    sums = {}
    times = {mode: [] for mode, _, _, _ in ways}
    for run in range(bench.runs):
        bench.progress("fp16 model", run)
        for mode, options, _, _ in ways:
            whole, above = rows[mode]

            def one(mode=mode, options=options, whole=whole, above=above):
                bench.warm(bench.seq_file)
                cmd = [TORCH_PY, str(BENCH), "--worker", "fp16", mode]
                if options is None:
                    _, _, out = bench.procs.run(cmd + [str(bench.seq_file), str(items_file)])
                else:
                    p = bench.procs.mount_foreground(
                        [bench.ckptfs, "-f", *options, str(bench.seq_file), str(bench.mnt)],
                        bench.mnt)
                    try:
                        _, _, out = bench.procs.run(cmd + [str(bench.mnt), str(items_file)])
                    finally:
                        bench.procs.unmount(bench.mnt, p)
                r = json.loads(out)
                whole.add(r["peak_kib"] / 1024)
                above.add((r["peak_kib"] - r["baseline_kib"]) / 1024)
                times[mode].append(r["seconds"])
                sums[mode] = r["checksum"]
            measure(whole, one)
    for mode, _, _, _ in ways:
        whole, above = rows[mode]
        if whole.failed:
            above.fail(whole.failed)
        elif mode in sums and "torch" in sums and sums[mode] != sums["torch"]:
            whole.fail("the fp16 parameters differ from the torch.load way")
        if times[mode]:
            whole.note = (whole.note + "; " if whole.note else "") + \
                f"{statistics.median(times[mode]):.2f} s"
        if mode != "torch" and mode in sums and sums[mode] == sums.get("torch"):
            above.note = "parameters identical to the torch.load way"


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# The worker process


def _flatten(obj, prefix, out):
    import torch
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _flatten(v, f"{prefix}.{i}" if prefix else str(i), out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):  # object state, as ckptfs
        _flatten(vars(obj), prefix, out)
    return out


def worker(mode, source, items_file):
    """`scripts/bench --worker fp16 MODE SOURCE ITEMS_FILE`, in /usr/bin/python3: pytorch issue
    75242: an fp16 model (built on the meta device, then to_empty on the CPU) filled from an
    fp32 checkpoint, one way per mode:
      "mount"      np.load of each tensor.npy through a ckptfs mount, copy_ into its fp16
                   parameter (which converts, as load_state_dict does), one tensor at a time;
      "mount_to"   the same with an explicit .to(float16) before the copy_;
      "converted"  np.load of each tensor.npy of a -o dtype=float16 mount (already fp16), copy_;
      "torch"      torch.load of the file, then load_state_dict;
      "torch_half" torch.load of the file, .half() of every tensor, then load_state_dict.
    Prints {baseline_kib (VmRSS once torch and numpy are imported), peak_kib (ru_maxrss),
    seconds, checksum} as JSON."""
    import numpy as np
    import torch
    import torch.nn as nn
    items = json.load(open(items_file))  # [{key, path, dtype, shape}], float tensors only
    baseline = read_status_kib("self", "VmRSS")
    t0 = now()
    model = nn.Module()
    for i, it in enumerate(items):
        p = torch.empty(it["shape"], dtype=torch.float16, device="meta")
        model.register_parameter(f"p{i}", nn.Parameter(p, requires_grad=False))
    model.to_empty(device="cpu")
    if mode in ("mount", "mount_to", "converted"):
        with torch.no_grad():
            for i, it in enumerate(items):
                a = np.load(f"{source}/{it['path']}/tensor.npy")
                if mode == "converted" and a.dtype != np.float16:
                    raise SystemExit(f"{it['key']}: tensor.npy is {a.dtype}, not float16")
                if mode != "converted" and it["dtype"] == "bfloat16":
                    # numpy has no bfloat16: the bits come as uint16
                    t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
                else:
                    t = torch.from_numpy(a)
                if mode == "mount_to":
                    t = t.to(torch.float16)
                getattr(model, f"p{i}").copy_(t)  # converts to float16 as load_state_dict does
                del a, t
    elif mode == "torch":
        flat = _flatten(torch.load(source, map_location="cpu"), "", {})
        model.load_state_dict({f"p{i}": flat[it["key"]] for i, it in enumerate(items)})
        del flat
    elif mode == "torch_half":
        flat = _flatten(torch.load(source, map_location="cpu"), "", {})
        half = {f"p{i}": flat[it["key"]].half() for i, it in enumerate(items)}
        model.load_state_dict(half)
        del flat, half
    else:
        raise SystemExit(f"unknown fp16 mode {mode}")
    seconds = now() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sums = [float(getattr(model, f"p{i}").float().sum()) for i in range(len(items))]
    print(json.dumps({"baseline_kib": baseline, "peak_kib": peak, "seconds": seconds,
                      "checksum": repr(sums)}))
