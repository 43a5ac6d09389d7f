// SPDX-License-Identifier: MIT
// The mount's readahead: the kernel reads ahead 128 KiB at a time on a FUSE mount, whatever the
// file system answers in INIT; only root can raise it, through the mount's sysfs entry.
#pragma once

#include <cstdint>
#include <string>

namespace ckptfs::fuse {

// The device ("major:minor") of the mount whose mount point is `canonical_mountpoint` (an
// absolute path without symlinks, resolved before mounting: resolving it afterwards would ask
// the mount itself), read from /proc/self/mountinfo. The newest such mount wins. Throws
// Error(mount_failed) when there is none.
std::string mount_device(const std::string& canonical_mountpoint);

// Writes `kib` to /sys/class/bdi/DEVICE/read_ahead_kb: readers opened from then on read ahead
// `kib` KiB. Throws Error(mount_failed) saying why it could not (typically: not root).
void set_read_ahead(const std::string& device, unsigned kib);

// How far ahead the kernel reads a file on the device `st_dev` (a local source's): its
// read_ahead_kb (the whole disk's, for a partition; its bdi's, for a device without a queue),
// else the kernel's default, 128 KiB. A sequential reader's async readahead may have two such
// windows in the page cache ahead of it.
std::uint64_t device_read_ahead_bytes(std::uint64_t st_dev) noexcept;

}  // namespace ckptfs::fuse
