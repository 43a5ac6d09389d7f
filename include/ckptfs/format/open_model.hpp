// SPDX-License-Identifier: MIT
// open_model(): what the user named (a checkpoint file, a directory or an index of a sharded
// set), opened as the sources that hold its bytes and read into one Model by the right reader.
#pragma once

#include <ckptfs/format/torch_reader.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ckptfs {

// Opens one location (a local path; a URL when a remote opener is given) as a source. Throws
// Error(io) naming the problem when it cannot.
using SourceOpener = std::function<std::unique_ptr<ByteSource>(const std::string& location)>;

// Local files: FileSource.
std::unique_ptr<ByteSource> open_local_file(const std::string& path);

struct OpenOptions {
  ReadLimits limits;
  SourceOpener open = open_local_file;
};

// A model with the sources it reads from; sources()[i] holds the bytes of Storage::source i.
class OpenedModel {
 public:
  OpenedModel(std::vector<std::unique_ptr<ByteSource>> sources, Model model);
  OpenedModel(OpenedModel&&) noexcept = default;
  OpenedModel& operator=(OpenedModel&&) noexcept = default;

  const Model& model() const noexcept { return model_; }
  Model& model() noexcept { return model_; }
  std::span<const ByteSource* const> sources() const noexcept { return raw_; }
  const ByteSource& source(std::size_t i) const { return *owned_[i]; }

 private:
  std::vector<std::unique_ptr<ByteSource>> owned_;
  std::vector<const ByteSource*> raw_;
  Model model_;
};

// Opens `location` and reads it with the reader its first bytes call for (a zip: torch.save's
// or TorchScript's; the legacy torch stream otherwise). Throws Error with the exit code of the
// problem, its message without the location (the caller names it).
OpenedModel open_model(const std::string& location, const OpenOptions& options = {});

}  // namespace ckptfs
