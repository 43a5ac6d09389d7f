// SPDX-License-Identifier: MIT
// Unit tests of convert(): IEEE rounding, torch's NaN rules, byte order, scalar == AVX2, windows.
#include <ckptfs/view/convert.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

using namespace ckptfs;
using detail::ConvertPath;

namespace {

constexpr DType f16 = DType::float16, bf16 = DType::bfloat16, f32 = DType::float32,
                f64 = DType::float64;
constexpr DType sources[] = {f16, bf16, f32, f64};
constexpr DType targets[] = {f16, bf16, f32};

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <class T>
std::vector<T> values_of(const std::vector<std::byte>& bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// The same elements with each one's bytes reversed: a big-endian source.
std::vector<std::byte> reversed_elements(std::vector<std::byte> bytes, std::size_t size) {
  for (std::size_t i = 0; i + size <= bytes.size(); i += size) {
    std::reverse(bytes.begin() + static_cast<std::ptrdiff_t>(i),
                 bytes.begin() + static_cast<std::ptrdiff_t>(i + size));
  }
  return bytes;
}

std::vector<std::byte> run(ConvertPath path, DType from, DType to, bool big,
                           const std::vector<std::byte>& in) {
  const std::size_t count = in.size() / info(from).element_size;
  std::vector<std::byte> out(count * info(to).element_size, std::byte{0xa5});
  detail::convert_with(path, from, to, big, in.data(), out.data(), count);
  return out;
}

// Converts one element through the best path.
template <class Out, class In>
Out one(DType from, DType to, In bits) {
  Out out{};
  convert(from, to, false, reinterpret_cast<const std::byte*>(&bits),
          reinterpret_cast<std::byte*>(&out), 1);
  return out;
}

std::uint32_t f32_bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float f32_value(std::uint32_t b) { return std::bit_cast<float>(b); }
std::uint64_t f64_bits(double d) { return std::bit_cast<std::uint64_t>(d); }

bool f16_is_nan(std::uint16_t h) { return (h & 0x7fff) > 0x7c00; }
bool bf16_is_nan(std::uint16_t b) { return (b & 0x7fff) > 0x7f80; }

// The exact value of a float16 or bfloat16 bit pattern, computed from its fields.
double f16_value(std::uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? INFINITY : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) != 0 ? -v : v;
}

// Every 16-bit pattern.
std::vector<std::uint16_t> all_16bit() {
  std::vector<std::uint16_t> v(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

// float32 patterns: every sign and exponent with the mantissas at every rounding boundary of
// float16 (13 bits dropped) and bfloat16 (16 bits dropped) - ties with an even and an odd kept
// bit, one above and below - NaN payloads, and random patterns.
std::vector<std::uint32_t> f32_patterns(std::size_t random_count) {
  const std::uint32_t mantissas[] = {
      0,        1,        2,        0x0fff,   0x1000,   0x1001,   0x1fff,   0x2000,
      0x2fff,   0x3000,   0x3001,   0x7fff,   0x8000,   0x8001,   0xffff,   0x10000,
      0x17fff,  0x18000,  0x18001,  0x200000, 0x3fffff, 0x400000, 0x400001, 0x7fe000,
      0x7fefff, 0x7ff000, 0x7ff001, 0x7fffff, 0x7f8000, 0x7f7fff, 0x001234, 0x7fc000};
  std::vector<std::uint32_t> v;
  for (std::uint32_t sign : {0u, 0x80000000u}) {
    for (std::uint32_t e = 0; e < 256; ++e) {
      for (std::uint32_t m : mantissas) v.push_back(sign | (e << 23) | m);
    }
  }
  std::mt19937 rng(20240601);
  for (std::size_t i = 0; i < random_count; ++i) v.push_back(static_cast<std::uint32_t>(rng()));
  return v;
}

// float64 patterns: every exponent with mantissas at the rounding boundaries of float32 (29 bits
// dropped) and, through float32, float16 and bfloat16; NaN payloads; random patterns.
std::vector<std::uint64_t> f64_patterns(std::size_t random_count) {
  std::vector<std::uint64_t> mantissas{0, 1, 2, 0xfffffffffffffu, 0x8000000000000u};
  mantissas.insert(mantissas.end(), {0x4000000000000u, 0x123456789abcdu});
  for (std::uint64_t m32 : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x3000u, 0x7fffu, 0x8000u, 0x18000u,
                            0x400000u, 0x7fffffu}) {
    for (std::uint64_t low : {0x0u, 0x1u, 0xfffffffu, 0x10000000u, 0x10000001u, 0x1fffffffu}) {
      mantissas.push_back((m32 << 29) | low);
    }
  }
  std::vector<std::uint64_t> v;
  for (std::uint64_t sign : {0ull, 0x8000000000000000ull}) {
    for (std::uint64_t e = 0; e < 2048; ++e) {
      for (std::uint64_t m : mantissas) v.push_back(sign | (e << 52) | m);
    }
  }
  std::mt19937_64 rng(20240602);
  for (std::size_t i = 0; i < random_count; ++i) v.push_back(rng());
  return v;
}

std::vector<std::byte> patterns_for(DType from) {
  if (from == f16 || from == bf16) return bytes_of(all_16bit());
  if (from == f32) return bytes_of(f32_patterns(1 << 20));
  return bytes_of(f64_patterns(1 << 19));
}

}  // namespace

TEST_SUITE_BEGIN("convert");

TEST_CASE("convertible: the floating dtypes to float16, bfloat16 and float32") {
  for (DType from : sources) {
    for (DType to : targets) CHECK(convertible(from, to));
    CHECK_FALSE(convertible(from, f64));
  }
  for (DType other :
       {DType::int8, DType::int32, DType::int64, DType::uint8, DType::boolean, DType::complex64,
        DType::complex32, DType::bcomplex32, DType::float8_e4m3fn, DType::qint8}) {
    CHECK_FALSE(convertible(other, f32));
    CHECK_FALSE(convertible(f32, other));
  }
}

TEST_CASE("float16 -> float32 is exact, NaN is quieted, sign and payload kept") {
  for (std::uint16_t h : all_16bit()) {
    const auto out = one<std::uint32_t>(f16, f32, h);
    if (f16_is_nan(h)) {
      CHECK(out == ((std::uint32_t{h & 0x8000u} << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13)));
    } else {
      CHECK(static_cast<double>(f32_value(out)) == f16_value(h));
      CHECK(std::signbit(f32_value(out)) == ((h & 0x8000) != 0));
    }
  }
}

TEST_CASE("bfloat16 -> float32 is a shift, signalling NaNs included") {
  for (std::uint16_t b : all_16bit()) {
    CHECK(one<std::uint32_t>(bf16, f32, b) == std::uint32_t{b} << 16);
  }
}

TEST_CASE("float32 -> float16 and bfloat16: round trips, ties to even, overflow, NaN") {
  // For every pair of neighbours a < b of the target (same sign, magnitudes increasing), the
  // float32 midpoint goes to the even one and the floats just inside it to the nearer.
  struct Target {
    DType dtype;
    std::uint16_t max_finite;  // magnitude bits
    std::uint16_t inf;
    int shift;  // float32 bits = target bits << shift (bfloat16), or via value
  };
  for (Target t : {Target{f16, 0x7bff, 0x7c00, 0}, Target{bf16, 0x7f7f, 0x7f80, 16}}) {
    CAPTURE(info(t.dtype).name);
    auto widen = [&](std::uint16_t bits) {
      return t.shift != 0 ? f32_value(std::uint32_t{bits} << 16)
                          : static_cast<float>(f16_value(bits));
    };
    for (std::uint16_t sign : {std::uint16_t{0}, std::uint16_t{0x8000}}) {
      for (std::uint32_t m = 0; m <= t.max_finite; ++m) {
        const auto a = static_cast<std::uint16_t>(sign | m);
        const float fa = widen(a);
        CHECK(one<std::uint16_t>(f32, t.dtype, f32_bits(fa)) == a);
        // The next magnitude: its neighbour, or 2^16 / 2^128 past the largest finite value.
        const auto b = static_cast<std::uint16_t>(a + 1);
        const double vb = m == t.max_finite ? std::ldexp(fa < 0 ? -1.0 : 1.0, t.shift ? 128 : 16)
                                            : static_cast<double>(widen(b));
        const auto mid = static_cast<float>((static_cast<double>(fa) + vb) / 2);
        REQUIRE(static_cast<double>(mid) == (static_cast<double>(fa) + vb) / 2);  // exact
        const std::uint16_t even = (a & 1) == 0 ? a : b;  // b past max_finite is inf: even
        CHECK(one<std::uint16_t>(f32, t.dtype, f32_bits(mid)) == even);
        CHECK(one<std::uint16_t>(f32, t.dtype, f32_bits(mid) - 1) == a);
        CHECK(one<std::uint16_t>(f32, t.dtype, f32_bits(mid) + 1) == b);
      }
      const float inf = sign != 0 ? -INFINITY : INFINITY;
      CHECK(one<std::uint16_t>(f32, t.dtype, f32_bits(inf)) == (sign | t.inf));
      const float max = std::numeric_limits<float>::max();
      CHECK(one<std::uint16_t>(f32, t.dtype, f32_bits(sign != 0 ? -max : max)) == (sign | t.inf));
    }
  }
  // NaN: torch drops the payload for float16, and gives 0xffff for bfloat16 whatever the sign.
  for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fc01234u, 0x7fffffffu}) {
    CHECK(one<std::uint16_t>(f32, f16, nan) == 0x7e00);
    CHECK(one<std::uint16_t>(f32, f16, nan | 0x80000000u) == 0xfe00);
    CHECK(one<std::uint16_t>(f32, bf16, nan) == 0xffff);
    CHECK(one<std::uint16_t>(f32, bf16, nan | 0x80000000u) == 0xffff);
  }
}

TEST_CASE("float64 -> float32 rounds as the hardware's correctly rounded conversion") {
  for (std::uint64_t d : f64_patterns(1 << 16)) {
    const double v = std::bit_cast<double>(d);
    const auto out = one<std::uint32_t>(f64, f32, d);
    if (std::isnan(v)) {
      CHECK(out == (static_cast<std::uint32_t>((d >> 32) & 0x80000000u) | 0x7fc00000u |
                    static_cast<std::uint32_t>((d >> 29) & 0x7fffffu)));
    } else {
      CHECK(out == f32_bits(static_cast<float>(v)));
    }
  }
  // Midpoints between neighbouring floats, subnormal and normal: ties to even.
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const std::uint32_t a = rng() % 0x7f800000u;
    const double mid =
        (static_cast<double>(f32_value(a)) + static_cast<double>(f32_value(a + 1))) / 2;
    const std::uint32_t even = (a & 1) == 0 ? a : a + 1;
    CHECK(one<std::uint32_t>(f64, f32, f64_bits(mid)) == even);
    CHECK(one<std::uint32_t>(f64, f32, f64_bits(mid) - 1) == a);
    CHECK(one<std::uint32_t>(f64, f32, f64_bits(mid) + 1) == a + 1);
  }
}

TEST_CASE("float64 -> float16 and bfloat16 round twice, through float32, as torch does") {
  // Above the float16 tie 1 + 2^-11 by 2^-40: rounding once gives 1 + 2^-10 (0x3c01); float32
  // first loses the 2^-40, leaving a tie that goes to even, 1.0.
  CHECK(one<std::uint16_t>(f64, f16, f64_bits(1 + std::ldexp(1, -11) + std::ldexp(1, -40))) ==
        0x3c00);
  CHECK(one<std::uint16_t>(f64, bf16, f64_bits(1 + std::ldexp(1, -8) + std::ldexp(1, -40))) ==
        0x3f80);
  // Just above half the least float16 subnormal: 0 through float32, not 2^-24.
  CHECK(one<std::uint16_t>(f64, f16, f64_bits(std::ldexp(1, -25) + std::ldexp(1, -60))) == 0);
  for (std::uint64_t d : f64_patterns(1 << 16)) {
    const auto via = one<std::uint32_t>(f64, f32, d);
    CHECK(one<std::uint16_t>(f64, f16, d) == one<std::uint16_t>(f32, f16, via));
    CHECK(one<std::uint16_t>(f64, bf16, d) == one<std::uint16_t>(f32, bf16, via));
  }
  // NaN, whatever its sign and payload: sign | 0x7e00 for float16, 0xffff for bfloat16.
  for (std::uint64_t nan :
       {0x7ff8000000000000u, 0x7ff0000000000001u, 0x7ff4000000000000u, 0x7ff8123456789abcu}) {
    CHECK(one<std::uint16_t>(f64, f16, nan) == 0x7e00);
    CHECK(one<std::uint16_t>(f64, f16, nan | (1ull << 63)) == 0xfe00);
    CHECK(one<std::uint16_t>(f64, bf16, nan) == 0xffff);
    CHECK(one<std::uint16_t>(f64, bf16, nan | (1ull << 63)) == 0xffff);
  }
}

TEST_CASE("float16 <-> bfloat16 go through float32, NaN as torch writes it") {
  for (std::uint16_t h : all_16bit()) {
    const auto out = one<std::uint16_t>(f16, bf16, h);
    if (f16_is_nan(h)) {
      CHECK(out == 0x7fc0);  // torch's scalar NaN: no sign, no payload
    } else {
      CHECK(out == one<std::uint16_t>(f32, bf16, one<std::uint32_t>(f16, f32, h)));
    }
  }
  for (std::uint16_t b : all_16bit()) {
    const auto out = one<std::uint16_t>(bf16, f16, b);
    if (bf16_is_nan(b)) {
      CHECK(out == ((b & 0x8000) | 0x7e00));
    } else {
      CHECK(out == one<std::uint16_t>(f32, f16, std::uint32_t{b} << 16));
    }
  }
}

TEST_CASE("identity pairs copy the bits, signalling NaNs included") {
  for (DType d : targets) {
    const auto in = patterns_for(d);
    CHECK(run(detail::convert_best_path(), d, d, false, in) == in);
  }
}

TEST_CASE("a big-endian source gives the bytes of the same values little-endian") {
  for (DType from : sources) {
    const auto in = patterns_for(from);
    const auto swapped = reversed_elements(in, info(from).element_size);
    for (DType to : targets) {
      CAPTURE(info(from).name);
      CAPTURE(info(to).name);
      for (ConvertPath path : {ConvertPath::scalar, ConvertPath::avx2}) {
        if (!detail::convert_path_available(path)) continue;
        CHECK(run(path, from, to, true, swapped) == run(path, from, to, false, in));
      }
    }
  }
}

TEST_CASE("the AVX2 path gives the scalar path's bits, for every pair and every 16-bit input") {
  // On a CPU without AVX2 + F16C there is nothing to compare; this machine is expected to have it.
  if (!detail::convert_path_available(ConvertPath::avx2)) {
    MESSAGE("no AVX2 + F16C on this CPU: only the scalar path runs");
    return;
  }
  CHECK(detail::convert_best_path() == ConvertPath::avx2);
  for (DType from : sources) {
    const auto in = patterns_for(from);
    const std::size_t in_size = info(from).element_size;
    for (DType to : targets) {
      CAPTURE(info(from).name);
      CAPTURE(info(to).name);
      for (bool big : {false, true}) {
        CAPTURE(big);
        CHECK(run(ConvertPath::avx2, from, to, big, in) ==
              run(ConvertPath::scalar, from, to, big, in));
      }
      // Unaligned buffers and every remainder of the 8-element steps.
      for (std::size_t count = 1; count <= 40; ++count) {
        std::vector<std::byte> src(1 + count * in_size);
        std::memcpy(src.data() + 1, in.data() + 4096 * in_size, count * in_size);
        std::vector<std::byte> a(3 + count * info(to).element_size);
        std::vector<std::byte> b(a.size());
        detail::convert_with(ConvertPath::avx2, from, to, false, src.data() + 1, a.data() + 3,
                             count);
        detail::convert_with(ConvertPath::scalar, from, to, false, src.data() + 1, b.data() + 3,
                             count);
        CHECK(a == b);
      }
    }
  }
}

TEST_CASE("every float32 input: AVX2 == scalar (slow, run with --no-skip)" * doctest::skip()) {
  REQUIRE(detail::convert_path_available(ConvertPath::avx2));
  constexpr std::size_t block = 1 << 20;
  std::vector<std::uint32_t> in(block);
  std::vector<std::byte> a(block * 4), b(block * 4);
  for (std::uint64_t start = 0; start < (1ull << 32); start += block) {
    for (std::size_t i = 0; i < block; ++i) in[i] = static_cast<std::uint32_t>(start + i);
    const auto* src = reinterpret_cast<const std::byte*>(in.data());
    for (DType to : {f16, bf16}) {
      detail::convert_with(ConvertPath::avx2, f32, to, false, src, a.data(), block);
      detail::convert_with(ConvertPath::scalar, f32, to, false, src, b.data(), block);
      if (std::memcmp(a.data(), b.data(), block * 2) != 0) {
        FAIL("AVX2 and scalar differ in block starting at " << start << " to " << info(to).name);
      }
    }
  }
}

TEST_CASE("convert_window: the whole source elements a converted range needs") {
  auto w = convert_window(f32, f16, 3, 4);  // converted bytes [3, 7): elements 1..3
  CHECK(w.first == 1);
  CHECK(w.count == 3);
  CHECK(w.source_offset == 4);
  CHECK(w.source_length == 12);
  CHECK(w.skip == 1);
  w = convert_window(f16, f32, 8, 8);  // aligned: elements 2 and 3
  CHECK(w.first == 2);
  CHECK(w.count == 2);
  CHECK(w.source_offset == 4);
  CHECK(w.source_length == 4);
  CHECK(w.skip == 0);
  w = convert_window(f64, bf16, 5, 0);
  CHECK(w.count == 0);
  CHECK(w.source_length == 0);
  CHECK(converted_size(f64, bf16, 800) == 200);
  CHECK(converted_size(f16, f32, 6) == 12);
}

TEST_CASE("read_converted: every range of a tensor equals the slice of its whole conversion") {
  std::mt19937 rng(3);
  for (DType from : sources) {
    for (DType to : targets) {
      CAPTURE(info(from).name);
      CAPTURE(info(to).name);
      const std::size_t count = 11;
      std::vector<std::byte> source(count * info(from).element_size);
      for (auto& byte : source) byte = static_cast<std::byte>(rng());
      for (bool big : {false, true}) {
        std::vector<std::byte> whole(count * info(to).element_size);
        convert(from, to, big, source.data(), whole.data(), count);
        for (std::size_t offset = 0; offset <= whole.size(); ++offset) {
          for (std::size_t length = 0; offset + length <= whole.size(); ++length) {
            std::vector<std::byte> out(length);
            read_converted(from, to, big, offset, out,
                           [&](std::uint64_t at, std::span<std::byte> into) {
                             REQUIRE(at + into.size() <= source.size());
                             std::memcpy(into.data(), source.data() + at, into.size());
                           });
            CHECK(std::equal(out.begin(), out.end(),
                             whole.begin() + static_cast<std::ptrdiff_t>(offset)));
          }
        }
      }
    }
  }
}

TEST_CASE("read_converted streams a large tensor through the bounded staging buffer") {
  const std::size_t count = 3 * convert_staging_bytes / 8 + 5;  // float64: 3 buffers and a bit
  std::vector<double> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<double>(i) * 0.37 - 1000.0;
  const auto source = bytes_of(values);
  std::vector<std::byte> whole(count * 2);
  convert(f64, bf16, false, source.data(), whole.data(), count);
  std::vector<std::byte> out(whole.size() - 2);
  std::size_t calls = 0;
  std::size_t largest = 0;
  read_converted(f64, bf16, false, 1, out, [&](std::uint64_t at, std::span<std::byte> into) {
    ++calls;
    largest = std::max(largest, into.size());
    CHECK(into.data() >= convert_staging().data());
    CHECK(into.data() + into.size() <= convert_staging().data() + convert_staging_bytes);
    std::memcpy(into.data(), source.data() + at, into.size());
  });
  CHECK(std::equal(out.begin(), out.end(), whole.begin() + 1));
  CHECK(largest == convert_staging_bytes);
  // A partial first element, 3 full buffers (the last one short), a partial last element.
  CHECK(calls == 1 + 4 + 1);
}

TEST_CASE("convert_staging: one aligned buffer per thread, the same on every call") {
  std::byte* mine = convert_staging().data();
  CHECK(reinterpret_cast<std::uintptr_t>(mine) % 64 == 0);
  CHECK(convert_staging().data() == mine);
  std::byte* other = nullptr;
  std::thread([&] { other = convert_staging().data(); }).join();
  CHECK(other != nullptr);
  CHECK(other != mine);
}

TEST_CASE("stored_convertible: what a reader may store a tensor as, and integers to float32") {
  for (DType from : sources) {
    for (DType to : targets) CHECK(stored_convertible(from, to));
  }
  for (DType from : {DType::int8, DType::int16, DType::int32, DType::int64, DType::uint8,
                     DType::uint16, DType::uint32, DType::uint64, DType::boolean}) {
    CHECK(stored_convertible(from, f32));
    CHECK_FALSE(stored_convertible(from, bf16));  // torch's .float() only
    CHECK_FALSE(convertible(from, f32));          // -o dtype never converts them
  }
  for (DType other : {DType::complex64, DType::float8_e4m3fn, DType::qint8, DType::bits8}) {
    CHECK_FALSE(stored_convertible(other, f32));
  }
}

TEST_CASE("integers and bool to float32 as torch's .float(): rounded to nearest even past 2^24") {
  auto to_f32 = [](DType from, const std::vector<std::byte>& in, bool big = false) {
    const std::size_t n = in.size() / info(from).element_size;
    std::vector<float> out(n, -1.0f);
    for (ConvertPath path : {ConvertPath::scalar, ConvertPath::avx2}) {
      if (!detail::convert_path_available(path)) continue;
      detail::convert_with(path, from, f32, big, in.data(),
                           reinterpret_cast<std::byte*>(out.data()), n);
    }
    return out;
  };
  const std::vector<std::int64_t> i64 = {0,
                                         -7,
                                         (1ll << 24) + 1,  // a tie: to even, 2^24
                                         (1ll << 24) + 3,  // a tie: to even, 2^24 + 4
                                         std::numeric_limits<std::int64_t>::min(),
                                         std::numeric_limits<std::int64_t>::max()};
  CHECK(to_f32(DType::int64, bytes_of(i64)) ==
        std::vector<float>{0.0f, -7.0f, 16777216.0f, 16777220.0f, -9223372036854775808.0f,
                           9223372036854775808.0f});
  CHECK(to_f32(DType::int64, reversed_elements(bytes_of(i64), 8), true) ==
        to_f32(DType::int64, bytes_of(i64)));
  CHECK(to_f32(DType::uint64, bytes_of(std::vector<std::uint64_t>{~0ull})) ==
        std::vector<float>{18446744073709551616.0f});
  CHECK(to_f32(DType::int8, bytes_of(std::vector<std::int8_t>{-128, 127})) ==
        std::vector<float>{-128.0f, 127.0f});
  CHECK(to_f32(DType::uint8, bytes_of(std::vector<std::uint8_t>{255})) == std::vector<float>{255});
  CHECK(to_f32(DType::int16, reversed_elements(bytes_of(std::vector<std::int16_t>{-300}), 2),
               true) == std::vector<float>{-300.0f});
  CHECK(to_f32(DType::int32, bytes_of(std::vector<std::int32_t>{(1 << 30) + 64, (1 << 30) + 65})) ==
        std::vector<float>{1073741824.0f, 1073741952.0f});
  CHECK(to_f32(DType::uint16, bytes_of(std::vector<std::uint16_t>{65535})) ==
        std::vector<float>{65535.0f});
  CHECK(to_f32(DType::uint32, bytes_of(std::vector<std::uint32_t>{4294967295u})) ==
        std::vector<float>{4294967296.0f});
  CHECK(to_f32(DType::boolean, bytes_of(std::vector<std::uint8_t>{0, 1, 2})) ==
        std::vector<float>{0.0f, 1.0f, 1.0f});
}

TEST_CASE("a conversion through a dtype rounds at each step, as x.float().to(to) does") {
  // A float16 NaN through float32 to bfloat16: quieted (payload kept) by the first step, then
  // torch's 0xffff of a float32 NaN, where float16 -> bfloat16 direct gives 0x7fc0.
  const std::uint16_t nan = 0x7d01;
  std::uint16_t out = 0;
  Conversion{f16, bf16, f32, false}.run(reinterpret_cast<const std::byte*>(&nan),
                                        reinterpret_cast<std::byte*>(&out), 1);
  CHECK(out == 0xffff);
  CHECK(one<std::uint16_t>(f16, bf16, nan) == 0x7fc0);
  // int64 2^24 + 1 through float32 (2^24) to float16: inf; 2049 to bfloat16 through float32.
  const std::vector<std::int64_t> big = {(1ll << 24) + 1, 2049, -3};
  std::vector<std::uint16_t> halves(3), bhalves(3);
  Conversion{DType::int64, f16, f32, false}.run(bytes_of(big).data(),
                                                reinterpret_cast<std::byte*>(halves.data()), 3);
  CHECK(halves == std::vector<std::uint16_t>{0x7c00, 0x6800, 0xc200});  // 2049: a tie, to 2048
  Conversion{DType::int64, bf16, f32, false}.run(bytes_of(big).data(),
                                                 reinterpret_cast<std::byte*>(bhalves.data()), 3);
  CHECK(bhalves == std::vector<std::uint16_t>{0x4b80, 0x4500, 0xc040});
  // Many elements: through the chunked buffer (16 KiB of float32 at a time).
  std::vector<std::int64_t> many(10000);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::int64_t>(i) - 5000;
  std::vector<std::uint16_t> got(many.size());
  Conversion{DType::int64, bf16, f32, false}.run(
      bytes_of(many).data(), reinterpret_cast<std::byte*>(got.data()), many.size());
  for (std::size_t i = 0; i < many.size(); ++i) {
    const float f = static_cast<float>(many[i]);
    REQUIRE(got[i] == one<std::uint16_t>(f32, bf16, f32_bits(f)));
  }
}

TEST_SUITE_END();
