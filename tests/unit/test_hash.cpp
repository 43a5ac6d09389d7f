// SPDX-License-Identifier: MIT
// base/hash: SipHash against its authors' vectors, and the keyed tables against names built to
// flood std::hash.
#include <ckptfs/base/hash.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

using namespace ckptfs;

namespace {

// libstdc++'s std::hash<std::string> on 64-bit targets mixes each 8-byte word w as
// shift_mix(w * mul) * mul, shift_mix(v) = v ^ (v >> 47), then hash = (hash ^ mixed) * mul.
// Flipping the top bit of a mixed word flips only the top bit of the hash after it (mul is odd),
// and the next word can flip it back: two 16-byte blocks that hash alike under any seed.
constexpr std::uint64_t mul = 0xc6a4a7935bd1e995ULL;
std::uint64_t inverse(std::uint64_t odd) {  // mod 2^64, Newton's iteration
  std::uint64_t x = odd;
  for (int i = 0; i < 6; ++i) x *= 2 - odd * x;
  return x;
}
std::uint64_t mix(std::uint64_t w) {
  std::uint64_t v = w * mul;
  v ^= v >> 47;
  return v * mul;
}
std::uint64_t unmix(std::uint64_t y) {
  std::uint64_t v = y * inverse(mul);
  v ^= v >> 47;  // its own inverse: 47 > 32
  return v * inverse(mul);
}
std::string word(std::uint64_t w) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &w, 8);
  return s;
}

// 2^blocks strings of 16 * blocks bytes, all with the same std::hash.
std::vector<std::string> flooding_names(int blocks) {
  std::vector<std::string> names{""};
  for (int b = 0; b < blocks; ++b) {
    const std::uint64_t a = 0x1111111111111111ULL * static_cast<std::uint64_t>(b + 1);
    const std::uint64_t c = 0x0123456789abcdefULL + static_cast<std::uint64_t>(b);
    const std::string one = word(a) + word(c);
    const std::string other =
        word(unmix(mix(a) ^ (1ULL << 63))) + word(unmix(mix(c) ^ (1ULL << 63)));
    std::vector<std::string> next;
    for (const auto& n : names) {
      next.push_back(n + one);
      next.push_back(n + other);
    }
    names = std::move(next);
  }
  return names;
}

}  // namespace

TEST_CASE("siphash: the reference vectors of SipHash-2-4") {
  std::string key_bytes(16, '\0');
  for (int i = 0; i < 16; ++i) key_bytes[i] = static_cast<char>(i);
  std::uint64_t k0 = 0, k1 = 0;
  std::memcpy(&k0, key_bytes.data(), 8);
  std::memcpy(&k1, key_bytes.data() + 8, 8);
  std::string message;
  for (int i = 0; i < 15; ++i) message.push_back(static_cast<char>(i));
  CHECK(siphash(2, 4, k0, k1, "") == 0x726fdb47dd0e0e31ULL);
  CHECK(siphash(2, 4, k0, k1, message) == 0xa129ca6149be45e5ULL);  // the paper's example
  CHECK(siphash(1, 3, k0, k1, message) != siphash(2, 4, k0, k1, message));
}

TEST_CASE("keyed tables: names that flood std::hash spread over the buckets") {
  const auto names = flooding_names(12);  // 4096 names of 192 bytes
#if defined(__GLIBCXX__) && SIZE_MAX == UINT64_MAX
  // The attack is real: every one of them lands in a single bucket of an unkeyed table.
  const std::size_t first = std::hash<std::string>{}(names.front());
  CHECK(std::all_of(names.begin(), names.end(),
                    [&](const std::string& n) { return std::hash<std::string>{}(n) == first; }));
#endif
  std::set<std::size_t> hashes;
  for (const auto& n : names) hashes.insert(KeyedHash{}(n));
  CHECK(hashes.size() == names.size());

  TextMap<std::size_t> table;
  for (std::size_t i = 0; i < names.size(); ++i) table.emplace(names[i], i);
  std::size_t fullest = 0;
  for (std::size_t b = 0; b < table.bucket_count(); ++b)
    fullest = std::max(fullest, table.bucket_size(b));
  CHECK(fullest <= 12);
  CHECK(table.find(std::string_view{names[77]})->second == 77);  // a lookup by view
}
