// SPDX-License-Identifier: MIT
// What a mount says while it runs: one line per event, on stderr in the foreground and to syslog
// (journald) once daemonized, rate-limited so that a hostile reader cannot flood the log; and
// libfuse's own messages, captured so that a failure is reported as one line.
#pragma once

#include <string>
#include <string_view>

namespace ckptfs::fuse::log {

// Lines go to stderr until use_syslog() is called (by a daemon, just before its stderr becomes
// /dev/null); from then on to syslog, identity "ckptfs", facility daemon. Where no syslog listens
// on /dev/log when the first line is logged, that is said once, naming `mountpoint`, on the
// terminal or file that was stderr at the call (not a pipe or socket): a mount that logs nothing
// says nothing.
void use_syslog(std::string_view mountpoint) noexcept;
// From now on lines go to `fd` (-o log=FILE, opened for appending), each with its time and
// process id ("2026-11-27T19:58:00 ckptfs[123]: ..."), in the foreground as in a daemon. The
// descriptor is kept open until the process ends.
void use_file(int fd) noexcept;
// Whether a syslog daemon (or journald) listens on /dev/log: without one, syslog() drops every
// line, silently.
bool syslog_listens() noexcept;

// Logs "ckptfs: MESSAGE". Of the lines logged within one minute, the first `lines_per_minute`
// get through; the others are counted, and the count is logged once the minute is over (with
// the next line, or by flush()). `message` must be safe to show: untrusted names quote()d.
// Thread-safe; never throws (a line that cannot be made is dropped).
enum class Level { error, warning };
inline constexpr unsigned lines_per_minute = 10;
void line(Level level, std::string_view message) noexcept;
inline void error(std::string_view message) noexcept { line(Level::error, message); }
inline void warning(std::string_view message) noexcept { line(Level::warning, message); }

// Logs how many lines were held back since the last one that got through, if any (at the end
// of serving: nothing is lost silently).
void flush() noexcept;

// libfuse's messages. capture_libfuse() installs the handler: every message is kept (the last
// one at error level explains a failure: libfuse_failure()), and passed on as a line only when
// `pass_all` (-d: libfuse's debug output) or when it is critical.
void capture_libfuse(bool pass_all) noexcept;
// Forgets what libfuse logged so far: what it logs from then on explains a later failure.
void forget_libfuse_failure() noexcept;
// The last error libfuse logged, or `fallback` when it logged none.
std::string libfuse_failure(std::string_view fallback);

}  // namespace ckptfs::fuse::log
