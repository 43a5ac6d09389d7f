// SPDX-License-Identifier: MIT
// serve(): the threads that take requests from /dev/fuse and answer them, in place of libfuse's
// multithreaded loop, so that one of them can busy-poll for the next request.
#pragma once

#include <chrono>
#include <functional>

struct fuse_session;  // libfuse's (libfuse.hpp)

namespace ckptfs::fuse {

struct ServeOptions {
  unsigned threads = 4;
  // After answering a request, one thread keeps polling /dev/fuse for this long before it sleeps.
  // Zero: every idle thread sleeps at once (as libfuse's loop does).
  std::chrono::microseconds busy_poll{0};
  // Called once, by the thread that processed the first request (the kernel's INIT, answered or
  // refused), right after it: it may judge whether the mount came up, and stop serving with
  // fuse_session_exit() when it did not. Other threads may already serve the requests that follow
  // a successful INIT, after which the kernel has applied what INIT negotiated.
  std::function<void()> after_init;
  // Called once when serving stops (a signal, fuse_session_exit(), the unmount), before the
  // serving threads are waited for: it must make whatever they may be waiting for give up (the
  // remote transfers of a stalled server), so that a signal unmounts at once. From another
  // thread than the serving ones; must not throw.
  std::function<void()> on_stop;
};

// To be called by a request handler before something that may wait: a read from a source (its
// pages may have to come from a disk), a store into the kernel's page cache (it waits for reads
// in flight on the same pages). Requests that come meanwhile then wake a sleeping thread instead
// of waiting for this one. Does nothing outside serve()'s threads. (The session's
// SessionOptions::may_wait hook.)
void may_wait() noexcept;

// Serves `session` until it is unmounted or fuse_session_exit() is called (libfuse's signal
// handlers do: one thread besides the serving ones is always there to take their signals, even
// when every serving thread waits for a read). Throws Error(mount_failed) when /dev/fuse cannot be
// read or set up; an exception of after_init is logged, and serving goes on.
void serve(fuse_session* session, const ServeOptions& options);

}  // namespace ckptfs::fuse
