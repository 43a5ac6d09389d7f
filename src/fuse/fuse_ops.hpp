// SPDX-License-Identifier: MIT
// The FUSE low-level operations over an immutable Vfs. The only place with FUSE callbacks.
#pragma once

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)
#include <fuse_lowlevel.h>

#include <ckptfs/byte_source.hpp>
#include <ckptfs/vfs.hpp>

namespace ckptfs::fuse {

// What every operation needs; handed to libfuse as the session's userdata.
struct Context {
  const Vfs* vfs = nullptr;
  const FileSource* source = nullptr;
};

// The operation table: lookup, getattr, open, read, opendir, readdir(plus), statfs, release...
// Everything else (all writes) is left to the read-only mount and the kernel.
const fuse_lowlevel_ops& operations();

}  // namespace ckptfs::fuse
