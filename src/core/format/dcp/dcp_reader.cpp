// SPDX-License-Identifier: MIT
// read_dcp(): a DCP checkpoint's items read through windows of their files, its tensors
// assembled from their chunks, its values nested as dcp_to_torch_save nests them, and the whole
// flattened as the file that function writes would be.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/dcp/dcp_reader.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/pickle/flatten.hpp>
#include <ckptfs/format/pickle/graph_builder.hpp>
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/source/window_source.hpp>

#include "../torch/torch_storages.hpp"

#include <fmt/format.h>

#include <unordered_set>

namespace ckptfs {
namespace {

using pickle::GraphBuilder;
using pickle::Kind;
using pickle::NodeId;

// "[16, 0]"
std::string box_text(std::span<const std::int64_t> values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

// The text of a planner_data path, for messages: model.layers.0
std::string path_text(const std::vector<DcpPathPart>& path) {
  std::string out;
  for (const DcpPathPart& p : path) {
    if (!out.empty()) out += '.';
    out += p.is_int ? std::to_string(p.value) : p.text;
  }
  return out;
}

class DcpReader {
 public:
  DcpReader(const ByteSource& metadata, const DcpOpener& open, const ReadLimits& limits,
            const DcpLimits& dcp)
      : open_(open),
        limits_(limits),
        dcp_(dcp),
        meta_(read_dcp_metadata(metadata, limits, dcp)),
        builder_(limits.pickle.max_nodes) {
    // Items are read through windows that live only while they are read: every zip record's
    // offset is found now, never later through a window.
    item_limits_ = limits;
    item_limits_.zip.defer_local_headers = false;
    opened_.assign(meta_.files.size(), -1);
    open_errors_.assign(meta_.files.size(), std::string());
  }

  DcpModel run() {
    const NodeId root = builder_.dict();
    containers_.insert(root);
    py_none_ = builder_.none();
    for (const DcpEntry& entry : meta_.entries) {
      const NodeId leaf =
          entry.kind == DcpEntry::Kind::tensor ? tensor_leaf(entry) : value_leaf(entry);
      set_element(root, entry.path, leaf);
    }
    pickle::Graph graph = std::move(builder_).finish(root);
    interpretation_.tensor_of.assign(graph.size(), -1);
    for (const auto& [node, tensor] : marks_) interpretation_.tensor_of[node] = tensor;
    // Nested as dcp_to_torch_save nests it: a dict at the root, dicts and lists below.
    Flattened flat = flatten(graph, interpretation_, limits_);
    model_.tensors = detail::used_tensors(flat.entries, interpretation_.tensors);
    model_.entries = std::move(flat.entries);
    model_.root = flat.root;
    model_.format = Format::dcp;
    return DcpModel{std::move(model_), std::move(sources_)};
  }

 private:
  // ---- files and items ---------------------------------------------------------------------

  // The source of file `file` (opened on first use), or nullptr with why in `why`.
  const ByteSource* file(std::uint32_t file, std::string& why) {
    if (opened_[file] < 0 && open_errors_[file].empty()) {
      if (!meta_.refused[file].empty()) {
        open_errors_[file] = meta_.refused[file];
      } else {
        try {
          sources_.push_back(open_(meta_.files[file]));
          model_.sources.push_back(meta_.files[file]);
          opened_[file] = static_cast<std::int64_t>(sources_.size() - 1);
        } catch (const Error& e) {
          open_errors_[file] =
              fmt::format("{} cannot be opened: {}", quote(meta_.files[file], 200), e.what());
        }
      }
    }
    if (opened_[file] < 0) {
      why = open_errors_[file];
      return nullptr;
    }
    return sources_[static_cast<std::size_t>(opened_[file])].get();
  }

  std::string item_text(const DcpItem& item) const {
    return fmt::format("the item at byte {} ({} bytes) of {}", item.offset, item.length,
                       quote(meta_.files[item.file], 200));
  }

  // Reads item `index` as a torch.save zip; its storages become the model's, in the item's
  // file. Returns the index of its first storage in Model::storages (nullopt with `why`).
  std::optional<detail::ZipPickle> read_item(std::uint32_t index, std::string& why,
                                             std::size_t& first_storage) {
    const DcpItem& item = meta_.items[index];
    const ByteSource* source = file(item.file, why);
    if (!source) return std::nullopt;
    if (!item.transforms.empty()) {
      why =
          fmt::format("{} is stored through transforms ({}), which ckptfs does not undo",
                      item_text(item), quote(fmt::format("{}", fmt::join(item.transforms, ", "))));
      return std::nullopt;
    }
    if (!source->contains(item.offset, item.length)) {
      why = fmt::format("{} runs past the end of the file ({} bytes): {}", item_text(item),
                        source->size(), looks_truncated);
      return std::nullopt;
    }
    const WindowSource window(*source, item.offset, item.length);
    detail::ZipPickle zip;
    try {
      zip = detail::read_zip_pickle(window, item_limits_);
    } catch (const Error& e) {
      why = fmt::format("{}: {}", item_text(item), e.what());
      return std::nullopt;
    }
    first_storage = model_.storages.size();
    const auto source_index = static_cast<std::uint32_t>(opened_[item.file]);
    for (Storage& s : zip.storages) {
      s.source = source_index;
      s.file_offset += item.offset;  // the window's offsets are the item's
      if (s.record_check) s.record_check->header_offset += item.offset;
      model_.storages.push_back(std::move(s));
    }
    return zip;
  }

  // ---- leaves ------------------------------------------------------------------------------

  // A tensor entry: a leaf node standing for a tensor assembled from its chunks.
  NodeId tensor_leaf(const DcpEntry& entry) {
    Tensor t;
    t.dtype = entry.dtype;
    t.shape = entry.size;
    t.stride.assign(t.shape.size(), 1);
    for (std::size_t d = t.shape.size(); d-- > 1;) {
      // 0 past int64: a shape size_problem() refuses.
      if (__builtin_mul_overflow(t.stride[d], std::max<std::int64_t>(t.shape[d], 1),
                                 &t.stride[d - 1])) {
        t.stride[d - 1] = 0;
      }
    }
    t.broken = entry.broken;
    if (t.broken.empty()) t.broken = size_problem(t);
    if (t.broken.empty()) assemble(entry, t);
    const NodeId leaf = builder_.none();
    marks_.emplace_back(leaf, static_cast<std::int32_t>(interpretation_.tensors.size()));
    interpretation_.tensors.push_back(std::move(t));
    return leaf;
  }

  void assemble(const DcpEntry& entry, Tensor& t) {
    Assembly a(Assembly::Grid::shape, t.shape.size());
    for (std::size_t i = 0; i < entry.chunks(); ++i) {
      const auto offsets = entry.chunk_offsets(i), sizes = entry.chunk_sizes(i);
      const std::string chunk = fmt::format("chunk {} (at {})", i, box_text(offsets));
      bool empty = false;
      for (std::size_t d = 0; d < sizes.size(); ++d) {
        empty = empty || sizes[d] == 0;
        if (offsets[d] < 0 || sizes[d] < 0 || offsets[d] > t.shape[d] ||
            sizes[d] > t.shape[d] - offsets[d]) {
          t.broken = fmt::format("{} of {} is not inside the tensor's {}", chunk, box_text(sizes),
                                 box_text(t.shape));
          return;
        }
      }
      // An empty chunk (a rank that holds no rows) has nothing to read: its item is not needed.
      if (empty) continue;
      if (!entry.chunk_items[i]) {
        t.broken = fmt::format("{} has no item in storage_data", chunk);
        return;
      }
      std::string why;
      std::size_t first_storage = 0;
      auto zip = read_item(*entry.chunk_items[i], why, first_storage);
      if (!zip) {
        t.broken = fmt::format("{}: {}", chunk, why);
        return;
      }
      const NodeId root = zip->graph.root();
      const std::int32_t index = zip->interpretation.tensor_of[root];
      if (index < 0) {
        t.broken = fmt::format("{}: {} holds no tensor", chunk,
                               item_text(meta_.items[*entry.chunk_items[i]]));
        return;
      }
      const Tensor& c = zip->interpretation.tensors[static_cast<std::size_t>(index)];
      if (!c.broken.empty()) {
        t.broken = fmt::format("{}: {}", chunk, c.broken);
        return;
      }
      if (!c.storage || c.quantization) {
        t.broken = fmt::format("{}: its tensor is {}", chunk,
                               c.quantization ? "quantized" : "without storage");
        return;
      }
      if (c.dtype != t.dtype ||
          !std::equal(c.shape.begin(), c.shape.end(), sizes.begin(), sizes.end())) {
        t.broken =
            fmt::format("{}: its tensor is {} {}, the chunk {} {}", chunk, info(c.dtype).name,
                        box_text(c.shape), info(t.dtype).name, box_text(sizes));
        return;
      }
      a.add({first_storage + *c.storage, c.storage_offset}, offsets, sizes, c.stride);
    }
    model_.assemblies.push_back(std::move(a));
    t.assembly = model_.assemblies.size() - 1;
    t.broken = index_assembly(model_, t, model_.assemblies.back());
  }

  // A BYTE_IO entry: the value torch.load gives for its item, grafted whole.
  NodeId value_leaf(const DcpEntry& entry) {
    const std::string what = fmt::format("the value {}", quote(entry.fqn, 200));
    if (!entry.item) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("{} has no item in .metadata's storage_data", what));
    }
    std::string why;
    std::size_t first_storage = 0;
    auto zip = read_item(*entry.item, why, first_storage);
    if (!zip) throw Error(ExitCode::bad_checkpoint, fmt::format("{}: {}", what, why));
    Interpretation& in = zip->interpretation;
    const auto first_tensor = interpretation_.tensors.size();
    for (Tensor& t : in.tensors) {
      if (t.storage) *t.storage += first_storage;
      if (t.quantization) {
        for (auto* part : {&t.quantization->scales, &t.quantization->zero_points}) {
          if (*part) **part += first_tensor;
        }
      }
      interpretation_.tensors.push_back(std::move(t));
    }
    const NodeId by = builder_.graft(zip->graph);
    for (std::size_t node = 0; node < in.tensor_of.size(); ++node) {
      if (in.tensor_of[node] >= 0) {
        marks_.emplace_back(static_cast<NodeId>(node + by),
                            static_cast<std::int32_t>(first_tensor) + in.tensor_of[node]);
      }
    }
    for (auto& [node, parts] : in.composites) {
      for (auto& part : parts) part.second += by;
      interpretation_.composites.emplace(node + by, std::move(parts));
    }
    return zip->graph.root() + by;
  }

  // ---- nesting, as torch's set_element ------------------------------------------------------

  [[noreturn]] void collide(const std::vector<DcpPathPart>& path, const char* why) const {
    throw Error(ExitCode::bad_checkpoint, fmt::format(".metadata's planner_data: the path {} {}",
                                                      quote(path_text(path), 200), why));
  }

  std::string slot_key(NodeId container, const DcpPathPart& part) const {
    return fmt::format("{}:{}{}", container, part.is_int ? 'i' : 's',
                       part.is_int ? std::to_string(part.value) : part.text);
  }

  NodeId key_node(const DcpPathPart& part) {
    return part.is_int ? builder_.integer(part.value) : builder_.string(part.text);
  }

  bool is_list(NodeId node) const { return builder_.graph().kind(node) == Kind::list; }

  // Pads a list with None up to position `index`.
  void extend(NodeId list, const std::vector<DcpPathPart>& path, std::int64_t index) {
    const auto wanted = static_cast<std::size_t>(index) + 1;
    const std::size_t size = builder_.list_size(list);
    if (wanted <= size) return;
    padding_ += wanted - size;
    if (padding_ > dcp_.max_list_index) collide(path, "pads its lists with too many Nones");
    for (std::size_t i = size; i < wanted; ++i) builder_.list_append(list, py_none_);
  }

  // The container at `part` of `container`, made (a list when `list` is asked) when absent.
  NodeId child_container(NodeId container, const DcpPathPart& part, bool list,
                         const std::vector<DcpPathPart>& path) {
    NodeId child = pickle::no_node;
    if (!is_list(container)) {
      const std::string key = slot_key(container, part);
      if (const auto it = slots_.find(key); it != slots_.end()) {
        child = builder_.graph().dict_items(container)[it->second].second;
      } else {
        child = list ? builder_.list() : builder_.dict();
        containers_.insert(child);
        slots_.emplace(key, builder_.graph().dict_items(container).size());
        builder_.dict_append(container, key_node(part), child);
      }
    } else {
      if (!part.is_int) collide(path, "indexes a list with a str");
      extend(container, path, part.value);
      child = builder_.graph().items(container)[static_cast<std::size_t>(part.value)];
      if (child == py_none_) {
        child = list ? builder_.list() : builder_.dict();
        containers_.insert(child);
        builder_.list_replace(container, static_cast<std::size_t>(part.value), child);
      }
    }
    if (!containers_.contains(child)) collide(path, "goes through another entry's value");
    return child;
  }

  void set_element(NodeId root, const std::vector<DcpPathPart>& path, NodeId leaf) {
    NodeId container = root;
    for (std::size_t i = 1; i < path.size(); ++i) {
      container = child_container(container, path[i - 1], path[i].is_int, path);
    }
    const DcpPathPart& last = path.back();
    if (is_list(container)) {
      if (!last.is_int) collide(path, "indexes a list with a str");
      extend(container, path, last.value);
      const NodeId old = builder_.graph().items(container)[static_cast<std::size_t>(last.value)];
      if (containers_.contains(old)) collide(path, "replaces a container");
      builder_.list_replace(container, static_cast<std::size_t>(last.value), leaf);
      return;
    }
    // torch extends the container as a list for a last part that is an int: a dict cannot be.
    if (last.is_int) collide(path, "indexes a dict as a list");
    const std::string key = slot_key(container, last);
    if (const auto it = slots_.find(key); it != slots_.end()) {
      const NodeId old = builder_.graph().dict_items(container)[it->second].second;
      if (containers_.contains(old)) collide(path, "replaces a container");
      builder_.dict_replace(container, it->second, leaf);
    } else {
      slots_.emplace(key, builder_.graph().dict_items(container).size());
      builder_.dict_append(container, key_node(last), leaf);
    }
  }

  const DcpOpener& open_;
  const ReadLimits& limits_;
  ReadLimits item_limits_;
  const DcpLimits& dcp_;
  DcpMetadata meta_;
  GraphBuilder builder_;
  Model model_;
  std::vector<std::unique_ptr<ByteSource>> sources_;
  std::vector<std::int64_t> opened_;      // per file: index into sources_, or -1
  std::vector<std::string> open_errors_;  // per file: why it cannot be opened
  Interpretation interpretation_;
  std::vector<std::pair<NodeId, std::int32_t>> marks_;  // tensor nodes and their tensors
  std::unordered_set<NodeId> containers_;               // the dicts and lists made here
  TextMap<std::size_t> slots_;  // slot_key() -> the item's index in its dict
  NodeId py_none_ = pickle::no_node;
  std::uint64_t padding_ = 0;
};

}  // namespace

DcpModel read_dcp(const ByteSource& metadata, const DcpOpener& open, const ReadLimits& limits,
                  const DcpLimits& dcp) {
  return read_or_name_impostor(metadata,
                               [&] { return DcpReader(metadata, open, limits, dcp).run(); });
}

}  // namespace ckptfs
