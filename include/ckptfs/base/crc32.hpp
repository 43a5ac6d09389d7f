// SPDX-License-Identifier: MIT
// CRC-32 as zip and zlib define it (reflected polynomial 0xEDB88320): fast, in pieces, combined.
//
//   std::uint32_t crc = 0;                                   // the CRC of nothing
//   crc = ckptfs::crc32(crc, chunk.data(), chunk.size());    // ...continued chunk by chunk
//   crc32_combine(crc32(a), crc32(b), b.size()) == crc32(a + b)   // chunks summed apart
//
// crc32() runs the fastest engine this CPU has, chosen once: PCLMULQDQ folding on x86-64 CPUs
// with PCLMULQDQ and SSE4.1, else slicing-by-16 tables. Every engine gives the same values.
// Everything here is pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ckptfs {

// The CRC-32 of `size` bytes at `data`, continuing `crc`: the CRC of the bytes before them (0
// before any byte), with zlib's crc32() semantics: crc32(crc32(0, a), b) == crc32(0, a + b).
std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t size) noexcept;
inline std::uint32_t crc32(std::string_view bytes) noexcept {
  return crc32(0, bytes.data(), bytes.size());
}

// The CRC-32 of A followed by B, from crc32(A), crc32(B) and B's length, as zlib's
// crc32_combine(): a tensor's CRC from chunks read apart or in parallel. O(log size_b).
std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b,
                            std::uint64_t size_b) noexcept;

// `crc` continued over `count` zero bytes, without reading them: O(log count). The CRC of a
// hole in a sparse file, or of a payload of zeros.
std::uint32_t crc32_zeros(std::uint32_t crc, std::uint64_t count) noexcept;

// The implementations, for tests and benchmarks.
enum class Crc32Engine : std::uint8_t {
  table,    // slicing-by-16: portable, about 1 byte per cycle
  pclmul,   // carry-less multiplication folding 64 bytes a step (x86-64: PCLMULQDQ + SSE4.1)
  vpclmul,  // the same on 512-bit registers, 256 bytes a step (x86-64: AVX-512F + VPCLMULQDQ)
};
std::string_view engine_name(Crc32Engine engine) noexcept;
bool crc32_engine_available(Crc32Engine engine) noexcept;
// The engine crc32() uses on this CPU.
Crc32Engine crc32_engine() noexcept;
// crc32() with a given engine; one that is not available runs the table engine instead.
std::uint32_t crc32_with(Crc32Engine engine, std::uint32_t crc, const void* data,
                         std::size_t size) noexcept;

}  // namespace ckptfs
