// SPDX-License-Identifier: MIT
// serve(): a pool of threads reading requests from /dev/fuse (made non-blocking) and answering
// them through libfuse's fuse_session_process_buf().
//
// Why not libfuse's fuse_session_loop_mt(): its threads sleep in read() between requests, and
// every request then starts by waking one. On a VM whose idle vCPUs halt (this project's test
// machine), waking a thread on another vCPU costs tens of microseconds, more than the rest of a
// round trip (docs/PERFORMANCE.md). So after answering a request, one thread (never two) keeps
// polling for the next for a short while. The other threads sleep in one shared epoll set, which
// wakes one of them per request; while a thread polls or answers, /dev/fuse is out of that set
// so that the request it is about to take does not wake a sleeper for nothing (a wake-up that
// costs the caller as much as the round trip saves). It goes back in when requests pile up, when
// a handler may wait (may_wait: a disk read, a store into the page cache), and when the poller
// gives up. The poller yields the CPU at each turn, so it only uses time no other thread wants.
#include "serve_loop.hpp"

#include "libfuse.hpp"
#include "log.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

namespace ckptfs::fuse {
namespace {

using Clock = std::chrono::steady_clock;

struct Shared {
  Shared(fuse_session* se, const ServeOptions* o, int epoll, int stopper)
      : session(se), options(o), fuse_fd(fuse_session_fd(se)), epoll_fd(epoll), stop_fd(stopper) {}
  fuse_session* session;
  const ServeOptions* options;
  int fuse_fd;           // /dev/fuse, non-blocking
  int epoll_fd;          // where sleeping threads wait: /dev/fuse and stop_fd
  int stop_fd;           // an eventfd written when stopping
  sigset_t wait_mask{};  // the signal mask while sleeping: libfuse's signals delivered only then
  // Whether /dev/fuse is in the epoll set. Changed by the poller only (the thread that holds
  // `polling`, which always puts /dev/fuse back before letting go); read by any thread.
  std::atomic<bool> sleepers_woken{true};
  std::atomic<bool> stop{false};
  std::atomic<bool> polling{false};  // one thread at a time busy-polls
  std::atomic<int> status{0};
  std::atomic<bool> init_done{false};
};

class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// Every thread that stops writes the eventfd: each write wakes one more sleeper, which stops too.
void stop_all(Shared& s) {
  s.stop.store(true);
  std::uint64_t one = 1;
  (void)!::write(s.stop_fd, &one, sizeof one);
}

bool stopping(Shared& s) {
  return s.stop.load(std::memory_order_relaxed) || fuse_session_exited(s.session) != 0;
}

// Whether a request on /dev/fuse wakes a sleeping thread: /dev/fuse is taken out of the epoll set
// and put back. (EPOLL_CTL_MOD with no events does not do it: the kernel adds EPOLLERR|EPOLLHUP,
// and /dev/fuse's wake-ups carry no event mask, so they still wake the sleepers.)
// Called by the poller only. Returns whether the state is now `on`.
bool wake_sleepers(Shared& s, bool on) {
  if (s.sleepers_woken.load(std::memory_order_relaxed) == on) return true;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.fd = s.fuse_fd;
  // ADD wakes a sleeper at once when a request already waits.
  if (::epoll_ctl(s.epoll_fd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s.fuse_fd, &ev) != 0) {
    return false;
  }
  s.sleepers_woken.store(on, std::memory_order_relaxed);
  return true;
}

// Edge-triggered, requests that arrive together may wake one sleeper between them: a thread that
// takes a request and sees more waiting wakes another (EPOLL_CTL_MOD re-checks /dev/fuse and
// wakes a sleeper when it is readable). Fails harmlessly when the poller has /dev/fuse out of the
// set; the poller then sees the backlog itself.
void share_backlog(Shared& s) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.fd = s.fuse_fd;
  (void)::epoll_ctl(s.epoll_fd, EPOLL_CTL_MOD, s.fuse_fd, &ev);
}

bool request_waiting(const Shared& s) {
  pollfd p{s.fuse_fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

// The polling thread's state, for may_wait() called from a request handler on this thread.
thread_local Shared* this_threads_loop = nullptr;
thread_local bool this_thread_polls = false;

void run_worker(Shared& s) {
  this_threads_loop = &s;
  // s lives on serve()'s stack: this thread (serve's own too) must not keep it past the loop.
  struct Forget {
    ~Forget() { this_threads_loop = nullptr; }
  } forget;
  const auto busy_poll = s.options->busy_poll;
  fuse_buf buf{};       // libfuse allocates its memory on the first receive
  bool poller = false;  // this thread holds s.polling
  Clock::time_point deadline{};
  while (!stopping(s)) {
    int res = fuse_session_receive_buf(s.session, &buf);  // never blocks: O_NONBLOCK
    if (res == -EAGAIN) {
      if (poller) {
        (void)wake_sleepers(s, false);  // nothing waits: the next request is this thread's
        // Sleeping with /dev/fuse out of the epoll set would leave requests unanswered: the
        // thread keeps polling until it is back in (epoll_ctl failed only for lack of memory).
        if (Clock::now() < deadline || !wake_sleepers(s, true)) {
          // Polling must not take a CPU from a runnable thread (the readers, when they are as
          // many as the CPUs; docs/PERFORMANCE.md).
          ::sched_yield();
          continue;
        }
        s.polling.store(false);
        poller = false;
      }
      // libfuse's signals (SIGTERM...) are blocked except here: one that came after the
      // stopping() check above is delivered now and ends the wait with EINTR.
      epoll_event ready[2];
      (void)::epoll_pwait(s.epoll_fd, ready, 2, -1, &s.wait_mask);
      continue;
    }
    if (res == -EINTR) continue;
    if (res <= 0) {  // 0: unmounted or exited; < 0: /dev/fuse failed
      if (res < 0) s.status.store(res);
      break;
    }
    // Requests that already wait are for the sleepers; so are those that come while this one is
    // answered, once its handler calls may_wait().
    if (request_waiting(s)) {
      if (s.sleepers_woken.load(std::memory_order_relaxed)) {
        share_backlog(s);
      } else if (poller) {
        (void)wake_sleepers(s, true);
      }
    }
    this_thread_polls = poller;
    fuse_session_process_buf(s.session, &buf);
    if (s.options->after_init && !s.init_done.exchange(true)) {
      try {
        s.options->after_init();
      } catch (const std::exception& e) {
        // whatever it did not do (report readiness, tune the readahead) stays undone
        log::error(fmt::format("after the kernel's INIT: {}", e.what()));
      }
    }
    if (!poller && busy_poll.count() > 0 && !s.polling.load(std::memory_order_relaxed) &&
        !s.polling.exchange(true)) {
      poller = true;
    }
    if (poller) deadline = Clock::now() + busy_poll;
  }
  if (poller) {
    (void)wake_sleepers(s, true);
    s.polling.store(false);
  }
  std::free(buf.mem);
  stop_all(s);
}

// The thread that is always ready for libfuse's signals, which the serving threads take only
// while they sleep: when every one of them waits for a read (a stalled server), a SIGTERM would
// otherwise wait with them. Once serving stops, for whatever reason, it calls on_stop (which
// makes those reads give up) and wakes every thread.
void watch_for_stop(Shared& s) {
  pollfd stop{s.stop_fd, POLLIN, 0};
  // The signals are blocked here too, except inside ppoll(): one that comes after the check is
  // delivered there and ends the wait (EINTR).
  while (!stopping(s)) (void)::ppoll(&stop, 1, nullptr, &s.wait_mask);
  if (s.options->on_stop) s.options->on_stop();
  stop_all(s);
}

}  // namespace

void may_wait() noexcept {
  if (this_threads_loop != nullptr && this_thread_polls) {
    (void)wake_sleepers(*this_threads_loop, true);
  }
}

void serve(fuse_session* session, const ServeOptions& options) {
  auto failed = [](const char* what, int error) {
    return Error(ExitCode::mount_failed, fmt::format("{}: {}", what, std::strerror(error)));
  };
  int fd = fuse_session_fd(session);
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    throw failed("making /dev/fuse non-blocking", errno);
  }
  Descriptor epoll(::epoll_create1(EPOLL_CLOEXEC));
  Descriptor stop_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (epoll.get() < 0 || stop_fd.get() < 0) throw failed("setting up the serving threads", errno);
  epoll_event request{};
  request.events = EPOLLIN | EPOLLET;  // one wake-up per new request, not one per sleeper
  request.data.fd = fd;
  epoll_event stop{};
  stop.events = EPOLLIN;
  stop.data.fd = stop_fd.get();
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &request) != 0 ||
      ::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, stop_fd.get(), &stop) != 0) {
    throw failed("setting up the serving threads", errno);
  }
  Shared shared(session, &options, epoll.get(), stop_fd.get());
  // The signals libfuse handles (fuse_set_signal_handlers) are blocked in every serving thread
  // (threads inherit this one's mask) and let through only while a thread sleeps, so that one
  // cannot slip in between a thread's last look at fuse_session_exited() and its sleep.
  sigset_t handled;
  sigemptyset(&handled);
  for (int signum : {SIGHUP, SIGINT, SIGTERM}) sigaddset(&handled, signum);
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &handled, &previous);
  shared.wait_mask = previous;
  for (int signum : {SIGHUP, SIGINT, SIGTERM}) sigdelset(&shared.wait_mask, signum);
  std::vector<std::thread> threads;
  std::thread watcher;
  try {
    watcher = std::thread(watch_for_stop, std::ref(shared));
  } catch (const std::exception& e) {
    // The serving threads still take signals while they sleep.
    log::warning(fmt::format("no thread to watch for signals: {}", e.what()));
  }
  try {
    threads.reserve(options.threads);
    for (unsigned i = 1; i < options.threads; ++i) {
      threads.emplace_back(run_worker, std::ref(shared));
    }
  } catch (const std::exception& e) {
    log::warning(fmt::format("serving with {} threads instead of {}: {}", threads.size() + 1,
                             options.threads, e.what()));  // fewer threads serve too
  }
  run_worker(shared);  // this thread serves as well
  if (!watcher.joinable() && options.on_stop) options.on_stop();
  for (std::thread& t : threads) t.join();
  if (watcher.joinable()) watcher.join();
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (const int status = shared.status.load(); status < 0) {
    throw failed("reading /dev/fuse", -status);
  }
}

}  // namespace ckptfs::fuse
