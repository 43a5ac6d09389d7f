// SPDX-License-Identifier: MIT
// A FUSE session that serves a Tree: make_session() is the adapter's one door to its callbacks,
// whose state stays private to fuse_ops.cpp.
#pragma once

#include <ckptfs/view/read_buffer.hpp>
#include <ckptfs/view/tree.hpp>

#include <memory>
#include <string>
#include <vector>

struct fuse_session;  // libfuse's (libfuse.hpp)

namespace ckptfs::fuse {

struct SessionOptions {
  // libfuse's command line after the program name: "-d", "-o" "ro,fsname=...".
  std::vector<std::string> args;
  // The -o max_read=N among args (0: none): the init callback must tell INIT the same, or
  // libfuse 3.14 refuses INIT (EPROTO) and the mount is dead.
  unsigned max_read = 0;
  // The threads that will serve the session. A file's first open stores its first bytes in the
  // kernel's page cache, and a store waits for reads in flight on the same pages, which other
  // threads answer: at most threads - 1 stores run at once, so one thread is always free.
  unsigned threads = 1;
  // Called by a handler before something that may wait (a read from a source, whose pages may
  // come from a disk; a store into the page cache), so that the loop can let another thread take
  // the requests that come meanwhile (serve_loop.hpp: may_wait()). Null: nothing to tell.
  void (*may_wait)() = nullptr;
  // Every file is opened with FOPEN_DIRECT_IO: reads go from the daemon straight into the
  // reader's buffer, never through the mount's page cache (nothing is kept for a re-read, and
  // a one-pass copy of a remote checkpoint fills no new pages). A shared mmap of a file then
  // needs FUSE_CAP_DIRECT_IO_ALLOW_MMAP (libfuse 3.16, Linux 6.6); without it, it fails.
  bool direct_io = false;
  // Files are opened without a request where the kernel allows it (FUSE_NO_OPEN_SUPPORT): no
  // OPEN and no RELEASE per open, and no check of the source at open: a source replaced, truncated
  // or rewritten is found at the next read of bytes the kernel has not cached (EIO), not at
  // open. Ignored with direct_io, which each open sets.
  bool no_open = false;
  // "io_uring" is among args' options: INIT says when the kernel did not offer it after all.
  bool io_uring = false;
};

class Session {
 public:
  struct State;  // the callbacks' state: private to fuse_ops.cpp
  Session(std::unique_ptr<State> state, fuse_session* session) noexcept;
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  fuse_session* get() const noexcept { return session_; }
  // Whether libfuse called the init callback: it did for an INIT it answered, and (the options
  // being what make_session() asked) refuses nothing after that.
  bool init_answered() const noexcept;

 private:
  std::unique_ptr<State> state_;
  fuse_session* session_;
};

// A session serving `tree`, its files' bytes read from `sources`; both must outlive it. Throws
// Error(mount_failed) with libfuse's reason when libfuse refuses (an option it does not know).
std::unique_ptr<Session> make_session(const Tree& tree, Sources sources,
                                      const SessionOptions& options);

}  // namespace ckptfs::fuse
