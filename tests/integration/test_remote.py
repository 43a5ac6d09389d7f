# SPDX-License-Identifier: MIT
"""Remote checkpoints against real servers on loopback, started and stopped here: nginx (HTTP,
and HTTPS with HTTP/2 and a throw-away CA), an S3 API server that checks SigV4 signatures, and
a fault proxy. Every fixture and corpus file mounted by URL gives the tree its local mount
gives, byte for byte; nginx's access log counts the requests and bytes; faults end in EIO
within the timeout, never in a hang or wrong bytes. libcurl is loaded only for a URL, and one
that cannot be loaded or is too old ends a remote mount with one line.

Run by ctest with CKPTFS, CKPTFS_FIXTURES (see fixtures.py) and
    CKPTFS_OLD_CURL_LIBRARY  tests/support/old_curl.cpp built (default: next to CKPTFS, in
                             tests/): a libcurl.so.4 that says it is 7.61.1
"""

import contextlib
import errno
import hashlib
import json
import mmap
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

from fixtures import (CKPTFS, CORPUS, FIXTURE_NAMES, FIXTURES, corpus_files,  # noqa: E402
                      fixture_path, needs_corpus, processes_with_arg, wait_until)
from mount_views import index_entries, tensor_digests  # noqa: E402
from remote_servers import FaultProxy, Nginx, S3Server  # noqa: E402
from test_hostile import SANITIZED  # noqa: E402
from test_mount import MountTestCase, force_unmount, run  # noqa: E402

from ckptfs_mounts import fusermount_u, is_mounted  # noqa: E402 (scripts/, on the path)

BLOCK = 256 * 1024      # remote_block_size
FIRST_WINDOW = 4 * BLOCK  # the first readahead window of a sequential reader
RANGE_CHECK = "bytes=4099-8191"  # asked at every open beside the first request (remote.cpp)
OLD_CURL_LIBRARY = Path(os.environ.get(
    "CKPTFS_OLD_CURL_LIBRARY", CKPTFS.parent / "tests" / "libckptfs_old_curl.so")).absolute()
FAULT_TIMEOUT = 4.0     # -o timeout= of the fault tests, seconds
SLACK = 4.0             # what a failing read may take past its timeout (scheduling, unmount)


def random_bytes(n, seed=1):
    import random
    return random.Random(seed).randbytes(n)


def u8_safetensors(payloads):
    """A safetensors file's bytes: tensors t0, t1, ... of dtype U8, one per bytes of `payloads`,
    in that order."""
    header, at = {}, 0
    for i, p in enumerate(payloads):
        header[f"t{i}"] = {"dtype": "U8", "shape": [len(p)], "data_offsets": [at, at + len(p)]}
        at += len(p)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(payloads)


def make_checkpoint(path, tensors, seed=0):
    """A torch.save state_dict with `tensors` {key: (rows, cols)} of float32, made by torch."""
    code = ("import sys, torch\n"
            "torch.manual_seed(int(sys.argv[2]))\n"
            "spec = eval(sys.argv[3])\n"
            "torch.save({k: torch.randn(*shape) for k, shape in spec.items()}, sys.argv[1])\n")
    subprocess.run(["/usr/bin/python3", "-c", code, str(path), str(seed), repr(tensors)],
                   check=True, timeout=120)
    return path


# A checkpoint with a 4 KiB tensor and eight of 1 MiB: request counts, bytes per tensor, faults.
TENSORS = {"head.bias": (1, 1024), **{f"layer{i}.weight": (256, 1024) for i in range(8)}}


def tree(root):
    """{relative path: sha256 of the bytes} of every file under `root`, and .ckptfs/index.json
    without what says where the bytes are read from: its "source" (the path or URL named on the
    command line), "source_files" and each entry's "file_range" (a local file's identity and
    ranges, null for a URL)."""
    out = {}
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(directory) / name
            data = path.read_bytes()
            rel = str(path.relative_to(root))
            if rel == f"{VIEWS_FOLDER}/index.json":
                doc = json.loads(data)
                doc.pop("source", None)
                doc.pop("source_files", None)
                for entry in doc.get("entries", []):
                    entry.pop("file_range", None)
                data = json.dumps(doc, sort_keys=True).encode()
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def read_all(mnt):
    """Every tensor's data, {key directory: bytes}, in file order (by file_offset)."""
    index = json.loads((views_dir(mnt) / "index.json").read_bytes())
    out = {}
    for e in index["entries"]:
        if e["kind"] == "tensor":
            out[e["path"]] = (Path(mnt) / e["path"] / "data").read_bytes()
    return out


def ranges(requests):
    return [r for r in requests if r["method"] == "GET"]


@contextlib.contextmanager
def environment(**values):
    """os.environ with `values` set (None: unset) for the children started inside."""
    def apply(settings):
        for k, v in settings.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    old = {k: os.environ.get(k) for k in values}
    try:
        apply(values)
        yield
    finally:
        apply(old)


def read_once_answering(read, what, timeout=FAULT_TIMEOUT + SLACK):
    """What `read` returns once it stops failing with an OSError (the server answers again, and
    ckptfs has seen it); fails the test when it still fails after `timeout` seconds."""
    box = {}

    def attempt():
        try:
            box["data"] = read()
            return True
        except OSError as e:
            box["error"] = e
            return False
    if not wait_until(attempt, timeout):
        raise AssertionError(f"{what}: still failing {timeout:g} s after the server was right "
                             f"again: {box.get('error')!r}")
    return box["data"]


def in_thread(function, timeout):
    """Runs `function` in a thread; (finished, result or exception, seconds)."""
    box = {}

    def target():
        try:
            box["result"] = function()
        except BaseException as e:  # noqa: B902 - handed to the test
            box["result"] = e
    start = time.monotonic()
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive(), box.get("result"), time.monotonic() - start


class RemoteTestCase(MountTestCase):
    """A server root with the fixtures, the corpus and generated checkpoints, served by nginx
    for the whole class."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.class_tmp = Path(tempfile.mkdtemp(prefix="ckptfs-remote-test-"))
        cls.root = cls.class_tmp / "root"
        cls.root.mkdir()
        (cls.root / "fixtures").symlink_to(FIXTURES)
        if CORPUS.is_dir():
            (cls.root / "corpus").symlink_to(CORPUS)
        (cls.root / "private").mkdir()
        (cls.root / "forbidden").mkdir()
        make_checkpoint(cls.root / "layers.pth", TENSORS)
        shutil.copy(fixture_path("convnet"), cls.root / "private" / "convnet.pth")
        shutil.copy(fixture_path("convnet"), cls.root / "forbidden" / "convnet.pth")
        cls.nginx = Nginx(cls.root, cls.class_tmp / "nginx")
        try:
            cls.nginx.start()
        except BaseException:
            cls.nginx.stop()
            shutil.rmtree(cls.class_tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.nginx.stop()
        shutil.rmtree(cls.class_tmp, ignore_errors=True)
        super().tearDownClass()

    def ckptfs(self, *args, timeout=60):
        return run([CKPTFS, *args], timeout=timeout)


class HttpTests(RemoteTestCase):
    def assert_same_as_local(self, local, url, *options):
        """The mount of `url` has the tree of the mount of `local`, byte for byte; a URL's
        modes are those of a file downloaded with the usual umask (files 0644, dirs 0755)."""
        lm, lp = self.mount(local)
        rm, rp = self.mount(url, *options)
        try:
            self.assertEqual(tree(rm), tree(lm), f"{url}: tree differs from {local}'s")
            for directory, _, files in os.walk(rm):
                self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o755, directory)
                for name in files:
                    path = os.path.join(directory, name)
                    self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644, path)
        finally:
            self.unmount(lm, lp)
            self.unmount(rm, rp)

    def test_fixtures_same_tree(self):
        """Every fixture: the same tree by URL as from the file, or the same exit status and
        message when the file cannot be mounted."""
        self.check_same_tree([("fixtures", fixture_path(n)) for n in FIXTURE_NAMES])

    @needs_corpus
    def test_corpus_same_tree(self):
        """Every corpus file likewise."""
        self.assertTrue(corpus_files(), f"no checkpoints in {CORPUS}")
        self.check_same_tree([("corpus", p) for p in corpus_files()])

    def check_same_tree(self, files):
        """Each (server folder, local path) of `files`: the same inspect --json and tree by URL
        as from the file, or the same exit status and message."""
        for folder, path in files:
            url = self.nginx.url(f"{folder}/{path.name}")
            with self.subTest(path=path.name):
                local = self.ckptfs("inspect", "--json", path)
                remote = self.ckptfs("inspect", "--json", url)
                self.assertEqual(remote.returncode, local.returncode, remote.stderr)
                if local.returncode != 0:
                    self.assertEqual(remote.stderr.decode().split(": ", 2)[2],
                                     local.stderr.decode().split(": ", 2)[2])
                    continue
                self.assertEqual(json.loads(remote.stdout), json.loads(local.stdout))
                self.assert_same_as_local(path, url)

    def test_safetensors_and_sharded_sets_same_tree(self):
        """A safetensors file, and a sharded set by its index's URL (its shards fetched beside
        it, in parallel): the same inspect --json and the same tree as from the files."""
        from fixtures import SAFETENSORS_FIXTURES, SHARDED_FIXTURES
        cases = [(FIXTURES / f"{n}.safetensors", f"fixtures/{n}.safetensors")
                 for n in SAFETENSORS_FIXTURES]
        for n in SHARDED_FIXTURES:
            index = next((FIXTURES / n).glob("*.index.json"))
            cases.append((index, f"fixtures/{n}/{index.name}"))
        self.check_models_same_tree(cases)
        # A shard missing on the server: one line naming it, the URL's error.
        missing = self.ckptfs("inspect", self.nginx.url("fixtures/sharded_st/nope.index.json"))
        self.assertNotEqual(missing.returncode, 0)
        (self.root / "gone").mkdir()
        (self.root / "gone" / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}}))
        r = self.ckptfs("inspect", self.nginx.url("gone/model.safetensors.index.json"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertRegex(r.stderr.decode(), r'shard "model-00001-of-00002.safetensors" \(named by '
                                            r"the index\): ")

    @needs_corpus
    def test_corpus_formats_same_tree(self):
        """The safetensors files and sharded sets of the corpus likewise."""
        from fixtures import formats_corpus
        cases = []
        for p in formats_corpus():
            if p.is_dir():
                index = next(p.glob("*.index.json"))
                cases.append((index, f"corpus/formats/{p.name}/{index.name}"))
            else:
                cases.append((p, f"corpus/formats/{p.name}"))
        self.assertTrue(cases, f"no safetensors file in {CORPUS / 'formats'}")
        self.check_models_same_tree(cases)

    def check_models_same_tree(self, cases):
        """Each (local path, path on the server) of `cases`: the same inspect --json and tree."""
        for local, rel in cases:
            url = self.nginx.url(rel)
            with self.subTest(rel):
                want = self.ckptfs("inspect", "--json", local)
                got = self.ckptfs("inspect", "--json", url)
                self.assertEqual(got.returncode, 0, got.stderr)
                self.assertEqual(json.loads(got.stdout), json.loads(want.stdout))
                self.assert_same_as_local(local, url)

    def test_direct_io(self):
        """-o direct_io: the same tree as a page-cached mount of the local file, by URL and
        from the file itself, reads of any size and offset right; a private mmap works, and a
        shared one either works or fails with ENODEV, said once in the log."""
        checkpoints = [(fixture_path("convnet"), self.nginx.url("fixtures/convnet.pth")),
                       (self.root / "layers.pth", self.nginx.url("layers.pth")),
                       (FIXTURES / "st_dtypes.safetensors",
                        self.nginx.url("fixtures/st_dtypes.safetensors"))]
        for local, url in checkpoints:
            for source in (url, local):
                with self.subTest(source=str(source)):
                    self.assert_same_as_local(local, source, "-o", "direct_io")
        mnt, proc = self.mount(self.nginx.url("layers.pth"), "-o", "direct_io")
        try:
            expected = self.local_data(self.root / "layers.pth")
            self.assertTrue(expected)
            shared = None
            for key, data in expected.items():
                path = Path(mnt) / key / "data"
                with open(path, "rb", buffering=0) as f:
                    for offset, size in ((0, 1), (3, 4099), (len(data) // 3, 1 << 20),
                                         (max(0, len(data) - 5), 64)):
                        self.assertEqual(os.pread(f.fileno(), size, offset),
                                         data[offset:offset + size], f"{key} at {offset}")
                    if not data:
                        continue  # an empty file cannot be mapped
                    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as m:
                        self.assertEqual(bytes(m), data, f"{key}: private mapping")
                    try:
                        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                            self.assertEqual(bytes(m), data, f"{key}: shared mapping")
                        shared = True
                    except OSError as e:
                        self.assertEqual(e.errno, errno.ENODEV, f"{key}: shared mapping: {e}")
                        shared = False
        finally:
            self.unmount(mnt, proc)
        self.assertIsNotNone(shared, "no tensor with bytes to map")
        log = self.output(proc)
        self.assertEqual(log.count("direct_io: a shared mmap"), 0 if shared else 1, log)

    def local_data(self, local):
        """The data of every tensor of `local`, read from a page-cached mount of the file."""
        mnt, proc = self.mount(local)
        try:
            return read_all(mnt)
        finally:
            self.unmount(mnt, proc)

    def test_option_values(self):
        url = self.nginx.url("fixtures/convnet.pth")
        for bad in ("cache_size=1K", "cache_size=2X", "timeout=0", "timeout=abc",
                    "cache_dir_size=10"):
            with self.subTest(option=bad):
                r = self.ckptfs("inspect", "-o", bad, url)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertEqual(self.ckptfs("-o", bad, url, self.new_dir()).returncode, 1)
        self.assertEqual(self.ckptfs("inspect", "-o", "allow_other", url).returncode, 1)
        r = self.ckptfs("inspect", "-ocache_size=8M,timeout=2.5", "-o", "insecure", url)
        self.assertEqual(r.returncode, 0, r.stderr)
        # The remote options are accepted, and mean nothing, for a local file.
        mnt, proc = self.mount(fixture_path("convnet"), "-o", "timeout=5,cache_size=64M")
        self.unmount(mnt, proc)

    def test_hostile_files_same_verdict(self):
        """Truncated, lying and hostile files: the same exit status and message by URL as from
        the file (or the same listing when they are served)."""
        from make_fixtures import G, R
        from test_hostile import PickleAsm, build_zip, floats, good_checkpoint, v2
        good = good_checkpoint()
        entries = [{"name": "archive/data.pkl", "data": PickleAsm().dump({"w": v2("0", 4, (4,))})},
                   {"name": "archive/data/0", "data": floats(4)},
                   {"name": "archive/version", "data": b"3\n"}]
        files = {f"cut{n}.pth": good[:n] for n in range(0, len(good), max(1, len(good) // 40))}
        files["random.pth"] = bytes(random_bytes(5000))
        files["cd_past_end.pth"] = build_zip(entries, cd_offset=1 << 31, zip64=True)
        files["count.pth"] = build_zip(entries, count=65535)
        files["cd_size.pth"] = build_zip(entries, cd_size=1 << 20)
        lying = [dict(e) for e in entries]
        lying[1]["size"] = 0xFFFFFFFE
        files["record_size.pth"] = build_zip(lying)
        lying = [dict(e) for e in entries]
        lying[1]["header_offset"] = 1 << 30
        files["lho.pth"] = build_zip(lying)
        files["call.pth"] = build_zip([
            {"name": "archive/data.pkl",
             "data": PickleAsm().dump({"x": R(G("os", "system"), ("true",))})},
            {"name": "archive/version", "data": b"3\n"}])
        folder = self.root / "hostile"
        folder.mkdir(exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
        for name in sorted(files):
            with self.subTest(file=name):
                local = self.ckptfs("inspect", "--json", folder / name)
                remote = self.ckptfs("inspect", "--json", self.nginx.url(f"hostile/{name}"))
                self.assertEqual(remote.returncode, local.returncode, remote.stderr)
                self.assertEqual(remote.stdout, local.stdout)
                if local.returncode:
                    self.assertEqual(remote.stderr.decode().split(": ", 2)[2],
                                     local.stderr.decode().split(": ", 2)[2])

    def test_https_http2_and_verification(self):
        local = fixture_path("training")
        url = self.nginx.url("fixtures/training.pth", tls=True)
        mark = self.nginx.mark()
        self.assert_same_as_local(local, url, "-o", f"cacert={self.nginx.ca}")
        self.assertTrue(all(r["protocol"] == "HTTP/2.0" for r in self.nginx.since(mark)),
                        "HTTPS requests were not made over HTTP/2")
        r = self.ckptfs("inspect", url)
        self.assertEqual(r.returncode, 8, r.stderr)
        self.assertIn("TLS", r.stderr.decode())
        self.assertIn("certificate", r.stderr.decode())
        self.assertEqual(self.ckptfs("inspect", "-o", "insecure", url).returncode, 0)

    def test_mount_errors_and_credentials(self):
        """401, 403, 404 and a closed port: one line, the documented exit status, the URL
        without its credentials."""
        n = self.nginx
        secret_query = "X-Amz-Credential=AKIDSECRETKEY&X-Amz-Signature=deadbeefsignature"
        cases = [
            (n.url("missing.pth", userinfo="someone:hunter2pw") + "?" + secret_query, 2,
             "not found (HTTP 404)"),
            (n.url("forbidden/convnet.pth"), 7, "access denied (HTTP 403)"),
            (n.url("private/convnet.pth"), 7, "access denied (HTTP 401)"),
            (n.url("private/convnet.pth", userinfo="reader:wrong-pass"), 7,
             "access denied (HTTP 401)"),
            ("http://127.0.0.1:1/x.pth", 8, "Failed to connect"),
        ]
        for url, code, message in cases:
            with self.subTest(url=url):
                start = time.monotonic()
                r = self.ckptfs(url, self.new_dir(), timeout=60)
                self.assertLess(time.monotonic() - start, 31)
                err = r.stderr.decode()
                self.assertEqual(r.returncode, code, err)
                self.assertIn(message, err)
                self.assertEqual(err.count("\n"), 1, err)
                for secret in ("hunter2pw", "AKIDSECRETKEY", "deadbeefsignature", "wrong-pass"):
                    self.assertNotIn(secret, err)
        # The right password works; neither /proc/mounts nor ps shows it.
        url = n.url("private/convnet.pth", userinfo=f"{Nginx.USER}:{Nginx.PASSWORD}")
        mnt, proc = self.mount(url + "?token=hunter2pw")
        try:
            lm, lp = self.mount(fixture_path("convnet"))
            self.assertEqual(tree(mnt), tree(lm))
            self.unmount(lm, lp)
            mounts = Path("/proc/mounts").read_text()
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().decode()
            index = json.loads((views_dir(mnt) / "index.json").read_bytes())
            for text in (mounts, cmdline, index["source"]):
                self.assertNotIn(Nginx.PASSWORD, text)
                self.assertNotIn("hunter2pw", text)
            self.assertEqual(index["source"], n.url("private/convnet.pth") + "?...")
        finally:
            self.unmount(mnt, proc)
        self.assertNotIn(Nginx.PASSWORD, self.output(proc))

    def test_requests_per_mount_and_bytes_per_tensor(self):
        """A file within one block mounts in one request and the range check's (4 KiB, at
        once); layers.pth, whatever its number of tensors, in at most 5 (its first block, the
        range check, its zip directory at the end, the rest of its pickle): each record's local
        header is read with the record's bytes, when its tensor is first read. Reading its
        4 KiB tensor fetches one block (two when the record straddles a block boundary); a
        1 MiB tensor, its bytes and one readahead window."""
        n = self.nginx
        mark = n.mark()
        mnt, proc = self.mount(n.url("fixtures/training.pth"))
        got = ranges(n.since(mark))
        self.assertEqual(sorted(r["range"] for r in got),
                         [f"bytes=0-{BLOCK - 1}", RANGE_CHECK], got)
        self.unmount(mnt, proc)

        path = self.root / "layers.pth"
        size = path.stat().st_size
        mark = n.mark()
        mnt, proc = self.mount(n.url("layers.pth"))
        try:
            mount_requests = ranges(n.since(mark))
            print(f"\nlayers.pth ({size} bytes, {len(TENSORS)} tensors): "
                  f"{len(mount_requests)} requests at mount", file=sys.stderr)
            self.assertLessEqual(len(mount_requests), 5, mount_requests)
            index = json.loads((views_dir(mnt) / "index.json").read_bytes())
            by_key = {e["key"]: e for e in index["entries"]}
            for key, limit in (("head.bias", 2 * BLOCK),
                               ("layer5.weight", 2**20 + FIRST_WINDOW + 2 * BLOCK)):
                mark = n.mark()
                data = (mnt / by_key[key]["path"] / "data").read_bytes()
                self.assertEqual(len(data), by_key[key]["nbytes"])
                sent = sum(r["bytes"] for r in ranges(n.since(mark)))
                print(f"{key} ({len(data)} bytes): {sent} bytes fetched", file=sys.stderr)
                self.assertLessEqual(sent, limit)
            self.assertGreater(sent, 2**20 - BLOCK, "layer5.weight came from nowhere")
        finally:
            self.unmount(mnt, proc)

    def test_one_tensor_is_sent_about_once(self):
        """A reader of one tensor is sent that tensor, not the next: readahead stops a little
        past the end of the tensor being read (at most 1.1x its bytes + 1 MiB, the goal of
        issue 32), where it ran on as far as the reader had read. Through a mapping of a whole
        safetensors object (.ckptfs/model.safetensors, as safe_open reads it), and through the
        data file of a safetensors and of a .pth tensor (whose zip records are located only
        when first read)."""
        n = self.nginx
        tensor = 24 * 2**20  # (large enough that a block asked twice under load fits in 1.1x)
        (self.root / "three.safetensors").write_bytes(
            u8_safetensors([bytes([i + 1]) * tensor for i in range(3)]))
        make_checkpoint(self.root / "three.pth", {f"t{i}": (tensor // 4,) for i in range(3)})
        limit = 1.1 * tensor + 2**20
        for name, how in (("three.safetensors", "mapping"), ("three.safetensors", "data file"),
                          ("three.pth", "data file")):
            with self.subTest(name=name, how=how):
                mnt, proc = self.mount(n.url(name))
                try:
                    mark = n.mark()
                    if how == "mapping":
                        with open(views_dir(mnt) / "model.safetensors", "rb") as f, \
                                mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
                            # t1 where the served file's own header says (as safe_open reads)
                            size = int.from_bytes(m[:8], "little")
                            served = json.loads(m[8:8 + size])
                            start = 8 + size + served["t1"]["data_offsets"][0]
                            got = bytes(m[start:start + tensor])
                        self.assertEqual(got, bytes([2]) * tensor)
                    else:
                        got = (mnt / "t1" / "data").read_bytes()
                        self.assertEqual(len(got), tensor)
                    sent = sum(r["bytes"] for r in ranges(n.since(mark)))
                    print(f"\none 24 MiB tensor of {name} through its {how}: {sent} bytes sent",
                          file=sys.stderr)
                    self.assertLessEqual(sent, limit)
                finally:
                    self.unmount(mnt, proc)

    def test_disk_cache_second_mount_reads_nothing_twice(self):
        cache = self.new_dir("cache")
        url = self.nginx.url("layers.pth")
        mnt, proc = self.mount(url, "-o", f"cache_dir={cache}")
        first = read_all(mnt)
        self.unmount(mnt, proc)
        # Two mounts at once on the same cache, reading everything; then nothing came twice.
        mark = self.nginx.mark()
        mounts = [self.mount(url, "-o", f"cache_dir={cache}") for _ in range(2)]
        try:
            results = [None, None]
            threads = [threading.Thread(target=lambda i=i: results.__setitem__(
                i, read_all(mounts[i][0]))) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(results, [first, first])
        finally:
            for mnt, proc in mounts:
                self.unmount(mnt, proc)
        # Only the requests of each mount's open (its first 8 KiB, for the identity, and the
        # range check's bytes) and the one-byte requests that check the identity at opens
        # after a while.
        got = ranges(self.nginx.since(mark))
        self.assertGreaterEqual(len(got), 4)
        self.assertLessEqual({r["range"] for r in got}, {"bytes=0-8191", RANGE_CHECK, "bytes=0-0"},
                             got)
        self.assertLessEqual(sum(r["bytes"] for r in got), len(got) * 8192)
        # A block file changed on disk is a miss, not wrong bytes.
        blocks = sorted(cache.glob("ckptfs-blocks-v1/*/*.blk"))
        self.assertGreater(len(blocks), 8)
        for f in blocks:
            data = bytearray(f.read_bytes())
            data[-1] ^= 0xFF
            f.write_bytes(bytes(data))
        mnt, proc = self.mount(url, "-o", f"cache_dir={cache},cache_dir_size=2M")
        try:
            self.assertEqual(read_all(mnt), first)
        finally:
            self.unmount(mnt, proc)
        total = sum(f.stat().st_size for f in cache.glob("ckptfs-blocks-v1/*/*.blk"))
        self.assertLessEqual(total, 2 << 20, "cache_dir_size not kept")

    def test_memory_bound(self):
        """cache_size bounds the daemon's memory while it reads more than that."""
        mnt, proc = self.mount(self.nginx.url("layers.pth"), "-o", "cache_size=4M")
        try:
            for _ in range(3):
                read_all(mnt)
                for e in json.loads((views_dir(mnt) / "index.json").read_bytes())["entries"]:
                    # Out of the kernel's page cache, so that the next pass asks the daemon.
                    fd = os.open(mnt / e["path"] / "data", os.O_RDONLY)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            hwm = int(status.split("VmHWM:")[1].split()[0]) * 1024
            print(f"\nVmHWM with cache_size=4M after reading 8 MiB 3 times: {hwm >> 20} MiB",
                  file=sys.stderr)
            # ASan's shadow memory and quarantine of freed memory come on top.
            self.assertLess(hwm, (48 << 20) * (3 if SANITIZED else 1))
        finally:
            self.unmount(mnt, proc)


def mapped_libcurl(pid):
    """The files named libcurl* that process `pid` maps."""
    files = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5]).name.startswith("libcurl"):
            files.add(fields[5])
    return sorted(files)


class PathOptionTests(RemoteTestCase):
    def test_every_path_option_of_help_is_made_absolute(self):
        """Every -o option that --help shows with a FILE or DIR value, given as a relative path
        to a daemon (which changes to "/" once mounted), names that path in the directory ckptfs
        was started in: cacert=ca.pem verifies the HTTPS reads made after the mount,
        cache_dir=crel keeps the blocks in ./crel. A path option added to --help needs its
        check here."""
        help_text = run([CKPTFS, "--help"]).stdout.decode()
        found = set(re.findall(r"\b([a-z_]+)=(?:FILE|DIR)\b", help_text))
        checks = {"cacert": self.check_cacert, "cache_dir": self.check_cache_dir,
                  "log": self.check_log}
        self.assertEqual(found, set(checks), "a path option of --help has no check here")
        for name in sorted(found):
            with self.subTest(option=name):
                checks[name]()

    def daemon(self, url, option, work):
        """ckptfs -o OPTION URL mnt started in `work`, as a daemon; the tensors it reads."""
        (work / "mnt").mkdir()
        self.addCleanup(force_unmount, work / "mnt")
        r = run([CKPTFS, "-o", option, url, "mnt"], cwd=work)
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            return tensor_digests(work / "mnt")
        finally:
            self.assertEqual(fusermount_u(work / "mnt").returncode, 0)
            self.assertTrue(wait_until(lambda: not processes_with_arg("mnt"), 10))

    def want(self, path):
        mnt, proc = self.mount(path)
        try:
            return tensor_digests(mnt)
        finally:
            self.unmount(mnt, proc)

    def check_cacert(self):
        work = self.new_dir("work")
        shutil.copy(self.nginx.ca, work / "ca.pem")
        got = self.daemon(self.nginx.url("layers.pth", tls=True), "cacert=ca.pem", work)
        self.assertEqual(got, self.want(self.root / "layers.pth"))

    def check_log(self):
        """log=rel.log: the daemon's log lines land in ./rel.log (a read of a checkpoint that
        shrank after the mount fails, and is logged)."""
        work = self.new_dir("work")
        shutil.copy(self.root / "layers.pth", work / "layers.pth")
        (work / "mnt").mkdir()
        self.addCleanup(force_unmount, work / "mnt")
        r = run([CKPTFS, "-o", "log=rel.log", "layers.pth", "mnt"], cwd=work)
        self.assertEqual((r.returncode, r.stderr), (0, b""))
        os.truncate(work / "layers.pth", 100)
        key = next(p for p in (work / "mnt").iterdir() if (p / "data").is_file())
        with self.assertRaises(OSError):
            (key / "data").read_bytes()
        self.assertEqual(fusermount_u(work / "mnt").returncode, 0)
        self.assertIn("changed while mounted", (work / "rel.log").read_text())

    def check_cache_dir(self):
        work = self.new_dir("work")
        got = self.daemon(self.nginx.url("layers.pth"), "cache_dir=crel", work)
        self.assertEqual(got, self.want(self.root / "layers.pth"))
        self.assertGreater(len(list((work / "crel").glob("ckptfs-blocks-v1/*/*.blk"))), 8)


class LibcurlTests(RemoteTestCase):
    def test_only_a_remote_mount_maps_libcurl(self):
        """A local mount's daemon, after serving reads, maps no libcurl; the remote mount of the
        same file maps libcurl.so.4 and gives the same tree."""
        mnt, proc = self.mount(fixture_path("training"))
        try:
            local_tree = tree(mnt)
            self.assertEqual(mapped_libcurl(proc.pid), [])
        finally:
            self.unmount(mnt, proc)
        mnt, proc = self.mount(self.nginx.url("fixtures/training.pth"))
        try:
            self.assertEqual(tree(mnt), local_tree)
            mapped = mapped_libcurl(proc.pid)
            self.assertTrue(any(Path(f).name.startswith("libcurl.so.4") for f in mapped), mapped)
        finally:
            self.unmount(mnt, proc)

    def test_libcurl_too_old_or_unloadable(self):
        """With a libcurl.so.4 that is too old, or not a library, first in the library path: a
        remote inspect or mount fails with one line naming the URL and the reason, status 2,
        nothing mounted; a local file still mounts and reads."""
        if not OLD_CURL_LIBRARY.is_file():
            self.fail(f"missing {OLD_CURL_LIBRARY} (set CKPTFS_OLD_CURL_LIBRARY)")
        url = self.nginx.url("fixtures/convnet.pth")
        old = self.new_dir("old-curl")
        shutil.copy(OLD_CURL_LIBRARY, old / "libcurl.so.4")
        broken = self.new_dir("broken-curl")
        (broken / "libcurl.so.4").write_bytes(b"not a shared library\n" * 100)
        cases = [(old, 'it is "7.61.1"'), (broken, "libcurl.so.4: ")]
        for folder, reason in cases:
            env = {**os.environ, "LD_LIBRARY_PATH": str(folder)}
            with self.subTest(library=folder.name):
                prefix = f"ckptfs: {url}: remote checkpoints need libcurl 7.85.0 or newer "
                mnt = self.new_dir()
                for args in (["inspect", url], [url, mnt]):
                    r = run([CKPTFS, *args], env=env)
                    err = r.stderr.decode()
                    self.assertEqual(r.returncode, 2, err)
                    self.assertTrue(err.startswith(prefix + "(libcurl.so.4): "), err)
                    self.assertIn(reason, err)
                    self.assertEqual(err.count("\n"), 1, err)
                self.assertEqual(os.listdir(mnt), [])
                local, proc = self.mount(fixture_path("convnet"), env=env)
                try:
                    self.assertEqual(mapped_libcurl(proc.pid), [])
                    self.assertGreater(len(read_all(local)), 0)
                finally:
                    self.unmount(local, proc)
        # The same commands with the system's libcurl work.
        self.assertEqual(run([CKPTFS, "inspect", url]).returncode, 0)


class S3Cases:
    """The tests of an S3 server, run against each server a subclass starts (make_server(): the
    s3rver fork here; Ceph's RGW in test_rgw.py): signed and presigned requests, credentials,
    ETags and changed objects, ranges, the disk cache. A RemoteTestCase mixin; the server holds
    the fixtures and layers.pth under ckpt/ in bucket "models"."""

    @classmethod
    def make_server(cls):
        raise NotImplementedError

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.s3 = cls.make_server()
        try:
            cls.s3.start()
            # Trust the server only once it is seen to refuse a wrong secret.
            for name in ("convnet", "training", "legacy", "zip64"):
                cls.s3.put(f"ckpt/{name}.pth", fixture_path(name))
            cls.s3.put("ckpt/layers.pth", cls.root / "layers.pth")
            status, body = cls.s3.curl("GET", "ckpt/convnet.pth", secret="not-the-secret")
            if status != 403 or b"SignatureDoesNotMatch" not in body:
                raise AssertionError(f"the S3 server accepted a wrong secret: HTTP {status}")
            status, _ = cls.s3.curl("GET", "ckpt/convnet.pth")
            if status != 200:
                raise AssertionError(f"the S3 server refused the right secret: HTTP {status}")
        except BaseException:
            cls.s3.stop()
            super().tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.s3.stop()
        super().tearDownClass()

    def env(self, **overrides):
        values = dict(AWS_ENDPOINT_URL=self.s3.endpoint, AWS_ACCESS_KEY_ID=self.s3.ACCESS_KEY,
                      AWS_SECRET_ACCESS_KEY=self.s3.SECRET_KEY, AWS_REGION="us-east-1",
                      AWS_SESSION_TOKEN=None, AWS_ENDPOINT_URL_S3=None, AWS_DEFAULT_REGION=None,
                      AWS_PROFILE=None, AWS_SHARED_CREDENTIALS_FILE=None, AWS_CONFIG_FILE=None)
        values.update(overrides)
        return environment(**values)

    def test_signed_mounts_same_tree(self):
        for name in ("convnet", "training", "legacy", "zip64", "layers"):
            local = self.root / "layers.pth" if name == "layers" else fixture_path(name)
            with self.subTest(name=name):
                with self.env():
                    rm, rp = self.mount(f"s3://models/ckpt/{name}.pth")
                    r = self.ckptfs("inspect", "--json", f"s3://models/ckpt/{name}.pth")
                lm, lp = self.mount(local)
                try:
                    self.assertEqual(tree(rm), tree(lm))
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertEqual(json.loads(r.stdout),
                                     json.loads(self.ckptfs("inspect", "--json", local).stdout))
                    index = json.loads((views_dir(rm) / "index.json").read_bytes())
                    self.assertEqual(index["source"], f"s3://models/ckpt/{name}.pth")
                finally:
                    self.unmount(rm, rp)
                    self.unmount(lm, lp)

    def test_disk_cache(self):
        """The object mounts and reads right with and without -o cache_dir=, and again from the
        cache. (s3rver answers a range from byte 0, the first request of a mount, with the
        whole object: 206, bytes 0-N/N+1; its first bytes are the ones asked.)"""
        lm, lp = self.mount(self.root / "layers.pth")
        try:
            expected = tree(lm)
        finally:
            self.unmount(lm, lp)
        cache = self.new_dir("cache")
        for options in ((), ("-o", f"cache_dir={cache}"), ("-o", f"cache_dir={cache}")):
            with self.subTest(options=options), self.env():
                rm, rp = self.mount("s3://models/ckpt/layers.pth", *options)
                try:
                    self.assertEqual(tree(rm), expected)
                finally:
                    self.unmount(rm, rp)
        self.assertGreater(len(list(cache.glob("ckptfs-blocks-v1/*/*.blk"))), 8)

    def test_shared_credentials_file(self):
        creds = self.tmp / "credentials"
        creds.write_text(f"[default]\naws_access_key_id = nobody\naws_secret_access_key = x\n"
                         f"[test]\naws_access_key_id = {self.s3.ACCESS_KEY}\n"
                         f"aws_secret_access_key = {self.s3.SECRET_KEY}\n")
        with self.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, AWS_PROFILE="test",
                      AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(creds) + ".no"):
            r = self.ckptfs("inspect", "s3://models/ckpt/convnet.pth")
        self.assertEqual(r.returncode, 0, r.stderr)
        with self.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None, AWS_PROFILE="default",
                      AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(creds) + ".no"):
            r = self.ckptfs("inspect", "s3://models/ckpt/convnet.pth")
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertIn("InvalidAccessKeyId", r.stderr.decode())

    def test_presigned_url(self):
        """A presigned URL is plain HTTP(S): its query goes to the server as it is, and is never
        shown. The server refuses it once its signature is changed."""
        url = self.s3.presign("ckpt/training.pth")
        signature = url.rsplit("X-Amz-Signature=", 1)[1]
        with self.env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None):
            rm, rp = self.mount(url)
            lm, lp = self.mount(fixture_path("training"))
            try:
                self.assertEqual(tree(rm), tree(lm))
                for text in (Path("/proc/mounts").read_text(),
                             Path(f"/proc/{rp.pid}/cmdline").read_bytes().decode(),
                             (views_dir(rm) / "index.json").read_text()):
                    self.assertNotIn(signature, text)
                    self.assertNotIn("X-Amz-Credential", text)
            finally:
                self.unmount(rm, rp)
                self.unmount(lm, lp)
            bad = url[:-4] + ("0000" if not url.endswith("0000") else "1111")
            r = self.ckptfs("inspect", bad)
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertIn("SignatureDoesNotMatch", r.stderr.decode())
        self.assertNotIn(signature[:-4], r.stderr.decode())

    def test_session_token_is_signed_and_never_shown(self):
        with self.env(AWS_SESSION_TOKEN="FQoGZXIvYXdzSESSIONTOKEN"):
            r = self.ckptfs("inspect", "s3://models/ckpt/convnet.pth")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(b"SESSIONTOKEN", r.stdout + r.stderr)

    def test_wrong_secret_missing_key_and_half_credentials(self):
        with self.env(AWS_SECRET_ACCESS_KEY="wrong-secret-value"):
            r = self.ckptfs("s3://models/ckpt/convnet.pth", self.new_dir())
        err = r.stderr.decode()
        self.assertEqual(r.returncode, 7, err)
        self.assertIn("access denied (HTTP 403)", err)
        self.assertIn("SignatureDoesNotMatch", err)
        self.assertIn("s3://models/ckpt/convnet.pth", err)
        self.assertNotIn("wrong-secret-value", err)
        with self.env():
            r = self.ckptfs("inspect", "s3://models/ckpt/nothere.pth")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("NoSuchKey", r.stderr.decode())
        with self.env(AWS_SECRET_ACCESS_KEY=None):
            r = self.ckptfs("inspect", "s3://models/ckpt/convnet.pth")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not",
                      r.stderr.decode())

    def test_object_replaced_or_deleted_while_mounted(self):
        """The object's ETag is pinned at mount: once it is put again with other bytes of the
        same size, or deleted, every read fails with EIO, said once in the log."""
        other = self.tmp / "other.pth"
        data = bytearray((self.root / "layers.pth").read_bytes())
        data[len(data) // 2] ^= 0xFF  # a byte of a tensor's: the same size, another ETag
        other.write_bytes(bytes(data))
        for change in ("replaced", "deleted"):
            with self.subTest(change=change), self.env():
                self.s3.put("ckpt/changing.pth", self.root / "layers.pth")
                mnt, proc = self.mount("s3://models/ckpt/changing.pth", "-o", "timeout=4")
                try:
                    index = index_entries(mnt)
                    first = mnt / index["layer0.weight"]["path"] / "data"
                    self.assertEqual(len(first.read_bytes()), 2**20)
                    if change == "replaced":
                        self.s3.put("ckpt/changing.pth", other)
                    else:
                        self.s3.delete("ckpt/changing.pth")
                    with self.assertRaises(OSError) as caught:
                        (mnt / index["layer7.weight"]["path"] / "data").read_bytes()
                    self.assertEqual(caught.exception.errno, errno.EIO)
                finally:
                    self.unmount(mnt, proc)
                self.assertEqual(self.output(proc).count("changed while mounted"), 1,
                                 self.output(proc))


class S3Tests(S3Cases, RemoteTestCase):
    """Against the s3rver fork."""

    @classmethod
    def make_server(cls):
        return S3Server(cls.class_tmp / "s3", "models")


class FaultTests(RemoteTestCase):
    """Through a fault proxy in front of nginx, with -o timeout=4."""

    def setUp(self):
        super().setUp()
        self.proxy = FaultProxy(self.nginx.port).start()
        self.addCleanup(self.proxy.stop)

    def mount_layers(self, url=None):
        mnt, proc = self.mount(url or self.proxy.url("layers.pth"),
                               "-o", f"timeout={FAULT_TIMEOUT:g}")
        index = json.loads((views_dir(mnt) / "index.json").read_bytes())
        self.index = {e["key"]: e for e in index["entries"]}
        return mnt, proc

    def data(self, mnt, key):
        return (mnt / self.index[key]["path"] / "data").read_bytes()

    def read_again(self, mnt, key):
        """`key`'s bytes once the server is right again: a read that finds the server taken as
        failing fails at once and has it asked again in the background, with retries; reads get
        bytes again as soon as that request does."""
        return read_once_answering(lambda: self.data(mnt, key), key)

    def expected(self, mnt, key):
        meta = json.loads((mnt / self.index[key]["path"] / "meta.json").read_bytes())
        with open(self.root / "layers.pth", "rb") as f:
            f.seek(meta["file_offset"])
            return hashlib.sha256(f.read(meta["nbytes"])).hexdigest()

    def read_through_fault(self, fault, faults_left):
        """A fresh mount (so that layer4's bytes are not cached), then `fault` on the next
        `faults_left` responses (None: all) while layer4 is read. (finished, bytes or the
        exception, seconds, requests the proxy saw during the read)."""
        mnt, proc = self.mount_layers()
        try:
            expected = self.expected(mnt, "layer4.weight")
            served = self.proxy.served
            self.proxy.faults_left, self.proxy.mode = faults_left, fault
            done, result, seconds = in_thread(lambda: self.data(mnt, "layer4.weight"),
                                              FAULT_TIMEOUT + SLACK)
            self.proxy.mode = "pass"
            self.assertTrue(done, f"{fault}: the read hung")
            requests = self.proxy.served - served
            if isinstance(result, bytes):
                self.assertEqual(hashlib.sha256(result).hexdigest(), expected,
                                 f"{fault}: wrong bytes")
            # Once the server is right again the same tensor reads, whatever happened (a read
            # may first join a request sent before the fault ended, and fail with it).
            self.assertEqual(hashlib.sha256(self.read_again(mnt, "layer4.weight")).hexdigest(),
                             expected)
            return result, seconds, requests
        finally:
            self.proxy.mode = "pass"
            self.unmount(mnt, proc)

    def test_transient_faults_are_retried(self):
        for fault in ("reset", "reset_mid", "truncate", "503", "429"):
            with self.subTest(fault=fault):
                result, seconds, requests = self.read_through_fault(fault, 1)
                self.assertIsInstance(result, bytes, f"{fault}: {result!r}"[:300])
                self.assertGreaterEqual(requests, 2, f"{fault}: no retry")

    def test_persistent_faults_give_eio_within_the_timeout(self):
        for fault in os.environ.get("FAULTS", "reset 503 stall truncate ignore_range").split():
            with self.subTest(fault=fault):
                result, seconds, requests = self.read_through_fault(fault, None)
                self.assertIsInstance(result, OSError, f"{fault}: {type(result)}")
                self.assertEqual(result.errno, errno.EIO)
                self.assertLess(seconds, FAULT_TIMEOUT + SLACK)

    def test_protocol_error_once_is_retried_on_a_fresh_connection(self):
        """A server that once breaks an answer's framing (bytes past its end, at once or a
        moment later; fewer than it declared; a Content-Range other than asked), at mount or
        while a tensor is read: the answer is discarded with its connection and asked again on
        a fresh one (more than one request), the mount comes up and every byte is right."""
        expected = self.expected_tensors()
        for fault in ("surplus", "surplus_late", "truncate", "wrong_range"):
            with self.subTest(fault=fault, at="mount"):
                served = self.proxy.served
                self.proxy.faults_left, self.proxy.mode = 1, fault
                mnt, proc = self.mount_layers()
                try:
                    self.assertEqual(self.tensor_digests(mnt), expected)
                finally:
                    self.proxy.mode = "pass"
                    self.unmount(mnt, proc)
                self.assertGreater(self.proxy.served - served, 2, f"{fault}: nothing asked again")
            with self.subTest(fault=fault, at="read"):
                result, seconds, requests = self.read_through_fault(fault, 1)
                self.assertIsInstance(result, bytes, f"{fault}: {result!r}"[:300])
                # (Late surplus spoils the connection's next answer, which may come later.)
                if fault != "surplus_late":
                    self.assertGreaterEqual(requests, 2, f"{fault}: nothing asked again")

    def test_protocol_errors_always_never_a_wrong_byte(self):
        """A server that breaks the framing of every answer. Bytes past the answer's end at once,
        or a Content-Range other than asked: the mount fails with one line saying so, status 2;
        from the start of reads, every read fails with EIO after a few answers (not the
        timeout), the reason in the log. Bytes past the end that come a moment later spoil the
        next answer on that connection, never the bytes taken: every byte is right. A server
        whose ranges not starting at 0 hold the bytes of another offset (framing right) is
        refused at mount by the range check (status 2)."""
        expected = self.expected_tensors()
        messages = {"surplus": "the server sent more bytes than its answer declared",
                    "wrong_range": "the server answered bytes 1-262144 to a request for 0-262143",
                    "wrong_offset": "does not serve ranges that start elsewhere than at 0 right"}
        for fault, message in messages.items():
            with self.subTest(fault=fault, at="mount"):
                self.proxy.faults_left, self.proxy.mode = None, fault
                try:
                    r = self.ckptfs("-o", f"timeout={FAULT_TIMEOUT:g}",
                                    self.proxy.url("layers.pth"), self.new_dir())
                finally:
                    self.proxy.mode = "pass"
                err = r.stderr.decode()
                self.assertEqual(r.returncode, 2, err)
                self.assertEqual(err.count("\n"), 1, err)
                self.assertIn(message, err)
        for fault in ("surplus", "wrong_range"):
            with self.subTest(fault=fault, at="read"):
                mnt, proc = self.mount_layers()
                try:
                    self.proxy.faults_left, self.proxy.mode = None, fault
                    done, result, seconds = in_thread(lambda: self.data(mnt, "layer4.weight"),
                                                      FAULT_TIMEOUT + SLACK)
                    self.proxy.mode = "pass"
                    self.assertTrue(done, f"{fault}: the read hung")
                    self.assertIsInstance(result, OSError, f"{fault}: {result!r}"[:300])
                    self.assertEqual(result.errno, errno.EIO)
                    self.assertLess(seconds, FAULT_TIMEOUT, f"{fault}: waited for the timeout")
                finally:
                    self.proxy.mode = "pass"
                    self.unmount(mnt, proc)
                self.assertIn("(3 answers, each on a fresh connection after the first)",
                              self.output(proc))
        with self.subTest(fault="surplus_late"):
            self.proxy.faults_left, self.proxy.mode = None, "surplus_late"
            try:
                mnt, proc = self.mount_layers()
                try:
                    self.assertEqual(self.tensor_digests(mnt), expected)
                finally:
                    self.unmount(mnt, proc)
            finally:
                self.proxy.mode = "pass"

    def expected_tensors(self):
        """{key: sha256} of layers.pth's tensors, from a mount of the file."""
        mnt, proc = self.mount(self.root / "layers.pth")
        try:
            return self.tensor_digests(mnt)
        finally:
            self.unmount(mnt, proc)

    @staticmethod
    def tensor_digests(mnt):
        return {key: hashlib.sha256(data).hexdigest() for key, data in read_all(mnt).items()}

    def test_answers_other_than_the_range_asked_one_rule_with_or_without_cache(self):
        """One rule for an answer that is not the range asked, with or without -o cache_dir=
        (whose first request asks one byte instead of a block): an answer whose body begins
        with the bytes asked is used, its bytes past them never read; anything else is refused.
        A server answering every range with the bytes from its first to the object's end (as
        s3rver answers "bytes=0-0"): the object mounts and reads right. A server ignoring
        ranges (200, the whole object): an object of one block comes whole in the first answer
        and reads right; a larger one is refused at mount, with the same status and message."""
        small, large = "fixtures/training.pth", "layers.pth"
        expected = {}
        for name in (small, large):
            lm, lp = self.mount(self.root / name)
            try:
                expected[name] = tree(lm)
            finally:
                self.unmount(lm, lp)
        for cache in (None, self.new_dir("cache")):
            options = ("-o", f"cache_dir={cache}") if cache else ()
            for mode, name in (("to_the_end", large), ("to_the_end", small),
                               ("ignore_range", small)):
                with self.subTest(cache=bool(cache), mode=mode, name=name):
                    self.proxy.faults_left, self.proxy.mode = None, mode
                    try:
                        mnt, proc = self.mount(self.proxy.url(name), *options)
                        try:
                            self.assertEqual(tree(mnt), expected[name])
                        finally:
                            self.unmount(mnt, proc)
                    finally:
                        self.proxy.mode = "pass"
            with self.subTest(cache=bool(cache), mode="ignore_range", name=large):
                self.proxy.faults_left, self.proxy.mode = None, "ignore_range"
                try:
                    r = self.ckptfs("-o", "timeout=2", *options, self.proxy.url(large),
                                    self.new_dir())
                finally:
                    self.proxy.mode = "pass"
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertEqual(r.stderr.decode().count("\n"), 1, r.stderr)
                self.assertIn("ignores Range requests (it answered 200 with the whole object",
                              r.stderr.decode())

    def test_faults_at_mount(self):
        for fault, code in (("503", 8), ("ignore_range", 2), ("stall", 8), ("reset", 8),
                            ("truncate", 8)):
            with self.subTest(fault=fault):
                self.proxy.faults_left, self.proxy.mode = None, fault
                start = time.monotonic()
                r = self.ckptfs("-o", "timeout=2", self.proxy.url("layers.pth"), self.new_dir())
                self.proxy.mode = "pass"
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertLess(time.monotonic() - start, 2 + SLACK)
                self.assertEqual(r.stderr.decode().count("\n"), 1, r.stderr)

    def test_stalled_server_every_read_ends_within_the_timeout(self):
        """The server stalls while more readers than the mount has serving threads each open
        and read a whole file (data, tensor.npy, tensor.pt of every tensor: the open's first
        bytes, the kernel's readahead and its retries page by page, requests queued behind the
        threads that wait, curl's queue behind the stalled connections): every read fails with
        EIO within -o timeout= plus the slack docs/SECURITY.md allows ("Time"). A read that
        comes after them fails at once (the server is taken as failing, and not waited for);
        once the server answers again, every file reads right."""
        mnt, proc = self.mount_layers()
        try:
            files = [mnt / e["path"] / name for e in self.index.values()
                     for name in ("data", "tensor.npy", "tensor.pt")]
            late = mnt / self.index["layer7.weight"]["path"] / "data"
            files.remove(late)
            self.proxy.mode = "stall"
            results = [None] * len(files)

            def read(i):
                start = time.monotonic()
                try:
                    files[i].read_bytes()
                    results[i] = ("read", time.monotonic() - start)
                except OSError as e:
                    results[i] = (errno.errorcode.get(e.errno, e.errno), time.monotonic() - start)
            threads = [threading.Thread(target=read, args=(i,), daemon=True)
                       for i in range(len(files))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(4 * (FAULT_TIMEOUT + SLACK))
            self.assertTrue(all(r is not None for r in results), "a read hung")
            slowest = max(seconds for _, seconds in results)
            done, result, seconds = in_thread(late.read_bytes, FAULT_TIMEOUT + SLACK)
            print(f"\nstalled server, -o timeout={FAULT_TIMEOUT:g}, {len(files)} readers: "
                  f"slowest {slowest:.2f} s; a read after them {seconds:.2f} s", file=sys.stderr)
            # head.bias (4 KiB) came with the mount's first requests: its files read.
            self.assertIn("EIO", {what for what, _ in results})
            self.assertLessEqual({what for what, _ in results}, {"EIO", "read"}, results)
            self.assertLessEqual(slowest, FAULT_TIMEOUT + SLACK, results)
            self.assertTrue(done, "the read after them hung")
            self.assertIsInstance(result, OSError)
            self.assertLess(seconds, FAULT_TIMEOUT, "the read after them waited for the server")
            self.proxy.mode = "pass"
            with open(self.root / "layers.pth", "rb") as f:
                expected = f.read()
            for key in self.index:
                data = read_once_answering(lambda k=key: self.data(mnt, k), key)
                meta = json.loads((mnt / self.index[key]["path"] / "meta.json").read_bytes())
                self.assertEqual(data, expected[meta["file_offset"]:][:meta["nbytes"]], key)
        finally:
            self.proxy.mode = "pass"
            self.unmount(mnt, proc)

    def test_server_stopped_and_restarted(self):
        mnt, proc = self.mount_layers(self.nginx.url("layers.pth"))
        try:
            self.nginx.stop()
            done, result, seconds = in_thread(lambda: self.data(mnt, "layer6.weight"),
                                              FAULT_TIMEOUT + SLACK)
            self.assertTrue(done, "the read hung with the server stopped")
            self.assertIsInstance(result, OSError)
            self.assertEqual(result.errno, errno.EIO)
            self.nginx.start()
            self.assertEqual(len(self.read_again(mnt, "layer6.weight")), 2**20)
            self.assertEqual(len(self.read_again(mnt, "layer7.weight")), 2**20)
        finally:
            if self.nginx.proc is None:
                self.nginx.start()
            self.unmount(mnt, proc)

    def test_trickle_ends_each_read_within_the_timeout(self):
        """A server that trickles 2 bytes a second. A 4 KiB read fails with EIO within the
        timeout, the kernel's own retry of the page included (not twice the timeout); reading it
        again at once fails at once; a read elsewhere while the server still trickles fails
        without waiting for it (the server is taken as failing); once the server is right
        again, the same bytes read."""
        timeout = 6.0
        mnt, proc = self.mount(self.proxy.url("layers.pth"), "-o", f"timeout={timeout:g}")
        try:
            index = index_entries(mnt)
            paths = {k: mnt / index[k]["path"] / "data" for k in ("layer3.weight", "layer6.weight")}

            def pread(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    return os.pread(fd, 4096, 0)
                finally:
                    os.close(fd)
            self.proxy.mode = "trickle"
            times = {}
            for what, key in (("first", "layer3.weight"), ("again", "layer3.weight"),
                              ("elsewhere", "layer6.weight")):
                done, result, seconds = in_thread(lambda: pread(paths[key]), 4 * timeout)
                self.assertTrue(done, f"{what}: the read hung")
                self.assertIsInstance(result, OSError, f"{what}: {result!r}"[:200])
                self.assertEqual(result.errno, errno.EIO)
                times[what] = seconds
            print(f"\ntrickle, -o timeout={timeout:g}: 4 KiB read {times['first']:.2f} s, "
                  f"at once again {times['again']:.2f} s, elsewhere {times['elsewhere']:.2f} s",
                  file=sys.stderr)
            self.assertLess(times["first"], timeout + 2, "the kernel's retry waited again")
            self.assertLess(times["again"], 0.5)
            self.assertLess(times["elsewhere"], timeout, "a read elsewhere waited the timeout")
            self.proxy.mode = "pass"

            def first_page():
                meta = json.loads((mnt / index["layer3.weight"]["path"] / "meta.json")
                                  .read_bytes())
                return meta["file_offset"], pread(paths["layer3.weight"])
            offset, data = read_once_answering(first_page, "layer3.weight", 2 * timeout)
            with open(self.root / "layers.pth", "rb") as f:
                f.seek(offset)
                self.assertEqual(data, f.read(4096))
        finally:
            self.proxy.mode = "pass"
            self.unmount(mnt, proc)

    def test_sigterm_cancels_reads_waiting_for_a_stalled_server(self):
        """-o timeout=60, the server stalled, 1 and then 8 readers waiting (every serving thread
        busy): SIGTERM unmounts within 2 s, in the foreground and as a daemon; the readers get
        an error at once."""
        for readers in (1, 8):
            for daemon in (False, True):
                with self.subTest(readers=readers, daemon=daemon):
                    self.sigterm_while_stalled(readers, daemon)

    def sigterm_while_stalled(self, readers, daemon):
        url = self.proxy.url("layers.pth")
        if daemon:
            mnt = self.new_dir()
            self.addCleanup(force_unmount, mnt)
            r = self.ckptfs("-o", "timeout=60", url, mnt)
            self.assertEqual(r.returncode, 0, r.stderr)
            pids = processes_with_arg(str(mnt))
            self.assertEqual(len(pids), 1, pids)
            pid, proc = pids[0], None
        else:
            mnt, proc = self.mount(url, "-o", "timeout=60")
            pid = proc.pid
        index = index_entries(mnt)
        keys = [k for k in index if k.startswith("layer")][:readers]
        self.proxy.mode = "stall"
        results = {}

        def read(key):
            try:
                results[key] = (mnt / index[key]["path"] / "data").read_bytes()
            except OSError as e:
                results[key] = e
        threads = [threading.Thread(target=read, args=(k,), daemon=True) for k in keys]
        for t in threads:
            t.start()
        time.sleep(1.0)  # the reads are waiting for the server
        self.assertEqual(results, {}, "a read did not wait for the stalled server")
        start = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        gone = wait_until(lambda: not is_mounted(mnt), 10)
        seconds = time.monotonic() - start
        for t in threads:
            t.join(10)
        self.proxy.mode = "pass"
        print(f"\nSIGTERM with {readers} reader(s) waiting ({'daemon' if daemon else '-f'}): "
              f"unmounted in {seconds:.2f} s", file=sys.stderr)
        self.assertTrue(gone, "still mounted 10 s after SIGTERM")
        self.assertLess(seconds, 2.0)
        self.assertEqual(len(results), readers, "a reader still waits")
        self.assertTrue(all(isinstance(r, OSError) for r in results.values()), results)
        if proc is not None:
            self.assertEqual(proc.wait(timeout=10), 0, self.output(proc))
        else:
            self.assertTrue(wait_until(lambda: not processes_with_arg(str(mnt)), 10))

    def test_an_answer_without_the_pinned_validator_is_a_change(self):
        """A server whose later answers lack the validator pinned at mount (the ETag; else
        Last-Modified), as behind a balancer whose other backends send none: EIO, for every read
        from then on (the server sending it again changes nothing), said once in the log."""
        cases = ((set(), {"etag"}, "ETag"),
                 ({"etag"}, {"etag", "last-modified"}, "Last-Modified"))
        for at_mount, later, pinned in cases:
            with self.subTest(pinned=pinned):
                self.proxy.drop_headers = at_mount
                mnt, proc = self.mount_layers()
                try:
                    self.assertEqual(len(self.data(mnt, "layer0.weight")), 2**20)
                    self.proxy.drop_headers = later
                    with self.assertRaises(OSError) as caught:
                        self.data(mnt, "layer5.weight")
                    self.assertEqual(caught.exception.errno, errno.EIO)
                    self.proxy.drop_headers = at_mount
                    for key in ("layer6.weight", "layer5.weight", "layer0.weight"):
                        with self.assertRaises(OSError, msg=key):
                            self.data(mnt, key)
                finally:
                    self.proxy.drop_headers = set()
                    self.unmount(mnt, proc)
                log = self.output(proc)
                self.assertEqual(log.count("changed while mounted"), 1, log)
                self.assertIn(f"the server answered without the {pinned}", log)

    def test_object_replaced_on_the_server(self):
        path = self.root / "replaced.pth"
        shutil.copy(self.root / "layers.pth", path)
        mnt, proc = self.mount_layers(self.nginx.url("replaced.pth"))
        try:
            self.assertEqual(len(self.data(mnt, "layer0.weight")), 2**20)
            make_checkpoint(path.with_suffix(".new"), TENSORS, seed=1)
            os.replace(path.with_suffix(".new"), path)
            with self.assertRaises(OSError) as caught:
                self.data(mnt, "layer7.weight")
            self.assertEqual(caught.exception.errno, errno.EIO)
            # Every read from now on, cached or not.
            with self.assertRaises(OSError):
                (mnt / self.index["head.bias"]["path"] / "tensor.npy").read_bytes()
        finally:
            self.unmount(mnt, proc)
        self.assertIn("changed while mounted", self.output(proc))


if __name__ == "__main__":
    unittest.main()
