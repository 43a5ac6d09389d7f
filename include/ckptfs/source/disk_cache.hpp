// SPDX-License-Identifier: MIT
// DiskCache: remote blocks kept in files under -o cache_dir=DIR, one folder per object version,
// so that a remount reads nothing twice; trusted only because nobody but the user could have
// written them (docs/SECURITY.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

namespace ckptfs {

// Layout: DIR/ckptfs-blocks-v1/<the first 16 hex digits of the SHA-256 of the object's key>/
// holds `key` (that SHA-256 in 64 hex digits: the key itself, a URL that may carry a token, is
// never written) and <index as 16 hex digits>.blk: a 32-byte header ("CKPTFSB1", index, length,
// CRC-32 of the bytes) then the bytes. A block is written to a temporary file and renamed into
// place, so that a reader (this mount or another one on the same DIR) sees a whole file or none;
// the header and CRC make a file torn by a crash, or another object's, a miss, never wrong
// bytes. Bounded: once the block files exceed `limit` bytes, the least recently used ones (file
// mtime, touched on each hit) are deleted until they take 90% of it.
//
// Trust: DIR and DIR/ckptfs-blocks-v1 must be directories owned by the user ckptfs runs as
// (geteuid()) that neither the group nor others may write; then only that user (and root) can
// have put anything below them. Below DIR/ckptfs-blocks-v1 nothing is found by a path: every
// folder and file is opened relative to its folder's descriptor without following a symbolic
// link, files without blocking (a FIFO is never waited on), and is used only when it is what the
// cache makes itself (a directory or a regular file, owned by the user, not writable by the group
// or others); anything else is a miss, never followed, never written through, never deleted,
// and the first one is reported through `warn` (once per cache). Trimming deletes only the cache's
// own files: regular, owned by the user, named <16 hex digits>.blk and starting with the header's
// magic, and its temporary files (.tmp.*, .key.*) left for over an hour.
//
// Mounts of one user may share a DIR; each trims. While a block is fetched, they share that too
// (claim()): one mount fetches it, the others wait for its file. Thread-safe.
class DiskCache {
 public:
  using Warn = std::function<void(const std::string&)>;

  // Opens DIR, made (mode 0700) when only its last component is missing, and
  // DIR/ckptfs-blocks-v1 inside it (likewise). Throws Error(usage) naming DIR, in one line, when
  // DIR's parent does not exist, or DIR or ckptfs-blocks-v1 is not such a directory (not one,
  // a symbolic link for ckptfs-blocks-v1, another user's, writable by the group or others, not
  // readable and writable), saying what to do.
  DiskCache(const std::string& directory, std::uint64_t limit, Warn warn = {});
  ~DiskCache();
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // An object's folder, open (its descriptor is closed with the last reference).
  class Folder;

  // The folder for `key` (any text: hashed), made with its key file when it is missing; nullptr
  // when it cannot be used (another key with the same first 64 bits of hash, something else than
  // the cache's own folder there, a file system error).
  std::shared_ptr<const Folder> object_folder(std::string_view key);

  // Fills `out` with block `index` of the object in `folder`; false when it is not there whole
  // and trusted. Never an error, never a wrong byte, whatever other mounts do meanwhile: the file
  // is read through one descriptor (deleted by a trim or renamed over after the open, it still
  // reads as the file opened), files are only renamed into place whole, and the size, header
  // and CRC-32 make anything else a miss, which the caller fetches.
  bool load(const Folder& folder, std::uint64_t index, std::span<std::byte> out);

  // Writes block `index` (best effort: a failure leaves no file). Trims the cache when it grows
  // past its limit.
  void store(const Folder& folder, std::uint64_t index, std::span<const std::byte> bytes);

  // Blocks in flight, shared by the mounts of one cache: a mount about to fetch block `index`
  // claims it; another mount that needs the block meanwhile finds it claimed, and waits for its
  // file rather than fetching it too. A claim is an open file description lock (F_OFD_SETLK)
  // on byte `index` of the object folder's file `claims` (made mode 0600, used only when it is
  // the cache's own, as every file of it): the kernel drops it when the process holding it
  // dies or closes the file, so a mount that crashed holds nothing. Claims of one process
  // never conflict with each other (its memory cache already fetches each block once).
  //   mine: this process holds the claim now, or claims cannot be made (no usable `claims`
  //   file: nothing is shared, every mount fetches for itself); theirs: another process does.
  enum class Claim { mine, theirs };
  Claim claim(const Folder& folder, std::uint64_t index);
  // Ends this process's claim on block `index`: once its file is written, or its fetch failed.
  // Nothing happens when the process holds none.
  void release(const Folder& folder, std::uint64_t index);

  // Deletes the least recently used blocks while the cache holds more than its limit (store()
  // calls it; public for tests).
  void trim();

 private:
  void ignore(const std::string& what);  // reports the first thing ignored through warn_
  // The claims file of the object folder at descriptor `folder` (shown as `shown`), opened
  // read-write or made (mode 0600); -1 when it is not the cache's own regular file.
  int open_claims(int folder, const std::string& shown);

  std::string directory_;  // DIR as given: for messages
  int root_fd_ = -1;       // DIR/ckptfs-blocks-v1
  std::uint64_t limit_;
  Warn warn_;
  std::atomic<bool> warned_{false};
  std::mutex trim_mutex_;
  std::atomic<std::uint64_t> estimate_{0};  // bytes of block files, as last counted plus written
  std::atomic<bool> counted_{false};
  std::atomic<std::uint64_t> sequence_{0};  // temporary file names
};

}  // namespace ckptfs
