// SPDX-License-Identifier: MIT
// Mounting: the session's life from the parsed checkpoint to the unmount.
#pragma once

#include <ckptfs/byte_source.hpp>
#include <ckptfs/vfs.hpp>

#include <string>
#include <vector>

namespace ckptfs::fuse {

struct MountRequest {
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;
  std::vector<std::string> fuse_options;  // passed to libfuse as -o options (allow_other, ...)
  std::string fsname;                     // shown in /proc/mounts
};

// Mounts `vfs` on request.mountpoint and serves it until unmounted or signalled (SIGTERM, SIGINT,
// SIGHUP unmount cleanly). Without `foreground`, returns in the parent once the mount exists and
// serves from a daemon child. Returns the process exit code; on failure prints one line
// "ckptfs: MOUNTPOINT: what" and leaves nothing mounted.
int mount_and_serve(const Vfs& vfs, const FileSource& source, const MountRequest& request);

}  // namespace ckptfs::fuse
