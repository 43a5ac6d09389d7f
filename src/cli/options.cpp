// SPDX-License-Identifier: MIT
// parse_mount_options(): flags, -o lists, and the two positional arguments.
#include "options.hpp"

#include <ckptfs/base/numbers.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>

namespace ckptfs::cli {
namespace {

template <typename T>
bool parse_number(std::string_view text, T& out, int base) {
  unsigned long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (ec != std::errc{} || end != text.data() + text.size() || text.empty()) return false;
  out = static_cast<T>(value);
  return static_cast<unsigned long long>(out) == value;
}

// `path` made absolute against the working directory, as it is now: a daemon changes to "/" and
// reads files named by options later (cacert= at each connection, cache_dir= at each block).
// The working directory is put in front, nothing else changes ("a/../b" stays so, as the kernel
// resolves it through a link "a"); nothing needs to exist yet. False for an empty path or when
// the working directory cannot be known.
bool absolute_path(std::string_view path, std::string& out) {
  if (path.empty()) return false;
  std::error_code ec;
  auto made = std::filesystem::absolute(std::filesystem::path(path), ec);
  if (ec) return false;
  out = made.string();
  while (out.size() > 1 && out.ends_with('/')) out.pop_back();  // "dir/" names "dir"
  return true;
}

// Whether an -o option is one that is accepted and ignored (fstab, mount(8) and systemd
// options, access-time flags, "rw").
bool is_ignored_option(std::string_view option) {
  // mount(8), fstab and systemd options that can reach a helper (mount.fuse3 drops only a few of
  // them), and "rw", which mount.fuse3 passes whenever fstab does not say "ro".
  static constexpr std::string_view fstab_only[] = {"rw",    "defaults", "auto",    "noauto",
                                                    "user",  "nouser",   "users",   "owner",
                                                    "group", "nofail",   "_netdev", "_rnetdev"};
  // Kernel flags libfuse 3 does not know; meaningless here, where every time is the
  // checkpoint's mtime and nothing is written or linked.
  static constexpr std::string_view time_flags[] = {
      "diratime",  "nodiratime",  "relatime", "norelatime", "strictatime", "nostrictatime",
      "lazytime",  "nolazytime",  "iversion", "noiversion", "mand",        "nomand",
      "symfollow", "nosymfollow", "silent",   "loud"};
  for (auto name : fstab_only) {
    if (option == name) return true;
  }
  for (auto name : time_flags) {
    if (option == name) return true;
  }
  return option.starts_with("x-") || option.starts_with("comment=") ||
         option.starts_with("helper=") || option.starts_with("user=");
}

std::string invalid_files(std::string_view name) {
  return fmt::format(
      "invalid files '{}' (the files a key directory holds, comma-separated: data, meta.json, "
      "tensor.npy or npy, tensor.pt or pt)",
      name);
}

// What a mount says of an option it does not take: a mount option given as --NAME[=VALUE]
// ("--dtype float16") is pointed at -o NAME=VALUE, an option of inspect or pack at the command.
std::string unknown_option(std::string_view arg) {
  std::string_view name = arg;
  while (name.starts_with('-')) name.remove_prefix(1);
  name = name.substr(0, name.find('='));
  static constexpr std::string_view with_value[] = {
      "uid",      "gid",     "umask",      "notify_fd", "read_ahead_kb",  "busy_poll_us",
      "max_read", "dtype",   "shard_size", "layout",    "files",          "fsname",
      "subtype",  "timeout", "cache_size", "cache_dir", "cache_dir_size", "cacert",
      "log",      "names"};
  static constexpr std::string_view flags[] = {"direct_io",    "allow_other", "allow_root",
                                               "auto_unmount", "insecure",    "ro"};
  for (auto known : with_value) {
    if (name == known) {
      return fmt::format("unknown option '{}': a mount takes it as -o {}=VALUE", arg, known);
    }
  }
  for (auto known : flags) {
    if (name == known)
      return fmt::format("unknown option '{}': a mount takes it as -o {}", arg, known);
  }
  if (name == "json") return fmt::format("unknown option '{}': an option of ckptfs inspect", arg);
  if (name == "keys" || name == "force") {
    return fmt::format("unknown option '{}': an option of ckptfs pack", arg);
  }
  return fmt::format("unknown option '{}'", arg);
}

// One -o item; returns an error message or "".
std::string take_option(std::string_view item, MountOptions& o) {
  if (std::string error; take_remote_option(item, o.remote, error)) return error;
  auto value_of = [&](std::string_view name) -> std::optional<std::string_view> {
    if (item.size() > name.size() && item.starts_with(name) && item[name.size()] == '=') {
      return item.substr(name.size() + 1);
    }
    return std::nullopt;
  };
  if (auto v = value_of("uid")) {
    uid_t uid;
    // (uid_t)-1 is no user: chown(2)'s "leave it unchanged".
    if (!parse_number(*v, uid, 10) || uid == static_cast<uid_t>(-1)) {
      return fmt::format("invalid uid '{}'", *v);
    }
    o.uid = uid;
  } else if (auto g = value_of("gid")) {
    gid_t gid;
    if (!parse_number(*g, gid, 10) || gid == static_cast<gid_t>(-1)) {
      return fmt::format("invalid gid '{}'", *g);
    }
    o.gid = gid;
  } else if (auto u = value_of("umask")) {
    mode_t mask;
    if (!parse_number(*u, mask, 8) || mask > 0777) return fmt::format("invalid umask '{}'", *u);
    o.umask = mask;
  } else if (auto n = value_of("notify_fd")) {
    int fd;
    if (!parse_number(*n, fd, 10) || fd < 0) return fmt::format("invalid notify_fd '{}'", *n);
    o.notify_fd = fd;
  } else if (auto r = value_of("read_ahead_kb")) {
    // The kernel takes up to 2^31 KiB here; past a few MiB readahead only wastes memory.
    if (!parse_number(*r, o.read_ahead_kb, 10) || o.read_ahead_kb > (1u << 20)) {
      return fmt::format("invalid read_ahead_kb '{}' (0 to 1048576)", *r);
    }
    o.read_ahead_kb_given = true;
  } else if (auto b = value_of("busy_poll_us")) {
    if (!parse_number(*b, o.busy_poll_us, 10) || o.busy_poll_us > 1'000'000) {
      return fmt::format("invalid busy_poll_us '{}' (0 to 1000000)", *b);
    }
  } else if (auto m = value_of("max_read")) {
    // The kernel reads at least a page at a time whatever is asked (it takes max(4096, N)).
    if (!parse_number(*m, o.max_read, 10) || o.max_read < 4096) {
      return fmt::format("invalid max_read '{}' (4096 to 4294967295)", *m);
    }
  } else if (auto d = value_of("dtype")) {
    o.dtype = dtype_from_name(*d);
    if (*d != "float16" && *d != "bfloat16" && *d != "float32") o.dtype.reset();
    if (!o.dtype) return fmt::format("invalid dtype '{}' (float16, bfloat16 or float32)", *d);
  } else if (auto nm = value_of("names")) {
    const auto names = parse_names(*nm);
    if (!names) return fmt::format("invalid names '{}' (hf or file)", *nm);
    o.names = *names;
  } else if (auto z = value_of("shard_size")) {
    auto size = parse_size(*z);
    if (!size) return fmt::format("invalid shard_size '{}' (bytes, or 5GB, 500MB, 2GiB...)", *z);
    o.shard_size = *size;
  } else if (auto l = value_of("layout")) {
    if (*l == "split") {
      o.layout = Layout::split;
    } else if (*l == "rfc") {
      o.layout = Layout::rfc;
    } else {
      return fmt::format("invalid layout '{}' (split or rfc)", *l);
    }
  } else if (auto f = value_of("files")) {
    auto bit = key_file_bit(*f);
    if (!bit) return invalid_files(*f);
    o.files = *bit;  // a later files= replaces an earlier one
  } else if (item == "files=") {
    return invalid_files("");
  } else if (auto lf = value_of("log")) {
    if (!absolute_path(*lf, o.log_file)) return fmt::format("invalid log '{}'", *lf);
  } else if (item == "direct_io") {
    o.direct_io = true;
  } else if (item == "no_open") {
    o.no_open = true;
  } else if (item == "io_uring") {
    o.io_uring = true;
  } else if (item == "rw") {
    o.rw = true;  // ignored, with a warning (run_mount): the mount is read-only
  } else if (item == "ro" || item.empty() || is_ignored_option(item)) {
    // always read-only; fstab-only options mean nothing here
  } else if (is_passed_option(item)) {
    o.fuse_options.emplace_back(item);
  } else {
    return fmt::format("unsupported mount option '{}'", item);
  }
  return {};
}

// Every option of the list is taken, so that notify_fd is known even when another one is wrong;
// returns the first error. The names of key files that follow files= are its list's
// ("files=data,meta.json"): no option has such a name.
std::string take_option_list(std::string_view list, MountOptions& o) {
  std::string first_error;
  bool in_files = false;
  while (true) {
    auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    std::string error;
    if (auto bit = in_files ? key_file_bit(item) : std::nullopt) {
      *o.files |= *bit;
    } else {
      error = take_option(item, o);
      in_files = error.empty() && item.starts_with("files=");
    }
    if (first_error.empty()) first_error = std::move(error);
    if (comma == std::string_view::npos) return first_error;
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

std::optional<Names> parse_names(std::string_view value) {
  if (value == "hf") return Names::hf;
  if (value == "file") return Names::file;
  return std::nullopt;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  // The number: digits with at most one point.
  std::size_t end = 0;
  while (end < text.size() && ((text[end] >= '0' && text[end] <= '9') || text[end] == '.')) ++end;
  const std::string_view number = text.substr(0, end);
  std::string unit;
  for (char c : text.substr(end)) unit += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  constexpr std::uint64_t ki = 1024, k = 1000;
  static constexpr std::pair<std::string_view, std::uint64_t> units[] = {{"", 1},
                                                                         {"b", 1},
                                                                         {"k", ki},
                                                                         {"m", ki * ki},
                                                                         {"g", ki * ki * ki},
                                                                         {"t", ki * ki * ki * ki},
                                                                         {"kib", ki},
                                                                         {"mib", ki * ki},
                                                                         {"gib", ki * ki * ki},
                                                                         {"tib", ki * ki * ki * ki},
                                                                         {"kb", k},
                                                                         {"mb", k * k},
                                                                         {"gb", k * k * k},
                                                                         {"tb", k * k * k * k}};
  const auto* found = std::find_if(std::begin(units), std::end(units),
                                   [&](const auto& u) { return u.first == unit; });
  if (number.empty() || found == std::end(units) ||
      std::count(number.begin(), number.end(), '.') > 1 || number == ".") {
    return std::nullopt;
  }
  // Exact, in 128 bits: the whole part times the unit, plus the fraction times the unit rounded
  // down (its first 18 digits: finer than any unit's byte). Past 2^63 is refused, never wrapped.
  const auto point = number.find('.');
  std::uint64_t whole = 0;
  if (point != 0 && !parse_number(number.substr(0, point), whole, 10)) return std::nullopt;
  uint128 scaled = static_cast<uint128>(whole) * found->second;
  if (point != std::string_view::npos && point + 1 < number.size()) {
    const std::string_view fraction = number.substr(point + 1, 18);
    std::uint64_t digits = 0;
    if (!parse_number(fraction, digits, 10)) return std::nullopt;
    uint128 ten_power = 1;
    for (std::size_t i = 0; i < fraction.size(); ++i) ten_power *= 10;
    scaled += static_cast<uint128>(digits) * found->second / ten_power;
  }
  if (scaled == 0 || scaled >= (static_cast<uint128>(1) << 63)) return std::nullopt;
  return static_cast<std::uint64_t>(scaled);
}

bool take_remote_option(std::string_view item, RemoteOptions& remote, std::string& error) {
  auto value_of = [&](std::string_view name) -> std::optional<std::string_view> {
    if (item.size() > name.size() && item.starts_with(name) && item[name.size()] == '=') {
      return item.substr(name.size() + 1);
    }
    return std::nullopt;
  };
  if (item == "insecure") {
    remote.insecure = true;
  } else if (auto c = value_of("cacert")) {
    if (!absolute_path(*c, remote.cacert)) error = fmt::format("invalid cacert '{}'", *c);
  } else if (auto size = value_of("cache_size")) {
    auto bytes = parse_size(*size);
    // Readahead needs room for a few requests; past a terabyte is surely a typo.
    if (!bytes || *bytes < (4u << 20) || *bytes > (1ull << 40)) {
      error = fmt::format("invalid cache_size '{}' (4M to 1T)", *size);
    } else {
      remote.cache_size = *bytes;
    }
  } else if (auto dir = value_of("cache_dir")) {
    if (!absolute_path(*dir, remote.cache_dir)) error = fmt::format("invalid cache_dir '{}'", *dir);
  } else if (auto dir_size = value_of("cache_dir_size")) {
    auto bytes = parse_size(*dir_size);
    if (!bytes || *bytes < (1u << 20)) {
      error = fmt::format("invalid cache_dir_size '{}' (at least 1M)", *dir_size);
    } else {
      remote.cache_dir_size = *bytes;
    }
  } else if (auto t = value_of("timeout")) {
    double seconds = 0;
    auto [end, ec] = std::from_chars(t->data(), t->data() + t->size(), seconds);
    if (ec != std::errc{} || end != t->data() + t->size() || !(seconds >= 0.1 && seconds <= 3600)) {
      error = fmt::format("invalid timeout '{}' (seconds, 0.1 to 3600)", *t);
    } else {
      remote.timeout = std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
    }
  } else {
    return false;
  }
  return true;
}

bool is_passed_option(std::string_view option) {
  // Each tested on a real mount (tests/integration/test_lifecycle.py, MountOptionTests). libfuse
  // 3.14 knows a few more, refused here: blkdev and blksize= (fuseblk only), the SELinux
  // context options (untested here), debug (-d says it), and its mount-table-only ones.
  static constexpr std::string_view names[] = {
      "allow_other", "allow_root", "auto_unmount", "default_permissions",
      "dev",         "nodev",      "suid",         "nosuid",
      "exec",        "noexec",     "atime",        "noatime",
      "sync",        "async",      "dirsync"};
  for (auto name : names) {
    if (option == name) return true;
  }
  // A non-empty value: libfuse puts these into the mount's fsname and type.
  for (std::string_view prefix : {"fsname=", "subtype="}) {
    if (option.starts_with(prefix) && option.size() > prefix.size()) return true;
  }
  return false;
}

ParseResult parse_mount_options(const std::vector<std::string>& args) {
  ParseResult r;
  MountOptions& o = r.options;
  std::vector<std::string> positional;
  // After an error the rest is still parsed (its errors ignored): a notify_fd given anywhere is
  // then told that ckptfs gave up.
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    std::string error;
    if (a == "-f") {
      o.foreground = true;
    } else if (a == "-d" || a == "--debug") {
      o.debug = true;
      o.foreground = true;
    } else if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "-V" || a == "--version") {
      o.version = true;
    } else if (a == "-o") {
      if (i + 1 == args.size()) {
        error = "-o needs an argument";
      } else {
        error = take_option_list(args[++i], o);
      }
    } else if (a.starts_with("-o")) {
      error = take_option_list(std::string_view(a).substr(2), o);
    } else if (a == "--notify-fd" || a.starts_with("--notify-fd=")) {
      if (a.size() > 11) {
        error = take_option("notify_fd=" + a.substr(12), o);
      } else if (i + 1 < args.size()) {
        error = take_option("notify_fd=" + args[++i], o);
      } else {
        error = "--notify-fd needs an argument";
      }
    } else if (a.starts_with("-") && a != "-") {
      error = unknown_option(a);
    } else {
      positional.push_back(a);
    }
    if (r.error.empty()) r.error = std::move(error);
  }
  if (!r.error.empty() || o.help || o.version) return r;
  if (o.layout == Layout::rfc && o.shard_size != 0) {
    r.error = "shard_size names the safetensors files of layout=split; layout=rfc has none";
    return r;
  }
  if (o.layout == Layout::rfc && o.files) {
    r.error = "files chooses what the key directories of layout=split hold; layout=rfc has none";
    return r;
  }
  if (o.files == 0) {
    r.error =
        "files names no file of a tensor's directory (data, meta.json, tensor.npy, tensor.pt)";
    return r;
  }
  if (positional.size() != 2) {
    r.error = positional.size() < 2 ? "needs a CHECKPOINT and a MOUNTPOINT"
                                    : "too many arguments: needs a CHECKPOINT and a MOUNTPOINT";
    return r;
  }
  o.checkpoint = positional[0];
  o.mountpoint = positional[1];
  return r;
}

}  // namespace ckptfs::cli
