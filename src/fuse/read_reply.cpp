// SPDX-License-Identifier: MIT
// ReadReply: source ranges spliced into a pipe and counted, or copied; the bufvec of a reply.
#include "read_reply.hpp"

#include "kernel_files.hpp"
#include "libfuse.hpp"

#include <ckptfs/source/byte_source.hpp>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <new>

namespace ckptfs::fuse {
namespace {

// Past this many pieces a read is copied rather than spliced: one splice per piece would cost
// more than copying a few small ones (model.safetensors over many small tensors).
constexpr std::size_t max_spliced_pieces = 16;

// The most pieces a memory reply is written with: the kernel's IOV_MAX (1024) less libfuse's
// header. A read of more pieces (many tiny tensors of model.safetensors) goes to libfuse, which
// gathers them into one buffer first.
constexpr std::size_t max_written_pieces = 1000;

// The pipe libfuse 3.14 splices a reply through holds at least this many bytes for a reply of
// `bufs` buffers and `bytes` bytes (fuse_send_data_iov(): a page per buffer and two more, its
// header, the bytes); when it cannot grow its pipe that far, libfuse copies the reply into a
// newly allocated buffer instead (and reads a spliced one back out of the pipe).
constexpr std::size_t page = 4096;
constexpr std::size_t libfuse_pipe_bytes(std::size_t bufs, std::size_t bytes) {
  return page * (bufs + 2) + 16 + bytes;
}

// What a pipe should hold for the kernel's largest read (1 MiB): two buffers (a header in
// memory, then the bytes), and a page more for bytes that do not start on a page.
constexpr std::size_t largest_read = 1 << 20;
constexpr std::size_t pipe_wanted = libfuse_pipe_bytes(2, largest_read) + page;

// Grows the pipe `fd` to `wanted` bytes, or as far as this process may (pipe-max-size, unless
// it may exceed that: CAP_SYS_RESOURCE); returns what it holds then, 0 when that is unknown.
std::size_t grow_pipe(int fd, std::size_t wanted) noexcept {
  if (::fcntl(fd, F_SETPIPE_SZ, static_cast<int>(wanted)) < 0) {
    const std::uint64_t most = read_kernel_number("/proc/sys/fs/pipe-max-size").value_or(0);
    if (most > 0) {
      (void)::fcntl(fd, F_SETPIPE_SZ, static_cast<int>(std::min<std::uint64_t>(most, wanted)));
    }
  }
  const int size = ::fcntl(fd, F_GETPIPE_SZ);
  return size < 0 ? 0 : static_cast<std::size_t>(size);
}

enum class Moved { all, source_ended, cannot };

// Splices [offset, offset + length) of `fd` into the pipe: all of it, or source_ended when the
// file ends first (it shrank), or cannot (the pipe is full, splice is not supported).
Moved splice_range(int fd, std::uint64_t offset, std::uint64_t length, int pipe) {
  auto at = static_cast<loff_t>(offset);
  while (length > 0) {
    ssize_t n = ::splice(fd, &at, pipe, nullptr, static_cast<std::size_t>(length),
                         SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      length -= static_cast<std::uint64_t>(n);
    } else if (n == 0) {
      return Moved::source_ended;
    } else if (errno != EINTR) {
      return Moved::cannot;
    }
  }
  return Moved::all;
}

}  // namespace

unsigned largest_spliced_read() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return 0;
  const std::size_t capacity = grow_pipe(fds[0], pipe_wanted);
  ::close(fds[0]);
  ::close(fds[1]);
  if (capacity >= pipe_wanted || capacity < 16 * page) return 0;
  return static_cast<unsigned>((capacity - (pipe_wanted - largest_read)) / page * page);
}

// The pipe source bytes are spliced into before the reply. libfuse, given the source's fd, would
// splice it itself but send a short reply when the file ends early (it was truncated), which the
// kernel takes for the end of the file; splicing here first counts every byte, and libfuse then
// moves the pipe's pages on to /dev/fuse, still without a copy.
class ReadReply::Pipe {
 public:
  Pipe() = default;
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() { close(); }

  // Created on first use with room for the largest read; false when no pipe can be made.
  bool open() noexcept {
    if (fds_[0] >= 0) return true;
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
      fds_[0] = fds_[1] = -1;
      return false;
    }
    // The kernel's largest read and what comes with it, or as much as this user may have; a
    // reply that does not fit is copied instead.
    capacity_ = grow_pipe(fds_[0], pipe_wanted);
    return true;
  }
  std::size_t capacity() const noexcept { return capacity_; }
  int read_end() const noexcept { return fds_[0]; }
  int write_end() const noexcept { return fds_[1]; }
  // Bytes left in the pipe (a reply that failed half way): it is replaced.
  void discard_leftovers() noexcept {
    int left = 0;
    if (fds_[0] >= 0 && (::ioctl(fds_[0], FIONREAD, &left) != 0 || left != 0)) close();
  }
  void close() noexcept {
    for (int& fd : fds_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }

 private:
  int fds_[2] = {-1, -1};
  std::size_t capacity_ = 0;
};

ReadReply::ReadReply() : pipe_(std::make_unique<Pipe>()) {}
ReadReply::~ReadReply() = default;

ReadBuffer& ReadReply::begin() {
  buffer_.clear();
  pieces_.clear();
  ranges_.clear();
  lent_.clear();
  pins_.clear();
  spliced_ = false;
  return buffer_;
}

void ReadReply::copy_source_pieces(Sources sources) {
  // Sources that hold the bytes in memory (a remote source's cache) lend them: the pieces
  // point there, pinned until end(). The others are read into one buffer.
  std::vector<ReadPiece>& pieces = rebuilt_;
  pieces.clear();
  std::size_t total = 0;
  for (const ReadPiece& p : pieces_) {
    const std::size_t spans = lent_.size();
    if (p.memory || !sources[p.source]->lend(p.source_offset, p.length, lent_, pins_)) {
      pieces.push_back(p);
      total += p.memory ? 0 : p.length;
      continue;
    }
    std::uint64_t offset = p.source_offset;
    for (std::size_t i = spans; i < lent_.size(); ++i) {
      const auto bytes = lent_[i];
      pieces.push_back(
          {reinterpret_cast<const char*>(bytes.data()), p.source, offset, bytes.size()});
      offset += bytes.size();
    }
  }
  pieces_.swap(pieces);
  copied_.resize(total);
  std::size_t at = 0;
  for (ReadPiece& p : pieces_) {
    if (p.memory) continue;
    sources[p.source]->read(p.source_offset,
                            std::as_writable_bytes(std::span(copied_.data() + at, p.length)));
    p.memory = copied_.data() + at;
    at += p.length;
  }
}

ReadReply::Staged ReadReply::stage(Sources sources, Transfer transfer) {
  pieces_ = buffer_.pieces();
  for (const ReadPiece& p : pieces_) {
    if (p.memory == nullptr) ranges_.push_back({p.source, p.source_offset, p.length});
  }
  bool copy = transfer == Transfer::copy || pieces_.size() > max_spliced_pieces;
  // Bytes of a zip record being checked against its CRC-32 are read, which checks them
  // (ByteSource::needs_read(); it throws for a record found corrupt).
  for (const ReadPiece& p : pieces_) {
    if (!p.memory && sources[p.source]->needs_read(p.source_offset, p.length)) copy = true;
  }
  if (!copy && !ranges_.empty()) {
    // A reply that libfuse could not splice whole would be copied by it, and the spliced
    // bytes read back out of the pipe: it is copied here, once. (The mount's max_read keeps
    // every read of one source range within what splices: largest_spliced_read().)
    std::size_t total = 0;
    for (const ReadPiece& p : pieces_) total += p.length;
    copy = !pipe_->open() || libfuse_pipe_bytes(buffer_count(), total) > pipe_->capacity();
  }
  for (const ReadPiece& p : pieces_) {
    if (p.memory || copy) continue;
    const int fd = sources[p.source]->fd();
    if (fd < 0 || !pipe_->open()) {
      copy = true;
      break;
    }
    const Moved moved = splice_range(fd, p.source_offset, p.length, pipe_->write_end());
    if (moved == Moved::source_ended) {
      pipe_->close();
      return Staged::source_ended;
    }
    if (moved == Moved::cannot) copy = true;
  }
  if (copy) {
    pipe_->close();  // what was spliced is read again by the copy
    copy_source_pieces(sources);
  } else {
    spliced_ = !ranges_.empty();
  }
  return Staged::ok;
}

std::size_t ReadReply::buffer_count() const noexcept {
  std::size_t count = 0;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const bool in_pipe = pieces_[i].memory == nullptr;
    if (!(in_pipe && i > 0 && pieces_[i - 1].memory == nullptr)) ++count;
  }
  return count;
}

fuse_bufvec* ReadReply::bufvec() {
  if (pieces_.empty()) return nullptr;
  // A fuse_bufvec holds one fuse_buf; the others follow it in the same storage.
  const std::size_t count = buffer_count();
  const std::size_t bytes = sizeof(fuse_bufvec) + (count - 1) * sizeof(fuse_buf);
  bufvec_storage_.resize((bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
  auto* vec = new (bufvec_storage_.data()) fuse_bufvec{};
  vec->count = count;
  std::size_t n = 0;
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const ReadPiece& p = pieces_[i];
    if (p.memory == nullptr && i > 0 && pieces_[i - 1].memory == nullptr) {
      vec->buf[n - 1].size += p.length;  // the pipe's next bytes: one buffer with the previous
      continue;
    }
    fuse_buf& b = vec->buf[n++];
    b = fuse_buf{};
    b.size = p.length;
    if (p.memory) {
      b.mem = const_cast<char*>(p.memory);
    } else {
      // Already in the pipe, in order: libfuse reads or splices it on.
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_RETRY);
      b.fd = pipe_->read_end();
    }
  }
  return vec;
}

std::span<const iovec> ReadReply::memory_iovecs() {
  iovecs_.clear();
  if (spliced_ || pieces_.size() > max_written_pieces) return {};
  for (const ReadPiece& p : pieces_) {
    if (p.memory == nullptr) {
      iovecs_.clear();
      return {};
    }
    iovecs_.push_back({const_cast<char*>(p.memory), p.length});
  }
  return iovecs_;
}

void ReadReply::end() noexcept {
  if (spliced_) pipe_->discard_leftovers();
  spliced_ = false;
  pins_.clear();  // the lent bytes were sent (or the reply failed): the cache may drop them
}

}  // namespace ckptfs::fuse
