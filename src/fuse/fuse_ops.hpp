// SPDX-License-Identifier: MIT
// The FUSE low-level operations over an immutable Vfs. The only place with FUSE callbacks.
#pragma once

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>

#include <ckptfs/byte_source.hpp>
#include <ckptfs/vfs.hpp>

#include <atomic>

namespace ckptfs::fuse {

// What every operation needs; handed to libfuse as the session's userdata.
struct Context {
  const Vfs* vfs = nullptr;
  const FileSource* source = nullptr;
  // Set once the checkpoint is found replaced, truncated or rewritten (see op_open, op_read):
  // from then on every open and read fails with EIO.
  mutable std::atomic<bool> changed{false};
};

// The operation table: lookup, getattr, open, read, opendir, readdir(plus), statfs, release...
// Everything else (all writes) is left to the read-only mount and the kernel.
const fuse_lowlevel_ops& operations();

}  // namespace ckptfs::fuse
