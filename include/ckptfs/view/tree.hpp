// SPDX-License-Identifier: MIT
// The tree of a mounted model: one directory per entry (or, in the RFC layout, one file per
// entry and map.pt) and the .ckptfs folder of whole-checkpoint views at the root. Immutable once
// built: only what is derived from the model (meta.json, .npy headers, index.json, the
// safetensors export) is made, once, on first use, so that a mount costs its parsing and lookups,
// attributes and reads are safe from many threads.
#pragma once

#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/names.hpp>
#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/read_buffer.hpp>

#include <sys/stat.h>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

class JsonWriter;
class SafetensorsExport;
class SharingIndex;

// What the root holds besides views_folder (.ckptfs, names.hpp), which holds the views. The root
// lists keys only, so that a glob of key names (`rsync -a MNT/model.* dest/`) selects keys and
// nothing else.
enum class Layout : std::uint8_t {
  // A directory per entry: data, meta.json, tensor.npy, tensor.pt (a tensor; TreeOptions::files
  // chooses among them), or value.json (a value). .ckptfs holds index.json and
  // model.safetensors (or its shards).
  split,
  // The transformers RFC's layout (transformers#13548): map.pt (the keys, in order) and one
  // <name>.pt per entry that torch can load alone: a tensor's tensor.pt, or a value JSON
  // describes whole (plain_value()). map.pt stays at the root, where the RFC's loaders look for
  // it beside the <name>.pt files; .ckptfs holds index.json.
  rfc,
};

// The files a tensor's directory may hold, one bit each, in the order they are listed.
enum KeyFile : std::uint8_t {
  key_data = 1,        // data
  key_meta_json = 2,   // meta.json
  key_tensor_npy = 4,  // tensor.npy
  key_tensor_pt = 8,   // tensor.pt (when torch can hold the tensor)
  all_key_files = 15,
};
// The bit of a file named as it appears in a key directory ("data", "meta.json", "tensor.npy",
// "tensor.pt"; "npy" and "pt" for short), for -o files=LIST. "value.json" is 0: a value's
// directory always holds it. nullopt for any other name.
std::optional<std::uint8_t> key_file_bit(std::string_view name);
// The names of the files in `files`, comma-separated, in listing order ("data,meta.json").
std::string key_files_text(std::uint8_t files);

// The permission bits of a mount's files and directories.
struct Modes {
  mode_t file = 0444;
  mode_t directory = 0555;
};
// The modes that follow a checkpoint whose own permission bits are `mode`: files get its read
// and write bits (0644 -> 0644, 0600 -> 0600; never an execute bit), directories the same with
// an execute bit wherever a read bit is, and the owner's write bit always, so that a copy made
// with `rsync -a` or `cp -a` can be removed by the user who made it (0644 -> 0755, 0600 ->
// 0700, 0444 -> 0755). Writes fail with EROFS whatever the bits say: the mount is read-only.
Modes modes_following(mode_t mode) noexcept;
// The modes of -o umask=OCTAL, as other FUSE file systems take it: files 0666 & ~umask,
// directories 0777 & ~umask (0222: 0444 and 0555).
Modes modes_from_umask(mode_t umask) noexcept;

struct TreeOptions {
  std::string source_path = {};  // shown in index.json as "source"
  uid_t uid = 0;
  gid_t gid = 0;
  Modes modes = {};        // of every file and directory
  SourceTimes times = {};  // of every node: the sources' own, so that rsync -a twice copies once
  // The safetensors export in .ckptfs: one model.safetensors (0), or the sharded set of files
  // of at most this many bytes of tensors and model.safetensors.index.json.
  std::uint64_t shard_size = 0;
  // Serve every floating-point tensor converted to this dtype (see serve()); none: as stored.
  std::optional<DType> dtype = std::nullopt;
  Layout layout = Layout::split;
  // The split layout: which files a tensor's directory holds (KeyFile bits), a broken tensor's
  // too (see Tree::refusal()). A value's directory holds value.json whatever this says.
  std::uint8_t files = all_key_files;
  // Per source (Model::sources' order), the local file it is (local_files(), describe.hpp):
  // index.json's "source_files" and its tensors' "file_range". Empty: none published.
  std::vector<std::optional<LocalFile>> local_files = {};
};

class Tree {
 public:
  using Ino = std::uint64_t;  // inode numbers; the root is 1, every other derives from its place
  static constexpr Ino root_ino = 1;
  static constexpr Ino views_ino = 2;  // .ckptfs

  // What a node is. Files of an entry's directory, and of .ckptfs, in listing order.
  enum class Kind : std::uint8_t {
    root,
    views_dir,          // .ckptfs
    index_json,         // .ckptfs/index.json
    safetensors_index,  // .ckptfs/model.safetensors.index.json (a sharded export)
    safetensors_file,   // .ckptfs/model.safetensors, or a shard
    extra_file,         // .ckptfs/<name>: a file of the checkpoint as it is (Model::extra_files)
    model_file,         // .ckptfs/config.json...: a file of the model (Model::files)
    entry_dir,          // an entry's directory
    data,               // a tensor's bytes
    meta_json,          // what the tensor is
    tensor_npy,         // a .npy header, then the bytes
    tensor_pt,          // a torch zip that torch.load reads as the tensor alone
    value_json,         // a value that is not a tensor
    // The RFC layout's: map.pt at the root, and a value's <name>.pt (a tensor's is tensor_pt).
    keys_pt,
    value_pt,
  };

  struct Node {
    Kind kind;
    std::size_t index = 0;  // entry (entry_dir and its files), file of the export, model file
                            // or extra file
  };

  Tree(Model model, TreeOptions options);
  ~Tree();
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;

  const Model& model() const noexcept { return model_; }

  // What `ino` is; nullopt when there is no such node.
  std::optional<Node> node(Ino ino) const;

  // source_of() of the nodes that show or describe every source.
  static constexpr std::uint32_t every_source = 0xffffffff;
  // The source whose bytes `node` shows or describes: a tensor entry's directory and files, its
  // storage's source; an extra file, its own; every_source for the rest (the root, .ckptfs and its
  // files, values). When that source changes while mounted, opens of the node fail (in a sharded
  // set, only the changed shard's tensors).
  std::uint32_t source_of(const Node& node) const noexcept;
  // The child of directory `parent` named `name`, or 0.
  Ino lookup(Ino parent, std::string_view name) const;
  // The number of children of a directory, and child i's inode (i < count), its name written
  // into `name`.
  std::size_t child_count(Ino dir) const;
  Ino child(Ino dir, std::size_t i, std::string& name) const;
  Ino parent(Ino ino) const noexcept;

  // Fills st for `ino`; false when there is no such node. May build the file's derived content
  // (its size depends on it). Throws std::bad_alloc.
  bool stat(Ino ino, struct stat& st) const;
  std::uint64_t size(const Node& node) const;
  // Whether size(node) is known without making or counting a file that is made from every entry
  // (index.json, model.safetensors unsharded, map.pt): false until it is made or counted. A
  // listing leaves those files' attributes to their lookup.
  bool size_known(const Node& node) const noexcept;

  // Why the bytes of `node` cannot be read (nullopt when they can), as one line that names the
  // keys: a broken tensor's data, tensor.npy and tensor.pt (the RFC layout's <name>.pt), a
  // tensor.pt whose per-channel scales or zero points are broken, and every file of the
  // safetensors export when it would lack a broken tensor. Such a file is listed all the same,
  // with the size it would have (a broken tensor's: nominal_nbytes()), so that no view is ever
  // a tensor short without saying so: its opens and reads fail (EIO; read() throws Error(io)
  // with this text). `group` is one per tensor (its directory's or file's inode) or per export
  // (views_ino): the FUSE layer logs the text once per group.
  struct Refusal {
    std::string why;
    Ino group;
  };
  std::optional<Refusal> refusal(const Node& node) const;

  // Appends to `out` the pieces of [offset, offset + length) of file `ino`, clipped to its size:
  // every byte of that range, never fewer. Throws Error(io) when a source cannot be read, and
  // with refusal()'s text when the file is refused.
  void read(Ino ino, std::uint64_t offset, std::size_t length, Sources sources,
            ReadBuffer& out) const;

  // The name of entry i in the root (its directory; in the RFC layout, its file without ".pt"):
  // its key, unless the naming rule (names.hpp) changes it.
  std::string_view entry_name(std::size_t entry) const;
  // Whether entry i is in the root: always in the split layout; in the RFC layout, when it has
  // a file.
  bool entry_in_root(std::size_t entry) const noexcept {
    return options_.layout == Layout::split || has_file_[entry];
  }
  std::size_t node_count_hint() const noexcept;  // for statfs: roughly how many nodes there are

 private:
  struct EntryFiles;  // meta.json and the .npy header of a tensor entry, made on first use
  // A node at a fixed place: .ckptfs and map.pt (the root's), the views (.ckptfs's).
  struct FixedNode {
    std::string name;
    Kind kind;
    std::size_t index;  // the export's file
  };

  void read_clipped(const Node& n, std::uint64_t offset, std::size_t length, Sources sources,
                    ReadBuffer& out) const;
  const EntryFiles& entry_files(std::size_t entry) const;
  const std::string& meta_json(std::size_t entry) const;
  std::uint32_t storage_crc(std::size_t entry, const EntryFiles& files, std::size_t storage,
                            Sources sources) const;
  void read_torch_file(std::size_t entry, std::uint64_t offset, std::size_t length, Sources sources,
                       ReadBuffer& out) const;
  const Tensor& tensor_of_storage(std::size_t entry, std::size_t storage) const;
  const std::string& index_json() const;
  const std::string& model_file(std::size_t file) const;  // Model::files[file]'s bytes
  const std::string& keys_file() const;                   // map.pt
  template <typename Flush>
  void write_index_json(std::string& out, Flush flush) const;
  std::uint64_t index_json_size() const;
  std::uint64_t safetensors_file_size(std::size_t file) const;
  const SafetensorsExport& safetensors() const;
  const SharingIndex& sharing() const;
  std::uint8_t file_slots(std::size_t entry) const;
  Ino entry_ino(std::size_t entry) const noexcept { return first_entry_ino_ + entry * stride; }
  static constexpr Ino stride = 5;  // an entry's directory, then its four file slots

  std::optional<std::size_t> find_entry(std::string_view name) const;
  Ino lookup_view(std::string_view name) const;
  std::size_t root_entry(std::size_t child) const;  // the entry of a root child past fixed ones
  // Why entry i has no <name>.pt in the RFC layout (what map.pt cannot hold, a value that is not
  // plain data, a tensor torch cannot load alone); "" when it has one.
  std::string rfc_omission(std::size_t entry) const;
  // Why reading the safetensors export fails (refusal()), made once: "" when it holds every
  // tensor it can hold.
  const std::string& export_refusal() const;
  void write_exports(JsonWriter& j) const;  // index.json's "exports"

  static constexpr std::uint64_t unknown_size = ~std::uint64_t{0};

  Model model_;
  TreeOptions options_;
  // Inode root_ino + 1 + i: the root's first (.ckptfs at views_ino, then map.pt in the RFC
  // layout), then .ckptfs's.
  std::vector<FixedNode> fixed_;
  std::size_t root_fixed_ = 0;  // how many of fixed_ are the root's
  Ino first_entry_ino_ = 0;
  // The names that are not their entry's key, by entry (the naming rule changes few): a mount
  // keeps no second copy of its keys.
  std::vector<std::pair<std::size_t, std::string>> renamed_;
  bool keys_unique_ = true;  // no two entries have the same key text
  // The RFC layout: which entries have a file, and those entries in order (the root's children
  // after map.pt). Empty in the split layout, where every entry is a child.
  std::vector<bool> has_file_;
  std::vector<std::uint32_t> root_entries_;
  // The entries at the root by name: an open-addressing table of entry + 1 (0: empty), at most
  // half full, hashed by name with KeyedHash (a hostile checkpoint's keys cannot be made to
  // collide).
  std::vector<std::uint32_t> root_slots_;
  // Sizes of the views, known before (or without) their content: a listing stats them, and
  // building index.json or the safetensors header for that would keep megabytes.
  mutable std::atomic<std::uint64_t> index_json_size_{unknown_size};
  mutable std::atomic<std::uint64_t> safetensors_size_{unknown_size};
  // Made once, on first use (see entry_files(), index_json(), safetensors()).
  mutable std::unique_ptr<std::atomic<const EntryFiles*>[]> entry_files_;
  // Each entry's file_slots() with known_slots set, 0 until first known (whether tensor.pt can
  // be made).
  mutable std::unique_ptr<std::atomic<std::uint8_t>[]> file_slots_;
  mutable std::atomic<const std::string*> index_json_{nullptr};
  mutable std::atomic<const std::string*> keys_file_{nullptr};
  mutable std::atomic<const SafetensorsExport*> safetensors_{nullptr};
  mutable std::atomic<const SharingIndex*> sharing_{nullptr};
  mutable std::atomic<const std::string*> export_refusal_{nullptr};
  mutable std::unique_ptr<std::atomic<const std::string*>[]> model_files_;  // made on first use
};

}  // namespace ckptfs
