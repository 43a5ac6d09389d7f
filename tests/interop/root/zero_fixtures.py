# SPDX-License-Identifier: MIT
"""Runs in the interop root: DeepSpeed ZeRO checkpoints (stages 1, 2 and 3) written with the
current torch in DeepSpeed's own layout, for the ZeRO interop tests (test_interop_zero).

No DeepSpeed package exists for Debian, so the files are made here as DeepSpeed's engine and
ZeRO optimizers save them (runtime/engine.py's _save_checkpoint and _save_zero_checkpoint,
runtime/zero/stage_1_and_2.py's and stage3.py's state_dict): its dicts, key names, file names,
flat groups, partitions, paddings and pickled classes (from the stand-in package beside this
file, under DeepSpeed's module names). What each rank would hold is computed for every rank of
the world size in one process:

  stage 1/2   each param group's trainable parameters (round-robin reordered when asked)
              flattened in bf16/fp16 and padded to a multiple of 2 x world size; the module's
              parameters are views of that flat buffer; each rank keeps an equal partition of
              it as fp32 (single_partition_of_fp32_groups), its padding cut off when saved;
              mp_rank_00_model_states.pt holds the module, param_shapes, buffer_names,
              frozen parameters (stage 2) and shared parameters.
  stage 3     each parameter split into world size partitions of ceil(numel / world size),
              zero-padded; each param group cut into sub groups (sub_group_size); each rank's
              fp32 flat group of a sub group is its partitions concatenated; one model states
              file per rank, its module parameters empty placeholders, its frozen fragments
              its own partitions.

The fp32 master weights are the model's "original" weights (random, seeded), the bf16/fp16
module their cast. write() returns, per fixture, the checkpoint directory (with `latest` and
zero_to_fp32.py) and a file of what zero_to_fp32 must give for it (expected.pt): the buffers as
float32, the frozen parameters as saved (stage 2 and 3), the trainable ones in fp32, the tied
alias. A fixture counts only when zero_to_fp32 gives exactly that (zero_checks.check_fixture).
"""

import math
import shutil
import sys
from collections import OrderedDict
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "zero_standin"))

from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler  # noqa: E402
from deepspeed.runtime.zero.config import ZeroStageEnum  # noqa: E402
from deepspeed.utils.tensor_fragment import fragment_address  # noqa: E402

DS_VERSION = "0.18.5"
TAG = "global_step7"


class Model(nn.Module):
    """Uneven sizes (no parameter a multiple of 4), a tied embedding and head, a frozen layer,
    BatchNorm's buffers (floating and int64), a buffer that is not persistent."""

    def __init__(self, vocab=37, hidden=13):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(3)])
        self.norm = nn.BatchNorm1d(hidden)
        self.frozen = nn.Linear(hidden, 7)
        self.proj = nn.Linear(7, hidden, bias=False)
        self.head = nn.Linear(hidden, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("scale", torch.linspace(0.5, 2.0, hidden))
        self.register_buffer("cache", torch.ones(5), persistent=False)
        for p in self.frozen.parameters():
            p.requires_grad_(False)


class BenchModel(nn.Module):
    """The benchmark's model: `layers` linear layers of `hidden` features (scripts/bench)."""

    def __init__(self, layers, hidden):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(layers)])


def make_model(seed, lp, factory=Model):
    """The model with random fp32 weights (the masters) and buffers, and its low-precision cast
    (DeepSpeed's module): parameters and floating buffers in `lp`."""
    torch.manual_seed(seed)
    model = factory()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 3)
        if hasattr(model, "norm"):
            model.norm.running_mean.copy_(torch.randn(model.norm.running_mean.shape))
            model.norm.running_var.copy_(torch.rand(model.norm.running_var.shape) + 0.5)
            model.norm.num_batches_tracked.fill_(123456789)
    masters = {n: p.detach().clone() for n, p in model.named_parameters()}
    model = model.to(lp)
    return model, masters


def param_groups(model):
    """Three groups, as a training script passes them: the linear weights (decayed), the biases
    and the norm (not decayed), the embedding and proj (another lr)."""
    groups = [[], [], []]
    for name, p in model.named_parameters():  # each parameter once: the tie's first name
        if name.startswith("embed") or name.startswith("proj"):
            groups[2].append((name, p))
        elif name.endswith("bias") or name.startswith("norm"):
            groups[1].append((name, p))
        else:
            groups[0].append((name, p))
    return [g for g in groups if g]  # DeepSpeed refuses an empty group


def buffer_names(model):
    names = []

    def walk(module, prefix):
        for name, buf in module.named_buffers(recurse=False):
            if buf is not None and name not in module._non_persistent_buffers_set:
                names.append(prefix + name)
        for name, child in module.named_children():
            walk(child, prefix + name + ".")

    walk(model, "")
    return names


def shared_params(model):
    """{alias: name}: a parameter met again under another module's name (engine.py's
    _get_shared_params, which keys them by identity)."""
    seen, shared = {}, {}

    def walk(module, prefix):
        for name, p in module.named_parameters(recurse=False):
            key = prefix + name
            if id(p) in seen:
                shared[key] = seen[id(p)]
            else:
                seen[id(p)] = key
        for name, child in module.named_children():
            walk(child, prefix + name + ".")

    walk(model, "")
    return shared


def ds_config(stage, lp, world_size):
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.999]}},
              "zero_optimization": {"stage": stage}, "world_size": world_size}
    if lp == torch.bfloat16:
        config["bf16"] = {"enabled": True}
    else:
        config["fp16"] = {"enabled": True, "initial_scale_power": 16}
    return config


def loss_scaler(lp):
    if lp == torch.bfloat16:
        return LossScaler(scale=1.0)
    return DynamicLossScaler(init_scale=2.0**16, dtype=torch.float16)


def adam_state(partitions, lrs):
    """torch.optim.AdamW's state_dict over one flat fp32 partition per group."""
    state = {}
    groups = []
    for i, (part, lr) in enumerate(zip(partitions, lrs)):
        state[i] = {"step": torch.tensor(7.0), "exp_avg": torch.full_like(part, 0.25),
                    "exp_avg_sq": torch.full_like(part, 0.0625)}
        groups.append({"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01,
                       "amsgrad": False, "foreach": None, "maximize": False,
                       "capturable": False, "differentiable": False, "fused": None,
                       "params": [i]})
    return {"state": state, "param_groups": groups}


def common_state(model, module_sd, stage, lp, world_size, param_shapes, frozen_shapes,
                 frozen_fragments, shared):
    return dict(module=module_sd,
                buffer_names=buffer_names(model),
                optimizer=None,
                param_shapes=param_shapes,
                frozen_param_shapes=frozen_shapes,
                shared_params=shared,
                frozen_param_fragments=frozen_fragments,
                lr_scheduler=None,
                data_sampler=None,
                random_ltd=None,
                sparse_tensor_module_names=set(),
                skipped_steps=0,
                global_steps=7,
                global_samples=14 * world_size,
                dp_world_size=world_size,
                mp_world_size=1,
                ds_config=ds_config(stage, lp, world_size),
                ds_version=DS_VERSION)


def optim_name(lp, rank):
    prefix = "bf16_" if lp == torch.bfloat16 else ""
    return f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"


def save_optim(tag_dir, stage, lp, world_size, rank, optimizer_state_dict):
    torch.save(dict(optimizer_state_dict=optimizer_state_dict,
                    ds_config=ds_config(stage, lp, world_size), ds_version=DS_VERSION),
               tag_dir / optim_name(lp, rank))


def write_stage12(tag_dir, stage, lp, world_size, seed, round_robin, factory=Model):
    """DeepSpeedZeroOptimizer's files (stage_1_and_2.py); returns the expected state dict."""
    model, masters = make_model(seed, lp, factory)
    groups = param_groups(model)
    alignment = 2 * world_size  # nccl_start_alignment_factor x world size
    param_shapes, flats_fp32, paddings, slice_mappings = [], [], [], []
    partition_size = []
    for group in groups:
        trainable = [(n, p) for n, p in group if p.requires_grad]
        if round_robin:  # _round_robin_reorder: parameter i to partition i % world size
            by_partition = OrderedDict()
            for i, item in enumerate(trainable):
                by_partition.setdefault(i % world_size, []).append(item)
            trainable = [item for items in by_partition.values() for item in items]
        numel = sum(p.numel() for _, p in trainable)
        aligned = math.ceil(numel / alignment) * alignment
        flat_fp32 = torch.zeros(aligned, dtype=torch.float32)
        flat_lp = torch.zeros(aligned, dtype=lp)
        shapes = OrderedDict()
        offset = 0
        for name, p in trainable:
            n = p.numel()
            flat_fp32[offset:offset + n] = masters[name].flatten()
            flat_lp[offset:offset + n] = p.detach().flatten()
            # The module's parameter becomes a view of the flat buffer (_update_model_bit16_weights).
            p.data = flat_lp.narrow(0, offset, n).view(p.shape)
            shapes[name] = p.shape
            offset += n
        param_shapes.append(shapes)
        flats_fp32.append(flat_fp32)
        size = aligned // world_size
        partition_size.append(size)
        # Each rank's padding: what of its partition lies past the group's elements.
        paddings.append([max(0, min(size, (r + 1) * size - numel)) for r in range(world_size)])
        mappings = []
        for r in range(world_size):
            m = OrderedDict()
            start = r * size
            off = 0
            for name, p in trainable:
                lo, hi = max(off, start), min(off + p.numel(), start + size)
                if lo < hi:
                    m[name] = fragment_address(numel=hi - lo, start=lo - start)
                off += p.numel()
            mappings.append(m)
        slice_mappings.append(mappings)

    for rank in range(world_size):
        partitions = []
        for g, flat in enumerate(flats_fp32):
            size = partition_size[g]
            part = flat.narrow(0, rank * size, size).clone()
            partitions.append(part[:size - paddings[g][rank]])  # saved without its padding
        state = {
            "loss_scaler": loss_scaler(lp),
            "dynamic_loss_scale": lp == torch.float16,
            "overflow": False,
            "clip_grad": 1.0,
            "base_optimizer_state": adam_state(partitions, [1e-4, 1e-4, 3e-4][:len(partitions)]),
            "single_partition_of_fp32_groups": partitions,
            "zero_stage": ZeroStageEnum.gradients if stage == 2 else ZeroStageEnum.optimizer_states,
            "group_paddings": [paddings[g][rank] for g in range(len(groups))],
            "partition_count": [world_size] * len(groups),
            "ds_version": DS_VERSION,
            "param_slice_mappings": [slice_mappings[g][rank] for g in range(len(groups))],
        }
        save_optim(tag_dir, stage, lp, world_size, rank, state)

    frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
    frozen_shapes = OrderedDict((n, p.shape) for n, p in frozen) if stage == 2 else None
    frozen_fragments = (OrderedDict((n, p.detach().clone()) for n, p in frozen)
                        if stage == 2 else None)
    shared = shared_params(model)
    state = common_state(model, model.state_dict(), stage, lp, world_size, param_shapes,
                         frozen_shapes, frozen_fragments, shared)
    torch.save(state, tag_dir / "mp_rank_00_model_states.pt")

    expected = OrderedDict()
    sd = model.state_dict()
    for name in buffer_names(model):
        expected[name] = sd[name].float()
    if stage == 2:
        for name, p in frozen:
            expected[name] = p.detach().clone()
    for shapes in param_shapes:
        for name in shapes:
            expected[name] = masters[name]
    for alias, name in shared.items():
        expected[alias] = expected[name]
    return expected


def write_stage3(tag_dir, lp, world_size, seed, sub_group_size, factory=Model):
    """DeepSpeedZeroOptimizer_Stage3's files (stage3.py); returns the expected state dict."""
    model, masters = make_model(seed, lp, factory)
    ws = world_size

    def partitions_of(t):
        """t's ds_tensor on each rank: ceil(numel / ws) elements, the last zero-padded."""
        n = t.numel()
        size = math.ceil(n / ws)
        padded = torch.zeros(size * ws, dtype=t.dtype)
        padded[:n] = t.flatten()
        return [padded.narrow(0, r * size, size).clone() for r in range(ws)]

    sub_groups = []
    for group in param_groups(model):
        trainable = [(n, p) for n, p in group if p.requires_grad]
        current, numel = [], 0
        for i, (name, p) in enumerate(trainable):  # _create_fp16_sub_groups
            current.append((name, p))
            numel += math.ceil(p.numel() / ws)
            if numel >= sub_group_size or i == len(trainable) - 1:
                sub_groups.append(current)
                current, numel = [], 0
    param_shapes = [OrderedDict((n, p.shape) for n, p in sg) for sg in sub_groups]
    fp32_parts = {n: partitions_of(masters[n]) for sg in sub_groups for n, _ in sg}

    for rank in range(ws):
        flats = [torch.cat([fp32_parts[n][rank] for n, _ in sg]) for sg in sub_groups]
        state = {
            "zero_stage": ZeroStageEnum.weights,
            "loss_scaler": loss_scaler(lp),
            "dynamic_loss_scale": lp == torch.float16,
            "overflow": False,
            "partition_count": ws,
            "optimizer_state_dict": adam_state(flats, [1e-4] * len(flats)),
            "fp32_flat_groups": flats,
        }
        save_optim(tag_dir, 3, lp, ws, rank, state)

    frozen = [(n, p) for n, p in model.named_parameters() if not p.requires_grad]
    shared = shared_params(model)
    full_sd = model.state_dict()
    names = buffer_names(model)
    for rank in range(ws):
        # The module's parameters are partitioned away: empty placeholders; buffers are whole.
        module_sd = OrderedDict()
        placeholders = {}
        for key, value in full_sd.items():
            if key in names:
                module_sd[key] = value
            else:
                p = dict(model.named_parameters(remove_duplicate=False))[key]
                module_sd[key] = placeholders.setdefault(id(p), torch.empty(0, dtype=lp))
        frozen_shapes = OrderedDict((n, p.shape) for n, p in frozen)
        frozen_fragments = OrderedDict((n, partitions_of(p.detach())[rank]) for n, p in frozen)
        state = common_state(model, module_sd, 3, lp, ws, param_shapes, frozen_shapes,
                             frozen_fragments, shared if rank == 0 else {})
        torch.save(state, tag_dir / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")

    expected = OrderedDict()
    for name in names:
        expected[name] = full_sd[name].float()
    for name, p in frozen:
        expected[name] = p.detach().clone()
    for shapes in param_shapes:
        for name in shapes:
            expected[name] = masters[name]
    for alias, name in shared.items():
        expected[alias] = expected[name]
    return expected


FIXTURES = [
    # (stage, low precision, world size, option): every stage and world size 1-4 in bf16 and
    # fp16; round-robin reordering in stage 2, small sub groups in stage 3.
    *[(s, lp, ws, None) for s in (1, 2, 3) for lp in ("bf16", "fp16") for ws in (1, 2, 3, 4)],
    (2, "fp16", 3, "round_robin"),
    (3, "bf16", 4, "sub_groups"),
]


def write(out_dir, script):
    """Writes every fixture into out_dir, each with a copy of `script` (zero_to_fp32.py, as
    DeepSpeed copies it beside its checkpoints); returns {name: {path, tag_dir, expected, stage,
    dtype, world_size}} (paths as the root sees them)."""
    out = Path(out_dir)
    result = {}
    for i, (stage, lp_name, ws, option) in enumerate(FIXTURES):
        lp = torch.bfloat16 if lp_name == "bf16" else torch.float16
        name = f"zero{stage}-{lp_name}-ws{ws}" + (f"-{option}" if option else "")
        root = out / name
        tag_dir = root / TAG
        tag_dir.mkdir(parents=True)
        if stage == 3:
            expected = write_stage3(tag_dir, lp, ws, 100 + i,
                                    sub_group_size=40 if option == "sub_groups" else 10**12)
        else:
            expected = write_stage12(tag_dir, stage, lp, ws, 100 + i,
                                     round_robin=option == "round_robin")
        (root / "latest").write_text(TAG)
        shutil.copy(script, root / "zero_to_fp32.py")
        torch.save(expected, out / f"{name}.expected.pt")
        result[name] = {"path": str(root), "tag_dir": str(tag_dir),
                        "expected": str(out / f"{name}.expected.pt"), "stage": stage,
                        "dtype": lp_name, "world_size": ws}
    return result


def write_bench(out_dir, stage, layers, hidden, world_size, script):
    """The benchmark's checkpoint (scripts/bench, section zero): BenchModel(layers, hidden) in
    bf16 as DeepSpeed saves it at `stage` on `world_size` ranks, into out_dir (with `latest`
    and a copy of `script`), unless out_dir/latest is there already. Returns out_dir."""
    root = Path(out_dir)
    if (root / "latest").is_file():
        return str(root)
    tag_dir = root / TAG
    tag_dir.mkdir(parents=True, exist_ok=True)
    factory = lambda: BenchModel(layers, hidden)  # noqa: E731
    if stage == 3:
        write_stage3(tag_dir, torch.bfloat16, world_size, 7, 10**12, factory)
    else:
        write_stage12(tag_dir, stage, torch.bfloat16, world_size, 7, False, factory)
    shutil.copy(script, root / "zero_to_fp32.py")
    (root / "latest").write_text(TAG)  # last: a generation cut short is made again
    return str(root)
