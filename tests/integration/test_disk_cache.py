# SPDX-License-Identifier: MIT
"""The disk cache (-o cache_dir=DIR) against real servers on loopback, as a hostile user of the
same machine would attack it and as a new user would mistype it:

  - a DIR others may write (a sticky /tmp-like one too), another user's, or whose
    ckptfs-blocks-v1 is a link or open to others, is refused in one line (status 1); only the
    last component of DIR is made;
  - links planted below DIR are never followed: no block is written through them, trimming
    deletes nothing they lead to, and the mount reads the right bytes, saying so once;
  - a block another user owns or others may write is a miss, never bytes, however well-formed;
  - a FIFO (or directory) where a block or key file should be never blocks a mount, a read or
    inspect;
  - the cache's key is the whole URL but its signature: two objects of one download endpoint
    (dl?f=a.pth, dl?f=b.pth) never share blocks, two signatures of one object do, and an object
    without ETag or Last-Modified is not kept on disk;
  - mounts of one user sharing a DIR share the blocks in flight too: eight mounts reading an
    object at once have the server send it about once; a mount stopped while it fetches holds
    the others up half their timeout at most; a claims file others could have made is not used.

Every read is compared with a mount of the local file.
"""

import hashlib
import json
import os
import random
import shutil
import stat
import struct
import subprocess
import sys
import threading
import unittest
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

from fixtures import fixture_path  # noqa: E402
from mount_views import index_entries, tensor_digests  # noqa: E402
from remote_servers import FaultProxy, ObjectServer  # noqa: E402
from test_mount import run  # noqa: E402
from test_remote import (BLOCK, SLACK, TENSORS, RemoteTestCase, in_thread,  # noqa: E402
                         make_checkpoint, u8_safetensors)
from fixtures import views_dir, wait_until  # noqa: E402

OTHER_UID = 65534  # nobody: a user who is not the one running the tests (they run as root)
HEADER = 32        # a block file's header: "CKPTFSB1", index, length, CRC-32, padding


def blocks(cache):
    return sorted(Path(cache).glob("ckptfs-blocks-v1/*/*.blk"))


def forge(path, fill=0x5A):
    """Rewrites block file `path` with other bytes behind a well-formed header and CRC: what a
    writer who knows the format would plant."""
    header = path.read_bytes()[:HEADER]
    index, length = struct.unpack_from("<QQ", header, 8)
    payload = bytes([fill]) * length
    path.write_bytes(b"CKPTFSB1" + struct.pack("<QQI", index, length, zlib.crc32(payload))
                     + b"\0" * 4 + payload)


def snapshot(directory):
    """{relative path: (kind, bytes or link text)} of everything under `directory`."""
    out = {}
    for p in sorted(Path(directory).rglob("*")):
        rel = str(p.relative_to(directory))
        if p.is_symlink():
            out[rel] = ("link", os.readlink(p))
        elif p.is_file():
            out[rel] = ("file", p.read_bytes())
        else:
            out[rel] = ("dir", None)
    return out


class DiskCacheTests(RemoteTestCase):
    def setUp(self):
        super().setUp()
        self.url = self.nginx.url("layers.pth")
        self.convnet_url = self.nginx.url("fixtures/convnet.pth")
        self.want = self.local(self.root / "layers.pth")
        self.want_convnet = self.local(fixture_path("convnet"))

    def local(self, path):
        mnt, proc = self.mount(path)
        try:
            return tensor_digests(mnt)
        finally:
            self.unmount(mnt, proc)

    def read_through(self, url, cache, *options):
        """Mounts `url` with -o cache_dir=`cache`, reads every tensor (within a minute: a read
        that hangs fails the test), unmounts; (data, the mount's log)."""
        mnt, proc = self.mount(url, "-o", f"cache_dir={cache}", *options)
        try:
            done, result, seconds = in_thread(lambda: tensor_digests(mnt), 60)
            self.assertTrue(done, f"{url}: reads through {cache} hung")
            if isinstance(result, BaseException):
                raise result
            return result, self.output(proc)
        finally:
            self.unmount(mnt, proc)

    def filled_cache(self):
        """A cache holding every block of layers.pth and convnet.pth, read once: (the cache,
        layers.pth's object folder, convnet.pth's)."""
        cache = self.new_dir("cache")
        folders = []
        for url, want in ((self.url, self.want), (self.convnet_url, self.want_convnet)):
            self.assertEqual(self.read_through(url, cache)[0], want)
            new = {p.parent for p in blocks(cache)} - set(folders)
            self.assertEqual(len(new), 1, new)
            folders += new
        return cache, folders[0], folders[1]

    def assert_refused(self, cache, *words):
        """Mount and inspect with -o cache_dir=`cache`: status 1, one line naming cache_dir and
        saying `words`; nothing mounted."""
        for args in (["inspect", "-o", f"cache_dir={cache}", self.url],
                     ["-o", f"cache_dir={cache}", self.url, self.new_dir()]):
            r = self.ckptfs(*args)
            err = r.stderr.decode()
            self.assertEqual(r.returncode, 1, f"{args}: {err}")
            self.assertEqual(err.count("\n"), 1, err)
            self.assertIn(f'cache_dir="{cache}"', err)
            for w in words:
                self.assertIn(w, err)

    def test_shared_trimmed_cache_healthy_server_no_eio(self):
        """Two mounts of one URL on one cache that is trimmed all the time (cache_dir_size=1M,
        the object 8 MiB: block files deleted and written while the other mount reads them),
        each with the smallest memory cache (4 MiB: blocks evicted under every read) and
        direct_io (every read asks the daemon), eight readers each reading 300 KiB at random
        places: every read gives the right bytes and none fails, the server being healthy. (A
        read used to look its blocks up again after asking for them, and failed with EIO when
        another read had evicted them between: once in 54,866 reads in issue 29. It now holds
        them from the moment it has them: see RemoteSource::read_blocks().)"""
        cache = self.new_dir("cache")
        local = (self.root / "layers.pth").read_bytes()
        mounts = [self.mount(self.url, "-o", f"cache_dir={cache},cache_dir_size=1M,"
                             "cache_size=4M,direct_io") for _ in range(2)]
        try:
            files = []
            for mnt, _ in mounts:
                for e in index_entries(mnt).values():
                    meta = json.loads((mnt / e["path"] / "meta.json").read_bytes())
                    if meta["nbytes"] >= 2**20:
                        files.append((mnt / e["path"] / "data", meta["file_offset"],
                                      meta["nbytes"]))
            failures, reads = [], [0]
            lock = threading.Lock()
            length = 300 * 1024

            def reader(seed):
                rnd = random.Random(seed)
                for _ in range(60):
                    path, offset, size = rnd.choice(files)
                    at = rnd.randrange(0, size - length)
                    fd = os.open(path, os.O_RDONLY)
                    try:
                        got = os.pread(fd, length, at)
                        what = None if got == local[offset + at:][:length] else "wrong bytes"
                    except OSError as e:
                        what = str(e)
                    finally:
                        os.close(fd)
                    with lock:
                        reads[0] += 1
                        if what:
                            failures.append(f"{path} at {at}: {what}")
            threads = [threading.Thread(target=reader, args=(i,)) for i in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            self.assertFalse(any(t.is_alive() for t in threads), "a read hung")
            print(f"\ntwo mounts, one trimmed cache: {reads[0]} reads, {len(failures)} failed",
                  file=sys.stderr)
            self.assertEqual(failures, [])
        finally:
            for mnt, proc in mounts:
                self.unmount(mnt, proc)
        for _, proc in mounts:
            self.assertNotIn("failed", self.output(proc))
        self.assertLessEqual(sum(f.stat().st_size for f in blocks(cache)), 1 << 20)

    def test_eight_mounts_one_cache_fetch_each_block_once(self):
        """Eight mounts of one object by one user on one cache_dir, every tensor read by all of
        them at once (a thread each), through a proxy that counts the bytes the server sends:
        a block in flight is fetched by one mount while the others wait for its file (claims
        in the cache), so the server sends the object about once (at most 1.2x), and every byte
        read is right. (Each mount alone would have it sent once: 8x.)"""
        proxy = FaultProxy(self.nginx.port).start()
        self.addCleanup(proxy.stop)
        cache = self.new_dir("cache")
        size = (self.root / "layers.pth").stat().st_size
        mounts = [self.mount(proxy.url("layers.pth"), "-o", f"cache_dir={cache}")
                  for _ in range(8)]
        try:
            results = [None] * len(mounts)

            def read(i):
                try:
                    results[i] = tensor_digests(mounts[i][0])
                except OSError as e:
                    results[i] = e
            threads = [threading.Thread(target=read, args=(i,)) for i in range(len(mounts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            self.assertFalse(any(t.is_alive() for t in threads), "a read hung")
        finally:
            for mnt, proc in mounts:
                self.unmount(mnt, proc)
        print(f"\neight mounts, one cache, {size} bytes read by each: the server sent "
              f"{proxy.sent} bytes ({proxy.sent / size:.2f}x) in {proxy.served} requests",
              file=sys.stderr)
        self.assertEqual(results, [self.want] * len(mounts))
        self.assertLessEqual(proxy.sent, 1.2 * size)

    def test_a_starved_cache_writer_holds_reads_back_rather_than_skip_blocks(self):
        """The mount's thread that writes fetched blocks into the cache_dir, at SCHED_IDLE while
        every CPU is kept busy, lags behind the network by its whole write queue (16 MiB with
        -o cache_size=64M): the fetches wait for room in the queue rather than skip the blocks
        that do not fit, so every block of a 192 MiB object read once is in the cache after. (A
        skipped block is fetched again by every other mount of the cache that wants it: eight
        mounts of one object sent up to 1.24x it.)"""
        rng = random.Random(7)
        payloads = [rng.randbytes(24 * 2**20) for _ in range(8)]
        data = u8_safetensors(payloads)
        (self.root / "starved.safetensors").write_bytes(data)
        cache = self.new_dir("cache")
        mnt, proc = self.mount(self.nginx.url("starved.safetensors"), "-o",
                               f"cache_dir={cache}", "-o", "cache_size=64M")
        hogs = []
        try:
            view = views_dir(mnt) / "model.safetensors"
            with open(view, "rb", buffering=0) as f:
                f.read(2**20)  # the first blocks fetched start the writer

            def writer():
                for task in Path(f"/proc/{proc.pid}/task").iterdir():
                    if (task / "comm").read_text().strip() == "disk-cache":
                        return int(task.name)
                return None
            self.assertTrue(wait_until(lambda: writer() is not None, 10), "no disk-cache thread")
            os.sched_setscheduler(writer(), os.SCHED_IDLE, os.sched_param(0))
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(os.cpu_count() or 2)]

            def tensor_bytes():  # the served file's header is the mount's own
                with open(view, "rb", buffering=0) as f:
                    served = f.read()
                return served[8 + int.from_bytes(served[:8], "little"):]
            done, result, seconds = in_thread(tensor_bytes, 120)
            self.assertTrue(done, "reads with a starved cache writer hung")
            self.assertTrue(result == b"".join(payloads), "wrong bytes")
        finally:
            for h in hogs:
                h.kill()
                h.wait()
            self.unmount(mnt, proc)
        written = sum(1 for b in blocks(cache) if b.stat().st_size > HEADER)
        self.assertEqual(written, -(-len(data) // BLOCK), f"{seconds:.1f} s")

    def test_a_stopped_mount_holds_the_others_up_half_their_timeout_at_most(self):
        """Two mounts of one object on one cache_dir (-o timeout=4). The first is stopped
        (SIGSTOP) while its fetch of a tensor is under way, holding those blocks' claims; the
        second then reads the same tensor: it waits for them half its timeout at most, then
        fetches them itself, and reads the right bytes within its timeout."""
        import signal
        timeout = 4.0
        proxy = FaultProxy(self.nginx.port).start()
        self.addCleanup(proxy.stop)
        cache = self.new_dir("cache")
        options = ("-o", f"cache_dir={cache},timeout={timeout:g}")
        (a, a_proc), (b, b_proc) = [self.mount(proxy.url("layers.pth"), *options)
                                    for _ in range(2)]
        index = index_entries(a)
        path = index["layer4.weight"]["path"]
        try:
            served = proxy.served
            proxy.mode = "stall"
            stalled = threading.Thread(target=lambda: self.try_read(a / path / "data"),
                                       daemon=True)
            stalled.start()
            self.assertTrue(wait_until(lambda: proxy.served > served, 10),
                            "the first mount asked for nothing")
            os.kill(a_proc.pid, signal.SIGSTOP)
            proxy.mode = "pass"
            done, result, seconds = in_thread(lambda: (b / path / "data").read_bytes(),
                                              timeout + SLACK)
            print(f"\na mount stopped while it fetches: the other's read took {seconds:.2f} s "
                  f"(-o timeout={timeout:g})", file=sys.stderr)
            self.assertTrue(done, "the read hung")
            self.assertIsInstance(result, bytes, result)
            self.assertEqual(hashlib.sha256(result).hexdigest(), self.want["layer4.weight"])
            self.assertLess(seconds, timeout + SLACK)
        finally:
            os.kill(a_proc.pid, signal.SIGCONT)
            proxy.mode = "pass"
            stalled.join(timeout + SLACK)
            self.unmount(a, a_proc)
            self.unmount(b, b_proc)

    @staticmethod
    def try_read(path):
        try:
            return path.read_bytes()
        except OSError as e:
            return e

    def test_claims_files_others_could_have_made_are_not_used(self):
        """An object folder's claims file replaced by a link (to a file elsewhere, or dangling),
        a FIFO, or another user's file: the mounts read the right bytes at once, never open,
        create or lock through the link, and say so once."""
        cache, layers, convnet = self.filled_cache()
        outside = self.new_dir("outside")
        (outside / "victim").write_bytes(b"victim")
        (layers / "claims").unlink()
        (layers / "claims").symlink_to(outside / "victim")
        (convnet / "claims").unlink()
        (convnet / "claims").symlink_to(outside / "not-there")
        before = snapshot(outside)
        for url, want in ((self.url, self.want), (self.convnet_url, self.want_convnet)):
            data, log = self.read_through(url, cache)
            self.assertEqual(data, want)
            self.assertEqual(log.count("said once"), 1, log)
            self.assertIn("claims (a symbolic link)", log)
        self.assertEqual(snapshot(outside), before, "a file was made or changed through a link")
        for kind in ("fifo", "owner"):
            (layers / "claims").unlink()
            if kind == "fifo":
                os.mkfifo(layers / "claims", 0o600)
            else:
                (layers / "claims").write_bytes(b"")
                os.chown(layers / "claims", OTHER_UID, OTHER_UID)
            with self.subTest(claims=kind):
                done, result, _ = in_thread(lambda: self.read_through(self.url, cache), 60)
                self.assertTrue(done, "a mount waited on the claims file")
                self.assertEqual(result[0], self.want)
                self.assertIn("claims (", result[1])

    def test_a_directory_others_can_write_is_refused(self):
        """A DIR others may write (/tmp-like with the sticky bit, or not; the group), another
        user's, or whose ckptfs-blocks-v1 is a link or open to others: refused, nothing written
        there."""
        for mode in (0o1777, 0o777, 0o775, 0o1770):
            with self.subTest(mode=oct(mode)):
                shared = self.new_dir("shared")
                shared.chmod(mode)
                self.assert_refused(shared, "writable by", "only you can write")
                self.assertEqual(list(shared.iterdir()), [])
        with self.subTest("another user's"):
            foreign = self.new_dir("foreign")
            os.chown(foreign, OTHER_UID, OTHER_UID)
            self.assert_refused(foreign, f"owned by uid {OTHER_UID}")
        with self.subTest("ckptfs-blocks-v1 a link"):
            elsewhere = self.new_dir("elsewhere")
            linked = self.new_dir("linked")
            (linked / "ckptfs-blocks-v1").symlink_to(elsewhere)
            self.assert_refused(linked, "symbolic link")
            self.assertEqual(list(elsewhere.iterdir()), [])
        with self.subTest("ckptfs-blocks-v1 open to others"):
            inside = self.new_dir("inside")
            (inside / "ckptfs-blocks-v1").mkdir()
            (inside / "ckptfs-blocks-v1").chmod(0o777)
            self.assert_refused(inside, "writable by every user")
        with self.subTest("ckptfs-blocks-v1 another user's"):
            inside = self.new_dir("inside")
            (inside / "ckptfs-blocks-v1").mkdir(mode=0o700)
            os.chown(inside / "ckptfs-blocks-v1", OTHER_UID, OTHER_UID)
            self.assert_refused(inside, f"owned by uid {OTHER_UID}")
        # The same DIR once it is the user's own alone: used.
        shared = self.new_dir("shared")
        shared.chmod(0o755)
        self.assertEqual(self.read_through(self.url, shared)[0], self.want)
        self.assertGreater(len(blocks(shared)), 8)

    def test_only_the_last_component_is_made(self):
        """cache_dir=DIR/typo/deep/er: one line, status 1, nothing made; DIR/new: made, 0700."""
        typo = self.tmp / "typo" / "deep" / "er"
        self.assert_refused(typo, "does not exist", "only the last component")
        self.assertFalse((self.tmp / "typo").exists())
        new = self.tmp / "new"
        self.assertEqual(self.read_through(self.url, new)[0], self.want)
        self.assertEqual(stat.S_IMODE(new.stat().st_mode), 0o700)
        self.assertEqual(stat.S_IMODE((new / "ckptfs-blocks-v1").stat().st_mode), 0o700)

    def test_links_below_the_cache_are_never_followed(self):
        """An object folder replaced by a link to another directory, block files replaced by
        links to files elsewhere: the mounts read the right bytes, write nothing through the
        links and their trimming (cache_dir_size=1M) deletes nothing they lead to; the log says
        so once."""
        cache, layers, convnet = self.filled_cache()
        outside = self.new_dir("outside")
        (outside / "0000000000000000.blk").write_bytes(b"victim block" * 1000)
        (outside / "0000000000000001.blk").write_bytes(b"CKPTFSB1" + b"\0" * 5000)
        # convnet.pth's folder a link to `outside`; two of layers.pth's blocks links into it.
        shutil.rmtree(convnet)
        convnet.symlink_to(outside)
        linked = sorted(layers.glob("*.blk"))[:2]
        self.assertEqual(len(linked), 2)
        for i, block in enumerate(linked):
            block.unlink()
            block.symlink_to(outside / f"000000000000000{i}.blk")
        before = snapshot(outside)
        data, log = self.read_through(self.url, cache, "-o", "cache_dir_size=1M")
        self.assertEqual(data, self.want)
        self.assertEqual(log.count("said once"), 1, log)
        self.assertIn("a symbolic link", log)
        data, log = self.read_through(self.convnet_url, cache, "-o", "cache_dir_size=1M")
        self.assertEqual(data, self.want_convnet)
        self.assertEqual(log.count("said once"), 1, log)
        self.assertEqual(snapshot(outside), before, "a file was written or deleted through a link")
        self.assertTrue(convnet.is_symlink())
        # The trimming did run: layers.pth's own blocks are down to 1M.
        self.assertLessEqual(sum(p.stat().st_size for p in layers.glob("*.blk")
                                 if not p.is_symlink()), 1 << 20)

    def test_blocks_others_could_have_written_are_misses(self):
        """Every block rewritten with other bytes behind a valid header and CRC, then given to
        another user, or made writable by the group or others: the mount reads the object's
        bytes, never the planted ones. An object folder of another user's is not used."""
        cache, _, _ = self.filled_cache()
        planted = blocks(cache)
        for i, block in enumerate(planted):
            forge(block)
            if i % 3 == 0:
                os.chown(block, OTHER_UID, OTHER_UID)
            else:
                block.chmod(0o666 if i % 3 == 1 else 0o620)
        self.assertEqual(self.read_through(self.url, cache)[0], self.want)
        self.assertEqual(self.read_through(self.convnet_url, cache)[0], self.want_convnet)
        # A whole folder of another user's, blocks forged: not used (and not written to).
        cache, folder, _ = self.filled_cache()
        for block in folder.glob("*.blk"):
            forge(block)
            block.chmod(0o600)
        os.chown(folder, OTHER_UID, OTHER_UID)
        before = snapshot(folder)
        data, log = self.read_through(self.url, cache)
        self.assertEqual(data, self.want)
        self.assertEqual(snapshot(folder), before)
        self.assertIn(f"owned by uid {OTHER_UID}", log)

    def test_a_fifo_is_never_waited_on(self):
        """A FIFO where a block or an object's key file should be, and a directory where a block
        should be: mounts, reads and inspect go on at once, with the right bytes."""
        cache, folder, other = self.filled_cache()
        block_files = sorted(folder.glob("*.blk"))
        for block in block_files[:3]:
            block.unlink()
            os.mkfifo(block)
        block_files[3].unlink()
        block_files[3].mkdir()
        (other / "key").unlink()
        os.mkfifo(other / "key")
        self.assertEqual(self.read_through(self.url, cache)[0], self.want)
        self.assertEqual(self.read_through(self.convnet_url, cache)[0], self.want_convnet)
        for url in (self.url, self.convnet_url):
            r = self.ckptfs("inspect", "-o", f"cache_dir={cache}", url, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(stat.S_ISFIFO((other / "key").lstat().st_mode))


class DownloadEndpointTests(RemoteTestCase):
    """Objects chosen by the URL's query, as a download endpoint serves them (ObjectServer)."""

    def setUp(self):
        super().setUp()
        self.a = make_checkpoint(self.tmp / "a.pth", TENSORS, seed=1)
        self.b = make_checkpoint(self.tmp / "b.pth", TENSORS, seed=2)
        self.assertEqual(self.a.stat().st_size, self.b.stat().st_size,
                         "the two checkpoints must have one size, else the size tells them apart")
        self.assertNotEqual(self.a.read_bytes(), self.b.read_bytes())
        self.want = {}
        for path in (self.a, self.b):
            mnt, proc = self.mount(path)
            try:
                self.want[path.name] = tensor_digests(mnt)
            finally:
                self.unmount(mnt, proc)

    def serve(self, **validators):
        server = ObjectServer(**validators).start()
        self.addCleanup(server.stop)
        for path in (self.a, self.b):
            server.objects[f"/dl?f={path.name}"] = path.read_bytes()
        return server

    def read(self, url, cache):
        mnt, proc = self.mount(url, "-o", f"cache_dir={cache}")
        try:
            return tensor_digests(mnt)
        finally:
            self.unmount(mnt, proc)

    def test_query_selects_the_object(self):
        """dl?f=a.pth, then dl?f=b.pth (one size) through one cache: each mount reads its own
        object, with validators (the same ETag and Last-Modified for both) or without."""
        cases = {"no validators": {},
                 "the same ETag and Last-Modified": dict(
                     etag='"1"', last_modified="Mon, 02 Jan 2006 15:04:05 GMT")}
        for what, validators in cases.items():
            with self.subTest(what):
                server = self.serve(**validators)
                cache = self.new_dir("cache")
                for name in ("a.pth", "b.pth", "a.pth"):
                    got = self.read(server.url(f"/dl?f={name}"), cache)
                    self.assertEqual(got, self.want[name], f"{what}: dl?f={name}")
                stored = blocks(cache)
                if validators:
                    self.assertEqual(len({p.parent for p in stored}), 2, stored)
                else:
                    self.assertEqual(stored, [], "an object without validators was kept on disk")
                for f in cache.rglob("*"):
                    if f.is_file():
                        self.assertNotIn(b"dl?f=", f.read_bytes(), f"{f} holds the URL")

    def test_signatures_share_one_cache_entry(self):
        """Two presigned URLs of one object (other X-Amz-Signature and X-Amz-Date): the second
        mount fetches nothing but its open's requests (the first 8 KiB, which pin the object's
        identity, and the range check's bytes) and one-byte checks of the identity."""
        server = self.serve(etag='"abc"', last_modified="Mon, 02 Jan 2006 15:04:05 GMT")
        cache = self.new_dir("cache")
        signed = "/dl?f=a.pth&X-Amz-Date=20260101T000000Z&X-Amz-Signature={}"
        self.assertEqual(self.read(server.url(signed.format("1111")), cache), self.want["a.pth"])
        gets = len(server.ranges)
        self.assertEqual(self.read(server.url(signed.format("2222")), cache), self.want["a.pth"])
        later = server.ranges[gets:]
        self.assertGreaterEqual(len(later), 1)
        self.assertLessEqual(set(later), {"bytes=0-8191", "bytes=4099-8191", "bytes=0-0"}, later)


if __name__ == "__main__":
    unittest.main()
