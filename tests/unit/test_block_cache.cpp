// SPDX-License-Identifier: MIT
// Unit tests of the remote read path's pure parts: HTTP status lines, header fields,
// Content-Range, Content-Length and Retry-After, the rule for answers other than the range asked;
// and the block cache: its bound, what it never evicts, and readers waiting for blocks from many
// threads.
#include <ckptfs/source/block_cache.hpp>
#include <ckptfs/source/http_headers.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <variant>
#include <vector>

using namespace ckptfs;
using Clock = std::chrono::steady_clock;

TEST_SUITE_BEGIN("block_cache");

TEST_CASE("parse_status_line()") {
  CHECK(http::parse_status_line("HTTP/1.1 206 Partial Content\r\n") == 206);
  CHECK(http::parse_status_line("HTTP/2 200 \r\n") == 200);
  CHECK(http::parse_status_line("HTTP/1.0 404\r\n") == 404);
  CHECK_FALSE(http::parse_status_line("Content-Range: bytes 0-1/2\r\n"));
  CHECK_FALSE(http::parse_status_line("HTTP/1.1 2066 x\r\n"));
  CHECK_FALSE(http::parse_status_line("HTTP/1.1 99 x\r\n"));
  CHECK_FALSE(http::parse_status_line("HTTP/1.1 20x\r\n"));
  CHECK_FALSE(http::parse_status_line("\r\n"));
}

TEST_CASE("parse_header_line()") {
  auto f = http::parse_header_line("ETag:  \"abc\"\r\n");
  REQUIRE(f);
  CHECK(f->name == "etag");
  CHECK(f->value == "\"abc\"");
  auto g = http::parse_header_line("Content-RANGE:bytes 0-9/10");
  REQUIRE(g);
  CHECK(g->name == "content-range");
  CHECK(g->value == "bytes 0-9/10");
  CHECK_FALSE(http::parse_header_line("\r\n"));
  CHECK_FALSE(http::parse_header_line(": no name"));
}

TEST_CASE("parse_content_range(): only well-formed, consistent ranges") {
  auto r = http::parse_content_range("bytes 0-262143/1610634173");
  REQUIRE(r);
  CHECK(*r->first == 0);
  CHECK(*r->last == 262143);
  CHECK(*r->total == 1610634173);
  auto unknown_total = http::parse_content_range("bytes 5-9/*");
  REQUIRE(unknown_total);
  CHECK_FALSE(unknown_total->total);
  auto unsatisfied = http::parse_content_range("bytes */4096");
  REQUIRE(unsatisfied);
  CHECK_FALSE(unsatisfied->first);
  CHECK(*unsatisfied->total == 4096);
  CHECK_FALSE(http::parse_content_range("bytes 9-5/10"));   // last before first
  CHECK_FALSE(http::parse_content_range("bytes 0-10/10"));  // past the end
  CHECK_FALSE(http::parse_content_range("bytes */*"));
  CHECK_FALSE(http::parse_content_range("items 0-1/2"));
  CHECK_FALSE(http::parse_content_range("bytes -1-5/10"));
  CHECK_FALSE(http::parse_content_range("bytes 0-18446744073709551616/1"));  // overflow
  CHECK_FALSE(http::parse_content_range("bytes 0-5"));
}

TEST_CASE("parse_retry_after(): seconds or a date") {
  CHECK(http::parse_retry_after("120", 1000, std::nullopt) == 120u);
  CHECK(http::parse_retry_after(" 3 ", 1000, std::nullopt) == 3u);
  CHECK(http::parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1000, 1030) == 30u);
  CHECK(http::parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 1000, 900) == 0u);
  CHECK_FALSE(http::parse_retry_after("soon", 1000, std::nullopt));
  CHECK_FALSE(http::parse_retry_after("-5", 1000, std::nullopt));
}

TEST_CASE("parse_content_length(): digits only, up to 2^64 - 1") {
  CHECK(http::parse_content_length("0") == 0u);
  CHECK(http::parse_content_length(" 4096 ") == 4096u);
  CHECK(http::parse_content_length("18446744073709551615") == 18446744073709551615u);
  CHECK_FALSE(http::parse_content_length("18446744073709551616"));  // 2^64: no wrap to 0
  CHECK_FALSE(http::parse_content_length("99999999999999999999999"));
  CHECK_FALSE(http::parse_content_length("-1"));  // strtoull: 2^64 - 1
  CHECK_FALSE(http::parse_content_length("+1"));
  CHECK_FALSE(http::parse_content_length("abc"));  // strtoull: 0
  CHECK_FALSE(http::parse_content_length(""));
  CHECK_FALSE(http::parse_content_length("1e3"));
  CHECK_FALSE(http::parse_content_length("12 34"));
  CHECK_FALSE(http::parse_content_length("0x10"));
}

namespace {

constexpr std::uint64_t block = 256 * 1024;

// judge_range()'s verdict as text: "take T of D, total N", or "refused: why".
std::string verdict(int status, std::optional<http::ContentRange> range,
                    std::optional<std::uint64_t> length, http::RangeRequest request) {
  auto v = http::judge_range(status, range, length, request, block);
  if (auto* why = std::get_if<std::string>(&v)) return "refused: " + *why;
  const auto& a = std::get<http::RangeAnswer>(v);
  return "take " + std::to_string(a.take) + " of " + std::to_string(a.declared) + ", total " +
         std::to_string(a.total);
}

http::ContentRange range(std::uint64_t first, std::uint64_t last, std::uint64_t total) {
  return {first, last, total};
}

}  // namespace

TEST_CASE("judge_range(): the bytes asked from the start of the body, never more") {
  const std::uint64_t size = 10'000'000;
  // Reads: exactly the range, or more of it (s3rver answers bytes=0-0 with all of it); the
  // rest of the body is never read.
  CHECK(verdict(206, range(block, 2 * block - 1, size), block, {block, block}) ==
        "take 262144 of 262144, total 10000000");
  CHECK(verdict(206, range(0, size - 1, size), size, {0, 1}) ==
        "take 1 of 10000000, total 10000000");
  CHECK(verdict(206, range(block, size - 1, size), std::nullopt, {block, block}) ==
        "take 262144 of 9737856, total 10000000");
  // Refused: another start, fewer bytes than asked, no or an unknown range.
  CHECK(verdict(206, range(0, 2 * block - 1, size), std::nullopt, {block, block}) ==
        "refused: the server answered bytes 0-524287 to a request for 262144-524287");
  CHECK(verdict(206, range(block, block + 9, size), std::nullopt, {block, block}) ==
        "refused: the server answered bytes 262144-262153 to a request for 262144-524287");
  CHECK(verdict(206, std::nullopt, 5, {0, 5}).starts_with("refused: a 206 answer without"));
  CHECK(verdict(206, http::ContentRange{0, 4, std::nullopt}, 5, {0, 5}) ==
        "refused: a 206 answer with an unknown size");
  // A 200 is the whole object from byte 0: the bytes asked of a request from 0, nothing else.
  CHECK(verdict(200, std::nullopt, size, {0, block}) == "take 262144 of 10000000, total 10000000");
  CHECK(verdict(200, std::nullopt, 5000, {0, 5000}) == "take 5000 of 5000, total 5000");
  CHECK(verdict(200, std::nullopt, size, {block, block})
            .starts_with("refused: the server answered 200 (the whole object) to a request for "
                         "bytes 262144-524287"));
  CHECK(verdict(200, std::nullopt, std::nullopt, {0, 1})
            .starts_with("refused: the server ignores Range requests (it answered 200 without"));
}

TEST_CASE("judge_range(): the probe's verdict is the same whether it asks a byte or a block") {
  // Each answer a server may give to the probe, and the verdict for a probe of one block (no
  // disk cache) and of one byte (a disk cache may hold block 0): the same acceptance, the same
  // size, the same message; what is taken is what was asked, up to the object's end (all of a
  // small object that a server ignoring ranges sends whole).
  struct Case {
    int status;
    std::optional<http::ContentRange> range;
    std::optional<std::uint64_t> length;
  };
  const std::uint64_t big = 10'000'000;
  const Case cases[] = {
      {206, range(0, block - 1, big), block},  // a block (to a one-byte probe: more)
      {206, range(0, big - 1, big), big},      // more than asked (s3rver and bytes=0-0)
      {206, range(0, 999, 1000), 1000},        // a small object, whole
      {200, std::nullopt, 1000},               // ignores ranges, a small object
      {200, std::nullopt, block},              // ignores ranges, one block exactly
      {200, std::nullopt, block + 1},          // ignores ranges, larger than a block
      {200, std::nullopt, big},                // ignores ranges, large
      {200, std::nullopt, std::nullopt},       // ignores ranges, no length
      {206, range(1, block, big), block},      // another start
  };
  for (const Case& c : cases) {
    CAPTURE(c.status);
    CAPTURE(c.length.value_or(0));
    const std::string by_block = verdict(c.status, c.range, c.length, {0, block, true});
    const std::string by_byte = verdict(c.status, c.range, c.length, {0, 1, true});
    CHECK(by_block.starts_with("refused") == by_byte.starts_with("refused"));
    if (by_block.starts_with("refused")) {
      // A 206 that starts elsewhere names the range asked, which differs; the rest is one text.
      if (c.status == 200) CHECK(by_block == by_byte);
    } else {
      CHECK(by_block.substr(by_block.find(", total")) == by_byte.substr(by_byte.find(", total")));
    }
  }
  CHECK(verdict(200, std::nullopt, 1000, {0, 1, true}) == "take 1000 of 1000, total 1000");
  CHECK(verdict(206, range(0, big - 1, big), big, {0, 1, true}) ==
        "take 1 of 10000000, total 10000000");
  CHECK(verdict(206, range(0, 999, 1000), 1000, {0, block, true}) ==
        "take 1000 of 1000, total 1000");
  CHECK(verdict(200, std::nullopt, block + 1, {0, 1, true}) ==
        "refused: the server ignores Range requests (it answered 200 with the whole object, "
        "262145 bytes): ckptfs reads remote objects by range");
  CHECK(verdict(200, std::nullopt, 0, {0, 1, true}) == "take 0 of 0, total 0");
}

TEST_CASE("Block: waiters see ready or failed once, or time out") {
  Block b(100);
  CHECK(b.length() == 100);
  CHECK(b.state() == Block::State::pending);
  CHECK(b.wait_until(Clock::now() + std::chrono::milliseconds(10)) == Block::State::pending);
  std::thread filler([&] {
    std::memset(b.data(), 7, b.length());
    b.set_ready();
  });
  CHECK(b.wait_until(Clock::now() + std::chrono::seconds(10)) == Block::State::ready);
  filler.join();
  CHECK(b.data()[99] == std::byte{7});
  b.set_failed(ExitCode::io, "too late");  // no effect once ready
  CHECK(b.state() == Block::State::ready);
  CHECK(b.error().empty());

  Block f(Block::pooled_length);
  f.set_failed(ExitCode::unreachable, "no server");
  CHECK(f.wait_until(Clock::now()) == Block::State::failed);
  CHECK(f.error_code() == ExitCode::unreachable);
  CHECK(f.error() == "no server");
  // When it failed: the remote source fails it again at once for a while after.
  CHECK(f.failed_at() <= Clock::now());
  CHECK(Clock::now() - f.failed_at() < std::chrono::seconds(10));
  CHECK(b.failed_at() == Clock::time_point{});  // never failed
}

TEST_CASE("BlockCache: bounded, least recently used first out, pending and held blocks stay") {
  constexpr std::size_t block = 64 * 1024;
  BlockCache cache(16 * 16 * block);  // 16 shards of 16 blocks
  std::vector<std::shared_ptr<Block>> held;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    auto [b, created] = cache.acquire({1, i}, block);
    CHECK(created);
    if (i < 8) {
      held.push_back(b);  // never ready, still held: never evicted
    } else {
      b->set_ready();
    }
  }
  CHECK(cache.resident_bytes() <= cache.capacity() + 16 * block);
  for (std::uint64_t i = 0; i < 8; ++i) {
    auto b = cache.find({1, i});
    REQUIRE(b);
    CHECK(b.get() == held[i].get());
  }
  // The most recent blocks are there; the oldest ready ones are gone.
  CHECK(cache.find({1, 999}));
  std::size_t early = 0;
  for (std::uint64_t i = 8; i < 100; ++i) early += cache.find({1, i}) ? 1 : 0;
  CHECK(early == 0);
  // acquire() of a cached key gives the same block, not a new one.
  auto [again, created] = cache.acquire({1, 999}, block);
  CHECK_FALSE(created);
  // erase() removes only the block it names.
  Block other(block);
  cache.erase({1, 999}, &other);
  CHECK(cache.find({1, 999}) == again);
  cache.erase({1, 999}, again.get());
  CHECK_FALSE(cache.find({1, 999}));
  // Other sources have their own keys.
  CHECK_FALSE(cache.find({2, 998}));
}

TEST_CASE("BlockCache: many threads, one filler per block, every reader sees its bytes") {
  constexpr std::size_t block = 4096;
  BlockCache cache(64 * block);
  std::atomic<int> wrong{0};
  std::atomic<int> fills{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2000; ++round) {
        const std::uint64_t index = static_cast<std::uint64_t>((round * 7 + t) % 200);
        auto [b, created] = cache.acquire({3, index}, block);
        if (created) {
          ++fills;
          std::memset(b->data(), static_cast<int>(index & 0xff), block);
          b->set_ready();
        }
        if (b->wait_until(Clock::now() + std::chrono::seconds(10)) != Block::State::ready ||
            b->data()[block - 1] != static_cast<std::byte>(index & 0xff)) {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(fills >= 200);
  CHECK(cache.resident_bytes() <= cache.capacity() + 16 * block);
}

TEST_SUITE_END();
