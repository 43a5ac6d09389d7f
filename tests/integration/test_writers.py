# SPDX-License-Identifier: MIT
"""Integration tests of the writers (format/pickle_writer, zip_writer, torch_writer), through the
test-only driver tests/tools/writer_tool.cpp:

    CKPTFS_WRITER_TOOL   the driver (default: build/tests/ckptfs_writer_tool)

Oracles: Python's zipfile (which checks every CRC), pickle (loads, and dumps for byte-exact
comparisons), and Debian's torch 1.13: torch.load(f, weights_only=True), and torch.save, whose
files ours must equal byte for byte where the layouts are meant to be the same (torch 1.13 writes
no byteorder record: the tool leaves it out for those comparisons).
"""

import io
import math
import os
import pickle
import pickletools
import struct
import subprocess
import tempfile
import unittest
import warnings
import zipfile
import zlib
import sys
from collections import OrderedDict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures import require  # noqa: E402

require("torch")  # else the module exits 77: skipped, with the reason

import torch  # noqa: E402

warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parents[2]
TOOL = Path(os.environ.get("CKPTFS_WRITER_TOOL",
                           REPO / "build" / "tests" / "ckptfs_writer_tool")).absolute()

# Every dtype torch 1.13 can save, with its name for the tool.
DTYPES_1_13 = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
    "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
SHAPES = [(2, 3), (), (0,), (3, 0), (5, 1, 4), (256,), (70000,)]


def run_tool(*args, stdout=None):
    result = subprocess.run([str(TOOL), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=300)
    if result.returncode != 0:
        raise AssertionError(f"writer_tool {' '.join(map(str, args))}: exit {result.returncode}: "
                             f"{result.stderr.decode(errors='replace')}")
    return result.stdout


def sample(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g) * 100).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -2**31), min(info.max, 2**31 - 1), shape, generator=g,
                         dtype=torch.int64).to(dtype)


def raw(t):
    """A tensor's bytes in C order."""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def data_offsets(path):
    """{record name: absolute payload offset} from the local headers, as torch computes them."""
    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            f.seek(info.header_offset)
            header = f.read(30)
            assert header[:4] == b"PK\x03\x04"
            name_len, extra_len = struct.unpack_from("<HH", header, 26)
            out[info.filename] = info.header_offset + 30 + name_len + extra_len
    return out


class WriterTestCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="ckptfs-writers-")
        self.dir = Path(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def check_zip(self, path):
        """Every CRC right (zipfile checks them), every payload at a multiple of 64."""
        with zipfile.ZipFile(path) as z:
            self.assertIsNone(z.testzip())
        for name, offset in data_offsets(path).items():
            self.assertEqual(offset % 64, 0, name)

    def write_tensor(self, t, name="tensor.pt", *options):
        data = self.dir / "data.bin"
        data.write_bytes(raw(t))
        out = self.dir / name
        shape = ",".join(str(d) for d in t.shape)
        dtype = str(t.dtype).removeprefix("torch.")
        run_tool("tensor", out, dtype, shape, "--data", data, "--prefix", Path(name).stem, *options)
        return out


class TestTensorFiles(WriterTestCase):
    def test_every_dtype_of_torch_1_13_loads_with_weights_only(self):
        for name, dtype in DTYPES_1_13.items():
            for shape in SHAPES:
                with self.subTest(dtype=name, shape=shape):
                    t = sample(dtype, shape)
                    path = self.write_tensor(t)
                    self.check_zip(path)
                    loaded = torch.load(path, weights_only=True)
                    self.assertEqual(loaded.dtype, dtype)
                    self.assertEqual(tuple(loaded.shape), shape)
                    self.assertTrue(loaded.is_contiguous())
                    self.assertEqual(loaded.storage_offset(), 0)
                    self.assertFalse(loaded.requires_grad)
                    self.assertEqual(raw(loaded), raw(t))

    def test_a_large_tensor(self):
        t = sample(torch.float32, (1000, 1537), seed=3)
        path = self.write_tensor(t)
        self.check_zip(path)
        self.assertEqual(raw(torch.load(path, weights_only=True)), raw(t))

    def test_requires_grad_as_saved(self):
        t = sample(torch.float32, (4,))
        loaded = torch.load(self.write_tensor(t, "tensor.pt", "--requires-grad"), weights_only=True)
        self.assertTrue(loaded.requires_grad)
        self.assertEqual(raw(loaded.detach()), raw(t))

    def test_byte_for_byte_what_torch_1_13_saves(self):
        cases = [sample(torch.float32, (2, 3)), sample(torch.float64, ()),
                 sample(torch.int64, (0,)), sample(torch.bool, (7,)),
                 sample(torch.bfloat16, (3, 5)), sample(torch.complex64, (3,)),
                 sample(torch.int8, (256, 1)), sample(torch.uint8, (70000,)),
                 sample(torch.int16, (2, 3, 4, 5)), sample(torch.float16, (3, 0))]
        for i, t in enumerate(cases):
            for requires_grad in (False, True):
                if requires_grad and not t.dtype.is_floating_point:
                    continue
                with self.subTest(case=i, requires_grad=requires_grad):
                    expected = self.dir / "expected" / "tensor.pt"
                    expected.parent.mkdir(exist_ok=True)
                    torch.save(t.clone().requires_grad_(requires_grad), expected)
                    options = ["--no-byteorder"] + (["--requires-grad"] if requires_grad else [])
                    ours = self.write_tensor(t, "tensor.pt", *options)
                    self.assertEqual(ours.read_bytes(), expected.read_bytes())

    def test_the_byteorder_record_of_torch_2_1(self):
        t = sample(torch.float32, (2, 3))
        path = self.write_tensor(t)
        with zipfile.ZipFile(path) as z:
            self.assertEqual(z.namelist(), ["tensor/data.pkl", "tensor/byteorder",
                                            "tensor/data/0", "tensor/version"])
            self.assertEqual(z.read("tensor/byteorder"), b"little")
            self.assertEqual(z.read("tensor/version"), b"3\n")
            ours = {n: z.read(n) for n in ("tensor/data.pkl", "tensor/data/0")}
        expected = self.dir / "expected" / "tensor.pt"
        expected.parent.mkdir()
        torch.save(t, expected)
        with zipfile.ZipFile(expected) as z:
            for name, payload in ours.items():
                self.assertEqual(payload, z.read(name))

    def test_big_endian_bytes_say_so(self):
        t = sample(torch.float32, (4,))
        swapped = t.numpy().byteswap()
        data = self.dir / "data.bin"
        data.write_bytes(swapped.tobytes())
        path = self.dir / "tensor.pt"
        run_tool("tensor", path, "float32", "4", "--data", data, "--big-endian", "--prefix",
                 "tensor")
        self.check_zip(path)
        with zipfile.ZipFile(path) as z:
            self.assertEqual(z.read("tensor/byteorder"), b"big")
        # torch 1.13 ignores the record (torch >= 2.1 swaps): the bytes come as they are.
        self.assertEqual(raw(torch.load(path, weights_only=True)), swapped.tobytes())

    def test_serialization_id(self):
        path = self.write_tensor(sample(torch.int32, (3,)), "tensor.pt", "--serialization-id")
        self.check_zip(path)
        with zipfile.ZipFile(path) as z:
            self.assertEqual(z.namelist()[-1], "tensor/.data/serialization_id")
            ident = z.read("tensor/.data/serialization_id")
        self.assertRegex(ident.decode(), r"^[0-9]{40}$")
        torch.load(path, weights_only=True)

    def test_quantized_tensors_as_torch_saves_them(self):
        x = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
        cases = {
            "per_tensor_quint8": torch.quantize_per_tensor(x, 0.25, 3, torch.quint8),
            "per_tensor_qint8": torch.quantize_per_tensor(x, 0.5, -2, torch.qint8),
            "per_tensor_qint32": torch.quantize_per_tensor(x, 0.125, 7, torch.qint32),
            "per_channel_axis0": torch.quantize_per_channel(
                x, torch.tensor([0.1, 0.2], dtype=torch.float64), torch.tensor([0, 1]), 0,
                torch.qint8),
            "per_channel_axis1": torch.quantize_per_channel(
                x, torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64), torch.tensor([3, 1, 2]), 1,
                torch.quint8),
        }
        for name, q in cases.items():
            with self.subTest(name):
                expected = self.dir / "expected" / "qt.pt"
                expected.parent.mkdir(exist_ok=True)
                torch.save(q, expected)
                data = self.dir / "data.bin"
                data.write_bytes(raw(q.int_repr()))
                options = []
                if q.qscheme() == torch.per_tensor_affine:
                    options = ["--per-tensor", repr(q.q_scale()), q.q_zero_point()]
                else:
                    scales = self.dir / "scales.bin"
                    zero_points = self.dir / "zero_points.bin"
                    scales.write_bytes(raw(q.q_per_channel_scales()))
                    zero_points.write_bytes(raw(q.q_per_channel_zero_points()))
                    options = ["--per-channel", q.q_per_channel_axis(), scales, zero_points]
                ours = self.dir / "qt.pt"
                run_tool("tensor", ours, str(q.dtype).removeprefix("torch."),
                         ",".join(map(str, q.shape)), "--data", data, "--prefix", "qt",
                         "--no-byteorder", *options)
                self.assertEqual(ours.read_bytes(), expected.read_bytes())
                loaded = torch.load(ours)
                self.assertTrue(torch.equal(loaded.int_repr(), q.int_repr()))
                self.assertEqual(loaded.qscheme(), q.qscheme())
                # torch 1.13's weights_only loader has no _rebuild_qtensor (from 2.4 it has).
                with self.assertRaises(Exception):
                    torch.load(ours, weights_only=True)

    def test_new_dtypes_take_rebuild_tensor_v3_which_1_13_refuses(self):
        for name in ("float8_e4m3fn", "uint16", "complex32", "bits8"):
            with self.subTest(name):
                data = self.dir / "data.bin"
                size = {"complex32": 4, "uint16": 2}.get(name, 1)
                data.write_bytes(bytes(range(6 * size)))
                path = self.dir / "tensor.pt"
                run_tool("tensor", path, name, "2,3", "--data", data, "--prefix", "tensor")
                self.check_zip(path)
                with zipfile.ZipFile(path) as z:
                    pkl = z.read("tensor/data.pkl")
                    self.assertEqual(z.read("tensor/data/0"), bytes(range(6 * size)))
                self.assertIn(b"ctorch._utils\n_rebuild_tensor_v3\n", pkl)
                self.assertIn(b"ctorch.storage\nUntypedStorage\n", pkl)
                self.assertIn(f"ctorch\n{name}\n".encode(), pkl)
                with self.assertRaisesRegex(Exception, "Unsupported class"):
                    torch.load(path, weights_only=True)


def fresh(s):
    """A str object of its own (pickle memoizes by identity; CPython caches '' and 1-char str)."""
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")


def tagged(value):
    """A Python value as the tool's tagged JSON (see writer_tool.cpp)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        return {"float": value.hex()}  # exact, and JSON has no inf
    if isinstance(value, int):
        return value if -2**63 <= value < 2**63 else {"int": str(value)}
    if isinstance(value, str):
        return {"str_hex": value.encode("utf-8", "surrogatepass").hex()}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, tuple):
        return {"tuple": [tagged(v) for v in value]}
    if isinstance(value, list):
        return [tagged(v) for v in value]
    kind = "ordered_dict" if isinstance(value, OrderedDict) else "dict"
    return {kind: [[tagged(k), tagged(v)] for k, v in value.items()]}


def pickled_by_tool(value):
    import json
    return run_tool("pickle", json.dumps(tagged(value)))


# Values without two references to one object (those would be memo GETs in pickle.dumps).
VALUES = [
    None, True, False, 0, 255, 256, 65535, 65536, -1, -2**31, 2**31 - 1, 2**31, -2**31 - 1,
    2**63 - 1, -2**63, 2**64, -2**70, 10**200, 0.0, -0.0, 1.5, 1e-300, math.inf, -math.inf,
    fresh("key.weight"), fresh("h\xe9llo \u20ac \U0001f600"), fresh("a\ud800z"),
    fresh("\udcff\udcfe"), b"\x00\x7f\x80\xff", bytes(range(256)),
    (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4, 5),
    [], [7], [fresh(f"k{i}") for i in range(2001)],
    {fresh("epoch"): 7, fresh("lr"): 0.001, fresh("names"): [fresh("ab"), fresh("cd")]},
    {i: {fresh("step"): i} for i in range(1001)},
    OrderedDict([(fresh("ab"), 1), (fresh("cd"), (2, 3))]), OrderedDict(),
    {(1, 2): [None, True], 3: (4.5,)},
    [[[[fresh("deep")]]]],
]


class TestPicklesAndValues(WriterTestCase):
    def test_pickles_are_what_cpython_writes(self):
        for value in VALUES:
            with self.subTest(value=repr(value)[:60]):
                ours = pickled_by_tool(value)
                self.assertEqual(ours, pickle.dumps(value, protocol=2))
                loaded = pickle.loads(ours)
                self.assertEqual(type(loaded), type(value))
                if isinstance(value, float) and value == 0:
                    self.assertEqual(math.copysign(1, loaded), math.copysign(1, value))
                self.assertEqual(loaded, value)

    def test_empty_bytes_differ_on_purpose(self):
        ours = pickled_by_tool(b"")
        self.assertEqual(pickle.loads(ours), b"")
        self.assertIn(b"c_codecs\nencode\n", ours)
        self.assertIn(b"c__builtin__\nbytes\n", pickle.dumps(b"", protocol=2))

    def test_map_pt_is_torch_save_of_the_keys(self):
        keys = [fresh(f"layer{i}.weight") for i in range(1001)] + [
            "", fresh("h\xe9 \u20ac"), fresh("sur\ud800rogate"), fresh("a/b c")]
        path = self.dir / "map.pt"
        run_tool("keys", path, "--prefix", "map", "--no-byteorder",
                 *[k.encode("utf-8", "surrogatepass").hex() for k in keys])
        expected = self.dir / "expected" / "map.pt"
        expected.parent.mkdir()
        torch.save(keys, expected)
        self.assertEqual(path.read_bytes(), expected.read_bytes())
        self.assertEqual(torch.load(path, weights_only=True), keys)

        with_byteorder = self.dir / "map2.pt"
        run_tool("keys", with_byteorder, "--prefix", "map", *[k.encode("utf-8", "surrogatepass").hex()
                                                             for k in keys[:3]])
        self.check_zip(with_byteorder)
        self.assertEqual(torch.load(with_byteorder, weights_only=True), keys[:3])

    def test_value_files_are_torch_save_of_the_value(self):
        import json
        for value in VALUES:
            with self.subTest(value=repr(value)[:60]):
                path = self.dir / "v.pt"
                run_tool("value", path, json.dumps(tagged(value)), "--prefix", "v",
                         "--no-byteorder")
                expected = self.dir / "expected" / "v.pt"
                expected.parent.mkdir(exist_ok=True)
                torch.save(value, expected)
                self.assertEqual(path.read_bytes(), expected.read_bytes())
                self.check_zip(path)
                self.assertEqual(torch.load(path), value)

    def test_which_values_torch_1_13_loads_with_weights_only(self):
        import json
        loads = [None, True, 7, -2**31 - 1, 2**64, fresh("ab"), (1, 2), [fresh("ab")],
                 {fresh("ab"): 1}, {5: [None]}, OrderedDict([(fresh("ab"), 1)])]
        refuses = [1.5, [0.5], b"\x00\x01"]  # BINFLOAT (2.0), _codecs.encode (2.5 or later)
        path = self.dir / "v.pt"
        for value in loads + refuses:
            with self.subTest(value=repr(value)):
                run_tool("value", path, json.dumps(tagged(value)), "--prefix", "v")
                if value in loads:
                    self.assertEqual(torch.load(path, weights_only=True), value)
                else:
                    with self.assertRaises(Exception):
                        torch.load(path, weights_only=True)
                    self.assertEqual(torch.load(path), value)


class TestZip64(WriterTestCase):
    def test_an_archive_past_4_gib_with_a_payload_of_4_gib_and_more(self):
        big = 2**32 + 100  # a hole: the file is sparse, nothing of it is written
        small = torch.arange(1000, dtype=torch.float32)
        small_file = self.dir / "small.bin"
        small_file.write_bytes(raw(small))
        path = self.dir / "sparse.pt"
        run_tool("sparse", path, big, small_file)
        st = path.stat()
        self.assertGreater(st.st_size, big)
        self.assertLess(st.st_blocks * 512, 1 << 20)  # sparse

        with zipfile.ZipFile(path) as z:
            infos = {i.filename: i for i in z.infolist()}
            self.assertEqual(list(infos), ["sparse/data.pkl", "sparse/byteorder",
                                           "sparse/data/0", "sparse/data/1", "sparse/version"])
            self.assertEqual(infos["sparse/data/0"].file_size, big)
            self.assertGreater(infos["sparse/data/1"].header_offset, 2**32)
            # Read through zipfile: the CRC in the central directory is checked.
            self.assertEqual(z.read("sparse/data/1"), raw(small))
            self.assertEqual(z.read("sparse/version"), b"3\n")
            pkl = z.read("sparse/data.pkl")
            big_crc = infos["sparse/data/0"].CRC
        crc = 0
        zeros = bytes(64 << 20)
        left = big
        while left:
            n = min(left, len(zeros))
            crc = zlib.crc32(zeros[:n] if n < len(zeros) else zeros, crc)
            left -= n
        self.assertEqual(big_crc, crc)

        offsets = data_offsets(path)
        for name, offset in offsets.items():
            self.assertEqual(offset % 64, 0, name)
        # Our own reader agrees on every payload offset and size.
        ours = {}
        for line in run_tool("layout", path).decode().splitlines():
            name, offset, size = line.split()
            ours[name] = (int(offset), int(size))
        for name, (offset, size) in ours.items():
            self.assertEqual(offset, offsets[name], name)
            self.assertEqual(size, infos[name].file_size, name)
        # The pickle names both tensors over their storages.
        self.assertIn(b"ctorch\nByteStorage\n", pkl)
        longs = [arg for op, arg, _ in pickletools.genops(pkl) if op.name == "LONG1"]
        self.assertEqual(longs, [big, big])  # the storage's numel and the tensor's size


if __name__ == "__main__":
    unittest.main()
