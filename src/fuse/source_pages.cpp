// SPDX-License-Identifier: MIT
// SourcePages: the extents read through the mount, and the DONTNEED calls that drop them.
#include "source_pages.hpp"

#include <ckptfs/source/byte_source.hpp>

#include "kernel_files.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <map>
#include <mutex>

namespace ckptfs::fuse {
namespace {

std::uint64_t page_size() noexcept {
  static const auto size = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

struct SourcePages::Extents {
  int fd = -1;
  std::mutex mutex;
  std::map<std::uint64_t, std::uint64_t> by_start;  // start -> end, disjoint, gaps >= a page
};

std::uint64_t SourcePages::largest_folio() noexcept {
  std::uint64_t bytes = 0;
  try {
    if (const auto text =
            read_kernel_file("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", 64)) {
      std::from_chars(text->data(), text->data() + text->size(), bytes);
    }
  } catch (...) {
    bytes = 0;
  }
  if (bytes == 0 || (bytes & (bytes - 1)) != 0) bytes = std::uint64_t{2} << 20;
  return std::max(bytes, page_size());
}

SourcePages::SourcePages(Sources sources) : reach_(largest_folio() + page_size()) {
  per_source_.reserve(sources.size());
  for (const ByteSource* source : sources) {
    per_source_.push_back(std::make_unique<Extents>());
    per_source_.back()->fd = source->fd();
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
  } catch (...) {
    return;  // nothing is dropped; the pages stay cached
  }
  if (drop == Drop::later) return;
  // The whole pages of the extent within reach of the new range.
  const std::uint64_t lo =
      std::max((start + page - 1) / page * page, range.offset > reach_ ? range.offset - reach_ : 0);
  const std::uint64_t hi = std::min(end / page * page, range.offset + range.length + reach_);
  if (lo < hi) {
    (void)::posix_fadvise(e.fd, static_cast<off_t>(lo), static_cast<off_t>(hi - lo),
                          POSIX_FADV_DONTNEED);
  }
}

}  // namespace ckptfs::fuse
