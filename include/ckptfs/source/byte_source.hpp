// SPDX-License-Identifier: MIT
// Read-only random access to a model's bytes: pread on a local file, memory in tests; the
// interface every source (a remote one too) implements for the formats and views above it.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ckptfs {

// When a source was last modified and changed (its mtime and ctime); zero when unknown.
struct SourceTimes {
  std::int64_t mtime_sec = 0;
  std::int64_t mtime_nsec = 0;
  std::int64_t ctime_sec = 0;
  std::int64_t ctime_nsec = 0;
};

// Keeps in `newest` the newer of its times and `times`' (mtime and ctime apart): the times of a
// model read from several files.
void keep_newest(SourceTimes& newest, const SourceTimes& times) noexcept;

struct FileIdentity;
class RecordChecks;  // source/record_checks.hpp

// All reads are positional and bounds-checked, so one source can be shared by many threads.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual std::uint64_t size() const = 0;

  // What the source is called in messages and logs: a path, or a URL without credentials.
  virtual const std::string& name() const noexcept = 0;

  virtual SourceTimes times() const noexcept { return {}; }

  // Whether each read is a request to a server: readers then read as little as they can at
  // mount (a zip's local headers are read with their records' bytes, on first use).
  virtual bool remote() const noexcept { return false; }

  // A descriptor whose bytes at the same offsets are the source's, for splicing them into a
  // reply without copying; -1 when there is none (memory, remote sources: read() instead).
  virtual int fd() const noexcept { return -1; }

  // Whether the source still holds the bytes it had when it was opened, so that what was read
  // from it then is still right. `check_path`: also look its name up again, which costs more
  // (local files: a stat of the path). Sources that cannot change say true.
  virtual bool unchanged(bool check_path) const noexcept {
    (void)check_path;
    return true;
  }

  // Once unchanged() said false: what was seen, in words, for the one line the mount logs.
  virtual std::string change_reason() const { return "replaced, truncated or rewritten"; }

  // The identity (device, inode, size, mtime at open) of the one local regular file whose bytes
  // at the same offsets are this source's, read as they are, and whose name() names it; null
  // for anything else (a URL, an inflated member, memory). What lets a reader on the same
  // machine map a range of it itself, after checking it is still this very file.
  virtual const FileIdentity* local_file() const noexcept { return nullptr; }

  // The byte ranges [first, second) of the source that readers tend to read whole and then
  // stop (each tensor's bytes), for a source whose reads cost requests: its readahead does not
  // run on past the end of the one a sequential reader is in (a reader of one tensor is sent
  // that tensor, not as much again). Set once, before the source is shared between threads;
  // a source that reads nothing ahead ignores it.
  using ReadUnits = std::vector<std::pair<std::uint64_t, std::uint64_t>>;
  virtual void set_read_units(ReadUnits units) { (void)units; }

  // Fills `out` with the bytes at [offset, offset + out.size()). Throws Error(bad_checkpoint)
  // when the range is not inside the source ("truncated"), Error(io) when the read fails.
  void read(std::uint64_t offset, std::span<std::byte> out) const;

  // The same, into a string of `length` bytes.
  std::string read_string(std::uint64_t offset, std::size_t length) const;

  // Keeps lent bytes alive (a cache block) while a reply still points into them.
  using Pin = std::shared_ptr<const void>;
  // Bytes [offset, offset + length) where the source already holds them in memory (a remote
  // source's cached blocks), lent instead of copied: appends to `spans` the consecutive spans
  // that cover the range and to `pins` what keeps them valid. False (nothing appended) when the
  // source has no such memory: read() then. Bounds and failures as read().
  bool lend(std::uint64_t offset, std::size_t length,
            std::vector<std::span<const std::byte>>& spans, std::vector<Pin>& pins) const;

  // True when [offset, offset + length) lies inside the source (overflow-safe).
  bool contains(std::uint64_t offset, std::uint64_t length) const noexcept {
    return offset <= size() && length <= size() - offset;
  }

  // Checks from now on what read() and lend() give of the zip records `checks` knows against
  // their CRC-32s (source/record_checks.hpp): read() and lend() throw Error(bad_checkpoint) for a
  // record found corrupt. Set once, before the source is shared between threads.
  void check_records(std::shared_ptr<const RecordChecks> checks) noexcept;
  const RecordChecks* record_checks() const noexcept { return checks_.get(); }

  // read() without the record checks: for a caller that checks the bytes itself (inspect
  // --verify reads every record once), whose reads must not end in a check's error instead (the
  // zip's end, read to find its directory, holds a record's last bytes).
  void read_unchecked(std::uint64_t offset, std::span<std::byte> out) const;

  // Whether bytes [offset, offset + length) must be read with read() to be checked: a caller that
  // would serve or copy them without it (spliced from fd(), copied in the kernel) asks first, and
  // reads them when true. Throws Error(bad_checkpoint) when they hold bytes of a record found
  // corrupt. False for every source whose records are not checked.
  bool needs_read(std::uint64_t offset, std::uint64_t length) const;

  // Checks now, whole, everything checked that bytes [offset, offset + length) are part of (the
  // records they overlap; an inflated member: all of it), reading what was not read yet: what
  // `ckptfs pack` calls for every range it copied before it names its output. Throws
  // Error(bad_checkpoint) when one is corrupt, and what reading throws.
  virtual void verify(std::uint64_t offset, std::uint64_t length) const;

 protected:
  // Throws Error(bad_checkpoint) ("file is truncated") unless contains(offset, length).
  void require_range(std::uint64_t offset, std::uint64_t length) const;
  // Reads exactly out.size() bytes at an offset already checked to be in range.
  virtual void read_in_range(std::uint64_t offset, std::span<std::byte> out) const = 0;
  // lend() of a non-empty range already checked; by default the source lends nothing.
  virtual bool lend_in_range(std::uint64_t offset, std::size_t length,
                             std::vector<std::span<const std::byte>>& spans,
                             std::vector<Pin>& pins) const {
    (void)offset, (void)length, (void)spans, (void)pins;
    return false;
  }

 private:
  // What the record checks read the rest of a record with: read_in_range(), unchecked.
  std::function<void(std::uint64_t, std::span<std::byte>)> read_rest() const;
  std::shared_ptr<const RecordChecks> checks_;
};

// Identity of a file at open time, to detect that its content changed later: device, inode, size
// and mtime. The ctime is kept for the mount's times, not compared: chmod, chown, a hard link,
// an atime update move it without changing a byte, and are no change.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_sec = 0;
  std::int64_t mtime_nsec = 0;
  std::int64_t ctime_sec = 0;
  std::int64_t ctime_nsec = 0;
};

// The identity of the file `st` describes, and whether `st` still describes that file with the
// same content (device, inode, size, mtime: not the ctime).
FileIdentity file_identity(const struct stat& st) noexcept;
bool same_identity(const struct stat& st, const FileIdentity& identity) noexcept;

// The permission bits (st_mode & 0777) of the file a source reads, by fstat() of its
// descriptor; 0777 when it has none (memory, a remote object): what the modes of a mount of
// several files are the strictest of (OpenedModel::permissions()).
mode_t permission_bits(const ByteSource& source) noexcept;

// Reads exactly out.size() bytes at `offset` of descriptor `fd` (pread, retried on EINTR).
// Throws Error(io) when a read fails or the file ends first ("file shrank while being read").
void pread_exactly(int fd, std::uint64_t offset, std::span<std::byte> out);

class FileSource final : public ByteSource {
 public:
  // Opens `path` read-only with open_file() (source/open_file.hpp): never waits, and throws
  // Error(io) when it cannot be opened or is not a regular file (a FIFO, a device, a directory).
  explicit FileSource(const std::string& path);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

  std::uint64_t size() const override { return identity_.size; }
  const std::string& name() const noexcept override { return path_; }
  SourceTimes times() const noexcept override {
    return {identity_.mtime_sec, identity_.mtime_nsec, identity_.ctime_sec, identity_.ctime_nsec};
  }
  int fd() const noexcept override { return fd_; }
  const FileIdentity& identity() const noexcept { return identity_; }
  const FileIdentity* local_file() const noexcept override { return &identity_; }
  const std::string& path() const noexcept { return path_; }

  // Whether the file is still the one that was opened: its descriptor, and with `check_path`
  // the file its path names now, have the identity recorded at open (device, inode, size,
  // mtime; see same_identity()). The path is looked up in the directory opened with the file, so it
  // still works from a daemon that changed directory or a mount that hides that directory.
  bool unchanged(bool check_path) const noexcept override;

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override;
  std::string path_;
  int fd_ = -1;
  int directory_fd_ = -1;    // O_PATH descriptor of the path's directory; -1 if it cannot be opened
  std::string name_;         // the path's last component
  std::string lookup_path_;  // without directory_fd_: the path, absolute when it can be made so
  FileIdentity identity_;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(std::string bytes, std::string name = "memory")
      : bytes_(std::move(bytes)), name_(std::move(name)) {}
  std::uint64_t size() const override { return bytes_.size(); }
  const std::string& name() const noexcept override { return name_; }

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override;
  std::string bytes_;
  std::string name_;
};

}  // namespace ckptfs
