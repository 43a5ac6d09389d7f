// SPDX-License-Identifier: MIT
// Opening a path the user named: the one way ckptfs opens one, which never waits and refuses
// any kind of file other than the one the caller reads.
#pragma once

#include <sys/stat.h>
#include <string>
#include <utility>

namespace ckptfs {

// An open descriptor, closed when this goes; -1 when empty.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const noexcept { return fd_; }
  // Gives the descriptor up to the caller, who closes it.
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

enum class FileKind {
  regular,    // a regular file, opened O_RDONLY: a checkpoint, a shard, an index.json
  directory,  // a directory, opened O_RDONLY | O_DIRECTORY: a folder of shards
};

struct OpenedFile {
  UniqueFd fd;
  struct stat st {};  // fstat() of `fd`
};

// Opens `path` (symlinks followed) read-only and close-on-exec, when it is a file of `kind`.
//
// Never waits and never opens anything else: the path is stat()ed first, and what is not of
// `kind` (a FIFO, whose open waits for a writer; a socket; a character or block device, whose
// open may wait or act, as a tape rewinding; a directory where a file is wanted) is refused
// before any open. The open itself is O_NONBLOCK, in case the path was replaced by a FIFO in
// between, and the descriptor's own fstat() is checked again; O_NONBLOCK is then cleared.
//
// Throws Error(ExitCode::io) with a message without the path (the caller names it):
// "is a directory" (a directory where a file is wanted), "not a regular file", "not a
// directory", or strerror() of the failing call ("No such file or directory"...).
OpenedFile open_file(const std::string& path, FileKind kind);

// What kind of file `mode` (a stat's st_mode) is, in words for a message: "a regular file", "a
// directory", "a symbolic link", "a FIFO", "a socket", "a character device", "a block device".
const char* file_kind_name(mode_t mode) noexcept;

}  // namespace ckptfs
