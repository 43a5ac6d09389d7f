// SPDX-License-Identifier: MIT
// The command line of `ckptfs [options] CHECKPOINT MOUNTPOINT`, parsed without libfuse.
#pragma once

#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace ckptfs::cli {

struct MountOptions {
  std::string checkpoint;
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;
  bool help = false;
  bool version = false;
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  std::optional<mode_t> umask;
  std::vector<std::string> fuse_options;  // every other -o option, for libfuse and the kernel
};

// Parses argv (without the program name). Returns the options, or an error message for a usage
// error. -o takes comma-separated options ("-o a,b" or "-oa,b"); uid=N, gid=N and umask=OCTAL are
// ckptfs's own, "ro" is implied, everything else goes to libfuse.
struct ParseResult {
  MountOptions options;
  std::string error;  // non-empty on a usage error
};
ParseResult parse_mount_options(const std::vector<std::string>& args);

}  // namespace ckptfs::cli
