// SPDX-License-Identifier: MIT
// RecordChecks: zip records checked against their CRC-32 as a source's bytes are read: in order,
// out of order, a header left unread, far reads ignored, records located on first use, and a
// corrupt record failing the read that completes it and every read after.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/record_checks.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace ckptfs;

namespace {

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 random(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(random());
  return s;
}

// A file of three records with gaps between them (their local headers, say).
struct Layout {
  std::string a = random_bytes(1000, 1);
  std::string b = random_bytes(600000, 2);
  std::string c = random_bytes(300000, 3);
  std::string bytes;
  std::uint64_t at_a = 0, at_b = 0, at_c = 0;
  Layout() {
    bytes = "HEADER..";
    at_a = bytes.size();
    bytes += a + "local header";
    at_b = bytes.size();
    bytes += b + "local header";
    at_c = bytes.size();
    bytes += c + "central directory";
  }
  std::vector<CheckedRecord> records(bool corrupt_b) const {
    return {{"a", crc32(a), a.size(), at_a, nullptr},
            {"b", crc32(b) ^ (corrupt_b ? 1u : 0u), b.size(), at_b, nullptr},
            {"c", crc32(c), c.size(), at_c, nullptr}};
  }
};

void read(const ByteSource& s, std::uint64_t offset, std::size_t length) {
  std::vector<std::byte> out(length);
  s.read(offset, out);
}

}  // namespace

TEST_SUITE_BEGIN("record_checks");

TEST_CASE("RecordChecks: read in order, a record is sound, a corrupt one fails its last read") {
  const Layout f;
  MemorySource source(f.bytes, "f.pth");
  auto checks = std::make_shared<RecordChecks>(f.records(true));
  source.check_records(checks);
  read(source, f.at_a, f.a.size());
  CHECK(checks->verdict(0) == RecordChecks::Verdict::sound);
  // b in chunks of 100,000 bytes: each read returns its bytes until the one that leaves at most
  // max_filled of it unread, which the check then reads itself: that read fails.
  const std::uint64_t chunk = 100000;
  std::uint64_t done = 0;
  for (; f.b.size() - done - chunk > RecordChecks::max_filled; done += chunk) {
    read(source, f.at_b + done, chunk);
  }
  CHECK(checks->verdict(1) == RecordChecks::Verdict::unknown);
  CHECK_THROWS_WITH_AS(read(source, f.at_b + done, chunk),
                       doctest::Contains("record \"b\": its 600000 bytes do not match"), Error);
  CHECK(checks->verdict(1) == RecordChecks::Verdict::corrupt);
  // Found corrupt: no read of its bytes returns them again, wherever it starts; a read across it
  // and another record fails too; the other records still read.
  CHECK_THROWS_AS(read(source, f.at_b + 5, 10), Error);
  CHECK_THROWS_AS(read(source, f.at_a, f.at_b + 1 - f.at_a), Error);
  CHECK_THROWS_AS((void)source.needs_read(f.at_b, 1), Error);
  read(source, f.at_a, 10);
  read(source, f.at_c, 10);
  // Bytes outside every record (headers, the central directory) are never checked.
  read(source, 0, 8);
  read(source, f.bytes.size() - 17, 17);
}

TEST_CASE("RecordChecks: reads out of order, as readahead sends them, join") {
  const Layout f;
  MemorySource source(f.bytes);
  auto checks = std::make_shared<RecordChecks>(f.records(false));
  source.check_records(checks);
  // 128 KiB reads of b, each pair swapped, overlapping their neighbours here and there.
  const std::uint64_t chunk = 131072;
  for (std::uint64_t k = 0; k * chunk < f.b.size(); k += 2) {
    for (const std::uint64_t j : {k + 1, k}) {
      const std::uint64_t from = j * chunk;
      if (from >= f.b.size()) continue;
      const std::uint64_t to = std::min<std::uint64_t>(f.b.size(), from + chunk + 100);
      read(source, f.at_b + from, to - from);
    }
  }
  CHECK(checks->verdict(1) == RecordChecks::Verdict::sound);
  // A corrupt record read backwards, chunk by chunk, ends corrupt too.
  MemorySource again(f.bytes);
  auto corrupt = std::make_shared<RecordChecks>(f.records(true));
  again.check_records(corrupt);
  bool failed = false;
  for (std::uint64_t end = f.b.size(); end > 0;) {
    const std::uint64_t from = end > 100000 ? end - 100000 : 0;
    try {
      read(again, f.at_b + from, end - from);
    } catch (const Error&) {
      failed = true;
    }
    end = from;
  }
  CHECK(failed);
  CHECK(corrupt->verdict(1) == RecordChecks::Verdict::corrupt);
}

TEST_CASE("RecordChecks: what no read asks for is read by the check when it is little") {
  const Layout f;
  MemorySource source(f.bytes);
  auto checks = std::make_shared<RecordChecks>(f.records(true));
  source.check_records(checks);
  // c's first 64 KiB (an .npy header's place) never read; the rest read: the check reads them.
  const std::uint64_t header = 65536;
  for (std::uint64_t at = header; at < f.c.size(); at += 100000) {
    read(source, f.at_c + at, std::min<std::uint64_t>(100000, f.c.size() - at));
  }
  CHECK(checks->verdict(2) == RecordChecks::Verdict::sound);
  // A record read only at its start is not: more than max_filled is left.
  read(source, f.at_b, 1000);
  CHECK(checks->verdict(1) == RecordChecks::Verdict::unknown);
  // verify() reads the rest of it now, and says so.
  CHECK_THROWS_WITH_AS(source.verify(f.at_b + 10, 1), doctest::Contains("do not match"), Error);
  CHECK_NOTHROW(source.verify(f.at_c, f.c.size()));
  CHECK_NOTHROW(source.verify(0, 8));  // no record there
}

TEST_CASE("RecordChecks: needs_read says where a read would carry a check on") {
  const std::uint64_t mib = 1 << 20;
  MemorySource source(std::string(4096, 'x'));
  // A record far larger than the file: needs_read() only looks, never reads.
  auto checks =
      std::make_shared<RecordChecks>(std::vector<CheckedRecord>{{"big", 0, 512 * mib, 0, nullptr}});
  source.check_records(checks);
  CHECK(source.needs_read(0, 4096));
  CHECK(source.needs_read(RecordChecks::reach - 10, 4096));
  CHECK_FALSE(source.needs_read(RecordChecks::reach + 4096, 4096));  // far past the checked start
  MemorySource unchecked("abc");
  CHECK_FALSE(unchecked.needs_read(0, 3));
}

TEST_CASE("RecordChecks: a record located on first use is checked once it is located") {
  const Layout f;
  MemorySource source(f.bytes);
  std::optional<std::uint64_t> where;  // a remote zip's record: its local header read later
  std::vector<CheckedRecord> records{
      {"b", crc32(f.b) ^ 1, f.b.size(), f.at_b - 12, [&] { return where; }}};
  auto checks = std::make_shared<RecordChecks>(std::move(records));
  source.check_records(checks);
  read(source, f.at_b - 12, f.b.size() + 12);  // before it is located: its bytes are not known
  CHECK(checks->verdict(0) == RecordChecks::Verdict::unknown);
  where = f.at_b;
  CHECK_THROWS_AS(read(source, f.at_b, f.b.size()), Error);
  CHECK(checks->verdict(0) == RecordChecks::Verdict::corrupt);
}

TEST_CASE("RecordChecks: scattered reads keep a bounded number of ranges, and nothing wrong") {
  const Layout f;
  MemorySource source(f.bytes);
  auto checks = std::make_shared<RecordChecks>(f.records(false));
  source.check_records(checks);
  std::mt19937_64 random(4);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t at = random() % f.b.size();
    read(source, f.at_b + at, std::min<std::uint64_t>(1 + random() % 3000, f.b.size() - at));
  }
  CHECK(checks->verdict(1) != RecordChecks::Verdict::corrupt);
  read(source, f.at_b, f.b.size());  // then read whole: sound
  CHECK(checks->verdict(1) == RecordChecks::Verdict::sound);
  // An empty record: sound when its CRC is 0, corrupt otherwise, without a read.
  RecordChecks empty({{"e", 0, 0, 5, nullptr}, {"f", 7, 0, 9, nullptr}});
  CHECK(empty.verdict(0) == RecordChecks::Verdict::sound);
  CHECK(empty.verdict(1) == RecordChecks::Verdict::corrupt);
}

TEST_SUITE_END();
