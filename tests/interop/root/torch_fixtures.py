# SPDX-License-Identifier: MIT
"""Runs in the interop root: checkpoints written by the root's torch (2.x) with torch.save, the
fixtures of tests/interop/test_interop_torch.py and of the checks that mount a torch checkpoint.

    write(out_dir) -> {name: {"path", "weights_only", "dtypes"?}}

writes each fixture to OUT_DIR/<name>.pth: small (a few hundred KiB in all), seconds. The values
are random (seeded): float tensors are random bytes, so NaN payloads, infinities and subnormals
are in them too. "weights_only" says whether torch.load's default (weights_only=True) loads the
file (torch.save(model) needs weights_only=False).
"""

import collections
import os

import torch

SEED = 22


class TinyNet(torch.nn.Module):
    """A module saved whole by torch.save(model): its class is this module's, which the root's
    Python imports to load it (weights_only=False)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 4)
        self.head = torch.nn.Linear(4, 16, bias=False)
        self.register_buffer("steps", torch.tensor(3))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)

    def forward(self, x):
        return self.head(torch.relu(self.fc(self.norm(self.embed(x)))))


def all_dtypes():
    """Every dtype object torch has, sorted by name."""
    return sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)


QUANTIZED = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}


def random_tensor(dtype, shape, gen):
    """A tensor of `dtype` and `shape` whose bytes are random (a quantized one: random values
    quantized per tensor)."""
    if dtype in QUANTIZED:
        zero_point = 0 if dtype == torch.qint32 else 3
        return torch.quantize_per_tensor(torch.randn(shape, generator=gen), 0.05, zero_point,
                                         dtype)
    numel = 1
    for s in shape:
        numel *= s
    raw = torch.randint(0, 256, (numel * dtype.itemsize,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        raw = raw % 2  # a bool is 0 or 1; torch.save keeps other bytes, no reader should see them
    return raw.view(dtype).reshape(shape)


def savable_dtypes():
    """The dtypes this torch saves and loads back with its default torch.load
    (weights_only=True): [(dtype, None)] and the others with why [(dtype, reason)]."""
    import io
    out = []
    gen = torch.Generator().manual_seed(SEED)
    for dt in all_dtypes():
        try:
            t = random_tensor(dt, (2,), gen)
            buffer = io.BytesIO()
            torch.save({"t": t}, buffer)
            buffer.seek(0)
            torch.load(buffer, weights_only=True)
            out.append((dt, None))
        except Exception as e:  # noqa: BLE001: torch raises various types
            out.append((dt, f"{type(e).__name__}: {e}"))
    return out


def dtypes_checkpoint():
    """Every savable dtype: a (3, 5) tensor, a 0-d and an empty one each (quint4x2 and quint2x4,
    packed below a byte, more shapes); a per-channel
    quantized tensor; a complex tensor's real view."""
    gen = torch.Generator().manual_seed(SEED)
    sd = collections.OrderedDict()
    names = []
    for dt, why in savable_dtypes():
        if why is not None:
            continue
        name = str(dt).removeprefix("torch.")
        names.append(name)
        sd[name] = random_tensor(dt, (3, 5), gen)
        sd[f"{name}.scalar"] = random_tensor(dt, (), gen) if dt not in QUANTIZED else \
            torch.quantize_per_tensor(torch.tensor(0.5), 0.1, 0, dt)
        sd[f"{name}.empty"] = random_tensor(dt, (0, 4), gen)
        if dt in (torch.quint4x2, torch.quint2x4):
            # Packed below a byte, in rows of whole bytes: rows that fill them, and odd ones.
            for shape in ((2, 3, 5), (4, 8), (7,), (2, 1)):
                sd[f"{name}.{'x'.join(map(str, shape))}"] = random_tensor(dt, shape, gen)
    w = torch.randn(4, 6, generator=gen)
    sd["per_channel.qint8"] = torch.quantize_per_channel(
        w, torch.rand(4, generator=gen) / 10 + 0.01, torch.zeros(4, dtype=torch.long), 0,
        torch.qint8)
    c = torch.randn(3, 4, dtype=torch.complex64, generator=gen)
    sd["complex.real"] = c.real  # a strided float32 view of a complex storage
    return sd, names


def views_checkpoint():
    """Views and shared storages: slices, transposes, steps, a row, a flat window, an expanded
    (stride 0) tensor, one tensor under two keys, a channels-last tensor."""
    gen = torch.Generator().manual_seed(SEED + 1)
    base = torch.randn(6, 8, generator=gen)
    w = torch.randn(5, 3, generator=gen)
    ints = torch.arange(24, dtype=torch.float32)
    return collections.OrderedDict([
        ("base", base),
        ("transposed", base.t()),
        ("block", base[1:4, 2:7]),
        ("every_other", base[:, ::2]),
        ("row", base[2]),
        ("window", base.view(-1)[5:17]),
        ("expanded", torch.randn(1, 4, generator=gen).expand(3, 4)),
        ("tied.a", w),
        ("tied.b", w),
        ("tied.c", w.view(15)[3:9]),
        ("ints", ints),
        ("ints.tail", ints[20:]),  # (torch refuses one storage under two dtypes)
        ("channels_last", torch.randn(2, 3, 4, 5, generator=gen).to(
            memory_format=torch.channels_last)),
    ])


def training_checkpoint():
    """What a training loop saves: model, optimizer (AdamW after two steps), scheduler,
    GradScaler, epoch, RNG state, hyperparameters."""
    torch.manual_seed(SEED)
    model = TinyNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu")
    for _ in range(2):
        loss = model(torch.randint(0, 16, (4, 3))).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "scaler": scaler.state_dict(),
        "epoch": 7,
        "rng_state": torch.get_rng_state(),
        "args": {"lr": 1e-3, "betas": [0.9, 0.999], "name": "tiny", "tags": ("a", "b"),
                 "none": None},
    }


def write(out_dir):
    out = {}

    def save(name, obj, weights_only=True, **kwargs):
        path = os.path.join(out_dir, f"{name}.pth")
        torch.save(obj, path, **kwargs)
        out[name] = {"path": path, "weights_only": weights_only}
        return out[name]

    sd, names = dtypes_checkpoint()
    save("dtypes", sd)["dtypes"] = names
    out["dtypes"]["keys"] = list(sd)
    out["dtypes"]["not_savable"] = {str(dt).removeprefix("torch."): why
                                    for dt, why in savable_dtypes() if why}
    save("views", views_checkpoint())
    save("training", training_checkpoint())
    torch.manual_seed(SEED)
    save("module", TinyNet(), weights_only=False)
    # The legacy (torch < 1.6) stream, as torch 2.x still writes it on request.
    legacy = collections.OrderedDict((k, v) for k, v in views_checkpoint().items())
    legacy.update((k, v) for k, v in sd.items() if v.dtype in (
        torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.uint8,
        torch.complex64))
    save("legacy", legacy, _use_new_zipfile_serialization=False)
    return out
