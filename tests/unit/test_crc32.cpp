// SPDX-License-Identifier: MIT
// Tests of CRC-32: every engine against a bit-at-a-time reference, pieces, combine and zeros.
#include <ckptfs/base/crc32.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using ckptfs::Crc32Engine;

TEST_SUITE_BEGIN("crc32");

namespace {

// The definition, one bit at a time: no table, no folding.
std::uint32_t reference_crc32(std::string_view bytes) {
  std::uint32_t c = 0xffffffffu;
  for (const char byte : bytes) {
    c ^= static_cast<unsigned char>(byte);
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) != 0 ? (c >> 1) ^ 0xedb88320u : c >> 1;
  }
  return ~c;
}

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(random());
  return out;
}

const Crc32Engine all_engines[] = {Crc32Engine::table, Crc32Engine::pclmul, Crc32Engine::vpclmul};

}  // namespace

TEST_CASE("the check value of the CRC catalogue (CRC-32/ISO-HDLC: '123456789')") {
  CHECK(ckptfs::crc32("123456789") == 0xcbf43926u);
  CHECK(reference_crc32("123456789") == 0xcbf43926u);
  CHECK(ckptfs::crc32("") == 0);
}

TEST_CASE("every engine gives the reference CRC at every length and alignment") {
  const std::string data = random_bytes(4096 + 64, 1);
  for (const Crc32Engine engine : all_engines) {
    CAPTURE(ckptfs::engine_name(engine));
    if (!ckptfs::crc32_engine_available(engine)) {
      MESSAGE("engine not available on this CPU: checked as its fallback");
    }
    int failures = 0;
    for (std::size_t length = 0; length <= 1100; ++length) {
      for (std::size_t start = 0; start < 16; start += 5) {
        const std::string_view piece(data.data() + start, length);
        if (ckptfs::crc32_with(engine, 0, piece.data(), piece.size()) != reference_crc32(piece)) {
          ++failures;
        }
      }
    }
    // Lengths past the folding loops' blocks (256 and 64 bytes), with odd tails.
    for (const std::size_t length : {4096u, 4095u, 2049u, 1537u, 513u}) {
      const std::string_view piece(data.data() + 3, length);
      if (ckptfs::crc32_with(engine, 0, piece.data(), piece.size()) != reference_crc32(piece)) {
        ++failures;
      }
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("a CRC continued piece by piece is the CRC of the whole") {
  const std::string data = random_bytes(100'000, 2);
  const std::uint32_t whole = reference_crc32(data);
  for (const Crc32Engine engine : all_engines) {
    CAPTURE(ckptfs::engine_name(engine));
    for (const std::size_t piece : {1u, 7u, 64u, 255u, 4096u, 65'537u}) {
      std::uint32_t crc = 0;
      for (std::size_t at = 0; at < data.size(); at += piece) {
        const std::size_t n = std::min(piece, data.size() - at);
        crc = ckptfs::crc32_with(engine, crc, data.data() + at, n);
      }
      CHECK(crc == whole);
    }
  }
  CHECK(ckptfs::crc32(0, data.data(), data.size()) == whole);
}

TEST_CASE("crc32() runs an available engine") {
  CHECK(ckptfs::crc32_engine_available(ckptfs::crc32_engine()));
  CHECK(ckptfs::crc32_engine_available(Crc32Engine::table));
  MESSAGE("crc32() uses ", ckptfs::engine_name(ckptfs::crc32_engine()));
}

TEST_CASE("crc32_combine: the CRC of A then B from the CRCs of A and B") {
  const std::string data = random_bytes(70'000, 3);
  for (const std::size_t split : {0u, 1u, 15u, 64u, 1000u, 69'999u, 70'000u}) {
    CAPTURE(split);
    const std::string_view a(data.data(), split);
    const std::string_view b(data.data() + split, data.size() - split);
    CHECK(ckptfs::crc32_combine(ckptfs::crc32(a), ckptfs::crc32(b), b.size()) ==
          reference_crc32(data));
  }
  // Many chunks summed apart, as a tensor read in parallel would be.
  std::uint32_t crc = 0;
  for (std::size_t at = 0; at < data.size(); at += 4099) {
    const std::string_view chunk(data.data() + at, std::min<std::size_t>(4099, data.size() - at));
    crc = ckptfs::crc32_combine(crc, ckptfs::crc32(chunk), chunk.size());
  }
  CHECK(crc == reference_crc32(data));
}

TEST_CASE("crc32_zeros: zero bytes without reading them, up to sizes past 4 GiB") {
  const std::string zeros(300'000, '\0');
  for (const std::uint32_t start : {0u, 0x12345678u, 0xffffffffu}) {
    for (const std::size_t n : {0u, 1u, 3u, 64u, 4097u, 300'000u}) {
      CAPTURE(start);
      CAPTURE(n);
      CHECK(ckptfs::crc32_zeros(start, n) == ckptfs::crc32(start, zeros.data(), n));
    }
  }
  // 5 GiB of zeros as 5 * 2^30: combining pieces of zeros agrees with one long run.
  const std::uint64_t gib = std::uint64_t{1} << 30;
  std::uint32_t crc = ckptfs::crc32("head");
  for (int i = 0; i < 5; ++i) crc = ckptfs::crc32_zeros(crc, gib);
  CHECK(crc == ckptfs::crc32_zeros(ckptfs::crc32("head"), 5 * gib));
  CHECK(ckptfs::crc32_combine(ckptfs::crc32("head"), ckptfs::crc32_zeros(0, 5 * gib), 5 * gib) ==
        crc);
}

TEST_SUITE_END();
