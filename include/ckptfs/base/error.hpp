// SPDX-License-Identifier: MIT
// The one exception type the core throws, and the exit code each kind of failure maps to.
#pragma once

#include <ckptfs/base/text.hpp>  // quote(): messages name untrusted things quoted

#include <stdexcept>
#include <string>
#include <string_view>

namespace ckptfs {

// Documented exit codes (README "Exit status"). Every failure of the CLI maps to exactly one.
enum class ExitCode : int {
  ok = 0,
  usage = 1,           // bad command line
  io = 2,              // the checkpoint cannot be opened or read
  bad_zip = 3,         // the ZIP container is invalid or lies (sizes, counts, offsets)
  bad_checkpoint = 4,  // data.pkl is invalid or forbidden, or the checkpoint is inconsistent
  unsupported = 5,    // a valid file ckptfs does not serve (compressed record, TorchScript, tar...)
  mount_failed = 6,   // the mount itself failed (mountpoint, /dev/fuse, fusermount3)
  access_denied = 7,  // a server refused access: HTTP 401 or 403 (credentials, S3 signature)
  unreachable = 8,    // a server did not answer properly: connection, TLS, timeout, HTTP 5xx
};

// How every message about a file cut short ends, whatever its format: the bytes its own structure
// says are there run past its end (README's troubleshooting table names it, with what to do).
inline constexpr std::string_view looks_truncated =
    "the file looks truncated (an interrupted download or copy?): download or copy it again";

// A failure while reading a checkpoint. `what()` is one line, without the file name: the caller
// prefixes it ("ckptfs: FILE: what"). Messages quote untrusted names (see quote()).
class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const noexcept { return code_; }

 private:
  ExitCode code_;
};

}  // namespace ckptfs
