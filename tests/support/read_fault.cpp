// SPDX-License-Identifier: MIT
// A test-only LD_PRELOAD library that makes reads of the checkpoint fail while the tests say so,
// so that they see what a mount does with a source that cannot be read (a failing disk).
//
// While the file named by $CKPTFS_READ_FAULT_FLAG exists, pread() and pread64() of a regular
// file, and splice() from one, fail with EIO; otherwise (and for every other descriptor: pipes,
// /dev/fuse) they pass every call on. The mount itself reads the checkpoint before the flag is
// made.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace {

bool failing(int fd) {
  const char* flag = std::getenv("CKPTFS_READ_FAULT_FLAG");
  struct stat st {};
  return flag != nullptr && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
         ::access(flag, F_OK) == 0;
}

template <typename F>
F next(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" ssize_t pread(int fd, void* buffer, size_t count, off_t offset) {
  static const auto real = next<ssize_t (*)(int, void*, size_t, off_t)>("pread");
  if (failing(fd)) {
    errno = EIO;
    return -1;
  }
  return real(fd, buffer, count, offset);
}

extern "C" ssize_t pread64(int fd, void* buffer, size_t count, off64_t offset) {
  static const auto real = next<ssize_t (*)(int, void*, size_t, off64_t)>("pread64");
  if (failing(fd)) {
    errno = EIO;
    return -1;
  }
  return real(fd, buffer, count, offset);
}

extern "C" ssize_t splice(int fd_in, loff_t* off_in, int fd_out, loff_t* off_out, size_t len,
                          unsigned int flags) {
  static const auto real =
      next<ssize_t (*)(int, loff_t*, int, loff_t*, size_t, unsigned int)>("splice");
  if (failing(fd_in)) {
    errno = EIO;
    return -1;
  }
  return real(fd_in, off_in, fd_out, off_out, len, flags);
}
