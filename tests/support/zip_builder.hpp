// SPDX-License-Identifier: MIT
// Test helper: assembles ZIP archives in memory, well-formed or lying on purpose.
//
//   ZipBuilder b;
//   b.add("archive/data.pkl", pickle_bytes, torch_entry());   // torch layout: FB pad to 64
//   b.add("archive/data/0", bytes, {.method = 8});           // a "compressed" entry
//   std::string zip = b.build({.zip64 = true});              // torch always writes zip64 ends
//   b.layout().data_offsets[1];                              // where the payload really went
//
// Payloads are written as given: method 8 only changes the recorded method. Every declared
// value (sizes, offsets, counts, signatures, lengths) can be overridden to make the archive lie.
// add_hole() declares a payload that is never materialised, so build_image() can describe a
// multi-GiB archive as a few pieces and write it as a sparse file.
#pragma once

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfs::test {

// Central-directory fields an entry moves into its zip64 extra (id 0x0001), leaving 0xFFFFFFFF
// (0xFFFF for the disk) in the header. Values that do not fit in 32 bits always move.
enum Zip64Field : unsigned {
  zip64_size = 1,
  zip64_compressed_size = 2,
  zip64_header_offset = 4,
  zip64_disk = 8,
  zip64_all = zip64_size | zip64_compressed_size | zip64_header_offset,
};

struct EntryOptions {
  std::uint16_t method = 0;              // recorded only
  std::uint16_t flags = 0;               // general purpose bits (bit 3 added by data_descriptor)
  std::size_t align = 0;                 // > 0: an 'FB' local extra pads the payload to a multiple
  bool data_descriptor = false;          // local CRC, sizes 0; PK\7\8 after a non-empty payload
  bool zip64_local = false;              // local zip64 extra with (size, compressed size)
  unsigned zip64_central = 0;            // Zip64Field bits moved to the central zip64 extra
  bool omit_zip64_extra = false;         // lie: saturate the fields but write no zip64 extra
  std::optional<std::uint32_t> crc32{};  // default: real CRC (0 for a hole)
  std::optional<std::uint64_t> size{};   // declared uncompressed size
  std::optional<std::uint64_t> compressed_size{};      // declared compressed size
  std::optional<std::uint64_t> header_offset{};        // declared local header offset
  std::optional<std::uint16_t> central_name_length{};  // declared name length in the CD
  std::string local_extra{};                           // raw, after the zip64 extra, before FB
  std::string central_extra{};                         // raw, after the zip64 extra
  std::string comment{};                               // entry comment in the CD
  std::uint16_t disk = 0;                              // "disk number start"
  std::uint32_t local_signature = 0x04034b50;
  std::uint32_t central_signature = 0x02014b50;
};

// How torch.save (miniz) writes every record: FB padding to 64 and a data descriptor.
inline EntryOptions torch_entry() {
  return {.flags = 0x0800, .align = 64, .data_descriptor = true};
}

struct BuildOptions {
  bool zip64 = false;             // zip64 end record and locator (needed past 65,535 entries)
  bool saturate_classic = false;  // classic EOCD counts, size and offset all 0xFFFF.. (zip64)
  std::string comment{};          // archive comment after the EOCD
  std::string prefix{};           // bytes before the first local header
  std::optional<std::uint64_t> entry_count{};          // declared in every end record
  std::optional<std::uint16_t> classic_entry_count{};  // declared in the classic EOCD only
  std::optional<std::uint64_t> cd_offset{};            // declared in every end record
  std::optional<std::uint64_t> cd_size{};              // declared in every end record
  std::optional<std::uint64_t> zip64_record_offset{};  // where the locator points
  std::optional<std::uint16_t> comment_length{};       // declared archive comment length
  std::uint16_t disk_number = 0;                       // "number of this disk", every end record
  std::uint32_t locator_disks = 1;                     // "total number of disks" in the locator
  std::uint32_t eocd_signature = 0x06054b50;
  std::uint32_t zip64_record_signature = 0x06064b50;
  std::uint32_t locator_signature = 0x07064b50;
};

// Where everything really is in the last archive built (not what it declares).
struct ZipLayout {
  std::vector<std::uint64_t> header_offsets;  // per entry, in add() order
  std::vector<std::uint64_t> data_offsets;
  std::uint64_t cd_offset = 0;
  std::uint64_t cd_size = 0;
  std::uint64_t zip64_record_offset = 0;  // 0 without zip64
  std::uint64_t locator_offset = 0;       // 0 without zip64
  std::uint64_t eocd_offset = 0;
  std::uint64_t size = 0;
};

// An archive as written pieces; the gaps between them (holes) read as zeros.
struct ZipImage {
  std::vector<std::pair<std::uint64_t, std::string>> pieces;
  std::uint64_t size = 0;

  std::string bytes() const {
    std::string out(size, '\0');
    for (const auto& [offset, piece] : pieces) out.replace(offset, piece.size(), piece);
    return out;
  }

  // Writes the image to `path` with pwrite and ftruncate, so holes take no disk space.
  void write_sparse(const std::string& path) const {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
    bool ok = ::ftruncate(fd, static_cast<off_t>(size)) == 0;
    for (const auto& [offset, piece] : pieces) {
      ok = ok && ::pwrite(fd, piece.data(), piece.size(), static_cast<off_t>(offset)) ==
                     static_cast<ssize_t>(piece.size());
    }
    int error = errno;
    ::close(fd);
    if (!ok) throw std::runtime_error(path + ": " + std::strerror(error));
  }
};

inline std::uint32_t crc32(std::string_view data) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xffffffffu;
  for (char ch : data) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xffu] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

class ZipBuilder {
 public:
  ZipBuilder& add(std::string name, std::string payload, EntryOptions options = {}) {
    const std::uint64_t size = payload.size();
    entries_.push_back({std::move(name), std::move(payload), size, false, std::move(options)});
    return *this;
  }

  // A payload of `size` zero bytes that is declared but not materialised (see ZipImage).
  ZipBuilder& add_hole(std::string name, std::uint64_t size, EntryOptions options = {}) {
    entries_.push_back({std::move(name), {}, size, true, std::move(options)});
    return *this;
  }

  std::string build(const BuildOptions& options = {}) { return build_image(options).bytes(); }

  ZipImage build_image(const BuildOptions& options = {}) {
    Writer out;
    layout_ = {};
    out.put(options.prefix);
    std::vector<std::string> central;
    for (const Entry& e : entries_) central.push_back(write_local(out, e));

    layout_.cd_offset = out.offset();
    for (const std::string& header : central) out.put(header);
    layout_.cd_size = out.offset() - layout_.cd_offset;

    const std::uint64_t count = options.entry_count.value_or(entries_.size());
    const std::uint64_t cd_size = options.cd_size.value_or(layout_.cd_size);
    const std::uint64_t cd_offset = options.cd_offset.value_or(layout_.cd_offset);
    if (options.zip64) {
      layout_.zip64_record_offset = out.offset();
      std::string record;
      le(record, options.zip64_record_signature, 4);
      le(record, 44, 8);
      le(record, 0x031e, 2);  // made by: unix, 3.0 (as miniz)
      le(record, 45, 2);
      le(record, options.disk_number, 4);
      le(record, 0, 4);
      le(record, count, 8);
      le(record, count, 8);
      le(record, cd_size, 8);
      le(record, cd_offset, 8);
      out.put(record);

      layout_.locator_offset = out.offset();
      std::string locator;
      le(locator, options.locator_signature, 4);
      le(locator, 0, 4);
      le(locator, options.zip64_record_offset.value_or(layout_.zip64_record_offset), 8);
      le(locator, options.locator_disks, 4);
      out.put(locator);
    }

    layout_.eocd_offset = out.offset();
    const bool saturate = options.saturate_classic;
    const std::uint64_t classic_count = options.classic_entry_count.value_or(
        saturate ? 0xffff : std::min<std::uint64_t>(count, 0xffff));
    std::string eocd;
    le(eocd, options.eocd_signature, 4);
    le(eocd, options.disk_number, 2);
    le(eocd, 0, 2);
    le(eocd, classic_count, 2);
    le(eocd, classic_count, 2);
    le(eocd, saturate ? 0xffffffff : std::min<std::uint64_t>(cd_size, 0xffffffff), 4);
    le(eocd, saturate ? 0xffffffff : std::min<std::uint64_t>(cd_offset, 0xffffffff), 4);
    le(eocd, options.comment_length.value_or(static_cast<std::uint16_t>(options.comment.size())),
       2);
    out.put(eocd);
    out.put(options.comment);

    layout_.size = out.offset();
    return std::move(out).image();
  }

  const ZipLayout& layout() const noexcept { return layout_; }

 private:
  struct Entry {
    std::string name;
    std::string payload;
    std::uint64_t size;
    bool hole;
    EntryOptions options;
  };

  class Writer {
   public:
    std::uint64_t offset() const noexcept { return offset_; }
    void put(std::string_view bytes) {
      if (image_.pieces.empty() || piece_end_ != offset_) image_.pieces.emplace_back(offset_, "");
      image_.pieces.back().second.append(bytes);
      offset_ += bytes.size();
      piece_end_ = offset_;
    }
    void skip(std::uint64_t length) { offset_ += length; }
    ZipImage image() && {
      image_.size = offset_;
      return std::move(image_);
    }

   private:
    ZipImage image_;
    std::uint64_t offset_ = 0;
    std::uint64_t piece_end_ = 0;
  };

  static void le(std::string& out, std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
  }

  // Writes the local header, payload and descriptor; returns the matching central header.
  std::string write_local(Writer& out, const Entry& e) {
    const EntryOptions& o = e.options;
    const std::uint64_t header_offset = out.offset();
    const std::uint64_t size = o.size.value_or(e.size);
    const std::uint64_t compressed_size = o.compressed_size.value_or(e.size);
    const std::uint32_t crc = o.crc32.value_or(e.hole ? 0 : crc32(e.payload));
    // As miniz: empty payloads get no descriptor, so no bit 3 either.
    const bool descriptor = o.data_descriptor && e.size > 0;
    const auto flags = static_cast<std::uint16_t>(o.flags | (descriptor ? 0x0008 : 0));

    std::string extra;
    if (o.zip64_local) {
      le(extra, 0x0001, 2);
      le(extra, 16, 2);
      le(extra, size, 8);
      le(extra, compressed_size, 8);
    }
    extra += o.local_extra;
    if (o.align > 0) {
      const std::uint64_t start = header_offset + 30 + e.name.size() + extra.size() + 4;
      const std::uint64_t pad = (o.align - start % o.align) % o.align;
      le(extra, 0x4246, 2);  // "FB", as torch writes it
      le(extra, pad, 2);
      extra.append(pad, 'Z');
    }

    auto local32 = [&](std::uint64_t value) {
      if (descriptor) return std::uint64_t{0};
      return o.zip64_local ? 0xffffffff : std::min<std::uint64_t>(value, 0xffffffff);
    };
    std::string local;
    le(local, o.local_signature, 4);
    le(local, o.zip64_local ? 45 : 20, 2);
    le(local, flags, 2);
    le(local, o.method, 2);
    le(local, 0, 4);  // DOS time and date
    le(local, descriptor ? 0 : crc, 4);
    le(local, local32(compressed_size), 4);
    le(local, local32(size), 4);
    le(local, e.name.size(), 2);
    le(local, extra.size(), 2);
    local += e.name;
    local += extra;
    out.put(local);
    layout_.header_offsets.push_back(header_offset);
    layout_.data_offsets.push_back(out.offset());
    if (e.hole) {
      out.skip(e.size);
    } else {
      out.put(e.payload);
    }
    if (descriptor) {
      std::string record;
      const int width = o.zip64_local ? 8 : 4;
      le(record, 0x08074b50, 4);
      le(record, crc, 4);
      le(record, compressed_size, width);
      le(record, size, width);
      out.put(record);
    }

    const std::uint64_t declared_offset = o.header_offset.value_or(header_offset);
    unsigned moved = o.zip64_central;
    if (size >= 0xffffffff) moved |= zip64_size;
    if (compressed_size >= 0xffffffff) moved |= zip64_compressed_size;
    if (declared_offset >= 0xffffffff) moved |= zip64_header_offset;
    std::string central_extra;
    if (moved != 0 && !o.omit_zip64_extra) {
      std::string body;
      if ((moved & zip64_size) != 0) le(body, size, 8);
      if ((moved & zip64_compressed_size) != 0) le(body, compressed_size, 8);
      if ((moved & zip64_header_offset) != 0) le(body, declared_offset, 8);
      if ((moved & zip64_disk) != 0) le(body, o.disk, 4);
      le(central_extra, 0x0001, 2);
      le(central_extra, body.size(), 2);
      central_extra += body;
    }
    central_extra += o.central_extra;
    auto central32 = [&](std::uint64_t value, Zip64Field field) {
      return (moved & field) != 0 ? 0xffffffff : value;
    };

    std::string central;
    le(central, o.central_signature, 4);
    le(central, 0x031e, 2);  // made by
    le(central, moved != 0 || o.zip64_local ? 45 : 20, 2);
    le(central, flags, 2);
    le(central, o.method, 2);
    le(central, 0, 4);  // DOS time and date
    le(central, crc, 4);
    le(central, central32(compressed_size, zip64_compressed_size), 4);
    le(central, central32(size, zip64_size), 4);
    le(central, o.central_name_length.value_or(static_cast<std::uint16_t>(e.name.size())), 2);
    le(central, central_extra.size(), 2);
    le(central, o.comment.size(), 2);
    le(central, (moved & zip64_disk) != 0 ? 0xffff : o.disk, 2);
    le(central, 0, 2);  // internal attributes
    le(central, 0, 4);  // external attributes
    le(central, central32(declared_offset, zip64_header_offset), 4);
    central += e.name;
    central += central_extra;
    central += o.comment;
    return central;
  }

  std::vector<Entry> entries_;
  ZipLayout layout_;
};

}  // namespace ckptfs::test
