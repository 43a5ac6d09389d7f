# SPDX-License-Identifier: MIT
"""How much of a file the kernel's page cache holds (mincore(2) over a mapping of it, which
touches no page), and dropping a file's clean pages (posix_fadvise DONTNEED).

Shared by scripts/bench and the integration tests; standard library only (ctypes).
"""

import ctypes
import ctypes.util
import mmap
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
PAGE = os.sysconf("SC_PAGE_SIZE")
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_bytes(path):
    """Bytes of `path` in the page cache (whole pages; the last one counted whole). A private
    read-only mapping is made and undone: no page is read or faulted in."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            e = ctypes.get_errno()
            raise OSError(e, f"mmap {path}: {os.strerror(e)}")
        try:
            vec = ctypes.create_string_buffer((size + PAGE - 1) // PAGE)
            if _libc.mincore(addr, size, vec) != 0:
                e = ctypes.get_errno()
                raise OSError(e, f"mincore {path}: {os.strerror(e)}")
            return sum(b & 1 for b in vec.raw) * PAGE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def evict(path):
    """Drops the unmapped pages of `path` from the page cache, written back first (a file just
    written has dirty pages, which DONTNEED leaves). Does nothing on tmpfs, which has no other
    copy."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)



def large_folio_share(path, limit=64 << 20):
    """The share of `path`'s first `limit` bytes that the page cache holds in large folios (more
    than one page each), or None where the kernel does not say (/proc/kpageflags: root only).
    Each page is touched through a shared read-only mapping (a page not cached is then read),
    its frame looked up in /proc/self/pagemap and its flags in /proc/kpageflags."""
    compound = 1 << 15 | 1 << 16  # KPF_COMPOUND_HEAD, KPF_COMPOUND_TAIL
    try:
        flags_file = open("/proc/kpageflags", "rb")
    except OSError:
        return None
    with flags_file, open("/proc/self/pagemap", "rb") as pagemap:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = min(os.fstat(fd).st_size, limit) // PAGE * PAGE
            if size == 0:
                return None
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr is None or addr == _MAP_FAILED:
                e = ctypes.get_errno()
                raise OSError(e, f"mmap {path}: {os.strerror(e)}")
        finally:
            os.close(fd)
        try:
            pages = large = 0
            for i in range(size // PAGE):
                ctypes.string_at(addr + i * PAGE, 1)  # maps the page from the page cache
                pagemap.seek((addr // PAGE + i) * 8)
                entry = int.from_bytes(pagemap.read(8), "little")
                pfn = entry & ((1 << 55) - 1)
                if not entry >> 63 or pfn == 0:
                    continue
                flags_file.seek(pfn * 8)
                pages += 1
                if int.from_bytes(flags_file.read(8), "little") & compound:
                    large += 1
            return large / pages if pages else None
        finally:
            _libc.munmap(addr, size)
