// SPDX-License-Identifier: MIT
// The FUSE low-level callbacks over an immutable Tree, and make_session(). Every callback runs in
// one guard that replies exactly once and logs why it failed; reads answer with the source's
// bytes spliced, never staged here.
#include "libfuse.hpp"
#include "log.hpp"
#include "read_reply.hpp"
#include "session.hpp"
#include "source_pages.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/statvfs.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <new>

namespace ckptfs::fuse {
namespace {

// The tree never changes while mounted, so the kernel may cache names and attributes forever.
constexpr double forever = 365.0 * 24 * 3600;

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

}  // namespace

// What every callback needs: the session's userdata.
struct Session::State {
  State(const Tree& t, Sources s, const SessionOptions& o)
      : tree(t),
        sources(s),
        max_read(o.max_read),
        max_stores(std::max(1u, o.threads) - 1),
        may_wait(o.may_wait),
        direct_io(o.direct_io),
        no_open_wanted(o.no_open && !o.direct_io),
        io_uring_wanted(o.io_uring),
        prefilled(t.node_count_hint() + 1),
        refusals_logged(t.node_count_hint() + 1),
        changed(std::make_unique<std::atomic<bool>[]>(s.size())),
        pages(s) {}
  const Tree& tree;
  Sources sources;
  fuse_session* session = nullptr;  // for stores into the page cache
  const unsigned max_read;
  const unsigned max_stores;  // stores into the page cache at once (see SessionOptions::threads)
  void (*const may_wait)();
  const bool direct_io;        // every file opened with FOPEN_DIRECT_IO (SessionOptions::direct_io)
  const bool no_open_wanted;   // SessionOptions::no_open (never with direct_io: opens set it)
  const bool io_uring_wanted;  // SessionOptions::io_uring
  // Set by INIT where the kernel can open without a request (FUSE_NO_OPEN(DIR)_SUPPORT): the
  // first open (opendir) answered ENOSYS makes it send no more of them.
  std::atomic<bool> no_open{false};
  std::atomic<bool> no_opendir{false};
  std::atomic<unsigned> stores{0};
  InodeSet prefilled;        // files whose first bytes were stored at their first open
  InodeSet refusals_logged;  // the Tree::Refusal groups whose refusal was logged
  // Per source: set once it is found replaced, truncated or rewritten (see source_changed()):
  // from then on every open and read of a file over it fails with EIO.
  std::unique_ptr<std::atomic<bool>[]> changed;
  SourcePages pages;
  std::atomic<bool> init_called{false};

  void wait_ahead() const {
    if (may_wait != nullptr) may_wait();
  }
};

namespace {

using Context = Session::State;

Context& context(fuse_req_t req) { return *static_cast<Context*>(fuse_req_userdata(req)); }

// The one reply a request gets: every fuse_reply_* goes through it, and a second is never sent.
class Reply {
 public:
  explicit Reply(fuse_req_t req) noexcept : req_(req) {}
  fuse_req_t request() const noexcept { return req_; }
  bool sent() const noexcept { return sent_; }

  void error(int error) noexcept {
    if (claim()) (void)fuse_reply_err(req_, error);
  }
  void none() noexcept {
    if (claim()) fuse_reply_none(req_);
  }
  void entry(const fuse_entry_param& e) noexcept {
    if (claim()) (void)fuse_reply_entry(req_, &e);
  }
  void attr(const struct stat& st) noexcept {
    if (claim()) (void)fuse_reply_attr(req_, &st, forever);
  }
  void open(const fuse_file_info& fi) noexcept {
    if (claim()) (void)fuse_reply_open(req_, &fi);
  }
  void buffer(const char* bytes, std::size_t size) noexcept {
    if (claim()) (void)fuse_reply_buf(req_, bytes, size);
  }
  void statfs(const struct statvfs& st) noexcept {
    if (claim()) (void)fuse_reply_statfs(req_, &st);
  }
  // libfuse's result: 0 once the kernel has the bytes.
  int data(fuse_bufvec* bytes) noexcept {
    if (!claim()) return -EALREADY;
    return fuse_reply_data(req_, bytes, FUSE_BUF_SPLICE_MOVE);
  }
  int iov(std::span<const iovec> bytes) noexcept {
    if (!claim()) return -EALREADY;
    return fuse_reply_iov(req_, bytes.data(), static_cast<int>(bytes.size()));
  }

 private:
  bool claim() noexcept {
    if (sent_) return false;
    sent_ = true;
    return true;
  }
  fuse_req_t req_;
  bool sent_ = false;
};

// The tree describes the sources as they were at mount. Once a source is replaced (renamed over,
// deleted), truncated or rewritten, its bytes may no longer be the ones the tree points to, so
// every open and read of a file over it fails with EIO from then on: never a short or wrong
// reply. Checked at each open (the descriptor and the path: device, inode, size, mtime) and at
// each read (the descriptor); what changes metadata alone (chmod, chown, a hard link, an atime
// update, a rename of the directory) is no change. Not caught: a change within one tick of the
// file system's timestamps that keeps the size, one that sets the mtime back (a rewrite then
// touch -d), and one made while a read is in flight. Pages the kernel
// cached before (keep_cache) may still be served: they hold the old bytes, which were right.
bool source_changed(const Context& ctx, std::uint32_t source, bool check_path) {
  std::atomic<bool>& changed = ctx.changed[source];
  if (changed.load(std::memory_order_relaxed)) return true;
  if (ctx.sources[source]->unchanged(check_path)) return false;
  if (!changed.exchange(true)) {
    log::warning(
        fmt::format("{} changed while mounted ({}): opens and reads of its files fail with EIO "
                    "from now on; unmount and mount it again",
                    quote(ctx.sources[source]->name()), ctx.sources[source]->change_reason()));
  }
  return true;
}

bool any_source_changed(const Context& ctx, bool check_path) {
  for (std::uint32_t i = 0; i < ctx.sources.size(); ++i) {
    if (source_changed(ctx, i, check_path)) return true;
  }
  return false;
}

// Whether the source a file shows or describes changed (Tree::source_of(): a tensor entry's
// files, its storage's source; in a sharded set only the changed shard's tensors fail), or any
// source for the rest (.ckptfs's views, values).
bool file_sources_changed(const Context& ctx, const Tree::Node& n, bool check_path) {
  const std::uint32_t source = ctx.tree.source_of(n);
  if (source == Tree::every_source || source >= ctx.sources.size()) {
    return any_source_changed(ctx, check_path);
  }
  return source_changed(ctx, source, check_path);
}

// Whether any source a read took bytes from changed.
bool pieces_changed(const Context& ctx, const std::vector<ReadPiece>& pieces) {
  for (const ReadPiece& p : pieces) {
    if (p.source != ReadPiece::generated && source_changed(ctx, p.source, false)) return true;
  }
  return false;
}

// Whether the tree refuses the bytes of `n` (Tree::refusal(): a broken tensor's files, an export
// that would lack one): its opens and reads fail with EIO, and why is logged once per tensor or
// export, not once per read.
bool refused(Context& ctx, const Tree::Node& n) {
  auto refusal = ctx.tree.refusal(n);
  if (!refusal) return false;
  if (ctx.refusals_logged.add(refusal->group)) log::error(refusal->why);
  return true;
}

// any_source_changed() for a failure being handled: never throws (a failure to tell says no).
bool changed_quietly(const Context& ctx) noexcept {
  try {
    return any_source_changed(ctx, false);
  } catch (...) {
    return false;
  }
}

// Logs why a request failed, as one line naming the operation and the inode.
void log_failure(const char* op, fuse_ino_t ino, std::string_view what) noexcept {
  try {
    log::error(fmt::format("{} of inode {} failed: {}", op, ino, what));
  } catch (...) {
  }
}

// Runs `body`, which replies through the Reply it is given. Whatever it throws is logged and
// answered (ENOMEM for memory, EIO for the rest: a source that cannot be read, a bug), and a body
// that returns without replying is answered EIO: every request gets exactly one reply. A failure
// after a source changed is that change's, which source_changed() logged once: it is not logged
// again for every read.
template <typename Body>
void guarded(fuse_req_t req, const char* op, fuse_ino_t ino, Body&& body) noexcept {
  Reply reply(req);
  try {
    body(reply);
    if (!reply.sent()) {
      log_failure(op, ino, "no reply");
      reply.error(EIO);
    }
    return;
  } catch (const std::bad_alloc&) {
    log_failure(op, ino, "out of memory");
    reply.error(ENOMEM);
    return;
  } catch (const std::exception& e) {
    if (!changed_quietly(context(req))) log_failure(op, ino, e.what());
  } catch (...) {
    log_failure(op, ino, "unknown exception");
  }
  reply.error(EIO);
}

fuse_entry_param entry_of(const Tree& tree, Tree::Ino ino) {
  fuse_entry_param e{};
  e.ino = ino;
  e.generation = 1;
  e.attr_timeout = forever;
  e.entry_timeout = forever;
  tree.stat(ino, e.attr);
  return e;
}

bool is_directory(const Tree::Node& n) {
  return n.kind == Tree::Kind::root || n.kind == Tree::Kind::views_dir ||
         n.kind == Tree::Kind::entry_dir;
}

void op_init(void* userdata, fuse_conn_info* conn) {
  auto& ctx = *static_cast<Context*>(userdata);
  conn->max_read = ctx.max_read;  // must equal the mount option, or libfuse refuses INIT
  // Readahead as large as the kernel allows, and many requests in flight.
  conn->max_readahead = conn->max_readahead ? conn->max_readahead : 1u << 20;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
  // Splice tensor bytes from the checkpoint through a pipe into the reply (docs/PERFORMANCE.md).
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  // READDIRPLUS for every batch of a listing, not adaptively (FUSE_CAP_READDIRPLUS_AUTO, which
  // libfuse turns on and the kernel then uses for a listing's first batch only): every entry
  // comes with its attributes and a dentry, so what a listing is for (find, glob, ls -l, a walk
  // that opens each entry) then sends no LOOKUP per entry. The tree is immutable, so the dentries
  // are good forever. What it costs: a plain listing of 10,000 entries takes 35 ms instead of 6
  // (the kernel makes an inode for each), once. What it saves: 10,000 LOOKUPs, 0.26 s of
  // find | xargs stat and 0.3 s of a glob over the same mount (docs/PERFORMANCE.md, issue 25).
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  // Directories opened without a request: opendir checks nothing, and the kernel then caches
  // listings and keeps them (FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE, what opendir answered).
  // `ls -l` of a listed directory again sends nothing instead of OPENDIR and RELEASEDIR.
  if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) {
    conn->want |= FUSE_CAP_NO_OPENDIR_SUPPORT;
    ctx.no_opendir.store(true);
  }
  // -o no_open: files too (OPEN, and RELEASE after it); the kernel then keeps their cached pages
  // (FOPEN_KEEP_CACHE) as open did. What is lost: the check of the source's path at each open
  // (source_changed()); reads still check the descriptor.
  if (ctx.no_open_wanted && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT)) {
    conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
    ctx.no_open.store(true);
  }
  if (ctx.direct_io) {
    bool mmap_allowed = false;
#ifdef FUSE_CAP_DIRECT_IO_ALLOW_MMAP  // libfuse 3.16 and later
    if (conn->capable & FUSE_CAP_DIRECT_IO_ALLOW_MMAP) {
      conn->want |= FUSE_CAP_DIRECT_IO_ALLOW_MMAP;
      mmap_allowed = true;
    }
#endif
    if (!mmap_allowed) {
      log::warning(
          "direct_io: a shared mmap of the mount's files fails (ENODEV), as this libfuse or "
          "kernel cannot allow it (libfuse 3.16 and Linux 6.6 can); private mappings work");
    }
  }
#ifdef FUSE_CAP_OVER_IO_URING  // libfuse 3.18 and later
  if (ctx.io_uring_wanted && (conn->capable & FUSE_CAP_OVER_IO_URING) == 0) {
    log::warning(
        "io_uring not used: the kernel did not offer it at INIT; requests go through "
        "/dev/fuse");
  }
#endif
  ctx.init_called.store(true);
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  guarded(req, "lookup", parent, [&](Reply& reply) {
    const Tree& tree = context(req).tree;
    const Tree::Ino ino = tree.lookup(parent, name);
    if (ino != 0) return reply.entry(entry_of(tree, ino));
    // A negative entry with a timeout: the kernel remembers that the name does not exist.
    fuse_entry_param e{};
    e.entry_timeout = forever;
    reply.entry(e);
  });
}

void op_forget(fuse_req_t req, fuse_ino_t, uint64_t) { fuse_reply_none(req); }

void op_forget_multi(fuse_req_t req, size_t, fuse_forget_data*) { fuse_reply_none(req); }

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  guarded(req, "getattr", ino, [&](Reply& reply) {
    struct stat st {};
    if (!context(req).tree.stat(ino, st)) return reply.error(ENOENT);
    reply.attr(st);
  });
}

// Reads at least this large may take long enough (converting, gathering, waiting for a server)
// that the next request is better answered by another thread.
constexpr std::size_t large_read = 128 * 1024;

// Each serving thread's reply, reused read after read.
thread_local ReadReply thread_reply;

// Reads up to this size are answered with their bytes copied (pread, then one writev to
// /dev/fuse), not spliced: a splice costs a system call more (source to pipe, then libfuse's
// header and the pipe to /dev/fuse) than the copy of a few pages saves. Random 4 KiB reads, one
// READ each, ran at 36k and 48k reads/s (medians of 4, alternated) spliced and copied.
constexpr std::size_t copied_read = 16 * 1024;

// The bytes a file's first open stores in the kernel's page cache: reading them then needs no
// READ round trip. Small files (a tensor.npy of a few elements, meta.json) fit whole; for large
// ones it is the first pages, which every reader reads first (a .npy header, a file's type).
constexpr std::size_t prefill_bytes = 64 * 1024;

// Called before the open is answered, so that the caller's first read finds the bytes. Best
// effort: when anything fails, the bytes are left to READ, which checks everything again and
// reports what fails.
void prefill_page_cache(Context& ctx, fuse_ino_t ino, std::uint64_t size) {
  if (ctx.session == nullptr || size == 0) return;
  struct StoreSlot {
    Context& ctx;
    bool taken = ctx.stores.fetch_add(1) < ctx.max_stores;
    ~StoreSlot() { ctx.stores.fetch_sub(1); }
  } slot{ctx};
  if (!slot.taken || !ctx.prefilled.add(ino)) return;
  ReadReply& reply = thread_reply;
  struct End {
    ReadReply& reply;
    ~End() { reply.end(); }
  } end{reply};
  const std::size_t length = static_cast<std::size_t>(std::min<std::uint64_t>(size, prefill_bytes));
  try {
    ctx.wait_ahead();  // the sources' pages may come from a disk; the store waits for page locks
    ctx.tree.read(ino, 0, length, ctx.sources, reply.begin());
    if (reply.stage(ctx.sources, ReadReply::Transfer::copy) != ReadReply::Staged::ok) return;
    if (pieces_changed(ctx, reply.pieces())) return;
  } catch (const std::exception&) {
    return;  // READ reads the bytes again, and logs the failure if it fails too
  }
  // NO_SPLICE: the bytes are in memory, and libfuse would copy them into a pipe first (see
  // ReadReply::memory_iovecs()); without it, it writes them to /dev/fuse (a few small pieces are
  // gathered into one buffer first).
  fuse_bufvec* bytes = reply.bufvec();
  if (bytes != nullptr &&
      fuse_lowlevel_notify_store(ctx.session, ino, 0, bytes, FUSE_BUF_NO_SPLICE) == 0) {
    for (const SourceRange& range : reply.source_ranges()) {
      ctx.pages.cached_by_mount(range, SourcePages::Drop::later);
    }
  }
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "open", ino, [&](Reply& reply) {
    Context& ctx = context(req);
    const auto n = ctx.tree.node(ino);
    if (!n) return reply.error(ENOENT);
    if (is_directory(*n)) return reply.error(EISDIR);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) return reply.error(EROFS);
    if (file_sources_changed(ctx, *n, true)) return reply.error(EIO);
    if (refused(ctx, *n)) return reply.error(EIO);
    // The kernel opens every file from now on without asking (with keep_cache).
    if (ctx.no_open.load(std::memory_order_relaxed)) return reply.error(ENOSYS);
    if (ctx.direct_io) {
      fi->direct_io = 1;  // no page cache to fill
    } else if (!ctx.io_uring_wanted) {
      // Not over io_uring: libfuse serves each CPU's ring with one thread, so a store that waits
      // for a READ in flight on its pages could wait for its own thread (see max_stores).
      prefill_page_cache(ctx, ino, ctx.tree.size(*n));
    }
    fi->keep_cache = 1;  // the sources are immutable: cached pages stay valid across opens
    fi->noflush = 1;
    reply.open(*fi);
  });
}

void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  guarded(req, "read", ino, [&](Reply& reply) {
    Context& ctx = context(req);
    ReadReply& read = thread_reply;
    struct End {
      ReadReply& read;
      ~End() { read.end(); }
    } end{read};
    ReadBuffer& buffer = read.begin();
    // A large read may convert or gather its bytes, or wait for a server: the next request
    // (the kernel's readahead) goes to another thread meanwhile.
    if (size >= large_read) ctx.wait_ahead();
    // Opened before (no_open: opened without a request), or refused after all: never a short
    // reply, which the reader would take for the end of the file.
    if (const auto n = ctx.tree.node(ino); n && refused(ctx, *n)) return reply.error(EIO);
    ctx.tree.read(ino, static_cast<std::uint64_t>(off), size, ctx.sources, buffer);
    if (std::ranges::any_of(buffer.pieces(), [](const ReadPiece& p) { return !p.memory; })) {
      ctx.wait_ahead();  // the sources' pages may have to come from a disk
    }
    // The bytes read must be the sources': their size, times and inode are unchanged.
    const auto transfer =
        size <= copied_read ? ReadReply::Transfer::copy : ReadReply::Transfer::splice;
    if (read.stage(ctx.sources, transfer) != ReadReply::Staged::ok ||
        pieces_changed(ctx, read.pieces())) {
      (void)any_source_changed(ctx, false);  // logs the change, once
      return reply.error(EIO);
    }
    fuse_bufvec* bytes = read.bufvec();
    if (bytes == nullptr) return reply.buffer(nullptr, 0);
    const std::span<const iovec> memory = read.memory_iovecs();
    const int sent = memory.empty() ? reply.data(bytes) : reply.iov(memory);
    // Once the kernel has the bytes, the mount's page cache holds them (unless the reader asked
    // for O_DIRECT, or the mount's files bypass it): the sources' pages are no longer needed.
    if (sent == 0 && (fi->flags & O_DIRECT) == 0 && !ctx.direct_io) {
      for (const SourceRange& range : read.source_ranges()) ctx.pages.cached_by_mount(range);
    }
  });
}

void op_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  guarded(req, "opendir", ino, [&](Reply& reply) {
    const auto n = context(req).tree.node(ino);
    if (!n) return reply.error(ENOENT);
    if (!is_directory(*n)) return reply.error(ENOTDIR);
    // The kernel opens every directory from now on without asking, caching its listing.
    if (context(req).no_opendir.load(std::memory_order_relaxed)) return reply.error(ENOSYS);
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    reply.open(*fi);
  });
}

// Entry i of a directory listing: ".", "..", then the children.
void list_directory(Reply& reply, const Tree& tree, fuse_ino_t ino, size_t size, off_t off,
                    bool plus) {
  const auto dir = tree.node(ino);
  if (!dir || !is_directory(*dir)) return reply.error(ENOTDIR);
  // Not zero-filled: only what the entries fill is touched (and sent).
  thread_local std::unique_ptr<char[]> buffer;
  thread_local std::size_t capacity = 0;
  thread_local std::string name;  // NUL-terminated for libfuse
  if (capacity < size) {
    buffer.reset(new char[size]);
    capacity = size;
  }
  std::size_t used = 0;
  const std::uint64_t total = 2 + static_cast<std::uint64_t>(tree.child_count(ino));
  for (auto i = static_cast<std::uint64_t>(off < 0 ? 0 : off); i < total; ++i) {
    Tree::Ino child;
    if (i < 2) {
      name = i == 0 ? "." : "..";
      child = i == 0 ? ino : tree.parent(ino);
    } else {
      child = tree.child(ino, static_cast<std::size_t>(i - 2), name);
    }
    std::size_t need;
    const auto next = static_cast<off_t>(i + 1);
    const auto node = i < 2 ? std::nullopt : tree.node(child);
    if (plus && (!node || tree.size_known(*node))) {
      fuse_entry_param e = entry_of(tree, child);
      if (i < 2) e.ino = 0;  // no lookup (and no lookup count) for . and ..
      need = fuse_add_direntry_plus(reply.request(), buffer.get() + used, size - used, name.c_str(),
                                    &e, next);
    } else if (plus) {
      // Node id 0: the kernel takes the name and type only, and looks the file up when it is
      // stat'ed; a listing of .ckptfs does not count index.json and model.safetensors.
      fuse_entry_param e{};
      e.attr.st_ino = child;
      e.attr.st_mode = S_IFREG;
      need = fuse_add_direntry_plus(reply.request(), buffer.get() + used, size - used, name.c_str(),
                                    &e, next);
    } else {
      // The type alone: a child's own files (an entry's tensor.pt plan) are not made for it.
      struct stat st {};
      st.st_ino = child;
      st.st_mode = i < 2 || (node && is_directory(*node)) ? S_IFDIR : S_IFREG;
      need = fuse_add_direntry(reply.request(), buffer.get() + used, size - used, name.c_str(), &st,
                               next);
    }
    if (need > size - used) break;
    used += need;
  }
  reply.buffer(buffer.get(), used);
}

void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  guarded(req, "readdir", ino,
          [&](Reply& reply) { list_directory(reply, context(req).tree, ino, size, off, false); });
}

void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  guarded(req, "readdirplus", ino,
          [&](Reply& reply) { list_directory(reply, context(req).tree, ino, size, off, true); });
}

void op_release(fuse_req_t req, fuse_ino_t, fuse_file_info*) { fuse_reply_err(req, 0); }

void op_statfs(fuse_req_t req, fuse_ino_t ino) {
  guarded(req, "statfs", ino, [&](Reply& reply) {
    const Context& ctx = context(req);
    struct statvfs st {};
    st.f_bsize = 4096;
    st.f_frsize = 4096;
    std::uint64_t bytes = 0;
    for (const ByteSource* source : ctx.sources) bytes += source->size();
    st.f_blocks = (bytes + 4095) / 4096;
    st.f_files = ctx.tree.node_count_hint();
    st.f_namemax = 255;
    st.f_flag = ST_RDONLY;
    reply.statfs(st);
  });
}

// Everything else (all writes) is left to the read-only mount and the kernel.
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

Session::Session(std::unique_ptr<State> state, fuse_session* session) noexcept
    : state_(std::move(state)), session_(session) {}

Session::~Session() { fuse_session_destroy(session_); }

bool Session::init_answered() const noexcept { return state_->init_called.load(); }

std::unique_ptr<Session> make_session(const Tree& tree, Sources sources,
                                      const SessionOptions& options) {
  static const fuse_lowlevel_ops operations = make_operations();
  auto state = std::make_unique<Session::State>(tree, sources, options);
  std::vector<std::string> strings{"ckptfs"};
  strings.insert(strings.end(), options.args.begin(), options.args.end());
  std::vector<char*> argv;
  argv.reserve(strings.size());
  for (std::string& s : strings) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se = fuse_session_new(&args, &operations, sizeof operations, state.get());
  fuse_opt_free_args(&args);
  if (se == nullptr) {
    throw Error(ExitCode::mount_failed, log::libfuse_failure("cannot create the FUSE session"));
  }
  state->session = se;
  return std::make_unique<Session>(std::move(state), se);
}

}  // namespace ckptfs::fuse
