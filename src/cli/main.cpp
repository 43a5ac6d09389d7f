// SPDX-License-Identifier: MIT
// The ckptfs command line: mount (the default), `inspect`, `pack`, --help and --version. Every
// failure is one line on stderr and a documented exit code.
#include "../fuse/log_file.hpp"
#include "../fuse/mount.hpp"
#include "inspect.hpp"
#include "messages.hpp"
#include "options.hpp"
#include "pack_command.hpp"
#include "remote_open.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/format/open_model.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/location.hpp>
#include <ckptfs/source/remote.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <climits>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using ckptfs::ExitCode;
using ckptfs::cli::fail;

constexpr const char* usage_text = R"(usage: ckptfs [options] CHECKPOINT MOUNTPOINT
       ckptfs inspect CHECKPOINT [--json | --verify] [-o OPT[,OPT...]]
       ckptfs pack SRC OUT [--keys GLOB]... [--dtype NAME] [--names hf] [--flat] [--force]
                  [--progress|--quiet] [-o OPT[,OPT...]]
       ckptfs -h | --help | -V | --version

Mounts a checkpoint read-only: a PyTorch file written by torch.save or torch.jit.save
(.pth/.pt/.ckpt/.bin), a safetensors file, a Hugging Face sharded set (its directory or its
*.index.json), a PyTorch Distributed Checkpoint (DCP), a DeepSpeed ZeRO checkpoint, a GGUF
file or split set (llama.cpp, Ollama), or a numpy .npz. Every key becomes a directory with the
tensor's raw `data`, a `meta.json`, a `tensor.npy` and a `tensor.pt`; the whole-checkpoint
views (index.json, model.safetensors) are in the hidden folder .ckptfs. Every read is an offset
read inside the file that holds the tensor. No pickle is ever executed.

CHECKPOINT is a file or a directory (see below), or a URL: http://, https:// (presigned URLs
too) or s3://BUCKET/KEY (credentials, region and endpoint from AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL). A remote checkpoint
is read by range requests, only what is read, through a memory cache; it is never downloaded
whole.

options (before or after CHECKPOINT MOUNTPOINT):
  -f                     stay in the foreground; "ckptfs: mounted ..." on stderr once ready
  -d, --debug            foreground, with libfuse's debug output
  -o OPT[,OPT...]        mount options:
       uid=N, gid=N        owner of every file (default: the user who mounts)
       umask=OCTAL         files 0666 & ~umask, dirs 0777 & ~umask (default: the
                           checkpoint's own mode: 0644 gives files 0644, dirs 0755; 0600
                           gives 0600, 0700; several files: the strictest of them; a URL
                           0644, 0755); writes fail (EROFS) anyway
       allow_other         let other users read the mount (needs user_allow_other for non-root)
       allow_root          let root read it too, and no other user
       auto_unmount        unmount even when ckptfs is killed (fusermount3 watches it)
       notify_fd=N         write "1\n" to descriptor N once ready ("0\n" if not), close it
       read_ahead_kb=N     the mount's readahead in KiB, set when run as root (default 512,
                           256 for a URL; 0 keeps the kernel's 128)
       busy_poll_us=N      after each request, one thread polls N microseconds for the next
                           before sleeping (default 200; 0 never; off with a single CPU)
       max_read=N          the largest read request in bytes (at least 4096; default: the
                           kernel's own limit, less where pipes are limited to 1 MiB, so
                           that every reply is spliced whole)
       dtype=NAME          serve every floating-point tensor as float16, bfloat16 or float32,
                           converted on read as torch's .to() converts (a GGUF's quantized
                           tensors: their dequantized values)
       names=hf            a GGUF file as transformers' GGUF loader makes it: its tensors
                           under transformers' names (blk.0.attn_q.weight is
                           model.layers.0.self_attn.q_proj.weight), with the values the
                           loader computes (Q and K rows un-permuted, dequantized...), float32
                           unless dtype= says otherwise, .ckptfs/config.json and (a BPE
                           vocabulary) the tokenizer files, so that
                           from_pretrained(MOUNTPOINT/.ckptfs) loads the model; an
                           architecture the loader does not load keeps llama.cpp's names, a
                           line says so (names=file: the file's names, the default)
       log=FILE            the mount's log appended to FILE (foreground and daemon): a
                           regular file of yours, or a new one (made 0600); never a link
                           (status 1); default: stderr in the foreground, syslog in a
                           daemon (when none listens on /dev/log, said at its first line)
       direct_io           reads bypass the mount's page cache: for one-pass copies of a
                           remote checkpoint (rsync, cp); a shared mmap of a file fails
                           unless libfuse >= 3.16 and Linux >= 6.6 allow it
       no_open             files open without asking ckptfs (for thousands of small files);
                           a changed checkpoint then fails reads (EIO), no longer opens
       io_uring            FUSE over io_uring where libfuse (3.18+) and the kernel (6.14+,
                           enable_uring set) allow it; else a line says why not
       files=NAME[,NAME]   the files each tensor's directory holds, of data, meta.json,
                           tensor.npy (npy), tensor.pt (pt); default all four; e.g.
                           files=data,meta.json to rsync each tensor once (what pack reads)
       shard_size=SIZE     .ckptfs holds the sharded set save_pretrained would write
                           (model-0000N-of-0000M.safetensors, model.safetensors.index.json)
                           instead of model.safetensors; SIZE like 5GB, 500MB, 2GiB
       layout=rfc          the root holds the transformers RFC's split layout instead:
                           map.pt (torch.save of the keys, in order) and one <key>.pt per
                           entry that torch.load reads alone (layout=split: the default, below)
       fsname=NAME         the source shown in /proc/mounts (default: the checkpoint's path,
                           then the options above that change the view, in brackets:
                           /data/model.pth[dtype=float16,layout=rfc])
       subtype=NAME        the type shown, fuse.NAME (default: fuse.ckptfs)
     remote checkpoints (URLs):
       timeout=SECONDS     how long a read may take, retries included, before it fails with
                           EIO (default 30); the mount's first request too; a transfer
                           slower than 256 KiB per timeout is dropped and retried
       cache_size=SIZE     memory cache shared by all files (default 256M; K, M, G suffixes)
       cache_dir=DIR       also keep fetched blocks in DIR, across mounts: your own directory,
                           that only you can write (your mounts may share it); made when
                           only its last component is missing
       cache_dir_size=SIZE the most cache_dir may hold (default 32G)
       cacert=FILE         CA certificates to verify HTTPS servers with
       insecure            do not verify HTTPS certificates
       ...                 ro and default_permissions are implied; the mount flags nodev,
                           nosuid, noexec, noatime, sync, dirsync (and dev, suid, exec, atime,
                           async) go to the kernel; fstab's own options (defaults, noauto,
                           nofail, _netdev, user=, x-*) are ignored; rw is ignored with a
                           warning (writes fail with EROFS); any other option is refused
                           (exit 1), nonempty too, as fusermount3 refuses it (a non-empty
                           mountpoint is mounted over, with a warning)
  --notify-fd N          the same as -o notify_fd=N
  -h, --help             show this help and exit
  -V, --version          show the version and exit

ready: once the kernel's INIT request is answered; without -f, ckptfs returns then (0), or
once the mount has failed and is gone (6). Relative paths work: both are made absolute first,
as are those of cacert= and cache_dir=.

inspect CHECKPOINT [--json | --verify] [-o OPT[,OPT...]]
  lists every entry without mounting: key, kind, dtype, shape, bytes, file offset, and totals;
  --json prints {"format", "byteorder", "sources", "metadata", "root", "entries": [...]};
  --verify reads every zip record of the checkpoint once and checks its CRC-32 (exit 4 when
  one does not match); -o takes the remote options above and names=hf; CHECKPOINT may also
  be a split or an RFC directory (see pack)

pack SRC OUT [--keys GLOB]... [--dtype NAME] [--names hf] [--flat] [--force] [--progress|--quiet]
     [-o OPT,...]
  writes SRC back as one file OUT, streaming in bounded memory: torch's zip format for
  OUT.pth, .pt, .bin or .ckpt (nested as torch.load of SRC gives it; --flat: one dict of
  the flattened keys), safetensors for OUT.safetensors (any case); SRC is a CHECKPOINT, a
  split directory (key directories copied out of a mount: meta.json and data, or
  value.json) or an RFC directory (map.pt and <name>.pt files); --keys packs the keys GLOB
  matches (repeatable), --dtype float16|bfloat16|float32 converts floating-point tensors,
  --names hf names and makes a GGUF's tensors as -o names=hf does, --force replaces OUT;
  progress on a terminal (--progress elsewhere), a summary line at the end (--quiet:
  neither); OUT gets its name only once complete (details: ckptfs pack --help)

CHECKPOINT, besides a torch.save file:
  FILE.safetensors                a safetensors file (also any file with its header)
  DIR                             DIR's one checkpoint (a set counts once: an index with its
                                  shards, a GGUF split set, a DCP or ZeRO checkpoint); of
                                  transformers' names (model.safetensors, pytorch_model.bin,
                                  their *.index.json) alone, the first (in a Trainer's
                                  checkpoint-N, beside its own files and a ZeRO checkpoint);
                                  several: refused, listed, with how to name one. The files a
                                  checkpoint names or a directory holds are read only beneath
                                  its directory: a symbolic link leading out is refused (but
                                  a Hugging Face cache snapshot's links to its blobs)
  DIR/NAME.index.json             a sharded set: each key from the shard its weight_map names
                                  (a URL too: the shards beside it)
  DIR, DIR/.metadata              a PyTorch DCP checkpoint (.metadata, __R_N.distcp): the model
                                  dcp_to_torch_save writes, each tensor assembled from its
                                  chunks on read (a URL of .metadata too: its files beside it)
  DIR                             a DeepSpeed ZeRO checkpoint (stages 1-3): DIR holds
                                  *_model_states.pt, or a `latest` naming a directory that
                                  does: zero_to_fp32's state dict, each fp32 parameter
                                  assembled from the ranks' *_optim_states.pt on read (a URL
                                  ending in / or /latest too: its files by DeepSpeed's names)
  FILE.gguf                       a GGUF file (v1-v3, either byte order): each tensor a key, its
                                  metadata in index.json; quantized tensors (Q4_K...) have their
                                  blocks in `data` and their values, dequantized on read as
                                  gguf-py does, in tensor.npy, tensor.pt and model.safetensors
  NAME-0000K-of-0000N.gguf        a GGUF split set, from any of its files (or its directory,
                                  when it holds one *.gguf file or set)
  FILE.npz                        numpy.savez and savez_compressed (inflated on read): each
                                  .npy member a key; object arrays are never unpickled

the tree (layout=split): the root holds the key directories and the hidden .ckptfs only
  MOUNTPOINT/<key>/data           a tensor's bytes in C order, as stored
  MOUNTPOINT/<key>/meta.json      dtype, shape, stride, source file, offsets, storage, sharing
  MOUNTPOINT/<key>/tensor.npy     the same bytes behind a .npy header
  MOUNTPOINT/<key>/tensor.pt      the tensor alone, as torch.save writes it (torch.load reads it)
  MOUNTPOINT/<key>/value.json     a non-tensor value as JSON
  MOUNTPOINT/.ckptfs/index.json   every entry: key, path, kind, dtype, shape, nbytes; the
                                  files read (sources), the file's metadata, and what each
                                  view lacks and why (exports)
  MOUNTPOINT/.ckptfs/model.safetensors  every tensor as one safetensors file (see shard_size=)
  a broken tensor (a record missing...) keeps its files, but reads of them fail with EIO, and
  so do those of model.safetensors, which would lack it: the log says why, and the mount says
  how many tensors are broken (ckptfs inspect lists them)
  MOUNTPOINT/.ckptfs/config.json  a Hugging Face model directory's config, tokenizer files and
                                  chat template (config.json's dtype set by dtype=); with
                                  names=hf: the config transformers makes of a GGUF (and
                                  tokenizer.json, tokenizer_config.json of a BPE vocabulary)
the tree (layout=rfc):
  MOUNTPOINT/map.pt               torch.save of the list of keys that have a file, in order
                                  (beside the <key>.pt files, where the RFC's loaders look)
  MOUNTPOINT/<key>.pt             a tensor (its tensor.pt), or a value JSON describes whole
  MOUNTPOINT/.ckptfs/index.json   as above; an entry's path is its file, or null without one
<key> is the key, with '%' written %25 and '/' %2F; a key that starts with '.' (or is named
like a view: index.json, map, model.safetensors) gets a '%' in front, so that MOUNTPOINT/P*
matches key directories only

mount from fstab or mount(8): mount -t fuse.ckptfs CHECKPOINT MOUNTPOINT -o ro,allow_other
unmount with: fusermount3 -u MOUNTPOINT (or umount as root)

exit status:
  0  success
  1  usage error (the command line, an unsupported -o option; pack: OUT exists)
  2  the checkpoint or a shard cannot be opened or read (or is not a regular file; a Git LFS
     pointer, an HTML page); a directory of no checkpoint or several; pack: a file of SRC is
     missing, or OUT cannot be written
  3  the zip container is invalid (or truncated)
  4  the pickle, safetensors or GGUF header, .npy header or index is invalid, or the
     checkpoint is inconsistent (a file of it that leads out of its directory; pack: a
     meta.json that disagrees with its data)
  5  a valid file ckptfs does not serve (compressed record, tar format, no tensors, F6 dtype,
     a gzip, zstd, xz, bzip2 or 7-Zip file, a tar archive: decompress or extract it first,
     a GGUF header past ckptfs's limits)
  6  the mount failed or never came up (mountpoint, /dev/fuse, permissions, INIT refused)
  7  a server refused access (HTTP 401 or 403: credentials, S3 signature)
  8  a server could not be reached or did not answer (connection, TLS, timeout, HTTP 5xx)
)";

constexpr const char* inspect_usage =
    R"(usage: ckptfs inspect CHECKPOINT [--json | --verify] [-o OPT[,OPT...]]

Lists every entry of CHECKPOINT without mounting it: key, kind, dtype, shape, bytes and file
offset (or how the tensor is made: pieces, strided, converted), then the totals. CHECKPOINT is
anything a mount reads (see ckptfs --help), a split directory or an RFC directory.

  --json        {"format", "byteorder", "sources", "metadata", "entries": [...]} instead
  --verify      instead, reads every record of every zip the checkpoint is made of once, in
                order (deflated ones inflated), and compares it with the CRC-32 its zip records:
                a line per file, a line on stderr per corrupt record
  -o OPT,...    remote options for a URL (timeout=, cache_size=, cacert=, insecure...), and
                names=hf: a GGUF's tensors as transformers names them (see ckptfs --help)
  -h, --help    show this help and exit

exit status: 0 listed, or every CRC-32 matches; 1 usage; 2-5 the checkpoint cannot be read or is
invalid, as a mount's (see ckptfs --help), 4 with --verify when a record is corrupt; 7, 8 a
server refused or did not answer.
)";

int usage_error(const std::string& message) {
  fmt::print(stderr, "ckptfs: {} (try 'ckptfs --help')\n", message);
  return static_cast<int>(ExitCode::usage);
}

int inspect_usage_error(const std::string& message) {
  fmt::print(stderr, "ckptfs: inspect: {} (try 'ckptfs inspect --help')\n", message);
  return static_cast<int>(ExitCode::usage);
}

// The mount's readahead for a remote checkpoint, unless -o read_ahead_kb= says otherwise.
constexpr unsigned remote_read_ahead_kb = 256;

int run_inspect(const std::vector<std::string>& args) {
  std::string path;
  bool json = false;
  bool verify = false;
  ckptfs::RemoteOptions remote_options;
  ckptfs::Names names = ckptfs::Names::file;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "-h" || arg == "--help") {
      fmt::print("{}", inspect_usage);
      return 0;
    } else if (arg == "--json") {
      json = true;
    } else if (arg == "--verify") {
      verify = true;
    } else if (arg == "-o" || (arg.starts_with("-o") && arg.size() > 2)) {
      if (arg == "-o" && i + 1 == args.size()) return inspect_usage_error("-o needs an argument");
      std::string_view list =
          arg == "-o" ? std::string_view(args[++i]) : std::string_view(arg).substr(2);
      while (true) {
        const auto comma = list.find(',');
        const std::string_view item = list.substr(0, comma);
        std::string error;
        if (item.starts_with("names=")) {
          const auto parsed = ckptfs::cli::parse_names(item.substr(6));
          if (!parsed) {
            return inspect_usage_error(
                fmt::format("invalid names {} (hf or file)", ckptfs::quote(item.substr(6))));
          }
          names = *parsed;
        } else if (!ckptfs::cli::take_remote_option(item, remote_options, error)) {
          return inspect_usage_error(fmt::format("unknown option {}", ckptfs::quote(item)));
        }
        if (!error.empty()) return inspect_usage_error(error);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
    } else if (arg.starts_with("-") && arg != "-") {
      return inspect_usage_error(fmt::format("unknown option {}", ckptfs::quote(arg)));
    } else if (path.empty()) {
      path = arg;
    } else {
      return inspect_usage_error("takes one CHECKPOINT");
    }
  }
  if (path.empty()) return inspect_usage_error("missing CHECKPOINT");
  if (json && verify) return inspect_usage_error("--json and --verify do not go together");
  const std::string shown = ckptfs::display_location(path);
  try {
    auto remote = ckptfs::cli::remote_for(path, remote_options);
    ckptfs::OpenOptions open_options = ckptfs::cli::open_options(remote.get());
    open_options.names = names;
    ckptfs::OpenedModel opened = ckptfs::open_model(path, open_options);
    ckptfs::cli::tell_notes(opened.model(), shown);
    if (verify) {
      const int status = ckptfs::cli::verify_checkpoint(opened, stdout);
      if (std::fflush(stdout) != 0) return fail(ExitCode::io, "cannot write the output");
      return status;
    }
    if (json) {
      ckptfs::cli::print_inspect_json(opened.model(), stdout);
    } else {
      ckptfs::cli::print_inspect_table(opened.model(), stdout);
    }
  } catch (const ckptfs::Error& e) {
    return fail(e.code(), fmt::format("{}: {}", shown, e.what()));
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::bad_checkpoint, fmt::format("{}: out of memory", shown));
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

// The options that change what the mount shows (dtype, layout, shard_size, files), as -o takes
// them, comma-separated; "" when none does.
std::string view_options(const ckptfs::cli::MountOptions& o) {
  std::vector<std::string> shown;
  if (o.dtype) shown.push_back(fmt::format("dtype={}", ckptfs::info(*o.dtype).name));
  if (o.names == ckptfs::Names::hf) shown.emplace_back("names=hf");
  if (o.layout == ckptfs::Layout::rfc) shown.emplace_back("layout=rfc");
  if (o.shard_size != 0) shown.push_back(fmt::format("shard_size={}", o.shard_size));
  if (o.files && *o.files != ckptfs::all_key_files) {
    shown.push_back("files=" + ckptfs::key_files_text(*o.files));
  }
  return fmt::format("{}", fmt::join(shown, ","));
}

// What /proc/mounts shows as the mount's source: the checkpoint, then the view options in
// brackets when there are any ("/data/model.pth[dtype=float16,layout=rfc]"), so that mounts of
// one checkpoint with different views are told apart (-o fsname=NAME replaces it all).
std::string mount_source(const std::string& checkpoint, const ckptfs::cli::MountOptions& o) {
  const std::string view = view_options(o);
  return view.empty() ? checkpoint : fmt::format("{}[{}]", checkpoint, view);
}

// The modes of the mount's files and directories: -o umask= when given, else those that follow
// the checkpoint's own mode: the strictest of what was named (the file, or the directory when a
// directory is mounted) and every file the model was read from (`files`: a set of 0600 shards
// named by a 0644 index, or in a 0755 directory, mounts as 0600). A URL has none, and is shown
// as a file downloaded with the usual umask 022 would be (0644, 0755).
ckptfs::Modes mount_modes(const ckptfs::cli::MountOptions& o, mode_t files) {
  if (o.umask) return ckptfs::modes_from_umask(*o.umask);
  struct stat st {};
  if (ckptfs::is_url(o.checkpoint) || ::stat(o.checkpoint.c_str(), &st) != 0) {
    return ckptfs::modes_following(0644);
  }
  return ckptfs::modes_following(st.st_mode & files);
}

// "B of N tensors are broken (see: ckptfs inspect CHECKPOINT)", or "" when none is: said at every
// mount, for their files (and the views that would hold them) fail their reads with EIO.
std::string broken_summary(const ckptfs::Model& c, const std::string& checkpoint) {
  std::size_t tensors = 0, broken = 0;
  for (const auto& e : c.entries) {
    if (e.kind != ckptfs::Entry::Kind::tensor) continue;
    ++tensors;
    if (!c.tensors[e.tensor].broken.empty()) ++broken;
  }
  if (broken == 0) return {};
  return fmt::format("{} of {} tensor{} {} broken (see: ckptfs inspect {})", broken, tensors,
                     tensors == 1 ? "" : "s", broken == 1 ? "is" : "are",
                     ckptfs::shell_quote(checkpoint));
}

// "ckptfs: mounted CHECKPOINT on MOUNTPOINT (N tensors, M values, X bytes)": X counts the bytes
// of the tensors that are served, as index.json's total_bytes; then broken_summary(), if any.
std::string ready_line(const ckptfs::Model& c, const std::string& checkpoint,
                       const std::string& mountpoint) {
  std::size_t tensors = 0;
  ckptfs::uint128 bytes = 0;
  for (const auto& e : c.entries) {
    if (e.kind != ckptfs::Entry::Kind::tensor) continue;
    ++tensors;
    const auto& t = c.tensors[e.tensor];
    if (t.broken.empty() && ckptfs::values_not_served(c, t).empty()) bytes += t.nbytes();
  }
  const std::string broken = broken_summary(c, checkpoint);
  return fmt::format("ckptfs: mounted {} on {} ({} tensors, {} values, {} bytes){}", checkpoint,
                     mountpoint, tensors, c.entries.size() - tensors, ckptfs::decimal(bytes),
                     broken.empty() ? "" : "; " + broken);
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
  // -o log=FILE is opened with the options, before the checkpoint: a FILE that is not the user's
  // own regular file is refused (status 1) before anything is read or mounted.
  ckptfs::UniqueFd log_file;
  if (!o.log_file.empty()) {
    try {
      log_file = ckptfs::fuse::open_log_file(o.log_file);
    } catch (const ckptfs::Error& e) {
      return fail(e.code(), fmt::format("log={}: {}", ckptfs::quote(o.log_file), e.what()));
    }
  }
  if (o.rw) {
    fmt::print(stderr,
               "ckptfs: warning: -o rw ignored: the mount is read-only (writes fail with EROFS); "
               "say ro\n");
  }
  // A URL is shown (messages, /proc/mounts, index.json) without its credentials.
  const std::string shown = ckptfs::display_location(o.checkpoint);
  char resolved[PATH_MAX];
  std::string absolute = ckptfs::is_url(o.checkpoint)                 ? shown
                         : ::realpath(o.checkpoint.c_str(), resolved) ? resolved
                                                                      : o.checkpoint;
  // Everything is parsed and validated before the mount: a bad checkpoint never mounts.
  std::unique_ptr<ckptfs::RemoteContext> remote;
  std::optional<ckptfs::OpenedModel> opened;
  std::optional<ckptfs::Tree> tree;
  try {
    remote = ckptfs::cli::remote_for(o.checkpoint, o.remote);
    ckptfs::OpenOptions open_options = ckptfs::cli::open_options(remote.get());
    open_options.names = o.names;
    opened.emplace(ckptfs::open_model(o.checkpoint, open_options));
    ckptfs::cli::tell_notes(opened->model(), shown);
    ckptfs::TreeOptions tree_options;
    tree_options.source_path = absolute;
    tree_options.uid = o.uid.value_or(::getuid());
    tree_options.gid = o.gid.value_or(::getgid());
    tree_options.modes = mount_modes(o, opened->permissions());
    tree_options.times = opened->times();
    tree_options.dtype = o.dtype;
    tree_options.shard_size = o.shard_size;
    tree_options.layout = o.layout;
    tree_options.files = o.files.value_or(ckptfs::all_key_files);
    // Before the daemon changes to "/": relative paths are made absolute now.
    tree_options.local_files = ckptfs::local_files(opened->sources());
    tree.emplace(std::move(opened->model()), tree_options);
  } catch (const ckptfs::Error& e) {
    return fail(e.code(), fmt::format("{}: {}", shown, e.what()));
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::bad_checkpoint, fmt::format("{}: out of memory", shown));
  }
  // Parsing peaked at many times what the model keeps (the pickle graph, flattening): give the
  // freed heap back, so that a mounted daemon holds its model, not its parse.
  ::malloc_trim(0);
  ckptfs::fuse::MountRequest request;
  request.mountpoint = o.mountpoint;
  request.foreground = o.foreground;
  request.debug = o.debug;
  request.fuse_options = o.fuse_options;
  // A remote checkpoint's kernel readahead is small: every byte it reads past where a reader
  // stops is a byte the server sends, and the source reads ahead of sequential readers itself
  // (larger, parallel requests). A reader of one tensor of a 1.5 GB object through its mapping
  // (safe_open) was sent 51 MB for 23 MB with 2 MiB, 26 MB with 256 KiB; sequential reads went
  // no slower (0.4-0.7 GiB/s either way from nginx and Ceph's RGW on loopback: PERFORMANCE.md,
  // issue 32). (In November, before the source's readahead streams, 2 MiB had doubled them.)
  request.read_ahead_kb = remote && !o.read_ahead_kb_given ? remote_read_ahead_kb : o.read_ahead_kb;
  request.max_read = o.max_read;
  request.busy_poll = std::chrono::microseconds(o.busy_poll_us);
  request.direct_io = o.direct_io;
  request.no_open = o.no_open;
  request.io_uring = o.io_uring;
  request.fsname = escaped_fsname(mount_source(absolute, o));
  request.notifier = &notifier;
  // A signal unmounts at once, even while reads wait for a stalled server.
  if (remote) request.on_stop = [context = remote.get()] { context->cancel(); };
  request.log_fd = log_file.get();
  request.ready_line = ready_line(tree->model(), shown, o.mountpoint);
  request.notice = broken_summary(tree->model(), shown);
  try {
    // The remote threads stop before the mount may fork into a daemon, and start again in
    // whichever process reads next.
    if (remote) remote->quiesce();
    ckptfs::fuse::mount_and_serve(*tree, opened->sources(), request);
    return 0;
  } catch (const ckptfs::Error& e) {
    return fail(e.code(), fmt::format("{}: {}", o.mountpoint, e.what()));
  } catch (const std::bad_alloc&) {
    return fail(ExitCode::mount_failed, fmt::format("{}: out of memory", o.mountpoint));
  }
}

// A sharded set keeps two descriptors open per shard (the file and its directory): the soft
// limit of 1024 would stop at some 500 shards, while the hard limit is there to be used.
void raise_file_limit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace

int main(int argc, char** argv) {
  raise_file_limit();
  std::vector<std::string> args(argv + 1, argv + argc);
  // What ps(1) shows of the command line loses a URL's credentials (kept in `args`).
  for (int i = 1; i < argc; ++i) ckptfs::mask_credentials(argv[i]);
  if (args.empty()) return usage_error("needs a CHECKPOINT and a MOUNTPOINT");
  if (args[0] == "inspect") return run_inspect({args.begin() + 1, args.end()});
  if (args[0] == "pack") return ckptfs::cli::run_pack({args.begin() + 1, args.end()});
  return run_mount(args);
}
