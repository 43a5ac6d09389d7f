// SPDX-License-Identifier: MIT
// The mount's device from mountinfo, and its readahead through sysfs.
#include "readahead.hpp"

#include <ckptfs/base/error.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ckptfs::fuse {
namespace {

// mountinfo writes space, tab, newline and backslash in paths as octal escapes (\040).
std::string unescape_mountinfo(const std::string& field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const char* d = field.c_str() + i + 1;
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

}  // namespace

std::string mount_device(const std::string& canonical_mountpoint) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string found;
  std::string line;
  while (std::getline(mountinfo, line)) {
    // "ID PARENT MAJOR:MINOR ROOT MOUNTPOINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPEROPTIONS"
    std::istringstream fields(line);
    std::string id, parent, device, root, mountpoint;
    if (!(fields >> id >> parent >> device >> root >> mountpoint)) continue;
    if (unescape_mountinfo(mountpoint) != canonical_mountpoint) continue;
    std::string word;
    while (fields >> word && word != "-") {
    }
    std::string fstype;
    if (fields >> fstype && fstype.starts_with("fuse")) found = device;
  }
  if (found.empty()) throw Error(ExitCode::mount_failed, "not found in /proc/self/mountinfo");
  return found;
}

void set_read_ahead(const std::string& device, unsigned kib) {
  std::string path = "/sys/class/bdi/" + device + "/read_ahead_kb";
  std::ofstream out(path);
  if (out) out << kib << '\n';
  if (out) out.flush();
  if (!out) throw Error(ExitCode::mount_failed, path + ": " + std::strerror(errno));
}

}  // namespace ckptfs::fuse
