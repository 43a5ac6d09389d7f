// SPDX-License-Identifier: MIT
// Where a ZeRO checkpoint's files are (private to src/core/format/zero): the tag directory, its
// model and optimizer states files in zero_to_fp32's order, and how each is opened: beneath a
// local directory, or by DeepSpeed's names beside a URL.
#pragma once

#include <ckptfs/format/zero/zero_limits.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/directory.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs::zero {

// `latest`'s text as zero_to_fp32 takes it (stripped of white space), checked to be a relative
// path that stays beneath the directory. Throws Error(bad_checkpoint) naming the problem.
std::string tag_of_latest(std::string text);

class Files {
 public:
  // A local directory: the tag directory itself, or the one above it (with `latest`).
  static Files local(const std::string& directory, const ZeroLimits& limits);
  // A URL of a directory (ending in '/') or of its `latest` file.
  static Files remote(const std::string& location, const ZeroOpener& open,
                      const ZeroLimits& limits);

  bool is_remote() const noexcept { return !location_.empty(); }
  // The tag directory relative to what was named: "" or "global_step99/" (with its '/').
  const std::string& prefix() const noexcept { return prefix_; }
  // The times and permission bits of `latest`, when it was read.
  const SourceTimes& times() const noexcept { return times_; }
  mode_t permissions() const noexcept { return permissions_; }

  // Local: every *_model_states.pt and *_optim_states.pt in the tag directory (regular files
  // whose names do not start with '.', as glob's '*' takes them), in natural order.
  const std::vector<std::string>& listed_model_states() const noexcept { return model_states_; }
  const std::vector<std::string>& listed_optim_states() const noexcept { return optim_states_; }

  // Opens `name`, a file of the tag directory. Throws Error naming neither (the caller does).
  std::unique_ptr<ByteSource> open(const std::string& name) const;

  // A file found among names it may have (a URL's files, which no listing says): the first of
  // `names` that opens, as {name, source}; nullopt when none is there, with `why` saying what
  // each gave. Not there: not found (io), or refused (S3 answers 403 for a missing key to whom
  // may not list the bucket; a file that is there but refused is refused again when it must be
  // read). Other errors (a server that does not answer) are thrown, naming the file.
  struct Found {
    std::string name;
    std::unique_ptr<ByteSource> source;
  };
  std::optional<Found> open_first(const std::vector<std::string>& names, std::string& why) const;

 private:
  std::string prefix_;
  SourceTimes times_;
  mode_t permissions_ = 0777;
  std::shared_ptr<const Directory> directory_;  // local
  std::string location_;                        // remote: what was named
  ZeroOpener open_;
  std::vector<std::string> model_states_, optim_states_;
};

}  // namespace ckptfs::zero
