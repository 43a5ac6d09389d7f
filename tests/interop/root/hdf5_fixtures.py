# SPDX-License-Identifier: MIT
"""HDF5 files and Keras-layout files written by h5py, for test_hdf5 (Debian 12's h5py 3.7, under
/usr/bin/python3) and test_interop_hdf5 (the interop root's h5py). Runs with either.

    write(directory)  writes the files below into `directory`; returns {name: path}

    datasets.h5       h5py's defaults (superblock 0, object headers 1, symbol tables, v1 B-trees):
                      every numeric dtype h5py maps to torch's, both byte orders, bool, complex,
                      scalar, empty and null datasets, compact, contiguous, never-written
                      contiguous and chunked datasets (gzip, shuffle, Fletcher-32, edge chunks,
                      chunks never written), nested groups, a dataset linked twice, a soft link,
                      strings (which ckptfs does not serve)
    latest.h5         the same with libver="latest" (superblock 3, object headers 2, link
                      messages, a group of dense links in a fractal heap, chunk indexes of
                      version 4: single chunk, fixed array, extensible array, v2 B-tree)
    userblock.h5      a 512-byte user block before the superblock
    model.weights.h5  Keras 3's layout (layers/<name>/vars/<i>, a bfloat16 variable as Keras 3
                      writes one: opaque 2-byte elements with the attribute dtype="bfloat16")
    keras2.h5         Keras 2's model.save() layout (model_weights/<layer>/<layer>/kernel:0, the
                      root's keras_version, backend and model_config attributes)
    model.keras       Keras 3's archive: metadata.json, config.json, model.weights.h5 stored
    deflated.keras    the same with its members deflated
"""

import json
import zipfile
from pathlib import Path

import h5py
import numpy as np

# Datasets ckptfs refuses to serve (a broken tensor with the reason) and those that are null.
BROKEN = {"strings/fixed", "strings/variable"}
NULL = {"null"}


def _numeric(g, rng):
    for dtype in ("f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8"):
        for order in "<>":
            data = (rng.standard_normal((3, 4)) * 50).astype(order + dtype)
            g.create_dataset(f"{dtype}{'_be' if order == '>' else ''}", data=data)
    g.create_dataset("bool", data=rng.random(9) > 0.5)
    g.create_dataset("c8", data=(rng.standard_normal(5) + 1j * rng.standard_normal(5))
                     .astype(np.complex64))
    g.create_dataset("c16", data=(rng.standard_normal((2, 3)) + 1j).astype(np.complex128))
    g.create_dataset("scalar", data=np.float64(2.5))
    g.create_dataset("empty", data=np.zeros((0, 3), np.float32))


def _chunked(g, rng):
    data = rng.standard_normal((7, 5)).astype(np.float32)
    g.create_dataset("edges", data=data, chunks=(3, 2))
    g.create_dataset("gzip_shuffle", data=data, chunks=(3, 2), compression="gzip",
                     compression_opts=6, shuffle=True)
    g.create_dataset("fletcher", data=np.arange(60, dtype=">i4").reshape(6, 10), chunks=(4, 4),
                     fletcher32=True, compression="gzip")
    # A large one decoded through the chunk cache: 4 MB in 40 chunks.
    big = rng.standard_normal((1000, 1000)).astype(np.float32)
    big[200:400] = 0
    g.create_dataset("big", data=big, chunks=(100, 250), compression="gzip", shuffle=True)
    # Chunks never written read as the fill value, as h5py reads them.
    part = g.create_dataset("partial", shape=(6, 6), dtype="i2", chunks=(2, 3), fillvalue=-7)
    part[0:2, 0:3] = 5
    part[4:6, 3:6] = 9
    g.create_dataset("unwritten", shape=(4, 3), dtype="f8", fillvalue=1.5)  # contiguous


def _common(f, rng):
    _numeric(f.create_group("numeric"), rng)
    _chunked(f.create_group("chunked"), rng)
    f.create_dataset("null", data=h5py.Empty("f4"))
    s = f.create_group("strings")
    s.create_dataset("fixed", data=np.array([b"ab", b"cd"], dtype="S2"))
    s.create_dataset("variable", data=["x", "yz"], dtype=h5py.string_dtype())
    vars_ = f.create_group("deep/er/vars")
    for i in (10, 2, 1):  # natural order: 1, 2, 10
        vars_.create_dataset(str(i), data=np.full((2,), i, np.int32))
    f["deep/alias"] = f["deep/er/vars/2"]  # a hard link: one tensor, two keys
    f["deep/soft"] = h5py.SoftLink("/deep/er/vars/1")  # not an entry
    # Compact: the data inside the object header.
    space = h5py.h5s.create_simple((4,))
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    compact = h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_I32LE, space, dcpl=dcpl)
    compact.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([3, -1, 4, 1], np.int32))


def _latest_only(f, rng):
    g = f.create_group("dense")  # more links than a compact group keeps: a fractal heap
    for i in range(20):
        g.create_dataset(f"w{i}", data=np.full((2,), i, np.int16))
    data = rng.standard_normal((6, 8)).astype(np.float32)
    idx = f.create_group("index")
    idx.create_dataset("single", data=data, chunks=(6, 8), compression="gzip")
    idx.create_dataset("fixed_array", data=data, chunks=(4, 3), compression="gzip")
    idx.create_dataset("btree2", data=data, chunks=(4, 3), maxshape=(None, None))
    idx.create_dataset("extensible", data=data, chunks=(4, 3), maxshape=(None, 8))


def _keras3(path, rng):
    with h5py.File(path, "w") as f:
        for name, shapes in (("dense", [(4, 3), (3,)]), ("dense_1", [(3, 2), (2,)])):
            vars_ = f.create_group(f"layers/{name}/vars")
            for i, shape in enumerate(shapes):
                vars_.create_dataset(str(i), data=rng.standard_normal(shape).astype(np.float32))
        bf = f.create_group("layers/embedding/vars")
        bits = rng.integers(0, 1 << 16, (5, 2)).astype(np.uint16)
        ds = bf.create_dataset("0", data=bits.view("V2"))
        ds.attrs["dtype"] = "bfloat16"
        opt = f.create_group("optimizer/vars")
        opt.create_dataset("0", data=np.int64(3))
        f.create_group("layers/dropout/vars")  # a layer without weights


def _keras2(path, rng):
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = b"2.15.0"
        f.attrs["backend"] = b"tensorflow"
        f.attrs["model_config"] = json.dumps({"class_name": "Sequential"}).encode()
        w = f.create_group("model_weights")
        w.attrs["layer_names"] = np.array([b"dense"], dtype="S5")
        d = w.create_group("dense/dense")
        d.create_dataset("kernel:0", data=rng.standard_normal((4, 3)).astype(np.float32))
        d.create_dataset("bias:0", data=np.zeros(3, np.float32))


def _keras_archive(path, weights, compression):
    with zipfile.ZipFile(path, "w", compression) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.10.0"}))
        z.writestr("config.json", json.dumps({"class_name": "Sequential", "config": {}}))
        z.write(weights, "model.weights.h5")


def write(directory):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(33)
    out = {}
    for name, libver in (("datasets", "earliest"), ("latest", "latest")):
        path = directory / f"{name}.h5"
        with h5py.File(path, "w", libver=libver) as f:
            _common(f, rng)
            if libver == "latest":
                _latest_only(f, rng)
        out[name] = str(path)
    path = directory / "userblock.h5"
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_dataset("x", data=np.arange(5, dtype=np.float32))
    out["userblock"] = str(path)
    out["keras3"] = str(directory / "model.weights.h5")
    _keras3(out["keras3"], rng)
    out["keras2"] = str(directory / "keras2.h5")
    _keras2(out["keras2"], rng)
    out["keras"] = str(directory / "model.keras")
    _keras_archive(out["keras"], out["keras3"], zipfile.ZIP_STORED)
    out["deflated_keras"] = str(directory / "deflated.keras")
    _keras_archive(out["deflated_keras"], out["keras3"], zipfile.ZIP_DEFLATED)
    return out
