// SPDX-License-Identifier: MIT
// The file of -o log=FILE: opened for appending only when it is the mounting user's own regular
// file, never through a link another user may have planted (docs/SECURITY.md, "The log file").
#pragma once

#include <ckptfs/source/open_file.hpp>

#include <string>

namespace ckptfs::fuse {

// Opens `path` for appending (O_APPEND, close-on-exec), creating it 0600 when it does not exist.
//
// A daemon running as root appends to whatever the name leads to, so the name must lead to a
// regular file of the user it runs as (its effective uid), with no other name:
//   - a final symbolic link is never followed (a dangling one is not created through either);
//     the directories above are the user's choice and are followed;
//   - a FIFO, socket, device or directory is refused without being opened (a FIFO's open would
//     wait for a reader; a device's may act, as a tape rewinding);
//   - a file owned by another user, or with more than one hard link (a link planted in a shared
//     directory to a file of the user's, where fs.protected_hardlinks is off), is refused.
// A file that is created is the user's by construction (O_CREAT | O_EXCL | O_NOFOLLOW).
//
// Throws Error(ExitCode::usage) with a message without the path (the caller names it).
UniqueFd open_log_file(const std::string& path);

}  // namespace ckptfs::fuse
