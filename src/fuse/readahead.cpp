// SPDX-License-Identifier: MIT
// The mount's device from mountinfo, and its readahead through sysfs.
#include "readahead.hpp"

#include <ckptfs/base/error.hpp>

#include "kernel_files.hpp"

#include <fmt/format.h>

#include <sys/sysmacros.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <vector>

namespace ckptfs::fuse {
namespace {

// mountinfo writes space, tab, newline and backslash in paths as octal escapes (\040).
std::string unescape_mountinfo(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const char* d = field.data() + i + 1;
      if (d[0] >= '0' && d[0] <= '3' && d[1] >= '0' && d[1] <= '7' && d[2] >= '0' && d[2] <= '7') {
        out += static_cast<char>((d[0] - '0') * 64 + (d[1] - '0') * 8 + (d[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

// The space-separated fields of a line (mountinfo separates its fields with one space).
std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> fields;
  while (!line.empty()) {
    const auto space = line.find(' ');
    if (space != 0) fields.push_back(line.substr(0, space));
    if (space == std::string_view::npos) break;
    line.remove_prefix(space + 1);
  }
  return fields;
}

}  // namespace

std::string mount_device(const std::string& canonical_mountpoint) {
  const auto mountinfo = read_kernel_file("/proc/self/mountinfo");
  if (!mountinfo) {
    throw Error(ExitCode::mount_failed,
                fmt::format("/proc/self/mountinfo: {}", std::strerror(errno)));
  }
  std::string found;
  std::string_view rest = *mountinfo;
  while (!rest.empty()) {
    const auto newline = rest.find('\n');
    const std::string_view line = rest.substr(0, newline);
    rest.remove_prefix(newline == std::string_view::npos ? rest.size() : newline + 1);
    // "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS"
    const std::vector<std::string_view> fields = fields_of(line);
    if (fields.size() < 5 || unescape_mountinfo(fields[4]) != canonical_mountpoint) continue;
    std::size_t i = 5;
    while (i < fields.size() && fields[i] != "-") ++i;
    if (i + 1 < fields.size() && fields[i + 1].starts_with("fuse")) found = fields[2];
  }
  if (found.empty()) throw Error(ExitCode::mount_failed, "not found in /proc/self/mountinfo");
  return found;
}

void set_read_ahead(const std::string& device, unsigned kib) {
  const std::string path = "/sys/class/bdi/" + device + "/read_ahead_kb";
  if (!write_kernel_file(path, fmt::format("{}\n", kib))) {
    throw Error(ExitCode::mount_failed, path + ": " + std::strerror(errno));
  }
}

std::uint64_t device_read_ahead_bytes(std::uint64_t st_dev) noexcept {
  constexpr std::uint64_t kernel_default = 128 * 1024;
  try {
    const std::string id = fmt::format("{}:{}", major(st_dev), minor(st_dev));
    for (const std::string& path : {"/sys/dev/block/" + id + "/queue/read_ahead_kb",
                                    "/sys/dev/block/" + id + "/../queue/read_ahead_kb",
                                    "/sys/class/bdi/" + id + "/read_ahead_kb"}) {
      if (const auto kib = read_kernel_number(path)) {
        return std::min<std::uint64_t>(*kib, std::uint64_t{1} << 20) * 1024;  // at most 1 GiB
      }
    }
  } catch (...) {
  }
  return kernel_default;
}

}  // namespace ckptfs::fuse
