// SPDX-License-Identifier: MIT
// open_log_file(): create it exclusively, or open the existing one only after lstat() and
// again fstat() found it the user's own regular file of one name.
#include "log_file.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

namespace ckptfs::fuse {
namespace {

constexpr int open_flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;

[[noreturn]] void refuse(const std::string& why) { throw Error(ExitCode::usage, why); }

// Refuses `st` (of the name, or of the descriptor opened) unless it is a regular file of the
// user, with one name.
void check_own_regular_file(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) {
    refuse(
        "a symbolic link: ckptfs does not follow one to its log (another user may have made it, "
        "to have ckptfs write into a file of yours): name the file itself");
  }
  if (!S_ISREG(st.st_mode)) {
    refuse(fmt::format("{}, not a regular file: name a file of yours for the log",
                       file_kind_name(st.st_mode)));
  }
  if (st.st_uid != ::geteuid()) {
    refuse(fmt::format(
        "owned by uid {}, not by uid {} who mounts: ckptfs appends its log only to a file of "
        "yours; name another file",
        st.st_uid, ::geteuid()));
  }
  if (st.st_nlink != 1) {
    refuse(fmt::format(
        "has {} hard links: ckptfs appends its log only to a file of one name (a link made in "
        "a shared directory could lead it into another file of yours); name another file",
        st.st_nlink));
  }
}

// O_NONBLOCK only kept a FIFO that replaced the file from waiting: writes to the log block.
UniqueFd without_nonblock(int fd) {
  UniqueFd owned(fd);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) refuse(std::strerror(errno));
  return owned;
}

}  // namespace

UniqueFd open_log_file(const std::string& path) {
  // The name may change between the calls below (removed, made again): a few rounds, then the
  // last error stands.
  for (int round = 0; round < 4; ++round) {
    // A new file: O_EXCL creates it here, never where a (dangling) link leads.
    const int created = ::open(path.c_str(), open_flags | O_CREAT | O_EXCL, 0600);
    if (created >= 0) return without_nonblock(created);
    if (errno != EEXIST) refuse(std::strerror(errno));
    // An existing one: its kind seen before it is opened (a FIFO or a device is never opened).
    struct stat named {};
    if (::lstat(path.c_str(), &named) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      refuse(std::strerror(errno));
    }
    check_own_regular_file(named);
    const int fd = ::open(path.c_str(), open_flags);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      if (errno == ELOOP) continue;  // replaced by a link meanwhile: lstat() says so next round
      refuse(std::strerror(errno));
    }
    UniqueFd opened = without_nonblock(fd);
    // What was opened is what counts: the name may have been replaced after lstat().
    struct stat st {};
    if (::fstat(opened.get(), &st) != 0) refuse(std::strerror(errno));
    check_own_regular_file(st);
    return opened;
  }
  refuse("changed again and again while ckptfs opened it: name a file nobody else changes");
}

}  // namespace ckptfs::fuse
