// SPDX-License-Identifier: MIT
// The files of a checkpoint made of several files (its members), opened by the names the
// checkpoint gives them, never outside its directory: the one opener of a sharded set's shards,
// a GGUF split set's files, a PyTorch DCP checkpoint's .distcp files, the file a directory mount
// chooses, and a model directory's other files (config.json, tokenizer files).
//
//   CheckpointMembers members("/data/llama/model.safetensors.index.json", open_url);
//   auto shard = members.open("model-00001-of-00002.safetensors");   // a ByteSource
//   std::string config = members.read("config.json", 1 << 20);       // a small file, whole
//
// The names are untrusted (they come from the checkpoint's files), and so is the directory:
// whoever made it (an archive unpacked, a repository cloned) may have put symbolic links in it.
//   - A name must be relative, with no empty, "." or ".." component, no NUL and no backslash
//     (sibling_location(), source/location.hpp); else Error(bad_checkpoint) naming it.
//   - A local member is opened beneath the directory (Directory::open(), source/directory.hpp):
//     a link that leads out of it is refused with Error(bad_checkpoint) "leads out of the
//     directory", except, in a Hugging Face cache snapshot, a link to its repository's blobs/.
//     What the user named (a file, a directory) is followed: only members are held beneath it.
//   - A remote member is the URL beside what was named (sibling_location()), opened with the
//     opener given, as any URL is.
#pragma once

#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/directory.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ckptfs {

// Opens one location (a URL, or a local path the user named) as a source. Throws Error(io)
// naming the problem when it cannot. Called from several threads at once.
using SourceOpener = std::function<std::unique_ptr<ByteSource>(const std::string& location)>;

class CheckpointMembers {
 public:
  // The members beside `location`, what the user named: a URL (opened with `open_remote`), or
  // a local file, whose directory (as named: "." for a bare name) is opened now. Throws
  // Error(io) when that directory cannot be opened.
  CheckpointMembers(const std::string& location, SourceOpener open_remote);
  // The members of a local directory the user named.
  explicit CheckpointMembers(std::shared_ptr<const Directory> directory);

  // Opens member `name` (a relative path, '/'-separated) as above. Throws Error: bad_checkpoint
  // for a name or a link that leads out; io as the opener or Directory::open() does ("No such
  // file or directory", "not a regular file"). Messages do not name the member: the caller does.
  // Safe from many threads.
  std::unique_ptr<ByteSource> open(std::string_view name) const;

  // The whole of member `name` when it holds at most `max_bytes`, read now (a config, a
  // tokenizer, an index). Throws what open() throws, and Error(unsupported) "N bytes, over the
  // limit of M" for a larger one, read no further.
  std::string read(std::string_view name, std::uint64_t max_bytes) const;

  bool remote() const noexcept { return directory_ == nullptr; }
  // The local directory; null for a URL's members.
  const std::shared_ptr<const Directory>& directory() const noexcept { return directory_; }

 private:
  std::string location_;  // what was named (remote: the URL its members are beside)
  SourceOpener open_remote_;
  std::shared_ptr<const Directory> directory_;
};

}  // namespace ckptfs
