// SPDX-License-Identifier: MIT
// One page cache, not two: once bytes read from a local source are in the mount's own page
// cache, the source's pages that hold them are dropped (posix_fadvise POSIX_FADV_DONTNEED).
#pragma once

#include "read_reply.hpp"

#include <ckptfs/view/read_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace ckptfs::fuse {

// The kernel drops a page-cache folio only when a DONTNEED range covers it whole, and it keeps a
// file's bytes in folios of up to largest_folio() bytes (2 MiB, the PMD size, on x86-64),
// aligned on their size: a 512 KiB read drops nothing of the 2 MiB folio its bytes are in. So the
// ranges read through the mount are kept per source, merged into extents (across gaps of less
// than a page: a zip record's local header), and each new range drops what lies within reach of
// it inside its extent: every folio that holds only bytes read through the mount, once its last
// bytes are.
//
// The reach is a folio and a page, plus two of the source device's readahead windows: the
// kernel's readahead of the source runs past the bytes a file needs into its neighbours', and
// brings back those read and dropped before (torch.save stores records in the string order of
// their keys, "1", "10".."19", "2": reading the tensors in key order jumps back and forth, and a
// trace of the page cache showed a neighbour read again 230 ms after it was dropped, by
// readahead). The drops of the next reads within reach take them out again, unless their I/O is
// still under way then (a DONTNEED leaves locked pages): so every span dropped is dropped once
// more, by the first drop made retry_period to twice that later. What is left of a source: the
// partial folios at each end of an extent, the bytes no read asked for, those recorded with
// Drop::later that no later range came near, and what readahead brought back after the last
// drops.
//
// Thread-safe. Sources without a descriptor (remote ones) are left alone.
class SourcePages {
 public:
  explicit SourcePages(Sources sources);
  ~SourcePages();
  SourcePages(const SourcePages&) = delete;
  SourcePages& operator=(const SourcePages&) = delete;

  // The bytes of `range` are now in the mount's page cache (a reply that fills it was sent).
  // Drop::later records them without a DONTNEED call, which a later range within reach makes:
  // for the first bytes a file's open stores, so that opening many small files costs no call
  // each (their pages stay cached until a read near them).
  enum class Drop { now, later };
  void cached_by_mount(const SourceRange& range, Drop drop = Drop::now) noexcept;

  // How many extents are remembered per source at most: past it the lowest is forgotten (random
  // reads make one extent each; forgetting one only leaves some pages in the cache).
  static constexpr std::size_t max_extents = 4096;

  // The largest folio the page cache makes: the PMD size the kernel reports, else 2 MiB.
  static std::uint64_t largest_folio() noexcept;

  // How long after a drop its span is dropped again, at the earliest.
  static constexpr std::chrono::milliseconds retry_period{100};
  // How many extents one retry drops at most (one DONTNEED each).
  static constexpr std::size_t max_retried_extents = 64;

 private:
  struct Extents;
  // The whole pages within [lo, hi) of the extents longer than a folio. Called locked.
  static std::vector<std::pair<std::uint64_t, std::uint64_t>> extents_within(const Extents& e,
                                                                             std::uint64_t lo,
                                                                             std::uint64_t hi);
  std::vector<std::unique_ptr<Extents>> per_source_;
};

}  // namespace ckptfs::fuse
