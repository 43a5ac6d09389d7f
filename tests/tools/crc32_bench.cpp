// SPDX-License-Identifier: MIT
// Measures CRC-32 throughput (GB/s) of each engine of base/crc32 and of zlib's crc32(), on a
// buffer that fits in the L2 cache and on one that does not. Not a test: it prints figures.
//
//   crc32_bench [MiB of the large buffer, default 256]
#include <ckptfs/base/crc32.hpp>

#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using Crc = std::function<std::uint32_t(std::uint32_t, const unsigned char*, std::size_t)>;

// Best of `rounds` runs of CRCs over `total` bytes taken from `buffer` in `block`-sized calls;
// `result` gets the CRC, so that the engines can be seen to agree.
double gigabytes_per_second(const Crc& crc, const std::vector<unsigned char>& buffer,
                            std::size_t block, std::size_t total, int rounds,
                            std::uint32_t& result) {
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    std::uint32_t c = 0;
    for (std::size_t done = 0; done < total; done += block) {
      const std::size_t at = done % buffer.size();
      c = crc(c, buffer.data() + at, block);
    }
    const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
    result = c;
    best = std::max(best, static_cast<double>(total) / seconds.count() / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t large_mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 256;
  std::vector<unsigned char> large(large_mib << 20);
  std::mt19937_64 random(42);
  for (auto& byte : large) byte = static_cast<unsigned char>(random());
  const std::vector<unsigned char> small(large.begin(), large.begin() + (256 << 10));

  struct Engine {
    std::string name;
    Crc crc;
  };
  std::vector<Engine> engines;
  for (auto engine :
       {ckptfs::Crc32Engine::table, ckptfs::Crc32Engine::pclmul, ckptfs::Crc32Engine::vpclmul}) {
    if (!ckptfs::crc32_engine_available(engine)) continue;
    engines.push_back({std::string(ckptfs::engine_name(engine)),
                       [engine](std::uint32_t c, const unsigned char* p, std::size_t n) {
                         return ckptfs::crc32_with(engine, c, p, n);
                       }});
  }
  engines.push_back(
      {"zlib " ZLIB_VERSION, [](std::uint32_t c, const unsigned char* p, std::size_t n) {
         return static_cast<std::uint32_t>(::crc32(c, p, static_cast<uInt>(n)));
       }});

  std::printf("crc32() uses: %s; large buffer %zu MiB; best of 5 runs\n",
              std::string(ckptfs::engine_name(ckptfs::crc32_engine())).c_str(), large_mib);
  std::printf("%-16s %16s %16s %10s %10s\n", "engine", "256 KiB (GB/s)", "large (GB/s)",
              "crc small", "crc large");
  int status = 0;
  std::uint32_t first_small = 0;
  std::uint32_t first_large = 0;
  for (std::size_t i = 0; i < engines.size(); ++i) {
    std::uint32_t crc_small = 0;
    std::uint32_t crc_large = 0;
    const double in_cache =
        gigabytes_per_second(engines[i].crc, small, 64 << 10, std::size_t{1} << 30, 5, crc_small);
    const double in_memory =
        gigabytes_per_second(engines[i].crc, large, 1 << 20, large.size(), 5, crc_large);
    std::printf("%-16s %16.2f %16.2f %10.8x %10.8x\n", engines[i].name.c_str(), in_cache, in_memory,
                crc_small, crc_large);
    if (i == 0) {
      first_small = crc_small;
      first_large = crc_large;
    } else if (crc_small != first_small || crc_large != first_large) {
      std::printf("the engines disagree\n");
      status = 1;
    }
  }
  return status;
}
