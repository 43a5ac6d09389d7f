// SPDX-License-Identifier: MIT
// RecordChecks: the zip records of one source whose CRC-32 is known (a torch.save zip's storages,
// an .npz's stored members), checked as their bytes are read through the source.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ckptfs {

// What every message about a record that does not match its CRC-32 ends with.
inline constexpr std::string_view corrupt_file_advice =
    "the file is corrupt (copy or download it again)";

struct CheckedRecord {
  std::string name;         // its name in the zip, for messages
  std::uint32_t crc32 = 0;  // as the zip's central directory records it
  std::uint64_t size = 0;   // its bytes
  // Its first byte's offset in the source; or, for a record whose local header is read on first
  // use (a remote zip's), a bound before it (the local header's offset), `located` then saying
  // where it begins once it is known (nullopt before: no read of its bytes was made yet).
  std::uint64_t offset = 0;
  std::function<std::optional<std::uint64_t>()> located;
};

// What ByteSource::read() and lend() tell it of every read (ByteSource::check_records()), each
// record is checked from its first byte on:
//   - the bytes read in order from its start carry its CRC on: a read that begins within what was
//     checked so far and ends past it checks what is new;
//   - reads a little past that (the kernel's readahead sends them out of order, threads serve
//     them in parallel) are kept as checked ranges until the gap before them is read: at most
//     max_ahead of them, within `reach` bytes of the checked start (the nearest kept);
//   - when all that is left unread of it is at most max_filled bytes (an .npz member's .npy
//     header, which no view reads; a view that leaves a few bytes out), the check reads them;
//   - once all its bytes are checked it is sound or corrupt, for good. The read that finds it
//     corrupt, and every read of its bytes after that, throws Error(bad_checkpoint) naming the
//     record and both CRCs (the caller names the source).
// So any read of a whole record from its start to its end, in order or nearly (cp, np.load,
// torch.load of a view, pack), ends in that error when the record is corrupt, and no read of a
// record already found corrupt returns its bytes. Reads elsewhere are not checked and cost
// nothing but a lookup. A read that is not made through read() (spliced from the descriptor,
// copied in the kernel) asks needs_read() first. Thread-safe.
class RecordChecks {
 public:
  static constexpr std::size_t max_ahead = 16;
  static constexpr std::uint64_t reach = std::uint64_t{64} << 20;
  static constexpr std::uint64_t max_filled = std::uint64_t{128} << 10;

  // `records` do not overlap (a zip's); any order.
  explicit RecordChecks(std::vector<CheckedRecord> records);
  ~RecordChecks();
  RecordChecks(const RecordChecks&) = delete;
  RecordChecks& operator=(const RecordChecks&) = delete;

  std::size_t size() const noexcept { return records_.size(); }

  // How the check reads what is left of a record: the source's own read, without the checks.
  using ReadRest = std::function<void(std::uint64_t offset, std::span<std::byte> out)>;

  // `bytes` were read at `offset` of the source: carries the checks of the records they hold on.
  // Throws Error(bad_checkpoint) when one of them is, or is now found, corrupt.
  void observe(std::uint64_t offset, std::span<const std::byte> bytes, const ReadRest& read) const;
  // Whether bytes [offset, offset + length) would carry a check on if they were read (so must be
  // read with read()); throws Error(bad_checkpoint) when they hold bytes of a corrupt record.
  bool needs_read(std::uint64_t offset, std::uint64_t length) const;
  // Checks now each record [offset, offset + length) overlaps, whole, reading what was not read
  // of it; throws Error(bad_checkpoint) when one is corrupt, and what reading throws.
  void verify(std::uint64_t offset, std::uint64_t length, const ReadRest& read) const;

  // For tests: whether record i (in offset order) was found sound, or corrupt.
  enum class Verdict : std::uint8_t { unknown, sound, corrupt };
  Verdict verdict(std::size_t i) const noexcept;

  // At most this many ranges kept past the checked starts of all its records at once (ranges
  // past it are not kept: their bytes are checked when read again).
  static constexpr std::size_t max_ahead_in_all = 8192;

 private:
  // What was read of a record being checked: its first `prefix` bytes, whose CRC is `crc`, and
  // ranges past them, each with its CRC, sorted and apart.
  struct Ahead {
    std::uint64_t begin = 0;
    std::uint64_t end = 0;
    std::uint32_t crc = 0;
  };
  struct Progress {
    std::uint64_t prefix = 0;
    std::uint32_t crc = 0;
    std::vector<Ahead> ahead;
  };
  // Calls `each(i, begin)` for every record overlapping [offset, offset + length) whose first
  // byte is known (`begin`).
  template <typename Each>
  void for_each_record(std::uint64_t offset, std::uint64_t length, Each each) const;
  // Takes bytes [at, at + bytes.size()) of record i into its progress. Called locked.
  void take(std::size_t i, Progress& p, std::uint64_t at, std::span<const std::byte> bytes) const;
  // Reads what is left of record i (at `begin` of the source) when that is at most `limit`
  // bytes, and decides. Called locked.
  void fill(const ReadRest& read, std::size_t i, std::uint64_t begin, Progress& p,
            std::uint64_t limit) const;
  void decide(std::size_t i, const Progress& p) const;
  [[noreturn]] void fail(std::size_t i) const;

  std::vector<CheckedRecord> records_;  // by offset
  mutable std::unique_ptr<std::atomic<Verdict>[]> verdicts_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::size_t, Progress> progress_;    // records being checked
  mutable std::unordered_map<std::size_t, std::uint32_t> found_;  // corrupt ones: their CRC
  mutable std::size_t ahead_in_all_ = 0;
};

}  // namespace ckptfs
