# SPDX-License-Identifier: MIT
"""Runs in the interop root: the Python package (python/ckptfs of the repository, imported from
/opt/ckptfs/python) with the root's torch 2.x and numpy 2, on mounts made outside the root.

    check(source, mnt)
        ckptfs.open(MNT) (a mountpoint that exists, used as it is) against the mount's own
        files read by the real readers: each tensor equal, dtype, shape and bits, to
        torch.load(tensor.pt, weights_only=True, mmap=True) and to np.load(tensor.npy), each
        value to torch.load(SOURCE)'s (ckptfs_reference's flattening), the paths taken
        (path_of) counted
    load_into_model(original, mnt, meta=False, dtype=None)
        a transformers model built from ORIGINAL's config, its weights re-initialised, then
        filled by ckptfs.load_into from MNT (strict, as torch's load_state_dict: the tied
        weights transformers leaves out of its files are no missing keys; on the meta device
        and made on the CPU with meta=True, built under accelerate's init_empty_weights; in
        torch.<dtype> with dtype), against
        from_pretrained(ORIGINAL): logits and state dict bit for bit

Each returns {"problems": [...], ...}: one line per difference.
"""

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, "/opt/ckptfs/python")
import ckptfs  # noqa: E402

import ckptfs_reference as ref  # noqa: E402 (/opt/ckptfs/scripts)


def bits(t):
    if t.is_quantized:
        t = t.int_repr()
    t = t.contiguous()
    return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""


def check(source, mnt):
    report = {"problems": [], "paths": {"file": 0, "mount": 0}, "tensors": 0, "values": 0,
              "numpy": np.__version__, "torch": torch.__version__}
    problems = report["problems"]
    try:
        loaded = dict(ref.flatten(ref.torch_load(source)))
    except Exception:  # noqa: BLE001: safetensors files have no pickle to compare values with
        loaded = {}
    with ckptfs.open(mnt) as ck:
        for key in ck:
            entry = ck._entries[key]
            d = os.path.join(mnt, entry["path"])
            if entry["kind"] == "value":
                report["values"] += 1
                if key in loaded and not isinstance(ck[key], ckptfs.Described) and \
                        not ref.same_value(ck[key], loaded[key], types=False):
                    problems.append(f"{key}: value {ck[key]!r:.80} != {loaded[key]!r:.80}")
                continue
            if entry["nbytes"] is None:
                continue  # not served (broken, blocks not dequantized): the mount says why
            report["tensors"] += 1
            if not os.path.exists(os.path.join(d, "tensor.pt")):
                try:
                    ck[key]
                    problems.append(f"{key}: made, though the mount has no tensor.pt for it")
                except ckptfs.Error:
                    report["refused"] = report.get("refused", 0) + 1
                continue
            try:
                got = ck[key]
                got_np = ck.numpy(key)
            except ckptfs.Error as e:
                problems.append(f"{key}: {e}")
                continue
            if entry["nbytes"]:  # (an empty tensor is read through the mount: no range)
                report["paths"][ck.path_of(key)] += 1
            want_np = np.load(os.path.join(d, "tensor.npy"))
            if (got_np.dtype.str, got_np.shape, got_np.tobytes()) != \
                    (want_np.dtype.str, want_np.shape, want_np.tobytes()):
                problems.append(f"{key}: ck.numpy differs from np.load(tensor.npy)")
            for mmap in (False, True):
                want = torch.load(os.path.join(d, "tensor.pt"), weights_only=True, mmap=mmap)
                if (got.dtype, got.shape, bits(got)) != (want.dtype, want.shape, bits(want)):
                    problems.append(f"{key}: ck[key] {got.dtype} {tuple(got.shape)} differs "
                                    f"from tensor.pt (mmap={mmap}) {want.dtype} "
                                    f"{tuple(want.shape)}")
            if ck.path_of(key) == "file" and entry.get("file_range") is None:
                problems.append(f"{key}: read from the file without a published file_range")
            if key in loaded and isinstance(loaded[key], torch.Tensor) and \
                    loaded[key].dtype == got.dtype and not loaded[key].is_quantized and \
                    bits(loaded[key]) != bits(got):
                problems.append(f"{key}: differs from torch.load of the checkpoint")
            rows = got_np.shape[0] if got_np.ndim else 0
            if rows > 1 and entry["dtype"] not in ref.PACKED:  # (whose rows share bytes)
                part = ck.get_slice(key, numpy=True)[1:rows]
                if part.tobytes() != got_np[1:rows].tobytes():
                    problems.append(f"{key}: get_slice[1:{rows}] differs")
    return report


def logits(model, input_ids):
    with torch.no_grad():
        return model(input_ids).logits


def load_into_model(original, mnt, meta=False, dtype=None):
    from transformers import AutoConfig, AutoModelForCausalLM
    kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
    want = AutoModelForCausalLM.from_pretrained(original, **kwargs).eval()
    config = AutoConfig.from_pretrained(original)
    torch.manual_seed(12345)  # other weights than the saved ones
    if meta:
        from accelerate import init_empty_weights
        with init_empty_weights():  # parameters on meta; buffers (rotary inv_freq...) made
            model = AutoModelForCausalLM.from_config(config, **kwargs)
    else:
        model = AutoModelForCausalLM.from_config(config, **kwargs)
    model.eval()
    report = {"problems": [], "meta": meta}
    saved = {e["key"] for e in json.load(open(os.path.join(mnt, ".ckptfs", "index.json")))[
        "entries"]}
    missing_ok = [k for k in model.state_dict() if k not in saved]
    # transformers leaves tied weights (GPT-2's lm_head.weight) out of its files.
    ties = getattr(model, "_tied_weights_keys", None) or []
    result = ckptfs.load_into(model, mnt, strict=False, device="cpu" if meta else None)
    report["missing_keys"] = result.missing_keys
    report["unexpected_keys"] = result.unexpected_keys
    if result.unexpected_keys:
        report["problems"].append(f"unexpected keys {result.unexpected_keys}")
    if sorted(result.missing_keys) != sorted(missing_ok):
        report["problems"].append(f"missing keys {result.missing_keys}, not {missing_ok}")
    if not missing_ok:
        model2 = AutoModelForCausalLM.from_config(config, **kwargs)
        ckptfs.load_into(model2, mnt, strict=True)  # nothing missing: strict passes
    report["ties"] = list(ties) if not isinstance(ties, dict) else sorted(ties)
    if meta:
        left = [k for k, v in list(model.named_parameters()) + list(model.named_buffers())
                if v.is_meta]
        if left:
            report["problems"].append(f"left on the meta device: {left}")
    input_ids = torch.tensor([[1, 5, 17, 42, 100, 3, 7, 250, 511, 0]])
    a, b = logits(model, input_ids), logits(want, input_ids)
    report["logits_equal"] = bool(torch.equal(a, b))
    if not report["logits_equal"]:
        report["problems"].append("logits differ")
    got_sd, want_sd = model.state_dict(), want.state_dict()
    for key, t in want_sd.items():
        u = got_sd.get(key)
        if u is None or u.dtype != t.dtype or not torch.equal(u, t):
            report["problems"].append(f"{key}: differs from from_pretrained's")
    return report
