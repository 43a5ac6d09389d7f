// SPDX-License-Identifier: MIT
// mount_and_serve(): session, signal handlers, mount, daemonize, multithreaded loop, unmount.
#include "mount.hpp"

#include "fuse_ops.hpp"

#include <ckptfs/error.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <memory>
#include <sys/stat.h>
#include <thread>

namespace ckptfs::fuse {
namespace {

// libfuse reports mount failures through its log; keep the last message so that the failure is
// reported as our one line, not as libfuse's several.
std::string last_fuse_message;
bool pass_fuse_messages = false;

void capture_fuse_log(enum fuse_log_level level, const char* fmt, va_list ap) {
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, fmt, ap);
  std::string message(buffer);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (message.starts_with("fuse: ")) message = message.substr(6);
  if (pass_fuse_messages || level <= FUSE_LOG_CRIT) {
    std::fprintf(stderr, "ckptfs: %s\n", message.c_str());
  }
  if (level <= FUSE_LOG_ERR) last_fuse_message = message;
}

int fail(const std::string& mountpoint, const std::string& what) {
  fmt::print(stderr, "ckptfs: {}: {}\n", mountpoint, what);
  return static_cast<int>(ExitCode::mount_failed);
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

struct SessionDeleter {
  void operator()(fuse_session* se) const { fuse_session_destroy(se); }
};
using Session = std::unique_ptr<fuse_session, SessionDeleter>;

}  // namespace

int mount_and_serve(const Vfs& vfs, const FileSource& source, const MountRequest& request) {
  if (auto problem = check_mountpoint(request.mountpoint); !problem.empty()) {
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

  Context context{&vfs, &source};
  const fuse_lowlevel_ops& ops = operations();
  Session session(fuse_session_new(&args, &ops, sizeof ops, &context));
  fuse_opt_free_args(&args);
  if (!session) {
    return fail(request.mountpoint, last_fuse_message.empty() ? "cannot create the FUSE session"
                                                              : last_fuse_message);
  }
  if (fuse_set_signal_handlers(session.get()) != 0) {
    return fail(request.mountpoint, "cannot install signal handlers");
  }
  if (fuse_session_mount(session.get(), request.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(session.get());
    return fail(request.mountpoint,
                last_fuse_message.empty() ? "mount failed" : last_fuse_message);
  }
  // From here the mount exists: the parent returns now, the child serves.
  if (fuse_daemonize(request.foreground ? 1 : 0) != 0) {
    fuse_session_unmount(session.get());
    fuse_remove_signal_handlers(session.get());
    return fail(request.mountpoint, "cannot start the daemon");
  }
  fuse_loop_config* config = fuse_loop_cfg_create();
  unsigned threads = std::max(4u, 2 * std::thread::hardware_concurrency());
  fuse_loop_cfg_set_max_threads(config, threads);
  fuse_loop_cfg_set_idle_threads(config, threads);
  int status = fuse_session_loop_mt(session.get(), config);
  fuse_loop_cfg_destroy(config);
  fuse_session_unmount(session.get());
  fuse_remove_signal_handlers(session.get());
  // A loop ended by a signal returns the signal number; that is a clean stop too.
  return status < 0 ? static_cast<int>(ExitCode::mount_failed) : 0;
}

}  // namespace ckptfs::fuse
