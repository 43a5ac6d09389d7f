// SPDX-License-Identifier: MIT
// mount_and_serve(): session, signal handlers, mount, daemonize, multithreaded loop, unmount.
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

}  // namespace

bool ReadinessNotifier::open(int fd) {
  int flags = ::fcntl(fd, F_GETFD);
  if (fd < 0 || flags == -1) return false;
  if (fd > 2) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);  // not for fusermount3 or the shell
  fd_ = fd;
  return true;
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
  if (is_fuse_fd_path(request.mountpoint)) {
    // Checked by libfuse: it must be an open /dev/fuse descriptor.
  } else if (auto problem = check_mountpoint(request.mountpoint); !problem.empty()) {
    return fail(request.mountpoint, problem);
  }
  pass_fuse_messages = request.debug;
  fuse_set_log_func(capture_fuse_log);

  std::vector<std::string> argv_strings{"ckptfs"};
  if (request.debug) argv_strings.push_back("-d");
  std::string options = "ro,default_permissions,subtype=ckptfs,fsname=" + request.fsname;
  for (const auto& o : request.fuse_options) options += "," + o;
  argv_strings.push_back("-o");
  argv_strings.push_back(options);
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());

  Context context{&tree, sources};
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
  // Resolved now: once mounted, resolving the path would ask the mount itself.
  std::string canonical_mountpoint;
  if (char* resolved = ::realpath(request.mountpoint.c_str(), nullptr)) {
    canonical_mountpoint = resolved;
    std::free(resolved);
  }
  if (fuse_session_mount(session.get(), request.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(session.get());
    return fail(request.mountpoint, fuse_failure("mount failed"));
  }
  // From here the mount exists (requests wait in the kernel until the loop below serves them):
  // tell whoever waits, then the parent returns and the child serves.
  if (request.notifier != nullptr) request.notifier->send(true);
  if (request.foreground) {
    if (!request.ready_line.empty()) fmt::print(stderr, "{}\n", request.ready_line);
    std::fflush(stderr);
    notify_systemd("READY=1\nSTATUS=" + request.ready_line);
  }
  if (fuse_daemonize(request.foreground ? 1 : 0) != 0) {
    fuse_session_unmount(session.get());
    fuse_remove_signal_handlers(session.get());
    return fail(request.mountpoint, "cannot start the daemon");
  }
  ServeOptions serving;
  serving.threads = std::max(4u, 2 * std::thread::hardware_concurrency());
  context.max_stores = serving.threads - 1;
  // Polling for the next request only pays when another CPU is free to run the caller.
  if (usable_cpus() > 1) serving.busy_poll = request.busy_poll;
  if (request.read_ahead_kb != 0 && !canonical_mountpoint.empty()) {
    // After INIT: the kernel sets the readahead from INIT's answer, over whatever was set before.
    serving.after_init = [&] {
      std::optional<std::string> device = mount_device(canonical_mountpoint);
      std::string problem = device ? set_read_ahead(*device, request.read_ahead_kb)
                                   : "not found in /proc/self/mountinfo";
      if (request.debug && !problem.empty()) {
        fmt::print(stderr, "ckptfs: read_ahead_kb not set: {}\n", problem);
      }
    };
  }
  int status = serve(session.get(), serving);
  fuse_session_unmount(session.get());
  fuse_remove_signal_handlers(session.get());
  if (status < 0) {
    fmt::print(stderr, "ckptfs: {}: reading /dev/fuse: {}\n", request.mountpoint,
               std::strerror(-status));
    return static_cast<int>(ExitCode::mount_failed);
  }
  return 0;
}

}  // namespace ckptfs::fuse
