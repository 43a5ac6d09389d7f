# SPDX-License-Identifier: MIT
"""Runs in the interop root: files written by `ckptfs pack` loaded by the root's torch (2.x) and
safetensors (0.8), against those libraries' reading of what was packed.

    check_torch(out, source, kind, dtype=None, weights_only=True)
        torch.load(OUT, weights_only=True), and with mmap=True: a flat dict of the source's
        entries, in order (those pack writes: tensors, plain values), each tensor equal (after
        Tensor.to(dtype) for the floating ones), shared storages still shared; the keys of
        the source's tensors and values it lacks in "tensors_left_out", "values_left_out"
    check_safetensors(out, source, kind, dtype=None, weights_only=True)
        safe_open and load_file of OUT: the source's tensors of the dtypes safetensors has
    check_nested(out, reference, weights_only=True, derive=True, attributes=True)
        torch.load(OUT, weights_only=True), and with mmap=True: what torch.load of REFERENCE
        gives, as pack rebuilds it (ckptfs_reference.packed_nesting; with derive=False exactly
        that, as for dcp_to_torch_save's file of a DCP checkpoint): the type of every container,
        keys of every type in order, attributes, tensors (dtype, layout, bytes), values of their
        types, and tensors that share a storage in REFERENCE share one in OUT; without
        `attributes`, OrderedDicts' attributes are not compared (a split directory's JSON does
        not hold them)

`kind` says what SOURCE is: "torch" (a checkpoint torch.load reads) or "safetensors" (a file
or set safe_open reads). Each returns {"tensors", "problems", "value_types", ...}.
"""

import collections

import torch
from safetensors.torch import load_file

import ckptfs_reference as ref
from safetensors_checks import (FLOATING, SAFETENSORS_DTYPES, compare, expected_from_torch,
                                read_file, reference_of)
from torch_checks import Report, plain, same_types, tensor_difference


def source_entries(source, kind, weights_only=True):
    """[(key, object)] of what was packed, in order."""
    if kind == "torch":
        return ref.flatten(torch.load(source, map_location="cpu", weights_only=weights_only))
    tensors, _ = reference_of(source)
    return list(tensors.items())


def check_torch(out, source, kind, dtype=None, weights_only=True):
    report = Report()
    target = getattr(torch, dtype) if dtype else None
    want = collections.OrderedDict(source_entries(source, kind, weights_only))
    tensor_keys = [k for k, v in want.items() if isinstance(v, torch.Tensor)]
    for mmap in (False, True):
        how = "torch.load(mmap=True)" if mmap else "torch.load"
        try:
            got = torch.load(out, map_location="cpu", weights_only=True, mmap=mmap)
        except Exception as e:  # noqa: BLE001: what torch refuses is the finding
            report.problem(f"{how}: {type(e).__name__}: {str(e)[:300]}")
            continue
        if not isinstance(got, dict):
            report.problem(f"{how}: a {type(got).__name__}, not a dict")
            continue
        keys = list(got)
        packed = [k for k in tensor_keys if k in got]
        if kind == "torch" and [k for k in keys if k in tensor_keys] != packed:
            report.problem(f"{how}: tensor keys {keys[:10]}..., not in the source's order")
        for key in keys:
            if key not in want:
                report.problem(f"{how}: {key}: not an entry of the source")
                continue
            v, g = want[key], got[key]
            if isinstance(v, torch.Tensor):
                if target is not None and v.dtype in FLOATING:
                    v = v.to(target)
                report.counts["tensors"] += 1
                why = tensor_difference(g, v)
                if why:
                    report.problem(f"{how}: {key}: {why}")
            elif plain(g) != plain(v):
                report.problem(f"{how}: {key}: {g!r}, the source has {v!r}")
            elif not same_types(g, v):
                report.value_types.append(f"{key}: {g!r}, the source has {v!r}")
        if not mmap:
            # A per-channel quantized tensor's scales and zero points are inside it.
            inside = {f"{k}.{name}" for k in got if isinstance(want.get(k), torch.Tensor)
                      for name, _ in ref.quantized_parts(want[k])}
            report.counts["tensors_left_out"] = [k for k in tensor_keys
                                                 if k not in got and k not in inside]
            report.counts["values_left_out"] = [k for k in want if k not in got and
                                                k not in tensor_keys]
            # Tensors that shared a storage in the source share one in the file.
            storages = collections.defaultdict(set)
            for key in tensor_keys:
                if key in got and not want[key].is_quantized:
                    storages[ref.storage_of(want[key])[0]].add(key)
            for keys_of_one in storages.values():
                ptrs = {got[k].untyped_storage().data_ptr() for k in keys_of_one}
                if len(keys_of_one) > 1 and len(ptrs) != 1:
                    report.problem(f"{how}: {sorted(keys_of_one)} shared a storage, no more")
    return report.result()


def check_nested(out, reference, weights_only=True, derive=True, attributes=True):
    report = Report()
    want = torch.load(reference, map_location="cpu", weights_only=weights_only)
    if derive:
        want = ref.packed_nesting(want)
    for mmap in (False, True):
        how = "torch.load(mmap=True)" if mmap else "torch.load"
        try:
            got = torch.load(out, map_location="cpu", weights_only=True, mmap=mmap)
        except Exception as e:  # noqa: BLE001: what torch refuses is the finding
            report.problem(f"{how}: {type(e).__name__}: {str(e)[:300]}")
            continue
        pairs = []
        why = ref.nesting_difference(got, want, tensors=pairs, attributes=attributes)
        if why:
            report.problem(f"{how}: {why}")
            continue
        report.counts["tensors"] += len(pairs)
        storages = collections.defaultdict(set)
        for g, w in pairs:
            if not w.is_quantized:
                storages[ref.storage_of(w)[0]].add(g.untyped_storage().data_ptr())
        for ptrs in storages.values():
            if len(ptrs) != 1:
                report.problem(f"{how}: tensors that shared a storage share one no more")
    return report.result()


def check_safetensors(out, source, kind, dtype=None, weights_only=True):
    report = Report()
    if kind == "torch":
        want = expected_from_torch(source, dtype, weights_only)
    else:
        target = getattr(torch, dtype) if dtype else None
        want = {k: (v.to(target) if target is not None and v.dtype in FLOATING else v)
                for k, v in source_entries(source, kind) if v.dtype in SAFETENSORS_DTYPES}
    got, metadata = read_file(out)
    compare(report, got, want, "safe_open")
    compare(report, load_file(out), want, "load_file")
    if (metadata or {}).get("format") != "pt":
        report.problem(f"__metadata__ {metadata}: no format pt")
    return report.result()
