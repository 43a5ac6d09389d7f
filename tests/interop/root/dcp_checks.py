# SPDX-License-Identifier: MIT
"""Runs in the interop root: what a mount of a PyTorch Distributed Checkpoint says of its
pieces, against torch's own reading of the checkpoint's .metadata.

    check_pieces(directory, mnt, views)
        every tensor of the mount's index.json that .metadata has (its key is a
        state_dict_metadata key: the tensors of BYTE_IO values are not assembled) lists in its
        meta.json "pieces" exactly the non-empty chunks of .metadata, each with the file its
        item is in and its box; index.json's "format" is "dcp"

The tensors' bytes are checked against dcp_to_torch_save's file by torch_checks, safetensors_checks
and pack_checks. Returns {"tensors", "pieces", "problems": [...]}.
"""

import json
import os

from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

from torch_checks import Report, read


def check_pieces(directory, mnt, views):
    report = Report()
    report.counts["pieces"] = 0
    metadata = FileSystemReader(directory).read_metadata()
    index = json.loads(read(os.path.join(views, "index.json")))
    if index["format"] != "dcp":
        report.problem(f"index.json's format is {index['format']!r}, not 'dcp'")
    for e in index["entries"]:
        md = metadata.state_dict_metadata.get(e["key"])
        if e["kind"] != "tensor" or not isinstance(md, TensorStorageMetadata):
            continue
        report.counts["tensors"] += 1
        meta = json.loads(read(os.path.join(mnt, e["path"], "meta.json")))
        pieces = meta.get("pieces")
        if not pieces:
            report.problem(f"{e['key']}: meta.json has no pieces")
            continue
        want = []
        for chunk in md.chunks:
            if 0 in chunk.sizes:
                continue  # an empty chunk is no piece
            info = metadata.storage_data[MetadataIndex(e["key"], chunk.offsets)]
            want.append((info.relative_path, list(chunk.offsets), list(chunk.sizes)))
        got = [(p["source"], p["offsets"], p["lengths"]) for p in pieces["list"]]
        if pieces["grid"] != "shape" or pieces["count"] != len(want) or sorted(got) != sorted(want):
            report.problem(f"{e['key']}: pieces {got}, .metadata has {want}")
        for p in pieces["list"]:
            report.counts["pieces"] += 1
            size = 1
            for n in p["lengths"]:
                size *= n
            if p["nbytes"] != size * meta["nbytes"] // max(1, _numel(meta["shape"])):
                report.problem(f"{e['key']}: a piece of {p['nbytes']} bytes for {p['lengths']}")
    return report.result()


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n
