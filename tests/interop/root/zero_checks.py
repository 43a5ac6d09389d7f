# SPDX-License-Identifier: MIT
"""Runs in the interop root: mounts of DeepSpeed ZeRO checkpoints read by the root's torch (2.x),
numpy and safetensors (0.8), against what DeepSpeed's own zero_to_fp32.py gives for them.

    check_fixture(fixture, script)               zero_to_fp32 gives the model the fixture saved
    check_split(path, script, mnt, views, dtype) every key's data, meta.json, tensor.npy, tensor.pt
    check_export(path, script, views, dtype)     views/model.safetensors (safe_open, load_file)
    check_shards(path, script, views)            -o shard_size's set
    check_rfc(path, script, mnt, views)          -o layout=rfc: map.pt and <name>.pt
    check_pack(path, script, pth, st, dtype)     ckptfs pack's .pth and .safetensors
    check_output(path, script, views, out_dir)   zero_to_fp32's own output file, tensor for tensor
    broken_report(mnt, views)                    what a mount says is broken, and why

The reference of a mount of `path` (a checkpoint directory holding `latest`) is `script`
(zero_to_fp32.py, as DeepSpeed copies it into every checkpoint) imported with the stand-in
`deepspeed` package beside this file for its two imports and the classes DeepSpeed pickles:
get_fp32_state_dict_from_zero_checkpoint(path), in its order, then (stage 1/2) the module of
mp_rank_00_model_states.pt under "module.", as torch.load reads that file. With `dtype`
(-o dtype), the floating-point tensors of the reference converted by torch's Tensor.to.
Each returns {"tensors", "problems": [...], ...}.
"""

import collections
import contextlib
import importlib.util
import io
import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

import ckptfs_reference as ref
from safetensors_checks import FLOATING, compare, read_file, read_set
from torch_checks import Report, check_split_entry, check_torch_file, read, tensor_difference

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "zero_standin"))

_scripts = {}


def zero_to_fp32(script):
    """The module of `script` (zero_to_fp32.py), imported once."""
    if script not in _scripts:
        spec = importlib.util.spec_from_file_location(f"zero_to_fp32_{len(_scripts)}", script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _scripts[script] = module
    return _scripts[script]


def reference(path, script):
    """zero_to_fp32's state dict of the checkpoint `path` (its prints kept out of the way)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return zero_to_fp32(script).get_fp32_state_dict_from_zero_checkpoint(path)


def tag_dir(path):
    with open(os.path.join(path, "latest")) as f:
        return os.path.join(path, f.read().strip())


def module_entries(path):
    """[("module." + name, tensor)] of mp_rank_00_model_states.pt's module (stage 1/2 only)."""
    states = os.path.join(tag_dir(path), "mp_rank_00_model_states.pt")
    if not os.path.exists(states):
        return []
    module = torch.load(states, map_location="cpu", weights_only=False)["module"]
    return [("module." + k, v) for k, v in module.items()]


def expected_entries(path, script, dtype=None):
    """[(key, tensor)] a mount of `path` holds, in order (see the module's docstring)."""
    target = getattr(torch, dtype) if dtype else None
    out = list(reference(path, script).items()) + module_entries(path)
    if target is not None:
        out = [(k, v.to(target) if v.dtype in FLOATING else v) for k, v in out]
    return out


def check_fixture(fixture, script):
    """zero_to_fp32 gives, for the fixture, exactly the state dict its writer expects (the
    model's weights: fp32 masters, buffers as float32, frozen parameters as saved, the alias):
    the keys in order, each tensor's dtype, shape and bytes."""
    report = Report()
    got = reference(fixture["path"], script)
    want = torch.load(fixture["expected"], weights_only=True)
    if list(got) != list(want):
        report.problem(f"zero_to_fp32's keys {list(got)}, the model's {list(want)}")
    for key, v in want.items():
        if key in got:
            report.counts["tensors"] += 1
            why = tensor_difference(got[key], v)
            if why:
                report.problem(f"{key}: zero_to_fp32 gives {why}")
    return report.result(keys=list(got))


def check_split(path, script, mnt, views, dtype=None):
    """index.json (format "zero") lists the expected keys in order; each key's `data`,
    meta.json, tensor.npy (np.load) and tensor.pt (torch.load weights_only, mmap) hold the
    expected tensor."""
    report = Report()
    flat = expected_entries(path, script, dtype)
    index = json.loads(read(os.path.join(views, "index.json")))
    if index.get("format") != "zero":
        report.problem(f"index.json's format {index.get('format')!r}, not 'zero'")
    keys = [e["key"] for e in index["entries"]]
    if keys != [k for k, _ in flat]:
        report.problem(f"keys differ: mount {keys}, expected {[k for k, _ in flat]}")
        return report.result()
    dtypes = set()
    for e, (key, v) in zip(index["entries"], flat):
        report.counts["entries"] += 1
        try:
            check_split_entry(report, e, v, os.path.join(mnt, e["path"]), dtypes)
        except Exception as x:  # noqa: BLE001: one entry's failure is one problem
            report.problem(f"{key}: {type(x).__name__}: {str(x)[:300]}")
    return report.result(dtypes=sorted(dtypes), keys=keys)


def check_export(path, script, views, dtype=None):
    """views/model.safetensors read by safe_open and load_file: the expected tensors."""
    report = Report()
    want = dict(expected_entries(path, script, dtype))
    file = os.path.join(views, "model.safetensors")
    got, metadata = read_file(file)
    compare(report, got, want, "safe_open(model.safetensors)")
    compare(report, load_file(file), want, "load_file(model.safetensors)")
    if (metadata or {}).get("format") != "pt":
        report.problem(f"__metadata__ {metadata}: no format pt")
    return report.result()


def check_shards(path, script, views):
    """-o shard_size's model.safetensors.index.json and its shards: the expected tensors."""
    report = Report()
    want = dict(expected_entries(path, script))
    got, index, _ = read_set(os.path.join(views, "model.safetensors.index.json"))
    compare(report, got, want, "the shards")
    total = sum(t.nbytes for t in want.values())
    if index["metadata"].get("total_size") != total:
        report.problem(f"total_size {index['metadata'].get('total_size')}, expected {total}")
    return report.result(shards=len(set(index["weight_map"].values())))


def check_rfc(path, script, mnt, views):
    """-o layout=rfc: map.pt lists the expected keys in order, each <name>.pt loads (weights_only,
    mmap) as the expected tensor."""
    report = Report()
    flat = expected_entries(path, script)
    index = json.loads(read(os.path.join(views, "index.json")))
    keys = torch.load(os.path.join(mnt, "map.pt"), weights_only=True)
    if keys != [k for k, _ in flat]:
        report.problem(f"map.pt {keys}, expected {[k for k, _ in flat]}")
    by_key = dict(flat)
    for e in index["entries"]:
        if e["key"] in by_key and e["path"] is not None:
            report.counts["tensors"] += 1
            check_torch_file(report, os.path.join(mnt, e["path"]), by_key[e["key"]], e["path"])
    return report.result()


def check_pack(path, script, pth, st, dtype=None):
    """`ckptfs pack` of the checkpoint to .pth (torch.load weights_only, mmap) and .safetensors
    (safe_open): the expected tensors, the .pth in order."""
    report = Report()
    want = collections.OrderedDict(expected_entries(path, script, dtype))
    for mmap in (False, True):
        got = torch.load(pth, map_location="cpu", weights_only=True, mmap=mmap)
        if type(got) is not collections.OrderedDict:  # what zero_to_fp32 returns, flat
            report.problem(f"{pth} (mmap={mmap}): a {type(got).__name__}, not an OrderedDict")
        if list(got) != list(want):
            report.problem(f"{pth} (mmap={mmap}): keys {list(got)}, expected {list(want)}")
        for key, v in want.items():
            if key in got:
                report.counts["tensors"] += 1
                why = tensor_difference(got[key], v)
                if why:
                    report.problem(f"{pth}: {key}: {why}")
    got, _ = read_file(st)
    compare(report, got, want, st)
    return report.result()


def check_output(path, script, views, out_dir):
    """zero_to_fp32's own consolidation of `path` (convert_zero_checkpoint_to_fp32_state_dict,
    as its command line runs it, into pytorch_model.bin) against the mount's
    model.safetensors: each of its tensors there, the same dtype, shape and bytes, in its
    order at the front of the file's keys."""
    report = Report()
    with contextlib.redirect_stdout(io.StringIO()):
        zero_to_fp32(script).convert_zero_checkpoint_to_fp32_state_dict(path, out_dir)
    out = collections.OrderedDict()
    index_path = os.path.join(out_dir, "pytorch_model.bin.index.json")
    files = (sorted(set(json.loads(read(index_path))["weight_map"].values()))
             if os.path.exists(index_path) else ["pytorch_model.bin"])
    for name in files:
        out.update(torch.load(os.path.join(out_dir, name), map_location="cpu", weights_only=True))
    file = os.path.join(views, "model.safetensors")
    got, _ = read_file(file)
    order = header_order(file)
    for key, v in out.items():
        report.counts["tensors"] += 1
        if key not in got:
            report.problem(f"{key}: in zero_to_fp32's output, not in model.safetensors")
            continue
        why = tensor_difference(got[key], v)
        if why:
            report.problem(f"{key}: model.safetensors against zero_to_fp32's output: {why}")
    if order[:len(out)] != list(out):
        report.problem(f"model.safetensors's keys {order[:len(out)]} do not begin with "
                       f"zero_to_fp32's {list(out)}")
    return report.result(files=files)


def header_order(path):
    """The keys of a safetensors file in the order of their bytes (safe_open sorts them)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: header[k]["data_offsets"][0])


def broken_report(mnt, views):
    """{key: why} of every broken tensor of a mount (meta.json's "broken"), and index.json's
    format and keys."""
    index = json.loads(read(os.path.join(views, "index.json")))
    broken = {}
    for e in index["entries"]:
        if e["kind"] != "tensor":
            continue
        meta = json.loads(read(os.path.join(mnt, e["path"], "meta.json")))
        if meta.get("broken"):
            broken[e["key"]] = meta["broken"]
    return {"format": index.get("format"), "keys": [e["key"] for e in index["entries"]],
            "broken": broken}


def reference_error(path, script):
    """What zero_to_fp32 says of `path` when it cannot consolidate it (None when it can)."""
    try:
        reference(path, script)
    except Exception as e:  # noqa: BLE001: its refusal is the finding
        return f"{type(e).__name__}: {e}"
    return None


def tensors_equal(path, script, mnt, keys):
    """Each of `keys` (a list) read from the mount's <key>/tensor.pt equals zero_to_fp32's."""
    want = reference(path, script)
    problems = []
    for key in keys:
        got = torch.load(os.path.join(mnt, ref.directory_name(key), "tensor.pt"),
                         weights_only=True)
        why = tensor_difference(got, want[key])
        if why:
            problems.append(f"{key}: {why}")
    return problems
