// SPDX-License-Identifier: MIT
// Mounting: the session's life from the parsed checkpoint to the unmount.
#pragma once

#include <ckptfs/view/read_buffer.hpp>
#include <ckptfs/view/tree.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace ckptfs::fuse {

// The readiness protocol of `-o notify_fd=N` / `--notify-fd N`, for scripts: exactly one line is
// written to descriptor N, "1\n" once the mount is ready (the kernel's INIT answered; in both
// modes, before a daemon's parent returns) or "0\n" when ckptfs gives up (after its error line),
// and N is then closed (0, 1 and 2 stay open). A reader that sees end-of-file without a line
// knows ckptfs died first.
class ReadinessNotifier {
 public:
  ReadinessNotifier() = default;
  // Takes `fd` (marked close-on-exec). Throws Error(usage) when it is not an open descriptor.
  void open(int fd);
  // Writes the line once; later calls do nothing. A reader that went away is not an error.
  void send(bool ready);
  // Closes the descriptor without writing: for a process that leaves the report to another (a
  // daemon's serving child, whose parent reports).
  void forget();
  ~ReadinessNotifier() { send(false); }  // every path that did not report success failed
  ReadinessNotifier(const ReadinessNotifier&) = delete;
  ReadinessNotifier& operator=(const ReadinessNotifier&) = delete;

 private:
  int fd_ = -1;
};

struct MountRequest {
  std::string mountpoint;  // as the user wrote it (relative paths too), for messages; mounted
                           // made absolute (realpath); or /dev/fd/N for a /dev/fuse descriptor
                           // mounted by the caller (mount.fuse3 -o drop_privileges)
  bool foreground = false;
  bool debug = false;
  std::vector<std::string> fuse_options;   // passed to libfuse as -o options (allow_other, ...)
  std::string fsname;                      // shown in /proc/mounts
  unsigned max_read = 0;                   // -o max_read=N for libfuse and INIT; 0: none
  unsigned read_ahead_kb = 0;              // set on the mount when allowed (root); 0: the kernel's
  std::chrono::microseconds busy_poll{0};  // see ServeOptions::busy_poll
  bool direct_io = false;                  // see SessionOptions::direct_io
  bool no_open = false;                    // see SessionOptions::no_open
  // FUSE over io_uring where libfuse and the kernel allow it; else one line says why not, and
  // requests go through /dev/fuse as without it.
  bool io_uring = false;
  std::string ready_line;  // printed on stderr in the foreground once the mount is ready
  int log_fd = -1;         // -o log=FILE, opened by the caller (open_log_file()): lines go there
  // "ckptfs: NOTICE" is printed on stderr once the mount is ready, in either mode (a daemon's
  // parent prints it before it returns), before the ready line; "": nothing.
  std::string notice;
  ReadinessNotifier* notifier = nullptr;  // told once the mount is ready (or failed)
  // Called once serving stops (a signal, the unmount), from a thread of its own, before the
  // serving threads are waited for: makes reads that wait for a remote server give up (see
  // ServeOptions::on_stop).
  std::function<void()> on_stop;
};

// Mounts `tree` on request.mountpoint and serves it until unmounted or signalled (SIGTERM, SIGINT,
// SIGHUP unmount cleanly); returns then.
//
// The mount is ready once the kernel's INIT request is answered (libfuse refuses some, and such
// a mount is dead: every access fails). Only then: request.notifier is told; in the foreground,
// request.ready_line is printed on stderr and READY=1 sent to systemd when $NOTIFY_SOCKET is set
// (a Type=notify service). While it serves, failures are logged (log.hpp): on stderr in the
// foreground, to syslog in a daemon.
//
// Throws Error(mount_failed) saying what failed, having left nothing mounted: the caller prints
// "ckptfs: MOUNTPOINT: what". Without `foreground`, a daemon child serves, and the calling process
// never returns: it waits for the child's report, tells request.notifier, and ends with _exit()
// (as fuse_daemonize()'s parent does): status 0 once the child is ready, or
// ExitCode::mount_failed after the child's error line (or one saying that it died), once the
// mount is gone. A child that fails before it is ready tells its parent and ends with _exit()
// too; once ready, it returns or throws as above.
void mount_and_serve(const Tree& tree, Sources sources, const MountRequest& request);

}  // namespace ckptfs::fuse
