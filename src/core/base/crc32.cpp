// SPDX-License-Identifier: MIT
// CRC-32 engines (slicing-by-16 tables, PCLMULQDQ folding), GF(2) arithmetic for combining.
#include <ckptfs/base/crc32.hpp>

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ckptfs {
namespace {

// The polynomial, bit-reflected (bit 31 is the coefficient of x^0), and in normal form with its
// x^32 term (bit k is the coefficient of x^k).
constexpr std::uint32_t poly_reflected = 0xedb88320u;
constexpr std::uint64_t poly_normal = 0x104c11db7ull;

// Raw states: the CRC register between the initial and final inversions (state = ~crc).

using Table = std::array<std::array<std::uint32_t, 256>, 16>;

// tables[0] is the classic byte table; tables[k][b] runs byte b through k more zero bytes, so
// that 16 bytes are looked up independently and XORed (each table is one power of x^8).
constexpr Table make_tables() {
  Table t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) != 0 ? (c >> 1) ^ poly_reflected : c >> 1;
    t[0][b] = c;
  }
  for (std::size_t k = 1; k < t.size(); ++k) {
    for (std::uint32_t b = 0; b < 256; ++b) {
      const std::uint32_t prev = t[k - 1][b];
      t[k][b] = (prev >> 8) ^ t[0][prev & 0xff];
    }
  }
  return t;
}
constexpr Table tables = make_tables();

inline std::uint32_t load_le32(const unsigned char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap32(v);
#endif
  return v;
}

std::uint32_t table_raw(std::uint32_t s, const unsigned char* p, std::size_t n) noexcept {
  while (n >= 16) {
    const std::uint32_t w0 = load_le32(p) ^ s;
    const std::uint32_t w1 = load_le32(p + 4);
    const std::uint32_t w2 = load_le32(p + 8);
    const std::uint32_t w3 = load_le32(p + 12);
    // Byte j of the 16 still has 15 - j bytes after it: table 15 - j.
    s = tables[15][w0 & 0xff] ^ tables[14][(w0 >> 8) & 0xff] ^ tables[13][(w0 >> 16) & 0xff] ^
        tables[12][w0 >> 24] ^ tables[11][w1 & 0xff] ^ tables[10][(w1 >> 8) & 0xff] ^
        tables[9][(w1 >> 16) & 0xff] ^ tables[8][w1 >> 24] ^ tables[7][w2 & 0xff] ^
        tables[6][(w2 >> 8) & 0xff] ^ tables[5][(w2 >> 16) & 0xff] ^ tables[4][w2 >> 24] ^
        tables[3][w3 & 0xff] ^ tables[2][(w3 >> 8) & 0xff] ^ tables[1][(w3 >> 16) & 0xff] ^
        tables[0][w3 >> 24];
    p += 16;
    n -= 16;
  }
  while (n-- > 0) s = (s >> 8) ^ tables[0][(s ^ *p++) & 0xff];
  return s;
}

// x^e mod P in normal form (bit k is the coefficient of x^k).
constexpr std::uint32_t xpow_mod_normal(unsigned e) {
  std::uint64_t r = 1;
  for (unsigned i = 0; i < e; ++i) {
    r <<= 1;
    if ((r >> 32) != 0) r ^= poly_normal;
  }
  return static_cast<std::uint32_t>(r);
}

constexpr std::uint32_t reflect32(std::uint32_t v) {
  std::uint32_t r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

// a * b mod P, both reflected.
constexpr std::uint32_t multiply_mod(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  // Walk a's coefficients from x^0 (bit 31) up, with b * x^i kept reduced.
  for (int i = 0; i < 32; ++i) {
    if ((a >> (31 - i)) & 1u) product ^= b;
    b = (b & 1u) != 0 ? (b >> 1) ^ poly_reflected : b >> 1;
  }
  return product;
}

// x^(2^k) mod P, reflected, for k = 0..66: enough for x^(8 n) with any 64-bit n.
constexpr std::array<std::uint32_t, 67> make_power_table() {
  std::array<std::uint32_t, 67> t{};
  t[0] = reflect32(xpow_mod_normal(1));
  for (std::size_t k = 1; k < t.size(); ++k) t[k] = multiply_mod(t[k - 1], t[k - 1]);
  return t;
}
constexpr std::array<std::uint32_t, 67> x_to_2k = make_power_table();

// x^(8 n) mod P, reflected.
std::uint32_t x_to_8n(std::uint64_t n) noexcept {
  std::uint32_t r = reflect32(1);  // x^0
  for (unsigned k = 3; n != 0; n >>= 1, ++k) {
    if ((n & 1) != 0) r = multiply_mod(r, x_to_2k[k]);
  }
  return r;
}

#if defined(__x86_64__)

// Folding: a 16-byte block X (bit k of the register is the message bit k, the coefficient of
// x^(127-k) within the block) moved D bits further along the message is congruent to
// lo64(X) * x^(D+64) + hi64(X) * x^D. A carry-less product of two reflected 64-bit lanes is the
// reflected product times x, so lane 0 is multiplied by reflect(x^(D+32) mod P) << 1 and lane 1
// by reflect(x^(D-32) mod P) << 1: two products of at most 96 bits, XORed into the block D
// bits later.
constexpr std::uint64_t fold_constant(unsigned e) {
  return static_cast<std::uint64_t>(reflect32(xpow_mod_normal(e))) << 1;
}
constexpr std::uint64_t k_512_lo = fold_constant(512 + 32);
constexpr std::uint64_t k_512_hi = fold_constant(512 - 32);
constexpr std::uint64_t k_128_lo = fold_constant(128 + 32);
constexpr std::uint64_t k_128_hi = fold_constant(128 - 32);

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i x, __m128i k, __m128i next) {
  const __m128i lo = _mm_clmulepi64_si128(x, k, 0x00);
  const __m128i hi = _mm_clmulepi64_si128(x, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

__attribute__((target("pclmul,sse4.1"))) std::uint32_t pclmul_raw(std::uint32_t s,
                                                                  const unsigned char* p,
                                                                  std::size_t n) noexcept {
  if (n < 64) return table_raw(s, p, n);
  auto load = [](const unsigned char* at) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
  };
  const __m128i k512 =
      _mm_set_epi64x(static_cast<long long>(k_512_hi), static_cast<long long>(k_512_lo));
  const __m128i k128 =
      _mm_set_epi64x(static_cast<long long>(k_128_hi), static_cast<long long>(k_128_lo));
  // The running state is the first four message bytes XORed in: the rest starts from zero.
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(s)));
  __m128i x1 = load(p + 16);
  __m128i x2 = load(p + 32);
  __m128i x3 = load(p + 48);
  p += 64;
  n -= 64;
  while (n >= 64) {
    x0 = fold(x0, k512, load(p));
    x1 = fold(x1, k512, load(p + 16));
    x2 = fold(x2, k512, load(p + 32));
    x3 = fold(x3, k512, load(p + 48));
    p += 64;
    n -= 64;
  }
  x1 = fold(x0, k128, x1);
  x2 = fold(x1, k128, x2);
  x3 = fold(x2, k128, x3);
  while (n >= 16) {
    x3 = fold(x3, k128, load(p));
    p += 16;
    n -= 16;
  }
  // The last block is a 16-byte message congruent to everything so far: its CRC from a zero
  // state is the state, and the tail continues from there.
  alignas(16) unsigned char block[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(block), x3);
  return table_raw(table_raw(0, block, sizeof block), p, n);
}

// The same folding on four 512-bit registers (four 16-byte lanes each): 256 bytes a step.
constexpr std::uint64_t k_2048_lo = fold_constant(2048 + 32);
constexpr std::uint64_t k_2048_hi = fold_constant(2048 - 32);

__attribute__((target("avx512f,vpclmulqdq"))) inline __m512i fold512(__m512i x, __m512i k,
                                                                     __m512i next) {
  const __m512i lo = _mm512_clmulepi64_epi128(x, k, 0x00);
  const __m512i hi = _mm512_clmulepi64_epi128(x, k, 0x11);
  return _mm512_ternarylogic_epi64(lo, hi, next, 0x96);  // lo ^ hi ^ next
}

__attribute__((target("avx512f"))) inline __m512i load(const unsigned char* at) {
  return _mm512_loadu_si512(at);
}

// The pair (lo, hi) in each 128-bit lane.
__attribute__((target("avx512f"))) inline __m512i broadcast_pair(std::uint64_t lo,
                                                                 std::uint64_t hi) {
  return _mm512_set_epi64(static_cast<long long>(hi), static_cast<long long>(lo),
                          static_cast<long long>(hi), static_cast<long long>(lo),
                          static_cast<long long>(hi), static_cast<long long>(lo),
                          static_cast<long long>(hi), static_cast<long long>(lo));
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) std::uint32_t vpclmul_raw(
    std::uint32_t s, const unsigned char* p, std::size_t n) noexcept {
  if (n < 256) return pclmul_raw(s, p, n);
  const __m512i k2048 = broadcast_pair(k_2048_lo, k_2048_hi);
  const __m512i k512 = broadcast_pair(k_512_lo, k_512_hi);
  __m512i x0 =
      _mm512_xor_si512(load(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(s))));
  __m512i x1 = load(p + 64);
  __m512i x2 = load(p + 128);
  __m512i x3 = load(p + 192);
  p += 256;
  n -= 256;
  while (n >= 256) {
    x0 = fold512(x0, k2048, load(p));
    x1 = fold512(x1, k2048, load(p + 64));
    x2 = fold512(x2, k2048, load(p + 128));
    x3 = fold512(x3, k2048, load(p + 192));
    p += 256;
    n -= 256;
  }
  x1 = fold512(x0, k512, x1);
  x2 = fold512(x1, k512, x2);
  x3 = fold512(x2, k512, x3);
  // 64 bytes congruent to everything so far: their CRC from a zero state, then the tail.
  alignas(64) unsigned char block[64];
  _mm512_store_si512(block, x3);
  return pclmul_raw(pclmul_raw(0, block, sizeof block), p, n);
}

bool detect_pclmul() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}

bool detect_vpclmul() noexcept {
  __builtin_cpu_init();
  return detect_pclmul() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("vpclmulqdq");
}

#endif  // __x86_64__

bool has_pclmul() noexcept {
#if defined(__x86_64__)
  static const bool available = detect_pclmul();
  return available;
#else
  return false;
#endif
}

bool has_vpclmul() noexcept {
#if defined(__x86_64__)
  static const bool available = detect_vpclmul();
  return available;
#else
  return false;
#endif
}

std::uint32_t run_raw(Crc32Engine engine, std::uint32_t s, const unsigned char* p,
                      std::size_t n) noexcept {
#if defined(__x86_64__)
  if (engine == Crc32Engine::vpclmul && has_vpclmul()) return vpclmul_raw(s, p, n);
  if (engine != Crc32Engine::table && has_pclmul()) return pclmul_raw(s, p, n);
#else
  (void)engine;
#endif
  return table_raw(s, p, n);
}

}  // namespace

std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t size) noexcept {
  static const Crc32Engine engine = crc32_engine();
  return ~run_raw(engine, ~crc, static_cast<const unsigned char*>(data), size);
}

std::uint32_t crc32_with(Crc32Engine engine, std::uint32_t crc, const void* data,
                         std::size_t size) noexcept {
  return ~run_raw(engine, ~crc, static_cast<const unsigned char*>(data), size);
}

std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b,
                            std::uint64_t size_b) noexcept {
  // The inversions cancel: crc(A B) = crc(A) * x^(8 |B|) + crc(B) (mod P).
  return multiply_mod(x_to_8n(size_b), crc_a) ^ crc_b;
}

std::uint32_t crc32_zeros(std::uint32_t crc, std::uint64_t count) noexcept {
  // Zero bytes only shift the raw state: state * x^(8 count).
  return ~multiply_mod(x_to_8n(count), ~crc);
}

std::string_view engine_name(Crc32Engine engine) noexcept {
  switch (engine) {
    case Crc32Engine::table:
      return "table";
    case Crc32Engine::pclmul:
      return "pclmul";
    case Crc32Engine::vpclmul:
      return "vpclmul";
  }
  return "table";
}

bool crc32_engine_available(Crc32Engine engine) noexcept {
  switch (engine) {
    case Crc32Engine::table:
      return true;
    case Crc32Engine::pclmul:
      return has_pclmul();
    case Crc32Engine::vpclmul:
      return has_vpclmul();
  }
  return false;
}

Crc32Engine crc32_engine() noexcept {
  return has_vpclmul()  ? Crc32Engine::vpclmul
         : has_pclmul() ? Crc32Engine::pclmul
                        : Crc32Engine::table;
}

}  // namespace ckptfs
