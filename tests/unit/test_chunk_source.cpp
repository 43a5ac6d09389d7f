// SPDX-License-Identifier: MIT
// Unit tests of ChunkSource (HDF5 chunks decoded on read: deflate, shuffle, Fletcher-32, chunks
// never written, corrupt chunks), its cache's bound, HDF5's Fletcher-32, and read_hdf5()'s
// refusal of what is not HDF5. HDF5 files themselves are written by h5py in test_hdf5.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/hdf5/hdf5_reader.hpp>
#include <ckptfs/source/chunk_source.hpp>

#include <doctest/doctest.h>
#include <zlib.h>

#include <stdexcept>
#include <string>

using namespace ckptfs;

namespace {

std::string zlib_deflate(const std::string& text) {
  uLongf size = compressBound(static_cast<uLong>(text.size()));
  std::string out(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                reinterpret_cast<const Bytef*>(text.data()), static_cast<uLong>(text.size()),
                6) != Z_OK) {
    throw std::runtime_error("compress2");
  }
  out.resize(size);
  return out;
}

// HDF5's shuffle: byte j of element i to j × n + i.
std::string shuffle(const std::string& in, std::size_t element_size) {
  std::string out(in.size(), '\0');
  const std::size_t n = in.size() / element_size;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < element_size; ++j) out[j * n + i] = in[i * element_size + j];
  }
  return out;
}

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::uint32_t fletcher(const std::string& s) {
  return hdf5_fletcher32(std::as_bytes(std::span(s)));
}

}  // namespace

TEST_CASE("hdf5_fletcher32 is HDF5's checksum: big-endian words, an odd last byte high") {
  CHECK(fletcher("abcde") == 0x4ff029c7);
  CHECK(fletcher("abcdef") == 0x50562a2d);
  std::string long_input;
  for (int k = 0; k < 40; ++k) {
    for (int i = 0; i < 256; ++i) long_input += static_cast<char>(i);
  }
  CHECK(fletcher(long_input) == 0x793609f6);  // past 360 words: the sums folded on the way
}

TEST_CASE("ChunkSource decodes shuffled, deflated, checksummed chunks and fills missing ones") {
  std::string a, b;
  for (std::uint32_t i = 0; i < 64; ++i) a += le32(i * 2654435761u);
  for (std::uint32_t i = 0; i < 64; ++i) b += le32(i);
  const std::string stored_a = zlib_deflate(shuffle(a, 4));
  std::string stored_b = zlib_deflate(shuffle(b, 4));
  stored_b += le32(fletcher(stored_b));
  MemorySource file{"xx" + stored_a + stored_b, "f.h5"};
  ChunkSpec spec;
  spec.chunk_bytes = 256;
  spec.filters = {ChunkFilter::shuffle, ChunkFilter::deflate, ChunkFilter::fletcher32};
  spec.shuffle_element_size = 4;
  spec.fill = le32(0x01020304);
  // Chunk 0 skipped Fletcher-32 (its mask's bit 2); chunk 2 was never written.
  spec.chunks = {{2, stored_a.size(), 0b100}, {2 + stored_a.size(), stored_b.size(), 0}, {}};
  auto cache = std::make_shared<ChunkCache>(1 << 20);
  const ChunkSource source(file, spec, cache, "f.h5:/w");
  REQUIRE(source.size() == 3 * 256);
  std::string fill;
  for (int i = 0; i < 64; ++i) fill += le32(0x01020304);
  CHECK(source.read_string(0, 768) == a + b + fill);
  CHECK(source.read_string(250, 12) == (a + b).substr(250, 12));  // across two chunks
  CHECK(cache->size() == 768);

  SUBCASE("a checksum that does not match is a corrupt chunk, named") {
    std::string bad = file.read_string(0, file.size());
    bad[bad.size() - 1] ^= 1;
    MemorySource corrupt{bad, "f.h5"};
    const ChunkSource s(corrupt, spec, std::make_shared<ChunkCache>(1 << 20), "f.h5:/w");
    CHECK(s.read_string(0, 256) == a);
    try {
      (void)s.read_string(256, 4);
      FAIL("read a corrupt chunk");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::bad_checkpoint);
      CHECK(std::string(e.what()).find("chunk 1") != std::string::npos);
      CHECK(std::string(e.what()).find("Fletcher-32") != std::string::npos);
    }
  }
  SUBCASE("a chunk that inflates short is refused, not padded") {
    ChunkSpec longer = spec;
    longer.chunk_bytes = 260;
    const ChunkSource s(file, longer, std::make_shared<ChunkCache>(1 << 20), "f.h5:/w");
    CHECK_THROWS_AS((void)s.read_string(0, 4), Error);
  }
}

TEST_CASE("ChunkCache keeps at most its capacity of decoded chunks") {
  ChunkCache cache(1000);
  for (std::uint64_t i = 0; i < 10; ++i) {
    cache.insert(nullptr, i, std::make_shared<const std::string>(400, 'x'));
    CHECK(cache.size() <= 1000);
  }
  CHECK(cache.find(nullptr, 9) != nullptr);
  CHECK(cache.find(nullptr, 0) == nullptr);
}

TEST_CASE("read_hdf5 refuses what is not HDF5 with one line") {
  MemorySource not_hdf5{std::string(4096, 'x'), "x.h5"};
  CHECK_FALSE(looks_like_hdf5(not_hdf5));
  try {
    (void)read_hdf5(not_hdf5, "x.h5");
    FAIL("read bytes that are not HDF5");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_checkpoint);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
  // A signature after a user block of 512 bytes is found; a superblock cut short is refused.
  MemorySource user_block{std::string(512, '\0') + std::string("\x89HDF\r\n\x1a\n\0", 9), "u.h5"};
  CHECK(looks_like_hdf5(user_block));
  CHECK_THROWS_AS((void)read_hdf5(user_block, "u.h5"), Error);
}

TEST_CASE("natural_less compares runs of digits as numbers") {
  CHECK(natural_less("vars.2", "vars.10"));
  CHECK_FALSE(natural_less("vars.10", "vars.2"));
  CHECK(natural_less("a", "b"));
  CHECK(natural_less("rank_9", "rank_10"));
  CHECK(natural_less("7", "07") != natural_less("07", "7"));
}
