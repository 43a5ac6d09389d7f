// SPDX-License-Identifier: MIT
// The file `ckptfs pack` writes: made under no name (or a temporary one) in the output's
// directory, written front to back, and given its name only once complete and on disk, so that
// a pack that fails or is killed leaves nothing under that name. Bytes copied from a source file
// go by copy_file_range (sendfile where it cannot), never through this process when no CRC is
// needed; anything else through one bounded buffer.
//
//   OutputFile out("/data/model.pth", Overwrite::no, 0600);  // Error(usage) if it exists
//   out.write(header);
//   out.copy(source, offset, length);                   // in-kernel copy
//   std::uint32_t crc = out.copy_with_crc(source, offset, length);
//   out.commit();                                       // fsync, then the name, then the dir
#pragma once

#include <ckptfs/base/error.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/open_file.hpp>

#include <sys/stat.h>
#include <sys/types.h>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

enum class Overwrite : bool { no, yes };

// The permission bits (07777 without the setuid, setgid and sticky bits) that every one of
// `sources` grants, for the file made of them: those of a file each (fstat of its descriptor),
// ANDed, so that the output opens to nobody whom one source was closed to; 0666 when none is a
// local file (remote objects have no mode).
mode_t permissions_of(std::span<const ByteSource* const> sources);

// A failure of the output itself (it cannot be created, written, synced or named), as opposed
// to one of the sources it is copied from: the command line names the output for these.
class OutputError : public Error {
 public:
  using Error::Error;
};

// What is under OUT's name now, when an OutputFile with `overwrite` may go there: nothing, a
// symbolic link (replaced by the file, never followed: what it leads to is neither read nor
// written), or a regular file (with Overwrite::yes; returned, the new file keeps its mode bits,
// owner and group). Throws OutputError(usage), the message leaving `path` out, for:
//   - anything there without Overwrite::yes ("exists: pack does not overwrite it without
//     --force");
//   - a FIFO, socket, device or directory (pack writes and replaces regular files only: renamed
//     over a device, root's pack would replace /dev/null);
//   - a file owned by another user (neither the one running pack nor the directory's owner) in a
//     sticky directory others may write, as /tmp: whoever put it there would be given the output,
//     owner and mode (the kernel's fs.protected_regular refuses cp's open of it the same way).
// The caller checks before reading a source (which may take long); OutputFile checks again.
std::optional<struct stat> check_output_name(const std::string& path, Overwrite overwrite);

class OutputFile {
 public:
  // The bounded buffer of copies that read their bytes (CRCs, sources without a descriptor).
  static constexpr std::size_t buffer_bytes = 1 << 20;

  // Opens an unnamed file (O_TMPFILE) in the directory of `path`, or, where the file system
  // has none, a temporary file ".<name>.ckptfs-pack-XXXXXX" beside it. Its permission bits are
  // those of cp: `mode` (the source's, see permissions_of()) masked by the umask for a new file
  // (and for one that replaces a symbolic link); a regular file replaced (Overwrite::yes) keeps
  // its own mode bits, owner and group (the owner and group when this process may set them: a
  // group it cannot keep gets no group bits, so the file is never open to more people than the
  // one it replaces). Throws what check_output_name() throws, and OutputError(io) when the
  // directory cannot take a file (missing, read-only...). Every OutputError's message leaves
  // `path` out: the caller names it.
  OutputFile(std::string path, Overwrite overwrite, mode_t mode = 0666);
  // Without commit(), the file is gone: the unnamed one with its descriptor, the temporary
  // one unlinked.
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends `bytes`. Throws OutputError(io) when the write fails ("No space left on device").
  void write(std::string_view bytes);
  // Appends [offset, offset + length) of `source`: copy_file_range, or sendfile, from its
  // descriptor when it has one, else read into the buffer and written (so are bytes of a zip
  // record the source checks, ByteSource::needs_read(): reading checks them). Throws OutputError as
  // write() does (a failed in-kernel copy too: its errors are the output's, a full disk), and
  // for the source what ByteSource::read throws, its message starting with the source's name;
  // a source file shorter than the range is Error(io) "file shrank while being read".
  void copy(const ByteSource& source, std::uint64_t offset, std::uint64_t length);
  // The same through the buffer, returning `crc` continued over the bytes (zip records need
  // their CRC-32: pass 0 for a record's first bytes).
  std::uint32_t copy_with_crc(const ByteSource& source, std::uint64_t offset, std::uint64_t length,
                              std::uint32_t crc = 0);
  // The buffer, for bytes a caller makes (gathered, converted) and then passes to write().
  std::span<char> buffer() noexcept { return buffer_; }

  std::uint64_t size() const noexcept { return size_; }

  // Calls `on_written(size())` each time bytes were appended (at least every
  // watched_copy_bytes of an in-kernel copy): a progress display. Called on this thread; what it
  // throws is thrown by the write or copy.
  static constexpr std::uint64_t watched_copy_bytes = 64 << 20;
  void watch(std::function<void(std::uint64_t)> on_written) { on_written_ = std::move(on_written); }

  // fsync()s the file, gives it its name (atomically: linkat of the unnamed file, or rename of
  // the temporary one; with Overwrite::no never replacing a file that appeared meanwhile), and
  // fsync()s the directory. Throws OutputError(usage) for a file that appeared under the name,
  // OutputError(io) when anything else fails (the file is then discarded as without commit()).
  void commit();

 private:
  void discard() noexcept;
  // Gives the new file the mode bits, owner and group of `replaced`, as far as it may.
  void keep_mode_of(const struct stat& replaced);

  std::string path_;
  std::string directory_;  // of path_, for the temporary name and the fsync
  Overwrite overwrite_;
  UniqueFd fd_;
  std::string temporary_;  // the temporary file's path, when there is no unnamed file
  bool committed_ = false;
  std::uint64_t size_ = 0;
  std::vector<char> buffer_;
  std::function<void(std::uint64_t)> on_written_;
};

}  // namespace ckptfs
