// SPDX-License-Identifier: MIT
// SourcePages: the extents read through the mount, and the DONTNEED calls that drop them.
#include "source_pages.hpp"

#include <ckptfs/source/byte_source.hpp>

#include "kernel_files.hpp"
#include "readahead.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace ckptfs::fuse {
namespace {

std::uint64_t page_size() noexcept {
  static const auto size = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

// The whole pages of the extent [start, end) within [lo, hi); empty when first >= second.
std::pair<std::uint64_t, std::uint64_t> whole_pages(std::uint64_t start, std::uint64_t end,
                                                    std::uint64_t lo, std::uint64_t hi) noexcept {
  const std::uint64_t page = page_size();
  return {std::max((start + page - 1) / page * page, lo), std::min(end / page * page, hi)};
}

}  // namespace

struct SourcePages::Extents {
  using Clock = std::chrono::steady_clock;
  struct Span {
    std::uint64_t lo = UINT64_MAX;
    std::uint64_t hi = 0;
    void add(std::uint64_t from, std::uint64_t to) {
      lo = std::min(lo, from);
      hi = std::max(hi, to);
    }
  };

  int fd = -1;
  std::uint64_t folio = 0;  // largest_folio() and a page: an extent shorter holds no whole folio
  std::uint64_t reach = 0;  // how far around a new range its drop reaches (see the header)
  std::mutex mutex;
  std::map<std::uint64_t, std::uint64_t> by_start;  // start -> end, disjoint, gaps >= a page
  // What was dropped in the current retry period, and in the one before (see the header).
  Span newer;
  Span older;
  Clock::time_point next_retry{};
};

std::uint64_t SourcePages::largest_folio() noexcept {
  std::uint64_t bytes =
      read_kernel_number("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").value_or(0);
  if (bytes == 0 || (bytes & (bytes - 1)) != 0) bytes = std::uint64_t{2} << 20;
  return std::max(bytes, page_size());
}

SourcePages::SourcePages(Sources sources) {
  const std::uint64_t folio = largest_folio() + page_size();
  per_source_.reserve(sources.size());
  for (const ByteSource* source : sources) {
    auto& e = *per_source_.emplace_back(std::make_unique<Extents>());
    e.fd = source->fd();
    e.folio = folio;
    e.reach = folio;
    struct stat st {};
    if (e.fd >= 0 && ::fstat(e.fd, &st) == 0) e.reach += 2 * device_read_ahead_bytes(st.st_dev);
  }
}

SourcePages::~SourcePages() = default;

void SourcePages::cached_by_mount(const SourceRange& range, Drop drop) noexcept {
  if (range.source >= per_source_.size() || range.length == 0) return;
  Extents& e = *per_source_[range.source];
  if (e.fd < 0) return;
  const std::uint64_t page = page_size();
  std::uint64_t start = range.offset;
  std::uint64_t end = range.offset + range.length;
  // What a drop of this range reaches: the whole pages of its extent within it.
  const std::uint64_t near_lo = range.offset > e.reach ? range.offset - e.reach : 0;
  const std::uint64_t near_hi = range.offset + range.length + e.reach;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> retries;  // allocates once a period
  try {
    std::lock_guard lock(e.mutex);
    auto& m = e.by_start;
    // Merge with every extent that overlaps [start, end) or is less than a page away.
    auto it = m.upper_bound(start);
    if (it != m.begin()) {
      auto before = std::prev(it);
      if (before->second + page > start) it = before;
    }
    while (it != m.end() && it->first < end + page) {
      start = std::min(start, it->first);
      end = std::max(end, it->second);
      it = m.erase(it);
    }
    m.emplace(start, end);
    if (m.size() > max_extents) m.erase(m.begin());
    if (drop == Drop::now) {
      e.newer.add(near_lo, near_hi);
      const auto now = Extents::Clock::now();
      if (now >= e.next_retry) {
        // The spans of the period before are dropped again: what was under readahead I/O
        // then has been read in since.
        retries = extents_within(e, e.older.lo, e.older.hi);
        e.older = std::exchange(e.newer, {});
        e.next_retry = now + retry_period;
      }
    }
  } catch (...) {
    return;  // nothing is dropped; the pages stay cached
  }
  if (drop == Drop::later) return;
  const auto [lo, hi] = whole_pages(start, end, near_lo, near_hi);
  if (lo < hi) {
    (void)::posix_fadvise(e.fd, static_cast<off_t>(lo), static_cast<off_t>(hi - lo),
                          POSIX_FADV_DONTNEED);
  }
  for (const auto& [from, to] : retries) {
    (void)::posix_fadvise(e.fd, static_cast<off_t>(from), static_cast<off_t>(to - from),
                          POSIX_FADV_DONTNEED);
  }
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> SourcePages::extents_within(const Extents& e,
                                                                                 std::uint64_t lo,
                                                                                 std::uint64_t hi) {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  auto it = e.by_start.upper_bound(lo);
  if (it != e.by_start.begin()) --it;
  for (; it != e.by_start.end() && it->first < hi && ranges.size() < max_retried_extents; ++it) {
    // Whole folios are in long extents only: a random read's is a few pages.
    if (it->second - it->first < e.folio) continue;
    const auto [from, to] = whole_pages(it->first, it->second, lo, hi);
    if (from < to) ranges.emplace_back(from, to);
  }
  return ranges;
}

}  // namespace ckptfs::fuse
