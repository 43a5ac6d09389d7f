// SPDX-License-Identifier: MIT
// verify_zip_records(): stored records CRC'd as read, deflated ones inflated through one buffer.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/format/zip/zip_verify.hpp>

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <memory>

namespace ckptfs {
namespace {

constexpr std::size_t chunk_bytes = 1 << 20;

// The source read without its record checks (ByteSource::read_unchecked()): the CRCs are
// compared here, and no read of ours may fail on another record's check.
class Unchecked final : public ByteSource {
 public:
  explicit Unchecked(const ByteSource& source) : source_(source) {}
  std::uint64_t size() const override { return source_.size(); }
  const std::string& name() const noexcept override { return source_.name(); }

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override {
    source_.read_unchecked(offset, out);
  }
  const ByteSource& source_;
};

// The CRC-32 of a record's bytes (deflated ones inflated), and the bytes it inflated to.
struct Read {
  std::uint32_t crc = 0;
  std::uint64_t size = 0;
};

Read read_stored(const ByteSource& source, std::uint64_t at, std::uint64_t size,
                 std::vector<std::byte>& buffer) {
  Read r;
  for (std::uint64_t done = 0; done < size;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - done));
    source.read(at + done, std::span(buffer.data(), n));
    r.crc = crc32(r.crc, buffer.data(), n);
    done += n;
  }
  r.size = size;
  return r;
}

Read read_deflated(const ByteSource& source, std::uint64_t at, std::uint64_t compressed_size,
                   std::uint64_t size, std::vector<std::byte>& buffer,
                   std::vector<std::byte>& output) {
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
  const std::unique_ptr<z_stream, int (*)(z_stream*)> guard(&z, inflateEnd);
  Read r;
  std::uint64_t consumed = 0;
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (z.avail_in == 0) {
      if (consumed == compressed_size) {
        throw Error(ExitCode::bad_checkpoint,
                    fmt::format("its deflated data ends early (at byte {} inflated)", r.size));
      }
      const auto n = static_cast<std::size_t>(
          std::min<std::uint64_t>(buffer.size(), compressed_size - consumed));
      source.read(at + consumed, std::span(buffer.data(), n));
      consumed += n;
      z.next_in = reinterpret_cast<Bytef*>(buffer.data());
      z.avail_in = static_cast<uInt>(n);
    }
    z.next_out = reinterpret_cast<Bytef*>(output.data());
    z.avail_out = static_cast<uInt>(output.size());
    status = inflate(&z, Z_NO_FLUSH);
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) {
      throw Error(ExitCode::bad_checkpoint, fmt::format("corrupt deflated data at byte {} ({})",
                                                        r.size, z.msg ? z.msg : "zlib error"));
    }
    const std::size_t produced = output.size() - z.avail_out;
    r.crc = crc32(r.crc, output.data(), produced);
    r.size += produced;
    if (r.size > size) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("it inflates to more than the {} bytes its zip says", size));
    }
  }
  return r;
}

}  // namespace

ZipVerification verify_zip_records(const ByteSource& checked, bool zero_is_none) {
  const Unchecked source(checked);
  const ZipArchive zip(source);
  std::vector<const ZipEntry*> entries;
  for (const ZipEntry& e : zip.entries()) entries.push_back(&e);
  std::sort(entries.begin(), entries.end(), [](const ZipEntry* a, const ZipEntry* b) {
    return a->header_offset < b->header_offset;
  });
  ZipVerification v;
  v.records = entries.size();
  std::vector<std::byte> buffer(chunk_bytes), output(chunk_bytes);
  for (const ZipEntry* e : entries) {
    const std::string name = fmt::format("record {}", quote(e->name, 200));
    const bool deflated = e->method == 8 && (e->flags & 1) == 0;
    if (!e->stored() && !deflated) {
      v.unchecked.push_back(fmt::format(
          "{}: {}", name,
          (e->flags & 1) ? std::string("encrypted") : fmt::format("zip method {}", e->method)));
      continue;
    }
    if (zero_is_none && e->crc32 == 0 && e->size != 0) {
      v.unchecked.push_back(fmt::format("{}: no CRC-32 recorded (0)", name));
      continue;
    }
    ++v.checked;
    v.bytes += e->compressed_size;
    try {
      const std::uint64_t at = payload_offset(source, *e);
      const Read r = deflated
                         ? read_deflated(source, at, e->compressed_size, e->size, buffer, output)
                         : read_stored(source, at, e->size, buffer);
      if (r.size != e->size) {
        v.corrupt.push_back(
            fmt::format("{}: inflates to {} bytes, its zip says {}", name, r.size, e->size));
      } else if (r.crc != e->crc32) {
        v.corrupt.push_back(fmt::format(
            "{}: its {} bytes do not match the CRC-32 its zip records ({:08x}, they give {:08x})",
            name, e->size, e->crc32, r.crc));
      }
    } catch (const Error& error) {
      v.corrupt.push_back(fmt::format("{}: {}", name, error.what()));
    }
  }
  return v;
}

}  // namespace ckptfs
