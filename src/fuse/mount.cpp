// SPDX-License-Identifier: MIT
// mount_and_serve(): session, signal handlers, mount, daemon child, serving threads, readiness once
// INIT is answered, unmount.
#include "mount.hpp"

#include "libfuse.hpp"
#include "log.hpp"
#include "read_reply.hpp"
#include "readahead.hpp"
#include "serve_loop.hpp"
#include "session.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace ckptfs::fuse {
namespace {

Error mount_error(const std::string& what) { return Error(ExitCode::mount_failed, what); }

// "/dev/fd/N": mount.fuse3 -o drop_privileges opened /dev/fuse and mounted it itself; libfuse
// then serves descriptor N.
bool is_fuse_fd_path(const std::string& path) {
  constexpr std::string_view prefix = "/dev/fd/";
  if (!path.starts_with(prefix) || path.size() == prefix.size()) return false;
  return path.find_first_not_of("0123456789", prefix.size()) == std::string::npos;
}

// sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET (a path, or an abstract
// socket written with a leading '@'). Nothing happens without it; errors are ignored.
void notify_systemd(std::string_view state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (path == nullptr || (path[0] != '/' && path[0] != '@')) return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::size_t length = std::strlen(path);
  if (length >= sizeof address.sun_path) return;
  std::memcpy(address.sun_path, path, length);
  if (path[0] == '@') address.sun_path[0] = '\0';
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                 reinterpret_cast<const sockaddr*>(&address),
                 static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length));
  ::close(fd);
}

// What is mounted: an absolute path (the daemon changes directory to "/", and libfuse unmounts
// the path it mounted: a relative one then names nothing, and a dead mount stayed), resolved
// before the mount exists (afterwards, resolving would ask the mount). It must be an existing
// directory that is not already a mount point (mounting twice on one directory is nearly always
// a mistake: the first mount would be hidden). Or /dev/fd/N (is_fuse_fd_path()), as it is.
std::string resolve_mountpoint(const std::string& path) {
  if (is_fuse_fd_path(path)) return path;  // checked by libfuse: an open /dev/fuse descriptor
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      throw mount_error(fmt::format("the mountpoint does not exist: create it with mkdir -p {}",
                                    shell_quote(path)));
    }
    throw mount_error(fmt::format("the mountpoint: {}", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) throw mount_error("the mountpoint is not a directory");
  struct stat parent {};
  if (::stat((path + "/..").c_str(), &parent) != 0) throw mount_error(std::strerror(errno));
  if (parent.st_dev != st.st_dev || parent.st_ino == st.st_ino) {
    throw mount_error(fmt::format("already a mount point: unmount it first (fusermount3 -u {})",
                                  shell_quote(path)));
  }
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) throw mount_error(std::strerror(errno));
  std::string absolute = resolved;
  std::free(resolved);
  return absolute;
}

// How many entries a directory holds besides . and .. (0 when it cannot be read).
std::size_t entries_in(const std::string& directory) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(directory.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != "..") ++n;
    }
    ::closedir(d);
  }
  return n;
}

unsigned usable_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return std::thread::hardware_concurrency();
  return static_cast<unsigned>(CPU_COUNT(&set));
}

// Why FUSE over io_uring cannot be used (-o io_uring), or "" when it can: libfuse has it from 3.18
// (built with liburing: scripts/build-libfuse-uring), Linux from 6.14, and there only once the
// admin set /sys/module/fuse/parameters/enable_uring (off by default).
std::string io_uring_unavailable() {
#if FUSE_MAJOR_VERSION * 100 + FUSE_MINOR_VERSION < 318
  return fmt::format(
      "this ckptfs was built with libfuse {}.{}, which has no FUSE over io_uring (3.18 has: "
      "scripts/build-libfuse-uring, then cmake -DCKPTFS_LIBFUSE_PREFIX=...)",
      FUSE_MAJOR_VERSION, FUSE_MINOR_VERSION);
#else
  constexpr const char* parameter = "/sys/module/fuse/parameters/enable_uring";
  int fd = ::open(parameter, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "this kernel has no FUSE over io_uring (Linux 6.14 and later have)";
  char value = 'N';
  const ssize_t n = ::read(fd, &value, 1);
  ::close(fd);
  if (n != 1 || value != 'Y') {
    return fmt::format(
        "the kernel has it turned off ({} is N; root turns it on with "
        "'echo Y > {}')",
        parameter, parameter);
  }
  return "";
#endif
}

// libfuse's handlers of SIGHUP, SIGINT and SIGTERM (they end the session), for as long as this
// lives.
class SignalHandlers {
 public:
  explicit SignalHandlers(fuse_session* se) : se_(se) {
    if (fuse_set_signal_handlers(se) != 0) throw mount_error("cannot install signal handlers");
  }
  ~SignalHandlers() { fuse_remove_signal_handlers(se_); }
  SignalHandlers(const SignalHandlers&) = delete;
  SignalHandlers& operator=(const SignalHandlers&) = delete;

 private:
  fuse_session* se_;
};

// The session mounted on `mountpoint` until unmount() or the end of its scope.
class MountedSession {
 public:
  MountedSession(fuse_session* se, const std::string& mountpoint) : se_(se) {
    if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
      throw mount_error(log::libfuse_failure("mount failed"));
    }
  }
  ~MountedSession() { unmount(); }
  MountedSession(const MountedSession&) = delete;
  MountedSession& operator=(const MountedSession&) = delete;
  void unmount() noexcept {
    if (se_ != nullptr) fuse_session_unmount(se_);
    se_ = nullptr;
  }

 private:
  fuse_session* se_;
};

// How a daemon's serving child tells its waiting parent how the start went, through a pipe: one
// byte, 'R' once the mount is ready, or 'F' followed by the error message; then end-of-file.
// End-of-file before any byte means that the child died first.
class DaemonReport {
 public:
  explicit DaemonReport(int fd) : fd_(fd) {}
  DaemonReport(const DaemonReport&) = delete;
  DaemonReport& operator=(const DaemonReport&) = delete;
  ~DaemonReport() {
    if (fd_ >= 0) ::close(fd_);
  }
  void ready() { send("R"); }
  void failed(const std::string& what) { send("F" + what); }

 private:
  void send(const std::string& message) {
    if (fd_ < 0) return;
    std::size_t done = 0;
    while (done < message.size()) {
      ssize_t n = ::write(fd_, message.data() + done, message.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the parent is gone: nobody to tell
      done += static_cast<std::size_t>(n);
    }
    ::close(fd_);
    fd_ = -1;
  }
  int fd_;
};

// A daemon's stdin, stdout and stderr become /dev/null, so that it keeps no pipe of its caller
// open (a shell's $(...), subprocess.run) once the parent has returned.
void detach_stdio() {
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) return;
  for (int fd = 0; fd <= 2; ++fd) (void)::dup2(null, fd);
  if (null > 2) ::close(null);
}

std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       ::strsignal(WTERMSIG(status)));
  }
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

// The parent of a daemon: waits for the child's report (DaemonReport), tells request.notifier and
// returns the exit code. A signal that libfuse's handlers catch here (Ctrl-C while starting) is
// passed on to the child, which then stops and reports. A child that died before reporting may
// have left a dead mount: it is unmounted here.
int wait_for_daemon(int report_fd, pid_t child, fuse_session* se, const MountRequest& request) {
  // This process reports for its child, in the caller's own words (main: "ckptfs: MOUNTPOINT:").
  auto failed = [&](const std::string& what) {
    fmt::print(stderr, "ckptfs: {}: {}\n", request.mountpoint, what);
    if (request.notifier != nullptr) request.notifier->send(false);  // after the error line
    return static_cast<int>(ExitCode::mount_failed);
  };
  std::string report;
  bool passed_on = false;
  char buffer[512];
  while (true) {
    ssize_t n = ::read(report_fd, buffer, sizeof buffer);
    if (n > 0) {
      report.append(buffer, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      if (!passed_on && fuse_session_exited(se) != 0) {
        ::kill(child, SIGTERM);
        passed_on = true;
      }
    } else {
      break;
    }
  }
  ::close(report_fd);
  if (report == "R") {
    if (!request.notice.empty()) fmt::print(stderr, "ckptfs: {}\n", request.notice);
    if (request.notifier != nullptr) request.notifier->send(true);
    return 0;
  }
  if (!report.empty() && report[0] == 'F') return failed(report.substr(1));
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  fuse_session_unmount(se);
  return failed("the daemon " + describe_wait_status(status) + " before the mount was ready");
}

// Why a mount never became ready, once serving has ended: serving failed, libfuse refused the
// kernel's INIT (it logs why), or a signal stopped ckptfs first.
std::string not_ready_reason(const std::string& serve_failure) {
  if (!serve_failure.empty()) return serve_failure;
  std::string logged = log::libfuse_failure("");
  if (!logged.empty()) return "the kernel's INIT request was refused: " + logged;
  return "stopped before the mount was ready";
}

}  // namespace

void ReadinessNotifier::open(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (fd < 0 || flags == -1) {
    throw Error(ExitCode::usage, fmt::format("notify_fd={}: not an open file descriptor", fd));
  }
  if (fd > 2) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);  // not for fusermount3 or the shell
  fd_ = fd;
}

void ReadinessNotifier::forget() {
  if (fd_ > 2) ::close(fd_);
  fd_ = -1;
}

void ReadinessNotifier::send(bool ready) {
  if (fd_ < 0) return;
  // A reader that closed its end must not kill ckptfs with SIGPIPE.
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &previous);
  const char* line = ready ? "1\n" : "0\n";
  ssize_t written;
  do {
    written = ::write(fd_, line, 2);
  } while (written < 0 && errno == EINTR);
  ::sigaction(SIGPIPE, &previous, nullptr);
  if (fd_ > 2) ::close(fd_);
  fd_ = -1;
}

void mount_and_serve(const Tree& tree, Sources sources, const MountRequest& request) {
  const std::string mountpoint = resolve_mountpoint(request.mountpoint);
  // Mounted over all the same, as fusermount3 does (fuse3 has no `nonempty`: it is always so);
  // said once, since what the directory held is out of sight until the unmount.
  if (!is_fuse_fd_path(mountpoint)) {
    if (const std::size_t n = entries_in(mountpoint); n != 0) {
      log::warning(
          fmt::format("warning: {} is not empty: its {} entr{} hidden until it is unmounted",
                      quote(request.mountpoint), n, n == 1 ? "y is" : "ies are"));
    }
  }
  // The log: FILE (opened by the caller, so that a bad one is refused before anything is done),
  // else stderr in the foreground and syslog in a daemon.
  if (request.log_fd >= 0) log::use_file(request.log_fd);
  log::capture_libfuse(request.debug);

  SessionOptions options;
  if (request.debug) options.args.push_back("-d");
  std::string fuse_options = "ro,default_permissions,subtype=ckptfs,fsname=" + request.fsname;
  // Unless asked otherwise, no read larger than its reply can splice (read_reply.hpp).
  const unsigned max_read = request.max_read != 0 ? request.max_read : largest_spliced_read();
  if (max_read != 0) fuse_options += fmt::format(",max_read={}", max_read);
  for (const auto& o : request.fuse_options) fuse_options += "," + o;
  if (request.io_uring) {
    const std::string why = io_uring_unavailable();
    if (why.empty()) {
      fuse_options += ",io_uring";
      options.io_uring = true;
    } else {
      log::warning(fmt::format("io_uring not used: {}; requests go through /dev/fuse", why));
    }
  }
  options.args.push_back("-o");
  options.args.push_back(fuse_options);
  options.max_read = max_read;
  options.direct_io = request.direct_io;
  options.no_open = request.no_open;
  ServeOptions serving;
  serving.threads = std::max(4u, 2 * std::thread::hardware_concurrency());
  options.threads = serving.threads;
  serving.on_stop = request.on_stop;
  options.may_wait = may_wait;
  std::unique_ptr<Session> session = make_session(tree, sources, options);
  fuse_session* se = session->get();
  SignalHandlers handlers(se);
  MountedSession mounted(se, mountpoint);
  // From here, what libfuse logs at error level explains a failed INIT.
  log::forget_libfuse_failure();

  // The mount exists, but it is not ready until the kernel's INIT is answered (requests wait in
  // the kernel until then). Without -f, a daemon child serves; this process waits for its report.
  std::optional<DaemonReport> report;
  if (!request.foreground) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      throw mount_error(fmt::format("cannot start the daemon: {}", std::strerror(errno)));
    }
    std::fflush(nullptr);  // nothing buffered is written twice
    const pid_t child = ::fork();
    if (child < 0) {
      const int error = errno;
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      throw mount_error(fmt::format("cannot start the daemon: {}", std::strerror(error)));
    }
    if (child > 0) {
      ::close(pipe_fds[1]);
      const int code = wait_for_daemon(pipe_fds[0], child, se, request);
      // The parent ends here, as fuse_daemonize()'s does, without unwinding: the session is the
      // child's (it serves it, or failed and unmounted it), and libfuse frees a session's
      // mountpoint only when it unmounts. Everything it had to say is said.
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(pipe_fds[0]);
    report.emplace(pipe_fds[1]);
    if (request.notifier != nullptr) request.notifier->forget();  // the parent reports
    (void)::setsid();    // out of the caller's session: its terminal's signals are not ours
    (void)::chdir("/");  // keep no directory busy
  }

  // Polling for the next request only pays when another CPU is free to run the caller.
  if (usable_cpus() > 1) serving.busy_poll = request.busy_poll;
  bool ready = false;  // written by the serving thread that answered INIT, read after serve()
  serving.after_init = [&] {
    // libfuse exits the session when it refuses INIT after calling init, and answers an INIT it
    // refuses before (an unsupported protocol version) without calling it; a dead mount is not
    // served either way.
    if (!session->init_answered() || fuse_session_exited(se) != 0) {
      fuse_session_exit(se);
      return;
    }
    ready = true;
    // Before readiness is reported: the kernel set the readahead from INIT's answer, over
    // whatever was set before, and a reader that starts at once gets the raised one.
    if (request.read_ahead_kb != 0 && !is_fuse_fd_path(mountpoint)) {
      try {
        set_read_ahead(mount_device(mountpoint), request.read_ahead_kb);
      } catch (const Error& e) {
        if (request.debug) log::warning(fmt::format("read_ahead_kb not set: {}", e.what()));
      }
    }
    if (report) {
      // Before stderr goes: a syslog without a listener is said there, at the first line.
      if (request.log_fd < 0) log::use_syslog(mountpoint);
      detach_stdio();
      report->ready();
      return;
    }
    if (request.notifier != nullptr) request.notifier->send(true);
    if (!request.notice.empty()) fmt::print(stderr, "ckptfs: {}\n", request.notice);
    if (!request.ready_line.empty()) fmt::print(stderr, "{}\n", request.ready_line);
    std::fflush(stderr);
    notify_systemd("READY=1\nSTATUS=" + request.ready_line);
  };
  // The serving threads allocate little once warm (each reuses its buffers): they share the main
  // heap instead of each taking a malloc arena of its own, whose first pages they would touch.
  (void)::mallopt(M_ARENA_MAX, 1);
  std::string serve_failure;
  try {
    serve(se, serving);
  } catch (const Error& e) {
    serve_failure = e.what();
  }
  log::flush();
  mounted.unmount();  // before the parent (or the caller) is told
  if (!ready) {
    const std::string why = not_ready_reason(serve_failure);
    if (report) {
      // The parent prints the error line; this process has nothing more to say.
      report->failed(why);
      std::fflush(nullptr);
      ::_exit(static_cast<int>(ExitCode::mount_failed));
    }
    throw mount_error(why);
  }
  if (!serve_failure.empty()) {
    if (report) log::error(fmt::format("{}: {}", quote(request.mountpoint), serve_failure));
    throw mount_error(serve_failure);
  }
}

}  // namespace ckptfs::fuse
