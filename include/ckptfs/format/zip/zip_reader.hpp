// SPDX-License-Identifier: MIT
// ZIP container reader: EOCD, ZIP64 locator and record, central directory, local headers.
// Produces the absolute payload offset of every entry; reads no payload.
#pragma once

#include <ckptfs/base/hash.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <atomic>
#include <memory>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ckptfs {

struct ZipEntry {
  std::string name;                   // as stored in the central directory (raw bytes)
  std::uint64_t header_offset = 0;    // absolute offset of the local file header
  std::uint64_t data_offset = 0;      // absolute offset of the payload: header + 30 + name + extra;
                                      // 0 until located (ZipLimits::defer_local_headers)
  std::uint64_t limit = 0;            // the payload must end by here: the next header, or the
  bool limit_is_directory = false;    // central directory
  std::uint64_t compressed_size = 0;  // bytes of payload in the file
  std::uint64_t size = 0;             // uncompressed size (== compressed_size when stored)
  std::uint16_t method = 0;           // 0 = stored, 8 = deflate, ...
  std::uint16_t flags = 0;            // general purpose bits; bit 0 = encrypted
  std::uint32_t crc32 = 0;            // as the central directory records it

  bool stored() const noexcept { return method == 0 && (flags & 1) == 0; }
};

struct ZipLimits {
  // Read no local header: every entry's data_offset is found later by locate_entry(), on first
  // use. For remote sources, where each header would be a request of its own at mount.
  bool defer_local_headers = false;
  std::uint64_t max_entries = 4'000'000;             // more is refused as a zip bomb
  std::uint64_t max_central_directory = 1ull << 30;  // bytes
};

// A validated ZIP archive. Construction checks, and throws Error(bad_zip) naming the problem:
//  - an EOCD within the last 65,557 bytes; when the ZIP64 locator is present (torch always
//    writes it) the ZIP64 EOCD it points to, whose counts and offsets take precedence;
//  - the central directory lies inside the file, before the EOCD, and holds exactly the number
//    of entries both records declare (no more, no less), each with a valid signature;
//  - ZIP64 extra fields supply each saturated (0xFFFFFFFF) size or offset;
//  - each local header lies inside the file with a valid signature; payload = header + 30 +
//    name length + extra length *of the local header* (torch pads that extra to align data);
//  - every [local header, end of payload) lies inside the file, before the central directory,
//    and no two entries overlap;
//  - a stored entry has compressed_size == size.
// Multi-disk archives are refused. Compressed or encrypted entries are kept (method/flags), so
// that the caller can name the record it cannot serve. Duplicate names are allowed; find()
// returns the first, as torch does.
class ZipArchive {
 public:
  ZipArchive(const ByteSource& source, const ZipLimits& limits = {});

  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  const ZipEntry* find(std::string_view name) const;
  std::uint64_t central_directory_offset() const noexcept { return cd_offset_; }

 private:
  std::vector<ZipEntry> entries_;
  TextMap<std::size_t> first_by_name_;
  std::uint64_t cd_offset_ = 0;
};

// True when the source starts with a local file header signature ("PK\3\4").
bool looks_like_zip(const ByteSource& source);

// The payload offset of `entry` (of a ZipArchive of `source`), from its local header: one read,
// checked as the archive checks every header when it does not defer them (signature; payload
// inside the file, before entry.limit). Throws Error(bad_zip) naming the problem, or what
// ByteSource::read throws.
std::uint64_t locate_entry(const ByteSource& source, const ZipEntry& entry);

// Where `entry`'s payload is: its data_offset, or, when its local header was deferred (offset
// 0: a payload is never at 0), located now by locate_entry().
inline std::uint64_t payload_offset(const ByteSource& source, const ZipEntry& entry) {
  return entry.data_offset != 0 ? entry.data_offset : locate_entry(source, entry);
}

// Reads stored `entry` whole (of a ZipArchive of `source`) and throws Error(bad_checkpoint)
// ("record NAME: its N bytes do not match the CRC-32 its zip records ...: the file is corrupt")
// when they do not match the CRC-32 its central directory records. A record whose CRC is 0 and
// that is not empty is not checked (torch writes 0 when told not to compute CRCs). For records
// read whole anyway (a pickle at mount).
void check_record_crc(const ByteSource& source, const ZipEntry& entry);

// A StorageLocator over records of a zip whose local headers were deferred: record i's offset is
// located on first use and remembered. Keeps a reference to `source`, which must outlive it.
class ZipLocator final : public StorageLocator {
 public:
  ZipLocator(const ByteSource& source, std::vector<ZipEntry> records);
  std::uint64_t data_offset(std::uint32_t index) const override;
  std::optional<std::uint64_t> located(std::uint32_t index) const noexcept override;
  // From its local header to the next header (or the central directory).
  std::pair<std::uint64_t, std::uint64_t> span(std::uint32_t index) const noexcept override;

 private:
  const ByteSource& source_;
  std::vector<ZipEntry> records_;
  mutable std::unique_ptr<std::atomic<std::uint64_t>[]> offsets_;  // 0: not located yet
};

}  // namespace ckptfs
