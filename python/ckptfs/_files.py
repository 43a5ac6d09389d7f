# SPDX-License-Identifier: MIT
"""The fast path: a tensor whose bytes the mount serves as one plain range of a local file
(index.json's "file_range" and "source_files", docs/TREE.md) is read from that file itself,
memory-mapped or read with pread, once the file is checked to be the very one the mount serves.

The check compares the identity the mount published (device, inode, size, mtime in ns) with
os.stat() of its path and os.fstat() of the descriptor read: a file replaced (another inode),
rewritten, truncated or touched (another size or mtime) is refused, and the tensor is read
through the mount, which serves the bytes it has or fails with EIO, never wrong ones. It is
made each time a tensor is looked up; a file changed after that, while a tensor maps it, shows
the change to that tensor, as the mount's own page cache would (and one truncated raises SIGBUS
where its lost pages are touched, as any mapping of a file does)."""

import mmap
import os
import threading


def _identity(st):
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class LocalFile:
    """A source file of the mount, opened and mapped whole (copy-on-write: a tensor written to
    never writes the file), with the identity the mount published."""

    def __init__(self, published):
        self.path = published["path"]
        self.identity = (published["device"], published["inode"], published["size"],
                         published["mtime_ns"])
        self.fd = -1
        self.map = None
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _identity(os.fstat(fd)) != self.identity or self.identity[2] == 0:
                raise OSError("not the file the mount serves")
            self.map = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def unchanged(self):
        """Whether the path still names the file the mount serves, and the descriptor mapped is
        that file with the same size and mtime."""
        try:
            return (_identity(os.stat(self.path)) == self.identity
                    and _identity(os.fstat(self.fd)) == self.identity)
        except OSError:
            return False

    def pread_into(self, buffer, offset):
        """Fills `buffer` (a writable bytes-like object) with the file's bytes at `offset`.
        False when the file ends first (it changed)."""
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view):
            n = os.preadv(self.fd, [view[done:]], offset + done)
            if n == 0:
                return False
            done += n
        return True

    def close(self):
        # The map stays valid while an array made from it lives (mmap refuses to close then):
        # it is dropped with its last user.
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class LocalFiles:
    """The mount's source files that this process may read itself: opened on first use, each
    once; a file that cannot be opened, or is not the one published, is never retried."""

    def __init__(self, published):
        self._published = published or []
        self._files = {}
        self._lock = threading.Lock()

    def get(self, source):
        """The LocalFile of source index `source` when it is one and unchanged, else None."""
        with self._lock:
            if source in self._files:
                f = self._files[source]
            else:
                f = None
                if 0 <= source < len(self._published) and self._published[source]:
                    try:
                        f = LocalFile(self._published[source])
                    except (OSError, ValueError, KeyError, TypeError):
                        f = None
                self._files[source] = f
        return f if f is not None and f.unchanged() else None

    def close(self):
        with self._lock:
            for f in self._files.values():
                if f is not None:
                    f.close()
            self._files.clear()
