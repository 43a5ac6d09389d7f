// SPDX-License-Identifier: MIT
// open_model(): which reader reads what the user named.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/open_model.hpp>

namespace ckptfs {

std::unique_ptr<ByteSource> open_local_file(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

OpenedModel::OpenedModel(std::vector<std::unique_ptr<ByteSource>> sources, Model model)
    : owned_(std::move(sources)), model_(std::move(model)) {
  for (const auto& s : owned_) raw_.push_back(s.get());
}

OpenedModel open_model(const std::string& location, const OpenOptions& options) {
  std::unique_ptr<ByteSource> source = options.open(location);
  ReadLimits limits = options.limits;
  limits.zip.defer_local_headers = limits.zip.defer_local_headers || source->remote();
  Model model = read_torch(*source, location, limits);
  std::vector<std::unique_ptr<ByteSource>> sources;
  sources.push_back(std::move(source));
  return OpenedModel(std::move(sources), std::move(model));
}

}  // namespace ckptfs
