// SPDX-License-Identifier: MIT
// Tests of the ZIP plan and streaming writer: layout invariants, miniz's header bytes, ZIP64 past
// 4 GiB (on a sparse view of the plan, nothing written), and read-back through ZipArchive.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/format/zip/zip_writer.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using ckptfs::Error;
using ckptfs::ExitCode;
using ckptfs::MemorySource;
using ckptfs::ZipArchive;
using ckptfs::ZipPlan;
using ckptfs::ZipRecordSpec;
using ckptfs::ZipSegment;
using ckptfs::ZipSegmentKind;
using ckptfs::ZipStreamWriter;

TEST_SUITE_BEGIN("zip_writer");

namespace {

constexpr std::uint64_t gib = std::uint64_t{1} << 30;

std::uint64_t u16(std::string_view b, std::size_t at) {
  return static_cast<unsigned char>(b[at]) |
         static_cast<std::uint64_t>(static_cast<unsigned char>(b[at + 1])) << 8;
}
std::uint64_t u32(std::string_view b, std::size_t at) { return u16(b, at) | u16(b, at + 2) << 16; }
std::uint64_t u64(std::string_view b, std::size_t at) { return u32(b, at) | u32(b, at + 4) << 32; }

// A file made of the plan's fixed pieces, reading as zeros elsewhere: a multi-GiB archive
// whose payloads are holes, without a byte of them in memory.
class PlanSource final : public ckptfs::ByteSource {
 public:
  PlanSource(const ZipPlan& plan, const std::vector<std::uint32_t>& crcs) : size_(plan.size()) {
    for (const ZipSegment& s : plan.segments()) {
      if (s.kind == ZipSegmentKind::local_header) pieces_[s.offset] = plan.local_header(s.record);
      if (s.kind == ZipSegmentKind::data_descriptor) {
        pieces_[s.offset] = plan.data_descriptor(s.record, crcs[s.record]);
      }
      if (s.kind == ZipSegmentKind::trailer) pieces_[s.offset] = plan.trailer(crcs);
    }
  }
  std::uint64_t size() const override { return size_; }
  const std::string& name() const noexcept override { return name_; }

 protected:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override {
    std::memset(out.data(), 0, out.size());
    for (const auto& [start, bytes] : pieces_) {
      const std::uint64_t end = start + bytes.size();
      const std::uint64_t from = std::max(start, offset);
      const std::uint64_t to = std::min<std::uint64_t>(end, offset + out.size());
      if (from < to)
        std::memcpy(out.data() + (from - offset), bytes.data() + (from - start), to - from);
    }
  }

 private:
  std::uint64_t size_;
  std::string name_ = "plan";
  std::map<std::uint64_t, std::string> pieces_;
};

std::string random_payload(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(random());
  return out;
}

// The archive of `payloads` written through the streaming writer.
std::string stream(const ZipPlan& plan, const std::vector<std::string>& payloads) {
  std::string out;
  ZipStreamWriter writer(plan, [&](std::string_view b) { out += b; });
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    writer.begin_record(i);
    // In uneven pieces, as pack would read them.
    for (std::size_t at = 0; at < payloads[i].size(); at += 37) {
      writer.write(std::string_view(payloads[i]).substr(at, 37));
    }
    CHECK(writer.end_record() == ckptfs::crc32(payloads[i]));
  }
  writer.finish();
  CHECK(writer.offset() == plan.size());
  return out;
}

// Segments are in order, touch, and cover the file; every payload starts at the alignment.
void check_layout(const ZipPlan& plan, std::uint64_t alignment = 64) {
  std::uint64_t at = 0;
  for (const ZipSegment& s : plan.segments()) {
    CHECK(s.offset == at);
    CHECK(s.size > 0);
    if (s.kind == ZipSegmentKind::payload) CHECK(s.offset % alignment == 0);
    at += s.size;
  }
  CHECK(at == plan.size());
  for (std::size_t i = 0; i < plan.record_count(); ++i) {
    const auto& l = plan.layout(i);
    CHECK(l.data_offset % alignment == 0);
    CHECK(l.data_offset == l.header_offset + l.header_size);
    CHECK(plan.local_header(i).size() == l.header_size);
    CHECK(plan.data_descriptor(i, 0).size() == l.descriptor_size);
    CHECK(l.descriptor_size == (l.size == 0 ? 0u : l.zip64_local ? 24u : 16u));
  }
  const std::vector<std::uint32_t> crcs(plan.record_count(), 0);
  CHECK(plan.trailer(crcs).size() == plan.size() - plan.trailer_offset());
}

}  // namespace

TEST_CASE("torch's layout: payloads at multiples of 64, read back by ZipArchive with their CRCs") {
  std::vector<ZipRecordSpec> specs;
  std::vector<std::string> payloads;
  const std::size_t sizes[] = {154, 0, 1, 63, 64, 65, 1000, 2, 0};
  for (std::size_t i = 0; i < std::size(sizes); ++i) {
    // Names of every length modulo 64, so that every padding occurs.
    specs.push_back({fmt::format("archive/data/{}{}", i, std::string(i * 7, 'n')), sizes[i]});
    payloads.push_back(random_payload(sizes[i], i));
  }
  const ZipPlan plan(specs);
  check_layout(plan);
  const std::string bytes = stream(plan, payloads);
  REQUIRE(bytes.size() == plan.size());

  const MemorySource source(bytes);
  const ZipArchive archive(source);
  REQUIRE(archive.entries().size() == specs.size());
  CHECK(archive.central_directory_offset() == plan.trailer_offset());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& e = archive.entries()[i];
    CAPTURE(e.name);
    CHECK(e.name == specs[i].name);
    CHECK(e.size == sizes[i]);
    CHECK(e.stored());
    CHECK(e.header_offset == plan.layout(i).header_offset);
    CHECK(e.data_offset == plan.layout(i).data_offset);
    CHECK(e.crc32 == ckptfs::crc32(payloads[i]));
    CHECK(e.flags == (sizes[i] == 0 ? 0x0800 : 0x0808));
    CHECK(bytes.substr(e.data_offset, e.size) == payloads[i]);
  }
}

TEST_CASE("miniz's header bytes, field by field") {
  const ZipPlan plan({{"t/data.pkl", 154}, {"t/data/0", 0}});
  const std::string h = plan.local_header(0);
  CHECK(u32(h, 0) == 0x04034b50);
  CHECK(u16(h, 4) == 0);       // version needed
  CHECK(u16(h, 6) == 0x0808);  // descriptor + UTF-8
  CHECK(u16(h, 8) == 0);       // stored
  CHECK(u32(h, 10) == 0);      // time, date
  CHECK(u32(h, 14) == 0);      // CRC
  CHECK(u64(h, 18) == 0);      // sizes
  CHECK(u16(h, 26) == 10);
  CHECK(h.substr(30, 10) == "t/data.pkl");
  // 30 + 10 + 4 = 44: 20 bytes of 'Z' reach 64.
  CHECK(u16(h, 28) == 24);
  CHECK(h.substr(40, 4) == std::string("FB\x14\x00", 4));
  CHECK(h.substr(44) == std::string(20, 'Z'));
  CHECK(u16(plan.local_header(1), 6) == 0x0800);  // empty: no descriptor

  const std::string d = plan.data_descriptor(0, 0x275373c7);
  CHECK(d == std::string("PK\x07\x08\xc7\x73\x53\x27\x9a\x00\x00\x00\x9a\x00\x00\x00", 16));
  CHECK(plan.data_descriptor(1, 0).empty());

  const std::uint32_t crcs[] = {0x275373c7, 0};
  const std::string t = plan.trailer(crcs);
  CHECK(u32(t, 0) == 0x02014b50);
  CHECK(u16(t, 4) == 0);  // made by: miniz leaves it 0
  CHECK(u16(t, 8) == 0x0808);
  CHECK(u32(t, 16) == 0x275373c7);
  CHECK(u32(t, 20) == 154);
  CHECK(u32(t, 24) == 154);
  CHECK(u16(t, 30) == 0);  // no extra below 4 GiB
  CHECK(u32(t, 42) == 0);  // header offset
  const std::size_t end64 = t.size() - 22 - 20 - 56;
  CHECK(u32(t, end64) == 0x06064b50);
  CHECK(u64(t, end64 + 4) == 44);
  CHECK(u16(t, end64 + 12) == 0x031e);
  CHECK(u16(t, end64 + 14) == 45);
  CHECK(u64(t, end64 + 24) == 2);
  CHECK(u64(t, end64 + 40) == plan.central_directory_size());
  CHECK(u64(t, end64 + 48) == plan.trailer_offset());
  CHECK(u32(t, end64 + 56) == 0x07064b50);
  CHECK(u64(t, end64 + 64) == plan.trailer_offset() + plan.central_directory_size());
  CHECK(u32(t, end64 + 72) == 1);
  CHECK(u32(t, end64 + 76) == 0x06054b50);
  CHECK(u16(t, end64 + 86) == 2);
  CHECK(u32(t, end64 + 88) == plan.central_directory_size());
  CHECK(u32(t, end64 + 92) == plan.trailer_offset());
}

TEST_CASE("other alignments: payloads at multiples of them, an empty 'FB' field at 1") {
  for (const std::uint32_t alignment : {1u, 2u, 4096u, 32768u}) {
    CAPTURE(alignment);
    const ZipPlan plan({{"a/data.pkl", 10}, {"a/data/0", 5000}, {"a/version", 2}}, {alignment});
    check_layout(plan, alignment);
    if (alignment == 1) CHECK(plan.local_header(0).substr(40) == std::string("FB\x00\x00", 4));
  }
  for (const std::uint32_t bad : {0u, 3u, 65536u}) {
    CHECK_THROWS_AS(ZipPlan({{"a", 1}}, {bad}), Error);
  }
}

TEST_CASE("ZIP64: a payload of 4 GiB - 1 or more, and headers from 4 GiB - 1 on") {
  // Record 1 starts exactly at 0xFFFFFFFF: 64 + size + 16 = 0xFFFFFFFF.
  const std::uint64_t first = 0xffffffffull - 80;
  const std::vector<ZipRecordSpec> specs = {{"a", first},
                                            {"b/x", 5},
                                            {"c/big", 5 * gib},
                                            {"d/tail", 100},
                                            {"e/empty", 0},
                                            {"f/exact", 0xffffffffull},
                                            {"g/under", 0xfffffffeull}};
  const ZipPlan plan(specs);
  check_layout(plan);
  CHECK(plan.layout(1).header_offset == 0xffffffffull);
  CHECK_FALSE(plan.layout(0).zip64_local);
  CHECK(plan.layout(1).zip64_local);  // by its offset
  CHECK(plan.layout(2).zip64_local);  // by both
  CHECK(plan.layout(5).zip64_local);
  CHECK(plan.layout(6).zip64_local);  // past 4 GiB: by its offset

  // The local zip64 field: (size, 0) for a big payload, then the offset when it is past.
  const std::string big = plan.local_header(2);
  const std::size_t extra = 30 + 5;
  CHECK(u16(big, extra) == 1);
  CHECK(u16(big, extra + 2) == 24);
  CHECK(u64(big, extra + 4) == 5 * gib);
  CHECK(u64(big, extra + 12) == 0);
  CHECK(u64(big, extra + 20) == plan.layout(2).header_offset);
  CHECK(big.substr(extra + 28, 2) == "FB");
  const std::string by_offset = plan.local_header(1);
  CHECK(u16(by_offset, 30 + 3 + 2) == 8);
  CHECK(u64(by_offset, 30 + 3 + 4) == 0xffffffffull);
  // 64-bit descriptors.
  const std::string d = plan.data_descriptor(2, 0xabcdef01);
  CHECK(d.size() == 24);
  CHECK(u64(d, 8) == 5 * gib);
  CHECK(u64(d, 16) == 5 * gib);

  // Read back through ZipArchive from a sparse view of the plan: sizes and offsets from the
  // central directory's zip64 fields, and the classic fields saturated.
  std::vector<std::uint32_t> crcs;
  for (const ZipRecordSpec& s : specs) crcs.push_back(ckptfs::crc32_zeros(0, s.size));
  const PlanSource source(plan, crcs);
  const ZipArchive archive(source);
  REQUIRE(archive.entries().size() == specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(specs[i].name);
    CHECK(archive.entries()[i].size == specs[i].size);
    CHECK(archive.entries()[i].header_offset == plan.layout(i).header_offset);
    CHECK(archive.entries()[i].data_offset == plan.layout(i).data_offset);
    CHECK(archive.entries()[i].crc32 == crcs[i]);
  }
  const std::string trailer = plan.trailer(crcs);
  const std::string eocd = trailer.substr(trailer.size() - 22);
  CHECK(u32(eocd, 16) == 0xffffffffull);  // CD offset past 4 GiB, saturated
}

TEST_CASE("the trailer and descriptors are the only bytes that depend on CRCs") {
  const ZipPlan plan({{"a/data.pkl", 100}, {"a/data/0", 1000}, {"a/version", 2}});
  const std::vector<std::uint32_t> zeros(3, 0);
  const std::vector<std::uint32_t> ones(3, 0xffffffffu);
  std::uint64_t differing = 0;
  for (const ZipSegment& s : plan.segments()) {
    if (s.kind == ZipSegmentKind::local_header) continue;
    if (s.kind == ZipSegmentKind::data_descriptor) {
      differing += plan.data_descriptor(s.record, 0) != plan.data_descriptor(s.record, ~0u);
    }
    if (s.kind == ZipSegmentKind::trailer) differing += plan.trailer(zeros) != plan.trailer(ones);
  }
  CHECK(differing == 4);  // three descriptors and the trailer
  CHECK_THROWS_AS(plan.trailer(std::vector<std::uint32_t>(2)), std::invalid_argument);
}

TEST_CASE("an archive without records is a lone end: CD offset 0, as miniz") {
  const ZipPlan plan({});
  CHECK(plan.size() == 98);
  const std::string t = plan.trailer({});
  CHECK(u64(t, 48) == 0);
  const MemorySource source(t);
  CHECK(ZipArchive(source).entries().empty());
}

TEST_CASE("the streaming writer refuses records out of order, too long or too short") {
  const ZipPlan plan({{"a/x", 3}, {"a/y", 0}});
  std::string out;
  auto sink = [&](std::string_view b) { out += b; };
  {
    ZipStreamWriter w(plan, sink);
    CHECK_THROWS_AS(w.begin_record(1), std::logic_error);
    w.begin_record(0);
    CHECK_THROWS_AS(w.write("abcd"), std::logic_error);
    w.write("ab");
    CHECK_THROWS_AS(w.end_record(), std::logic_error);
    w.write("c");
    w.end_record();
    CHECK_THROWS_AS(w.finish(), std::logic_error);
    CHECK_THROWS_AS(w.write("x"), std::logic_error);
    w.write_record(1, "");
    w.finish();
    CHECK_THROWS_AS(w.finish(), std::logic_error);
  }
  const MemorySource source(out);
  CHECK(ZipArchive(source).entries().size() == 2);
}

TEST_CASE("names: empty or longer than 65535 bytes are refused") {
  CHECK_THROWS_AS(ZipPlan({{"", 1}}), Error);
  CHECK_THROWS_AS(ZipPlan({{std::string(65536, 'n'), 1}}), Error);
  const ZipPlan longest({{std::string(65535, 'n'), 1}});
  check_layout(longest);
}

TEST_CASE("crc32_of_range reads a source in pieces") {
  const std::string data = random_payload(3'000'000, 9);
  const MemorySource source(data);
  CHECK(ckptfs::crc32_of_range(source, 0, data.size()) == ckptfs::crc32(data));
  CHECK(ckptfs::crc32_of_range(source, 12345, 2'000'000) ==
        ckptfs::crc32(std::string_view(data).substr(12345, 2'000'000)));
  CHECK(ckptfs::crc32_of_range(source, 5, 0) == 0);
  CHECK_THROWS_AS(ckptfs::crc32_of_range(source, 1, data.size()), Error);
}

TEST_SUITE_END();
