// SPDX-License-Identifier: MIT
// DiskCache: the cache's directories and their trust, block files with their headers and
// checksums, and trimming to the limit; everything below the root by descriptor, never by path.
#include <ckptfs/source/disk_cache.hpp>

#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/sha256.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/source/open_file.hpp>

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <utility>
#include <vector>

namespace ckptfs {
namespace {

constexpr char magic[8] = {'C', 'K', 'P', 'T', 'F', 'S', 'B', '1'};
constexpr std::size_t header_size = 32;
constexpr const char* blocks_folder = "ckptfs-blocks-v1";
constexpr std::size_t folder_name_length = 16;  // hex digits of the key's hash
// Temporary files older than this were left by a process that died while writing.
constexpr std::time_t stale_seconds = 3600;

void put_le(unsigned char* at, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}
std::uint64_t get_le(const unsigned char* at, int width) {
  std::uint64_t value = 0;
  for (int i = width; i-- > 0;) value = (value << 8) | at[i];
  return value;
}

std::uint32_t checksum(std::span<const std::byte> bytes) {
  return crc32(0, bytes.data(), bytes.size());
}

bool read_all(int fd, void* out, std::size_t length, off_t offset) {
  auto* p = static_cast<char*>(out);
  while (length > 0) {
    ssize_t n = ::pread(fd, p, length, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    length -= static_cast<std::size_t>(n);
    offset += n;
  }
  return true;
}

bool write_all(int fd, const void* data, std::size_t length) {
  const auto* p = static_cast<const char*>(data);
  while (length > 0) {
    ssize_t n = ::write(fd, p, length);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    length -= static_cast<std::size_t>(n);
  }
  return true;
}

class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_;
};

// What the cache makes itself: a `type` (S_IFDIR, S_IFREG) owned by the user it runs as, that
// neither the group nor others may write.
bool own(const struct stat& st, mode_t type) {
  return (st.st_mode & S_IFMT) == type && st.st_uid == ::geteuid() && (st.st_mode & 022) == 0;
}

// Why `st` is not what own() wants, in words.
std::string why_not_own(const struct stat& st, mode_t type) {
  if ((st.st_mode & S_IFMT) != type) return file_kind_name(st.st_mode);
  if (st.st_uid != ::geteuid()) {
    return fmt::format("owned by uid {}, not by uid {} who runs ckptfs", st.st_uid, ::geteuid());
  }
  return fmt::format("writable by {} (mode {:04o})",
                     (st.st_mode & 002) != 0 ? "every user" : "its group", st.st_mode & 07777);
}

bool is_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "<16 hex digits>.blk"
bool is_block_name(std::string_view name) {
  return name.size() == 20 && name.ends_with(".blk") && is_hex(name.substr(0, 16));
}

std::string block_name(std::uint64_t index) { return fmt::format("{:016x}.blk", index); }

// Opens `name` in `dir` without following a link and without blocking; -1 with errno set
// (ELOOP for a link).
int open_file_in(int dir, const char* name, int flags) {
  return ::openat(dir, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
}

// The names in directory `dir` (a descriptor of it, kept open), "." and ".." left out.
std::vector<std::string> names_in(int dir) {
  std::vector<std::string> names;
  int fd = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // its own position
  if (fd < 0) return names;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return names;
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(d);
  return names;
}

// DIR itself: made when only its last component is missing, then opened (a link of the user's
// own to it is followed: what is checked is the directory opened) and checked. A link another
// user owns is refused, as the kernel's fs.protected_symlinks refuses one in a sticky directory:
// whoever made it chose which directory of the user's the cache's writes go to.
int open_root(const std::string& directory) {
  auto refuse = [&](const std::string& why) {
    return Error(ExitCode::usage, fmt::format("cache_dir={}: {}", quote(directory), why));
  };
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    if (errno == ENOENT) {
      const auto parent = std::filesystem::path(directory).parent_path().string();
      throw refuse(fmt::format(
          "its parent {} does not exist (ckptfs makes only the last component of cache_dir)",
          quote(parent)));
    }
    throw refuse(fmt::format("cannot make it: {}", std::strerror(errno)));
  }
  struct stat named {};
  if (::lstat(directory.c_str(), &named) == 0 && S_ISLNK(named.st_mode) &&
      named.st_uid != ::geteuid()) {
    throw refuse(fmt::format(
        "a symbolic link owned by uid {}, not by uid {} who runs ckptfs: another user may have "
        "made it to lead the cache into a directory of yours; name the directory itself",
        named.st_uid, ::geteuid()));
  }
  Fd fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) throw refuse(std::strerror(errno));
  return fd.release();
}

// Checks a directory of the cache's own (DIR or DIR/ckptfs-blocks-v1) at `fd`; throws refuse().
void check_trusted(int fd, const std::string& shown, const std::string& directory) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    throw Error(ExitCode::usage,
                fmt::format("cache_dir={}: {}: {}", quote(directory), shown, std::strerror(errno)));
  }
  if (!own(st, S_IFDIR)) {
    throw Error(ExitCode::usage,
                fmt::format("cache_dir={}: {} is {}: blocks there could be written or replaced by "
                            "others, so ckptfs keeps none there (use a directory of your own "
                            "that only you can write, e.g. under ~/.cache)",
                            quote(directory), shown, why_not_own(st, S_IFDIR)));
  }
  if (::faccessat(fd, ".", R_OK | W_OK | X_OK, AT_EACCESS) != 0) {
    throw Error(ExitCode::usage,
                fmt::format("cache_dir={}: {}: {}", quote(directory), shown, std::strerror(errno)));
  }
}

}  // namespace

class DiskCache::Folder {
 public:
  Folder(int fd, std::string name, int claims_fd)
      : fd_(fd), name_(std::move(name)), claims_fd_(claims_fd) {}
  ~Folder() {
    ::close(fd_);
    if (claims_fd_ >= 0) ::close(claims_fd_);  // drops every claim of this process in it
  }
  Folder(const Folder&) = delete;
  Folder& operator=(const Folder&) = delete;
  int fd() const noexcept { return fd_; }
  const std::string& name() const noexcept { return name_; }
  int claims_fd() const noexcept { return claims_fd_; }

 private:
  int fd_;
  std::string name_;  // its name in ckptfs-blocks-v1
  int claims_fd_;     // the folder's `claims` file, read-write; -1: none usable
};

DiskCache::DiskCache(const std::string& directory, std::uint64_t limit, Warn warn)
    : directory_(directory), limit_(limit), warn_(std::move(warn)) {
  Fd dir(open_root(directory));
  check_trusted(dir.get(), "it", directory);
  if (::mkdirat(dir.get(), blocks_folder, 0700) != 0 && errno != EEXIST) {
    throw Error(ExitCode::usage, fmt::format("cache_dir={}: cannot make {}: {}", quote(directory),
                                             blocks_folder, std::strerror(errno)));
  }
  Fd root(::openat(dir.get(), blocks_folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) {
    const int error = errno;
    struct stat st {};
    std::string why = fmt::format("{}: {}", blocks_folder, std::strerror(error));
    if (::fstatat(dir.get(), blocks_folder, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        !S_ISDIR(st.st_mode)) {
      why = fmt::format("{} is {}, not a directory{}", blocks_folder, file_kind_name(st.st_mode),
                        S_ISLNK(st.st_mode) ? " (ckptfs never follows a link in its cache)" : "");
    }
    throw Error(ExitCode::usage, fmt::format("cache_dir={}: {}", quote(directory), why));
  }
  check_trusted(root.get(), blocks_folder, directory);
  root_fd_ = root.release();
}

DiskCache::~DiskCache() {
  if (root_fd_ >= 0) ::close(root_fd_);
}

void DiskCache::ignore(const std::string& what) {
  if (!warn_ || warned_.exchange(true)) return;
  try {
    warn_(
        fmt::format("cache_dir={}: ignoring {}: the cache never follows, reads or deletes what "
                    "it did not make itself (said once)",
                    quote(directory_), what));
  } catch (...) {
    // a warning that cannot be given changes nothing
  }
}

std::shared_ptr<const DiskCache::Folder> DiskCache::object_folder(std::string_view key) {
  const std::string digest = sha256_hex(key);
  const std::string name = digest.substr(0, folder_name_length);
  const std::string shown = fmt::format("{}/{}", blocks_folder, name);
  if (::mkdirat(root_fd_, name.c_str(), 0700) != 0 && errno != EEXIST) return nullptr;
  Fd folder(::openat(root_fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!folder) {
    if (errno == ELOOP || errno == ENOTDIR) {
      if (::fstatat(root_fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        ignore(fmt::format("{} ({})", shown, file_kind_name(st.st_mode)));
      }
    }
    return nullptr;
  }
  if (::fstat(folder.get(), &st) != 0) return nullptr;
  if (!own(st, S_IFDIR)) {
    ignore(fmt::format("{} ({})", shown, why_not_own(st, S_IFDIR)));
    return nullptr;
  }
  // The key file holds the digest, which tells two keys of the same folder name apart.
  const std::string content = digest + "\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    Fd fd(open_file_in(folder.get(), "key", O_RDONLY));
    if (fd) {
      std::string stored(content.size() + 1, '\0');
      if (::fstat(fd.get(), &st) != 0) return nullptr;
      if (!own(st, S_IFREG)) {
        ignore(fmt::format("{}/key ({})", shown, why_not_own(st, S_IFREG)));
        return nullptr;
      }
      const ssize_t n = ::pread(fd.get(), stored.data(), stored.size(), 0);
      if (n != static_cast<ssize_t>(content.size()) ||
          stored.compare(0, content.size(), content) != 0) {
        return nullptr;  // another key's folder (or one torn by a crash): this object goes without
      }
      const int claims = open_claims(folder.get(), shown);
      return std::make_shared<const Folder>(folder.release(), name, claims);
    }
    if (errno != ENOENT) {
      if (::fstatat(folder.get(), "key", &st, AT_SYMLINK_NOFOLLOW) == 0) {
        ignore(fmt::format("{}/key ({})", shown, file_kind_name(st.st_mode)));
      }
      return nullptr;
    }
    // Written whole under a temporary name, then linked into place: linkat() fails when another
    // mount linked its own first, whose key is then read above.
    const std::string temporary = fmt::format(".key.{}.{}", ::getpid(), ++sequence_);
    Fd out(::openat(folder.get(), temporary.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return nullptr;
    const bool written = write_all(out.get(), content.data(), content.size());
    out = Fd();
    const bool linked =
        written && ::linkat(folder.get(), temporary.c_str(), folder.get(), "key", 0) == 0;
    ::unlinkat(folder.get(), temporary.c_str(), 0);
    if (linked) {
      const int claims = open_claims(folder.get(), shown);
      return std::make_shared<const Folder>(folder.release(), name, claims);
    }
    if (!written) return nullptr;
  }
  return nullptr;
}

int DiskCache::open_claims(int folder, const std::string& shown) {
  Fd fd(open_file_in(folder, "claims", O_RDWR | O_CREAT));
  struct stat st {};
  if (!fd) {
    if (errno == ELOOP) ignore(fmt::format("{}/claims (a symbolic link)", shown));
    return -1;
  }
  if (::fstat(fd.get(), &st) != 0) return -1;
  if (!own(st, S_IFREG)) {
    ignore(fmt::format("{}/claims ({})", shown, why_not_own(st, S_IFREG)));
    return -1;
  }
  return fd.release();
}

namespace {

// An F_OFD_SETLK request on byte `index` of a claims file.
bool lock_byte(int fd, std::uint64_t index, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = static_cast<off_t>(index & 0x3fffffffffffffffull);
  lock.l_len = 1;
  while (true) {
    if (::fcntl(fd, F_OFD_SETLK, &lock) == 0) return true;
    if (errno != EINTR) return false;
  }
}

}  // namespace

DiskCache::Claim DiskCache::claim(const Folder& folder, std::uint64_t index) {
  if (folder.claims_fd() < 0) return Claim::mine;
  if (lock_byte(folder.claims_fd(), index, F_WRLCK)) return Claim::mine;
  // EAGAIN/EACCES: another process holds it. Anything else (no locks on this file system):
  // nothing is shared.
  return errno == EAGAIN || errno == EACCES ? Claim::theirs : Claim::mine;
}

void DiskCache::release(const Folder& folder, std::uint64_t index) {
  if (folder.claims_fd() >= 0) lock_byte(folder.claims_fd(), index, F_UNLCK);
}

bool DiskCache::load(const Folder& folder, std::uint64_t index, std::span<std::byte> out) {
  const std::string name = block_name(index);
  Fd fd(open_file_in(folder.fd(), name.c_str(), O_RDONLY));
  struct stat st {};
  if (!fd) {
    if (errno == ELOOP)
      ignore(fmt::format("{}/{}/{} (a symbolic link)", blocks_folder, folder.name(), name));
    return false;
  }
  if (::fstat(fd.get(), &st) != 0) return false;
  if (!own(st, S_IFREG)) {
    ignore(
        fmt::format("{}/{}/{} ({})", blocks_folder, folder.name(), name, why_not_own(st, S_IFREG)));
    return false;
  }
  unsigned char header[header_size];
  const bool ok = static_cast<std::uint64_t>(st.st_size) == header_size + out.size() &&
                  read_all(fd.get(), header, header_size, 0) &&
                  std::memcmp(header, magic, 8) == 0 && get_le(header + 8, 8) == index &&
                  get_le(header + 16, 8) == out.size() &&
                  read_all(fd.get(), out.data(), out.size(), header_size) &&
                  get_le(header + 24, 4) == checksum(out);
  if (ok) (void)::futimens(fd.get(), nullptr);  // recently used: trimmed last
  return ok;
}

void DiskCache::store(const Folder& folder, std::uint64_t index, std::span<const std::byte> bytes) {
  unsigned char header[header_size] = {};
  std::memcpy(header, magic, 8);
  put_le(header + 8, index, 8);
  put_le(header + 16, bytes.size(), 8);
  put_le(header + 24, checksum(bytes), 4);
  const std::string temporary = fmt::format(".tmp.{}.{}", ::getpid(), sequence_.fetch_add(1));
  Fd fd(::openat(folder.fd(), temporary.c_str(),
                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  const bool written =
      write_all(fd.get(), header, header_size) && write_all(fd.get(), bytes.data(), bytes.size());
  fd = Fd();
  // renameat() replaces whatever has the block's name (a link is replaced, never followed).
  if (!written ||
      ::renameat(folder.fd(), temporary.c_str(), folder.fd(), block_name(index).c_str()) != 0) {
    ::unlinkat(folder.fd(), temporary.c_str(), 0);
    return;
  }
  const std::uint64_t total =
      estimate_.fetch_add(header_size + bytes.size()) + header_size + bytes.size();
  if (!counted_.load() || total > limit_) trim();
}

void DiskCache::trim() {
  std::unique_lock lock(trim_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread trims now
  struct File {
    std::int64_t mtime;
    std::uint64_t size;
    std::string folder;
    std::string name;
    ino_t inode;
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  const std::time_t now = ::time(nullptr);
  auto open_folder = [&](const std::string& name) {
    Fd folder(::openat(root_fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!folder && errno == ELOOP) {
      ignore(fmt::format("{}/{} (a symbolic link)", blocks_folder, name));
    } else if (folder && (::fstat(folder.get(), &st) != 0 || !own(st, S_IFDIR))) {
      ignore(fmt::format("{}/{} ({})", blocks_folder, name, why_not_own(st, S_IFDIR)));
      return Fd();
    }
    return folder;
  };
  for (const std::string& folder_name : names_in(root_fd_)) {
    if (folder_name.size() != folder_name_length || !is_hex(folder_name)) continue;
    Fd folder = open_folder(folder_name);
    if (!folder) continue;
    for (const std::string& name : names_in(folder.get())) {
      struct stat st {};
      if (::fstatat(folder.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      if (!own(st, S_IFREG)) continue;
      if ((name.starts_with(".tmp.") || name.starts_with(".key.")) &&
          now - st.st_mtime > stale_seconds) {
        ::unlinkat(folder.get(), name.c_str(), 0);  // left by a process that died while writing
        continue;
      }
      if (!is_block_name(name)) continue;
      files.push_back(
          {st.st_mtime, static_cast<std::uint64_t>(st.st_size), folder_name, name, st.st_ino});
      total += static_cast<std::uint64_t>(st.st_size);
    }
  }
  if (total > limit_) {
    std::sort(files.begin(), files.end(),
              [](const File& a, const File& b) { return a.mtime < b.mtime; });
    const std::uint64_t target = limit_ / 10 * 9;
    for (const File& f : files) {
      if (total <= target) break;
      // Deleted only once it is seen to be the file listed, and a block this cache wrote.
      Fd folder = open_folder(f.folder);
      if (!folder) continue;
      Fd fd(open_file_in(folder.get(), f.name.c_str(), O_RDONLY));
      struct stat st {};
      char head[sizeof magic];
      if (!fd || ::fstat(fd.get(), &st) != 0 || !own(st, S_IFREG) || st.st_ino != f.inode ||
          !read_all(fd.get(), head, sizeof head, 0) || std::memcmp(head, magic, sizeof head) != 0) {
        continue;
      }
      if (::unlinkat(folder.get(), f.name.c_str(), 0) == 0 || errno == ENOENT) total -= f.size;
    }
  }
  estimate_ = total;
  counted_ = true;
}

}  // namespace ckptfs
