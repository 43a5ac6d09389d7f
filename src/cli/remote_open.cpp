// SPDX-License-Identifier: MIT
// remote_for() and open_options(): the opener of every command that reads a model.
#include "remote_open.hpp"

#include "../fuse/log.hpp"

#include <ckptfs/source/location.hpp>

namespace ckptfs::cli {

std::unique_ptr<RemoteContext> remote_for(const std::string& location,
                                          const RemoteOptions& options) {
  if (!is_url(location)) return nullptr;
  const bool s3 = location.size() > 5 && (location[0] | 0x20) == 's' && location[1] == '3';
  RemoteOptions with_log = options;
  // On stderr, or in the log once a mount is a daemon.
  if (!with_log.warn) with_log.warn = [](const std::string& what) { fuse::log::warning(what); };
  return std::make_unique<RemoteContext>(std::move(with_log),
                                         s3 ? S3Settings::from_environment() : S3Settings{});
}

OpenOptions open_options(RemoteContext* remote) {
  OpenOptions options;
  options.open = [remote](const std::string& location) { return open_location(location, remote); };
  return options;
}

}  // namespace ckptfs::cli
