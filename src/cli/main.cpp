// SPDX-License-Identifier: MIT
// The ckptfs command line: mount (the default), `inspect`, --help and --version. Every failure
// is one line on stderr and a documented exit code.
#include "../fuse/mount.hpp"
#include "inspect.hpp"
#include "options.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/format/open_model.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/tree.hpp>

#include <fmt/format.h>

#include <climits>
#include <cstdlib>
#include <malloc.h>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using ckptfs::ExitCode;

constexpr const char* usage_text = R"(usage: ckptfs [options] CHECKPOINT MOUNTPOINT
       ckptfs inspect CHECKPOINT [--json]
       ckptfs -h | --help | -V | --version

Mounts a PyTorch checkpoint (.pth/.pt/.ckpt/.bin written by torch.save) read-only: every
state_dict key becomes a directory with the tensor's raw `data`, a `meta.json` and a
`tensor.npy`, and every read is an offset read inside the checkpoint. Its pickle is never
executed.

options (before or after CHECKPOINT MOUNTPOINT):
  -f                     stay in the foreground; "ckptfs: mounted ..." on stderr once ready
  -d, --debug            foreground, with libfuse's debug output
  -o OPT[,OPT...]        mount options:
       uid=N, gid=N        owner of every file (default: the user who mounts)
       umask=OCTAL         permission bits to clear (default 0222: files 0444, dirs 0555)
       allow_other         let other users read the mount (needs user_allow_other for non-root)
       allow_root          let root read it too, and no other user
       auto_unmount        unmount even when ckptfs is killed (fusermount3 watches it)
       notify_fd=N         write "1\n" to descriptor N once ready ("0\n" if not), close it
       read_ahead_kb=N     the mount's readahead in KiB, set when run as root (default 512;
                           0 keeps the kernel's 128)
       busy_poll_us=N      after each request, one thread polls N microseconds for the next
                           before sleeping (default 200; 0 never; off with a single CPU)
       max_read=N          the largest read request in bytes (at least 4096; default: the
                           kernel's own limit)
       fsname=NAME         the source shown in /proc/mounts (default: the checkpoint's path)
       subtype=NAME        the type shown, fuse.NAME (default: fuse.ckptfs)
       ...                 ro and default_permissions are implied; the mount flags nodev,
                           nosuid, noexec, noatime, sync, dirsync (and dev, suid, exec, atime,
                           async) go to the kernel; rw and fstab's own options (defaults,
                           noauto, nofail, _netdev, user=, x-*) are ignored; any other option
                           is refused (exit 1)
  --notify-fd N          the same as -o notify_fd=N
  -h, --help             show this help and exit
  -V, --version          show the version and exit

ready: once the kernel's INIT request is answered; without -f, ckptfs returns then (0), or
once the mount has failed and is gone (6). Relative paths work: both are made absolute first.

inspect CHECKPOINT [--json]
  lists every entry without mounting: key, kind, dtype, shape, bytes, file offset, and totals;
  --json prints {"format", "byteorder", "entries": [...]}

the tree:
  MOUNTPOINT/index.json           every entry: key, path, kind, dtype, shape, nbytes
  MOUNTPOINT/<key>/data           a tensor's bytes in C order, as stored
  MOUNTPOINT/<key>/meta.json      dtype, shape, stride, offsets, storage, sharing
  MOUNTPOINT/<key>/tensor.npy     the same bytes behind a .npy header
  MOUNTPOINT/<key>/value.json     a non-tensor value as JSON

mount from fstab or mount(8): mount -t fuse.ckptfs CHECKPOINT MOUNTPOINT -o ro,allow_other
unmount with: fusermount3 -u MOUNTPOINT (or umount as root)

exit status:
  0  success
  1  usage error (the command line, an unsupported -o option)
  2  the checkpoint cannot be opened or read (or is not a regular file)
  3  the zip container is invalid
  4  the pickle is invalid or the checkpoint is inconsistent
  5  a valid file ckptfs does not serve (compressed record, TorchScript, tar format)
  6  the mount failed or never came up (mountpoint, /dev/fuse, permissions, INIT refused)
)";

int fail(ExitCode code, const std::string& message) {
  fmt::print(stderr, "ckptfs: {}\n", message);
  return static_cast<int>(code);
}

int usage_error(const std::string& message) {
  fmt::print(stderr, "ckptfs: {} (try 'ckptfs --help')\n", message);
  return static_cast<int>(ExitCode::usage);
}

int run_inspect(const std::vector<std::string>& args) {
  std::string path;
  bool json = false;
  for (const auto& arg : args) {
    if (arg == "--json") {
      json = true;
    } else if (arg.starts_with("-") && arg != "-") {
      return usage_error(fmt::format("inspect: unknown option {}", ckptfs::quote(arg)));
    } else if (path.empty()) {
      path = arg;
    } else {
      return usage_error("inspect takes one checkpoint");
    }
  }
  if (path.empty()) return usage_error("inspect: missing CHECKPOINT");
  try {
    ckptfs::OpenedModel opened = ckptfs::open_model(path);
    if (json) {
      ckptfs::cli::print_inspect_json(opened.model(), stdout);
    } else {
      ckptfs::cli::print_inspect_table(opened.model(), stdout);
    }
  } catch (const ckptfs::Error& e) {
    return fail(e.code(), fmt::format("{}: {}", path, e.what()));
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::bad_checkpoint, fmt::format("{}: out of memory", path));
  }
  return std::fflush(stdout) == 0 ? 0 : fail(ExitCode::io, "cannot write the output");
}

// The fsname shown in /proc/mounts, escaped for libfuse's comma-separated option list.
std::string escaped_fsname(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// "ckptfs: mounted CHECKPOINT on MOUNTPOINT (N tensors, M values, X bytes)": X counts the bytes
// of the tensors that are served, as index.json's total_bytes.
std::string ready_line(const ckptfs::Model& c, const std::string& checkpoint,
                       const std::string& mountpoint) {
  std::size_t tensors = 0;
  ckptfs::uint128 bytes = 0;
  for (const auto& e : c.entries) {
    if (e.kind != ckptfs::Entry::Kind::tensor) continue;
    ++tensors;
    const auto& t = c.tensors[e.tensor];
    if (t.broken.empty()) bytes += t.nbytes();
  }
  return fmt::format("ckptfs: mounted {} on {} ({} tensors, {} values, {} bytes)", checkpoint,
                     mountpoint, tensors, c.entries.size() - tensors, ckptfs::decimal(bytes));
}

int run_mount(const std::vector<std::string>& args) {
  // Told "0" on every way out that is not a mount (its destructor), usage errors included, "1"
  // by mount_and_serve().
  ckptfs::fuse::ReadinessNotifier notifier;
  auto parsed = ckptfs::cli::parse_mount_options(args);
  const auto& o = parsed.options;
  if (!parsed.error.empty()) {
    try {
      if (o.notify_fd) notifier.open(*o.notify_fd);
    } catch (const ckptfs::Error&) {
      // the usage error below is the one to report
    }
    return usage_error(parsed.error);
  }
  if (o.help) {
    fmt::print("{}", usage_text);
    return 0;
  }
  if (o.version) {
    fmt::print("ckptfs {}\n", CKPTFS_VERSION);
    return 0;
  }
  try {
    if (o.notify_fd) notifier.open(*o.notify_fd);
  } catch (const ckptfs::Error& e) {
    return usage_error(e.what());
  }
  char resolved[PATH_MAX];
  std::string absolute = ::realpath(o.checkpoint.c_str(), resolved) ? resolved : o.checkpoint;
  // Everything is parsed and validated before the mount: a bad checkpoint never mounts.
  std::optional<ckptfs::OpenedModel> opened;
  std::optional<ckptfs::Tree> tree;
  try {
    opened.emplace(ckptfs::open_model(o.checkpoint));
    ckptfs::TreeOptions tree_options;
    tree_options.source_path = absolute;
    tree_options.uid = o.uid.value_or(::getuid());
    tree_options.gid = o.gid.value_or(::getgid());
    tree_options.umask = o.umask.value_or(0222);
    tree_options.times = opened->source(0).times();
    tree_options.dtype = o.dtype;
    tree_options.shard_size = o.shard_size;
    tree.emplace(std::move(opened->model()), tree_options);
  } catch (const ckptfs::Error& e) {
    return fail(e.code(), fmt::format("{}: {}", o.checkpoint, e.what()));
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::bad_checkpoint, fmt::format("{}: out of memory", o.checkpoint));
  }
  // Parsing peaked at many times what the model keeps (the pickle graph, flattening): give the
  // freed heap back, so that a mounted daemon holds its model, not its parse.
  ::malloc_trim(0);
  ckptfs::fuse::MountRequest request;
  request.mountpoint = o.mountpoint;
  request.foreground = o.foreground;
  request.debug = o.debug;
  request.fuse_options = o.fuse_options;
  request.read_ahead_kb = o.read_ahead_kb;
  request.max_read = o.max_read;
  request.busy_poll = std::chrono::microseconds(o.busy_poll_us);
  request.fsname = escaped_fsname(absolute);
  request.notifier = &notifier;
  request.ready_line = ready_line(tree->model(), o.checkpoint, o.mountpoint);
  try {
    ckptfs::fuse::mount_and_serve(*tree, opened->sources(), request);
    return 0;
  } catch (const ckptfs::Error& e) {
    return fail(e.code(), fmt::format("{}: {}", o.mountpoint, e.what()));
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::mount_failed, fmt::format("{}: out of memory", o.mountpoint));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("needs a CHECKPOINT and a MOUNTPOINT");
  if (args[0] == "inspect") return run_inspect({args.begin() + 1, args.end()});
  return run_mount(args);
}
