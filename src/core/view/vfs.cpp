// SPDX-License-Identifier: MIT
// The virtual tree: index.json, one directory per entry, and the extents of every file.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/names.hpp>
#include <ckptfs/view/npy.hpp>
#include <ckptfs/view/vfs.hpp>

#include <fmt/format.h>


namespace ckptfs {

Vfs::Vfs(Model model, VfsOptions options)
    : model_(std::move(model)), options_(std::move(options)) {
  const auto& entries = model_.entries;
  const std::size_t dirs = entries.size();
  // Layout: the root, index.json, the entry directories, then each directory's files. The node
  // table is sized once, so that root_children_ can hold views of the names as they are made.
  std::size_t files = 0;
  for (const Entry& e : entries) {
    bool servable = e.kind == Entry::Kind::tensor && model_.tensors[e.tensor].broken.empty();
    files += servable ? 3 : 1;
  }
  nodes_.reserve(2 + dirs + files);
  nodes_.resize(2 + dirs);
  nodes_[0].name = "";
  nodes_[0].directory = true;
  nodes_[0].first_child = 1;
  nodes_[0].child_count = static_cast<std::uint32_t>(1 + dirs);
  nodes_[0].parent = root_ino;
  nodes_[1].name = "index.json";
  nodes_[1].parent = root_ino;
  root_children_.reserve(dirs + 1);
  root_children_.emplace(nodes_[1].name, 1);
  NameAllocator names;
  for (std::size_t i = 0; i < dirs; ++i) {
    Node& dir = nodes_[2 + i];
    dir.name = names.name(entries[i].key);
    dir.directory = true;
    dir.parent = root_ino;
    root_children_.emplace(dir.name, static_cast<std::uint32_t>(2 + i));
  }

  SharingIndex sharing(model_);
  for (std::size_t i = 0; i < dirs; ++i) {
    const Entry& e = entries[i];
    const auto dir_index = static_cast<std::uint32_t>(2 + i);
    const Ino dir_ino = dir_index + 1;
    nodes_[dir_index].first_child = static_cast<std::uint32_t>(nodes_.size());
    auto literal_file = [&](const char* name, std::string bytes) {
      std::uint32_t lit = add_literal(std::move(bytes));
      add_file(name, dir_ino, {{Extent::Kind::literal, literals_[lit].size(), lit, 0, 0, 0}});
    };
    if (e.kind == Entry::Kind::value) {
      literal_file("value.json", e.value_json + "\n");
      nodes_[dir_index].child_count = 1;
      continue;
    }
    const Tensor& t = model_.tensors[e.tensor];
    if (!t.broken.empty()) {
      // A broken tensor has no bytes to serve: its meta.json says why.
      literal_file("meta.json", tensor_meta_json(model_, i, sharing));
      nodes_[dir_index].child_count = 1;
      continue;
    }
    std::vector<Extent> body;
    if (t.nbytes() == 0) {
    } else if (auto offset = model_.file_offset(t)) {
      body.push_back({Extent::Kind::source, t.nbytes(), 0, model_.storages[*t.storage].source,
                      *offset, 0});
    } else {
      body.push_back({Extent::Kind::gather, t.nbytes(), 0, 0, 0, static_cast<std::uint32_t>(e.tensor)});
    }
    std::uint32_t header =
        add_literal(npy_header(numpy_descr(t.dtype, big_endian(model_, t)), t.shape));
    std::vector<Extent> npy{{Extent::Kind::literal, literals_[header].size(), header, 0, 0, 0}};
    npy.insert(npy.end(), body.begin(), body.end());
    add_file("data", dir_ino, body);
    literal_file("meta.json", tensor_meta_json(model_, i, sharing));
    add_file("tensor.npy", dir_ino, npy);
    nodes_[dir_index].child_count = 3;
  }

  std::uint32_t lit = add_literal(index_json());
  nodes_[1].first_extent = static_cast<std::uint32_t>(extents_.size());
  nodes_[1].extent_count = 1;
  nodes_[1].size = literals_[lit].size();
  extents_.push_back({Extent::Kind::literal, literals_[lit].size(), lit, 0, 0, 0});

}

std::string Vfs::index_json() const {
  std::size_t tensors = 0;
  uint128 total_bytes = 0;
  for (const Entry& e : model_.entries) {
    if (e.kind != Entry::Kind::tensor) continue;
    ++tensors;
    const Tensor& t = model_.tensors[e.tensor];
    if (t.broken.empty()) total_bytes += t.nbytes();
  }
  std::string out;
  JsonWriter j(out);
  j.begin_object();
  j.key("source").string(options_.source_path);
  j.key("format").string(format_name(model_.format));
  j.key("byteorder").string(model_.byteorder());
  j.key("tensors").number(std::uint64_t{tensors});
  j.key("values").number(std::uint64_t{model_.entries.size() - tensors});
  j.key("total_bytes").raw(decimal(total_bytes));
  j.key("entries").begin_array();
  for (std::size_t i = 0; i < model_.entries.size(); ++i) {
    const Entry& e = model_.entries[i];
    j.begin_object();
    j.key("key").string(e.key);
    if (!e.key_path.empty()) j.key("key_path").raw(e.key_path);
    j.key("path").string(entry_directory(i));
    if (e.kind == Entry::Kind::value) {
      j.key("kind").string("value").key("dtype").null().key("shape").null().key("nbytes").null();
    } else {
      const Tensor& t = model_.tensors[e.tensor];
      j.key("kind").string("tensor");
      j.key("dtype").string(info(t.dtype).name);
      j.key("shape").numbers(t.shape);
      j.key("nbytes");
      if (t.broken.empty()) {
        j.number(t.nbytes());
      } else {
        j.null();
      }
    }
    j.end_object();
  }
  j.end_array().end_object();
  out += '\n';
  return out;
}

std::uint32_t Vfs::add_literal(std::string bytes) {
  literals_.push_back(std::move(bytes));
  return static_cast<std::uint32_t>(literals_.size() - 1);
}

void Vfs::add_file(std::string name, Ino parent, const std::vector<Extent>& extents) {
  Node& n = nodes_.emplace_back();  // within the capacity reserved by the constructor
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
  st.st_mtim = {options_.times.mtime_sec, options_.times.mtime_nsec};
  st.st_ctim = {options_.times.ctime_sec, options_.times.ctime_nsec};
  st.st_atim = st.st_mtim;
  return true;
}

void Vfs::read(Ino ino, std::uint64_t offset, std::size_t length, Sources sources,
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
          pieces.push_back({literals_[e.literal].data() + from, ReadPiece::generated, 0, len});
          break;
        case Extent::Kind::source:
          pieces.push_back({nullptr, e.source, e.source_offset + from, len});
          break;
        case Extent::Kind::gather: {
          const Tensor& t = model_.tensors[e.tensor];
          gather_tensor(model_, t, from, len, sources, scratch);
          pieces.push_back({scratch.data(), model_.storages[*t.storage].source, 0, len});
          break;
        }
      }
    }
    at = e_end;
  }
}

}  // namespace ckptfs
