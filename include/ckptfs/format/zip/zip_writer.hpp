// SPDX-License-Identifier: MIT
// Writes ZIP archives as torch.save does (miniz, stored): the layout planned from the record
// names and sizes alone, the bytes of every header and trailer, and a streaming writer.
//
// The layout, exactly as miniz writes it for torch (format notes §1.2):
//   per record: local header [sig, version 0, flags 0x0808 (0x0800 when empty), stored, time and
//               date 0, CRC and sizes 0, name, extra: zip64 field when the payload is 4 GiB - 1
//               or more (usize, csize 0) and/or the header starts at 4 GiB - 1 or more (header
//               offset), then 'FB' padding of 'Z's so that the payload starts at a multiple of
//               the alignment]
//               payload
//               data descriptor [PK\7\8, CRC, sizes: 32-bit, or 64-bit when the local header has
//               a zip64 field], absent for an empty payload
//   then the central directory (one header per record, its CRC and sizes, 0xFFFFFFFF and a
//   zip64 field for what does not fit), the zip64 end record and its locator (always, as torch
//   writes them), and the end record.
// Sizes and offsets never depend on a CRC: only the data descriptors and the central directory
// hold CRCs, so a virtual file knows its size and every payload offset before reading a byte.
//
// A virtual file served from a plan:
//   ZipPlan plan({{"tensor/data.pkl", pkl.size()}, {"tensor/data/0", nbytes}, ...});
//   for (const ZipSegment& s : plan.segments())
//     header:     plan.local_header(s.record)             (fixed bytes)
//     payload:    the record's bytes (in memory, or a range of the checkpoint)
//     descriptor: plan.data_descriptor(s.record, crcs[s.record])   once that CRC is known
//     trailer:    plan.trailer(crcs)                                once every CRC is known
#pragma once

#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

struct ZipRecordSpec {
  std::string name;        // as stored: "archive/data/0" (at most 65,535 bytes)
  std::uint64_t size = 0;  // payload bytes
};

struct ZipPlanOptions {
  // Every payload starts at a multiple of this (torch: 64; from 2.7 its .storage_alignment).
  // A power of two from 1 to 32,768; 1 still writes an empty 'FB' field, as torch does.
  std::uint32_t alignment = 64;
};

enum class ZipSegmentKind : std::uint8_t {
  local_header,     // depends on nothing but the plan
  payload,          // the record's own bytes, supplied by the caller
  data_descriptor,  // holds the record's CRC; none for an empty record
  trailer,          // central directory and end records: holds every record's CRC
};

struct ZipSegment {
  ZipSegmentKind kind = ZipSegmentKind::local_header;
  std::uint32_t record = 0;  // for every kind but trailer
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

struct ZipRecordLayout {
  std::uint64_t header_offset = 0;
  std::uint64_t data_offset = 0;  // header_offset + local header size; a multiple of alignment
  std::uint64_t size = 0;
  std::uint32_t header_size = 0;      // 30 + name + extra
  std::uint32_t descriptor_size = 0;  // 0, 16 or 24
  bool zip64_local = false;           // the local header has a zip64 field (64-bit descriptor)
};

// The layout of an archive, computed from the records' names and sizes (O(records) memory).
// Immutable after construction; safe to share between threads.
class ZipPlan {
 public:
  // Throws Error(unsupported) for a name longer than 65,535 bytes, an empty name, more than
  // 4,294,967,294 records (miniz's limit), or a bad alignment.
  explicit ZipPlan(std::vector<ZipRecordSpec> records, ZipPlanOptions options = {});

  std::uint64_t size() const noexcept { return size_; }
  std::size_t record_count() const noexcept { return records_.size(); }
  const ZipRecordSpec& record(std::size_t i) const { return records_.at(i); }
  const ZipRecordLayout& layout(std::size_t i) const { return layouts_.at(i); }
  std::uint64_t trailer_offset() const noexcept { return trailer_offset_; }
  std::uint64_t central_directory_size() const noexcept { return cd_size_; }

  // The whole file in order: per record its local header, payload (if any) and descriptor (if
  // any), then the trailer. Empty segments are left out.
  std::vector<ZipSegment> segments() const;

  // The bytes of the segments. `crc` and `crcs` (one per record, in order) are the CRC-32s of
  // the payloads. Throw std::out_of_range for a bad record index, std::invalid_argument when
  // crcs.size() != record_count().
  std::string local_header(std::size_t record) const;
  std::string data_descriptor(std::size_t record, std::uint32_t crc) const;
  std::string trailer(std::span<const std::uint32_t> crcs) const;

 private:
  std::vector<ZipRecordSpec> records_;
  std::vector<ZipRecordLayout> layouts_;
  ZipPlanOptions options_;
  std::uint64_t trailer_offset_ = 0;
  std::uint64_t cd_size_ = 0;
  std::uint64_t size_ = 0;
};

// Writes a plan front to back into a sink, payloads supplied by the caller in order and their
// CRCs computed on the way: what `pack` needs, in O(records) memory (payloads never held).
//
//   ZipStreamWriter out(plan, [&](std::string_view b) { write_all(fd, b); });
//   out.begin_record(0); out.write(pkl); out.end_record();
//   out.begin_record(1); while (n = pread(...)) out.write({buf, n}); out.end_record();
//   out.finish();
class ZipStreamWriter {
 public:
  using Sink = std::function<void(std::string_view)>;  // must write all of it, or throw
  ZipStreamWriter(const ZipPlan& plan, Sink sink);

  // Writes the local header of the next record; records come in plan order.
  void begin_record(std::size_t record);
  // Part of the payload. Throws std::logic_error past the planned size.
  void write(std::string_view bytes);
  // Writes the data descriptor; returns the payload's CRC. Throws std::logic_error when the
  // payload is shorter than planned.
  std::uint32_t end_record();
  // begin_record(record), write(payload), end_record().
  std::uint32_t write_record(std::size_t record, std::string_view payload);
  // After the last record: the central directory and end records.
  void finish();

  std::uint64_t offset() const noexcept { return offset_; }
  std::span<const std::uint32_t> crcs() const noexcept { return crcs_; }

 private:
  void emit(std::string_view bytes);

  const ZipPlan& plan_;
  Sink sink_;
  std::vector<std::uint32_t> crcs_;
  std::size_t next_ = 0;
  bool open_ = false;
  bool finished_ = false;
  std::uint64_t written_ = 0;  // of the open record's payload
  std::uint32_t crc_ = 0;
  std::uint64_t offset_ = 0;
};

// The CRC-32 of [offset, offset + length) of a source, read in 1 MiB pieces: the CRC of a
// payload that is a range of the checkpoint. Throws what ByteSource::read throws.
std::uint32_t crc32_of_range(const ByteSource& source, std::uint64_t offset, std::uint64_t length);

}  // namespace ckptfs
