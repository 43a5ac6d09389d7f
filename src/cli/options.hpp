// SPDX-License-Identifier: MIT
// The command line of `ckptfs [options] CHECKPOINT MOUNTPOINT`, parsed without libfuse.
#pragma once

#include <ckptfs/source/remote.hpp>

#include <optional>
#include <string>
#include <string_view>
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
  std::optional<int> notify_fd;           // -o notify_fd=N, --notify-fd N: readiness is written there
  unsigned read_ahead_kb = 512;           // -o read_ahead_kb=N: the mount's readahead (root only)
  bool read_ahead_kb_given = false;       // whether -o read_ahead_kb= was given
  unsigned busy_poll_us = 200;            // -o busy_poll_us=N: polling for the next request
  std::vector<std::string> fuse_options;  // every other -o option, for libfuse and the kernel
  RemoteOptions remote;  // insecure, cacert=, cache_size=, cache_dir=, cache_dir_size=, timeout=
};

// Parses argv (without the program name). Returns the options, or an error message for a usage
// error. Options may come before or after the positional arguments (mount.fuse3 runs
// `ckptfs SOURCE MOUNTPOINT -o OPTIONS`). -o takes comma-separated options ("-o a,b" or "-oa,b");
// uid=N, gid=N, umask=OCTAL, notify_fd=N, read_ahead_kb=N and busy_poll_us=N are ckptfs's own; "ro" is implied and "rw" (which
// mount.fuse3 passes when fstab says nothing) is ignored: the mount is read-only either way. The
// options that only mean something to mount(8), fstab or systemd (defaults, noauto, nofail,
// _netdev, x-systemd.*, comment=...) and the access-time flags libfuse does not know (relatime,
// nodiratime, lazytime...) are ignored; every other option goes to libfuse and the kernel.
struct ParseResult {
  MountOptions options;
  std::string error;  // non-empty on a usage error
};
ParseResult parse_mount_options(const std::vector<std::string>& args);

// Takes one -o item when it is an option of remote sources (insecure, cacert=FILE,
// cache_size=SIZE, cache_dir=DIR, cache_dir_size=SIZE, timeout=SECONDS): sets it in `remote`
// and returns true, or sets `error` for a bad value. SIZE is bytes, or a number with K, M, G or
// T (powers of 1024; KiB, MiB... too). Returns false for any other item.
bool take_remote_option(std::string_view item, RemoteOptions& remote, std::string& error);

// Whether an -o option is one that parse_mount_options() accepts and ignores (fstab, mount(8) and
// systemd options, access-time flags, "rw").
bool is_ignored_option(std::string_view option);

}  // namespace ckptfs::cli
