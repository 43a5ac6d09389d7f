// SPDX-License-Identifier: MIT
// parse_mount_options(): flags, -o lists, and the two positional arguments.
#include "options.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdint>
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

// "256M", "1GiB", "4096": bytes, with an optional binary suffix.
std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::uint64_t value = 0;
  if (digits == 0 || !parse_number(text.substr(0, digits), value, 10)) return std::nullopt;
  std::string_view suffix = text.substr(digits);
  if (suffix.ends_with("iB")) suffix.remove_suffix(2);
  if (suffix.size() > 1) return std::nullopt;
  int shift = 0;
  if (!suffix.empty()) {
    switch (suffix[0]) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      case 'T': case 't': shift = 40; break;
      default: return std::nullopt;
    }
  }
  if (shift != 0 && value > (~std::uint64_t{0} >> shift)) return std::nullopt;
  return value << shift;
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
    if (!parse_number(*v, uid, 10)) return fmt::format("invalid uid '{}'", *v);
    o.uid = uid;
  } else if (auto g = value_of("gid")) {
    gid_t gid;
    if (!parse_number(*g, gid, 10)) return fmt::format("invalid gid '{}'", *g);
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
  } else if (item == "ro" || item.empty() || is_ignored_option(item)) {
    // always read-only; fstab-only options mean nothing here
  } else {
    o.fuse_options.emplace_back(item);
  }
  return {};
}

std::string take_option_list(std::string_view list, MountOptions& o) {
  while (true) {
    auto comma = list.find(',');
    if (auto error = take_option(list.substr(0, comma), o); !error.empty()) return error;
    if (comma == std::string_view::npos) return {};
    list.remove_prefix(comma + 1);
  }
}

}  // namespace

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
    remote.cacert = std::string(*c);
  } else if (auto size = value_of("cache_size")) {
    auto bytes = parse_size(*size);
    // Readahead needs room for a few requests; past a terabyte is surely a typo.
    if (!bytes || *bytes < (4u << 20) || *bytes > (1ull << 40)) {
      error = fmt::format("invalid cache_size '{}' (4M to 1T)", *size);
    } else {
      remote.cache_size = *bytes;
    }
  } else if (auto dir = value_of("cache_dir")) {
    remote.cache_dir = std::string(*dir);
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

bool is_ignored_option(std::string_view option) {
  // mount(8), fstab and systemd options that can reach a helper (mount.fuse3 drops only a few of
  // them), and "rw", which mount.fuse3 passes whenever fstab does not say "ro".
  static constexpr std::string_view fstab_only[] = {
      "rw", "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "nofail",
      "_netdev", "_rnetdev"};
  // Kernel flags libfuse 3 does not know; meaningless here, where every time is the
  // checkpoint's mtime and nothing is written or linked.
  static constexpr std::string_view time_flags[] = {
      "diratime", "nodiratime", "relatime", "norelatime", "strictatime", "nostrictatime",
      "lazytime", "nolazytime", "iversion", "noiversion", "mand", "nomand", "symfollow",
      "nosymfollow", "silent", "loud"};
  for (auto name : fstab_only) {
    if (option == name) return true;
  }
  for (auto name : time_flags) {
    if (option == name) return true;
  }
  return option.starts_with("x-") || option.starts_with("comment=") ||
         option.starts_with("helper=");
}

ParseResult parse_mount_options(const std::vector<std::string>& args) {
  ParseResult r;
  MountOptions& o = r.options;
  std::vector<std::string> positional;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
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
        r.error = "-o needs an argument";
        return r;
      }
      r.error = take_option_list(args[++i], o);
    } else if (a.starts_with("-o")) {
      r.error = take_option_list(std::string_view(a).substr(2), o);
    } else if (a == "--notify-fd" || a.starts_with("--notify-fd=")) {
      std::string value;
      if (a.size() > 11) {
        value = a.substr(12);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        r.error = "--notify-fd needs an argument";
        return r;
      }
      r.error = take_option("notify_fd=" + value, o);
    } else if (a.starts_with("-") && a != "-") {
      r.error = fmt::format("unknown option '{}'", a);
    } else {
      positional.push_back(a);
    }
    if (!r.error.empty()) return r;
  }
  if (o.help || o.version) return r;
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
