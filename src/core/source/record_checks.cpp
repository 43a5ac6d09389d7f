// SPDX-License-Identifier: MIT
// RecordChecks: each record's CRC carried on from its first byte as reads pass, ranges read a
// little ahead kept until they join, the rest read when little is left, then a verdict for good.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/source/record_checks.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace ckptfs {

RecordChecks::RecordChecks(std::vector<CheckedRecord> records) : records_(std::move(records)) {
  std::sort(records_.begin(), records_.end(),
            [](const CheckedRecord& a, const CheckedRecord& b) { return a.offset < b.offset; });
  // One record named twice (two storages of one record): checked once.
  records_.erase(std::unique(records_.begin(), records_.end(),
                             [](const CheckedRecord& a, const CheckedRecord& b) {
                               return a.offset == b.offset && !a.located && !b.located;
                             }),
                 records_.end());
  verdicts_ = std::make_unique<std::atomic<Verdict>[]>(records_.size());
  for (std::size_t i = 0; i < records_.size(); ++i) {
    // An empty record has nothing to read: its CRC is 0 or it is corrupt.
    verdicts_[i] = records_[i].size != 0    ? Verdict::unknown
                   : records_[i].crc32 == 0 ? Verdict::sound
                                            : Verdict::corrupt;
    if (verdicts_[i] == Verdict::corrupt) found_[i] = 0;
  }
}

RecordChecks::~RecordChecks() = default;

RecordChecks::Verdict RecordChecks::verdict(std::size_t i) const noexcept {
  return verdicts_[i].load();
}

template <typename Each>
void RecordChecks::for_each_record(std::uint64_t offset, std::uint64_t length, Each each) const {
  const std::uint64_t end = offset + length;  // inside a source: no overflow
  // The last record starting at or before `offset` may hold it; the ones after, up to `end`.
  auto it =
      std::upper_bound(records_.begin(), records_.end(), offset,
                       [](std::uint64_t at, const CheckedRecord& r) { return at < r.offset; });
  if (it != records_.begin()) --it;
  for (; it != records_.end() && it->offset < end; ++it) {
    std::uint64_t begin = it->offset;
    if (it->located) {
      const auto where = it->located();
      if (!where) continue;  // never read yet: these bytes are its local header's, not its own
      begin = *where;
    }
    if (begin >= end || begin + it->size <= offset) continue;
    each(static_cast<std::size_t>(it - records_.begin()), begin);
  }
}

void RecordChecks::fail(std::size_t i) const {
  std::uint32_t found = 0;
  {
    const std::lock_guard lock(mutex_);
    found = found_.at(i);
  }
  const CheckedRecord& r = records_[i];
  throw Error(ExitCode::bad_checkpoint,
              fmt::format("record {}: its {} bytes do not match the CRC-32 its zip records "
                          "({:08x}, they give {:08x}): {}",
                          quote(r.name), r.size, r.crc32, found, corrupt_file_advice));
}

void RecordChecks::take(std::size_t i, Progress& p, std::uint64_t at,
                        std::span<const std::byte> bytes) const {
  const std::uint64_t size = records_[i].size;
  const std::uint64_t a = at;
  const std::uint64_t b = at + bytes.size();
  // The gaps of what is checked within [a, b), in order, taken in order: one that begins where
  // the checked start ends carries it on; one past it is kept (within reach, room left).
  struct Piece {
    std::uint64_t begin, end;
  };
  std::vector<Piece> pieces;
  std::uint64_t gap = p.prefix;
  for (std::size_t k = 0; k <= p.ahead.size(); ++k) {
    const std::uint64_t gap_end = k < p.ahead.size() ? p.ahead[k].begin : size;
    const std::uint64_t lo = std::max(a, gap), hi = std::min(b, gap_end);
    if (lo < hi) pieces.push_back({lo, hi});
    if (k < p.ahead.size()) gap = p.ahead[k].end;
    if (gap >= b) break;
  }
  for (const Piece& piece : pieces) {
    const std::byte* data = bytes.data() + (piece.begin - at);
    const auto n = static_cast<std::size_t>(piece.end - piece.begin);
    if (piece.begin == p.prefix) {
      p.crc = crc32(p.crc, data, n);
      p.prefix = piece.end;
    } else if (piece.begin - p.prefix <= reach) {
      // Kept in order, joined to the ranges it touches; past the bounds the farthest goes.
      auto kept = p.ahead.insert(
          std::lower_bound(p.ahead.begin(), p.ahead.end(), piece.begin,
                           [](const Ahead& r, std::uint64_t begin) { return r.begin < begin; }),
          Ahead{piece.begin, piece.end, crc32(0, data, n)});
      ++ahead_in_all_;
      if (std::next(kept) != p.ahead.end() && kept->end == std::next(kept)->begin) {
        const Ahead after = *std::next(kept);
        kept->crc = crc32_combine(kept->crc, after.crc, after.end - after.begin);
        kept->end = after.end;
        p.ahead.erase(std::next(kept));
        --ahead_in_all_;
      }
      if (kept != p.ahead.begin() && std::prev(kept)->end == kept->begin) {
        Ahead& before = *std::prev(kept);
        before.crc = crc32_combine(before.crc, kept->crc, kept->end - kept->begin);
        before.end = kept->end;
        p.ahead.erase(kept);
        --ahead_in_all_;
      }
      if (p.ahead.size() > max_ahead || ahead_in_all_ > max_ahead_in_all) {
        p.ahead.pop_back();
        --ahead_in_all_;
      }
    }
    // The ranges the checked start now reaches join it.
    while (!p.ahead.empty() && p.ahead.front().begin == p.prefix) {
      p.crc =
          crc32_combine(p.crc, p.ahead.front().crc, p.ahead.front().end - p.ahead.front().begin);
      p.prefix = p.ahead.front().end;
      p.ahead.erase(p.ahead.begin());
      --ahead_in_all_;
    }
  }
}

void RecordChecks::decide(std::size_t i, const Progress& p) const {
  const CheckedRecord& r = records_[i];
  if (p.prefix != r.size) return;
  if (p.crc != r.crc32) found_[i] = p.crc;
  verdicts_[i] = p.crc == r.crc32 ? Verdict::sound : Verdict::corrupt;
  ahead_in_all_ -= p.ahead.size();  // none: the prefix is the whole record
  progress_.erase(i);
}

void RecordChecks::fill(const ReadRest& read, std::size_t i, std::uint64_t begin, Progress& p,
                        std::uint64_t limit) const {
  const std::uint64_t size = records_[i].size;
  std::uint64_t unread = size - p.prefix;
  for (const Ahead& r : p.ahead) unread -= r.end - r.begin;
  if (unread > limit) return;
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(unread, 1 << 20)));
  while (p.prefix < size && !buffer.empty()) {
    const std::uint64_t gap_end = p.ahead.empty() ? size : p.ahead.front().begin;
    const auto n =
        static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), gap_end - p.prefix));
    const std::span<std::byte> chunk(buffer.data(), n);
    read(begin + p.prefix, chunk);
    take(i, p, p.prefix, chunk);
  }
  decide(i, p);
}

void RecordChecks::observe(std::uint64_t offset, std::span<const std::byte> bytes,
                           const ReadRest& read) const {
  for_each_record(offset, bytes.size(), [&](std::size_t i, std::uint64_t begin) {
    Verdict v = verdicts_[i].load();
    if (v == Verdict::unknown) {
      const std::lock_guard lock(mutex_);
      v = verdicts_[i].load();
      if (v == Verdict::unknown) {
        const CheckedRecord& r = records_[i];
        const std::uint64_t from = std::max(offset, begin);
        const std::uint64_t to = std::min(offset + bytes.size(), begin + r.size);
        Progress& p = progress_[i];
        take(i, p, from - begin, bytes.subspan(from - offset, to - from));
        fill(read, i, begin, p, max_filled);  // decided: `p` is gone
        v = verdicts_[i].load();
        if (v == Verdict::unknown && p.prefix == 0 && p.ahead.empty()) progress_.erase(i);
      }
    }
    if (v == Verdict::corrupt) fail(i);
  });
}

bool RecordChecks::needs_read(std::uint64_t offset, std::uint64_t length) const {
  bool needed = false;
  for_each_record(offset, length, [&](std::size_t i, std::uint64_t begin) {
    const Verdict v = verdicts_[i].load();
    if (v == Verdict::corrupt) fail(i);
    if (v == Verdict::sound || needed) return;
    const std::lock_guard lock(mutex_);
    const auto it = progress_.find(i);
    const std::uint64_t prefix = it == progress_.end() ? 0 : it->second.prefix;
    const std::uint64_t from = std::max(offset, begin) - begin;
    const std::uint64_t to = std::min(offset + length, begin + records_[i].size) - begin;
    // Bytes past the checked start, within reach of it (a range kept ahead is read again: a
    // splice costs as much as a read, and such overlaps are rare).
    needed = to > prefix && from - std::min(from, prefix) <= reach;
  });
  return needed;
}

void RecordChecks::verify(std::uint64_t offset, std::uint64_t length, const ReadRest& read) const {
  for_each_record(offset, length, [&](std::size_t i, std::uint64_t begin) {
    if (verdicts_[i].load() == Verdict::unknown) {
      const std::lock_guard lock(mutex_);
      if (verdicts_[i].load() == Verdict::unknown) {
        fill(read, i, begin, progress_[i], UINT64_MAX);
      }
    }
    if (verdicts_[i].load() == Verdict::corrupt) fail(i);
  });
}

}  // namespace ckptfs
