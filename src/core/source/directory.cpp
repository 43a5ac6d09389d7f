// SPDX-License-Identifier: MIT
// Directory and DirectoryFileSource: openat2(RESOLVE_BENEATH) opens, a realpath() check where
// the kernel lacks openat2, and listings classified beneath the directory.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/directory.hpp>

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace ckptfs {
namespace {

constexpr const char* escapes = "leads out of the directory (a symbolic link or \"..\")";

// Set once openat2 is known to be missing (ENOSYS): the realpath() check is used from then on.
std::atomic<bool> without_openat2{false};

// What an open beneath the directory gave: a descriptor, or the errno of the failure.
struct Attempt {
  UniqueFd fd;
  int error = 0;
};

// The path an open beneath `dir` resolves to through realpath(), when it lies inside the
// directory; the directory is named by its descriptor so that the working directory does not
// matter. Empty with `error` set otherwise (EXDEV: outside).
std::string resolved_inside(int dir, const std::string& relative, int& error) {
  const std::string base = fmt::format("/proc/self/fd/{}", dir);
  char root[PATH_MAX];
  char target[PATH_MAX];
  if (::realpath(base.c_str(), root) == nullptr ||
      ::realpath((base + "/" + relative).c_str(), target) == nullptr) {
    error = errno;
    return {};
  }
  const std::string_view inside(root);
  const std::string_view path(target);
  if (path != inside &&
      !(path.starts_with(inside) && (inside == "/" || path[inside.size()] == '/'))) {
    error = EXDEV;
    return {};
  }
  return std::string(path);
}

// An open of `relative` beneath `dir` that never resolves outside it: openat2 with
// RESOLVE_BENEATH (and no magic links), else a realpath() check and an ordinary open.
Attempt open_beneath(int dir, const std::string& relative, std::uint64_t flags) {
  Attempt out;
  if (relative.find('\0') != std::string::npos) {
    out.error = EINVAL;
    return out;
  }
  if (!without_openat2.load(std::memory_order_relaxed)) {
    struct open_how how {};
    how.flags = flags;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    long fd;
    do {
      fd = ::syscall(SYS_openat2, dir, relative.c_str(), &how, sizeof how);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) {
      out.fd = UniqueFd(static_cast<int>(fd));
      return out;
    }
    if (errno != ENOSYS) {
      out.error = errno;
      return out;
    }
    without_openat2.store(true, std::memory_order_relaxed);
  }
  const std::string path = resolved_inside(dir, relative, out.error);
  if (path.empty()) return out;
  int fd;
  do {
    fd = ::open(path.c_str(), static_cast<int>(flags));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    out.error = errno;
  } else {
    out.fd = UniqueFd(fd);
  }
  return out;
}

[[noreturn]] void fail_open(int error) {
  // EXDEV: the path leaves the directory; ELOOP: a loop of links, or a magic link refused.
  if (error == EXDEV) throw Error(ExitCode::bad_checkpoint, escapes);
  if (error == ELOOP) {
    throw Error(ExitCode::bad_checkpoint,
                "leads through a loop of symbolic links or a /proc magic link");
  }
  if (error == EINVAL) throw Error(ExitCode::bad_checkpoint, "a path with a NUL byte");
  throw Error(ExitCode::io, std::strerror(error));
}

const char* kind_problem(const struct stat& st, FileKind kind) {
  if (kind == FileKind::directory) return S_ISDIR(st.st_mode) ? "" : "not a directory";
  if (S_ISREG(st.st_mode)) return "";
  return S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file";
}

// fstat() of what `relative` names beneath `dir`, through an O_PATH descriptor (which opens
// nothing: a FIFO or a device is looked at, never opened). Returns the errno of a failure.
int stat_beneath(int dir, const std::string& relative, struct stat& st) {
  Attempt path = open_beneath(dir, relative, O_PATH | O_CLOEXEC);
  if (path.fd.get() < 0) return path.error;
  if (::fstat(path.fd.get(), &st) != 0) return errno;
  return 0;
}

}  // namespace

Directory::Directory(std::string path) : path_(std::move(path)) {
  fd_ = open_file(path_, FileKind::directory).fd;
}

OpenedFile Directory::open(std::string_view relative_view, FileKind kind) const {
  const std::string relative(relative_view.empty() ? "." : relative_view);
  // First an O_PATH descriptor, which opens nothing, to look at what the path is: a FIFO or a
  // device is refused before any open that could wait or act.
  struct stat looked {};
  if (int error = stat_beneath(fd(), relative, looked)) fail_open(error);
  if (const char* problem = kind_problem(looked, kind); *problem) {
    throw Error(ExitCode::io, problem);
  }
  std::uint64_t flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (kind == FileKind::directory) flags |= O_DIRECTORY;
  Attempt opened = open_beneath(fd(), relative, flags);
  if (opened.fd.get() < 0) fail_open(opened.error);
  OpenedFile out;
  out.fd = std::move(opened.fd);
  if (::fstat(out.fd.get(), &out.st) != 0) throw Error(ExitCode::io, std::strerror(errno));
  if (out.st.st_dev != looked.st_dev || out.st.st_ino != looked.st_ino) {
    throw Error(ExitCode::io, "changed while it was being opened");
  }
  const int status = ::fcntl(out.fd.get(), F_GETFL);
  if (status < 0 || ::fcntl(out.fd.get(), F_SETFL, status & ~O_NONBLOCK) != 0) {
    throw Error(ExitCode::io, std::strerror(errno));
  }
  return out;
}

bool Directory::has(std::string_view relative, FileKind kind) const {
  struct stat st {};
  return stat_beneath(fd(), std::string(relative.empty() ? "." : relative), st) == 0 &&
         *kind_problem(st, kind) == '\0';
}

std::vector<DirectoryEntry> Directory::list(std::string_view relative,
                                            std::size_t max_entries) const {
  OpenedFile opened = open(relative, FileKind::directory);
  DIR* d = ::fdopendir(opened.fd.get());
  if (d == nullptr) throw Error(ExitCode::io, std::strerror(errno));
  opened.fd.release();  // closedir() closes it
  const std::string prefix = relative.empty() ? std::string() : std::string(relative) + "/";
  std::vector<DirectoryEntry> out;
  try {
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      if (out.size() == max_entries) {
        throw Error(ExitCode::unsupported,
                    fmt::format("more than {} entries in a directory", max_entries));
      }
      DirectoryEntry entry{std::string(name), false, false, 0};
      struct stat st {};
      entry.error = stat_beneath(fd(), prefix + entry.name, st);
      if (entry.error == 0) {
        entry.directory = S_ISDIR(st.st_mode);
        entry.regular = S_ISREG(st.st_mode);
      }
      out.push_back(std::move(entry));
      errno = 0;
    }
    if (errno != 0) throw Error(ExitCode::io, std::strerror(errno));
  } catch (...) {
    ::closedir(d);
    throw;
  }
  ::closedir(d);
  return out;
}

DirectoryFileSource::DirectoryFileSource(std::shared_ptr<const Directory> directory,
                                         std::string relative)
    : directory_(std::move(directory)), relative_(std::move(relative)) {
  const std::string& base = directory_->path();
  name_ = base.ends_with('/') ? base + relative_ : base + "/" + relative_;
  OpenedFile file = directory_->open(relative_, FileKind::regular);
  identity_ = file_identity(file.st);
  fd_ = std::move(file.fd);
}

bool DirectoryFileSource::unchanged(bool check_path) const noexcept {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0 || !same_identity(st, identity_)) return false;
  if (!check_path) return true;
  return stat_beneath(directory_->fd(), relative_, st) == 0 && same_identity(st, identity_);
}

void DirectoryFileSource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  pread_exactly(fd_.get(), offset, out);
}

}  // namespace ckptfs
