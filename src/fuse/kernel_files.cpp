// SPDX-License-Identifier: MIT
// read_kernel_file() and write_kernel_file(): open, read or write, close, retried on EINTR.
#include "kernel_files.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>

namespace ckptfs::fuse {
namespace {

class Descriptor {
 public:
  explicit Descriptor(int fd) noexcept : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) {
      const int saved = errno;
      ::close(fd_);
      errno = saved;
    }
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::optional<std::string> read_kernel_file(const std::string& path, std::size_t max_bytes) {
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  std::string out;
  char chunk[4096];
  while (out.size() < max_bytes) {
    const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    out.append(chunk, std::min(static_cast<std::size_t>(n), max_bytes - out.size()));
  }
  return out;
}

std::optional<std::uint64_t> read_kernel_number(const std::string& path) noexcept {
  try {
    const auto text = read_kernel_file(path, 64);
    std::uint64_t value = 0;
    if (text &&
        std::from_chars(text->data(), text->data() + text->size(), value).ec == std::errc{}) {
      return value;
    }
  } catch (const std::bad_alloc&) {
  }
  return std::nullopt;
}

bool write_kernel_file(const std::string& path, const std::string& text) {
  Descriptor fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  ssize_t n;
  do {
    n = ::write(fd.get(), text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return false;
  if (static_cast<std::size_t>(n) != text.size()) {
    errno = EIO;
    return false;
  }
  return true;
}

}  // namespace ckptfs::fuse
