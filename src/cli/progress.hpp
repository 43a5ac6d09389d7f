// SPDX-License-Identifier: MIT
// What `ckptfs pack` says while and after it writes: a progress line (bytes, rate, ETA, tensors)
// and a one-line summary.
#pragma once

#include <ckptfs/pack/pack.hpp>

#include <chrono>
#include <cstdio>
#include <string>

namespace ckptfs::cli {

// "1.5 GiB" (binary units, one decimal; "512 B" below a KiB).
std::string human_size(std::uint64_t bytes);

// A progress display on `out` (stderr). On a terminal (`redraw`), one line redrawn in place
// ("\r" and erase-to-end) at most 10 times a second and erased by finish(); elsewhere (a log,
// --progress off a terminal), one line of its own at most once every 2 seconds. The first
// update (before any byte) and the last (every byte written) are always shown.
//   ckptfs: OUT: 412.0 MiB of 1.6 GiB (25%), 850.3 MiB/s, ETA 0:02, 120/480 tensors
class ProgressLine {
 public:
  ProgressLine(std::FILE* out, std::string what, bool redraw);
  // Shows `p` if it is time to (or it is the end: every byte written).
  void update(const PackProgress& p);
  // Erases a redrawn line; prints nothing otherwise.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::FILE* out_;
  std::string what_;
  bool redraw_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_{};
  bool shown_ = false;
  bool ended_ = false;
};

}  // namespace ckptfs::cli
