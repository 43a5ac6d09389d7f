// SPDX-License-Identifier: MIT
// Unit tests of the remote read path's pure parts: HTTP status lines, header fields,
// Content-Range, Content-Length and Retry-After; and the block cache: its bound, what it never
// evicts, and readers waiting for blocks from many threads.
#include <ckptfs/source/block_cache.hpp>
#include <ckptfs/source/http_headers.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <thread>
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
