// SPDX-License-Identifier: MIT
// The ZIP layout torch.save (miniz) writes, its header bytes, and the streaming writer over it.
#include <ckptfs/format/zip/zip_writer.hpp>

#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <utility>

namespace ckptfs {
namespace {

constexpr std::uint64_t max32 = 0xffffffffu;  // miniz's MZ_UINT32_MAX: a field saturated
constexpr std::uint32_t local_header_fixed = 30;
constexpr std::uint32_t central_header_fixed = 46;
constexpr std::uint64_t zip64_end_size = 56;
constexpr std::uint64_t zip64_locator_size = 20;
constexpr std::uint64_t end_size = 22;
constexpr std::uint16_t flag_descriptor = 0x0008;
constexpr std::uint16_t flag_utf8 = 0x0800;

void le(std::string& out, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// miniz writes a zip64 field where a value reaches 0xFFFFFFFF (not only past it).
bool needs_zip64(std::uint64_t value) { return value >= max32; }

std::uint16_t flags(std::uint64_t size) {
  return static_cast<std::uint16_t>(flag_utf8 | (size > 0 ? flag_descriptor : 0));
}

// The central directory's zip64 field: usize and csize when the size saturates, the header
// offset when it does; empty when neither.
std::string central_zip64_field(std::uint64_t size, std::uint64_t header_offset) {
  std::string body;
  if (needs_zip64(size)) {
    le(body, size, 8);
    le(body, size, 8);  // stored: compressed size == size
  }
  if (needs_zip64(header_offset)) le(body, header_offset, 8);
  if (body.empty()) return body;
  std::string field;
  le(field, 0x0001, 2);
  le(field, body.size(), 2);
  return field + body;
}

}  // namespace

ZipPlan::ZipPlan(std::vector<ZipRecordSpec> records, ZipPlanOptions options)
    : records_(std::move(records)), options_(options) {
  const std::uint32_t align = options_.alignment;
  if (align == 0 || align > 32768 || (align & (align - 1)) != 0) {
    throw Error(ExitCode::unsupported,
                fmt::format("zip alignment {} is not a power of two from 1 to 32768", align));
  }
  if (records_.size() >= max32) {
    throw Error(ExitCode::unsupported,
                fmt::format("{} records are more than a zip can hold", records_.size()));
  }
  layouts_.reserve(records_.size());
  std::uint64_t at = 0;
  for (const ZipRecordSpec& r : records_) {
    if (r.name.empty() || r.name.size() > 0xffff) {
      throw Error(ExitCode::unsupported,
                  fmt::format("zip record name of {} bytes (1 to 65535 allowed)", r.name.size()));
    }
    ZipRecordLayout l;
    l.header_offset = at;
    l.size = r.size;
    l.zip64_local = needs_zip64(r.size) || needs_zip64(at);
    std::uint64_t zip64_extra = 0;
    if (l.zip64_local) {
      zip64_extra = 4 + (needs_zip64(r.size) ? 16 : 0) + (needs_zip64(at) ? 8 : 0);
    }
    // torch's getPadding(): the 'FB' field's own 4 bytes count, its body pads to the alignment.
    const std::uint64_t unpadded = at + local_header_fixed + r.name.size() + zip64_extra + 4;
    const std::uint64_t pad = (align - unpadded % align) % align;
    l.header_size =
        static_cast<std::uint32_t>(local_header_fixed + r.name.size() + zip64_extra + 4 + pad);
    l.data_offset = at + l.header_size;
    l.descriptor_size = r.size == 0 ? 0 : l.zip64_local ? 24 : 16;
    at = l.data_offset + r.size + l.descriptor_size;
    cd_size_ +=
        central_header_fixed + r.name.size() + central_zip64_field(r.size, l.header_offset).size();
    layouts_.push_back(l);
  }
  trailer_offset_ = at;
  size_ = at + cd_size_ + zip64_end_size + zip64_locator_size + end_size;
}

std::vector<ZipSegment> ZipPlan::segments() const {
  std::vector<ZipSegment> out;
  out.reserve(records_.size() * 3 + 1);
  for (std::size_t i = 0; i < records_.size(); ++i) {
    const ZipRecordLayout& l = layouts_[i];
    const auto record = static_cast<std::uint32_t>(i);
    out.push_back({ZipSegmentKind::local_header, record, l.header_offset, l.header_size});
    if (l.size > 0) out.push_back({ZipSegmentKind::payload, record, l.data_offset, l.size});
    if (l.descriptor_size > 0) {
      out.push_back(
          {ZipSegmentKind::data_descriptor, record, l.data_offset + l.size, l.descriptor_size});
    }
  }
  out.push_back({ZipSegmentKind::trailer, 0, trailer_offset_, size_ - trailer_offset_});
  return out;
}

std::string ZipPlan::local_header(std::size_t record) const {
  const ZipRecordSpec& r = records_.at(record);
  const ZipRecordLayout& l = layouts_.at(record);
  std::string extra;
  if (l.zip64_local) {
    // miniz's local zip64 field is its own: the size and a compressed size of 0 (not known yet
    // when it writes the header), and/or the header offset. Readers take sizes from the central
    // directory.
    std::string body;
    if (needs_zip64(l.size)) {
      le(body, l.size, 8);
      le(body, 0, 8);
    }
    if (needs_zip64(l.header_offset)) le(body, l.header_offset, 8);
    le(extra, 0x0001, 2);
    le(extra, body.size(), 2);
    extra += body;
  }
  const std::size_t pad = l.header_size - local_header_fixed - r.name.size() - extra.size() - 4;
  le(extra, 0x4246, 2);  // "FB"
  le(extra, pad, 2);
  extra.append(pad, 'Z');

  std::string out;
  out.reserve(l.header_size);
  le(out, 0x04034b50, 4);
  le(out, 0, 2);  // version needed: miniz writes 0 for stored records
  le(out, flags(l.size), 2);
  le(out, 0, 2);  // method: stored
  le(out, 0, 4);  // DOS time and date: torch builds miniz without time
  le(out, 0, 4);  // CRC: in the descriptor (bit 3)
  le(out, 0, 4);  // compressed size
  le(out, 0, 4);  // size
  le(out, r.name.size(), 2);
  le(out, extra.size(), 2);
  out += r.name;
  out += extra;
  return out;
}

std::string ZipPlan::data_descriptor(std::size_t record, std::uint32_t crc) const {
  const ZipRecordLayout& l = layouts_.at(record);
  std::string out;
  if (l.descriptor_size == 0) return out;
  const int width = l.zip64_local ? 8 : 4;
  le(out, 0x08074b50, 4);
  le(out, crc, 4);
  le(out, l.size, width);  // compressed size
  le(out, l.size, width);
  return out;
}

std::string ZipPlan::trailer(std::span<const std::uint32_t> crcs) const {
  if (crcs.size() != records_.size()) {
    throw std::invalid_argument(
        fmt::format("ZipPlan::trailer: {} CRCs for {} records", crcs.size(), records_.size()));
  }
  std::string out;
  out.reserve(size_ - trailer_offset_);
  for (std::size_t i = 0; i < records_.size(); ++i) {
    const ZipRecordSpec& r = records_[i];
    const ZipRecordLayout& l = layouts_[i];
    const std::string extra = central_zip64_field(l.size, l.header_offset);
    le(out, 0x02014b50, 4);
    le(out, 0, 2);  // version made by: miniz leaves it 0
    le(out, 0, 2);  // version needed
    le(out, flags(l.size), 2);
    le(out, 0, 2);  // stored
    le(out, 0, 4);  // time and date
    le(out, crcs[i], 4);
    le(out, std::min(l.size, max32), 4);
    le(out, std::min(l.size, max32), 4);
    le(out, r.name.size(), 2);
    le(out, extra.size(), 2);
    le(out, 0, 2);  // comment length
    le(out, 0, 2);  // disk
    le(out, 0, 2);  // internal attributes
    le(out, 0, 4);  // external attributes
    le(out, std::min(l.header_offset, max32), 4);
    out += r.name;
    out += extra;
  }
  // miniz gives an archive without records a central directory at offset 0.
  const std::uint64_t cd_offset = records_.empty() ? 0 : trailer_offset_;
  const std::uint64_t count = records_.size();
  const std::uint64_t zip64_end_offset = trailer_offset_ + cd_size_;
  le(out, 0x06064b50, 4);
  le(out, zip64_end_size - 12, 8);  // the record's size after this field
  le(out, 0x031e, 2);               // made by: Unix, 3.0 (miniz)
  le(out, 45, 2);                   // needed: 4.5
  le(out, 0, 4);                    // this disk
  le(out, 0, 4);                    // disk of the central directory
  le(out, count, 8);
  le(out, count, 8);
  le(out, cd_size_, 8);
  le(out, cd_offset, 8);
  le(out, 0x07064b50, 4);
  le(out, 0, 4);
  le(out, zip64_end_offset, 8);
  le(out, 1, 4);  // disks
  le(out, 0x06054b50, 4);
  le(out, 0, 2);
  le(out, 0, 2);
  le(out, std::min<std::uint64_t>(count, 0xffff), 2);
  le(out, std::min<std::uint64_t>(count, 0xffff), 2);
  le(out, std::min(cd_size_, max32), 4);
  le(out, std::min(cd_offset, max32), 4);
  le(out, 0, 2);  // comment length
  return out;
}

ZipStreamWriter::ZipStreamWriter(const ZipPlan& plan, Sink sink)
    : plan_(plan), sink_(std::move(sink)) {
  crcs_.reserve(plan.record_count());
}

void ZipStreamWriter::emit(std::string_view bytes) {
  if (bytes.empty()) return;
  sink_(bytes);
  offset_ += bytes.size();
}

void ZipStreamWriter::begin_record(std::size_t record) {
  if (open_ || finished_ || record != next_ || record >= plan_.record_count()) {
    throw std::logic_error(
        fmt::format("ZipStreamWriter: record {} out of order (next {})", record, next_));
  }
  emit(plan_.local_header(record));
  open_ = true;
  written_ = 0;
  crc_ = 0;
}

void ZipStreamWriter::write(std::string_view bytes) {
  if (!open_) throw std::logic_error("ZipStreamWriter: payload outside a record");
  if (bytes.size() > plan_.layout(next_).size - written_) {
    throw std::logic_error(fmt::format("ZipStreamWriter: record {} longer than its {} bytes", next_,
                                       plan_.layout(next_).size));
  }
  crc_ = crc32(crc_, bytes.data(), bytes.size());
  written_ += bytes.size();
  emit(bytes);
}

std::uint32_t ZipStreamWriter::end_record() {
  if (!open_) throw std::logic_error("ZipStreamWriter: no record to end");
  if (written_ != plan_.layout(next_).size) {
    throw std::logic_error(fmt::format("ZipStreamWriter: record {} has {} of its {} bytes", next_,
                                       written_, plan_.layout(next_).size));
  }
  emit(plan_.data_descriptor(next_, crc_));
  crcs_.push_back(crc_);
  open_ = false;
  ++next_;
  return crc_;
}

std::uint32_t ZipStreamWriter::write_record(std::size_t record, std::string_view payload) {
  begin_record(record);
  write(payload);
  return end_record();
}

void ZipStreamWriter::finish() {
  if (open_ || finished_ || next_ != plan_.record_count()) {
    throw std::logic_error(fmt::format("ZipStreamWriter: finish() after {} of {} records", next_,
                                       plan_.record_count()));
  }
  emit(plan_.trailer(crcs_));
  finished_ = true;
}

std::uint32_t crc32_of_range(const ByteSource& source, std::uint64_t offset, std::uint64_t length) {
  constexpr std::size_t piece = std::size_t{1} << 20;
  std::string buffer(static_cast<std::size_t>(std::min<std::uint64_t>(length, piece)), '\0');
  std::uint32_t crc = 0;
  while (length > 0) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(length, piece));
    source.read(offset, std::as_writable_bytes(std::span(buffer.data(), n)));
    crc = crc32(crc, buffer.data(), n);
    offset += n;
    length -= n;
  }
  return crc;
}

}  // namespace ckptfs
