// SPDX-License-Identifier: MIT
// The tree: inode numbers computed from an entry's place, names, attributes, and the reads of
// every kind of file, with derived files made on first use.
#include <ckptfs/base/crc32.hpp>
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/names.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/format/pickle/read_plain_value.hpp>
#include <ckptfs/format/torch/torch_writer.hpp>
#include <ckptfs/view/describe.hpp>
#include <ckptfs/view/npy.hpp>
#include <ckptfs/view/safetensors_export.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

namespace ckptfs {

// A tensor entry's derived files. meta.json, made on its first use (its offsets may mean reading
// a remote record's local header); the .npy header; tensor.pt: its archive, the archive's
// segments and local headers, and its storages' CRCs and central directory, made once each on
// first need (a CRC may mean reading the whole tensor once). A value entry's, in the RFC
// layout: its <name>.pt, whole.
struct Tree::EntryFiles {
  std::string value_file;
  mutable std::atomic<const std::string*> meta_json{nullptr};
  std::string npy_header;
  std::optional<TorchArchive> archive;
  std::vector<ZipSegment> segments;
  std::vector<std::string> local_headers;
  mutable std::atomic<std::uint64_t> crcs[3] = {};  // bit 32 set: known
  mutable std::atomic<const std::string*> trailer{nullptr};
  ~EntryFiles() {
    delete trailer.load();
    delete meta_json.load();
  }
};

namespace {

// Makes *slot once: the first thread to finish publishes its result, the others drop theirs.
// `make` returns the value (or a unique_ptr to it, for what cannot be moved).
template <typename T, typename Make>
const T& once(std::atomic<const T*>& slot, Make make) {
  if (const T* made = slot.load(std::memory_order_acquire)) return *made;
  std::unique_ptr<const T> fresh;
  if constexpr (std::is_same_v<decltype(make()), std::unique_ptr<T>>) {
    fresh = make();
  } else {
    fresh = std::make_unique<const T>(make());
  }
  const T* expected = nullptr;
  if (slot.compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) {
    return *fresh.release();
  }
  return *expected;
}

// A tensor's files, by slot (KeyFile bit i is slot i; inode: the directory's + 1 + i).
constexpr std::string_view entry_file_names[] = {"data", "meta.json", "tensor.npy", "tensor.pt"};
constexpr Tree::Kind entry_file_kinds[] = {Tree::Kind::data, Tree::Kind::meta_json,
                                           Tree::Kind::tensor_npy, Tree::Kind::tensor_pt};
// file_slots() with this bit set is known; a value's value.json is slot 0.
constexpr std::uint8_t known_slots = 0x80;

// How a tensor's bytes are served in tensor.pt (and the RFC layout's <key>.pt): little-endian
// whatever the checkpoint's byte order, as torch before 2.1 ignores the byteorder record and
// would load big-endian bytes swapped (data and tensor.npy keep the checkpoint's: their readers
// are told the order by meta.json and the npy descr).
ServedTensor serve_torch_file(const Model& model, const Tensor& tensor,
                              std::optional<DType> convert_to) {
  return serve(model, tensor, convert_to, ByteOrder::little);
}

// The archive tensor.pt holds for a tensor served as `served` (a broken tensor's: the one it
// would hold); nullopt when torch cannot hold it (a quantization scheme torch does not save, more
// elements than a pickle may describe), and then why in *why when given.
std::optional<TorchArchive> torch_file_of(const Model& model, const Tensor& tensor,
                                          const ServedTensor& served, std::string* why = nullptr) {
  try {
    TensorFileSpec spec = tensor_file_spec(model, tensor);
    spec.dtype = served.dtype;  // converted (-o dtype), or as stored
    return tensor_file(spec, {.prefix = "tensor", .big_endian = served.big_endian});
  } catch (const Error& e) {
    if (why != nullptr) *why = e.what();
    return std::nullopt;
  }
}

// Why a tensor is broken, for a one-line message: as the reader wrote it (quoting what is
// untrusted in it), each control character and byte that is not UTF-8 written \xNN, so that no
// reason can break or forge a line of the log.
std::string one_line(std::string_view why) {
  std::string out;
  for (std::size_t i = 0; i < why.size();) {
    const auto c = static_cast<unsigned char>(why[i]);
    const std::size_t length = utf8_sequence_length(why, i);
    if (c < 0x20 || c == 0x7f || length == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    } else {
      out.append(why.substr(i, length));
      i += length;
    }
  }
  return out;
}

// The keys of `entries` for a message: the first few quoted, then how many more.
std::string some_keys(const Model& model, const std::vector<std::size_t>& entries,
                      std::size_t total) {
  std::string out;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i != 0) out += ", ";
    out += quote(model.entries[entries[i]].key);
  }
  if (total > entries.size()) out += fmt::format(" and {} more", total - entries.size());
  return out;
}

// The file torch.save(value) writes for the plain value a value entry holds (entry_value():
// exactly as the checkpoint held it, or as its value.json says it); nullopt for a value that is
// no plain data, or one a pickle cannot hold.
std::optional<std::string> value_file_of(const Entry& e) {
  const auto value = entry_value(e);
  if (!value) return std::nullopt;
  try {
    return value_file(*value).bytes();
  } catch (const Error&) {
    return std::nullopt;  // a str that is not UTF-8, a container too deep to write
  }
}

}  // namespace

std::optional<std::uint8_t> key_file_bit(std::string_view name) {
  for (std::size_t i = 0; i < std::size(entry_file_names); ++i) {
    if (name == entry_file_names[i]) return static_cast<std::uint8_t>(1u << i);
  }
  if (name == "npy") return key_tensor_npy;
  if (name == "pt") return key_tensor_pt;
  if (name == "value.json") return 0;
  return std::nullopt;
}

std::string key_files_text(std::uint8_t files) {
  std::string out;
  for (std::size_t i = 0; i < std::size(entry_file_names); ++i) {
    if ((files & (1u << i)) == 0) continue;
    if (!out.empty()) out += ',';
    out += entry_file_names[i];
  }
  return out;
}

Modes modes_following(mode_t mode) noexcept {
  const mode_t file = mode & 0666;
  mode_t directory = file | S_IWUSR;
  if (file & S_IRUSR) directory |= S_IXUSR;
  if (file & S_IRGRP) directory |= S_IXGRP;
  if (file & S_IROTH) directory |= S_IXOTH;
  return {file, directory};
}

Modes modes_from_umask(mode_t umask) noexcept {
  return {static_cast<mode_t>(0666 & ~umask), static_cast<mode_t>(0777 & ~umask)};
}

std::string Tree::rfc_omission(std::size_t entry) const {
  const Entry& e = model_.entries[entry];
  try {
    pickle::Writer keys;
    keys.string(e.key);  // map.pt holds the key as a str
  } catch (const Error& error) {
    return fmt::format("map.pt cannot hold its key: {}", error.what());
  }
  if (e.kind == Entry::Kind::value) {
    if (value_file_of(e)) return {};
    return "a value torch.save cannot write as plain data (an object of some class): its "
           "value.json describes it";
  }
  // A broken tensor has its file, whose reads fail (refusal()): map.pt lists it.
  const Tensor& t = model_.tensors[e.tensor];
  if (const std::string_view why = values_not_served(model_, t); !why.empty()) {
    return fmt::format("{} blocks: {}", info(t.blocks).name, why);
  }
  std::string why;
  if (!torch_file_of(model_, t, serve_torch_file(model_, t, options_.dtype), &why)) {
    return "torch cannot load it alone: " + why;
  }
  return {};
}

Tree::Tree(Model model, TreeOptions options)
    : model_(std::move(model)), options_(std::move(options)) {
  const bool rfc = options_.layout == Layout::rfc;
  fixed_.push_back({std::string(views_folder), Kind::views_dir, 0});
  if (rfc) fixed_.push_back({"map.pt", Kind::keys_pt, 0});
  root_fixed_ = fixed_.size();
  fixed_.push_back({"index.json", Kind::index_json, 0});
  // The model's own files (a GGUF's config.json under names=hf), beside index.json: never under
  // a view's name.
  model_files_ = std::make_unique<std::atomic<const std::string*>[]>(model_.files.size());
  for (std::size_t i = 0; i < model_.files.size(); ++i) {
    const std::string& name = model_.files[i].name;
    if (name == "index.json" || name.starts_with("model.safetensors") ||
        name.starts_with("model-")) {
      continue;
    }
    fixed_.push_back({name, Kind::model_file, i});
  }
  // The checkpoint's own files as they are (a .keras archive's config.json): each a plain name
  // that no view and no model file has, once.
  for (std::size_t i = 0; i < model_.extra_files.size(); ++i) {
    const std::string& name = model_.extra_files[i].name;
    const bool plain = !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
                       name.find_first_of(std::string_view("/\0", 2)) == std::string::npos;
    const bool taken =
        name == "index.json" || name == "map.pt" || name.starts_with("model.safetensors") ||
        name.starts_with("model-") ||
        std::any_of(fixed_.begin() + static_cast<std::ptrdiff_t>(root_fixed_), fixed_.end(),
                    [&](const FixedNode& f) { return f.name == name; });
    if (plain && !taken) fixed_.push_back({name, Kind::extra_file, i});
  }
  if (rfc) {
    // no safetensors export: the RFC's files are the tensors
  } else if (options_.shard_size == 0) {
    fixed_.push_back({"model.safetensors", Kind::safetensors_file, 0});
  } else {
    // The shards' names say how many there are: the export is laid out now. A model that fits
    // one shard is one model.safetensors, without an index.
    const SafetensorsExport& files = safetensors();
    if (!files.index_json().empty()) {
      fixed_.push_back({"model.safetensors.index.json", Kind::safetensors_index, 0});
    }
    for (std::size_t i = 0; i < files.files().size(); ++i) {
      fixed_.push_back({files.files()[i].name, Kind::safetensors_file, i});
    }
  }
  first_entry_ino_ = root_ino + 1 + fixed_.size();
  const std::size_t entries = model_.entries.size();
  if (rfc) {
    // Which entries have a file decides the listing and map.pt; their content is made on use.
    has_file_.resize(entries);
    for (std::size_t i = 0; i < entries; ++i) {
      if (rfc_omission(i).empty()) {
        has_file_[i] = true;
        root_entries_.push_back(static_cast<std::uint32_t>(i));
      }
    }
    root_entries_.shrink_to_fit();
  }
  // Names as NameAllocator gives them, with the root's lookup table as the set of names taken:
  // no second copy of the keys. The root's fixed names (.ckptfs; map.pt, whose "map" the rule
  // reserves) are no key's name, and are found apart. In the RFC layout the table holds the
  // names, without ".pt", of the entries with a file only: those map.pt lists, so that a loader
  // finds the file of each key of map.pt by the rule applied to map.pt's keys alone.
  const std::size_t max_bytes = rfc ? rfc_name_bytes : max_name_bytes;
  std::size_t slots = 16;
  while (slots < 2 * entries) slots *= 2;
  root_slots_.assign(slots, 0);
  TextViewSet own_keys;
  for (std::size_t i = 0; i < entries; ++i) {
    if (rfc && !has_file_[i]) continue;
    const std::string& key = model_.entries[i].key;
    std::string name = is_own_name(key, max_bytes) ? std::string() : directory_name(key, max_bytes);
    if (find_entry(name.empty() ? std::string_view(key) : name)) {
      keys_unique_ = false;  // an earlier key has this name: the same text
      if (own_keys.empty()) {
        // The texts of every key named (names.hpp's rule for keys of equal text), made once,
        // on the first collision: most models have none.
        for (std::size_t j = 0; j < entries; ++j) {
          if (!rfc || has_file_[j]) own_keys.insert(model_.entries[j].key);
        }
      }
      for (std::uint64_t n = 2;; ++n) {
        if (suffix_is_own_key(key, n, own_keys)) continue;
        name = suffixed_name(key, n, max_bytes);
        if (!find_entry(name)) break;
      }
    }
    if (!name.empty()) renamed_.emplace_back(i, std::move(name));
    // Inserted once named: entry_name() finds the new name.
    std::size_t at = KeyedHash{}(entry_name(i)) & (slots - 1);
    while (root_slots_[at] != 0) at = (at + 1) & (slots - 1);
    root_slots_[at] = static_cast<std::uint32_t>(i + 1);
  }
  renamed_.shrink_to_fit();
  entry_files_ = std::make_unique<std::atomic<const EntryFiles*>[]>(entries);
  file_slots_ = std::make_unique<std::atomic<std::uint8_t>[]>(entries);
}

Tree::~Tree() {
  for (std::size_t i = 0; i < model_.entries.size(); ++i) delete entry_files_[i].load();
  delete index_json_.load();
  delete keys_file_.load();
  delete safetensors_.load();
  delete sharing_.load();
  delete export_refusal_.load();
  for (std::size_t i = 0; i < model_.files.size(); ++i) delete model_files_[i].load();
}

std::string_view Tree::entry_name(std::size_t entry) const {
  if (!renamed_.empty()) {
    auto it = std::lower_bound(renamed_.begin(), renamed_.end(), entry,
                               [](const auto& r, std::size_t e) { return r.first < e; });
    if (it != renamed_.end() && it->first == entry) return it->second;
  }
  return model_.entries[entry].key;
}

std::size_t Tree::root_entry(std::size_t child) const {
  return options_.layout == Layout::rfc ? root_entries_[child] : child;
}

std::optional<std::size_t> Tree::find_entry(std::string_view name) const {
  const std::size_t mask = root_slots_.size() - 1;
  for (std::size_t at = KeyedHash{}(name)&mask;; at = (at + 1) & mask) {
    const std::uint32_t slot = root_slots_[at];
    if (slot == 0) return std::nullopt;
    if (entry_name(slot - 1) == name) return slot - 1;
  }
}

Tree::Ino Tree::lookup_view(std::string_view name) const {
  // A shard's name says its place ("model-00002-of-00005.safetensors": the second shard).
  std::size_t first_shard = root_fixed_;
  while (first_shard < fixed_.size() && fixed_[first_shard].kind != Kind::safetensors_file) {
    if (fixed_[first_shard].name == name) return root_ino + 1 + first_shard;
    ++first_shard;
  }
  constexpr std::string_view prefix = "model-";
  std::size_t shard = 0;
  if (name.starts_with(prefix)) {
    for (std::size_t i = prefix.size(); i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) {
      if (shard > fixed_.size()) break;  // past every shard: no need to count on
      shard = shard * 10 + static_cast<std::size_t>(name[i] - '0');
    }
  }
  const std::size_t at = first_shard + (shard == 0 ? 0 : shard - 1);
  if (at < fixed_.size() && fixed_[at].name == name) return root_ino + 1 + at;
  return 0;
}

std::uint8_t Tree::file_slots(std::size_t entry) const {
  std::uint8_t slots = file_slots_[entry].load(std::memory_order_relaxed);
  if (slots != 0) return slots & ~known_slots;
  const Entry& e = model_.entries[entry];
  if (e.kind == Entry::Kind::value) {
    slots = 1;  // value.json
  } else if (!values_not_served(model_, model_.tensors[e.tensor]).empty()) {
    slots = options_.files & (key_data | key_meta_json);  // blocks whose values are not served
  } else {
    slots = options_.files;
    // tensor.pt when torch can hold the tensor (known once its archive is planned)
    if ((slots & key_tensor_pt) && !entry_files(entry).archive) slots &= ~key_tensor_pt;
  }
  file_slots_[entry].store(slots | known_slots, std::memory_order_relaxed);
  return slots;
}

std::optional<Tree::Node> Tree::node(Ino ino) const {
  if (ino == root_ino) return Node{Kind::root, 0};
  if (ino > root_ino && ino < first_entry_ino_) {
    const FixedNode& f = fixed_[ino - root_ino - 1];
    return Node{f.kind, f.index};
  }
  if (ino < first_entry_ino_) return std::nullopt;
  const std::uint64_t entry = (ino - first_entry_ino_) / stride;
  const std::uint64_t part = (ino - first_entry_ino_) % stride;
  if (entry >= model_.entries.size()) return std::nullopt;
  if (options_.layout == Layout::rfc) {
    // An entry's place holds its <name>.pt, when it has one.
    if (part != 0 || !has_file_[entry]) return std::nullopt;
    const bool value = model_.entries[entry].kind == Entry::Kind::value;
    return Node{value ? Kind::value_pt : Kind::tensor_pt, entry};
  }
  if (part == 0) return Node{Kind::entry_dir, entry};
  if ((file_slots(entry) & (1u << (part - 1))) == 0) return std::nullopt;
  if (model_.entries[entry].kind == Entry::Kind::value) return Node{Kind::value_json, entry};
  return Node{entry_file_kinds[part - 1], entry};
}

std::uint32_t Tree::source_of(const Node& n) const noexcept {
  switch (n.kind) {
    case Kind::entry_dir:
    case Kind::data:
    case Kind::meta_json:
    case Kind::tensor_npy:
    case Kind::tensor_pt: {
      const Entry& e = model_.entries[n.index];
      if (e.kind != Entry::Kind::tensor) return every_source;
      const Tensor& t = model_.tensors[e.tensor];
      return t.storage ? model_.storages[*t.storage].source : every_source;
    }
    case Kind::extra_file:
      return model_.extra_files[n.index].source;
    default:
      return every_source;
  }
}

Tree::Ino Tree::parent(Ino ino) const noexcept {
  if (ino < first_entry_ino_) return ino <= root_ino + root_fixed_ ? root_ino : views_ino;
  const std::uint64_t part = (ino - first_entry_ino_) % stride;
  return part == 0 ? root_ino : ino - part;
}

std::size_t Tree::child_count(Ino dir) const {
  auto n = node(dir);
  if (!n) return 0;
  switch (n->kind) {
    case Kind::root:
      return root_fixed_ +
             (options_.layout == Layout::rfc ? root_entries_.size() : model_.entries.size());
    case Kind::views_dir:
      return fixed_.size() - root_fixed_;
    case Kind::entry_dir:
      return static_cast<std::size_t>(std::popcount(file_slots(n->index)));
    default:
      return 0;
  }
}

Tree::Ino Tree::child(Ino dir, std::size_t i, std::string& name) const {
  if (dir == root_ino || dir == views_ino) {
    const std::size_t fixed = dir == root_ino ? i : root_fixed_ + i;
    if (dir == views_ino || i < root_fixed_) {
      name = fixed_[fixed].name;
      return root_ino + 1 + fixed;
    }
    const std::size_t entry = root_entry(i - root_fixed_);
    name = entry_name(entry);
    if (options_.layout == Layout::rfc) name += ".pt";
    return entry_ino(entry);
  }
  auto n = node(dir);
  const Entry& e = model_.entries[n->index];
  if (e.kind == Entry::Kind::value) {
    name = "value.json";
    return dir + 1;
  }
  // The i-th slot that holds a file.
  const std::uint8_t slots = file_slots(n->index);
  std::size_t slot = 0;
  for (std::size_t seen = 0;; ++slot) {
    if ((slots & (1u << slot)) && seen++ == i) break;
  }
  name = entry_file_names[slot];
  return dir + 1 + slot;
}

Tree::Ino Tree::lookup(Ino parent, std::string_view name) const {
  if (parent == root_ino) {
    for (std::size_t f = 0; f < root_fixed_; ++f) {
      if (name == fixed_[f].name) return root_ino + 1 + f;
    }
    if (options_.layout == Layout::rfc) {
      constexpr std::string_view suffix = ".pt";
      if (!name.ends_with(suffix)) return 0;
      const auto found = find_entry(name.substr(0, name.size() - suffix.size()));
      return found && has_file_[*found] ? entry_ino(*found) : 0;
    }
    const auto found = find_entry(name);
    return found ? entry_ino(*found) : 0;
  }
  if (parent == views_ino) return lookup_view(name);
  auto n = node(parent);
  if (!n || n->kind != Kind::entry_dir) return 0;
  const Entry& e = model_.entries[n->index];
  if (e.kind == Entry::Kind::value) return name == "value.json" ? parent + 1 : 0;
  const std::uint8_t slots = file_slots(n->index);
  for (std::size_t slot = 0; slot < std::size(entry_file_names); ++slot) {
    if ((slots & (1u << slot)) && name == entry_file_names[slot]) return parent + 1 + slot;
  }
  return 0;
}

const std::string& Tree::meta_json(std::size_t entry) const {
  return once(entry_files(entry).meta_json,
              [&] { return tensor_meta_json(model_, entry, sharing(), options_.dtype); });
}

const Tree::EntryFiles& Tree::entry_files(std::size_t entry) const {
  return once(entry_files_[entry], [&] {
    auto made = std::make_unique<EntryFiles>();
    EntryFiles& f = *made;
    const Entry& e = model_.entries[entry];
    if (e.kind == Entry::Kind::value) {
      f.value_file = value_file_of(e).value_or(std::string());
      return made;
    }
    // A broken tensor's too: the files it would have, whose reads fail (refusal()).
    const Tensor& t = model_.tensors[e.tensor];
    if (values_not_served(model_, t).empty()) {
      const ServedTensor served = serve(model_, t, options_.dtype);
      f.npy_header =
          npy_header(numpy_descr(served.dtype, served.big_endian), npy_shape(t.dtype, t.shape));
      f.archive = torch_file_of(model_, t, serve_torch_file(model_, t, options_.dtype));
      if (f.archive) {
        f.segments = f.archive->plan().segments();
        for (std::size_t i = 0; i < f.archive->records().size(); ++i) {
          f.local_headers.push_back(f.archive->plan().local_header(i));
        }
      }
    }
    return made;
  });
}

std::uint64_t Tree::size(const Node& n) const {
  switch (n.kind) {
    case Kind::root:
    case Kind::views_dir:
    case Kind::entry_dir:
      return 0;
    case Kind::index_json:
      return index_json_size();
    case Kind::safetensors_index:
      return safetensors().index_json().size();
    case Kind::safetensors_file:
      return safetensors_file_size(n.index);
    case Kind::extra_file:
      return model_.extra_files[n.index].size;
    case Kind::model_file:
      return model_file(n.index).size();
    case Kind::data: {
      const Tensor& t = model_.tensors[model_.entries[n.index].tensor];
      if (!t.broken.empty()) return nominal_nbytes(t, true);
      return serve_data(model_, t, options_.dtype).nbytes;
    }
    case Kind::meta_json:
      return meta_json(n.index).size();
    case Kind::tensor_npy: {
      const Tensor& t = model_.tensors[model_.entries[n.index].tensor];
      return entry_files(n.index).npy_header.size() +
             (t.broken.empty() ? serve(model_, t, options_.dtype).nbytes : nominal_nbytes(t));
    }
    case Kind::tensor_pt:
      return entry_files(n.index).archive->plan().size();
    case Kind::value_json:
      return model_.entries[n.index].value_json.size() + 1;
    case Kind::keys_pt:
      return keys_file().size();
    case Kind::value_pt:
      return entry_files(n.index).value_file.size();
  }
  return 0;
}

bool Tree::size_known(const Node& n) const noexcept {
  switch (n.kind) {
    case Kind::index_json:
      return index_json_.load(std::memory_order_acquire) != nullptr ||
             index_json_size_.load(std::memory_order_relaxed) != unknown_size;
    case Kind::safetensors_file:
      return options_.shard_size != 0 || safetensors_.load(std::memory_order_acquire) != nullptr ||
             safetensors_size_.load(std::memory_order_relaxed) != unknown_size;
    case Kind::keys_pt:
      return keys_file_.load(std::memory_order_acquire) != nullptr;
    case Kind::model_file:
      return model_files_[n.index].load(std::memory_order_acquire) != nullptr;
    default:  // the sharded export's index is laid out at mount; an entry's files are its own
      return true;
  }
}

bool Tree::stat(Ino ino, struct stat& st) const {
  auto n = node(ino);
  if (!n) return false;
  st = {};
  st.st_ino = ino;
  st.st_uid = options_.uid;
  st.st_gid = options_.gid;
  const bool directory =
      n->kind == Kind::root || n->kind == Kind::views_dir || n->kind == Kind::entry_dir;
  const std::uint64_t bytes = size(*n);
  if (directory) {
    st.st_mode = S_IFDIR | (options_.modes.directory & 07777);
    // "." and the parent's link, plus each subdirectory's "..": the root's are .ckptfs and, in
    // the split layout, the entries'.
    st.st_nlink = 2;
    if (ino == root_ino) {
      st.st_nlink += 1 + (options_.layout == Layout::split ? model_.entries.size() : 0);
    }
  } else {
    st.st_mode = S_IFREG | (options_.modes.file & 07777);
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(bytes);  // every file fits off_t (max_tensor_bytes)
  }
  st.st_blksize = 4096;
  st.st_blocks = static_cast<blkcnt_t>((bytes + 511) / 512);
  st.st_mtim = {options_.times.mtime_sec, options_.times.mtime_nsec};
  st.st_ctim = {options_.times.ctime_sec, options_.times.ctime_nsec};
  st.st_atim = st.st_mtim;
  return true;
}

std::size_t Tree::node_count_hint() const noexcept {
  return 1 + fixed_.size() + model_.entries.size() * stride;
}

// index.json, written into `out`; `flush` is called whenever `out` holds more than a few KiB
// and once at the end, and may empty it (to count the bytes without keeping them).
template <typename Flush>
void Tree::write_index_json(std::string& out, Flush flush) const {
  constexpr std::size_t flush_at = 16 * 1024;
  std::size_t tensors = 0;
  uint128 total_bytes = 0;
  for (const Entry& e : model_.entries) {
    if (e.kind != Entry::Kind::tensor) continue;
    ++tensors;
    total_bytes += serve(model_, model_.tensors[e.tensor], options_.dtype).nbytes;
  }
  JsonWriter j(out);  // only ever appends to `out`: flushing it between values is safe
  j.begin_object();
  j.key("source").string(options_.source_path);
  j.key("format").string(format_name(model_.format));
  j.key("byteorder").string(model_.byteorder());
  j.key("tensors").number(std::uint64_t{tensors});
  j.key("values").number(std::uint64_t{model_.entries.size() - tensors});
  j.key("total_bytes").raw(decimal(total_bytes));
  write_sources_and_metadata(j, model_);
  write_root(j, model_);
  write_source_files(j, options_.local_files);
  write_exports(j);
  if (out.size() > flush_at) flush();
  j.key("entries").begin_array();
  for (std::size_t i = 0; i < model_.entries.size(); ++i) {
    const Entry& e = model_.entries[i];
    j.begin_object();
    j.key("key").string(e.key);
    write_key_path(j, e);
    j.key("path");
    if (options_.layout == Layout::split) {
      j.string(entry_name(i));
    } else if (has_file_[i]) {
      j.string(std::string(entry_name(i)) + ".pt");
    } else {
      j.null();  // the RFC layout: no file torch can load alone
    }
    if (e.kind == Entry::Kind::value) {
      j.key("kind").string("value").key("dtype").null().key("shape").null().key("nbytes").null();
    } else {
      const Tensor& t = model_.tensors[e.tensor];
      const ServedTensor served = serve(model_, t, options_.dtype);
      j.key("kind").string("tensor");
      j.key("dtype").string(info(served.dtype).name);
      j.key("shape").numbers(t.shape);
      j.key("nbytes");
      if (t.broken.empty() && values_not_served(model_, t).empty()) {
        j.number(served.nbytes);
      } else {
        j.null();
      }
      write_file_range(j, model_, served, options_.local_files);
    }
    write_origin(j, model_, i);
    j.end_object();
    if (out.size() > flush_at) flush();
  }
  j.end_array().end_object();
  out += '\n';
  flush();
}

// "exports": [{"files", "fails", "lacks": [{"key", "why"}, ...]}]: each whole-checkpoint view
// that lists tensors, what it lacks and why, and why reading it fails (null when it does not).
void Tree::write_exports(JsonWriter& j) const {
  j.key("exports").begin_array().begin_object();
  j.key("files").begin_array();
  if (options_.layout == Layout::rfc) {
    j.string("map.pt");
  } else {
    for (std::size_t f = root_fixed_; f < fixed_.size(); ++f) {
      if (fixed_[f].kind != Kind::index_json && fixed_[f].kind != Kind::extra_file) {
        j.string(fixed_[f].name);
      }
    }
  }
  j.end_array();
  j.key("fails");
  const std::string fails = options_.layout == Layout::rfc ? std::string() : export_refusal();
  if (fails.empty()) {
    j.null();
  } else {
    j.string(fails);
  }
  j.key("lacks").begin_array();
  // One line each: a model of a million broken tensors lists a million.
  std::string item;
  auto lacks = [&](std::size_t entry, std::string_view why) {
    item.clear();
    JsonWriter(item, 0)
        .begin_object()
        .key("key")
        .string(model_.entries[entry].key)
        .key("why")
        .string(why)
        .end_object();
    j.raw(item);
  };
  if (options_.layout == Layout::rfc) {
    // The entries without a <name>.pt, which map.pt does not list.
    for (std::size_t i = 0; i < model_.entries.size(); ++i) {
      if (!has_file_[i]) lacks(i, rfc_omission(i));
    }
  } else {
    SafetensorsExport::for_each_left_out(
        model_, options_.shard_size, options_.dtype,
        [&](std::size_t entry, std::string_view why, bool) { lacks(entry, why); });
  }
  j.end_array().end_object().end_array();
}

const std::string& Tree::export_refusal() const {
  return once(export_refusal_, [&] {
    constexpr std::size_t named = 3;
    std::vector<std::size_t> broken;
    std::size_t count = 0;
    SafetensorsExport::for_each_left_out(model_, options_.shard_size, options_.dtype,
                                         [&](std::size_t entry, std::string_view, bool b) {
                                           if (!b) return;
                                           if (broken.size() < named) broken.push_back(entry);
                                           ++count;
                                         });
    if (count == 0) return std::string();
    std::vector<std::string_view> files;
    for (std::size_t f = root_fixed_; f < fixed_.size(); ++f) {
      if (fixed_[f].kind == Kind::safetensors_file) files.push_back(fixed_[f].name);
    }
    const std::string what = files.size() == 1
                                 ? fmt::format("{}/{}", views_folder, files.front())
                                 : fmt::format("{}/model.safetensors.index.json and its {} shards",
                                               views_folder, files.size());
    const Tensor& first = model_.tensors[model_.entries[broken.front()].tensor];
    // The first key with why it is broken, then the next few.
    std::string keys =
        fmt::format("{} ({})", quote(model_.entries[broken.front()].key), one_line(first.broken));
    if (count > 1) {
      broken.erase(broken.begin());
      keys += ", " + some_keys(model_, broken, count - 1);
    }
    const bool one = files.size() == 1;
    return fmt::format(
        "{} would lack {} broken tensor{}: {}; {} with EIO rather than lack {}: {}/index.json's "
        "\"exports\" lists what each view lacks, and ckptfs pack --keys writes the others",
        what, count, count == 1 ? "" : "s", keys, one ? "it fails" : "they fail",
        count == 1 ? "it" : "them", views_folder);
  });
}

std::optional<Tree::Refusal> Tree::refusal(const Node& n) const {
  switch (n.kind) {
    case Kind::data:
    case Kind::tensor_npy:
    case Kind::tensor_pt: {
      const Entry& e = model_.entries[n.index];
      const Tensor& t = model_.tensors[e.tensor];
      const Ino group = entry_ino(n.index);
      if (!t.broken.empty()) {
        return Refusal{fmt::format("tensor {} is broken ({}): every read of its bytes fails with "
                                   "EIO (ckptfs inspect lists the broken tensors)",
                                   quote(e.key), one_line(t.broken)),
                       group};
      }
      if (n.kind != Kind::tensor_pt || !t.quantization) return std::nullopt;
      // A per-channel quantized tensor's tensor.pt holds its scales and zero points too.
      for (const auto& [part, name] : {std::pair{t.quantization->scales, "scales"},
                                       std::pair{t.quantization->zero_points, "zero points"}}) {
        if (part && *part < model_.tensors.size() && !model_.tensors[*part].broken.empty()) {
          return Refusal{fmt::format("the per-channel {} of tensor {} are broken ({}): every "
                                     "read of its tensor.pt fails with EIO",
                                     name, quote(e.key), one_line(model_.tensors[*part].broken)),
                         group};
        }
      }
      return std::nullopt;
    }
    case Kind::safetensors_file:
    case Kind::safetensors_index: {
      const std::string& why = export_refusal();
      if (why.empty()) return std::nullopt;
      return Refusal{why, views_ino};
    }
    default:
      return std::nullopt;
  }
}

const std::string& Tree::keys_file() const {
  return once(keys_file_, [&] {
    std::vector<std::string> keys;
    keys.reserve(root_entries_.size());
    for (const std::uint32_t entry : root_entries_) keys.push_back(model_.entries[entry].key);
    return ckptfs::keys_file(keys, {.prefix = "map"}).bytes();
  });
}

const std::string& Tree::model_file(std::size_t file) const {
  return once(model_files_[file], [&] { return model_.files[file].make(model_, options_.dtype); });
}

const std::string& Tree::index_json() const {
  return once(index_json_, [&] {
    std::string out;
    write_index_json(out, [] {});
    return out;
  });
}

std::uint64_t Tree::index_json_size() const {
  if (const std::string* made = index_json_.load(std::memory_order_acquire)) return made->size();
  std::uint64_t size = index_json_size_.load(std::memory_order_relaxed);
  if (size == unknown_size) {
    // Counted without being kept: a listing of the root needs the size, not the bytes.
    std::string chunk;
    size = 0;
    write_index_json(chunk, [&] {
      size += chunk.size();
      chunk.clear();
    });
    index_json_size_.store(size, std::memory_order_relaxed);
  }
  return size;
}

std::uint64_t Tree::safetensors_file_size(std::size_t file) const {
  if (options_.shard_size != 0) return safetensors().files()[file].size;  // laid out at mount
  if (const auto* made = safetensors_.load(std::memory_order_acquire)) {
    return made->files()[file].size;
  }
  std::uint64_t size = safetensors_size_.load(std::memory_order_relaxed);
  if (size == unknown_size) {
    size = SafetensorsExport::single_file_size(model_, options_.dtype, keys_unique_);
    safetensors_size_.store(size, std::memory_order_relaxed);
  }
  return size;
}

// The tensor whose bytes are storage `storage` of an entry's tensor.pt: 0 the tensor itself,
// 1 and 2 a per-channel quantized tensor's scales and zero points.
const Tensor& Tree::tensor_of_storage(std::size_t entry, std::size_t storage) const {
  const Tensor& t = model_.tensors[model_.entries[entry].tensor];
  if (storage == 0) return t;
  return model_.tensors[storage == 1 ? *t.quantization->scales : *t.quantization->zero_points];
}

std::uint32_t Tree::storage_crc(std::size_t entry, const EntryFiles& files, std::size_t storage,
                                Sources sources) const {
  constexpr std::uint64_t known = std::uint64_t{1} << 32;
  const std::uint64_t cached = files.crcs[storage].load(std::memory_order_acquire);
  if (cached & known) return static_cast<std::uint32_t>(cached);
  const Tensor& t = tensor_of_storage(entry, storage);
  // Only the tensor itself is converted; the quantization parameters are served as stored.
  const ServedTensor served =
      serve_torch_file(model_, t, storage == 0 ? options_.dtype : std::nullopt);
  std::uint32_t crc = 0;
  const Storage* whole = t.storage ? &model_.storages[*t.storage] : nullptr;
  if (served.way == ServedTensor::Way::range && whole && whole->record_crc32 && served.begin == 0 &&
      served.nbytes == whole->nbytes && (*whole->record_crc32 != 0 || served.nbytes == 0)) {
    // The tensor is its whole record: the source's central directory has its CRC (0 is what
    // torch >= 2.6 may write instead of one, so it is computed then).
    crc = *whole->record_crc32;
  } else {
    // Computed once, streaming the served bytes through a bounded buffer.
    constexpr std::size_t chunk = 1 << 20;
    thread_local ReadBuffer buffer;
    thread_local std::vector<char> copy;
    for (std::uint64_t at = 0; at < served.nbytes; at += chunk) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, served.nbytes - at));
      buffer.clear();
      read_served(model_, t, served, at, n, sources, buffer);
      for (const ReadPiece& p : buffer.pieces()) {
        if (p.memory) {
          crc = crc32(crc, p.memory, p.length);
        } else {
          copy.resize(p.length);
          sources[p.source]->read(p.source_offset, std::as_writable_bytes(std::span(copy)));
          crc = crc32(crc, copy.data(), copy.size());
        }
      }
    }
  }
  files.crcs[storage].store(known | crc, std::memory_order_release);
  return crc;
}

void Tree::read_torch_file(std::size_t entry, std::uint64_t offset, std::size_t length,
                           Sources sources, ReadBuffer& out) const {
  const EntryFiles& f = entry_files(entry);
  const TorchArchive& archive = *f.archive;
  const std::uint64_t end = offset + length;
  auto it = std::upper_bound(f.segments.begin(), f.segments.end(), offset,
                             [](std::uint64_t at, const ZipSegment& s) { return at < s.offset; });
  if (it != f.segments.begin()) --it;
  for (; it != f.segments.end() && it->offset < end; ++it) {
    const ZipSegment& seg = *it;
    const std::uint64_t a = std::max(offset, seg.offset) - seg.offset;
    const std::uint64_t b = std::min(end, seg.offset + seg.size) - seg.offset;
    if (a >= b) continue;
    const auto n = static_cast<std::size_t>(b - a);
    auto staged = [&](const std::string& bytes) {
      std::memcpy(out.add_staged(n).data(), bytes.data() + a, n);
    };
    switch (seg.kind) {
      case ZipSegmentKind::local_header:
        out.add_memory(f.local_headers[seg.record].data() + a, n);
        break;
      case ZipSegmentKind::payload: {
        const TorchRecord& record = archive.record(seg.record);
        if (record.source == TorchRecord::Source::literal) {
          out.add_memory(record.literal.data() + a, n);
        } else {
          const Tensor& t = tensor_of_storage(entry, record.storage);
          const auto convert_to = record.storage == 0 ? options_.dtype : std::nullopt;
          read_served(model_, t, serve_torch_file(model_, t, convert_to), a, n, sources, out);
        }
        break;
      }
      case ZipSegmentKind::data_descriptor: {
        const TorchRecord& record = archive.record(seg.record);
        const std::uint32_t crc = record.source == TorchRecord::Source::storage
                                      ? storage_crc(entry, f, record.storage, sources)
                                      : *archive.known_crc(seg.record);
        staged(archive.plan().data_descriptor(seg.record, crc));
        break;
      }
      case ZipSegmentKind::trailer: {
        const std::string& trailer = once(f.trailer, [&] {
          std::vector<std::uint32_t> storage_crcs;
          for (std::size_t i = 0; i < archive.storages().size(); ++i) {
            storage_crcs.push_back(storage_crc(entry, f, i, sources));
          }
          return archive.plan().trailer(archive.crcs(storage_crcs));
        });
        out.add_memory(trailer.data() + a, n);
        break;
      }
    }
  }
}

const SharingIndex& Tree::sharing() const {
  return once(sharing_, [&] { return SharingIndex(model_); });
}

const SafetensorsExport& Tree::safetensors() const {
  return once(safetensors_,
              [&] { return SafetensorsExport(model_, options_.shard_size, options_.dtype); });
}

void Tree::read(Ino ino, std::uint64_t offset, std::size_t length, Sources sources,
                ReadBuffer& out) const {
  auto n = node(ino);
  if (!n) return;
  if (auto refused = refusal(*n)) throw Error(ExitCode::io, refused->why);
  const std::uint64_t file_size = size(*n);
  if (offset >= file_size) return;
  length = static_cast<std::size_t>(std::min<std::uint64_t>(length, file_size - offset));
  const std::size_t before = out.size();
  read_clipped(*n, offset, length, sources, out);
  // A short read would end the file there for its reader (the kernel takes it for the end of
  // the file): whatever the cause, it fails instead.
  if (out.size() - before != length) {
    throw Error(ExitCode::io, fmt::format("a read of {} bytes at {} gave {} bytes", length, offset,
                                          out.size() - before));
  }
}

void Tree::read_clipped(const Node& node, std::uint64_t offset, std::size_t length, Sources sources,
                        ReadBuffer& out) const {
  const Node* n = &node;
  auto literal = [&](const std::string& text) { out.add_memory(text.data() + offset, length); };
  switch (n->kind) {
    case Kind::root:
    case Kind::views_dir:
    case Kind::entry_dir:
      return;
    case Kind::index_json:
      return literal(index_json());
    case Kind::safetensors_index:
      return literal(safetensors().index_json());
    case Kind::safetensors_file:
      return safetensors().read(model_, n->index, offset, length, sources, out);
    case Kind::extra_file: {
      const Model::ExtraFile& f = model_.extra_files[n->index];
      return out.add_source(f.source, f.offset + offset, length);
    }
    case Kind::model_file:
      return literal(model_file(n->index));
    case Kind::meta_json:
      return literal(meta_json(n->index));
    case Kind::tensor_pt:
      return read_torch_file(n->index, offset, length, sources, out);
    case Kind::keys_pt:
      return literal(keys_file());
    case Kind::value_pt:
      return literal(entry_files(n->index).value_file);
    case Kind::value_json: {
      const std::string& json = model_.entries[n->index].value_json;
      // The JSON, then a newline.
      const std::size_t from_json =
          offset < json.size() ? std::min(length, json.size() - offset) : 0;
      if (from_json) out.add_memory(json.data() + offset, from_json);
      if (from_json < length) out.add_memory("\n", 1);
      return;
    }
    case Kind::data:
    case Kind::tensor_npy: {
      const Tensor& t = model_.tensors[model_.entries[n->index].tensor];
      std::uint64_t at = offset;
      std::size_t left = length;
      if (n->kind == Kind::tensor_npy) {
        const std::string& header = entry_files(n->index).npy_header;
        if (at < header.size()) {
          const std::size_t part =
              static_cast<std::size_t>(std::min<std::uint64_t>(left, header.size() - at));
          out.add_memory(header.data() + at, part);
          at += part;
          left -= part;
        }
        at -= std::min<std::uint64_t>(at, header.size());
      }
      if (left == 0) return;
      // `data` holds a block-quantized tensor's blocks, tensor.npy its values.
      const ServedTensor served = n->kind == Kind::data ? serve_data(model_, t, options_.dtype)
                                                        : serve(model_, t, options_.dtype);
      read_served(model_, t, served, at, left, sources, out);
      return;
    }
  }
}

}  // namespace ckptfs
