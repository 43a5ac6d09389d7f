# SPDX-License-Identifier: MIT
"""Checkpoint: a mount of any checkpoint as a lazy Mapping of its flattened keys, and Slice,
the rows of one tensor read on request. The package is a thin client of the mount and its JSON
(docs/TREE.md): it never reads a checkpoint format itself, except to map or pread a plain local
range the mount has published (_files.py)."""

import ctypes
import errno as errnos
import fnmatch
import json
import os
import sys
import weakref
from collections.abc import Mapping

import numpy as np

from . import _tensors
from ._errors import Error, KeyNotFound
from ._files import LocalFiles
from ._mount import VIEWS_FOLDER, Mount, is_ckptfs_mount, resolve
from ._values import decode

# What path_of() says.
FILE = "file"    # read from the checkpoint's own file (mapped, or pread)
MOUNT = "mount"  # read through the mount (tensor.npy, tensor.pt, value.json)


def _read_error(path, e):
    hint = ""
    if e.errno == errnos.EIO:
        hint = (": the checkpoint changed while mounted, or a server failed (the mount's log "
                "says which): open it again")
    return Error(f"ckptfs: {path}: {e.strerror or e}{hint}", errno=e.errno)


def _bytes_of(array):
    """A writable memoryview of a C-contiguous array's bytes."""
    return memoryview(array.reshape(-1).view(np.uint8))


def _read_header(f):
    """The shape, Fortran order and dtype of the .npy file `f` (at its start), f left at its
    data."""
    fmt = np.lib.format
    version = fmt.read_magic(f)
    read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    try:
        return read(f, max_header_size=1 << 20)
    except TypeError:  # numpy < 1.24 has no limit to raise
        return read(f)


def _readinto_all(f, view):
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:
            return False
        done += n
    return True


class Checkpoint(Mapping):
    """ckptfs.Checkpoint -- a checkpoint as a lazy Mapping of its flattened keys.

    SYNOPSIS
        ck = ckptfs.open(source, *, keys=None, fast_path=True, **options)
        ck[key]  ck.numpy(key)  ck.meta(key)  ck.get_slice(key)[a:b]  ck.path_of(key)
        ck.load_into(model, prefix="", strict=True, device=None)  ck.close()

    DESCRIPTION
        Made by ckptfs.open() and ckptfs.load_state_dict(). Its keys are the mount's
        (index.json's, in the checkpoint's order; a key that another key has the same text as
        gets the mount's naming rule's "%#2", "%#3"... after it), or those of them that the
        `keys` globs select; nothing is read until a key is. A tensor is read when it is looked
        up: from the checkpoint's file itself when the mount publishes it as one plain range of
        a local file (the fast path), else through the mount.

    ATTRIBUTES
        mountpoint  the directory the checkpoint is mounted on
        index       .ckptfs/index.json, parsed
        format      what the checkpoint is ("zip", "safetensors", "gguf"...: index.json's)
        closed      whether close() was called
    """

    def __init__(self, source, *, keys=None, fast_path=True, **options):
        self._mount = None
        self._files = None
        self.closed = False
        self._fast = bool(fast_path)
        self._taken = {}
        source = os.fspath(source)
        if "://" not in source and os.path.isdir(source) and is_ckptfs_mount(source):
            if options:
                raise Error(f"ckptfs: {source}: already mounted: -o options apply when "
                            "ckptfs.open mounts a checkpoint, not to a mountpoint", status=1)
            self.mountpoint = resolve(source)
        else:
            self._mount = Mount(source, options)
            self.mountpoint = self._mount.path
        # Unmounts when the Checkpoint goes (garbage collection, interpreter exit) unless
        # close() did; the finalizer holds the Mount, never the Checkpoint.
        self._finalizer = weakref.finalize(self, _close, self._mount, None)
        try:
            index_path = os.path.join(self.mountpoint, VIEWS_FOLDER, "index.json")
            try:
                with open(index_path, "rb") as f:
                    self.index = json.load(f)
            except OSError as e:
                raise _read_error(index_path, e) from None
            # The split layout's root holds directories only; the RFC layout's, map.pt.
            if os.path.isfile(os.path.join(self.mountpoint, "map.pt")):
                raise Error(f"ckptfs: {self.mountpoint}: an -o layout=rfc mount: the package "
                            "reads the split layout (mount it without layout=rfc)", status=1)
            self.format = self.index.get("format")
            self._files = LocalFiles(self.index.get("source_files"))
            self._finalizer.detach()
            self._finalizer = weakref.finalize(self, _close, self._mount, self._files)
            self._all = {}  # every entry (a quantized tensor's scales may be unselected)
            for e in self.index.get("entries", []):
                name = e["key"]
                if name in self._all:
                    n = 2
                    while f"{e['key']}%#{n}" in self._all:
                        n += 1
                    name = f"{e['key']}%#{n}"
                self._all[name] = e
            patterns = [keys] if isinstance(keys, str) else list(keys) if keys is not None else None
            self._entries = self._all if patterns is None else {
                name: e for name, e in self._all.items()
                if any(fnmatch.fnmatchcase(name, p) for p in patterns)}
        except BaseException:
            self.close()
            raise

    # ---- the Mapping --------------------------------------------------------------------------

    def __getitem__(self, key):
        """ck[key] -> torch.Tensor, numpy.ndarray or a Python value.

        DESCRIPTION
            A tensor entry: a torch.Tensor of the dtype and shape the mount serves, bit for bit
            its tensor.pt (requires_grad False; a quantized one made from its integers and
            meta.json's quantization), where torch is importable; else a numpy array as
            ck.numpy(key) gives it. On the fast path it maps the checkpoint's file
            (copy-on-write: writing to it never writes the file); otherwise it is read once,
            through the mount, into memory of its own. A value entry (an epoch, param_groups):
            its value.json decoded (docs/VALUES.md): ints, floats, tuples, dicts..., and a
            ckptfs.Described for what is not plain data.

        ERRORS
            KeyNotFound (a KeyError) when there is no such key; Error when the tensor cannot
            be served (broken, its blocks not dequantized: meta.json says why), when this torch
            lacks its dtype, or when a read fails (errno EIO: the checkpoint changed).
        """
        entry = self._entry(key)
        if entry["kind"] != "tensor":
            return self._value(key, entry)
        if not _tensors.torch_available():
            return self._array(key, entry)
        name = entry["dtype"]
        if name in _tensors.QUANTIZED:
            return self._quantized(key, entry)
        array = self._array(key, entry)
        return _tensors.to_torch(array, name, key)

    def __iter__(self):
        self._check_open()
        return iter(self._entries)

    def __len__(self):
        return len(self._entries)

    def __contains__(self, key):
        return key in self._entries

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else f"on {self.mountpoint}"
        return f"<ckptfs.Checkpoint {self.index.get('source', '?')!r} {state}, " \
               f"{len(self._entries)} keys>" if hasattr(self, "index") else "<ckptfs.Checkpoint>"

    # ---- the other readers --------------------------------------------------------------------

    def numpy(self, key):
        """ck.numpy(key) -> numpy.ndarray: a tensor as np.load of its tensor.npy gives it.

        DESCRIPTION
            The served dtype and shape, equal to np.load(MNT/<key>/tensor.npy) (torch is never
            imported). The dtypes numpy lacks come as their bits, in the unsigned integer of
            the same width: bfloat16 as uint16 (torch.from_numpy(a.view(numpy.int16))
            .view(torch.bfloat16) makes the tensor), float8 and float4 as uint8, complex32 as
            uint32; quantized tensors as their integers (quint4x2 and quint2x4, packed 2 or 4
            a byte, as their stored bytes: uint8 in one dimension, meta.json's "packing"). A
            big-endian checkpoint's tensors read through the mount keep their byte order
            (dtype '>f4'...), as np.load's do.

        ERRORS
            As ck[key]; Error for a value entry.
        """
        entry = self._entry(key)
        if entry["kind"] != "tensor":
            raise Error(f"ckptfs: {key}: a value, not a tensor: ck[key] gives it", status=1)
        return self._array(key, entry)

    def meta(self, key):
        """ck.meta(key) -> dict: the tensor's meta.json (docs/TREE.md: dtype, shape, stride,
        source, file_offset, storage, shared_with, pieces, broken...), read through the mount.

        ERRORS
            KeyNotFound; Error for a value entry (its value.json is ck[key]) and when the read
            fails.
        """
        entry = self._entry(key)
        if entry["kind"] != "tensor":
            raise Error(f"ckptfs: {key}: a value has no meta.json: ck[key] gives it", status=1)
        return self._json(entry, "meta.json")

    def get_slice(self, key, numpy=False):
        """ck.get_slice(key, numpy=False) -> Slice: a tensor whose rows are read when indexed.

        DESCRIPTION
            As safetensors' get_slice: slice[0:128], slice[10], slice[:, 2:5] read only the
            rows the first index selects, with one pread of their bytes (on the fast path, of
            the checkpoint's file itself; else of the mount's tensor.npy), then apply the rest
            of the index in memory: no mapping of the file is kept. Its results are torch
            tensors where torch is importable, numpy arrays with numpy=True (or without
            torch). For many small reads, slice.readinto() fills a buffer of the caller's
            instead (no array made per read). slice.get_shape() and
            slice.get_dtype() say what it is; the path (slice.path: "file" or "mount") is
            chosen, and the file checked, when get_slice is called.

        ERRORS
            As ck.numpy(key).
        """
        entry = self._entry(key)
        if entry["kind"] != "tensor":
            raise Error(f"ckptfs: {key}: a value, not a tensor: ck[key] gives it", status=1)
        self._check_served(key, entry)
        if entry["dtype"] in _tensors.PACKED:
            raise Error(f"ckptfs: {key}: a {entry['dtype']} tensor, whose rows share bytes "
                        "(packed flat): ck[key] or ck.numpy(key) gives it whole", status=5)
        as_numpy = numpy or not _tensors.torch_available()
        return Slice(self, key, entry, as_numpy)

    def path_of(self, key):
        """ck.path_of(key) -> "file" or "mount": how the tensor was read the last time it was
        (or, not read yet, would be now).

        DESCRIPTION
            "file": from the checkpoint's own file, mapped or read with pread: the mount
            publishes the tensor as one plain range of a local file (index.json's file_range:
            a .pth record, a safetensors tensor, a GGUF F32/F16 tensor, a stored .npz member,
            not converted) in this machine's byte order, of a dtype this package makes from
            bytes, and the file is still the one the mount serves (device, inode, size, mtime).
            "mount": everything else (remote, assembled from pieces, converted by -o dtype,
            byte-swapped, dequantized, inflated, quantized tensors (their scales are in
            meta.json), a file changed since the mount opened it, fast_path=False), and
            values.
        """
        entry = self._entry(key)
        if key in self._taken:
            return self._taken[key]
        if entry["kind"] != "tensor":
            return MOUNT
        return FILE if self._local_range(entry) is not None else MOUNT

    def load_into(self, model, prefix="", strict=True, device=None):
        """ck.load_into(model, prefix="", strict=True, device=None): see ckptfs.load_into()."""
        from ._load_into import load_into
        return load_into(self, model, prefix=prefix, strict=strict, device=device)

    def close(self):
        """ck.close(): unmounts the checkpoint when ckptfs.open mounted it (fusermount3 -u;
        lazily, -u -z, while a file of it is still open) and removes its mountpoint; a
        mountpoint given to ckptfs.open stays mounted. Tensors already made stay valid: those
        of the fast path keep their mapping of the file. Called by `with` and when the
        Checkpoint is garbage collected or the interpreter exits; again, it does nothing."""
        self.closed = True
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        else:
            _close(self._mount, self._files)

    # ---- internals ----------------------------------------------------------------------------

    def _check_open(self):
        if self.closed:
            raise Error(f"ckptfs: {self.mountpoint}: the checkpoint is closed", status=1)

    def _entry(self, key):
        self._check_open()
        try:
            return self._entries[key]
        except KeyError:
            raise KeyNotFound(f"ckptfs: {key}: no such key in {self.index.get('source')}") \
                from None
        except TypeError:
            raise KeyNotFound(f"ckptfs: {key!r}: keys are str") from None

    def _dir(self, entry):
        return os.path.join(self.mountpoint, entry["path"])

    def _json(self, entry, name):
        path = os.path.join(self._dir(entry), name)
        try:
            with open(path, "rb") as f:
                return json.load(f)
        except OSError as e:
            raise _read_error(path, e) from None

    def _value(self, key, entry):
        self._taken[key] = MOUNT
        return decode(self._json(entry, "value.json"))

    def _check_served(self, key, entry):
        if entry.get("nbytes") is not None:
            return
        meta = self._json(entry, "meta.json")
        why = meta.get("broken") or (meta.get("ggml") or {}).get("not_dequantized") or "?"
        raise Error(f"ckptfs: {key}: its tensor is not served: {why}", status=5)

    def _local_range(self, entry):
        """(LocalFile, offset, numpy dtype) when the tensor may be read from its file now."""
        if not self._fast:
            return None
        fr = entry.get("file_range")
        name = entry["dtype"]
        if not fr or name in _tensors.QUANTIZED:
            return None
        dtype = _tensors.numpy_dtype(name)
        nbytes = entry.get("nbytes")
        if dtype is None or not nbytes or nbytes % dtype.itemsize:
            return None
        if fr.get("byteorder") != sys.byteorder and dtype.itemsize > 1:
            return None  # (one-byte elements are the same bytes in either order)
        f = self._files.get(fr["source"])
        offset = fr["offset"]
        if f is None or offset + nbytes > len(f.map):
            return None
        return f, offset, dtype

    def _array(self, key, entry):
        self._check_served(key, entry)
        local = self._local_range(entry)
        if local is not None:
            f, offset, dtype = local
            count = entry["nbytes"] // dtype.itemsize
            if offset % dtype.itemsize:  # unaligned: copied, as torch wants its elements aligned
                array = np.frombuffer(f.map, np.uint8, entry["nbytes"], offset).copy().view(dtype)
            else:
                array = np.frombuffer(f.map, dtype, count, offset)
            self._taken[key] = FILE
            return array.reshape(entry["shape"])
        self._taken[key] = MOUNT
        return self._read_npy(key, entry)

    def _read_npy(self, key, entry):
        """The tensor as np.load(tensor.npy) gives it, read into memory of its own."""
        path = os.path.join(self._dir(entry), "tensor.npy")
        try:
            with open(path, "rb") as f:
                shape, fortran, dtype = _read_header(f)
                array = np.empty(shape, dtype, order="F" if fortran else "C")
                if not _readinto_all(f, _bytes_of(array.T if fortran else array)):
                    raise Error(f"ckptfs: {path}: shorter than its header says", errno=errnos.EIO)
        except FileNotFoundError:
            return self._read_data(key, entry)  # a mount made with -o files= without npy
        except OSError as e:
            raise _read_error(path, e) from None
        except ValueError as e:
            raise Error(f"ckptfs: {path}: not a .npy file numpy reads: {e}", errno=errnos.EIO) \
                from None
        return array

    def _read_data(self, key, entry):
        meta = self._json(entry, "meta.json")
        dtype = np.dtype(meta["numpy"])
        array = np.empty(_tensors.npy_shape(entry["dtype"], entry["shape"]), dtype)
        path = os.path.join(self._dir(entry), "data")
        try:
            with open(path, "rb") as f:
                if not _readinto_all(f, _bytes_of(array)):
                    raise Error(f"ckptfs: {path}: shorter than its meta.json says",
                                errno=errnos.EIO)
        except OSError as e:
            raise _read_error(path, e) from None
        return array

    def _quantized(self, key, entry):
        """A quantized tensor: its integers (tensor.npy) and meta.json's quantization (scale
        and zero point, or the keys of the per-channel scales and zero points), as torch's
        _rebuild_qtensor makes it from tensor.pt."""
        torch = _tensors.torch()
        self._check_served(key, entry)
        q = self._json(entry, "meta.json").get("quantization") or {}
        ints = self._array(key, entry)
        if entry["dtype"] in _tensors.PACKED:
            return self._packed_quantized(key, entry, q, ints)
        if not ints.dtype.isnative:
            ints = ints.astype(ints.dtype.newbyteorder("="))
        ints = torch.from_numpy(ints)
        scheme = q.get("qscheme", "")
        try:
            if scheme.startswith("per_tensor"):
                return torch._make_per_tensor_quantized_tensor(ints, q["scale"], q["zero_point"])
            if scheme.startswith("per_channel"):
                scales = self._tensor_of(q["scales"])
                zero_points = self._tensor_of(q["zero_points"])
                return torch._make_per_channel_quantized_tensor(ints, scales, zero_points,
                                                                q["axis"])
        except (RuntimeError, KeyError, TypeError) as e:
            raise Error(f"ckptfs: {key}: a {entry['dtype']} tensor torch {torch.__version__} "
                        f"cannot make ({scheme}): {e}", status=5) from None
        raise Error(f"ckptfs: {key}: a {entry['dtype']} tensor of a quantization scheme this "
                    f"package does not know ({scheme or '?'}): its tensor.pt holds it", status=5)

    def _packed_quantized(self, key, entry, q, stored):
        """A quint4x2 or quint2x4 tensor from its stored bytes (tensor.npy) and quantization."""
        torch = _tensors.torch()
        scheme = q.get("qscheme", "")
        try:
            if scheme.startswith("per_tensor"):
                params = (torch.per_tensor_affine, q["scale"], q["zero_point"])
            elif scheme.startswith("per_channel"):
                params = (getattr(torch, scheme), self._tensor_of(q["scales"]),
                          self._tensor_of(q["zero_points"]), q["axis"])
            else:
                raise Error(f"ckptfs: {key}: a {entry['dtype']} tensor of a quantization scheme "
                            f"this package does not know ({scheme or '?'}): its tensor.pt holds "
                            "it", status=5)
            return _tensors.packed_quantized(stored, entry["dtype"], entry["shape"], params, key)
        except (RuntimeError, KeyError, TypeError, AttributeError) as e:
            raise Error(f"ckptfs: {key}: a {entry['dtype']} tensor torch {torch.__version__} "
                        f"cannot make ({scheme}): {e}", status=5) from None

    def _tensor_of(self, name):
        """ck[name] of any entry, selected or not (a per-channel tensor's scales)."""
        entry = self._all.get(name)
        if entry is None or entry["kind"] != "tensor":
            raise KeyNotFound(f"ckptfs: {name}: no such tensor in {self.index.get('source')}")
        return _tensors.to_torch(self._array(name, entry), entry["dtype"], name)

    def _read_into(self, key, entry, destination):
        """Fills `destination` (a CPU, C-contiguous torch tensor of the served dtype and shape)
        with the tensor's bytes, read straight into its memory: from the file on the fast path,
        else from tensor.npy when it holds the bytes in this machine's order. False (nothing
        read) when neither applies: the caller then copies ck[key] in."""
        nbytes = entry["nbytes"]
        if not nbytes:
            return True
        buffer = (ctypes.c_char * nbytes).from_address(destination.data_ptr())
        local = self._local_range(entry)
        if local is not None:
            f, offset, _ = local
            if f.pread_into(buffer, offset):
                self._taken[key] = FILE
                return True
        path = os.path.join(self._dir(entry), "tensor.npy")
        try:
            with open(path, "rb") as f:
                shape, fortran, dtype = _read_header(f)
                if fortran or not dtype.isnative or dtype.itemsize * int(np.prod(shape)) != nbytes:
                    return False
                if not _readinto_all(f, memoryview(buffer).cast("B")):
                    raise Error(f"ckptfs: {path}: shorter than its header says", errno=errnos.EIO)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise _read_error(path, e) from None
        self._taken[key] = MOUNT
        return True


def _close(mount, files):
    if files is not None:
        files.close()
    if mount is not None:
        mount.close()


class Slice:
    """ckptfs.Slice -- one tensor of a Checkpoint, read by rows when indexed.

    SYNOPSIS
        s = ck.get_slice(key)
        s[0:128]  s[5]  s[:, 10:20]  s[...]  s.readinto(buffer, start)
        s.get_shape()  s.get_dtype()  s.path

    DESCRIPTION
        The first index (an int, or a slice of any step) selects the rows read, with one pread
        of their bytes: of the checkpoint's file itself on the fast path (s.path "file"; the
        file checked when get_slice was called), else of the mount's tensor.npy; the rest of
        the index (and any fancy index, which reads every row) applies in memory. A 0-d tensor
        is read whole. Each result is an array or tensor of its own (a copy: no mapping of the
        file stays, and nothing read is kept).
    """

    def __init__(self, checkpoint, key, entry, as_numpy):
        self.key = key
        self.shape = tuple(entry["shape"])
        self.dtype = entry["dtype"]
        self._as_numpy = as_numpy
        self._checkpoint = checkpoint
        self._fd = None
        self._row_bytes = None
        self._tail = self.shape[1:]
        self._rows_in_all = self.shape[0] if self.shape else 1  # (a 0-d tensor: one row)
        # torch.from_numpy gives the dtype itself (no view of the bits needed): the plain ones.
        self._direct = not as_numpy and self.dtype in _tensors.FROM_NUMPY
        local = checkpoint._local_range(entry)
        self._fast = False  # whether __getitem__'s shortest way may be taken: set by _ready()
        # torch.from_numpy where it gives the tensor itself (a plain dtype in this byte order).
        self._from_numpy = None
        if local is not None:
            f, self._data_offset, self._npy_dtype = local
            self._file_path = f.path
            self._fd = os.dup(f.fd)  # (stays valid while the Slice lives, whatever closes)
            weakref.finalize(self, os.close, self._fd)
            self.path = FILE
        else:
            self._file_path = os.path.join(checkpoint._dir(entry), "tensor.npy")
            self._data_offset = None
            self._npy_dtype = None
            self.path = MOUNT
        checkpoint._taken[key] = self.path

    def get_shape(self):
        """The tensor's shape, a list (as safetensors' get_shape)."""
        return list(self.shape)

    def get_dtype(self):
        """The tensor's dtype as torch names it ("float32", "bfloat16"...)."""
        return self.dtype

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, index):
        if self._fast and type(index) is slice and index.step is None \
                and not self._checkpoint.closed:
            # The common case, rows a:b read one call at a time (random rows, say), its shortest
            # way: the array and one pread, nothing else (a short read falls to _rows, which
            # finishes it).
            start, stop, _ = index.indices(self._rows_in_all)
            if stop < start:
                stop = start
            array = np.empty((stop - start, *self._tail), self._npy_dtype)
            try:
                done = os.preadv(self._fd, [array], self._data_offset + start * self._row_bytes)
            except OSError as e:
                raise _read_error(self._file_path, e) from None
            if done != array.nbytes:
                array = self._rows(start, stop)
            if self._as_numpy:
                return array
            if self._from_numpy is not None:
                return self._from_numpy(array)
            return self._result(array)
        rows = self.shape[0] if self.shape else None
        if type(index) is slice and index.step is None and rows is not None:
            start, stop, _ = index.indices(rows)  # rows a:b, the file not opened yet
            return self._result(self._rows(start, max(start, stop)))
        if not isinstance(index, tuple):
            index = (index,)
        first = index[0] if index else slice(None)
        if rows is None or first is Ellipsis or first is None or not isinstance(
                first, (int, np.integer, slice)) or isinstance(first, bool):
            block, rest = self._rows(0, rows or 0, whole=True), index
        elif isinstance(first, slice):
            r = range(*first.indices(rows))
            if len(r) == 0:
                block, rest = self._rows(0, 0), (slice(None),) + index[1:]
            else:
                # The rows from the lowest to the highest selected, then every step-th of them
                # from the first selected, in the slice's direction.
                lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
                block = self._rows(lo, hi)[r[0] - lo::r.step][:len(r)]
                rest = (slice(None),) + index[1:]
        else:
            i = int(first)
            if not -rows <= i < rows:
                raise IndexError(f"index {i} is out of bounds for dimension 0 with size {rows}")
            i %= rows
            block, rest = self._rows(i, i + 1), (0,) + index[1:]
        result = block[rest]
        if not isinstance(result, np.ndarray):
            result = np.asarray(result)
        return self._result(result)

    def _result(self, array):
        return array if self._as_numpy else _tensors.to_torch(array, self.dtype, self.key)

    def _ready(self):
        """What every read needs first: the checkpoint open, the file open, the row size known
        (and with it, __getitem__'s shortest way)."""
        if self._checkpoint.closed:
            self._checkpoint._check_open()
        if self._fd is None:
            self._open()
        if self._row_bytes is None:
            self._row_bytes = self._npy_dtype.itemsize * int(np.prod(self._tail, dtype=np.int64))
            if self._direct and self._npy_dtype.isnative:
                self._from_numpy = _tensors.torch().from_numpy
            self._fast = bool(self.shape)

    def _rows(self, lo, hi, whole=False):
        """Rows [lo, hi) (whole: the tensor) as a numpy array of its own, one pread."""
        self._ready()
        if whole:
            lo, hi = 0, self.shape[0] if self.shape else 1
        out = np.empty(self.shape if whole else (hi - lo,) + self._tail, self._npy_dtype)
        self._pread_exactly(out, out.nbytes, self._data_offset + lo * self._row_bytes)
        return out

    def _pread_exactly(self, buffer, nbytes, offset):
        """Fills the writable C-contiguous `buffer` (nbytes long) with the bytes at `offset`
        of the file read: one pread, then more for what a short read left."""
        try:
            done = os.preadv(self._fd, [buffer], offset)
            if done < nbytes:
                raw = memoryview(buffer).cast("B")
                while done < nbytes:
                    n = os.preadv(self._fd, [raw[done:]], offset + done)
                    if n == 0:
                        raise Error(f"ckptfs: {self._file_path}: shorter than index.json says",
                                    errno=errnos.EIO)
                    done += n
        except OSError as e:
            raise _read_error(self._file_path, e) from None

    def readinto(self, out, start=0):
        """s.readinto(out, start=0) -> int: rows from `start` read into the caller's `out`.

        DESCRIPTION
            For many small reads (random rows, a batch gathered row by row): no array is
            made per read. `out` is a writable C-contiguous buffer of whole rows: a numpy
            array of the tensor's numpy dtype (that of ck.numpy(key); its shape is not looked
            at), a CPU torch tensor of its dtype, or plain bytes (bytearray, memoryview, mmap).
            It is filled with as many rows as it holds, from row `start`, with one pread (of
            the checkpoint's file itself on the fast path, s.path "file"; else of the mount's
            tensor.npy), and the number of rows is returned. A 0-d tensor is one row. A torch
            tensor costs a conversion per call: pass `t.numpy()` (made once) where the dtype
            has one.

        ERRORS
            ValueError for a buffer that is read-only, not contiguous, not a whole number of
            rows, or of another dtype; IndexError for rows past the tensor's; ckptfs.Error as
            s[...].
        """
        if type(out) is np.ndarray and self._row_bytes is not None \
                and out.dtype == self._npy_dtype and not self._checkpoint.closed:
            nbytes = out.nbytes  # (the common case first, as short as it can be)
        else:
            out, nbytes = self._readinto_buffer(out)
        rows, rest = divmod(nbytes, self._row_bytes)
        if rest or not 0 <= start <= self._rows_in_all - rows:
            if rest:
                raise ValueError(f"ckptfs: {self.key}: readinto: {nbytes} bytes are not whole "
                                 f"rows of {self._row_bytes} bytes")
            raise IndexError(f"ckptfs: {self.key}: readinto: rows {start}..{start + rows} of "
                             f"{self._rows_in_all}")
        offset = self._data_offset + start * self._row_bytes
        try:
            if os.preadv(self._fd, [out], offset) != nbytes:
                self._pread_exactly(out, nbytes, offset)  # (again, and what was short)
        except OSError as e:
            raise _read_error(self._file_path, e) from None
        except (BufferError, TypeError) as e:  # read-only, or not contiguous
            raise ValueError(f"ckptfs: {self.key}: readinto: {e}") from None
        return rows

    def _readinto_buffer(self, out):
        """readinto's `out` as a buffer and its size; the file opened and the row size known."""
        self._ready()
        if type(out) is np.ndarray:
            if out.dtype != self._npy_dtype:
                raise ValueError(f"ckptfs: {self.key}: readinto: a {out.dtype} array for a "
                                 f"tensor read as {self._npy_dtype}")
            return out, out.nbytes
        if _tensors.is_torch_tensor(out):
            out = self._torch_buffer(out)
        try:
            return out, memoryview(out).nbytes
        except TypeError:
            raise ValueError(f"ckptfs: {self.key}: readinto: {type(out).__name__} is no buffer "
                             "(a numpy array, torch tensor or bytearray is)") from None

    def _torch_buffer(self, tensor):
        """The bytes of a contiguous CPU torch tensor of this tensor's dtype, as numpy."""
        if tensor.dtype != _tensors.torch_dtype(self.dtype, self.key) \
                or tensor.device.type != "cpu" or not tensor.is_contiguous():
            raise ValueError(f"ckptfs: {self.key}: readinto: a {tensor.dtype} tensor on "
                             f"{tensor.device} (contiguous: {tensor.is_contiguous()}) for a "
                             f"{self.dtype} tensor: it takes a contiguous CPU tensor of its dtype")
        t = _tensors.torch()
        return tensor.reshape(-1).view(t.uint8).numpy()

    def _open(self):
        """The mount's tensor.npy, its header read."""
        try:
            with open(self._file_path, "rb") as f:
                shape, fortran, dtype = _read_header(f)
                self._data_offset = f.tell()
            if fortran or tuple(shape) != self.shape:
                raise Error(f"ckptfs: {self._file_path}: not the tensor index.json describes",
                            errno=errnos.EIO)
            self._npy_dtype = dtype
            fd = os.open(self._file_path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _read_error(self._file_path, e) from None
        self._fd = fd
        weakref.finalize(self, os.close, fd)
