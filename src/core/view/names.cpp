// SPDX-License-Identifier: MIT
// directory_name(): the naming rule of the mount.
#include <ckptfs/view/names.hpp>

#include <fmt/format.h>

namespace ckptfs {

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string directory_name(std::string_view key) {
  std::string name;
  name.reserve(key.size());
  // Where each character of `name` starts, so that a cut never splits an escape or a UTF-8
  // sequence.
  std::size_t last_boundary_within_200 = 0;
  auto mark_boundary = [&] {
    if (name.size() <= 200) last_boundary_within_200 = name.size();
  };
  if (key.empty() || key == "." || key == ".." || key == "index.json") name += '%';
  for (std::size_t i = 0; i < key.size(); ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if ((c & 0xc0) != 0x80) mark_boundary();  // not a UTF-8 continuation byte
    if (c == '%') {
      name += "%25";
    } else if (c == '/') {
      name += "%2F";
    } else if (c == 0) {
      name += "%00";
    } else {
      name += static_cast<char>(c);
    }
  }
  mark_boundary();
  if (name.size() <= 255) return name;
  name.resize(last_boundary_within_200);
  return fmt::format("{}~{:016x}", name, fnv1a64(key));
}

}  // namespace ckptfs
