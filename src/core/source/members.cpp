// SPDX-License-Identifier: MIT
// CheckpointMembers: a member's name checked as sibling_location() checks it, then opened beneath
// the local directory or beside the URL.
#include <ckptfs/base/error.hpp>
#include <ckptfs/source/location.hpp>
#include <ckptfs/source/members.hpp>

#include <fmt/format.h>

namespace ckptfs {
namespace {

// The directory of a local path as it was named: "." for a bare name, "/" for one in the root.
std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

CheckpointMembers::CheckpointMembers(const std::string& location, SourceOpener open_remote)
    : location_(location), open_remote_(std::move(open_remote)) {
  if (!is_url(location)) directory_ = std::make_shared<const Directory>(directory_of(location));
}

CheckpointMembers::CheckpointMembers(std::shared_ptr<const Directory> directory)
    : location_(directory->path()), directory_(std::move(directory)) {}

std::unique_ptr<ByteSource> CheckpointMembers::open(std::string_view name) const {
  // The name's own checks first, the same for a local member and a URL's.
  const std::string location = sibling_location(location_, name);
  if (directory_) return std::make_unique<DirectoryFileSource>(directory_, std::string(name));
  return open_remote_(location);
}

std::string CheckpointMembers::read(std::string_view name, std::uint64_t max_bytes) const {
  const std::unique_ptr<ByteSource> source = open(name);
  if (source->size() > max_bytes) {
    throw Error(ExitCode::unsupported,
                fmt::format("{} bytes, over the limit of {}", source->size(), max_bytes));
  }
  return source->read_string(0, static_cast<std::size_t>(source->size()));
}

}  // namespace ckptfs
