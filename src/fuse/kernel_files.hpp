// SPDX-License-Identifier: MIT
// The kernel's small text files (/proc, /sys), read and written with read(2) and write(2): the
// daemon never uses iostreams, whose first use sets up libstdc++'s locales in it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ckptfs::fuse {

// The whole of `path` (at most `max_bytes` of it), or nullopt with errno set when it cannot be
// opened or read.
std::optional<std::string> read_kernel_file(const std::string& path,
                                            std::size_t max_bytes = std::size_t{64} << 20);

// The decimal number `path` starts with (a sysctl, a sysfs attribute), or nullopt when it cannot
// be read or does not start with one.
std::optional<std::uint64_t> read_kernel_number(const std::string& path) noexcept;

// Writes `text` to `path` in one write(2); false with errno set when it cannot.
bool write_kernel_file(const std::string& path, const std::string& text);

}  // namespace ckptfs::fuse
