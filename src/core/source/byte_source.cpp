// SPDX-License-Identifier: MIT
// FileSource (pread) and MemorySource, with the range checks shared by both, and the record
// checks every source applies to what it reads.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/open_file.hpp>
#include <ckptfs/source/record_checks.hpp>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ckptfs {

void ByteSource::require_range(std::uint64_t offset, std::uint64_t length) const {
  if (!contains(offset, length)) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("file is truncated: needs bytes {}..{} but has {}", offset,
                            offset + length, size()));
  }
}

void ByteSource::read(std::uint64_t offset, std::span<std::byte> out) const {
  require_range(offset, out.size());
  if (out.empty()) return;
  read_in_range(offset, out);
  if (checks_) checks_->observe(offset, out, read_rest());
}

void ByteSource::read_unchecked(std::uint64_t offset, std::span<std::byte> out) const {
  require_range(offset, out.size());
  if (!out.empty()) read_in_range(offset, out);
}

bool ByteSource::lend(std::uint64_t offset, std::size_t length,
                      std::vector<std::span<const std::byte>>& spans,
                      std::vector<Pin>& pins) const {
  require_range(offset, length);
  const std::size_t first = spans.size();
  if (length != 0 && !lend_in_range(offset, length, spans, pins)) return false;
  if (checks_) {
    std::uint64_t at = offset;
    for (std::size_t i = first; i < spans.size(); ++i) {
      checks_->observe(at, spans[i], read_rest());
      at += spans[i].size();
    }
  }
  return true;
}

std::function<void(std::uint64_t, std::span<std::byte>)> ByteSource::read_rest() const {
  return [this](std::uint64_t offset, std::span<std::byte> out) { read_in_range(offset, out); };
}

void ByteSource::check_records(std::shared_ptr<const RecordChecks> checks) noexcept {
  checks_ = std::move(checks);
}

bool ByteSource::needs_read(std::uint64_t offset, std::uint64_t length) const {
  return checks_ && length != 0 && checks_->needs_read(offset, length);
}

void ByteSource::verify(std::uint64_t offset, std::uint64_t length) const {
  require_range(offset, length);
  if (checks_ && length != 0) checks_->verify(offset, length, read_rest());
}

std::string ByteSource::read_string(std::uint64_t offset, std::size_t length) const {
  require_range(offset, length);
  std::string s(length, '\0');
  read(offset, std::as_writable_bytes(std::span(s)));
  return s;
}

FileSource::FileSource(const std::string& path) : path_(path) {
  OpenedFile file = open_file(path, FileKind::regular);
  identity_ = file_identity(file.st);
  const auto slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "."
                                : slash == 0               ? "/"
                                                           : path.substr(0, slash);
  name_ = slash == std::string::npos ? path : path.substr(slash + 1);
  // O_PATH never opens the directory itself (nothing to wait for, no read permission needed).
  directory_fd_ = ::open(directory.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  lookup_path_ = path;
  if (directory_fd_ < 0 && !path.starts_with("/")) {
    // unchanged() then stats the path itself, which must not depend on the working directory
    // (a daemon changes it to "/").
    if (char* cwd = ::getcwd(nullptr, 0)) {
      lookup_path_ = std::string(cwd) + "/" + path;
      std::free(cwd);
    }
  }
  fd_ = file.fd.release();
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
  if (directory_fd_ >= 0) ::close(directory_fd_);
}

namespace {
bool newer(std::int64_t sec, std::int64_t nsec, std::int64_t than_sec, std::int64_t than_nsec) {
  return sec != than_sec ? sec > than_sec : nsec > than_nsec;
}
}  // namespace

void keep_newest(SourceTimes& newest, const SourceTimes& t) noexcept {
  if (newer(t.mtime_sec, t.mtime_nsec, newest.mtime_sec, newest.mtime_nsec)) {
    newest.mtime_sec = t.mtime_sec;
    newest.mtime_nsec = t.mtime_nsec;
  }
  if (newer(t.ctime_sec, t.ctime_nsec, newest.ctime_sec, newest.ctime_nsec)) {
    newest.ctime_sec = t.ctime_sec;
    newest.ctime_nsec = t.ctime_nsec;
  }
}

mode_t permission_bits(const ByteSource& source) noexcept {
  struct stat st {};
  if (source.fd() < 0 || ::fstat(source.fd(), &st) != 0) return 0777;
  return st.st_mode & 0777;
}

FileIdentity file_identity(const struct stat& st) noexcept {
  return {st.st_dev,         st.st_ino,          static_cast<std::uint64_t>(st.st_size),
          st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec,
          st.st_ctim.tv_nsec};
}

bool same_identity(const struct stat& st, const FileIdentity& id) noexcept {
  // Not the ctime: chmod, chown, a hard link or an atime update move it without touching a byte.
  return st.st_dev == id.device && st.st_ino == id.inode &&
         static_cast<std::uint64_t>(st.st_size) == id.size && st.st_mtim.tv_sec == id.mtime_sec &&
         st.st_mtim.tv_nsec == id.mtime_nsec;
}

void pread_exactly(int fd, std::uint64_t offset, std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(ExitCode::io, fmt::format("read failed: {}", std::strerror(errno)));
    if (n == 0) {
      throw Error(ExitCode::io,
                  fmt::format("file shrank while being read (at offset {})", offset + done));
    }
    done += static_cast<std::size_t>(n);
  }
}

bool FileSource::unchanged(bool check_path) const noexcept {
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !same_identity(st, identity_)) return false;
  if (!check_path) return true;
  const int found = directory_fd_ >= 0 ? ::fstatat(directory_fd_, name_.c_str(), &st, 0)
                                       : ::stat(lookup_path_.c_str(), &st);
  return found == 0 && same_identity(st, identity_);
}

void FileSource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  pread_exactly(fd_, offset, out);
}

void MemorySource::read_in_range(std::uint64_t offset, std::span<std::byte> out) const {
  std::memcpy(out.data(), bytes_.data() + offset, out.size());
}

}  // namespace ckptfs
