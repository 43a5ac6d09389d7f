// SPDX-License-Identifier: MIT
// open_file(): stat, then a non-blocking open of what the stat allowed, checked again.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/open_file.hpp>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

namespace ckptfs {

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// "" when `st` is of `kind`, else why not.
const char* kind_problem(const struct stat& st, FileKind kind) {
  if (kind == FileKind::directory) return S_ISDIR(st.st_mode) ? "" : "not a directory";
  if (S_ISREG(st.st_mode)) return "";
  return S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file";
}

[[noreturn]] void fail(const char* what) { throw Error(ExitCode::io, what); }

}  // namespace

const char* file_kind_name(mode_t mode) noexcept {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFLNK:
      return "a symbolic link";
    case S_IFIFO:
      return "a FIFO";
    case S_IFSOCK:
      return "a socket";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    default:
      return "an unknown kind of file";
  }
}

OpenedFile open_file(const std::string& path, FileKind kind) {
  OpenedFile out;
  // A stat never opens the file, so a FIFO or a device is refused without touching it.
  if (::stat(path.c_str(), &out.st) != 0) fail(std::strerror(errno));
  if (const char* problem = kind_problem(out.st, kind); *problem) fail(problem);

  int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (kind == FileKind::directory) flags |= O_DIRECTORY;
  int fd;
  do {
    fd = ::open(path.c_str(), flags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(std::strerror(errno));
  out.fd = UniqueFd(fd);
  // The path may name something else now than at the stat: what was opened is what counts.
  if (::fstat(fd, &out.st) != 0) fail(std::strerror(errno));
  if (const char* problem = kind_problem(out.st, kind); *problem) fail(problem);
  // Reads of a regular file or a directory never wait for a peer: blocking mode changes nothing
  // for them, but a descriptor handed on is then as an ordinary open() would give it.
  const int status = ::fcntl(fd, F_GETFL);
  if (status < 0 || ::fcntl(fd, F_SETFL, status & ~O_NONBLOCK) != 0) fail(std::strerror(errno));
  return out;
}

}  // namespace ckptfs
