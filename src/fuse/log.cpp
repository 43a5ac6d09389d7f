// SPDX-License-Identifier: MIT
// The mount's log: stderr or syslog, at most lines_per_minute lines a minute, and libfuse's
// messages captured.
#include "log.hpp"

#include "libfuse.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <unistd.h>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

namespace ckptfs::fuse::log {
namespace {

using Clock = std::chrono::steady_clock;

// Everything below is guarded by `mutex`.
std::mutex mutex;
bool to_syslog = false;
int log_fd = -1;                   // -o log=FILE
Clock::time_point window_start{};  // the minute the last lines that got through belong to
unsigned lines_in_window = 0;
unsigned long long held_back = 0;  // lines not logged since the last one that was

// libfuse's messages: the last error, and a message being assembled from several calls
// ("unknown option(s): `-o " then "relatime'\n"; the serving threads log too, with -d).
bool pass_all_libfuse = false;
std::string last_libfuse_error;
std::string partial_libfuse_message;

// A daemon's log goes to syslog; where nothing listens on /dev/log, syslog() drops every line.
// That is said once, when the first line is logged (a mount that logs nothing says nothing), to
// whoever mounted: on the terminal or the file that was the mount's stderr, the only way back to
// them once the command has returned. A pipe or socket is not kept (a shell's $(...) would wait
// for the daemon's end), and a terminal is opened again by its name rather than held open (the
// daemon keeps no terminal of a session that ends; its own descriptor never blocks).
struct LostLogNotice {
  std::string mountpoint;
  bool said = false;           // or not to be said: syslog listens, or nobody to tell
  int file_fd = -1;            // the mount's stderr when it was a regular file: a duplicate
  std::string terminal;        // the mount's stderr when it was a terminal: its name
  struct stat terminal_st {};  // and what it was, checked when it is opened again
} lost_log;

void say_log_is_lost() {
  lost_log.said = true;
  if (syslog_listens()) return;
  const std::string text = fmt::format(
      "ckptfs: {}: warning: no syslog listens on /dev/log: the mount's log (read and server "
      "errors) is lost; -o log=FILE keeps it\n",
      lost_log.mountpoint);
  if (lost_log.file_fd >= 0) {
    (void)::write(lost_log.file_fd, text.data(), text.size());
    return;
  }
  if (lost_log.terminal.empty()) return;
  // O_NOCTTY: a daemon leads its own session, which would take the terminal as its own.
  const int fd = ::open(lost_log.terminal.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st {};
  // Still the same user's terminal: its name may have gone to another session since.
  if (::fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == lost_log.terminal_st.st_rdev &&
      st.st_uid == lost_log.terminal_st.st_uid) {
    (void)::write(fd, text.data(), text.size());
  }
  ::close(fd);
}

void write_line(Level level, std::string_view message) {
  if (log_fd >= 0) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    ::localtime_r(&now, &local);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &local);
    const std::string text = fmt::format("{} ckptfs[{}]: {}\n", when, ::getpid(), message);
    (void)::write(log_fd, text.data(), text.size());  // O_APPEND: one line, one write
    return;
  }
  if (to_syslog) {
    if (!lost_log.said) say_log_is_lost();
    ::syslog(level == Level::error ? LOG_ERR : LOG_WARNING, "%.*s",
             static_cast<int>(message.size()), message.data());
    return;
  }
  std::string text = fmt::format("ckptfs: {}\n", message);
  std::size_t done = 0;  // one write(2) per line: lines of several threads never interleave
  while (done < text.size()) {
    ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

void report_held_back() {
  if (held_back == 0) return;
  write_line(Level::warning,
             fmt::format("{} more line{} held back (at most {} a minute)", held_back,
                         held_back == 1 ? " was" : "s were", lines_per_minute));
  held_back = 0;
}

void libfuse_handler(enum fuse_log_level level, const char* format, va_list ap) {
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, format, ap);
  try {
    std::string message;
    bool critical = level <= FUSE_LOG_CRIT;
    {
      std::lock_guard lock(mutex);
      partial_libfuse_message += buffer;
      if (partial_libfuse_message.empty() || partial_libfuse_message.back() != '\n') return;
      message = std::move(partial_libfuse_message);
      partial_libfuse_message.clear();
      while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
        message.pop_back();
      }
      if (message.starts_with("fuse: ")) message.erase(0, 6);
      if (level <= FUSE_LOG_ERR) last_libfuse_error = message;
      if (pass_all_libfuse) {  // -d: libfuse's debug output, every request, never held back
        write_line(Level::warning, message);
        return;
      }
    }
    if (critical) line(Level::error, message);
  } catch (...) {
    // a message that cannot be kept is lost; libfuse goes on
  }
}

}  // namespace

void use_syslog(std::string_view mountpoint) noexcept {
  std::lock_guard lock(mutex);
  try {
    lost_log.mountpoint = mountpoint;
    struct stat st {};
    if (::fstat(STDERR_FILENO, &st) == 0) {
      char name[256];
      if (S_ISREG(st.st_mode)) {
        lost_log.file_fd = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
      } else if (S_ISCHR(st.st_mode) && ::ttyname_r(STDERR_FILENO, name, sizeof name) == 0) {
        lost_log.terminal = name;
        lost_log.terminal_st = st;
      }
    }
  } catch (...) {
    lost_log.said = true;  // nobody to tell
  }
  ::openlog("ckptfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
  to_syslog = true;
}

void use_file(int fd) noexcept {
  std::lock_guard lock(mutex);
  log_fd = fd;
}

bool syslog_listens() noexcept {
  for (int type : {SOCK_DGRAM, SOCK_STREAM}) {
    const int fd = ::socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strcpy(address.sun_path, "/dev/log");
    const bool connected =
        ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    if (connected) return true;
  }
  return false;
}

void line(Level level, std::string_view message) noexcept {
  try {
    std::lock_guard lock(mutex);
    const auto now = Clock::now();
    if (now - window_start >= std::chrono::minutes(1)) {
      report_held_back();
      window_start = now;
      lines_in_window = 0;
    }
    if (lines_in_window >= lines_per_minute) {
      ++held_back;
      return;
    }
    ++lines_in_window;
    write_line(level, message);
  } catch (...) {
    // the line is lost, not the request that logs it
  }
}

void flush() noexcept {
  try {
    std::lock_guard lock(mutex);
    report_held_back();
  } catch (...) {
  }
}

void capture_libfuse(bool pass_all) noexcept {
  {
    std::lock_guard lock(mutex);
    pass_all_libfuse = pass_all;
  }
  fuse_set_log_func(libfuse_handler);
}

void forget_libfuse_failure() noexcept {
  std::lock_guard lock(mutex);
  last_libfuse_error.clear();
  partial_libfuse_message.clear();
}

std::string libfuse_failure(std::string_view fallback) {
  std::lock_guard lock(mutex);
  if (!last_libfuse_error.empty()) return last_libfuse_error;
  if (!partial_libfuse_message.empty()) return partial_libfuse_message;
  return std::string(fallback);
}

}  // namespace ckptfs::fuse::log
