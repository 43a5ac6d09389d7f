# SPDX-License-Identifier: MIT
"""Remote checkpoints against Ceph's RADOS Gateway, a real S3 server (radosgw of the interop
root, standalone on loopback: rgw_server.py). Every test of an S3 server that test_remote runs
on s3rver runs here on the gateway with the POSIX filter (signed and presigned requests,
credentials, ETags and changed objects, ranges, the disk cache). The plain dbstore gateway
answers ranges that do not start at 0 with other bytes of the object, and more bytes than it
declares: no read of it may return a wrong byte (its mounts fail, or its reads fail with EIO).
ctest label `remote`; each gateway starts once for its class (about 2 s).
"""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures import require  # noqa: E402

require("fuse", "torch", "interop")  # else the module exits 77: skipped, with the reason

import test_remote  # noqa: E402  (its classes by module: unittest runs only this module's)
from fixtures import FIXTURES, fixture_path  # noqa: E402
from rgw_server import Rgw  # noqa: E402

BLOCK = test_remote.BLOCK


class RgwS3Tests(test_remote.S3Cases, test_remote.RemoteTestCase):
    """test_remote's S3 tests on the gateway with the POSIX filter."""

    @classmethod
    def make_server(cls):
        return Rgw("models", posix=True)


class PlainDbstoreTests(test_remote.RemoteTestCase):
    """The plain dbstore gateway: a range from byte 0 is answered with the right bytes and more
    after them (its first 1024 bytes, or the whole object, whatever was asked); one from byte
    1 to 1023 with the object's first 1024 bytes; one from byte 1024 or later with the object
    from byte 1024 to its end. Each file is mounted (with and without a disk cache) and, where
    the mount comes up, every tensor read: each read either fails with EIO or gives the bytes
    of the same tensor mounted from the local file. st_dtypes.safetensors (1 MiB, its header in
    the first block) is the one today's main mounted and served wrong bytes of (big.weight);
    layers.pth and training.pth it failed to mount or read right."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.rgw = Rgw("plain", posix=False)
        try:
            cls.rgw.start()
            cls.files = {"layers.pth": cls.root / "layers.pth",
                         "training.pth": fixture_path("training"),
                         "st_dtypes.safetensors": FIXTURES / "st_dtypes.safetensors"}
            for key, path in cls.files.items():
                cls.rgw.put(key, path)
        except BaseException:
            cls.rgw.stop()
            super().tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.rgw.stop()
        super().tearDownClass()

    def test_the_server_answers_ranges_wrongly(self):
        """What makes this server the one to test against (seen with curl, not ckptfs): a range
        not starting at 0 comes with other bytes than the object holds there."""
        data = self.files["layers.pth"].read_bytes()
        status, body = self.rgw.curl("GET", "layers.pth",
                                     extra=("-r", f"{2 * BLOCK}-{2 * BLOCK + 99}"))
        self.assertEqual(status, 206)
        self.assertNotEqual(body[:100], data[2 * BLOCK:2 * BLOCK + 100])

    def test_never_a_wrong_byte(self):
        with test_remote.environment(AWS_ENDPOINT_URL=self.rgw.endpoint,
                                     AWS_ACCESS_KEY_ID=Rgw.ACCESS_KEY,
                                     AWS_SECRET_ACCESS_KEY=Rgw.SECRET_KEY,
                                     AWS_REGION="us-east-1", AWS_SESSION_TOKEN=None,
                                     AWS_ENDPOINT_URL_S3=None, AWS_PROFILE=None):
            for key, local in self.files.items():
                expected = self.local_data(local)
                for cache in (None, self.new_dir("cache")):
                    options = ("-o", "timeout=4") + (("-o", f"cache_dir={cache}") if cache
                                                     else ())
                    with self.subTest(key=key, cache=bool(cache)):
                        self.check_no_wrong_byte(f"s3://plain/{key}", options, expected)

    def local_data(self, local):
        mnt, proc = self.mount(local)
        try:
            return test_remote.read_all(mnt)
        finally:
            self.unmount(mnt, proc)

    def check_no_wrong_byte(self, url, options, expected):
        r = self.ckptfs("inspect", *options, url)
        if r.returncode != 0:
            err = r.stderr.decode()
            self.assertEqual(err.count("\n"), 1, err)
            self.assertTrue(err.startswith(f"ckptfs: {url}: "), err)
        mnt = self.new_dir()
        r = self.ckptfs(*options, url, mnt)
        if r.returncode != 0:
            print(f"\n{url} {' '.join(options)}: not mounted: {r.stderr.decode().strip()}",
                  file=sys.stderr)
            self.assertEqual(r.stderr.decode().count("\n"), 1, r.stderr)
            return
        self.addCleanup(test_remote.force_unmount, mnt)
        read = failed = 0
        try:
            for path, want in expected.items():
                try:
                    got = (mnt / path / "data").read_bytes()
                except OSError:
                    failed += 1
                    continue
                read += 1
                self.assertEqual(got, want, f"{url}: {path}: wrong bytes")
        finally:
            test_remote.fusermount_u(mnt)
        print(f"\n{url} {' '.join(options)}: mounted; {read} tensors right, {failed} EIO",
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
