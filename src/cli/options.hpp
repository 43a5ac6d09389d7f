// SPDX-License-Identifier: MIT
// The command line of `ckptfs [options] CHECKPOINT MOUNTPOINT`, parsed without libfuse.
#pragma once

#include <ckptfs/format/open_model.hpp>
#include <ckptfs/model/dtype.hpp>
#include <ckptfs/source/remote.hpp>
#include <ckptfs/view/tree.hpp>

#include <sys/types.h>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::cli {

// A size: a number of bytes, or a number with a unit in any case: binary (K, M, G, T and
// KiB, MiB, GiB, TiB: powers of 1024) or decimal (KB, MB, GB, TB: powers of 1000, as
// transformers' save_pretrained takes max_shard_size): "256M", "5GB", "1.5GiB". nullopt when
// it is not one, is 0, or passes 2^63.
std::optional<std::uint64_t> parse_size(std::string_view text);

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
  std::optional<int> notify_fd;       // -o notify_fd=N, --notify-fd N: readiness is written there
  unsigned read_ahead_kb = 512;       // -o read_ahead_kb=N: the mount's readahead (root only)
  bool read_ahead_kb_given = false;   // whether -o read_ahead_kb= was given
  unsigned busy_poll_us = 200;        // -o busy_poll_us=N: polling for the next request
  unsigned max_read = 0;              // -o max_read=N: the largest READ (0: the kernel's)
  std::optional<DType> dtype;         // -o dtype=NAME: floating tensors served converted
  Names names = Names::file;          // -o names=hf: a GGUF's tensors as transformers names them
  std::uint64_t shard_size = 0;       // -o shard_size=SIZE: a sharded safetensors export
  Layout layout = Layout::split;      // -o layout=split|rfc: what the root holds
  std::optional<std::uint8_t> files;  // -o files=LIST: a tensor directory's files (KeyFile bits)
  bool direct_io = false;             // -o direct_io: reads bypass the mount's page cache
  bool no_open = false;               // -o no_open: opens send no request (checks at reads only)
  bool io_uring = false;              // -o io_uring: FUSE over io_uring where available
  std::string log_file;               // -o log=FILE: the mount's log (made absolute)
  bool rw = false;                    // -o rw: ignored, the mount being read-only (a warning)
  std::vector<std::string> fuse_options;  // the accepted libfuse and kernel options (below)
  RemoteOptions remote;  // insecure, cacert=, cache_size=, cache_dir=, cache_dir_size=, timeout=
};

// Parses argv (without the program name). Returns the options, or an error message for a usage
// error. Options may come before or after the positional arguments (mount.fuse3 runs
// `ckptfs SOURCE MOUNTPOINT -o OPTIONS`). -o takes comma-separated options ("-o a,b" or "-oa,b"):
//   - ckptfs's own: uid=N, gid=N, umask=OCTAL, notify_fd=N, read_ahead_kb=N, busy_poll_us=N,
//     max_read=N (which ckptfs must also tell libfuse's INIT, or libfuse refuses it),
//     dtype=float16|bfloat16|float32, names=hf|file, shard_size=SIZE (see parse_size()),
//     layout=split|rfc
//     (shard_size with layout=rfc is a usage error: that layout has no safetensors files),
//     files=NAME[,NAME...] (names of a key directory's files, key_file_bit(): the items after
//     files= that are such names belong to it, "-o files=data,meta.json,allow_other"; with
//     layout=rfc, which has no key directories, a usage error), direct_io, no_open, io_uring;
//   - passed to libfuse and the kernel, each known to work (is_passed_option());
//   - ignored: "ro" is implied and "rw" (which mount.fuse3 passes when fstab says nothing)
//     means nothing, the mount being read-only either way (it sets `rw`: run_mount() warns);
//     so do the options
//     that only mean something to mount(8), fstab or systemd, and the access-time flags libfuse
//     does not know;
//   - every other one is a usage error naming it, never a mount that fails later or half works.
struct ParseResult {
  MountOptions options;
  std::string error;  // non-empty on a usage error
};
ParseResult parse_mount_options(const std::vector<std::string>& args);

// The value of names= (-o names=, pack's --names): "hf" or "file"; nullopt for any other.
std::optional<Names> parse_names(std::string_view value);

// Takes one -o item when it is an option of remote sources (insecure, cacert=FILE,
// cache_size=SIZE, cache_dir=DIR, cache_dir_size=SIZE, timeout=SECONDS): sets it in `remote`
// and returns true, or sets `error` for a bad value. SIZE is bytes, or a number with K, M, G or
// T (powers of 1024; KiB, MiB... too). Returns false for any other item.
bool take_remote_option(std::string_view item, RemoteOptions& remote, std::string& error);

// Whether an -o option is one that parse_mount_options() passes on to libfuse and the kernel:
// allow_other, allow_root, auto_unmount, default_permissions, fsname=NAME, subtype=NAME, and the
// mount flags dev, nodev, suid, nosuid, exec, noexec, atime, noatime, sync, async, dirsync.
bool is_passed_option(std::string_view option);

}  // namespace ckptfs::cli
