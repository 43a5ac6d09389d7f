// SPDX-License-Identifier: MIT
// What the user named opened as a model, local or remote: a URL gets its RemoteContext (the
// -o remote options, S3's settings from the environment), a local path none.
#pragma once

#include <ckptfs/format/open_model.hpp>
#include <ckptfs/source/remote.hpp>

#include <memory>
#include <string>

namespace ckptfs::cli {

// The remote side for `location` when it is a URL (is_url()), else null.
std::unique_ptr<RemoteContext> remote_for(const std::string& location,
                                          const RemoteOptions& options);

// open_model()'s options opening each location through `remote` (null: local files only).
OpenOptions open_options(RemoteContext* remote);

}  // namespace ckptfs::cli
