// SPDX-License-Identifier: MIT
// SipHash (Aumasson and Bernstein, "SipHash: a fast short-input PRF", 2012), written from the
// paper's description, and the per-process key of KeyedHash.
#include <ckptfs/base/hash.hpp>

#include <bit>
#include <chrono>
#include <cstring>

#include <sys/random.h>
#include <unistd.h>

namespace ckptfs {
namespace {

std::uint64_t load_le64(const char* p) noexcept {
  std::uint64_t v = 0;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

struct SipState {
  std::uint64_t v0, v1, v2, v3;

  void round() noexcept {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }
  void compress(std::uint64_t m, int rounds) noexcept {
    v3 ^= m;
    for (int i = 0; i < rounds; ++i) round();
    v0 ^= m;
  }
};

struct ProcessKey {
  std::uint64_t k0 = 0, k1 = 0;
  ProcessKey() noexcept {
    std::uint64_t words[2] = {0, 0};
    // getrandom() of 16 bytes never returns short once the pool is ready; without it (a kernel
    // too old, a seccomp filter) the key falls back to what differs between processes and runs:
    // weaker, never worse than an unkeyed hash.
    if (getrandom(words, sizeof words, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof words)) {
      const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
      words[0] = static_cast<std::uint64_t>(now) ^ (static_cast<std::uint64_t>(getpid()) << 32);
      words[1] =
          reinterpret_cast<std::uintptr_t>(&words) ^
          static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    }
    k0 = words[0];
    k1 = words[1];
  }
};

}  // namespace

std::uint64_t siphash(int c_rounds, int d_rounds, std::uint64_t k0, std::uint64_t k1,
                      std::string_view bytes) noexcept {
  SipState s{k0 ^ 0x736f6d6570736575ULL, k1 ^ 0x646f72616e646f6dULL, k0 ^ 0x6c7967656e657261ULL,
             k1 ^ 0x7465646279746573ULL};
  const char* p = bytes.data();
  const std::size_t words = bytes.size() / 8;
  for (std::size_t i = 0; i < words; ++i, p += 8) s.compress(load_le64(p), c_rounds);
  // The last word: the remaining 0-7 bytes, little-endian, and the length's low byte on top.
  std::uint64_t last = static_cast<std::uint64_t>(bytes.size()) << 56;
  for (std::size_t i = 0; i < bytes.size() % 8; ++i)
    last |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  s.compress(last, c_rounds);
  s.v2 ^= 0xff;
  for (int i = 0; i < d_rounds; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

std::size_t KeyedHash::operator()(std::string_view text) const noexcept {
  static const ProcessKey key;
  return static_cast<std::size_t>(siphash(1, 3, key.k0, key.k1, text));
}

}  // namespace ckptfs
