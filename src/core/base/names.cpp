// SPDX-License-Identifier: MIT
// directory_name() and NameAllocator: the naming rule of the mount.
#include <ckptfs/base/names.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace ckptfs {
namespace {

constexpr std::size_t kept_when_cut = 200;  // the cut form: 200 + "%~" + 16 = 218 bytes

// "model-00001-of-00004.safetensors": the files of a sharded safetensors view.
bool is_shard_name(std::string_view name) {
  constexpr std::string_view prefix = "model-", middle = "-of-", suffix = ".safetensors";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return false;
  name = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const auto at = name.find(middle);
  if (at == std::string_view::npos) return false;
  auto digits = [](std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(name.substr(0, at)) && digits(name.substr(at + middle.size()));
}

// Names that get a '%' in front (names.hpp): hidden ones (".", ".." and .ckptfs among them),
// the empty one, map.pt's, and the root views' names of old.
bool reserved(std::string_view key) {
  return key.empty() || key.front() == '.' || key == "index.json" || key == "map" ||
         key == "model.safetensors" || key == "model.safetensors.index.json" || is_shard_name(key);
}

// The escaped name and the largest character boundary at or before kept_when_cut bytes.
struct Escaped {
  std::string name;
  std::size_t cut = 0;
};

Escaped escape(std::string_view key) {
  Escaped e;
  e.name.reserve(key.size() + 1);
  auto mark_boundary = [&] {
    if (e.name.size() <= kept_when_cut) e.cut = e.name.size();
  };
  if (reserved(key)) e.name += '%';
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    if ((c & 0xc0) != 0x80) mark_boundary();  // not a UTF-8 continuation byte
    if (c == '%') {
      e.name += "%25";
    } else if (c == '/') {
      e.name += "%2F";
    } else if (c == 0) {
      e.name += "%00";
    } else {
      e.name += ch;
    }
  }
  mark_boundary();
  return e;
}

std::string cut(const Escaped& e, std::string_view key) {
  return fmt::format("{}%~{:016x}", std::string_view(e.name).substr(0, e.cut), fnv1a64(key));
}

}  // namespace

std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string directory_name(std::string_view key, std::size_t max_bytes) {
  Escaped e = escape(key);
  return e.name.size() <= max_bytes ? std::move(e.name) : cut(e, key);
}

bool is_own_name(std::string_view key, std::size_t max_bytes) noexcept {
  return !key.empty() && key.size() <= max_bytes && !reserved(key) &&
         key.find_first_of(std::string_view("%/\0", 3)) == std::string_view::npos;
}

std::string suffixed_name(std::string_view key, std::uint64_t n, std::size_t max_bytes) {
  Escaped e = escape(key);
  std::string suffix = fmt::format("%#{}", n);
  if (e.name.size() + suffix.size() <= max_bytes) return e.name + suffix;
  return cut(e, key) + suffix;
}

std::optional<std::string> key_of_name(std::string_view name, std::size_t max_bytes) {
  if (name.find("%~") != std::string_view::npos || name.find("%#") != std::string_view::npos) {
    return std::nullopt;
  }
  auto escape_at = [&](std::size_t i) {
    const std::string_view rest = name.substr(i);
    return rest.starts_with("%25") || rest.starts_with("%2F") || rest.starts_with("%00");
  };
  // A '%' in front that starts no escape marks a name the root reserves.
  std::size_t i = name.starts_with('%') && !escape_at(0) ? 1 : 0;
  std::string key;
  key.reserve(name.size());
  while (i < name.size()) {
    if (name[i] != '%') {
      key += name[i++];
      continue;
    }
    if (!escape_at(i)) return std::nullopt;
    key += name[i + 1] == '2' ? (name[i + 2] == '5' ? '%' : '/') : '\0';
    i += 3;
  }
  // Only a name the rule itself gives that key (a '%' in front of a name that is not reserved,
  // or a reserved name without it, is none).
  if (directory_name(key, max_bytes) != name) return std::nullopt;
  return key;
}

bool suffix_is_own_key(std::string_view key, std::uint64_t n, const TextViewSet& own_keys) {
  return own_keys.contains(fmt::format("{}%#{}", key, n));
}

std::string NameAllocator::name(std::string_view key) {
  std::string plain = directory_name(key, max_bytes_);
  if (taken_.insert(plain).second) return plain;
  for (std::uint64_t n = 2;; ++n) {
    if (own_keys_ && suffix_is_own_key(key, n, *own_keys_)) continue;
    std::string candidate = suffixed_name(key, n, max_bytes_);
    if (taken_.insert(candidate).second) return candidate;
  }
}

}  // namespace ckptfs
