// SPDX-License-Identifier: MIT
// ProgressLine: throttled, redrawn on a terminal, plain lines elsewhere.
#include "progress.hpp"

#include <fmt/format.h>

#include <cmath>

namespace ckptfs::cli {

std::string human_size(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

ProgressLine::ProgressLine(std::FILE* out, std::string what, bool redraw)
    : out_(out), what_(std::move(what)), redraw_(redraw) {}

void ProgressLine::update(const PackProgress& p) {
  const auto now = Clock::now();
  const bool end = p.bytes >= p.total_bytes;
  if (ended_) return;
  const auto every = redraw_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2000);
  // The first call (before any byte) and the last are always shown.
  if (!end && shown_ && now - last_ < every) return;
  ended_ = end;
  last_ = now;
  shown_ = true;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(p.bytes) / seconds : 0;
  std::string eta = "-";
  if (rate > 0 && !end) {
    const auto left =
        static_cast<long long>(std::ceil(static_cast<double>(p.total_bytes - p.bytes) / rate));
    eta = left >= 3600 ? fmt::format("{}:{:02}:{:02}", left / 3600, left / 60 % 60, left % 60)
                       : fmt::format("{}:{:02}", left / 60, left % 60);
  }
  const unsigned percent =
      p.total_bytes == 0 ? 100 : static_cast<unsigned>(100.0 * p.bytes / p.total_bytes);
  const std::string line = fmt::format(
      "ckptfs: {}: {} of {} ({}%), {}/s, {} {}, {}/{} tensors", what_, human_size(p.bytes),
      human_size(p.total_bytes), percent, human_size(static_cast<std::uint64_t>(rate)),
      end ? "in" : "ETA", end ? fmt::format("{:.1f} s", seconds) : eta, p.tensors, p.total_tensors);
  if (redraw_) {
    fmt::print(out_, "\r{}\x1b[K", line);
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void ProgressLine::finish() {
  if (redraw_ && shown_) {
    fmt::print(out_, "\r\x1b[K");
    std::fflush(out_);
  }
}

}  // namespace ckptfs::cli
