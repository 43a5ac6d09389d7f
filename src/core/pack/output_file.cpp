// SPDX-License-Identifier: MIT
// OutputFile: O_TMPFILE and linkat (or mkstemp and rename), writes and in-kernel copies, fsyncs.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/pack/output_file.hpp>
#include <ckptfs/source/open_file.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

namespace ckptfs {
namespace {

[[noreturn]] void fail_errno(const char* what) {
  throw OutputError(ExitCode::io, fmt::format("{}: {}", what, std::strerror(errno)));
}

[[noreturn]] void exists() {
  throw OutputError(ExitCode::usage, "exists: pack does not overwrite it without --force");
}

// Reads from `source`, its errors named after it.
void read_source(const ByteSource& source, std::uint64_t offset, std::span<char> into) {
  try {
    source.read(offset, std::as_writable_bytes(into));
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", source.name(), e.what()));
  }
}

// The current umask, for a temporary file that mkstemp() creates 0600.
mode_t current_umask() {
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return mask;
}

// A name in `directory` nobody has: "<directory>/.<base>.ckptfs-pack-<16 hex digits>".
std::string temporary_name(const std::string& directory, const std::string& base) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("{}/.{}.ckptfs-pack-{:016x}", directory, base, random());
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::optional<struct stat> check_output_name(const std::string& path, Overwrite overwrite) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::nullopt;  // nothing there (or the open says)
  if (overwrite == Overwrite::no) exists();
  if (S_ISLNK(st.st_mode)) return std::nullopt;  // the link is replaced, its target untouched
  if (!S_ISREG(st.st_mode)) {
    throw OutputError(ExitCode::usage,
                      fmt::format("{}, not a regular file: pack writes and replaces regular "
                                  "files only; name another OUT",
                                  file_kind_name(st.st_mode)));
  }
  struct stat directory {};
  if (st.st_uid != ::geteuid() && ::stat(directory_of(path).c_str(), &directory) == 0 &&
      (directory.st_mode & S_ISVTX) != 0 && (directory.st_mode & 022) != 0 &&
      st.st_uid != directory.st_uid) {
    throw OutputError(
        ExitCode::usage,
        fmt::format("owned by uid {} in a sticky directory others may write: whoever put it "
                    "there would be given the output (its owner and mode are kept), so pack does "
                    "not replace it; remove it first, or name another OUT",
                    st.st_uid));
  }
  return st;
}

mode_t permissions_of(std::span<const ByteSource* const> sources) {
  mode_t mode = 0666;
  bool any = false;
  for (const ByteSource* source : sources) {
    struct stat st {};
    if (source && source->fd() >= 0 && ::fstat(source->fd(), &st) == 0) {
      mode = any ? mode & st.st_mode : st.st_mode;
      any = true;
    }
  }
  return mode & 0777;
}

OutputFile::OutputFile(std::string path, Overwrite overwrite, mode_t mode)
    : path_(std::move(path)), overwrite_(overwrite), buffer_(buffer_bytes) {
  const auto slash = path_.rfind('/');
  directory_ = directory_of(path_);
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  // The regular file this one replaces, whose mode, owner and group it takes (not those of what
  // a link leads to: the link is replaced, and whoever made it does not choose them).
  const std::optional<struct stat> replaced = check_output_name(path_, overwrite_);
  mode &= 0777;
  int fd = ::open(directory_.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No unnamed files here (an older kernel, some network and FUSE file systems).
    temporary_ = temporary_name(directory_, base);
    std::string pattern = temporary_ + "XXXXXX";  // and mkstemp's own six
    fd = ::mkstemp(pattern.data());
    if (fd >= 0) {
      temporary_ = pattern;
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      if (::fchmod(fd, mode & ~current_umask()) != 0) {
        const int error = errno;
        ::close(fd);
        ::unlink(temporary_.c_str());
        errno = error;
        fail_errno("cannot create it");
      }
    }
  }
  if (fd < 0) fail_errno("cannot create it");
  fd_ = UniqueFd(fd);
  if (replaced) keep_mode_of(*replaced);
}

void OutputFile::keep_mode_of(const struct stat& replaced) {
  struct stat mine {};
  if (::fstat(fd_.get(), &mine) != 0) fail_errno("cannot create it");
  mode_t mode = replaced.st_mode & 0777;
  if (mine.st_uid != replaced.st_uid || mine.st_gid != replaced.st_gid) {
    // Only root may give a file away; a group may be set by its members. Each is tried alone.
    if (mine.st_uid != replaced.st_uid && ::fchown(fd_.get(), replaced.st_uid, -1) == 0) {
      mine.st_uid = replaced.st_uid;
    }
    if (mine.st_gid != replaced.st_gid && ::fchown(fd_.get(), -1, replaced.st_gid) == 0) {
      mine.st_gid = replaced.st_gid;
    }
    if (mine.st_gid != replaced.st_gid) mode &= ~mode_t{0070};  // not that group's file
  }
  if (::fchmod(fd_.get(), mode) != 0) fail_errno("cannot create it");
}

OutputFile::~OutputFile() {
  if (!committed_) discard();
}

void OutputFile::discard() noexcept {
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
  fd_ = UniqueFd();
}

void OutputFile::write(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("write failed");
    bytes.remove_prefix(static_cast<std::size_t>(n));
    size_ += static_cast<std::uint64_t>(n);
  }
  if (on_written_) on_written_(size_);
}

void OutputFile::copy(const ByteSource& source, std::uint64_t offset, std::uint64_t length) {
  if (!source.contains(offset, length)) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("{}: file is truncated: needs bytes {}..{} but has {}", source.name(),
                            offset, offset + length, source.size()));
  }
  const int in = source.fd();
  // copy_file_range first (in-kernel; a reflink on file systems that share extents), then
  // sendfile where the two files are on different kinds of file system, then the buffer. Bytes
  // of a zip record checked against its CRC-32 go through the buffer, which checks them.
  bool kernel_copy = in >= 0;
  try {
    kernel_copy = kernel_copy && !source.needs_read(offset, length);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", source.name(), e.what()));
  }
  bool use_sendfile = false;
  while (length > 0 && kernel_copy) {
    // Watched, a call copies less: progress moves as the bytes do.
    const std::size_t want = static_cast<std::size_t>(
        std::min<std::uint64_t>(length, on_written_ ? watched_copy_bytes : 1u << 30));
    ssize_t n;
    if (!use_sendfile) {
      auto at = static_cast<loff_t>(offset);
      n = ::copy_file_range(in, &at, fd_.get(), nullptr, want, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
                    errno == EBADF)) {
        use_sendfile = true;
        continue;
      }
    } else {
      auto at = static_cast<off_t>(offset);
      n = ::sendfile(fd_.get(), in, &at, want);
      if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
        break;  // the buffer copies the rest
      }
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_errno("copy failed");
    if (n == 0) {
      throw Error(ExitCode::io, fmt::format("{}: file shrank while being read (at offset {})",
                                            source.name(), offset));
    }
    offset += static_cast<std::uint64_t>(n);
    length -= static_cast<std::uint64_t>(n);
    size_ += static_cast<std::uint64_t>(n);
    if (on_written_) on_written_(size_);
  }
  while (length > 0) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(length, buffer_.size()));
    read_source(source, offset, {buffer_.data(), n});
    write({buffer_.data(), n});
    offset += n;
    length -= n;
  }
}

std::uint32_t OutputFile::copy_with_crc(const ByteSource& source, std::uint64_t offset,
                                        std::uint64_t length, std::uint32_t crc) {
  while (length > 0) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(length, buffer_.size()));
    read_source(source, offset, {buffer_.data(), n});
    crc = crc32(crc, buffer_.data(), n);
    write({buffer_.data(), n});
    offset += n;
    length -= n;
  }
  return crc;
}

void OutputFile::commit() {
  try {
    if (::fsync(fd_.get()) != 0) fail_errno("fsync failed");
    if (temporary_.empty()) {
      // The unnamed file gets a name: directly its own, which fails if one appeared meanwhile;
      // with Overwrite::yes a temporary one first, then renamed over it.
      const std::string self = fmt::format("/proc/self/fd/{}", fd_.get());
      auto link_to = [&](const std::string& name) {
        if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
          return 0;
        }
        // Without /proc, AT_EMPTY_PATH (which needs CAP_DAC_READ_SEARCH).
        if (errno == ENOENT &&
            ::linkat(fd_.get(), "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0) {
          return 0;
        }
        return errno;
      };
      if (overwrite_ == Overwrite::no) {
        if (const int error = link_to(path_); error != 0) {
          if (error == EEXIST) exists();
          errno = error;
          fail_errno("cannot name it");
        }
      } else {
        const auto slash = path_.rfind('/');
        const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
        std::string named;
        int error = EEXIST;
        for (int attempt = 0; attempt < 16 && error == EEXIST; ++attempt) {
          named = temporary_name(directory_, base);
          error = link_to(named);
        }
        if (error != 0) {
          errno = error;
          fail_errno("cannot name it");
        }
        if (::rename(named.c_str(), path_.c_str()) != 0) {
          const int rename_error = errno;
          ::unlink(named.c_str());
          errno = rename_error;
          fail_errno("cannot name it");
        }
      }
    } else {
      if (overwrite_ == Overwrite::no) {
        // link() never replaces: a file that appeared meanwhile stays, and this one is refused.
        if (::link(temporary_.c_str(), path_.c_str()) != 0) {
          if (errno == EEXIST) exists();
          fail_errno("cannot name it");
        }
        ::unlink(temporary_.c_str());
      } else if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
        fail_errno("cannot name it");
      }
      temporary_.clear();
    }
    committed_ = true;
  } catch (...) {
    discard();
    throw;
  }
  // The name is durable once the directory is: a crash right after still finds the file whole.
  const int dir = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    const int synced = ::fsync(dir);
    const int error = errno;
    ::close(dir);
    if (synced != 0 && error != EINVAL) {
      errno = error;
      fail_errno("fsync of its directory failed");
    }
  }
  fd_ = UniqueFd();
}

}  // namespace ckptfs
