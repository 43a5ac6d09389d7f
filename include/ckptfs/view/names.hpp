// SPDX-License-Identifier: MIT
// Flattened keys as directory names: one path component each, reversible, at most 255 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ckptfs {

// The directory name of a key: its UTF-8 bytes with '%' written "%25", '/' "%2F" and NUL "%00";
// "", ".", "..", and "index.json" (the root's own file) get a '%' in front. A name longer than
// 255 bytes keeps its first 200 bytes (cut at a character boundary, never inside an escape),
// then '~' and the 16 lower-case hex digits of the FNV-1a 64-bit hash of the whole key.
std::string directory_name(std::string_view key);

std::uint64_t fnv1a64(std::string_view bytes);

}  // namespace ckptfs
