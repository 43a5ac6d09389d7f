// SPDX-License-Identifier: MIT
// Mounting: the session's life from the parsed checkpoint to the unmount.
#pragma once

#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/tree.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace ckptfs::fuse {

// The readiness protocol of `-o notify_fd=N` / `--notify-fd N`, for scripts: exactly one line is
// written to descriptor N, "1\n" once the mount exists (before a daemon is started, so in both
// modes) or "0\n" when ckptfs gives up (after its error line), and N is then closed (0, 1 and 2
// stay open). A reader that sees end-of-file without a line knows ckptfs died first.
class ReadinessNotifier {
 public:
  ReadinessNotifier() = default;
  // Takes `fd` (marked close-on-exec); returns false when it is not an open descriptor.
  bool open(int fd);
  // Writes the line once; later calls do nothing. A reader that went away is not an error.
  void send(bool ready);
  ~ReadinessNotifier() { send(false); }  // every path that did not report success failed
  ReadinessNotifier(const ReadinessNotifier&) = delete;
  ReadinessNotifier& operator=(const ReadinessNotifier&) = delete;

 private:
  int fd_ = -1;
};

struct MountRequest {
  std::string mountpoint;  // a directory, or /dev/fd/N for a /dev/fuse descriptor mounted by the
                           // caller (mount.fuse3 -o drop_privileges)
  bool foreground = false;
  bool debug = false;
  std::vector<std::string> fuse_options;  // passed to libfuse as -o options (allow_other, ...)
  std::string fsname;                     // shown in /proc/mounts
  unsigned read_ahead_kb = 0;             // set on the mount when allowed (root); 0: the kernel's
  std::chrono::microseconds busy_poll{0};  // see ServeOptions::busy_poll
  std::string ready_line;            // printed on stderr in the foreground once the mount exists
  ReadinessNotifier* notifier = nullptr;  // told once the mount exists (or failed)
};

// Mounts `tree` on request.mountpoint and serves it until unmounted or signalled (SIGTERM, SIGINT,
// SIGHUP unmount cleanly). Once the mount exists: tells request.notifier; in the foreground,
// prints request.ready_line on stderr and sends READY=1 to systemd when $NOTIFY_SOCKET is set
// (a Type=notify service). Without `foreground`, returns in the parent once the mount exists and
// serves from a daemon child. Returns the process exit code; on failure prints one line
// "ckptfs: MOUNTPOINT: what" and leaves nothing mounted.
int mount_and_serve(const Tree& tree, Sources sources, const MountRequest& request);

}  // namespace ckptfs::fuse
