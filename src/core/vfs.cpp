// SPDX-License-Identifier: MIT
// The virtual tree: index.json, one directory per entry, and the extents of every file.
#include <ckptfs/describe.hpp>
#include <ckptfs/error.hpp>
#include <ckptfs/names.hpp>
#include <ckptfs/npy.hpp>
#include <ckptfs/vfs.hpp>

#include <fmt/format.h>

#include <unordered_set>

namespace ckptfs {
namespace {

std::string dump(const nlohmann::ordered_json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

Vfs::Vfs(Checkpoint checkpoint, const FileIdentity& identity, VfsOptions options)
    : checkpoint_(std::move(checkpoint)), identity_(identity), options_(std::move(options)) {
  const auto& entries = checkpoint_.entries;
  const std::size_t dirs = entries.size();
  // Layout: the root, index.json, the entry directories, then each directory's files.
  nodes_.resize(2 + dirs);
  nodes_[0].name = "";
  nodes_[0].directory = true;
  nodes_[0].first_child = 1;
  nodes_[0].child_count = static_cast<std::uint32_t>(1 + dirs);
  nodes_[0].parent = root_ino;

  std::unordered_set<std::string> taken{"index.json"};
  for (std::size_t i = 0; i < dirs; ++i) {
    std::string name = directory_name(entries[i].key);
    // Keys are unique, and so are their names but for a 64-bit hash collision among cut names.
    for (int n = 2; taken.contains(name); ++n) name = fmt::format("{}~{}", name, n);
    taken.insert(name);
    Node& dir = nodes_[2 + i];
    dir.name = std::move(name);
    dir.directory = true;
    dir.parent = root_ino;
  }

  SharingIndex sharing(checkpoint_);
  nlohmann::ordered_json index_entries = nlohmann::ordered_json::array();
  std::size_t tensor_count = 0;
  std::uint64_t total_bytes = 0;
  for (std::size_t i = 0; i < dirs; ++i) {
    const Entry& e = entries[i];
    const auto dir_index = static_cast<std::uint32_t>(2 + i);
    const Ino dir_ino = dir_index + 1;
    nodes_[dir_index].first_child = static_cast<std::uint32_t>(nodes_.size());
    nlohmann::ordered_json item;
    item["key"] = e.key;
    item["path"] = nodes_[dir_index].name;
    if (e.kind == Entry::Kind::value) {
      item["kind"] = "value";
      item["dtype"] = nullptr;
      item["shape"] = nullptr;
      item["nbytes"] = nullptr;
      std::uint32_t lit = add_literal(e.value_json + "\n");
      add_file(static_cast<std::uint32_t>(nodes_.size()), "value.json", dir_ino,
               {{Extent::Kind::literal, literals_[lit].size(), lit, 0, 0}});
      nodes_[dir_index].child_count = 1;
    } else {
      ++tensor_count;
      const Tensor& t = checkpoint_.tensors[e.tensor];
      item["kind"] = "tensor";
      item["dtype"] = info(t.dtype).name;
      item["shape"] = t.shape;
      std::uint32_t meta = add_literal(dump(describe_tensor(checkpoint_, i, sharing)));
      std::vector<Extent> body;
      if (t.broken.empty()) {
        total_bytes += t.nbytes();
        item["nbytes"] = t.nbytes();
        if (t.nbytes() == 0) {
        } else if (auto offset = checkpoint_.file_offset(t)) {
          body.push_back({Extent::Kind::source, t.nbytes(), 0, *offset, 0});
        } else {
          body.push_back({Extent::Kind::gather, t.nbytes(), 0, 0,
                          static_cast<std::uint32_t>(e.tensor)});
        }
        std::uint32_t header =
            add_literal(npy_header(numpy_descr(t.dtype, checkpoint_.big_endian), t.shape));
        std::vector<Extent> npy{{Extent::Kind::literal, literals_[header].size(), header, 0, 0}};
        npy.insert(npy.end(), body.begin(), body.end());
        auto first = static_cast<std::uint32_t>(nodes_.size());
        add_file(first, "data", dir_ino, body);
        add_file(first + 1, "meta.json", dir_ino,
                 {{Extent::Kind::literal, literals_[meta].size(), meta, 0, 0}});
        add_file(first + 2, "tensor.npy", dir_ino, npy);
        nodes_[dir_index].child_count = 3;
      } else {
        // A broken tensor has no bytes to serve: its meta.json says why.
        item["nbytes"] = nullptr;
        add_file(static_cast<std::uint32_t>(nodes_.size()), "meta.json", dir_ino,
                 {{Extent::Kind::literal, literals_[meta].size(), meta, 0, 0}});
        nodes_[dir_index].child_count = 1;
      }
    }
    index_entries.push_back(std::move(item));
  }

  nlohmann::ordered_json index;
  index["source"] = options_.source_path;
  index["format"] = format_name(checkpoint_.format);
  index["byteorder"] = byteorder_name(checkpoint_);
  index["tensors"] = tensor_count;
  index["values"] = dirs - tensor_count;
  index["total_bytes"] = total_bytes;
  index["entries"] = std::move(index_entries);
  std::uint32_t lit = add_literal(dump(index));
  nodes_[1].name = "index.json";
  nodes_[1].parent = root_ino;
  nodes_[1].first_extent = static_cast<std::uint32_t>(extents_.size());
  nodes_[1].extent_count = 1;
  nodes_[1].size = literals_[lit].size();
  extents_.push_back({Extent::Kind::literal, literals_[lit].size(), lit, 0, 0});

  root_children_.reserve(dirs + 1);
  for (std::uint32_t i = 1; i < 2 + dirs; ++i) root_children_.emplace(nodes_[i].name, i);
}

std::uint32_t Vfs::add_literal(std::string bytes) {
  literals_.push_back(std::move(bytes));
  return static_cast<std::uint32_t>(literals_.size() - 1);
}

void Vfs::add_file(std::uint32_t index, std::string name, Ino parent,
                   std::vector<Extent> extents) {
  if (nodes_.size() <= index) nodes_.resize(index + 1);
  Node& n = nodes_[index];
  n.name = std::move(name);
  n.parent = parent;
  n.first_extent = static_cast<std::uint32_t>(extents_.size());
  n.extent_count = static_cast<std::uint32_t>(extents.size());
  n.size = 0;
  for (const auto& e : extents) {
    n.size += e.length;
    extents_.push_back(e);
  }
}

const Vfs::Node* Vfs::node(Ino ino) const noexcept {
  if (ino < 1 || ino > nodes_.size()) return nullptr;
  return &nodes_[ino - 1];
}

Vfs::Ino Vfs::lookup(Ino parent, std::string_view name) const noexcept {
  const Node* dir = node(parent);
  if (!dir || !dir->directory) return 0;
  if (parent == root_ino) {
    auto it = root_children_.find(name);
    return it == root_children_.end() ? 0 : it->second + 1;
  }
  for (std::uint32_t i = 0; i < dir->child_count; ++i) {
    if (nodes_[dir->first_child + i].name == name) return child_ino(*dir, i);
  }
  return 0;
}

bool Vfs::stat(Ino ino, struct stat& st) const noexcept {
  const Node* n = node(ino);
  if (!n) return false;
  st = {};
  st.st_ino = ino;
  st.st_uid = options_.uid;
  st.st_gid = options_.gid;
  if (n->directory) {
    st.st_mode = S_IFDIR | (0555 & ~options_.umask);
    // "." and the parent's link, plus each subdirectory's "..".
    st.st_nlink = ino == root_ino ? 2 + (n->child_count - 1) : 2;
    st.st_size = 0;
  } else {
    st.st_mode = S_IFREG | (0444 & ~options_.umask);
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(n->size);
  }
  st.st_blksize = 4096;
  st.st_blocks = static_cast<blkcnt_t>((n->size + 511) / 512);
  st.st_mtim = {identity_.mtime_sec, identity_.mtime_nsec};
  st.st_ctim = {identity_.ctime_sec, identity_.ctime_nsec};
  st.st_atim = st.st_mtim;
  return true;
}

void Vfs::read(Ino ino, std::uint64_t offset, std::size_t length, const ByteSource& source,
               std::vector<ReadPiece>& pieces, std::vector<char>& scratch) const {
  pieces.clear();
  const Node* n = node(ino);
  if (!n || n->directory || offset >= n->size) return;
  std::uint64_t end = offset + std::min<std::uint64_t>(length, n->size - offset);
  std::uint64_t at = 0;  // file offset of the current extent
  for (std::uint32_t i = 0; i < n->extent_count && at < end; ++i) {
    const Extent& e = extents_[n->first_extent + i];
    std::uint64_t e_end = at + e.length;
    if (e_end > offset) {
      std::uint64_t from = std::max(offset, at) - at;  // within the extent
      auto len = static_cast<std::size_t>(std::min(end, e_end) - at - from);
      switch (e.kind) {
        case Extent::Kind::literal:
          pieces.push_back({literals_[e.literal].data() + from, 0, len});
          break;
        case Extent::Kind::source:
          pieces.push_back({nullptr, e.source_offset + from, len});
          break;
        case Extent::Kind::gather:
          gather_tensor(checkpoint_, checkpoint_.tensors[e.tensor], from, len, source, scratch);
          pieces.push_back({scratch.data(), 0, len});
          break;
      }
    }
    at = e_end;
  }
}

}  // namespace ckptfs
