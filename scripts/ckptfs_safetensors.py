# SPDX-License-Identifier: MIT
"""safetensors files and Hugging Face sharded sets in Python, written from the formats'
descriptions (Debian 12 has no safetensors package): the reference that the integration tests,
scripts/make_fixtures.py and ckptfs-verify share, beside ckptfs_reference.py.

    DTYPES              the format's dtypes: torch's name and bits per element
    read_safetensors    a file's __metadata__ and tensors (in data order), checked as the format
                        says: header length, JSON, dtypes, sizes, one run of data to the end;
                        strict=True: also as a writer must (padding, no lone surrogates)
    write_safetensors   a file as the safetensors library writes one, or as other writers do
                        (unpadded, header in another order than the data, "__metadata__": null)
    torch_view          a tensor as torch (and ckptfs) holds it: dtype, shape, strides, nbytes
    read_index          an index's metadata and weight_map, in order
    write_index         an index as transformers writes one
    model_location      what ckptfs reads for a directory (transformers' names first)
    expected_model      what ckptfs must report for a safetensors file, a directory or an index:
                        format, sources, metadata, and every entry with its bytes

The standard library only, but for .bin shards of a sharded set (torch, through
ckptfs_reference). Importing it only defines things.
"""

import json
import os
from pathlib import Path

MAX_HEADER = 100_000_000  # the safetensors library's limit

# format dtype -> (torch dtype name, bits per element)
DTYPES = {
    "BOOL": ("bool", 8), "U8": ("uint8", 8), "I8": ("int8", 8),
    "F8_E5M2": ("float8_e5m2", 8), "F8_E4M3": ("float8_e4m3fn", 8),
    "F8_E8M0": ("float8_e8m0fnu", 8), "F8_E4M3FNUZ": ("float8_e4m3fnuz", 8),
    "F8_E5M2FNUZ": ("float8_e5m2fnuz", 8),
    "I16": ("int16", 16), "U16": ("uint16", 16), "F16": ("float16", 16), "BF16": ("bfloat16", 16),
    "I32": ("int32", 32), "U32": ("uint32", 32), "F32": ("float32", 32),
    "C64": ("complex64", 64), "F64": ("float64", 64), "I64": ("int64", 64), "U64": ("uint64", 64),
    "F4": ("float4_e2m1fn_x2", 4),  # two per byte: torch's packed pairs
    "F6_E2M3": (None, 6), "F6_E3M2": (None, 6),  # no torch dtype
}

# The element size in bytes of the torch dtypes above (F4's pairs are one byte).
TORCH_SIZES = {name: max(bits // 8, 1) for name, bits in DTYPES.values() if name}


class FormatError(ValueError):
    """The file is not what the format describes."""


def _unique_pairs(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise FormatError(f"the key {k!r} twice in one object")
        d[k] = v
    return d


def _natural(x):
    return type(x) is int and x >= 0


class Tensor:
    """One tensor of a safetensors file as its header describes it."""

    def __init__(self, name, dtype, shape, begin, end, data_start):
        self.name, self.dtype, self.shape = name, dtype, list(shape)
        self.begin, self.end = begin, end
        self.file_offset = data_start + begin  # of its first byte in the file

    @property
    def nbytes(self):
        return self.end - self.begin

    def read(self, path):
        with open(path, "rb") as f:
            f.seek(self.file_offset)
            return f.read(self.nbytes)


def _no_constant(name):
    raise FormatError(f"{name} is not JSON")


def _check_strict_header(text):
    """What a writer must do and readers may forgive: the header is one JSON object from its
    first byte, then only spaces up to a length that is a multiple of 8; every string in it is
    Unicode the safetensors library (serde_json) takes (no lone surrogate escape)."""
    if len(text) % 8:
        raise FormatError(f"header length {len(text)} is not a multiple of 8")
    if text[:1] != b"{":
        raise FormatError("the header does not start with '{'")
    decoded = text.decode("utf-8")
    try:
        _, end = json.JSONDecoder(object_pairs_hook=_unique_pairs,
                                  parse_constant=_no_constant).raw_decode(decoded)
    except json.JSONDecodeError as e:
        raise FormatError(f"the header is not JSON: {e}") from None
    if decoded[end:].strip(" ") != "":
        raise FormatError(f"{decoded[end:]!r} after the header's JSON (only spaces may pad it)")

    def check_strings(x):
        if isinstance(x, str):
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise FormatError(f"{x!r}: a lone surrogate escape") from None
        elif isinstance(x, dict):
            for k, v in x.items():
                check_strings(k)
                check_strings(v)
        elif isinstance(x, list):
            for v in x:
                check_strings(v)

    check_strings(json.loads(decoded, object_pairs_hook=_unique_pairs))


def read_safetensors(path, strict=False):
    """(metadata dict, [Tensor] in data order: by offsets, ties in header order). Raises
    FormatError for what the format forbids. `strict`: also what a writer must do that readers
    forgive (MLX writes unpadded headers): the rules of _check_strict_header(), and a
    "__metadata__" that is an object when present (not null)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise FormatError("shorter than a header length")
        n = int.from_bytes(head, "little")
        if n > MAX_HEADER or 8 + n > size:
            raise FormatError(f"header length {n}")
        text = f.read(n)
    if strict:
        _check_strict_header(text)
    header = json.loads(text.decode("utf-8"), object_pairs_hook=_unique_pairs)
    if not isinstance(header, dict):
        raise FormatError("the header is not an object")
    if strict and "__metadata__" in header and not isinstance(header["__metadata__"], dict):
        raise FormatError("__metadata__ is not an object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FormatError("__metadata__ is not an object of strings")
    tensors = []
    for name, d in header.items():
        try:
            dtype, shape, offsets = d["dtype"], d["shape"], d["data_offsets"]
        except (TypeError, KeyError) as e:
            raise FormatError(f"{name!r}: {e}") from None
        if dtype not in DTYPES or not isinstance(shape, list) or not all(map(_natural, shape)) \
                or not isinstance(offsets, list) or len(offsets) != 2 \
                or not all(map(_natural, offsets)) or offsets[1] < offsets[0]:
            raise FormatError(f"{name!r}: bad description {d!r}")
        numel = 1
        for s in shape:
            numel *= s
        bits = numel * DTYPES[dtype][1]
        if bits % 8 or bits // 8 != offsets[1] - offsets[0] or bits >= 1 << 64:
            raise FormatError(f"{name!r}: {dtype} {shape} is not {offsets}")
        tensors.append(Tensor(name, dtype, shape, offsets[0], offsets[1], 8 + n))
    tensors.sort(key=lambda t: (t.begin, t.end))  # stable: header order for equal offsets
    at = 0
    for t in tensors:
        if t.begin != at:
            raise FormatError(f"{t.name!r} starts at {t.begin}, not {at}")
        at = t.end
    if 8 + n + at != size:
        raise FormatError(f"the data ends at {8 + n + at}, the file at {size}")
    return metadata, tensors


def write_safetensors(path, tensors, metadata=None, *, pad=True, header_order=None,
                      metadata_null=False):
    """Writes [(name, dtype, shape, bytes)] with the data in that order and offsets from 0.
    The safetensors library's way: __metadata__ first when given, compact JSON, the header
    padded with spaces to a multiple of 8. Other writers' ways: pad=False, `header_order` (the
    names in the order the header lists them), metadata_null ('"__metadata__": null', MLX)."""
    described, data, at = {}, bytearray(), 0
    for name, dtype, shape, payload in tensors:
        described[name] = {"dtype": dtype, "shape": list(shape),
                           "data_offsets": [at, at + len(payload)]}
        data += payload
        at += len(payload)
    header = {}
    if metadata_null:
        header["__metadata__"] = None
    elif metadata:
        header["__metadata__"] = dict(metadata)
    for name in header_order or described:
        header[name] = described[name]
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if pad:
        text += b" " * (-len(text) % 8)
    Path(path).write_bytes(len(text).to_bytes(8, "little") + text + bytes(data))


def torch_view(t):
    """(torch dtype name, shape, stride, nbytes) of a Tensor as torch holds it (ckptfs's
    meta.json): F4 [..., 2n] is float4_e2m1fn_x2 [..., n]; strides of C order, a size 0 counting
    as 1 (torch.empty's rule)."""
    name, bits = DTYPES[t.dtype]
    shape = list(t.shape)
    if bits == 4:
        shape[-1] //= 2
    stride, step = [], 1
    for s in reversed(shape):
        stride.insert(0, step)
        step *= max(s, 1)
    return name, shape, stride, t.nbytes


def read_index(path):
    """(metadata dict, [(key, file)] in the index's order)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"),
                     object_pairs_hook=lambda pairs: _unique_pairs(pairs))
    if not isinstance(doc, dict) or not isinstance(doc.get("weight_map"), dict):
        raise FormatError("no weight_map")
    return doc.get("metadata") or {}, list(doc["weight_map"].items())


def write_index(path, weight_map, total_size, **extra_metadata):
    """An index as transformers' save_pretrained writes it: {"metadata": {"total_size": N},
    "weight_map": {key: file}}, keys sorted, indented by 2, with a final newline."""
    index = {"metadata": {"total_size": total_size, **extra_metadata},
             "weight_map": dict(weight_map)}
    Path(path).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")


STANDARD_NAMES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                  "pytorch_model.bin.index.json")


def model_location(path):
    """The file ckptfs reads for `path`: itself, or for a directory the first of STANDARD_NAMES
    in it, else its one *.index.json, else its one *.safetensors."""
    path = Path(path)
    if not path.is_dir():
        return path
    for name in STANDARD_NAMES:
        if (path / name).is_file():
            return path / name
    for pattern in ("*.index.json", "*.safetensors"):
        found = sorted(p for p in path.glob(pattern) if p.is_file())
        if found:
            if len(found) > 1:
                raise FormatError(f"{len(found)} {pattern} files")
            return found[0]
    raise FormatError("nothing to mount")


def is_safetensors(path):
    """ckptfs's rule: named *.safetensors, or '{' at byte 8."""
    if str(path).endswith(".safetensors"):
        return True
    with open(path, "rb") as f:
        return f.read(9)[8:9] == b"{"


class Entry(dict):
    """An expected entry: {"key", "kind", "dtype", "shape", "stride", "nbytes", "source",
    "file_offset" (None when the bytes are not one range of the file), "broken" (None, or True
    for a key its shard lacks)}; data() gives the tensor's bytes in C order as stored."""

    def data(self):
        return self["_data"]() if callable(self["_data"]) else self["_data"]


def _safetensors_entries(path, source):
    metadata, tensors = read_safetensors(path)
    entries = []
    for t in tensors:
        dtype, shape, stride, nbytes = torch_view(t)
        entries.append(Entry(key=t.name, kind="tensor", dtype=dtype, shape=shape, stride=stride,
                             nbytes=nbytes, source=source, file_offset=t.file_offset,
                             broken=None, _data=lambda t=t: t.read(path)))
    return metadata, entries


def _torch_entries(path, source):
    import ckptfs_reference as ref  # needs torch: only for .bin shards
    entries = []
    for key, obj in ref.flatten(ref.torch_load(path)):
        if ref.is_torch_tensor(obj):
            entries.append(Entry(key=key, kind="tensor", dtype=ref.dtype_name(obj.dtype),
                                 shape=list(obj.shape), stride=list(obj.stride()),
                                 nbytes=obj.numel() * obj.element_size(), source=source,
                                 file_offset=None, broken=None,
                                 _data=ref.tensor_bytes(obj, "little")))
        else:
            entries.append(Entry(key=key, kind="value", source=source, _data=b""))
    return entries


def expected_model(path):
    """What ckptfs must report for `path` (a safetensors file, a directory or an index):
    {"format", "sources", "metadata", "entries": [Entry]}; sources relative to the directory of
    what is read, entries in ckptfs's order (a file's data order; an index's weight_map order)."""
    location = model_location(path)
    if str(location).endswith(".json"):
        metadata, weight_map = read_index(location)
        sources = list(dict.fromkeys(f for _, f in weight_map))
        by_shard = {}
        for f in sources:
            shard = location.parent / f
            if is_safetensors(shard):
                by_shard[f] = {e["key"]: e for e in _safetensors_entries(shard, f)[1]}
            else:
                by_shard[f] = {e["key"]: e for e in _torch_entries(shard, f)}
        entries = []
        for key, f in weight_map:
            e = by_shard[f].get(key)
            entries.append(e if e is not None else
                           Entry(key=key, kind="tensor", source=None, broken=True, _data=b""))
        strings = {k: v for k, v in metadata.items() if isinstance(v, str)}
        return {"format": "sharded", "sources": sources, "metadata": strings, "entries": entries}
    metadata, entries = _safetensors_entries(location, location.name)
    return {"format": "safetensors", "sources": [location.name], "metadata": metadata,
            "entries": entries}
