# SPDX-License-Identifier: MIT
"""load_into: a checkpoint copied into a model's own parameters and buffers, one tensor at a
time, without a state dict of it in memory."""

import collections

import numpy as np

from . import _tensors
from ._errors import Error

IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
IncompatibleKeys.__doc__ = """What load_into() did not match, as torch's load_state_dict returns it:
missing_keys (the model's keys the checkpoint lacks) and unexpected_keys (the checkpoint's keys,
after the prefix, that the model lacks)."""


def _shape(shape):
    return f"torch.Size({list(shape)})"


def _assign(model, name, old, new, torch):
    """Replaces the meta-device parameter or buffer `name` of `model` by `new`."""
    module_name, _, attr = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    if attr in module._parameters and module._parameters[attr] is old:
        if not isinstance(new, torch.nn.Parameter):  # (a tied one is already made)
            new = torch.nn.Parameter(new, requires_grad=old.requires_grad)
        module._parameters[attr] = new
        return new
    module._buffers[attr] = new
    return new


def load_into(checkpoint, model, prefix="", strict=True, device=None):
    """The work of ckptfs.load_into() on an open Checkpoint (see its documentation)."""
    torch = _tensors.torch()
    targets = model.state_dict(keep_vars=True)
    by_name = {}
    for key in checkpoint:
        if key.startswith(prefix):
            by_name[key[len(prefix):]] = key
    missing = [name for name in targets if name not in by_name]
    unexpected = [name for name in by_name if name not in targets]
    errors = []
    if strict:
        if missing:
            errors.append("Missing key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in missing)))
        if unexpected:
            errors.append("Unexpected key(s) in state_dict: {}. ".format(
                ", ".join(f'"{k}"' for k in unexpected)))
    work = []
    for name, target in targets.items():
        key = by_name.get(name)
        if key is None:
            continue
        entry = checkpoint._entry(key)
        if entry["kind"] != "tensor":
            errors.append(f'While copying the parameter named "{name}", expected torch.Tensor '
                          f"or Tensor-like object from checkpoint but received a value")
            continue
        if list(entry["shape"]) != list(target.shape):
            errors.append(f"size mismatch for {name}: copying a param with shape "
                          f"{_shape(entry['shape'])} from checkpoint, the shape in current "
                          f"model is {_shape(target.shape)}.")
            continue
        if target.is_meta and device is None:
            errors.append(f"{name} is on the meta device: pass device= to make it there "
                          "(device=\"cpu\")")
            continue
        work.append((name, key, entry, target))
    if errors:
        # Checked before anything is copied: a model is loaded whole or left as it was.
        raise Error("Error(s) in loading state_dict for {}:\n\t{}".format(
            model.__class__.__name__, "\n\t".join(errors)), status=4)
    made = {}  # id of a meta tensor -> what replaced it (tied weights are made once)
    with torch.no_grad():
        for name, key, entry, target in work:
            if target.is_meta:
                if id(target) in made:
                    _assign(model, name, target, made[id(target)], torch)
                    continue
                fresh = torch.empty(target.shape, dtype=target.dtype, device=device)
                _copy(checkpoint, key, entry, fresh, torch)
                made[id(target)] = _assign(model, name, target, fresh, torch)
            else:
                _copy(checkpoint, key, entry, target, torch)
        # A meta tensor tied to one just made, under a name the checkpoint lacks (the head
        # transformers ties to the embedding, and leaves out of its files): tied to it again.
        for name, target in targets.items():
            if target.is_meta and id(target) in made:
                _assign(model, name, target, made[id(target)], torch)
    return IncompatibleKeys(missing, unexpected)


def _copy(checkpoint, key, entry, target, torch):
    """target.copy_(ck[key]), reading the bytes straight into target's memory where they are
    its own (a CPU tensor of the served dtype, contiguous): no second copy of any tensor."""
    name = entry["dtype"]
    direct = (target.device.type == "cpu" and target.is_contiguous()
              and name not in _tensors.QUANTIZED and _tensors.numpy_dtype(name) is not None
              and target.dtype == _tensors.torch_dtype(name, key)
              and target.element_size() * target.numel() == entry["nbytes"])
    checkpoint._check_served(key, entry)
    if direct:
        if checkpoint._read_into(key, entry, target.detach()):
            return
    elif name not in _tensors.QUANTIZED and _tensors.numpy_dtype(name) is not None:
        # Another dtype or device: read into memory of its own (never a mapping of the whole
        # file, whose pages would stay in this process), then copied and converted.
        scratch = _tensors.to_torch(np.empty(entry["shape"], _tensors.numpy_dtype(name)),
                                    name, key)
        if checkpoint._read_into(key, entry, scratch):
            target.copy_(scratch)
            return
    source = checkpoint[key]
    target.copy_(source)
    del source
