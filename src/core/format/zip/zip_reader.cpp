// SPDX-License-Identifier: MIT
// ZipArchive: finds the end records, walks the central directory, locates and checks payloads.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>
#include <ckptfs/source/record_checks.hpp>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace ckptfs {
namespace {

constexpr std::uint32_t local_signature = 0x04034b50;
constexpr std::uint32_t central_signature = 0x02014b50;
constexpr std::uint32_t eocd_signature = 0x06054b50;
constexpr std::uint32_t zip64_eocd_signature = 0x06064b50;
constexpr std::uint32_t zip64_locator_signature = 0x07064b50;

constexpr std::size_t local_header_size = 30;
constexpr std::size_t central_header_size = 46;
constexpr std::size_t eocd_size = 22;
constexpr std::size_t zip64_eocd_size = 56;
constexpr std::size_t zip64_locator_size = 20;
constexpr std::size_t max_comment_size = 65535;
constexpr std::uint16_t zip64_extra_id = 0x0001;
constexpr std::uint16_t saturated16 = 0xffff;
constexpr std::uint32_t saturated32 = 0xffffffff;

// Local headers are read in windows spanning several headers: torch files interleave small
// headers with payloads, so one read usually covers many entries. A gap wider than
// max_window_gap costs more to copy than a second pread would, so it starts a new window.
constexpr std::uint64_t max_window_size = 1 << 20;
constexpr std::uint64_t max_window_gap = 8 << 10;

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(ExitCode::bad_zip, fmt::format(format, std::forward<Args>(args)...));
}

std::uint64_t read_le(std::string_view bytes, std::size_t at, std::size_t width) {
  std::uint64_t value = 0;
  for (std::size_t i = width; i-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  }
  return value;
}
std::uint16_t u16(std::string_view bytes, std::size_t at) {
  return static_cast<std::uint16_t>(read_le(bytes, at, 2));
}
std::uint32_t u32(std::string_view bytes, std::size_t at) {
  return static_cast<std::uint32_t>(read_le(bytes, at, 4));
}
std::uint64_t u64(std::string_view bytes, std::size_t at) { return read_le(bytes, at, 8); }

// The payload offset of `entry` from its 30-byte local `header`, checked: the signature, and a
// payload that ends by entry.limit (the next record's header, or the central directory). One rule
// and one message whether headers are read at open or on first use.
std::uint64_t payload_after_header(std::string_view header, const ZipEntry& entry) {
  if (u32(header, 0) != local_signature) {
    fail("bad local header signature for {} at offset {}", quote(entry.name), entry.header_offset);
  }
  // The local extra, not the central one: torch pads it to align the payload.
  const std::uint64_t data_offset =
      entry.header_offset + local_header_size + u16(header, 26) + u16(header, 28);
  if (data_offset > entry.limit || entry.compressed_size > entry.limit - data_offset) {
    fail("{} ({} bytes at offset {}) runs past {} at {}", quote(entry.name), entry.compressed_size,
         data_offset,
         entry.limit_is_directory ? "the central directory" : "the next record's header",
         entry.limit);
  }
  return data_offset;
}

// Where and how big the central directory is, as the end records declare it.
struct Directory {
  std::uint64_t entries = 0;
  std::uint64_t size = 0;
  std::uint64_t offset = 0;
  std::uint64_t end_limit = 0;  // the first end record: the directory must end before it
};

// The fields shared by the classic and the zip64 end of central directory records.
struct EndRecord {
  std::uint64_t disk = 0;
  std::uint64_t directory_disk = 0;
  std::uint64_t disk_entries = 0;
  std::uint64_t entries = 0;
  std::uint64_t directory_size = 0;
  std::uint64_t directory_offset = 0;
};

// Reads the zip64 record the locator (just before the EOCD) points to, if there is a locator.
std::optional<std::pair<EndRecord, std::uint64_t>> read_zip64_end(const ByteSource& source,
                                                                  std::uint64_t eocd_offset) {
  if (eocd_offset < zip64_locator_size) return std::nullopt;
  const std::uint64_t locator_offset = eocd_offset - zip64_locator_size;
  const std::string locator = source.read_string(locator_offset, zip64_locator_size);
  if (u32(locator, 0) != zip64_locator_signature) return std::nullopt;

  const std::uint32_t record_disk = u32(locator, 4);
  const std::uint64_t record_offset = u64(locator, 8);
  const std::uint32_t disks = u32(locator, 16);
  if (record_disk != 0 || disks > 1) {
    fail("multi-disk archives are not supported (zip64 locator: record on disk {}, {} disks)",
         record_disk, disks);
  }
  if (record_offset > locator_offset || locator_offset - record_offset < zip64_eocd_size) {
    fail("zip64 end of central directory offset {} is not before its locator at {}", record_offset,
         locator_offset);
  }
  const std::string record = source.read_string(record_offset, zip64_eocd_size);
  if (u32(record, 0) != zip64_eocd_signature) {
    fail("no zip64 end of central directory record at offset {}, where its locator points",
         record_offset);
  }
  // The size field counts the bytes after itself: 44 fixed ones, then extensible data.
  const std::uint64_t record_size = u64(record, 4);
  if (record_size < zip64_eocd_size - 12 || record_size > locator_offset - record_offset - 12) {
    fail("zip64 end of central directory at {} declares {} bytes, but its locator is at {}",
         record_offset, record_size, locator_offset);
  }
  EndRecord end{u32(record, 16), u32(record, 20), u64(record, 24),
                u64(record, 32), u64(record, 40), u64(record, 48)};
  return std::pair{end, record_offset};
}

Directory find_directory(const ByteSource& source, const ZipLimits& limits) {
  const std::uint64_t file_size = source.size();
  if (file_size < eocd_size) fail("file is too small to be a ZIP archive ({} bytes)", file_size);

  const auto tail_size =
      static_cast<std::size_t>(std::min<std::uint64_t>(file_size, eocd_size + max_comment_size));
  const std::uint64_t tail_offset = file_size - tail_size;
  const std::string tail = source.read_string(tail_offset, tail_size);
  // Backwards, and only where the comment length reaches exactly the end of the file: a
  // signature inside the comment does not fool the scan.
  std::optional<std::size_t> found;
  for (std::size_t at = tail_size - eocd_size + 1; at-- > 0;) {
    if (u32(tail, at) == eocd_signature && u16(tail, at + 20) == tail_size - at - eocd_size) {
      found = at;
      break;
    }
  }
  if (!found) {
    // A zip's first local header is there, its end is not: the end was cut off.
    if (source.read_string(0, 4) == std::string_view("PK\x03\x04", 4)) {
      fail("no end of central directory record in the last {} bytes: {}", tail_size,
           looks_truncated);
    }
    fail("no end of central directory record in the last {} bytes", tail_size);
  }
  const std::uint64_t eocd_offset = tail_offset + *found;
  const std::string_view eocd = std::string_view(tail).substr(*found, eocd_size);
  const EndRecord classic{u16(eocd, 4),  u16(eocd, 6),  u16(eocd, 8),
                          u16(eocd, 10), u32(eocd, 12), u32(eocd, 16)};

  EndRecord end = classic;
  std::uint64_t end_limit = eocd_offset;
  if (auto zip64 = read_zip64_end(source, eocd_offset)) {
    end = zip64->first;
    end_limit = zip64->second;
    // Writers saturate the classic fields that do not fit; any other value must agree.
    const std::array<std::tuple<const char*, std::uint64_t, std::uint64_t, std::uint64_t>, 6>
        fields{{{"entry count", classic.entries, end.entries, saturated16},
                {"entries on this disk", classic.disk_entries, end.disk_entries, saturated16},
                {"disk number", classic.disk, end.disk, saturated16},
                {"central directory disk", classic.directory_disk, end.directory_disk, saturated16},
                {"central directory size", classic.directory_size, end.directory_size, saturated32},
                {"central directory offset", classic.directory_offset, end.directory_offset,
                 saturated32}}};
    for (const auto& [what, classic_value, zip64_value, saturated] : fields) {
      if (classic_value != saturated && classic_value != zip64_value) {
        fail("end of central directory declares {} {} but the zip64 record declares {}", what,
             classic_value, zip64_value);
      }
    }
  }

  if (end.disk != 0 || end.directory_disk != 0 || end.disk_entries != end.entries) {
    fail(
        "multi-disk archives are not supported (disk {}, central directory on disk {}, {} of {} "
        "entries on this disk)",
        end.disk, end.directory_disk, end.disk_entries, end.entries);
  }
  if (end.entries > limits.max_entries) {
    fail("{} entries exceed the limit of {}", end.entries, limits.max_entries);
  }
  if (end.directory_size > limits.max_central_directory) {
    fail("central directory of {} bytes exceeds the limit of {}", end.directory_size,
         limits.max_central_directory);
  }
  if (end.directory_offset > end_limit || end.directory_size > end_limit - end.directory_offset) {
    fail("central directory at offset {} ({} bytes) runs past the end records at {}",
         end.directory_offset, end.directory_size, end_limit);
  }
  // Cheap before any allocation: a huge declared count in a tiny file stops here.
  if (end.entries > end.directory_size / central_header_size) {
    fail("{} entries cannot fit in a central directory of {} bytes", end.entries,
         end.directory_size);
  }
  return {end.entries, end.directory_size, end.directory_offset, end_limit};
}

// Replaces the saturated fields of `entry` with the values of its zip64 extra field.
void apply_extra(std::string_view extra, std::uint32_t disk, ZipEntry& entry) {
  const bool need_size = entry.size == saturated32;
  const bool need_compressed_size = entry.compressed_size == saturated32;
  const bool need_offset = entry.header_offset == saturated32;
  const bool need_disk = disk == saturated16;
  bool zip64_seen = false;
  std::size_t at = 0;
  while (at < extra.size()) {
    if (extra.size() - at < 4) {
      fail("extra field of {} is cut: {} bytes left for a 4-byte field header", quote(entry.name),
           extra.size() - at);
    }
    const std::uint16_t id = u16(extra, at);
    const std::uint16_t length = u16(extra, at + 2);
    if (length > extra.size() - at - 4) {
      fail("extra field 0x{:04x} of {} declares {} bytes but only {} remain", id, quote(entry.name),
           length, extra.size() - at - 4);
    }
    if (id == zip64_extra_id && !zip64_seen) {
      zip64_seen = true;
      const std::string_view body = extra.substr(at + 4, length);
      std::size_t used = 0;
      auto take = [&](std::size_t width) {
        if (body.size() - used < width) {
          fail("zip64 extra field of {} is too short ({} bytes) for its saturated fields",
               quote(entry.name), body.size());
        }
        used += width;
        return read_le(body, used - width, width);
      };
      if (need_size) entry.size = take(8);
      if (need_compressed_size) entry.compressed_size = take(8);
      if (need_offset) entry.header_offset = take(8);
      if (need_disk) disk = static_cast<std::uint32_t>(take(4));
    }
    at += 4 + std::size_t{length};
  }
  if (!zip64_seen && (need_size || need_compressed_size || need_offset || need_disk)) {
    fail("{} has saturated sizes or offset but no zip64 extra field", quote(entry.name));
  }
  if (disk != 0) {
    fail("{} starts on disk {}: multi-disk archives are not supported", quote(entry.name), disk);
  }
}

}  // namespace

ZipArchive::ZipArchive(const ByteSource& source, const ZipLimits& limits) {
  const Directory directory = find_directory(source, limits);
  cd_offset_ = directory.offset;
  // Bounded by the limit and by the file size, both checked above.
  const std::string cd =
      source.read_string(directory.offset, static_cast<std::size_t>(directory.size));

  entries_.reserve(static_cast<std::size_t>(directory.entries));
  std::size_t at = 0;
  for (std::uint64_t index = 0; index < directory.entries; ++index) {
    if (cd.size() - at < central_header_size) {
      fail("central directory ends after {} of its {} declared entries", index, directory.entries);
    }
    if (u32(cd, at) != central_signature) {
      fail("bad central directory header signature for entry {} at offset {}", index,
           directory.offset + at);
    }
    const std::size_t name_length = u16(cd, at + 28);
    const std::size_t extra_length = u16(cd, at + 30);
    const std::size_t comment_length = u16(cd, at + 32);
    const std::size_t record_size =
        central_header_size + name_length + extra_length + comment_length;
    if (record_size > cd.size() - at) {
      fail(
          "central directory header {} at offset {} ({} name, {} extra, {} comment bytes) runs "
          "past the end of the central directory",
          index, directory.offset + at, name_length, extra_length, comment_length);
    }
    ZipEntry& entry = entries_.emplace_back();
    entry.name.assign(cd, at + central_header_size, name_length);
    entry.flags = u16(cd, at + 8);
    entry.method = u16(cd, at + 10);
    entry.crc32 = u32(cd, at + 16);
    entry.compressed_size = u32(cd, at + 20);
    entry.size = u32(cd, at + 24);
    entry.header_offset = u32(cd, at + 42);
    apply_extra(std::string_view(cd).substr(at + central_header_size + name_length, extra_length),
                u16(cd, at + 34), entry);
    if (entry.stored() && entry.compressed_size != entry.size) {
      fail("stored entry {} has compressed size {} but size {}", quote(entry.name),
           entry.compressed_size, entry.size);
    }
    at += record_size;
  }
  if (at != cd.size()) {
    fail("central directory has {} bytes left after its {} declared entries", cd.size() - at,
         directory.entries);
  }

  for (const ZipEntry& entry : entries_) {
    if (entry.header_offset > cd_offset_ || cd_offset_ - entry.header_offset < local_header_size) {
      if (entry.header_offset >= source.size()) {
        fail("local header of {} at offset {} is outside the file ({} bytes)", quote(entry.name),
             entry.header_offset, source.size());
      }
      fail("local header of {} at offset {} is not before the central directory at {}",
           quote(entry.name), entry.header_offset, cd_offset_);
    }
  }

  // Entries by header offset, stably so that messages are deterministic; torch writes them in
  // order already, which the is_sorted check turns into a linear pass.
  std::vector<std::size_t> order(entries_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  auto by_offset = [this](std::size_t a, std::size_t b) {
    return entries_[a].header_offset < entries_[b].header_offset;
  };
  if (!std::is_sorted(order.begin(), order.end(), by_offset)) {
    std::stable_sort(order.begin(), order.end(), by_offset);
  }

  // Each payload must end by the next header (in offset order), or by the central directory.
  for (std::size_t i = 0; i < order.size(); ++i) {
    ZipEntry& entry = entries_[order[i]];
    entry.limit_is_directory = i + 1 == order.size();
    entry.limit = entry.limit_is_directory ? cd_offset_ : entries_[order[i + 1]].header_offset;
  }
  if (limits.defer_local_headers) {
    first_by_name_.reserve(entries_.size());
    for (std::size_t i = 0; i < entries_.size(); ++i)
      first_by_name_.try_emplace(entries_[i].name, i);
    return;
  }

  std::string window;
  for (std::size_t first = 0; first < order.size();) {
    // Every header ends at or before cd_offset_ (checked above), so these sums cannot overflow.
    const std::uint64_t window_offset = entries_[order[first]].header_offset;
    std::uint64_t window_end = window_offset + local_header_size;
    std::size_t last = first + 1;
    for (; last < order.size(); ++last) {
      const std::uint64_t next = entries_[order[last]].header_offset;
      if (next + local_header_size - window_offset > max_window_size ||
          (next > window_end && next - window_end > max_window_gap)) {
        break;
      }
      window_end = std::max(window_end, next + local_header_size);
    }
    window.resize(static_cast<std::size_t>(window_end - window_offset));
    source.read(window_offset, std::as_writable_bytes(std::span(window)));
    for (; first < last; ++first) {
      ZipEntry& entry = entries_[order[first]];
      entry.data_offset = payload_after_header(
          std::string_view(window).substr(
              static_cast<std::size_t>(entry.header_offset - window_offset), local_header_size),
          entry);
    }
  }

  first_by_name_.reserve(entries_.size());
  for (std::size_t i = 0; i < entries_.size(); ++i) first_by_name_.try_emplace(entries_[i].name, i);
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  auto it = first_by_name_.find(name);
  return it == first_by_name_.end() ? nullptr : &entries_[it->second];
}

std::uint64_t locate_entry(const ByteSource& source, const ZipEntry& entry) {
  // The archive checked that the header lies before the central directory, inside the file.
  return payload_after_header(source.read_string(entry.header_offset, local_header_size), entry);
}

ZipLocator::ZipLocator(const ByteSource& source, std::vector<ZipEntry> records)
    : source_(source),
      records_(std::move(records)),
      offsets_(std::make_unique<std::atomic<std::uint64_t>[]>(records_.size())) {}

std::uint64_t ZipLocator::data_offset(std::uint32_t index) const {
  // A payload is never at 0 (its header comes first): 0 means "not located yet". Two threads
  // may both locate it; they find the same offset.
  std::uint64_t offset = offsets_[index].load(std::memory_order_acquire);
  if (offset == 0) {
    offset = locate_entry(source_, records_.at(index));
    offsets_[index].store(offset, std::memory_order_release);
  }
  return offset;
}

void check_record_crc(const ByteSource& source, const ZipEntry& entry) {
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  (void)source, (void)entry;
  return;  // the fuzzers' mutations must reach what the record holds
#endif
  if (entry.crc32 == 0 && entry.size != 0) return;
  const std::uint64_t at = payload_offset(source, entry);
  std::vector<std::byte> chunk(
      static_cast<std::size_t>(std::min<std::uint64_t>(entry.size, 1 << 20)));
  std::uint32_t crc = 0;
  for (std::uint64_t done = 0; done < entry.size;) {
    const auto n =
        static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), entry.size - done));
    source.read(at + done, std::span(chunk.data(), n));
    crc = crc32(crc, chunk.data(), n);
    done += n;
  }
  if (crc != entry.crc32) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("record {}: its {} bytes do not match the CRC-32 its zip records "
                            "({:08x}, they give {:08x}): {}",
                            quote(entry.name), entry.size, entry.crc32, crc, corrupt_file_advice));
  }
}

std::optional<std::uint64_t> ZipLocator::located(std::uint32_t index) const noexcept {
  const std::uint64_t offset = offsets_[index].load(std::memory_order_acquire);
  if (offset == 0) return std::nullopt;
  return offset;
}

std::pair<std::uint64_t, std::uint64_t> ZipLocator::span(std::uint32_t index) const noexcept {
  return {records_[index].header_offset, records_[index].limit};
}

bool looks_like_zip(const ByteSource& source) {
  if (source.size() < 4) return false;
  return u32(source.read_string(0, 4), 0) == local_signature;
}

}  // namespace ckptfs
