// SPDX-License-Identifier: MIT
// The FUSE low-level operations over an immutable Tree. The only place with FUSE callbacks.
#pragma once

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>

#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/tree.hpp>

#include <memory>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ckptfs::fuse {

// A set of inode numbers that each thread may add to; add() says whether it was the first.
class InodeSet {
 public:
  explicit InodeSet(std::size_t inodes) : words_(inodes / 64 + 1) {}
  bool add(std::uint64_t ino) noexcept {
    if (ino / 64 >= words_.size()) return false;
    std::uint64_t bit = std::uint64_t{1} << (ino % 64);
    return (words_[ino / 64].fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
  }

 private:
  std::vector<std::atomic<std::uint64_t>> words_;
};

// What every operation needs; handed to libfuse as the session's userdata.
struct Context {
  Context(const Tree* t, Sources s)
      : tree(t), sources(s), prefilled(t->node_count_hint() + 1),
        changed(std::make_unique<std::atomic<bool>[]>(s.size())) {}
  const Tree* tree;
  Sources sources;
  fuse_session* session = nullptr;  // set before serving; for stores into the page cache
  mutable InodeSet prefilled;  // files whose first bytes were stored at their first open
  // Stores into the page cache wait for reads in flight on the same pages, which other serving
  // threads answer: at most this many stores at once (the thread count less one), so one thread
  // is always free for those reads.
  unsigned max_stores = 1;
  mutable std::atomic<unsigned> stores{0};
  // Per source: set once it is found replaced, truncated or rewritten (see op_open, op_read):
  // from then on every open and read of a file over it fails with EIO.
  std::unique_ptr<std::atomic<bool>[]> changed;
  // The -o max_read=N given to the session (0: none). libfuse 3.14 refuses INIT (EPROTO, and
  // the mount is dead) unless the init callback sets the same value in fuse_conn_info.
  unsigned max_read = 0;
  // Set by the init callback. libfuse calls it only for an INIT it answers, and (with max_read
  // set as above and only capable flags wanted) refuses nothing after it.
  std::atomic<bool> init_called{false};
};

// The operation table: lookup, getattr, open, read, opendir, readdir(plus), statfs, release...
// Everything else (all writes) is left to the read-only mount and the kernel.
const fuse_lowlevel_ops& operations();

}  // namespace ckptfs::fuse
