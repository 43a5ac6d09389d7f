// SPDX-License-Identifier: MIT
// Directory and DirectoryFileSource: openat2(RESOLVE_BENEATH) opens, a realpath() check where
// the kernel lacks openat2, a Hugging Face cache snapshot's links to its blobs, and listings
// classified beneath the directory.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/directory.hpp>

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace ckptfs {
namespace {

constexpr const char* escapes = "leads out of the directory (a symbolic link or \"..\")";

// The folder names of a hub cache's repositories: f"{repo_type}s--{org}--{name}"
// (huggingface_hub's repo_folder_name()).
constexpr std::array<std::string_view, 3> repository_prefixes = {"models--", "datasets--",
                                                                 "spaces--"};

// Set once openat2 is known to be missing (ENOSYS): the realpath() check is used from then on.
std::atomic<bool> without_openat2{false};

int open_retrying(int dir, const char* path, int flags) {
  int fd;
  do {
    fd = ::openat(dir, path, flags);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// The real path of what descriptor `fd` is open on (the kernel's name for it), "" when unknown.
std::string real_path_of(int fd) {
  const std::string link = fmt::format("/proc/self/fd/{}", fd);
  char target[PATH_MAX];
  const ssize_t n = ::readlink(link.c_str(), target, sizeof target);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target || target[0] != '/') return {};
  return std::string(target, static_cast<std::size_t>(n));
}

// The '/'-separated parts of `path`, without empty ones.
std::vector<std::string_view> parts_of(std::string_view path) {
  std::vector<std::string_view> parts;
  for (std::size_t at = 0; at <= path.size();) {
    std::size_t slash = path.find('/', at);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > at) parts.push_back(path.substr(at, slash - at));
    at = slash + 1;
  }
  return parts;
}

// `target` (relative) resolved from the absolute `base` by its text alone: "." dropped, ".."
// taking off the last part (never above "/").
std::string lexically_resolved(std::string_view base, std::string_view target) {
  std::vector<std::string_view> parts = parts_of(base);
  for (std::string_view part : parts_of(target)) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(part);
  }
  std::string out;
  for (std::string_view part : parts) (out += '/') += part;
  return out.empty() ? "/" : out;
}

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
UniqueFd open_strictly_beneath(int dir, const std::string& relative, std::uint64_t flags,
                               int& error) {
  if (relative.find('\0') != std::string::npos) {
    error = EINVAL;
    return {};
  }
  if (!without_openat2.load(std::memory_order_relaxed)) {
    struct open_how how {};
    how.flags = flags;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    long fd;
    do {
      fd = ::syscall(SYS_openat2, dir, relative.c_str(), &how, sizeof how);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno != ENOSYS) {
      error = errno;
      return {};
    }
    without_openat2.store(true, std::memory_order_relaxed);
  }
  const std::string path = resolved_inside(dir, relative, error);
  if (path.empty()) return {};
  const int fd = open_retrying(AT_FDCWD, path.c_str(), static_cast<int>(flags));
  if (fd < 0) {
    error = errno;
    return {};
  }
  return UniqueFd(fd);
}

// The blob a hub snapshot's file `relative` (beneath `dir`) links to, opened with `flags` in
// `repository` (whose real path is `repository_path`) when it is a link whose text, resolved
// lexically from the link's real directory, names a file directly in the repository's blobs/;
// -1 otherwise (the caller keeps its own error). Neither blobs/ nor the blob may be a link: they
// are opened without following one, so nothing here leads further than blobs/.
UniqueFd open_hub_blob(int dir, int repository, const std::string& repository_path,
                       const std::string& relative, std::uint64_t flags) {
  const auto slash = relative.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : relative.substr(0, slash);
  const std::string name = slash == std::string::npos ? relative : relative.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return {};
  int ignored = 0;
  const UniqueFd folder =
      open_strictly_beneath(dir, parent, O_PATH | O_DIRECTORY | O_CLOEXEC, ignored);
  if (folder.get() < 0) return {};
  char text[PATH_MAX];
  const ssize_t n = ::readlinkat(folder.get(), name.c_str(), text, sizeof text);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof text || text[0] == '/') return {};
  const std::string folder_path = real_path_of(folder.get());
  if (folder_path.empty()) return {};
  const std::string target =
      lexically_resolved(folder_path, std::string_view(text, static_cast<std::size_t>(n)));
  const std::string blobs = repository_path + "/blobs/";
  if (!target.starts_with(blobs) || target.find('/', blobs.size()) != std::string::npos ||
      target.size() == blobs.size()) {
    return {};
  }
  const int blobs_fd =
      open_retrying(repository, "blobs", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (blobs_fd < 0) return {};
  const UniqueFd blobs_dir(blobs_fd);
  // O_PATH | O_NOFOLLOW gives a link itself rather than failing: the caller's fstat() then
  // finds no regular file. Any other open of a link fails with ELOOP.
  const int fd = open_retrying(blobs_dir.get(), target.c_str() + blobs.size(),
                               static_cast<int>(flags) | O_NOFOLLOW);
  if (fd < 0) return {};
  UniqueFd blob(fd);
  struct stat st {};
  if (::fstat(blob.get(), &st) != 0 || S_ISLNK(st.st_mode)) return {};
  return blob;
}

const char* kind_problem(const struct stat& st, FileKind kind) {
  if (kind == FileKind::directory) return S_ISDIR(st.st_mode) ? "" : "not a directory";
  if (S_ISREG(st.st_mode)) return "";
  return S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file";
}

bool is_repository_folder(std::string_view name) {
  for (std::string_view prefix : repository_prefixes) {
    if (name.size() > prefix.size() && name.starts_with(prefix)) return true;
  }
  return false;
}

}  // namespace

Directory::Directory(std::string path) : path_(std::move(path)) {
  // O_PATH opens nothing (a FIFO would not wait), and only a directory opens with O_DIRECTORY.
  const int fd = open_retrying(AT_FDCWD, path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR) throw Error(ExitCode::io, "not a directory");
    throw Error(ExitCode::io, std::strerror(errno));
  }
  fd_ = UniqueFd(fd);
  // A hub cache snapshot: the last ".../<repository>/snapshots/<rev>" of the real path, the
  // directory being <rev> or a folder below it. Its repository folder is opened by climbing
  // from the directory itself, and must be the folder that path names.
  const std::string real = real_path_of(fd_.get());
  const std::vector<std::string_view> parts = parts_of(real);
  for (std::size_t i = parts.size(); i-- > 1;) {
    if (parts[i] != "snapshots" || i + 1 >= parts.size() || !is_repository_folder(parts[i - 1])) {
      continue;
    }
    std::string up = "..";
    for (std::size_t k = i + 1; k < parts.size(); ++k) up += "/..";
    std::string repository_path;
    for (std::size_t k = 0; k < i; ++k) (repository_path += '/') += parts[k];
    const int repository = open_retrying(fd_.get(), up.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (repository < 0) break;
    UniqueFd opened(repository);
    if (real_path_of(opened.get()) == repository_path) {
      repository_ = std::move(opened);
      repository_path_ = std::move(repository_path);
    }
    break;
  }
}

UniqueFd Directory::open_beneath(const std::string& relative, std::uint64_t flags,
                                 int& error) const {
  UniqueFd fd = open_strictly_beneath(fd_.get(), relative, flags, error);
  if (fd.get() < 0 && error == EXDEV && in_hub_snapshot()) {
    UniqueFd blob = open_hub_blob(fd_.get(), repository_.get(), repository_path_, relative, flags);
    if (blob.get() >= 0) return blob;
  }
  return fd;
}

void Directory::fail_open(int error) const {
  // EXDEV: the path leaves the directory; ELOOP: a loop of links, or a magic link refused.
  if (error == EXDEV) {
    if (!in_hub_snapshot()) throw Error(ExitCode::bad_checkpoint, escapes);
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("{}: in a Hugging Face cache snapshot only a link to a regular file "
                            "of its own repository's blobs/ is followed",
                            escapes));
  }
  if (error == ELOOP) {
    throw Error(ExitCode::bad_checkpoint,
                "leads through a loop of symbolic links or a /proc magic link");
  }
  if (error == EINVAL) throw Error(ExitCode::bad_checkpoint, "a path with a NUL byte");
  throw Error(ExitCode::io, std::strerror(error));
}

int Directory::look(std::string_view relative_view, struct stat& st) const noexcept {
  try {
    int error = 0;
    const std::string relative(relative_view.empty() ? "." : relative_view);
    const UniqueFd path = open_beneath(relative, O_PATH | O_CLOEXEC, error);
    if (path.get() < 0) return error;
    if (::fstat(path.get(), &st) != 0) return errno;
    return 0;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
}

OpenedFile Directory::open(std::string_view relative_view, FileKind kind) const {
  const std::string relative(relative_view.empty() ? "." : relative_view);
  // First an O_PATH descriptor, which opens nothing, to look at what the path is: a FIFO or a
  // device is refused before any open that could wait or act.
  struct stat looked {};
  if (int error = look(relative, looked)) fail_open(error);
  if (const char* problem = kind_problem(looked, kind); *problem) {
    throw Error(ExitCode::io, problem);
  }
  std::uint64_t flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  if (kind == FileKind::directory) flags |= O_DIRECTORY;
  int error = 0;
  OpenedFile out;
  out.fd = open_beneath(relative, flags, error);
  if (out.fd.get() < 0) fail_open(error);
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
  return look(relative, st) == 0 && *kind_problem(st, kind) == '\0';
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
      if (e->d_type == DT_DIR || e->d_type == DT_REG) {
        // The entry's own kind (no link to follow): no stat, which would wait for ever on a
        // FUSE mount that is not served yet (a mountpoint in the directory: mount.fuse3 -o
        // drop_privileges mounts before ckptfs reads the checkpoint beside it).
        entry.directory = e->d_type == DT_DIR;
        entry.regular = e->d_type == DT_REG;
      } else {  // a link, or a file system that does not say (DT_UNKNOWN)
        struct stat st {};
        entry.error = look(prefix + entry.name, st);
        if (entry.error == 0) {
          entry.directory = S_ISDIR(st.st_mode);
          entry.regular = S_ISREG(st.st_mode);
        }
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
  return directory_->look(relative_, st) == 0 && same_identity(st, identity_);
}

void DirectoryFileSource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  pread_exactly(fd_.get(), offset, out);
}

}  // namespace ckptfs
