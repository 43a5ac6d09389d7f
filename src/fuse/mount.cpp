// SPDX-License-Identifier: MIT
// mount_and_serve(): session, signal handlers, mount, daemon child, serving threads, readiness once
// INIT is answered, unmount.
#include "mount.hpp"

#include "fuse_ops.hpp"
#include "readahead.hpp"
#include "serve_loop.hpp"

#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <optional>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace ckptfs::fuse {
namespace {

// libfuse reports mount failures through its log; keep the last message so that the failure is
// reported as our one line, not as libfuse's several. Some messages come in several calls
// ("unknown option(s): `-o " then "relatime'\n"): parts are joined up to the newline. The
// serving threads log too (with -d): the mutex keeps their parts apart.
std::mutex fuse_log_mutex;
std::string last_fuse_message;
std::string partial_fuse_message;
bool pass_fuse_messages = false;

void capture_fuse_log(enum fuse_log_level level, const char* fmt, va_list ap) {
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, fmt, ap);
  std::lock_guard lock(fuse_log_mutex);
  partial_fuse_message += buffer;
  if (partial_fuse_message.empty() || partial_fuse_message.back() != '\n') return;
  std::string message = std::move(partial_fuse_message);
  partial_fuse_message.clear();
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (message.starts_with("fuse: ")) message = message.substr(6);
  if (pass_fuse_messages || level <= FUSE_LOG_CRIT) {
    std::fprintf(stderr, "ckptfs: %s\n", message.c_str());
  }
  if (level <= FUSE_LOG_ERR) last_fuse_message = message;
}

// Forgets what libfuse logged so far: what it logs from then on explains a later failure.
void clear_fuse_failure() {
  std::lock_guard lock(fuse_log_mutex);
  last_fuse_message.clear();
  partial_fuse_message.clear();
}

std::string fuse_failure(const char* fallback) {
  std::lock_guard lock(fuse_log_mutex);
  if (!last_fuse_message.empty()) return last_fuse_message;
  if (!partial_fuse_message.empty()) return partial_fuse_message;
  return fallback;
}

int fail(const std::string& mountpoint, const std::string& what) {
  fmt::print(stderr, "ckptfs: {}: {}\n", mountpoint, what);
  return static_cast<int>(ExitCode::mount_failed);
}

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

// A mountpoint must be an existing directory that is not already a mount point (mounting twice
// on one directory is nearly always a mistake: the first mount would be hidden).
std::string check_mountpoint(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  struct stat parent {};
  if (::stat((path + "/..").c_str(), &parent) != 0) return std::strerror(errno);
  if (parent.st_dev != st.st_dev || parent.st_ino == st.st_ino) return "already a mount point";
  return {};
}

unsigned usable_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return std::thread::hardware_concurrency();
  return static_cast<unsigned>(CPU_COUNT(&set));
}

struct SessionDeleter {
  void operator()(fuse_session* se) const { fuse_session_destroy(se); }
};
using Session = std::unique_ptr<fuse_session, SessionDeleter>;

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
  auto failed = [&](const std::string& what) {
    const int code = fail(request.mountpoint, what);
    if (request.notifier != nullptr) request.notifier->send(false);  // after the error line
    return code;
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
std::string not_ready_reason(int serve_status) {
  if (serve_status < 0) {
    return fmt::format("reading /dev/fuse: {}", std::strerror(-serve_status));
  }
  std::string logged = fuse_failure("");
  if (!logged.empty()) return "the kernel's INIT request was refused: " + logged;
  return "stopped before the mount was ready";
}

}  // namespace

bool ReadinessNotifier::open(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (fd < 0 || flags == -1) return false;
  if (fd > 2) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);  // not for fusermount3 or the shell
  fd_ = fd;
  return true;
}

void ReadinessNotifier::forget() {
  if (fd_ > 2) ::close(fd_);
  fd_ = -1;
}

void ReadinessNotifier::send(bool ready) {
  if (fd_ < 0) return;
  // A reader that closed its end must not kill ckptfs with SIGPIPE.
  struct sigaction ignore {}, previous {};
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

int mount_and_serve(const Tree& tree, Sources sources, const MountRequest& request) {
  // What is mounted is an absolute path: the daemon changes directory to "/", and libfuse
  // unmounts the path it mounted (a relative one then names nothing, and a dead mount stayed).
  // The mount itself is resolved before it exists: afterwards, resolving would ask the mount.
  std::string mountpoint = request.mountpoint;
  if (is_fuse_fd_path(request.mountpoint)) {
    // Checked by libfuse: it must be an open /dev/fuse descriptor.
  } else if (auto problem = check_mountpoint(request.mountpoint); !problem.empty()) {
    return fail(request.mountpoint, problem);
  } else if (char* resolved = ::realpath(request.mountpoint.c_str(), nullptr)) {
    mountpoint = resolved;
    std::free(resolved);
  } else {
    return fail(request.mountpoint, std::strerror(errno));
  }
  pass_fuse_messages = request.debug;
  fuse_set_log_func(capture_fuse_log);

  std::vector<std::string> argv_strings{"ckptfs"};
  if (request.debug) argv_strings.push_back("-d");
  std::string options = "ro,default_permissions,subtype=ckptfs,fsname=" + request.fsname;
  if (request.max_read != 0) options += fmt::format(",max_read={}", request.max_read);
  for (const auto& o : request.fuse_options) options += "," + o;
  argv_strings.push_back("-o");
  argv_strings.push_back(options);
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  Context context{&tree, sources};
  context.max_read = request.max_read;
  const fuse_lowlevel_ops& ops = operations();
  Session session(fuse_session_new(&args, &ops, sizeof ops, &context));
  fuse_opt_free_args(&args);
  if (!session) {
    return fail(request.mountpoint, fuse_failure("cannot create the FUSE session"));
  }
  context.session = session.get();
  if (fuse_set_signal_handlers(session.get()) != 0) {
    return fail(request.mountpoint, "cannot install signal handlers");
  }
  if (fuse_session_mount(session.get(), mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(session.get());
    return fail(request.mountpoint, fuse_failure("mount failed"));
  }
  clear_fuse_failure();  // from here, what libfuse logs at error level explains a failed INIT

  // The mount exists, but it is not ready until the kernel's INIT is answered (requests wait in
  // the kernel until then). Without -f, a daemon child serves; this process waits for its report.
  std::optional<DaemonReport> report;
  if (!request.foreground) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      fuse_session_unmount(session.get());
      fuse_remove_signal_handlers(session.get());
      return fail(request.mountpoint, fmt::format("cannot start the daemon: {}",
                                                  std::strerror(errno)));
    }
    std::fflush(nullptr);  // nothing buffered is written twice
    const pid_t child = ::fork();
    if (child < 0) {
      const int error = errno;
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      fuse_session_unmount(session.get());
      fuse_remove_signal_handlers(session.get());
      return fail(request.mountpoint,
                  fmt::format("cannot start the daemon: {}", std::strerror(error)));
    }
    if (child > 0) {
      ::close(pipe_fds[1]);
      const int code = wait_for_daemon(pipe_fds[0], child, session.get(), request);
      // The parent ends here, as fuse_daemonize()'s does, without unwinding: the session is the
      // child's (it serves it, or failed and unmounted it), and libfuse frees a session's
      // mountpoint only when it unmounts. Everything it had to say is said.
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(pipe_fds[0]);
    report.emplace(pipe_fds[1]);
    if (request.notifier != nullptr) request.notifier->forget();  // the parent reports
    (void)::setsid();      // out of the caller's session: its terminal's signals are not ours
    (void)::chdir("/");    // keep no directory busy
  }

  ServeOptions serving;
  serving.threads = std::max(4u, 2 * std::thread::hardware_concurrency());
  context.max_stores = serving.threads - 1;
  // Polling for the next request only pays when another CPU is free to run the caller.
  if (usable_cpus() > 1) serving.busy_poll = request.busy_poll;
  bool ready = false;  // written by the serving thread that answered INIT, read after serve()
  serving.after_init = [&] {
    // libfuse exits the session when it refuses INIT after calling init, and answers an INIT it
    // refuses before (an unsupported protocol version) without calling it; a dead mount is not
    // served either way.
    if (!context.init_called.load() || fuse_session_exited(session.get()) != 0) {
      fuse_session_exit(session.get());
      return;
    }
    ready = true;
    // Before readiness is reported: the kernel set the readahead from INIT's answer, over
    // whatever was set before, and a reader that starts at once gets the raised one.
    if (request.read_ahead_kb != 0 && !is_fuse_fd_path(mountpoint)) {
      std::optional<std::string> device = mount_device(mountpoint);
      std::string problem = device ? set_read_ahead(*device, request.read_ahead_kb)
                                   : "not found in /proc/self/mountinfo";
      if (request.debug && !problem.empty()) {
        fmt::print(stderr, "ckptfs: read_ahead_kb not set: {}\n", problem);
      }
    }
    if (report) {
      detach_stdio();
      report->ready();
      return;
    }
    if (request.notifier != nullptr) request.notifier->send(true);
    if (!request.ready_line.empty()) fmt::print(stderr, "{}\n", request.ready_line);
    std::fflush(stderr);
    notify_systemd("READY=1\nSTATUS=" + request.ready_line);
  };
  int status = serve(session.get(), serving);
  fuse_session_unmount(session.get());
  fuse_remove_signal_handlers(session.get());
  if (!ready) {
    // Unmounted above, before the parent (or the caller) is told.
    std::string why = not_ready_reason(status);
    if (report) {
      report->failed(why);
      return static_cast<int>(ExitCode::mount_failed);
    }
    return fail(request.mountpoint, why);
  }
  if (status < 0) {
    fmt::print(stderr, "ckptfs: {}: reading /dev/fuse: {}\n", request.mountpoint,
               std::strerror(-status));
    return static_cast<int>(ExitCode::mount_failed);
  }
  return 0;
}

}  // namespace ckptfs::fuse
