# SPDX-License-Identifier: MIT
"""ckptfs -- open any checkpoint as a lazy state dict, load a model in bounded memory, and read
local tensors at the file's own speed.

SYNOPSIS
    import ckptfs
    with ckptfs.open("model.pth", dtype="bfloat16") as ck:
        ck.keys()                           # the flattened keys, as the mount names them
        ck["encoder.weight"]                # a torch.Tensor (numpy without torch), or a value
        ck.numpy("encoder.weight")          # a numpy array, as np.load of its tensor.npy
        ck.meta("encoder.weight")           # its meta.json
        ck.get_slice("encoder.weight")[0:128]   # only those rows are read
        ck.path_of("encoder.weight")        # "file" (read from the file itself) or "mount"
    sd = ckptfs.load_state_dict("model.pth", keys=["model.*"])   # a Mapping, read on access
    ckptfs.load_into(model, "model.pth", prefix="model.", strict=True, device="cpu")

DESCRIPTION
    A thin client of a ckptfs mount (docs/PYTHON.md). ckptfs.open() mounts what it is given (a
    torch.save file, safetensors, a Hugging Face directory, PyTorch DCP, DeepSpeed ZeRO, GGUF,
    .npz, or their URL) with the ckptfs program on a private directory and unmounts it at
    close; or opens a mount that exists as it is. Keys, dtypes and shapes come from the
    mount's .ckptfs/index.json; tensors from its tensor.npy files, values from value.json.

    The fast path: a tensor the mount publishes as one plain range of a local file (a .pth
    record, a safetensors tensor, a GGUF F32/F16 tensor, a stored .npz member; neither converted,
    byte-swapped, dequantized, assembled, inflated nor remote) is read from that file itself,
    memory-mapped, once the file is checked to be the very one the mount serves (device, inode,
    size and mtime, which index.json publishes); it then costs no FUSE request at all.
    Everything else reads through the mount, which never serves wrong bytes (EIO for a
    checkpoint changed under it).

    numpy is required, torch optional: tensors are torch tensors where torch can be imported
    (imported on first use, not by `import ckptfs`), numpy arrays otherwise.

ENVIRONMENT
    CKPTFS_BINARY   the ckptfs program to mount with (default: `ckptfs` on PATH)

ERRORS
    Every failure raises ckptfs.Error (a missing key: ckptfs.KeyNotFound, also a KeyError),
    with the ckptfs program's one-line message and exit status when it failed.
"""

from ._checkpoint import FILE, MOUNT, Checkpoint, Slice
from ._errors import Error, KeyNotFound
from ._load_into import IncompatibleKeys
from ._values import Described

__all__ = ["open", "load_state_dict", "load_into", "Checkpoint", "Slice", "Error",
           "KeyNotFound", "Described", "IncompatibleKeys", "FILE", "MOUNT"]


def open(source, *, keys=None, fast_path=True, **options):  # noqa: A001 (as builtins.open)
    """ckptfs.open(source, *, keys=None, fast_path=True, **options) -> Checkpoint

    DESCRIPTION
        Opens a checkpoint as a lazy Mapping of its flattened keys (ckptfs.Checkpoint).

        source  a checkpoint ckptfs mounts: a file, a model directory, a sharded set's
                *.index.json, a DCP or ZeRO directory, a .gguf, a .npz, or an http(s):// or
                s3:// URL. It is mounted with the ckptfs program ($CKPTFS_BINARY, else
                `ckptfs` on PATH) on a new private directory (mode 0700), waited for (-o
                notify_fd=), and unmounted by close(), at the end of a `with` block, when the
                Checkpoint is garbage collected or when the interpreter exits (fusermount3 -u;
                -u -z while a file of it is still open). Or a directory on which a ckptfs mount
                already is (its .ckptfs/index.json; fuse.ckptfs in /proc/self/mountinfo): used
                as it is, and left mounted.
        keys    None (every key), or a glob or a list of globs (fnmatch's, as `ckptfs pack
                --keys`: "model.*", "*.weight"): the Mapping holds the keys that match one.
        fast_path  False reads every tensor through the mount, never from the file itself.
        options the ckptfs program's -o options, as keywords: dtype="bfloat16" (or
                torch.bfloat16), shard_size="5GB", cache_dir="...", timeout=30, names="hf"...;
                True for a flag (allow_other=True), False or None to leave one out. layout=
                and files= are refused (the package reads the split layout's tensor.npy and
                value.json), and so is any option with an existing mountpoint.

    RETURNS
        A Checkpoint; also a context manager (`with ckptfs.open(...) as ck:`).

    ERRORS
        Error with the ckptfs program's line and exit status when it refuses the checkpoint or
        an option, or the mount fails; Error (status 2) when the program is not found.

    EXAMPLES
        with ckptfs.open("model.pth") as ck:
            w = ck["encoder.weight"]
        with ckptfs.open("https://host/model.safetensors", cache_dir="/var/cache/ck") as ck:
            first_rows = ck.get_slice("embed.weight")[:16]
    """
    return Checkpoint(source, keys=keys, fast_path=fast_path, **options)


def load_state_dict(source, keys=None, *, fast_path=True, **options):
    """ckptfs.load_state_dict(source, keys=None, **options) -> Checkpoint (a Mapping)

    DESCRIPTION
        The checkpoint's flattened state dict as a Mapping, each tensor read when it is
        accessed (never all at once): ckptfs.open(source, keys=keys, **options). Its mount
        stays while the Mapping is referenced, and goes when it is garbage collected (or at
        close(), or at the end of a `with` block). `dict(sd)` reads every tensor, for code
        that wants a plain dict.

    EXAMPLES
        sd = ckptfs.load_state_dict("train.pth", keys=["model.*"])
        model.load_state_dict({k.removeprefix("model."): v for k, v in sd.items()})
        # (ckptfs.load_into does the same one tensor at a time, in the model's own memory)
    """
    return Checkpoint(source, keys=keys, fast_path=fast_path, **options)


def load_into(model, source, prefix="", strict=True, device=None, *, fast_path=True,
              **options):
    """ckptfs.load_into(model, source, prefix="", strict=True, device=None, **options)
    -> IncompatibleKeys(missing_keys, unexpected_keys)

    DESCRIPTION
        Copies a checkpoint into a torch model's own parameters and buffers, one tensor at a
        time, under torch.no_grad(): no state dict of the checkpoint is ever built, and no
        second copy of the model is made. A tensor of the parameter's dtype bound for the CPU
        is read straight into the parameter's memory (from the file itself on the fast path,
        else from the mount); any other is read alone, then copied in (copy_ converts dtype
        and device). Peak memory: the model, plus the largest tensor when dtypes differ.

        model   a torch.nn.Module; its state_dict() keys are matched against the checkpoint's.
        source  what ckptfs.open() takes (opened with **options and closed at the end), or an
                open Checkpoint (left open).
        prefix  taken off the checkpoint's keys that start with it ("model." for a training
                checkpoint {"model": state_dict, "optimizer": ...}); keys without it are
                ignored. With names="hf" (issue 30's -o names=hf), the mount's keys are
                already Hugging Face's.
        strict  as torch's load_state_dict: a model key missing from the checkpoint, or a
                checkpoint key (after the prefix) the model lacks, is an error; strict=False
                returns them instead. Shapes that differ are an error either way. Each tensor
                of model.state_dict() is filled from the key of its name: modules' own
                _load_from_state_dict (and load_state_dict's hooks) are not run.
        device  where parameters and buffers on the "meta" device are made (a model built
                under torch.device("meta") or accelerate's init_empty_weights): each is
                replaced by a tensor made there, of its dtype, holding the checkpoint's
                values (tied weights stay tied). Parameters on any other device are filled
                where they are.

    RETURNS
        IncompatibleKeys(missing_keys, unexpected_keys), as torch's load_state_dict.

    ERRORS
        Error, with torch's message ("Error(s) in loading state_dict for Net:\\n\\tMissing
        key(s) in state_dict: ...", "size mismatch for ..."), raised before anything is copied;
        Error for a tensor that cannot be read (as ck[key]).
    """
    from ._load_into import load_into as work
    if isinstance(source, Checkpoint):
        if options:
            raise Error("ckptfs: load_into: -o options apply when load_into opens the "
                        "checkpoint, not to an open Checkpoint", status=1)
        return work(source, model, prefix=prefix, strict=strict, device=device)
    with Checkpoint(source, fast_path=fast_path, **options) as ck:
        return work(ck, model, prefix=prefix, strict=strict, device=device)
