# SPDX-License-Identifier: MIT
"""Stress: many threads read random ranges of random files of several mounts at once, for a
fixed time (CKPTFS_STRESS_SECONDS, 10 by default), and every byte is checked.

The files: every tensor's data and tensor.npy (contiguous, transposed, strided, expanded, tied,
big-endian, legacy, every dtype), of the fixtures and of a larger checkpoint made here. The
expected bytes come from make_fixtures.py's reference reader (zipfile or the legacy stream, a stub
unpickler and an element-by-element gather), never from ckptfs; a tensor.npy is its header (read
once, checked with numpy) then those bytes. Readers drop the kernel's cached pages of a file
now and then (POSIX_FADV_DONTNEED), so that most reads reach the daemon.

Run by ctest as `/usr/bin/python3 -m unittest -v test_stress` (see fixtures.py).
"""

import json
import os
import random
import sys
import threading
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import numpy as np  # noqa: E402
import torch  # noqa: E402

from ckptfs_reference import directory_name  # noqa: E402
from fixtures import fixture_path  # noqa: E402
from test_mount import MountTestCase, reference_tensors  # noqa: E402

SECONDS = float(os.environ.get("CKPTFS_STRESS_SECONDS", "10"))
THREADS = 12
FIXTURES = ["views", "dtypes", "training", "bigendian", "legacy", "new_dtypes", "zip64"]


def make_large(path):
    """A few MiB of contiguous and non-contiguous float32, float16, int64 and bfloat16
    tensors, with shared storages."""
    g = torch.Generator().manual_seed(7)
    m = torch.randn(1024, 768, generator=g)
    h = torch.randn(300, 200, generator=g).half()
    torch.save({"m": m, "m.t": m.t(), "m.step": m[5::7, 3::5], "m.col": m[:, 100],
                "h.t": h.t(), "ids": torch.arange(100_000), "expanded": m[0].expand(64, 768),
                "bf": torch.randn(513, 257, generator=g).to(torch.bfloat16).t()}, path)


def npy_header_ok(header, nbytes, where):
    """The header is a valid .npy 1.0/2.0 header whose data starts right after it."""
    import io
    f = io.BytesIO(header + bytes(nbytes))
    version = np.lib.format.read_magic(f)
    read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
            else np.lib.format.read_array_header_2_0)
    shape, _, dtype = read(f)
    if f.tell() != len(header) or int(np.prod(shape)) * dtype.itemsize != nbytes:
        raise AssertionError(f"{where}: bad npy header")


class StressTests(MountTestCase):
    def test_random_reads_of_many_mounts(self):
        large = self.tmp / "large.pth"
        make_large(large)
        files = []  # (path, expected bytes)
        for checkpoint in [fixture_path(n) for n in FIXTURES] + [large]:
            expected = reference_tensors(checkpoint)
            mnt, proc = self.mount(checkpoint)
            self.addCleanup(self.unmount, mnt, proc)
            for key, want in expected.items():
                d = mnt / directory_name(key)
                if json.loads((d / "meta.json").read_bytes())["broken"] is not None:
                    continue  # a tensor ckptfs marks broken fails its reads: not this test's business
                files.append((d / "data", want))
                size = os.path.getsize(d / "tensor.npy")
                with open(d / "tensor.npy", "rb") as f:
                    header = f.read(size - len(want))
                npy_header_ok(header, len(want), d)
                files.append((d / "tensor.npy", header + want))
        self.assertGreater(len(files), 100)
        self.assertGreater(max(len(w) for _, w in files), 2 << 20)

        fds = [os.open(p, os.O_RDONLY) for p, _ in files]
        self.addCleanup(lambda: [os.close(fd) for fd in fds])
        deadline = time.monotonic() + SECONDS
        failures, reads, nbytes = [], [0] * THREADS, [0] * THREADS

        def reader(n):
            rng = random.Random(1000 + n)
            try:
                while time.monotonic() < deadline and len(failures) < 10:
                    k = rng.randrange(len(files))
                    fd, want = fds[k], files[k][1]
                    if rng.random() < 0.1:
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    offset = rng.randrange(len(want) + 1)
                    length = rng.choice([1, 2, 7, 64, 4095, 4097, 65536, 131072, 1 << 20])
                    got = os.pread(fd, length, offset)
                    if got != want[offset:offset + length]:
                        failures.append(f"{files[k][0]} [{offset}, +{length}): "
                                        f"{len(got)} bytes, wrong")
                    reads[n] += 1
                    nbytes[n] += len(got)
            except Exception as e:  # reported below
                failures.append(f"{type(e).__name__}: {e}")

        threads = [threading.Thread(target=reader, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=SECONDS + 120)
        self.assertFalse(any(t.is_alive() for t in threads), "readers hang")
        self.assertEqual(failures, [])
        print(f"\nstress: {len(files)} files, {THREADS} threads, {SECONDS:g} s: {sum(reads)} "
              f"reads, {sum(nbytes) / 2**20:.0f} MiB, every byte right", file=sys.stderr)
        self.assertGreater(sum(reads), THREADS * 10)
        for fd in fds:
            os.close(fd)
        fds.clear()


if __name__ == "__main__":
    unittest.main()
