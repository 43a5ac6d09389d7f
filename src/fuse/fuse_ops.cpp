// SPDX-License-Identifier: MIT
// FUSE low-level callbacks: each replies exactly once, never throws, and reads answer with
// fd buffers so tensor bytes go from the checkpoint to the kernel without being staged here.
#include "fuse_ops.hpp"

#include "serve_loop.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <optional>
#include <sys/ioctl.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace ckptfs::fuse {
namespace {

// The tree never changes while mounted, so the kernel may cache names and attributes forever.
constexpr double forever = 365.0 * 24 * 3600;

const Context& context(fuse_req_t req) {
  return *static_cast<const Context*>(fuse_req_userdata(req));
}

// The entry of `ino`; its size may need derived content built first (a meta.json), which can
// only fail for lack of memory (std::bad_alloc).
fuse_entry_param entry_of(const Tree& tree, Tree::Ino ino) {
  fuse_entry_param e{};
  e.ino = ino;
  e.generation = 1;
  e.attr_timeout = forever;
  e.entry_timeout = forever;
  tree.stat(ino, e.attr);
  return e;
}

void op_init(void* userdata, fuse_conn_info* conn) {
  auto& ctx = *static_cast<Context*>(userdata);
  conn->max_read = ctx.max_read;  // must equal the mount option, or libfuse refuses INIT
  // Readahead as large as the kernel allows, and many requests in flight.
  conn->max_readahead = conn->max_readahead ? conn->max_readahead : 1u << 20;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  // Splice tensor bytes from the checkpoint through a pipe into the reply: measured 2x the first
  // read throughput of libfuse's copying fallback here (1.1-2.2 vs 0.3-1.0 GB/s, 1.6 GB file).
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;  // always plus: names come with attributes
  ctx.init_called.store(true);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  const Tree& tree = *context(req).tree;
  fuse_entry_param e{};
  try {
    Tree::Ino ino = tree.lookup(parent, name);
    if (ino == 0) {
      // A negative entry with a timeout: the kernel remembers that the name does not exist.
      e.entry_timeout = forever;
    } else {
      e = entry_of(tree, ino);
    }
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
    return;
  } catch (...) {
    // Building a file's attributes may read a source (a remote record's local header).
    fuse_reply_err(req, EIO);
    return;
  }
  fuse_reply_entry(req, &e);
}

void op_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void op_forget_multi(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  struct stat st {};
  try {
    if (!context(req).tree->stat(ino, st)) {
      fuse_reply_err(req, ENOENT);
      return;
    }
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
    return;
  } catch (...) {
    fuse_reply_err(req, EIO);
    return;
  }
  fuse_reply_attr(req, &st, forever);
}

// The tree describes the checkpoint as it was at mount. Once the file is replaced (renamed over,
// deleted), truncated or rewritten, its bytes may no longer be the ones the tree points to, so
// every open and read fails with EIO from then on: never a short or wrong reply. In a sharded
// set each shard is a source of its own: the files of its tensors fail, the others' are served
// (index.json, which describes them all, fails with any). Checked at each
// open (the descriptor and the path: device, inode, size, mtime, ctime) and at each read (the
// descriptor). Not caught: a change within one tick of the file system's timestamps that keeps
// the size, and one made while a read is in flight. Pages the kernel cached before (keep_cache)
// may still be served: they hold the old checkpoint's bytes, which were right.
bool source_changed(const Context& ctx, std::uint32_t source, bool check_path) {
  std::atomic<bool>& changed = ctx.changed[source];
  if (changed.load(std::memory_order_relaxed)) return true;
  if (ctx.sources[source]->unchanged(check_path)) return false;
  if (!changed.exchange(true)) {
    std::fprintf(stderr,
                 "ckptfs: %s changed while mounted (replaced, truncated or rewritten): opens and "
                 "reads fail with EIO from now on; unmount and mount it again\n",
                 ctx.sources[source]->name().c_str());
  }
  return true;
}

// Whether any source a read took bytes from changed.
bool pieces_changed(const Context& ctx, const std::vector<ReadPiece>& pieces) {
  for (const ReadPiece& p : pieces) {
    if (p.source != ReadPiece::generated && source_changed(ctx, p.source, false)) return true;
  }
  return false;
}

bool any_source_changed(const Context& ctx, bool check_path) {
  for (std::uint32_t i = 0; i < ctx.sources.size(); ++i) {
    if (source_changed(ctx, i, check_path)) return true;
  }
  return false;
}

// Past this many pieces a read is copied rather than spliced: one splice per piece would cost
// more than copying a few small ones (model.safetensors over many small tensors).
constexpr std::size_t max_spliced_pieces = 16;

// Reads every source range of `pieces` into `buffer` and points the piece at its bytes there.
// Throws Error(io) when a source ends early.
void copy_source_pieces(std::vector<ReadPiece>& pieces, Sources sources,
                        std::vector<char>& buffer) {
  std::size_t total = 0;
  for (const ReadPiece& p : pieces) total += p.memory ? 0 : p.length;
  buffer.resize(total);
  std::size_t at = 0;
  for (ReadPiece& p : pieces) {
    if (p.memory) continue;
    sources[p.source]->read(p.source_offset,
                            std::as_writable_bytes(std::span(buffer.data() + at, p.length)));
    p.memory = buffer.data() + at;
    at += p.length;
  }
}

// The bufvec of `pieces`, in this thread's storage: memory pieces as they are, source ranges as
// `pipe`, where they were spliced in order.
fuse_bufvec* make_bufvec(const std::vector<ReadPiece>& pieces, int pipe) {
  thread_local std::vector<fuse_buf> storage;  // fuse_bufvec's header, then its bufs
  constexpr std::size_t header = (sizeof(fuse_bufvec) + sizeof(fuse_buf) - 1) / sizeof(fuse_buf);
  storage.resize(header + pieces.size());
  fuse_bufvec* vec = new (storage.data()) fuse_bufvec{};
  vec->count = pieces.size();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    fuse_buf& b = vec->buf[i];
    b = fuse_buf{};
    b.size = pieces[i].length;
    if (pieces[i].memory) {
      b.mem = const_cast<char*>(pieces[i].memory);
    } else {
      // Already in the pipe, in order; libfuse reads or splices it on.
      b.flags = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_RETRY);
      b.fd = pipe;
    }
  }
  return vec;
}

// The bytes a file's first open stores in the kernel's page cache: reading them then needs no
// READ round trip. Small files (a tensor.npy of a few elements, meta.json) fit whole; for large
// ones it is the first pages, which every reader reads first (a .npy header, a file's type).
constexpr std::size_t prefill_bytes = 64 * 1024;

// Called before the open is answered, so the caller's first read finds the bytes. Best effort:
// any failure leaves the bytes to READ, which checks everything again.
void prefill_page_cache(const Context& ctx, fuse_ino_t ino, std::uint64_t size) {
  if (ctx.session == nullptr || size == 0) return;
  struct StoreSlot {
    const Context& ctx;
    bool taken = ctx.stores.fetch_add(1) < ctx.max_stores;
    ~StoreSlot() { ctx.stores.fetch_sub(1); }
  } slot{ctx};
  if (!slot.taken || !ctx.prefilled.add(ino)) return;
  thread_local ReadBuffer read;
  thread_local std::vector<ReadPiece> pieces;
  thread_local std::vector<char> copied;
  std::size_t length = size < prefill_bytes ? static_cast<std::size_t>(size) : prefill_bytes;
  try {
    may_wait();  // the checkpoint's pages may come from a disk; the store waits for page locks
    read.clear();
    ctx.tree->read(ino, 0, length, ctx.sources, read);
    pieces = read.pieces();
    copy_source_pieces(pieces, ctx.sources, copied);
    if (pieces_changed(ctx, pieces)) return;
  } catch (...) {
    return;
  }
  (void)fuse_lowlevel_notify_store(ctx.session, ino, 0, make_bufvec(pieces, -1),
                                   fuse_buf_copy_flags{});
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const Tree& tree = *context(req).tree;
  std::optional<Tree::Node> n;
  try {
    n = tree.node(ino);
  } catch (...) {
    fuse_reply_err(req, EIO);
    return;
  }
  if (!n) {
    fuse_reply_err(req, ENOENT);
  } else if (n->kind == Tree::Kind::root || n->kind == Tree::Kind::entry_dir) {
    fuse_reply_err(req, EISDIR);
  } else if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
    fuse_reply_err(req, EROFS);
  } else if (const std::uint32_t source = tree.source_of(*n);
             source == Tree::every_source ? any_source_changed(context(req), true)
                                          : source_changed(context(req), source, true)) {
    // Only the files of a changed source fail: in a sharded set, the other shards' tensors
    // are still served.
    fuse_reply_err(req, EIO);
  } else {
    std::uint64_t size = 0;
    try {
      size = tree.size(*n);
    } catch (const std::bad_alloc&) {
      fuse_reply_err(req, ENOMEM);
      return;
    } catch (...) {
      fuse_reply_err(req, EIO);
      return;
    }
    prefill_page_cache(context(req), ino, size);
    fi->keep_cache = 1;  // the checkpoint is immutable: cached pages stay valid across opens
    fi->noflush = 1;
    fuse_reply_open(req, fi);
  }
}

// The pipe each serving thread splices checkpoint bytes into before replying. libfuse, given the
// checkpoint's fd, would splice it itself but send a short reply when the file ends early (it was
// truncated): the kernel would take that for the end of the file. Splicing here first counts
// every byte, and libfuse then moves the pipe's pages on to /dev/fuse, still without a copy.
class ThreadPipe {
 public:
  ThreadPipe() = default;
  ThreadPipe(const ThreadPipe&) = delete;
  ThreadPipe& operator=(const ThreadPipe&) = delete;
  ~ThreadPipe() { close(); }

  // The pipe, created on first use with room for the largest read; false when no pipe can be
  // made (the read is then copied).
  bool open() {
    if (fds_[0] >= 0) return true;
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
      fds_[0] = fds_[1] = -1;
      return false;
    }
    // The kernel's largest read (1 MiB) plus its partial first and last pages, or as much as
    // this user may have; a piece that does not fit is copied instead.
    if (::fcntl(fds_[0], F_SETPIPE_SZ, (1 << 20) + 2 * 4096) < 0) {
      ::fcntl(fds_[0], F_SETPIPE_SZ, 1 << 20);
    }
    return true;
  }
  int read_end() const noexcept { return fds_[0]; }
  int write_end() const noexcept { return fds_[1]; }
  // Whether bytes were left in the pipe (a reply that failed half way); it is then replaced.
  void discard_leftovers() {
    int left = 0;
    if (fds_[0] >= 0 && (::ioctl(fds_[0], FIONREAD, &left) != 0 || left != 0)) close();
  }
  void close() {
    for (int& fd : fds_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }

 private:
  int fds_[2] = {-1, -1};
};

enum class Moved { all, short_file, cannot };

// Splices [offset, offset + length) of the checkpoint into the pipe: all of it, or short_file
// when the file ends first (it shrank), or cannot (the pipe is full, splice is not supported)
// and the read is to be copied instead.
Moved splice_range(int fd, std::uint64_t offset, std::size_t length, int pipe) {
  auto at = static_cast<loff_t>(offset);
  while (length > 0) {
    ssize_t n = ::splice(fd, &at, pipe, nullptr, length, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      length -= static_cast<std::size_t>(n);
    } else if (n == 0) {
      return Moved::short_file;  // end of file before the range ends: the file shrank
    } else if (errno != EINTR) {
      return Moved::cannot;
    }
  }
  return Moved::all;
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  const Context& ctx = context(req);
  // Reused by each serving thread: no allocation per read once warm.
  thread_local ReadBuffer read;
  thread_local std::vector<ReadPiece> pieces;
  thread_local std::vector<char> copied;
  thread_local ThreadPipe pipe;
  bool spliced = false;
  try {
    read.clear();
    ctx.tree->read(ino, static_cast<std::uint64_t>(off), size, ctx.sources, read);
    pieces = read.pieces();
    if (pieces_changed(ctx, pieces)) {
      fuse_reply_err(req, EIO);
      return;
    }
    // Source ranges go into the pipe, whole, or are copied when the pipe has no room.
    bool copy = pieces.size() > max_spliced_pieces;
    if (std::ranges::any_of(pieces, [](const ReadPiece& p) { return p.memory == nullptr; })) {
      may_wait();  // the checkpoint's pages may have to come from a disk
    }
    for (const ReadPiece& p : pieces) {
      if (p.memory || copy) continue;
      const int fd = ctx.sources[p.source]->fd();
      if (fd < 0 || !pipe.open()) {
        pipe.close();  // what was spliced before is read again by the copy
        copy = true;
        break;
      }
      Moved moved = splice_range(fd, p.source_offset, p.length, pipe.write_end());
      if (moved == Moved::short_file) {
        pipe.close();
        fuse_reply_err(req, EIO);
        return;
      }
      if (moved == Moved::cannot) {
        pipe.close();
        copy = true;
      }
      spliced = !copy;
    }
    if (copy) {
      copy_source_pieces(pieces, ctx.sources, copied);
      spliced = false;
    }
    // The bytes read must be the sources': their size, times and inode are unchanged.
    if (pieces_changed(ctx, pieces)) {
      if (spliced) pipe.close();
      fuse_reply_err(req, EIO);
      return;
    }
  } catch (const std::bad_alloc&) {
    pipe.close();
    fuse_reply_err(req, ENOMEM);
    return;
  } catch (...) {
    pipe.close();
    fuse_reply_err(req, EIO);
    return;
  }
  if (pieces.empty()) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  fuse_reply_data(req, make_bufvec(pieces, pipe.read_end()), FUSE_BUF_SPLICE_MOVE);
  if (spliced) pipe.discard_leftovers();
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::optional<Tree::Node> n;
  try {
    n = context(req).tree->node(ino);
  } catch (...) {
    fuse_reply_err(req, EIO);
    return;
  }
  if (!n) {
    fuse_reply_err(req, ENOENT);
  } else if (n->kind != Tree::Kind::root && n->kind != Tree::Kind::entry_dir) {
    fuse_reply_err(req, ENOTDIR);
  } else {
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
  }
}

// Entry i of a directory listing: ".", "..", then the children.
void list_directory(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  const Tree& tree = *context(req).tree;
  std::optional<Tree::Node> dir;
  try {
    dir = tree.node(ino);
  } catch (...) {
    fuse_reply_err(req, EIO);
    return;
  }
  if (!dir || (dir->kind != Tree::Kind::root && dir->kind != Tree::Kind::entry_dir)) {
    fuse_reply_err(req, ENOTDIR);
    return;
  }
  thread_local std::vector<char> buffer;
  thread_local std::string name;  // NUL-terminated for libfuse
  std::size_t used = 0;
  try {
    buffer.resize(size);
    const std::uint64_t total = 2 + static_cast<std::uint64_t>(tree.child_count(ino));
    for (auto i = static_cast<std::uint64_t>(off < 0 ? 0 : off); i < total; ++i) {
      Tree::Ino child;
      if (i < 2) {
        name = i == 0 ? "." : "..";
        child = i == 0 ? ino : tree.parent(ino);
      } else {
        auto [child_name, child_ino] = tree.child(ino, static_cast<std::size_t>(i - 2));
        name.assign(child_name);
        child = child_ino;
      }
      std::size_t need;
      auto next = static_cast<off_t>(i + 1);
      if (plus) {
        fuse_entry_param e = entry_of(tree, child);
        if (i < 2) e.ino = 0;  // no lookup (and no lookup count) for . and ..
        need = fuse_add_direntry_plus(req, buffer.data() + used, size - used, name.c_str(), &e,
                                      next);
      } else {
        struct stat st {};
        st.st_ino = child;
        st.st_mode = child == Tree::root_ino || tree.child_count(child) ? S_IFDIR : S_IFREG;
        need = fuse_add_direntry(req, buffer.data() + used, size - used, name.c_str(), &st, next);
      }
      if (need > size - used) break;
      used += need;
    }
  } catch (const std::bad_alloc&) {
    fuse_reply_err(req, ENOMEM);
    return;
  } catch (...) {
    fuse_reply_err(req, EIO);
    return;
  }
  fuse_reply_buf(req, buffer.data(), used);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  list_directory(req, ino, size, off, false);
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  list_directory(req, ino, size, off, true);
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void op_statfs(fuse_req_t req, fuse_ino_t) {
  const Tree& tree = *context(req).tree;
  struct statvfs st {};
  st.f_bsize = 4096;
  st.f_frsize = 4096;
  std::uint64_t bytes = 0;
  for (const ByteSource* source : context(req).sources) bytes += source->size();
  st.f_blocks = (bytes + 4095) / 4096;
  st.f_files = tree.node_count_hint();
  st.f_namemax = 255;
  st.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &st);
}

fuse_lowlevel_ops make_operations() {
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.forget = op_forget;
  ops.forget_multi = op_forget_multi;
  ops.getattr = op_getattr;
  ops.open = op_open;
  ops.read = op_read;
  ops.release = op_release;
  ops.opendir = op_opendir;
  ops.readdir = op_readdir;
  ops.readdirplus = op_readdirplus;
  ops.releasedir = op_release;
  ops.statfs = op_statfs;
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& operations() {
  static const fuse_lowlevel_ops ops = make_operations();
  return ops;
}

}  // namespace ckptfs::fuse
