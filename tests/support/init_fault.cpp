// SPDX-License-Identifier: MIT
// A test-only LD_PRELOAD library that breaks the kernel's FUSE INIT request on its way into a real
// ckptfs, so that the tests see what ckptfs does when its mount never comes up.
//
// libfuse takes every request from /dev/fuse with read(2); this read() passes every call on and,
// when the bytes read from a /dev/fuse descriptor are an INIT request, applies the fault named
// by $CKPTFS_INIT_FAULT:
//   old_kernel  the request claims protocol 6.x: libfuse answers EPROTO without calling ckptfs's
//               init callback, and the kernel's connection is dead from then on
//   die         the process kills itself (SIGKILL) before answering: a daemon that dies starting
// Any other value, or none, changes nothing.
#include <dlfcn.h>
#include <linux/fuse.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace {

using ReadFunction = ssize_t (*)(int, void*, size_t);

bool is_fuse_device(int fd) {
  struct stat st {};
  // /dev/fuse is the misc character device 10:229.
  return ::fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 10 &&
         minor(st.st_rdev) == 229;
}

}  // namespace

extern "C" ssize_t read(int fd, void* buffer, size_t count) {
  static const auto real_read = reinterpret_cast<ReadFunction>(::dlsym(RTLD_NEXT, "read"));
  const ssize_t n = real_read(fd, buffer, count);
  constexpr auto init_size = sizeof(fuse_in_header) + sizeof(fuse_init_in::major);
  if (n < static_cast<ssize_t>(init_size) || !is_fuse_device(fd)) return n;
  auto* header = static_cast<fuse_in_header*>(buffer);
  if (header->opcode != FUSE_INIT) return n;
  const char* fault = std::getenv("CKPTFS_INIT_FAULT");
  if (fault == nullptr) return n;
  if (std::strcmp(fault, "old_kernel") == 0) {
    auto* init = reinterpret_cast<fuse_init_in*>(header + 1);
    init->major = 6;
  } else if (std::strcmp(fault, "die") == 0) {
    ::kill(::getpid(), SIGKILL);
  }
  return n;
}
