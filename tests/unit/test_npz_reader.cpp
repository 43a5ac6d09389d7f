// SPDX-License-Identifier: MIT
// Unit tests of the .npy header parser, read_npz() (stored and deflated members, Fortran order,
// big-endian, dtypes torch has no dtype for, object arrays, hostile headers) and InflatedSource
// (sequential, skipping, backwards, corrupt and short streams), on files assembled in C++.
#include "support/zip_builder.hpp"

#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/npz/npy_format.hpp>
#include <ckptfs/format/npz/npz_reader.hpp>
#include <ckptfs/source/inflated_source.hpp>
#include <ckptfs/view/tree.hpp>

#include <doctest/doctest.h>
#include <zlib.h>

#include <atomic>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

std::string deflate_raw(std::string_view text) {
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::runtime_error("deflateInit2");
  }
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (status != Z_STREAM_END) throw std::runtime_error("deflate");
  return out;
}

// A .npy file as numpy writes it: version 1.0, the dict padded with spaces to a multiple of 64
// bytes, a newline, then `data`.
std::string npy(const std::string& dict, const std::string& data, int version = 1) {
  std::string header = dict;
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(version);
  out += '\0';
  for (std::size_t i = 0; i < prefix - 8; ++i) {
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  }
  return out + header + data;
}

std::string dict(const std::string& descr, bool fortran, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

bool refused_with(const std::string& bytes, const std::string& part) {
  try {
    read_npy_header(bytes);
  } catch (const Error& e) {
    CAPTURE(e.what());
    return e.code() == ExitCode::bad_checkpoint &&
           std::string(e.what()).find(part) != std::string::npos;
  }
  return false;
}

}  // namespace

TEST_SUITE_BEGIN("npz_reader");

TEST_CASE(".npy headers: versions, dtypes, byte orders, shapes as numpy writes them") {
  const NpyHeader h = read_npy_header(npy(dict("<f4", false, "(3, 4)"), ""));
  CHECK(h.size == 128);  // padded to a multiple of 64
  CHECK(h.dtype == DType::float32);
  CHECK(!h.big_endian);
  CHECK(h.shape == std::vector<std::int64_t>{3, 4});
  CHECK(read_npy_header(npy(dict(">i8", true, "(2,)"), "", 2)).big_endian);
  CHECK(read_npy_header(npy(dict(">i8", true, "(2,)"), "", 3)).fortran_order);
  CHECK(read_npy_header(npy(dict("|b1", false, "()"), "")).shape.empty());
  CHECK(read_npy_header(npy(dict("|u1", false, "(5L, 6L)"), "")).shape ==
        std::vector<std::int64_t>{5, 6});  // Python 2's longs
  CHECK(
      read_npy_header(npy("{'shape': (1,), 'fortran_order': False, 'descr': '<c16'}", "")).dtype ==
      DType::complex128);
  CHECK(read_npy_header(npy(dict("|O", false, "(3,)"), "")).unsupported.find("object array") !=
        std::string::npos);
  CHECK(read_npy_header(npy("{'descr': [('a', '<i4'), ('b', '<f8')], 'fortran_order': False, "
                            "'shape': (2,), }",
                            ""))
            .unsupported.find("structured") != std::string::npos);
  CHECK(!read_npy_header(npy(dict("<M8[ns]", false, "(2,)"), "")).unsupported.empty());
  CHECK(!read_npy_header(npy(dict("<U5", false, "(2,)"), "")).unsupported.empty());
}

TEST_CASE(".npy headers: hostile ones refused, each with one line") {
  CHECK(refused_with("NUMPY", "no .npy magic"));
  CHECK(refused_with(std::string("\x93NUMPY\x04\0\x10\0", 10), "version 4.0"));
  CHECK(refused_with(std::string("\x93NUMPY\x01\0\xff\xff", 10) + "{}", "a dict of 65535 bytes"));
  CHECK(refused_with(std::string("\x93NUMPY\x02\0\0\0\0\x01", 12), "more than ckptfs reads"));
  CHECK(refused_with(npy("{'descr': '<f4', 'fortran_order': False}", ""), "missing"));
  CHECK(
      refused_with(npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}", ""),
                   "once each"));
  CHECK(refused_with(npy(dict("<f4", false, "(-1,)"), ""), "expected a dimension"));
  CHECK(
      refused_with(npy(dict("<f4", false, "(99999999999999999999,)"), ""), "expected a dimension"));
  CHECK(refused_with(npy(dict("<f4", false, "(9223372036854775808,)"), ""), "a dimension of"));
  CHECK(refused_with(npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': ()}", ""),
                     "neither True nor False"));
  CHECK(refused_with(npy(dict("<f4", false, "(1,)") + " junk", ""), "bytes after the dict"));
  CHECK(refused_with(npy("{'descr': [('a', '<i4'), 'fortran_order': False, 'shape': ()}", ""),
                     "closing bracket"));
  std::string deep = "{'descr': ";
  for (int i = 0; i < 10000; ++i) deep += '[';
  CHECK(refused_with(npy(deep, ""), "closing bracket"));  // counted, never recursed into
}

TEST_CASE("read_npz: stored members, Fortran order, big-endian, raw members, broken arrays") {
  ZipBuilder z;
  z.add("a.npy", npy(dict("<f4", false, "(2, 3)"), std::string(24, '\1')));
  z.add("f.npy", npy(dict("<i2", true, "(2, 3)"), std::string(12, '\2')));
  z.add("be.npy", npy(dict(">f8", false, "(2,)"), std::string(16, '\3')));
  z.add("raw.bin", "not an array");
  z.add("short.npy", npy(dict("<f8", false, "(4,)"), std::string(8, '\4')));
  z.add("obj.npy", npy(dict("|O", false, "(1,)"), "\x80\x02N."));
  const std::string bytes = z.build();
  MemorySource source(bytes, "x.npz");
  CHECK(looks_like_npz(source));
  const Model m = read_npz(source, "x.npz");
  REQUIRE(m.entries.size() == 6);
  CHECK(m.format == Format::npz);
  CHECK(m.entries[0].key == "a");
  CHECK(m.entries[3].key == "raw.bin");
  const Tensor& a = m.tensors[0];
  CHECK(a.dtype == DType::float32);
  CHECK(a.contiguous());
  CHECK(bytes.substr(*m.file_offset(a), 24) == std::string(24, '\1'));
  const Tensor& f = m.tensors[1];
  CHECK(f.stride == std::vector<std::int64_t>{1, 2});  // Fortran order: a strided view
  CHECK(!f.contiguous());
  CHECK(m.storages[*m.tensors[2].storage].big_endian);
  CHECK(m.tensors[3].dtype == DType::uint8);
  CHECK(m.tensors[3].shape == std::vector<std::int64_t>{12});
  CHECK(m.tensors[4].broken.find("holds 8 bytes of data") != std::string::npos);
  CHECK(m.tensors[5].broken.find("object array") != std::string::npos);
}

TEST_CASE("read_npz: a deflated member, with its own inflated source or broken without one") {
  const std::string member = npy(dict("<f8", false, "(2, 3)"), std::string(48, '\5'));
  ZipBuilder z;
  z.add("d.npy", deflate_raw(member), {.method = 8, .size = member.size()});
  z.add("s.npy", npy(dict("<i1", false, "(3,)"), "abc"));
  const std::string bytes = z.build();
  MemorySource source(bytes, "c.npz");
  const Model without = read_npz(source, "c.npz");
  CHECK(without.tensors[0].shape == std::vector<std::int64_t>{2, 3});  // the inflated header
  CHECK(without.tensors[0].broken.find("deflated") != std::string::npos);
  std::vector<DeflatedMember> deflated;
  const Model m = read_npz(source, "c.npz", {}, &deflated);
  REQUIRE(deflated.size() == 1);
  CHECK(m.sources == std::vector<std::string>{"c.npz", "c.npz/d.npy"});
  const Storage& s = m.storages[*m.tensors[0].storage];
  CHECK(s.source == 1);
  CHECK(s.file_offset == 128);
  InflatedSource inflated(source, deflated[0].offset, deflated[0].compressed_size, deflated[0].size,
                          m.sources[1]);
  CHECK(inflated.read_string(s.file_offset, 48) == std::string(48, '\5'));
  CHECK(m.storages[*m.tensors[1].storage].source == 0);
}

TEST_CASE("read_npz: a shape whose size overflows is broken, never empty or small") {
  // Element counts past 2^64: 2^64 (wraps to 0), 2^64 + 2 (wraps to 2), then counts that fit
  // but whose bytes do not, stored and deflated.
  ZipBuilder z;
  z.add("zero.npy", npy(dict("|u1", false, "(4294967296, 4294967296)"), ""));
  z.add("two.npy", npy(dict("|u1", false, "(3, 6148914691236517206)"), "ab"));
  z.add("bytes.npy", npy(dict("<f4", false, "(4294967297, 4294967295)"), ""));
  z.add("file.npy", npy(dict("<f4", false, "(2305843009213693952,)"), ""));
  z.add("empty.npy", npy(dict("<f4", false, "(0, 4294967296, 4294967296)"), ""));
  const std::string member = npy(dict("<i8", true, "(4294967296, 4294967296)"), "");
  z.add("deflated.npy", deflate_raw(member), {.method = 8, .size = member.size()});
  const std::string bytes = z.build();
  MemorySource source(bytes, "huge.npz");
  std::vector<DeflatedMember> deflated;
  const Model m = read_npz(source, "huge.npz", {}, &deflated);
  REQUIRE(m.tensors.size() == 6);
  auto broken = [&](std::size_t i) {
    CAPTURE(m.entries[i].key);
    CHECK(!m.tensors[i].storage);
    return m.tensors[i].broken;
  };
  CHECK(broken(0).find("has more elements than 64 bits count") != std::string::npos);
  CHECK(broken(1).find("has more elements than 64 bits count") != std::string::npos);
  CHECK(broken(2).find("holds more bytes than a file can") != std::string::npos);
  CHECK(broken(3).find("holds more bytes than a file can") != std::string::npos);
  CHECK(m.tensors[4].broken.empty());  // torch's count: no element
  CHECK(m.tensors[4].nbytes() == 0);
  CHECK(broken(5).find("has more elements than 64 bits count") != std::string::npos);
  CHECK(deflated.empty());
}

TEST_CASE("read_npz: stored members are checked against their CRC-32, deflated ones inflated") {
  const std::string data = std::string(48, '\5');
  const std::string member = npy(dict("<f8", false, "(2, 3)"), data);
  ZipBuilder z;
  z.add("s.npy", member);
  z.add("d.npy", deflate_raw(member),
        {.method = 8, .crc32 = ckptfs::crc32(member), .size = member.size()});
  const std::string bytes = z.build();
  MemorySource source(bytes, "c.npz");
  std::vector<DeflatedMember> deflated;
  const Model m = read_npz(source, "c.npz", {}, &deflated);
  const Storage& s = m.storages[*m.tensors[0].storage];
  REQUIRE(s.record_check);
  CHECK(s.record_check->before == 128);  // the .npy header, which no view reads
  CHECK(s.record_check->size == member.size());
  CHECK(s.record_check->crc32 == ckptfs::crc32(member));
  CHECK(!s.record_crc32);  // not the CRC of the storage's own bytes
  CHECK(!m.storages[*m.tensors[1].storage].record_check);
  REQUIRE(deflated.size() == 1);
  CHECK(deflated[0].crc32 == ckptfs::crc32(member));
}

TEST_CASE(
    "tensor.pt of big-endian uint16 and int16 arrays: little-endian, as torch.load never swaps "
    "uint16") {
  ZipBuilder z;
  z.add("u.npy", npy(dict(">u2", false, "(3,)"), std::string("\0\1\0\2\0\3", 6)));
  z.add("i.npy", npy(dict(">i2", false, "(3,)"), std::string("\0\1\0\2\0\3", 6)));
  const std::string bytes = z.build();
  MemorySource source(bytes, "be.npz");
  Tree tree(read_npz(source, "be.npz"), {});
  const ByteSource* sources[] = {&source};
  auto file_of = [&](const char* key) {
    ReadBuffer buffer;
    tree.read(tree.lookup(tree.lookup(Tree::root_ino, key), "tensor.pt"), 0, 1 << 20, sources,
              buffer);
    std::string got;
    for (const ReadPiece& p : buffer.pieces()) {
      got += p.memory ? std::string(p.memory, p.length)
                      : source.read_string(p.source_offset, p.length);
    }
    return got;
  };
  for (const char* key : {"u", "i"}) {
    CAPTURE(key);
    MemorySource pt(file_of(key), "tensor.pt");
    ZipArchive archive(pt);
    const ZipEntry* order = archive.find("tensor/byteorder");
    const ZipEntry* data = archive.find("tensor/data/0");
    REQUIRE(order != nullptr);
    REQUIRE(data != nullptr);
    // Every tensor.pt is little-endian (torch before 2.1 ignores the byteorder record, and
    // torch.load never swaps uint16's untyped storage): int16 swapped as uint16 is.
    CHECK(pt.read_string(order->data_offset, order->size) == "little");
    CHECK(pt.read_string(data->data_offset, 6) == std::string("\1\0\2\0\3\0", 6));
  }
}

TEST_CASE("InflatedSource: sequential, skipping and backward reads, corrupt and short streams") {
  std::mt19937_64 random(1);
  std::string text;
  for (int i = 0; i < 300000; ++i) text += static_cast<char>('a' + random() % 4);
  const std::string compressed = "pad" + deflate_raw(text);
  MemorySource file(compressed, "f");
  InflatedSource s(file, 3, compressed.size() - 3, text.size(), "f/member", ckptfs::crc32(text));
  CHECK(s.size() == text.size());
  for (std::uint64_t at = 0; at < text.size(); at += 70000) {  // sequential
    const std::size_t n = std::min<std::size_t>(70000, text.size() - at);
    CHECK(s.read_string(at, n) == text.substr(at, n));
  }
  CHECK(s.read_string(250000, 10) == text.substr(250000, 10));  // forward, skipping
  CHECK(s.read_string(5, 10) == text.substr(5, 10));            // backward: from the start
  for (int i = 0; i < 50; ++i) {
    const std::uint64_t at = random() % text.size();
    const std::size_t n = std::min<std::size_t>(1 + random() % 5000, text.size() - at);
    REQUIRE(s.read_string(at, n) == text.substr(at, n));
  }
  CHECK_NOTHROW(s.verify(0, 1));
  CHECK_THROWS_AS(s.read_string(text.size(), 1), Error);  // past its size
  // A stream shorter than the size it claims, and a corrupt one.
  InflatedSource longer(file, 3, compressed.size() - 3, text.size() + 10, "f/long");
  CHECK_THROWS_WITH_AS(longer.read_string(text.size(), 10), doctest::Contains("ends at byte"),
                       Error);
  std::string corrupt = compressed;
  for (std::size_t i = 100; i < 200; ++i) corrupt[i] = '\xff';
  MemorySource bad(corrupt, "bad");
  InflatedSource broken(bad, 3, corrupt.size() - 3, text.size(), "bad/member");
  CHECK_THROWS_AS(broken.read_string(0, text.size()), Error);
}

namespace {

// 6 MiB of four letters (deflate makes about 1.7 MiB of it) and its raw DEFLATE stream.
struct Deflated {
  std::string text;
  std::string compressed;
  Deflated() {
    std::mt19937_64 random(7);
    text.resize(6 << 20);
    for (char& c : text) c = static_cast<char>('a' + random() % 4);
    compressed = deflate_raw(text);
  }
};
const Deflated& deflated() {
  static const Deflated d;
  return d;
}

}  // namespace

TEST_CASE("InflatedSource: a whole read in order, however cut, inflates the stream once") {
  const Deflated& d = deflated();
  MemorySource file(d.compressed, "f.npz");
  InflatedSource s(file, 0, d.compressed.size(), d.text.size(), "f.npz/a.npy",
                   ckptfs::crc32(d.text));
  CHECK(s.span() == InflatedSource::min_span);
  const std::uint64_t chunk = 128 << 10;
  for (std::uint64_t at = 0; at < d.text.size(); at += chunk) {
    REQUIRE(s.read_string(at, chunk) == d.text.substr(at, chunk));
  }
  CHECK(s.inflated_bytes() == d.text.size());
  // A point at a block's end at least a span past the one before: about one per span.
  CHECK(s.access_points() + 2 >= d.text.size() / s.span());
  CHECK(s.access_points() < d.text.size() / s.span());
  // The kernel's readahead: pairs of reads sent in the wrong order, by two threads. Two kept
  // states follow them: each byte is inflated about twice, never from the start again.
  InflatedSource r(file, 0, d.compressed.size(), d.text.size(), "f.npz/a.npy",
                   ckptfs::crc32(d.text));
  for (std::uint64_t k = 0; k * chunk < d.text.size(); k += 2) {
    for (const std::uint64_t j : {k + 1, k}) {
      REQUIRE(r.read_string(j * chunk, chunk) == d.text.substr(j * chunk, chunk));
    }
  }
  CHECK(r.inflated_bytes() <= 2 * d.text.size() + 2 * r.span());
}

TEST_CASE("InflatedSource: reads backwards and scattered cost a span each, not the stream") {
  const Deflated& d = deflated();
  MemorySource file(d.compressed, "f.npz");
  InflatedSource s(file, 0, d.compressed.size(), d.text.size(), "f.npz/a.npy",
                   ckptfs::crc32(d.text));
  const std::uint64_t chunk = 256 << 10;
  std::uint64_t reads = 0, from_the_start = 0;
  for (std::uint64_t end = d.text.size(); end > 0; end -= chunk, ++reads) {
    REQUIRE(s.read_string(end - chunk, chunk) == d.text.substr(end - chunk, chunk));
    from_the_start += end;
  }
  // The first read inflates up to the end; each one after from the access point before it.
  CHECK(s.inflated_bytes() <= d.text.size() + reads * (s.span() + chunk));
  // Inflating from the start for each (one state, as before access points) costs far more.
  CHECK(s.inflated_bytes() < from_the_start / 2);
  const std::uint64_t before = s.inflated_bytes();
  std::mt19937_64 random(2);
  for (int i = 0; i < 40; ++i) {
    const std::uint64_t at = random() % (d.text.size() - 4096);
    REQUIRE(s.read_string(at, 4096) == d.text.substr(at, 4096));
  }
  CHECK(s.inflated_bytes() - before <= 40 * (s.span() + 4096));
}

TEST_CASE("InflatedSource: readers in parallel each keep their own inflater") {
  const Deflated& d = deflated();
  MemorySource file(d.compressed, "f.npz");
  InflatedSource s(file, 0, d.compressed.size(), d.text.size(), "f.npz/a.npy",
                   ckptfs::crc32(d.text));
  // Two readers interleaved at different places: neither sends the other back to the start.
  const std::uint64_t chunk = 64 << 10, half = d.text.size() / 2;
  for (std::uint64_t at = 0; at < half; at += chunk) {
    REQUIRE(s.read_string(at, chunk) == d.text.substr(at, chunk));
    REQUIRE(s.read_string(half + at, chunk) == d.text.substr(half + at, chunk));
  }
  CHECK(s.inflated_bytes() <= d.text.size() + half + s.span());
  // Threads at once: every byte right.
  InflatedSource t(file, 0, d.compressed.size(), d.text.size(), "f.npz/a.npy",
                   ckptfs::crc32(d.text));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 3; ++k) {
    threads.emplace_back([&, k] {
      for (std::uint64_t at = static_cast<std::uint64_t>(k) * 4096; at < d.text.size();
           at += 3 * chunk) {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(chunk, d.text.size() - at));
        if (t.read_string(at, n) != d.text.substr(at, n)) ++wrong;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(wrong == 0);
}

TEST_CASE("InflatedSource: a CRC-32 that does not match fails the read that ends the stream") {
  const Deflated& d = deflated();
  MemorySource file(d.compressed, "f.npz");
  InflatedSource s(file, 0, d.compressed.size(), d.text.size(), "f.npz/a.npy",
                   ckptfs::crc32(d.text) ^ 0x10);
  const std::uint64_t chunk = 1 << 20;
  std::uint64_t at = 0;
  for (; at + chunk < d.text.size(); at += chunk) {
    REQUIRE(s.read_string(at, chunk) == d.text.substr(at, chunk));  // not known yet
  }
  CHECK_THROWS_WITH_AS(s.read_string(at, d.text.size() - at),
                       doctest::Contains("do not match the CRC-32 its zip records"), Error);
  // Known corrupt: every read fails, wherever it is.
  CHECK_THROWS_AS(s.read_string(0, 10), Error);
  CHECK_THROWS_AS(s.verify(0, 1), Error);
  // verify() inflates to the end itself; a read far into the stream first finds it too.
  InflatedSource v(file, 0, d.compressed.size(), d.text.size(), "v", ckptfs::crc32(d.text) ^ 1);
  CHECK_THROWS_AS(v.verify(0, 1), Error);
  InflatedSource w(file, 0, d.compressed.size(), d.text.size(), "w", ckptfs::crc32(d.text) ^ 1);
  CHECK_THROWS_AS(w.read_string(d.text.size() - 4096, 4096), Error);
  InflatedSource good(file, 0, d.compressed.size(), d.text.size(), "good", ckptfs::crc32(d.text));
  CHECK_NOTHROW(good.verify(0, 1));
  CHECK(good.inflated_bytes() == d.text.size());
}

TEST_CASE("InflatedSource: access points stay within their bound on a huge member") {
  // A member that claims 64 GiB (never read that far): points every 256 MiB at most.
  MemorySource file(deflate_raw(std::string(100, 'a')), "bomb.npz");
  InflatedSource s(file, 0, file.size(), std::uint64_t{64} << 30, "bomb.npz/x.npy");
  CHECK(s.span() >= (std::uint64_t{64} << 30) / InflatedSource::max_points);
  CHECK(s.span() <= (std::uint64_t{64} << 30) / InflatedSource::max_points + 1);
}

TEST_SUITE_END();
