// SPDX-License-Identifier: MIT
// The virtual tree of a mounted model: built and validated once, immutable afterwards, so
// that lookups, attributes and reads are safe from many threads without locks.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unordered_map>
#include <vector>

namespace ckptfs {

// The sources of a model, by Storage::source index.
using Sources = std::span<const ByteSource* const>;

// A piece of a read: bytes in memory, or a range of one of the model's sources to be read from
// there (so that the FUSE adapter can hand a file's range to the kernel without staging it).
struct ReadPiece {
  static constexpr std::uint32_t generated = 0xffffffff;  // `source` of bytes made in memory
  const char* memory = nullptr;  // when non-null: `length` bytes here, read from `source` or
                                 // generated (a header, a JSON file)
  std::uint32_t source = generated;  // the source the bytes come from
  std::uint64_t source_offset = 0;   // when memory is null: where they are in it
  std::size_t length = 0;
};

// One part of a virtual file.
struct Extent {
  enum class Kind : std::uint8_t {
    literal,  // bytes held in memory (npy header, meta.json, value.json, index.json)
    source,   // a range of one of the model's sources
    gather,   // a non-contiguous tensor's elements in C order, gathered from its storage on read
  };
  Kind kind = Kind::literal;
  std::uint64_t length = 0;
  std::uint32_t literal = 0;        // literal: index into Vfs's literal strings
  std::uint32_t source = 0;         // source: index into the model's sources...
  std::uint64_t source_offset = 0;  // ...and absolute offset in it
  std::uint32_t tensor = 0;         // gather: index into Model::tensors
};

struct VfsOptions {
  std::string source_path;  // shown in index.json
  uid_t uid = 0;
  gid_t gid = 0;
  mode_t umask = 0222;      // files 0444, directories 0555
  SourceTimes times = {};   // of every node: the sources' own, so that rsync -a twice copies once
};

class Vfs {
 public:
  using Ino = std::uint64_t;  // inode numbers: node index + 1; the root is 1
  static constexpr Ino root_ino = 1;

  struct Node {
    std::string name;
    Ino parent = root_ino;
    bool directory = false;
    std::uint32_t first_child = 0;  // directories: children are nodes [first, first + count)
    std::uint32_t child_count = 0;
    std::uint32_t first_extent = 0;  // files: extents [first, first + count) of extents_
    std::uint32_t extent_count = 0;
    std::uint64_t size = 0;
  };

  // Builds the tree of `model`.
  Vfs(Model model, VfsOptions options);
  Vfs(const Vfs&) = delete;  // root_children_ holds views into the nodes' names
  Vfs& operator=(const Vfs&) = delete;

  const Node* node(Ino ino) const noexcept;
  // The child of directory `parent` named `name`, or 0.
  Ino lookup(Ino parent, std::string_view name) const noexcept;
  // Fills st for `ino`; false when there is no such node.
  bool stat(Ino ino, struct stat& st) const noexcept;
  Ino child_ino(const Node& dir, std::uint32_t i) const noexcept {
    return static_cast<Ino>(dir.first_child) + i + 1;
  }

  // The pieces of [offset, offset + length) of file `ino`, clipped to its size. Gathered bytes
  // are written to `scratch` (reused across calls) and returned as memory pieces pointing into
  // it. Throws Error(io) when a source cannot be read.
  void read(Ino ino, std::uint64_t offset, std::size_t length, Sources sources,
            std::vector<ReadPiece>& pieces, std::vector<char>& scratch) const;

  const Model& model() const noexcept { return model_; }
  std::size_t node_count() const noexcept { return nodes_.size(); }
  // The directory name of entry i (the key as a path component).
  const std::string& entry_directory(std::size_t entry) const {
    return nodes_[entry_dir_first_ + entry].name;
  }

 private:
  std::string index_json() const;
  std::uint32_t add_literal(std::string bytes);
  void add_file(std::string name, Ino parent, const std::vector<Extent>& extents);

  Model model_;
  VfsOptions options_;
  std::vector<Node> nodes_;
  std::vector<Extent> extents_;
  std::vector<std::string> literals_;
  std::unordered_map<std::string_view, std::uint32_t> root_children_;  // views into nodes_ names
  std::size_t entry_dir_first_ = 2;
};

// The bytes [offset, offset + length) of a tensor's logical C-order bytes, gathered from its
// storage with few large preads (never the whole storage at once) into `out` (resized).
void gather_tensor(const Model& model, const Tensor& tensor, std::uint64_t offset,
                   std::size_t length, Sources sources, std::vector<char>& out);

}  // namespace ckptfs
