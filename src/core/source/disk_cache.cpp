// SPDX-License-Identifier: MIT
// DiskCache: block files, their headers and checksums, and trimming to the limit.
#include "disk_cache.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace ckptfs::detail {
namespace {

namespace fs = std::filesystem;

constexpr char magic[8] = {'C', 'K', 'P', 'T', 'F', 'S', 'B', '1'};
constexpr std::size_t header_size = 32;

void put_le(unsigned char* at, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) at[i] = static_cast<unsigned char>(value >> (8 * i));
}
std::uint64_t get_le(const unsigned char* at, int width) {
  std::uint64_t value = 0;
  for (int i = width; i-- > 0;) value = (value << 8) | at[i];
  return value;
}

std::uint32_t checksum(std::span<const std::byte> bytes) {
  uLong crc = crc32_z(0, nullptr, 0);
  return static_cast<std::uint32_t>(
      crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
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

std::string block_name(std::uint64_t index) { return fmt::format("{:016x}.blk", index); }

}  // namespace

DiskCache::DiskCache(const std::string& directory, std::uint64_t limit) : limit_(limit) {
  std::error_code ec;
  root_ = (fs::path(directory) / "ckptfs-blocks-v1").string();
  fs::create_directories(root_, ec);
  if (ec || ::access(root_.c_str(), R_OK | W_OK | X_OK) != 0) {
    throw Error(ExitCode::usage,
                fmt::format("cache_dir={}: cannot use {}: {}", quote(directory), quote(root_),
                            ec ? ec.message() : std::strerror(errno)));
  }
}

std::string DiskCache::object_folder(const std::string& key) {
  std::string folder = fmt::format("{}/{:016x}", root_, fnv1a(key));
  const std::string key_file = folder + "/key";
  if (::mkdir(folder.c_str(), 0700) != 0 && errno != EEXIST) return {};
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(key_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string stored(key.size() + 1, '\0');
      ssize_t n = ::pread(fd, stored.data(), stored.size(), 0);
      ::close(fd);
      return n == static_cast<ssize_t>(key.size()) && stored.compare(0, key.size(), key) == 0
                 ? folder
                 : std::string{};
    }
    // Written whole under a temporary name, then linked into place: link() fails when another
    // mount linked its own first, whose key is then read above.
    const std::string temporary = fmt::format("{}/.key.{}.{}", folder, ::getpid(), ++sequence_);
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return {};
    const bool written = write_all(fd, key.data(), key.size());
    ::close(fd);
    const bool linked = written && ::link(temporary.c_str(), key_file.c_str()) == 0;
    ::unlink(temporary.c_str());
    if (linked) return folder;
    if (!written) return {};
  }
  return {};
}

bool DiskCache::load(const std::string& folder, std::uint64_t index, std::span<std::byte> out) {
  const std::string path = folder + "/" + block_name(index);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char header[header_size];
  struct stat st {};
  bool ok =
      ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) == header_size + out.size() &&
      read_all(fd, header, header_size, 0) && std::memcmp(header, magic, 8) == 0 &&
      get_le(header + 8, 8) == index && get_le(header + 16, 8) == out.size() &&
      read_all(fd, out.data(), out.size(), header_size) && get_le(header + 24, 4) == checksum(out);
  if (ok) (void)::futimens(fd, nullptr);  // recently used: trimmed last
  ::close(fd);
  return ok;
}

void DiskCache::store(const std::string& folder, std::uint64_t index,
                      std::span<const std::byte> bytes) {
  unsigned char header[header_size] = {};
  std::memcpy(header, magic, 8);
  put_le(header + 8, index, 8);
  put_le(header + 16, bytes.size(), 8);
  put_le(header + 24, checksum(bytes), 4);
  const std::string temporary =
      fmt::format("{}/.tmp.{}.{}", folder, ::getpid(), sequence_.fetch_add(1));
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const bool written =
      write_all(fd, header, header_size) && write_all(fd, bytes.data(), bytes.size());
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), (folder + "/" + block_name(index)).c_str()) != 0) {
    ::unlink(temporary.c_str());
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
    fs::path path;
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  const auto now = ::time(nullptr);
  std::error_code ec;
  for (fs::directory_iterator object(root_, ec), end; !ec && object != end; object.increment(ec)) {
    std::error_code inner;
    for (fs::directory_iterator it(object->path(), inner), stop; !inner && it != stop;
         it.increment(inner)) {
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (::stat(it->path().c_str(), &st) != 0) continue;
      if (name.starts_with(".tmp.") && now - st.st_mtime > 3600) {
        ::unlink(it->path().c_str());  // left by a process that died while writing
        continue;
      }
      if (!name.ends_with(".blk")) continue;
      files.push_back({st.st_mtime, static_cast<std::uint64_t>(st.st_size), it->path()});
      total += static_cast<std::uint64_t>(st.st_size);
    }
  }
  if (total > limit_) {
    std::sort(files.begin(), files.end(),
              [](const File& a, const File& b) { return a.mtime < b.mtime; });
    const std::uint64_t target = limit_ / 10 * 9;
    for (const File& f : files) {
      if (total <= target) break;
      if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) total -= f.size;
    }
  }
  estimate_ = total;
  counted_ = true;
}

}  // namespace ckptfs::detail
