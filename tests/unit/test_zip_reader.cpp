// SPDX-License-Identifier: MIT
// Unit tests of ZipArchive: valid layouts, torch's quirks, and hostile archives built in C++.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>

#include "support/zip_builder.hpp"

using ckptfs::Error;
using ckptfs::ExitCode;
using ckptfs::MemorySource;
using ckptfs::ZipArchive;
using ckptfs::ZipEntry;
using ckptfs::ZipLimits;
using ckptfs::test::BuildOptions;
using ckptfs::test::EntryOptions;
using ckptfs::test::torch_entry;
using ckptfs::test::ZipBuilder;

namespace {

constexpr std::uint64_t max_u64 = ~std::uint64_t{0};

ZipArchive open_zip(std::string bytes, const ZipLimits& limits = {}) {
  return ZipArchive(MemorySource(std::move(bytes)), limits);
}

// The message of the bad_zip error that opening `bytes` must raise.
std::string zip_error(std::string bytes, const ZipLimits& limits = {}) {
  try {
    open_zip(std::move(bytes), limits);
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == ExitCode::bad_zip, e.what());
    return e.what();
  }
  FAIL("the archive was accepted");
  return {};
}

// The message of the bad_zip error that opening `bytes` with deferred local headers raises, at
// open (what the central directory says) or when its entries are located one by one.
std::string deferred_zip_error(std::string bytes, ZipLimits limits) {
  limits.defer_local_headers = true;
  const MemorySource source(std::move(bytes));
  try {
    const ZipArchive archive(source, limits);
    for (const ZipEntry& e : archive.entries()) (void)locate_entry(source, e);
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == ExitCode::bad_zip, e.what());
    return e.what();
  }
  FAIL("the archive was accepted with deferred local headers");
  return {};
}

// A bad zip is refused with `fragment` in a one-line message, and the same message when its
// local headers are read on first use (remote sources): every check holds in both modes.
void check_bad_zip(std::string bytes, std::string_view fragment, const ZipLimits& limits = {}) {
  const std::string message = zip_error(bytes, limits);
  CHECK_MESSAGE(message.find(fragment) != std::string::npos, message);
  CHECK(message.find('\n') == std::string::npos);
  CHECK(deferred_zip_error(std::move(bytes), limits) == message);
}

// Either a valid archive whose every entry lies inside the file, or a bad_zip error.
void check_parses_or_bad_zip(const std::string& bytes) {
  try {
    const ZipArchive archive = open_zip(bytes);
    for (const ZipEntry& e : archive.entries()) {
      CHECK(e.data_offset <= archive.central_directory_offset());
      CHECK(e.compressed_size <= archive.central_directory_offset() - e.data_offset);
    }
  } catch (const Error& e) {
    CHECK_MESSAGE(e.code() == ExitCode::bad_zip, e.what());
  }
}

std::string payload_of(const std::string& zip, const ZipEntry& e) {
  return zip.substr(e.data_offset, e.compressed_size);
}

// Three entries with names long enough that a fourth 46-byte header still fits in the CD.
ZipBuilder three_entries(const EntryOptions& options = {}) {
  ZipBuilder b;
  b.add("archive/data.pkl", "pickle bytes", options);
  b.add("archive/data/0", std::string(100, 'x'), options);
  b.add("archive/.data/version", "3\n", options);
  return b;
}

}  // namespace

TEST_SUITE_BEGIN("zip_reader");

// ---------------------------------------------------------------------------------------------
// Valid archives

TEST_CASE("a single stored entry") {
  ZipBuilder b;
  b.add("archive/data.pkl", "hello");
  const std::string zip = b.build();
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 1);
  const ZipEntry& e = archive.entries()[0];
  CHECK(e.name == "archive/data.pkl");
  CHECK(e.header_offset == 0);
  CHECK(e.data_offset == 30 + 16);
  CHECK(e.size == 5);
  CHECK(e.compressed_size == 5);
  CHECK(e.stored());
  CHECK(e.crc32 == ckptfs::test::crc32("hello"));
  CHECK(payload_of(zip, e) == "hello");
  CHECK(archive.central_directory_offset() == b.layout().cd_offset);
  CHECK(archive.find("archive/data.pkl") == &e);
  CHECK(archive.find("archive/data") == nullptr);
  CHECK(archive.find("") == nullptr);
}

TEST_CASE("many entries, with classic or zip64 end records") {
  ZipBuilder b;
  for (int i = 0; i < 1000; ++i) {
    b.add(fmt::format("archive/data/{}", i), std::string(static_cast<std::size_t>(i % 97), 'a'));
  }
  BuildOptions options;
  SUBCASE("classic") {}
  SUBCASE("zip64") { options.zip64 = true; }
  SUBCASE("zip64, classic fields saturated") {
    options.zip64 = true;
    options.saturate_classic = true;
  }
  const std::string zip = b.build(options);
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 1000);
  for (std::size_t i = 0; i < 1000; ++i) {
    const ZipEntry& e = archive.entries()[i];
    CHECK(e.header_offset == b.layout().header_offsets[i]);
    CHECK(e.data_offset == b.layout().data_offsets[i]);
    CHECK(payload_of(zip, e) == std::string(i % 97, 'a'));
    CHECK(archive.find(fmt::format("archive/data/{}", i)) == &e);
  }
}

TEST_CASE("100,000 entries: the zip64 count wins over the saturated classic one") {
  ZipBuilder b;
  for (int i = 0; i < 100'000; ++i) b.add(fmt::format("archive/data/{}", i), "z", torch_entry());
  const std::string zip = b.build({.zip64 = true});
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 100'000);
  CHECK(archive.entries().back().data_offset == b.layout().data_offsets.back());
  CHECK(archive.find("archive/data/99999") == &archive.entries().back());
  // Without the zip64 record the classic count (0xffff) is all there is, and it is wrong.
  check_bad_zip(b.build(), "bytes left after its 65535 declared entries");
}

TEST_CASE("torch layout: FB padding puts every payload at a multiple of 64") {
  ZipBuilder b;
  b.add("archive/data.pkl", std::string(100, 'p'), torch_entry());
  b.add("archive/byteorder", "little", torch_entry());
  b.add("archive/data/0", "", torch_entry());
  b.add("archive/data/1", std::string(13, 'd'), torch_entry());
  b.add("archive/version", "3\n", torch_entry());
  const std::string zip = b.build({.zip64 = true});
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 5);
  CHECK(archive.entries()[0].data_offset == 64);
  for (std::size_t i = 0; i < 5; ++i) {
    const ZipEntry& e = archive.entries()[i];
    CHECK(e.data_offset % 64 == 0);
    CHECK(e.data_offset == b.layout().data_offsets[i]);
    CHECK(e.flags == (e.size == 0 ? 0x0800 : 0x0808));
  }
  CHECK(payload_of(zip, *archive.find("archive/byteorder")) == "little");
  CHECK(payload_of(zip, *archive.find("archive/data/1")) == std::string(13, 'd'));
  CHECK(archive.find("archive/data/0")->size == 0);
}

TEST_CASE("local extras decide the payload offset, central extras do not") {
  EntryOptions options = torch_entry();
  options.zip64_local = true;
  // Unknown fields (id 0x1234) of 3 and 5 bytes.
  options.local_extra = std::string{'\x34', '\x12', '\x03', '\x00'} + "abc";
  options.central_extra = std::string{'\x34', '\x12', '\x05', '\x00'} + "hello";
  ZipBuilder b;
  b.add("archive/data.pkl", "pickle", options);
  b.add("archive/data/0", "tensor", options);
  const std::string zip = b.build({.zip64 = true});
  const ZipArchive archive = open_zip(zip);
  CHECK(archive.entries()[1].data_offset == b.layout().data_offsets[1]);
  CHECK(archive.entries()[1].data_offset % 64 == 0);
  CHECK(payload_of(zip, archive.entries()[1]) == "tensor");
}

TEST_CASE("zip64 central extras supply exactly the saturated fields") {
  EntryOptions options;
  SUBCASE("all three") { options.zip64_central = ckptfs::test::zip64_all; }
  SUBCASE("header offset only") { options.zip64_central = ckptfs::test::zip64_header_offset; }
  SUBCASE("sizes only") {
    options.zip64_central = ckptfs::test::zip64_size | ckptfs::test::zip64_compressed_size;
  }
  SUBCASE("size and disk") {
    options.zip64_central = ckptfs::test::zip64_size | ckptfs::test::zip64_disk;
  }
  ZipBuilder b = three_entries(options);
  const std::string zip = b.build({.zip64 = true});
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 3);
  const ZipEntry& e = archive.entries()[1];
  CHECK(e.header_offset == b.layout().header_offsets[1]);
  CHECK(e.data_offset == b.layout().data_offsets[1]);
  CHECK(e.size == 100);
  CHECK(e.compressed_size == 100);
}

TEST_CASE("an archive comment after the EOCD") {
  BuildOptions options;
  SUBCASE("holding a signature") { options.comment = "fake PK\x05\x06 record, ignored"; }
  SUBCASE("of the maximum length, zip64") {
    options.comment = std::string(65535, 'c');
    options.zip64 = true;
  }
  ZipBuilder b = three_entries();
  const std::string zip = b.build(options);
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 3);
  CHECK(payload_of(zip, archive.entries()[2]) == "3\n");
}

TEST_CASE("zero-length entries") {
  ZipBuilder b;
  b.add("a/empty", "");
  b.add("a/empty too", "", torch_entry());
  b.add("a/full", "x");
  b.add("a/last", "");
  const std::string zip = b.build({.zip64 = true});
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(archive.entries()[i].data_offset == b.layout().data_offsets[i]);
  }
  CHECK(archive.entries()[0].size == 0);
  CHECK(archive.entries()[0].data_offset == archive.entries()[1].header_offset);
  CHECK(archive.entries()[3].data_offset == archive.central_directory_offset());
}

TEST_CASE("compressed and encrypted entries are kept for the caller to refuse") {
  ZipBuilder b;
  b.add("archive/data/0", "deflate", {.method = 8, .size = 1000});
  b.add("archive/data/1", std::string(12 + 5, 'e'), {.flags = 1, .size = 5});
  const ZipArchive archive = open_zip(b.build());
  const ZipEntry& deflated = archive.entries()[0];
  CHECK(deflated.method == 8);
  CHECK_FALSE(deflated.stored());
  CHECK(deflated.size == 1000);
  CHECK(deflated.compressed_size == 7);
  const ZipEntry& encrypted = archive.entries()[1];
  CHECK(encrypted.method == 0);
  CHECK_FALSE(encrypted.stored());
  CHECK(encrypted.compressed_size == 17);
}

TEST_CASE("duplicate names: find returns the first") {
  ZipBuilder b;
  b.add("archive/data.pkl", "first");
  b.add("archive/other", "other");
  b.add("archive/data.pkl", "second");
  const std::string zip = b.build();
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 3);
  CHECK(archive.find("archive/data.pkl") == &archive.entries()[0]);
  CHECK(payload_of(zip, archive.entries()[2]) == "second");
}

TEST_CASE("central directory order is kept when headers are not in file order") {
  // Re-zipping tools may list entries in any order; the reader sorts only to check overlaps.
  // Same-sized entries, so that the CD can point each name at another one's local header.
  ZipBuilder in_order;
  for (const char* name : {"archive/a", "archive/b", "archive/c"}) in_order.add(name, "abcd");
  in_order.build();
  const ckptfs::test::ZipLayout layout = in_order.layout();
  ZipBuilder b;
  b.add("archive/a", "AAAA", {.header_offset = layout.header_offsets[2]});
  b.add("archive/b", "BBBB", {.header_offset = layout.header_offsets[0]});
  b.add("archive/c", "CCCC", {.header_offset = layout.header_offsets[1]});
  const std::string zip = b.build();
  const ZipArchive archive = open_zip(zip);
  REQUIRE(archive.entries().size() == 3);
  CHECK(archive.entries()[0].name == "archive/a");
  CHECK(archive.entries()[0].data_offset == layout.data_offsets[2]);
  CHECK(payload_of(zip, archive.entries()[0]) == "CCCC");
  CHECK(payload_of(zip, archive.entries()[1]) == "AAAA");
  CHECK(payload_of(zip, archive.entries()[2]) == "BBBB");
}

TEST_CASE("an empty archive") {
  for (bool zip64 : {false, true}) {
    const ZipArchive archive = open_zip(ZipBuilder().build({.zip64 = zip64}));
    CHECK(archive.entries().empty());
    CHECK(archive.central_directory_offset() == 0);
    CHECK(archive.find("anything") == nullptr);
  }
}

TEST_CASE("looks_like_zip") {
  CHECK(ckptfs::looks_like_zip(MemorySource(three_entries().build())));
  CHECK(ckptfs::looks_like_zip(MemorySource("PK\x03\x04")));
  CHECK_FALSE(ckptfs::looks_like_zip(MemorySource("")));
  CHECK_FALSE(ckptfs::looks_like_zip(MemorySource("PK\x03")));
  CHECK_FALSE(ckptfs::looks_like_zip(MemorySource(ZipBuilder().build())));
  CHECK_FALSE(ckptfs::looks_like_zip(MemorySource(three_entries().build({.prefix = "MZ"}))));
}

TEST_CASE("64-bit sizes and offsets in a sparse 5 GiB file") {
  ZipBuilder b;
  b.add("big/data.pkl", "pickle", torch_entry());
  EntryOptions huge = torch_entry();
  huge.zip64_local = true;
  b.add_hole("big/data/0", 5ull << 30, huge);
  b.add("big/version", "3\n", torch_entry());
  const ckptfs::test::ZipImage image = b.build_image({.zip64 = true});

  const auto path =
      std::filesystem::temp_directory_path() / fmt::format("ckptfs_test_zip64_{}.zip", ::getpid());
  struct Remove {
    std::filesystem::path path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{path};
  try {
    image.write_sparse(path.string());
  } catch (const std::exception& e) {
    MESSAGE("skipped, cannot write a sparse file: " << e.what());
    return;
  }
  const ckptfs::FileSource source(path.string());
  const ZipArchive archive(source);
  REQUIRE(archive.entries().size() == 3);
  const ZipEntry& big = archive.entries()[1];
  CHECK(big.size == 5ull << 30);
  CHECK(big.compressed_size == 5ull << 30);
  CHECK(big.data_offset == b.layout().data_offsets[1]);
  const ZipEntry& version = archive.entries()[2];
  CHECK(version.header_offset > 5ull << 30);
  CHECK(version.data_offset == b.layout().data_offsets[2]);
  CHECK(version.data_offset % 64 == 0);
  CHECK(source.read_string(version.data_offset, 2) == "3\n");
  CHECK(archive.central_directory_offset() > 0xffffffffull);
}

// ---------------------------------------------------------------------------------------------
// Hostile archives

TEST_CASE("too small or no end record") {
  check_bad_zip("", "too small");
  check_bad_zip("PK\x03", "too small");
  check_bad_zip(std::string(21, '\0'), "too small");
  check_bad_zip(std::string(22, '\0'), "no end of central directory record");
  check_bad_zip("PK\x03\x04" + std::string(100, '\0'), "no end of central directory record");
}

TEST_CASE("random bytes") {
  std::mt19937_64 random(20240601);
  for (std::size_t size : {1, 22, 100, 4096, 70'000}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    CAPTURE(size);
    check_bad_zip(bytes, "");
    // The same, ending in an EOCD and zip64 records with random fields.
    // Signatures at 0, 56 and 76 stay, and so does the EOCD comment length (last 2 bytes);
    // mostly-zero fields reach further than uniformly random ones.
    std::string records = "PK\x06\x06" + std::string(52, '\0') + "PK\x06\x07" +
                          std::string(16, '\0') + "PK\x05\x06" + std::string(18, '\0');
    for (int round = 0; round < 200; ++round) {
      for (std::size_t i = 0; i + 2 < records.size(); ++i) {
        if (i % 4 != 0 || (i != 0 && i != 56 && i != 76)) {
          records[i] = static_cast<char>(random() % 4 == 0 ? random() : 0);
        }
      }
      check_parses_or_bad_zip(bytes + records);
    }
  }
}

TEST_CASE("every truncation and every cut-out range is refused") {
  ZipBuilder b = three_entries(torch_entry());
  const std::string zip = b.build({.zip64 = true, .comment = "c"});
  const ckptfs::test::ZipLayout layout = b.layout();
  for (std::size_t length = 0; length < zip.size(); ++length) {
    CAPTURE(length);
    zip_error(zip.substr(0, length));
  }
  struct Cut {
    std::string where;
    std::uint64_t offset;
  };
  for (const Cut& cut : {Cut{"local header", layout.header_offsets[1] + 10},
                         Cut{"payload", layout.data_offsets[1] + 10},
                         Cut{"central directory", layout.cd_offset + 20},
                         Cut{"zip64 record", layout.zip64_record_offset + 20},
                         Cut{"EOCD", layout.eocd_offset + 10}}) {
    CAPTURE(cut.where);
    std::string bytes = zip;
    bytes.erase(cut.offset, 8);
    zip_error(bytes);
  }
  // A broken locator is no locator: the classic record, here exact, is then all there is.
  std::string bytes = zip;
  bytes.erase(layout.locator_offset + 4, 8);
  CHECK(open_zip(bytes).entries().size() == 3);
  bytes = three_entries(torch_entry()).build({.zip64 = true, .saturate_classic = true});
  bytes.erase(layout.locator_offset + 4, 8);
  zip_error(bytes);
}

TEST_CASE("single-byte mutations never crash") {
  ZipBuilder b = three_entries(torch_entry());
  const std::string zip = b.build({.zip64 = true});
  for (std::size_t i = 0; i < zip.size(); ++i) {
    for (unsigned char value : {0x00, 0x01, 0x7f, 0x80, 0xff}) {
      std::string bytes = zip;
      bytes[i] = static_cast<char>(value);
      CAPTURE(i);
      check_parses_or_bad_zip(bytes);
    }
  }
}

TEST_CASE("the central directory offset lies") {
  const std::string zip = three_entries().build();
  const auto size = zip.size();
  const std::uint64_t cd_offset = [] {
    ZipBuilder b = three_entries();
    b.build();
    return b.layout().cd_offset;
  }();
  check_bad_zip(three_entries().build({.cd_offset = size + 100}), "runs past the end records");
  check_bad_zip(
      three_entries().build({.zip64 = true, .saturate_classic = true, .cd_offset = max_u64}),
      "runs past the end records");
  check_bad_zip(three_entries().build({.cd_offset = cd_offset - 1}),
                "bad central directory header signature for entry 0");
  check_bad_zip(three_entries().build({.cd_offset = cd_offset + 1}), "");
  check_bad_zip(three_entries().build({.cd_offset = 0}), "bad central directory header signature");
}

TEST_CASE("the central directory size lies") {
  ZipBuilder b = three_entries();
  const std::string zip = b.build();
  const std::uint64_t cd_size = b.layout().cd_size;
  SUBCASE("larger") {
    check_bad_zip(b.build({.cd_size = cd_size + 1}), "runs past the end records");
    check_bad_zip(b.build({.zip64 = true, .cd_size = cd_size + 1}), "runs past the end records");
  }
  SUBCASE("smaller") {
    check_bad_zip(b.build({.cd_size = cd_size - 1}), "runs past the end of the central directory");
    check_bad_zip(b.build({.cd_size = 0}), "3 entries cannot fit in a central directory of 0");
  }
  SUBCASE("huge") {
    check_bad_zip(b.build({.zip64 = true, .saturate_classic = true, .cd_size = max_u64}),
                  "exceeds the limit");
    check_bad_zip(b.build({.zip64 = true, .saturate_classic = true, .cd_size = max_u64}),
                  "runs past", {.max_central_directory = max_u64});
  }
}

TEST_CASE("the entry count lies") {
  ZipBuilder b = three_entries();
  for (bool zip64 : {false, true}) {
    CAPTURE(zip64);
    check_bad_zip(b.build({.zip64 = zip64, .entry_count = 2}),
                  "bytes left after its 2 declared entries");
    check_bad_zip(b.build({.zip64 = zip64, .entry_count = 0}),
                  "bytes left after its 0 declared entries");
    check_bad_zip(b.build({.zip64 = zip64, .entry_count = 4}),
                  "central directory ends after 3 of its 4 declared entries");
    // A million (65535 in the classic record) in a file of a few hundred bytes.
    check_bad_zip(b.build({.zip64 = zip64, .entry_count = 1'000'000}), "entries cannot fit");
  }
  check_bad_zip(b.build({.zip64 = true, .entry_count = 1'000'000}), "1000000 entries cannot fit");
  check_bad_zip(b.build({.zip64 = true, .entry_count = max_u64}), "exceed the limit");
}

TEST_CASE("the classic and zip64 end records disagree") {
  ZipBuilder b = three_entries();
  check_bad_zip(b.build({.zip64 = true, .classic_entry_count = 2}),
                "declares entry count 2 but the zip64 record declares 3");
  check_bad_zip(b.build({.zip64 = true, .classic_entry_count = 4}),
                "declares entry count 4 but the zip64 record declares 3");
}

TEST_CASE("limits are enforced before reading the central directory") {
  ZipBuilder b = three_entries();
  const std::string zip = b.build({.zip64 = true});
  check_bad_zip(zip, "3 entries exceed the limit of 2", {.max_entries = 2});
  check_bad_zip(zip, "exceeds the limit of 100", {.max_central_directory = 100});
  CHECK(open_zip(zip, {.max_entries = 3}).entries().size() == 3);
}

TEST_CASE("deferred local headers: the same offsets, located one by one on first use") {
  ZipBuilder b = three_entries();
  const std::string zip = b.build();
  const MemorySource source(zip);
  const ZipArchive eager(source);
  const ZipArchive deferred(source, {.defer_local_headers = true});
  REQUIRE(deferred.entries().size() == eager.entries().size());
  for (std::size_t i = 0; i < eager.entries().size(); ++i) {
    CHECK(deferred.entries()[i].data_offset == 0);  // not read at open
    CHECK(locate_entry(source, deferred.entries()[i]) == eager.entries()[i].data_offset);
  }
  ckptfs::ZipLocator locator(source, deferred.entries());
  CHECK(locator.data_offset(1) == eager.entries()[1].data_offset);
  CHECK(locator.data_offset(1) == eager.entries()[1].data_offset);  // remembered
}

TEST_CASE("entries overlap") {
  ZipBuilder layout_only = three_entries();
  layout_only.build();
  const ckptfs::test::ZipLayout layout = layout_only.layout();

  SUBCASE("a size running into the next header") {
    ZipBuilder b;
    b.add("archive/data.pkl", "pickle bytes", {.size = 12 + 40, .compressed_size = 12 + 40});
    b.add("archive/data/0", std::string(100, 'x'));
    b.add("archive/version", "3\n");
    check_bad_zip(b.build(), "\"archive/data.pkl\" (52 bytes at offset");
  }
  SUBCASE("two entries sharing one local header") {
    ZipBuilder b = three_entries();
    b.add("archive/alias", "", {.header_offset = layout.header_offsets[1]});
    check_bad_zip(b.build(), "\"archive/data/0\" (100 bytes at offset");
  }
  SUBCASE("a header hidden inside another payload") {
    std::string fake_header = "PK\x03\x04" + std::string(26, '\0');
    ZipBuilder b;
    b.add("archive/data.pkl", "pickle bytes");
    b.add("archive/data/0", fake_header + std::string(100 - 30, 'x'));
    b.add("archive/version", "3\n");
    b.add("archive/hidden", "", {.header_offset = layout.data_offsets[1]});
    check_bad_zip(b.build(), "\"archive/data/0\" (100 bytes at offset");
  }
}

TEST_CASE("entries outside the file or in the central directory") {
  ZipBuilder b = three_entries();
  const std::string zip = b.build();
  const ckptfs::test::ZipLayout layout = b.layout();
  auto lying_last = [&](EntryOptions options) {
    ZipBuilder lying;
    lying.add("archive/data.pkl", "pickle bytes");
    lying.add("archive/data/0", std::string(100, 'x'));
    lying.add("archive/version", "3\n", options);
    return lying.build({.zip64 = true});
  };
  check_bad_zip(lying_last({.size = 3, .compressed_size = 3}),
                "\"archive/version\" (3 bytes at offset");
  check_bad_zip(lying_last({.size = 1ull << 40, .compressed_size = 1ull << 40}),
                "runs past the central directory");
  check_bad_zip(lying_last({.method = 8, .compressed_size = max_u64}),
                "runs past the central directory");
  check_bad_zip(lying_last({.header_offset = zip.size() + 1000}),
                fmt::format("local header of \"archive/version\" at offset {} is outside the file",
                            zip.size() + 1000));
  check_bad_zip(lying_last({.header_offset = max_u64 - 9}),
                "at offset 18446744073709551606 is outside the file");
  check_bad_zip(lying_last({.header_offset = layout.cd_offset - 10}),
                "is not before the central directory");
}

TEST_CASE("bad signatures") {
  auto with_second = [](EntryOptions options) {
    ZipBuilder b;
    b.add("archive/a", "a");
    b.add("archive/b", "b", options);
    return b;
  };
  check_bad_zip(with_second({.local_signature = 0x04034b51}).build(),
                "bad local header signature for \"archive/b\" at offset");
  check_bad_zip(with_second({.central_signature = 0x02014b49}).build(),
                "bad central directory header signature for entry 1");
  ZipBuilder b = three_entries();
  check_bad_zip(b.build({.eocd_signature = 0x06054b49}), "no end of central directory record");
  check_bad_zip(b.build({.zip64 = true, .zip64_record_signature = 0}),
                "no zip64 end of central directory record at offset");
  // Without its locator, the saturated classic record is taken at its word, and it lies.
  check_bad_zip(b.build({.zip64 = true, .saturate_classic = true, .locator_signature = 0}),
                "exceeds the limit");
}

TEST_CASE("the zip64 locator points elsewhere") {
  ZipBuilder b = three_entries();
  const std::string zip = b.build({.zip64 = true});
  const ckptfs::test::ZipLayout layout = b.layout();
  check_bad_zip(b.build({.zip64 = true, .zip64_record_offset = zip.size() + 10}),
                "is not before its locator");
  check_bad_zip(b.build({.zip64 = true, .zip64_record_offset = max_u64}),
                "is not before its locator");
  check_bad_zip(b.build({.zip64 = true, .zip64_record_offset = layout.locator_offset - 10}),
                "is not before its locator");
  check_bad_zip(b.build({.zip64 = true, .zip64_record_offset = 0}),
                "no zip64 end of central directory record at offset 0");
  check_bad_zip(b.build({.zip64 = true, .locator_disks = 2}), "multi-disk");
}

TEST_CASE("lengths running past their container") {
  auto with_last = [](EntryOptions options) {
    ZipBuilder b = three_entries();
    b.add("archive/last", "last", std::move(options));
    return b.build({.zip64 = true});
  };
  check_bad_zip(with_last({.central_extra = std::string{'\x34', '\x12', '\x64', '\x00'} + "abcd"}),
                "extra field 0x1234 of \"archive/last\" declares 100 bytes but only 4 remain");
  check_bad_zip(with_last({.central_extra = "abc"}), "extra field of \"archive/last\" is cut");
  check_bad_zip(with_last({.zip64_central = ckptfs::test::zip64_size,
                           .omit_zip64_extra = true,
                           .central_extra = std::string{'\x01', '\x00', '\x04', '\x00'} + "four"}),
                "too short (4 bytes)");
  check_bad_zip(with_last({.zip64_central = ckptfs::test::zip64_all, .omit_zip64_extra = true}),
                "no zip64 extra field");
  check_bad_zip(with_last({.central_name_length = 0xffff}),
                "runs past the end of the central directory");
  check_bad_zip(three_entries().build({.comment = "abc", .comment_length = 4}),
                "no end of central directory record");
  check_bad_zip(three_entries().build({.comment = "abc", .comment_length = 2}),
                "no end of central directory record");
}

TEST_CASE("a stored entry whose sizes disagree") {
  ZipBuilder b;
  b.add("archive/data/0", "abc", {.size = 4});
  check_bad_zip(b.build(), "stored entry \"archive/data/0\" has compressed size 3 but size 4");
}

TEST_CASE("multi-disk archives are refused") {
  ZipBuilder b = three_entries();
  check_bad_zip(b.build({.disk_number = 1}), "multi-disk");
  check_bad_zip(b.build({.zip64 = true, .disk_number = 1}), "multi-disk");
  ZipBuilder on_disk_two;
  on_disk_two.add("archive/data.pkl", "x", {.disk = 2});
  check_bad_zip(on_disk_two.build(), "\"archive/data.pkl\" starts on disk 2");
}

TEST_CASE("untrusted names are quoted in messages") {
  ZipBuilder b;
  b.add("evil\nname\x1b[31m", "abc", {.size = 4});
  check_bad_zip(b.build(), "\"evil\\x0aname\\x1b[31m\"");
}

TEST_SUITE_END();
