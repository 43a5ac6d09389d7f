// SPDX-License-Identifier: MIT
// The reply to one read: a tree read's pieces made into one fuse_bufvec, each source range spliced
// into the thread's pipe and counted (or copied when it cannot be), so that a source that ends
// early fails the read instead of making it short.
#pragma once

#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

struct fuse_bufvec;  // libfuse's (libfuse.hpp)
struct iovec;

namespace ckptfs::fuse {

// Bytes [offset, offset + length) of source `source`, read for a reply.
struct SourceRange {
  std::uint32_t source;
  std::uint64_t offset;
  std::uint64_t length;
};

// The largest read whose reply splices whole, as a mount's max_read: 0 when pipes may hold the
// kernel's largest read (1 MiB) with room to spare; less when pipes are limited to 1 MiB
// (/proc/sys/fs/pipe-max-size, for a user without CAP_SYS_RESOURCE), as then libfuse would
// copy every reply of 1 MiB.
unsigned largest_spliced_read();

// One per serving thread, reused read after read (nothing is freed once warm): begin(), the
// tree appends to the buffer, stage(), bufvec() for the reply, end().
class ReadReply {
 public:
  ReadReply();
  ~ReadReply();
  ReadReply(const ReadReply&) = delete;
  ReadReply& operator=(const ReadReply&) = delete;

  // Empties the reply for a new read; the tree appends its pieces to the buffer returned.
  ReadBuffer& begin();

  enum class Transfer {
    splice,  // source ranges of sources with a descriptor go through the pipe (see bufvec())
    copy,    // every source range is read into memory (what a store into the page cache needs)
  };
  enum class Staged { ok, source_ended };
  // Gets the bytes of every source range ready: spliced into the pipe, in order, or read into
  // memory (sources without a descriptor, reads of many small pieces, a pipe that has no room).
  // source_ended: a source ended before a range did (it shrank): the read must fail. Throws
  // Error(io) when a source cannot be read, std::bad_alloc.
  Staged stage(Sources sources, Transfer transfer);

  // The staged bytes in order, for fuse_reply_data() (with FUSE_BUF_SPLICE_MOVE) or a store;
  // valid until end(). Null when the read is empty.
  fuse_bufvec* bufvec();
  // When every staged byte is in memory (nothing went through the pipe) and the pieces are few
  // enough for one writev: the pieces as iovecs, for fuse_reply_iov(), valid until end(). Empty
  // otherwise. libfuse 3.14's fuse_reply_data() would write such bytes into its pipe first, a
  // copy into newly allocated pipe pages that took over half of a converted read's time
  // (docs/PERFORMANCE.md); writev hands them to the kernel with no copy on the way.
  std::span<const iovec> memory_iovecs();
  // The pieces (valid until end()) and the source ranges they hold (their bytes went into the
  // reply, spliced or copied).
  const std::vector<ReadPiece>& pieces() const noexcept { return pieces_; }
  std::span<const SourceRange> source_ranges() const noexcept { return ranges_; }

  // After the reply was sent (or not): whatever a failed reply left in the pipe is discarded.
  void end() noexcept;

 private:
  class Pipe;
  void copy_source_pieces(Sources sources);
  // The buffers of the reply: the pieces, consecutive ones in the pipe counted as one.
  std::size_t buffer_count() const noexcept;

  ReadBuffer buffer_;
  std::vector<ReadPiece> pieces_;
  std::vector<ReadPiece> rebuilt_;  // copy_source_pieces()' scratch, swapped with pieces_
  std::vector<SourceRange> ranges_;
  std::vector<char> copied_;
  std::vector<std::span<const std::byte>> lent_;  // bytes sources lent (see ByteSource::lend())
  std::vector<ByteSource::Pin> pins_;             // keep them valid until end()
  std::vector<std::max_align_t> bufvec_storage_;  // a fuse_bufvec and its bufs
  std::vector<iovec> iovecs_;
  std::unique_ptr<Pipe> pipe_;
  bool spliced_ = false;
};

}  // namespace ckptfs::fuse
