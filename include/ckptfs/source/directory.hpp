// SPDX-License-Identifier: MIT
// Files beneath a directory the user named, opened so that nothing inside the directory (a
// symbolic link, a "..") can lead out of it: how every file of a checkpoint made of several files
// is opened locally (source/members.hpp names them; split, RFC and ZeRO directories list them).
//
//   auto dir = std::make_shared<const Directory>("/data/model");   // followed: the user named it
//   for (const DirectoryEntry& e : dir->list(1'000'000)) ...       // its names, unsorted
//   DirectoryFileSource data(dir, "decoder.weight/data");          // a ByteSource, read by pread
//
// A symbolic link inside the directory is followed while it stays inside it ("a -> b/c" is
// fine); one that leads out of it ("data -> /etc/shadow", "w -> ../other") is refused, and so is
// a ".." that climbs out. The kernel enforces it while resolving (openat2 with RESOLVE_BENEATH,
// Linux >= 5.6), so a directory changed while it is read cannot slip a link in between a check
// and an open. Without openat2 (older kernels, seccomp filters that refuse it) each path is
// resolved with realpath() and checked to lie inside the directory before it is opened, which a
// concurrent change of the directory could defeat.
//
// One layout leads out by design: a Hugging Face hub cache, whose snapshot directories hold
// links to the repository's content-addressed blobs.
//
//   ~/.cache/huggingface/hub/models--ORG--NAME/      the repository folder (datasets--, spaces--)
//     blobs/<sha>                                     every file's bytes, regular files
//     refs/main                                       a revision's name
//     snapshots/<rev>/model.safetensors -> ../../blobs/<sha>
//     snapshots/<rev>/sub/config.json   -> ../../../blobs/<sha>
//
// When the directory is such a snapshot (its real path is .../<repo>--.../snapshots/<rev>, or a
// folder below one), a file beneath it that is a symbolic link is also followed when its text is
// relative and, resolved lexically from the link's own (real) directory, names a file directly
// in that repository's blobs/: opened there with no further link followed (blobs/ and the blob
// must be no links) and only when it is a regular file. A link to another snapshot, to refs/,
// to a blob that is itself a link, or an absolute link is refused as any other link out.
#pragma once

#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/source/open_file.hpp>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

struct DirectoryEntry {
  std::string name;
  bool directory = false;  // a directory, or a symbolic link to one inside the directory
  bool regular = false;    // a regular file, or a symbolic link to one inside the directory
  // The errno of looking at it beneath the directory, 0 when it was looked at: EXDEV for a
  // symbolic link that leads out of the directory, ELOOP for a loop of links, ENOENT for a
  // dangling link.
  int error = 0;

  // A regular file, or a name that leads out of the directory or through a loop: what a
  // listing of a checkpoint's files counts by name, so that opening it says why it is refused
  // rather than the file being silently absent.
  bool file_or_way_out() const noexcept { return regular || error == EXDEV || error == ELOOP; }
};

// An open directory. Immutable; its methods are safe from many threads.
class Directory {
 public:
  // Opens `path` (symbolic links followed: the user named it) as an O_PATH descriptor, which
  // needs no read permission (a directory the user may search but not list still opens its
  // files). Throws Error(io) with a message without the path ("not a directory", "No such file
  // or directory"...).
  explicit Directory(std::string path);

  const std::string& path() const noexcept { return path_; }
  int fd() const noexcept { return fd_.get(); }
  // Whether the directory is a Hugging Face hub cache snapshot or a folder below one, whose
  // links to its repository's blobs/ are followed (see above).
  bool in_hub_snapshot() const noexcept { return repository_.get() >= 0; }

  // The entries of `relative` ("" for the directory itself; "." and ".." left out), in the order
  // the file system lists them. Each entry is stat()ed beneath the directory: a link that leads
  // out of it, or a name that is neither a directory nor a regular file, has both flags false.
  // Throws Error(unsupported) past `max_entries`, and what open() throws for `relative`.
  std::vector<DirectoryEntry> list(std::string_view relative, std::size_t max_entries) const;

  // Opens `relative` (a path below the directory, '/'-separated) when it is of `kind`. Throws
  // Error(bad_checkpoint) "leads out of the directory (a symbolic link or \"..\")" when
  // resolving it leaves the directory or meets a magic link (/proc/self/fd/...); Error(io) as
  // open_file() does otherwise ("No such file or directory", "not a regular file"...).
  // Messages do not name the path: the caller does.
  OpenedFile open(std::string_view relative, FileKind kind) const;

  // Whether `relative` exists beneath the directory as a file of `kind` (a link leading out of
  // the directory does not count). Never throws for a missing path or one of another kind.
  bool has(std::string_view relative, FileKind kind) const;

  // fstat() of what `relative` names beneath the directory, by the rules of open() but opening
  // nothing (an O_PATH descriptor): 0, or the errno (EXDEV: it leads out of the directory).
  int look(std::string_view relative, struct stat& st) const noexcept;

 private:
  // A descriptor of `relative` opened with `flags` beneath the directory (the hub rule
  // included); -1 with `error` set when it cannot be.
  UniqueFd open_beneath(const std::string& relative, std::uint64_t flags, int& error) const;
  [[noreturn]] void fail_open(int error) const;

  std::string path_;
  UniqueFd fd_;
  UniqueFd repository_;          // O_PATH: the hub repository folder; -1 outside a snapshot
  std::string repository_path_;  // its real path
};

// A regular file beneath a Directory, read by pread: what FileSource is for a path the user
// named. It holds one descriptor (the directory's is shared), so that a directory of many small
// files costs one descriptor per file. name() is the directory's path, '/', and `relative`.
class DirectoryFileSource final : public ByteSource {
 public:
  // Opens `relative` with Directory::open(); throws what it throws.
  DirectoryFileSource(std::shared_ptr<const Directory> directory, std::string relative);

  std::uint64_t size() const override { return identity_.size; }
  const std::string& name() const noexcept override { return name_; }
  SourceTimes times() const noexcept override {
    return {identity_.mtime_sec, identity_.mtime_nsec, identity_.ctime_sec, identity_.ctime_nsec};
  }
  int fd() const noexcept override { return fd_.get(); }
  const std::string& relative() const noexcept { return relative_; }
  const FileIdentity* local_file() const noexcept override { return &identity_; }

  // Whether the file is still the one that was opened (its descriptor's identity: device,
  // inode, size, mtime), and with `check_path` also the file `relative` names now.
  bool unchanged(bool check_path) const noexcept override;

 private:
  void read_in_range(std::uint64_t offset, std::span<std::byte> out) const override;

  std::shared_ptr<const Directory> directory_;
  std::string relative_;
  std::string name_;
  UniqueFd fd_;
  FileIdentity identity_;
};

}  // namespace ckptfs
