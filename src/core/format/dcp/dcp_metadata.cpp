// SPDX-License-Identifier: MIT
// read_dcp_metadata(): torch.distributed.checkpoint's Metadata, from its inert pickle graph.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/dcp/dcp_metadata.hpp>

#include <fmt/format.h>

namespace ckptfs {
namespace {

using pickle::Graph;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;
using Items = std::vector<std::pair<NodeId, NodeId>>;

[[noreturn]] void fail(const std::string& what) {
  throw Error(ExitCode::bad_checkpoint, ".metadata: " + what);
}

// What a node is, for messages: "a dict", "an object of foo.Bar", ...
std::string what_is(const Graph& g, NodeId id) {
  if (id == no_node) return "nothing";
  const Kind kind = g.kind(id);
  if (kind == Kind::global) return "the global " + quote(g.global(id).dotted(), 80);
  if (kind == Kind::object) {
    const NodeId callable = g.object(id).callable;
    if (callable != no_node && g.kind(callable) == Kind::global) {
      return "an object of " + quote(g.global(callable).dotted(), 80);
    }
  }
  return std::string(a_kind(kind));
}

// The class of an object (the global it calls), or nullptr.
const pickle::Global* class_of(const Graph& g, NodeId id) {
  if (id == no_node || g.kind(id) != Kind::object) return nullptr;
  const NodeId callable = g.object(id).callable;
  if (callable == no_node || g.kind(callable) != Kind::global) return nullptr;
  return &g.global(callable);
}

// The fields of an object: its BUILD state as a dict (a dataclass's __dict__), also the dict of
// a (__dict__, __slots__) state; an object without state has none (an empty dataclass).
const Items& fields_of(const Graph& g, NodeId id, const char* what) {
  static const Items none;
  if (id == no_node || g.kind(id) != Kind::object) {
    fail(fmt::format("{} is {}, not an object", what, what_is(g, id)));
  }
  const NodeId state = g.object(id).state;
  if (state == no_node || g.kind(state) == Kind::none) return none;
  if (g.kind(state) == Kind::dict) return g.dict_items(state);
  if (g.kind(state) == Kind::tuple && g.items(state).size() == 2 &&
      g.kind(g.items(state)[0]) == Kind::dict) {
    return g.dict_items(g.items(state)[0]);
  }
  fail(fmt::format("the state of {} is {}, not a dict", what, what_is(g, state)));
}

// The value of field `name` (the last, as a dict keeps it), or no_node.
NodeId field(const Graph& g, const Items& fields, std::string_view name) {
  NodeId found = no_node;
  for (const auto& [key, value] : fields) {
    if (g.kind(key) == Kind::string && g.text(key) == name) found = value;
  }
  return found;
}

bool is_none(const Graph& g, NodeId id) { return id == no_node || g.kind(id) == Kind::none; }

std::optional<std::int64_t> as_int(const Graph& g, NodeId id) {
  if (id != no_node && g.kind(id) == Kind::integer) return g.integer(id);
  return std::nullopt;
}

// torch.Size((...)), a tuple or a list of ints.
std::vector<std::int64_t> int_tuple(const Graph& g, NodeId id, const std::string& what) {
  if (id != no_node && g.kind(id) == Kind::object) {
    const pickle::Global* cls = class_of(g, id);
    const NodeId args = g.object(id).args;
    if (cls && cls->dotted() == "torch.Size" && args != no_node && g.kind(args) == Kind::tuple &&
        g.items(args).size() == 1) {
      id = g.items(args)[0];
    }
  }
  if (id == no_node || (g.kind(id) != Kind::tuple && g.kind(id) != Kind::list)) {
    fail(fmt::format("{} is {}, not a torch.Size", what, what_is(g, id)));
  }
  std::vector<std::int64_t> out;
  for (const NodeId item : g.items(id)) {
    const auto value = as_int(g, item);
    if (!value) fail(fmt::format("{} holds {}, not an int", what, what_is(g, item)));
    out.push_back(*value);
  }
  return out;
}

const std::string& text_of(const Graph& g, NodeId id, const std::string& what) {
  if (id == no_node || g.kind(id) != Kind::string) {
    fail(fmt::format("{} is {}, not a str", what, what_is(g, id)));
  }
  return g.text(id);
}

// Why a file name from .metadata may not be opened, or "": the sharded sets' rule (a name stays
// inside the directory: no absolute path, no empty, "." or ".." component, no NUL).
std::string refusal(const std::string& name) {
  if (name.empty()) return "an empty file name";
  if (name.find('\0') != std::string::npos) return "a file name with a NUL";
  if (name.front() == '/') return "an absolute file name";
  std::size_t start = 0;
  while (true) {
    const std::size_t slash = name.find('/', start);
    const std::string_view part = std::string_view(name).substr(
        start, slash == std::string::npos ? name.npos : slash - start);
    if (part.empty() || part == "." || part == "..") {
      return fmt::format("the file name {} leaves the checkpoint's directory", quote(name, 200));
    }
    if (slash == std::string::npos) return {};
    start = slash + 1;
  }
}

// The key storage_data is looked up by: MetadataIndex's fqn and offset (its index is a hint
// that equality ignores, as in torch).
std::string item_key(std::string_view fqn, const std::vector<std::int64_t>* offset) {
  std::string key(fqn);
  key += '\0';
  if (offset) {
    for (const std::int64_t o : *offset) key += fmt::format("{},", o);
  } else {
    key += "none";
  }
  return key;
}

class MetadataReader {
 public:
  MetadataReader(const Graph& g, const DcpLimits& limits) : g_(g), limits_(limits) {}

  DcpMetadata run() {
    const NodeId root = g_.root();
    const pickle::Global* cls = class_of(g_, root);
    if (!cls || !cls->name.ends_with("Metadata")) {
      fail(fmt::format("the pickle holds {}, not torch.distributed.checkpoint's Metadata",
                       what_is(g_, root)));
    }
    const Items& fields = fields_of(g_, root, "the Metadata");
    const NodeId state_dict = field(g_, fields, "state_dict_metadata");
    if (state_dict == no_node || g_.kind(state_dict) != Kind::dict) {
      fail(fmt::format("state_dict_metadata is {}, not a dict", what_is(g_, state_dict)));
    }
    read_storage_data(field(g_, fields, "storage_data"));
    const NodeId planner_data = field(g_, fields, "planner_data");
    if (!is_none(g_, planner_data) && g_.kind(planner_data) != Kind::dict) {
      fail(fmt::format("planner_data is {}, not a dict", what_is(g_, planner_data)));
    }
    TextMap<NodeId> paths;
    if (!is_none(g_, planner_data)) {
      for (const auto& [key, value] : g_.dict_items(planner_data)) {
        paths.insert_or_assign(text_of(g_, key, "a key of planner_data"), value);
      }
    }
    // Keys of one dict are distinct in Python: the last of equal keys wins, at the first's place.
    TextMap<std::size_t> seen;
    for (const auto& [key, value] : g_.dict_items(state_dict)) {
      const std::string& fqn = text_of(g_, key, "a key of state_dict_metadata");
      DcpEntry entry = read_entry(fqn, value);
      const auto path = paths.find(fqn);
      entry.path = read_path(fqn, path == paths.end() ? no_node : path->second);
      if (auto [it, fresh] = seen.try_emplace(fqn, out_.entries.size()); !fresh) {
        out_.entries[it->second] = std::move(entry);
      } else {
        out_.entries.push_back(std::move(entry));
      }
    }
    return std::move(out_);
  }

 private:
  void read_storage_data(NodeId storage_data) {
    if (is_none(g_, storage_data)) return;  // a storage reader of another kind: no items here
    if (g_.kind(storage_data) != Kind::dict) {
      fail(fmt::format("storage_data is {}, not a dict", what_is(g_, storage_data)));
    }
    for (const auto& [key, value] : g_.dict_items(storage_data)) {
      const Items& index = fields_of(g_, key, "a key of storage_data");
      const std::string& fqn = text_of(g_, field(g_, index, "fqn"), "a MetadataIndex's fqn");
      const NodeId offset_node = field(g_, index, "offset");
      std::vector<std::int64_t> offset;
      if (!is_none(g_, offset_node))
        offset = int_tuple(g_, offset_node, "a MetadataIndex's offset");

      const std::string what = fmt::format("the storage info of {}", quote(fqn, 200));
      const Items& info = fields_of(g_, value, what.c_str());
      const std::string& name = text_of(g_, field(g_, info, "relative_path"), what + "'s path");
      const auto at = as_int(g_, field(g_, info, "offset"));
      const auto length = as_int(g_, field(g_, info, "length"));
      if (!at || !length || *at < 0 || *length < 0) {
        fail(fmt::format("{} has no valid offset and length", what));
      }
      DcpItem item;
      item.file = file_index(name);
      item.offset = static_cast<std::uint64_t>(*at);
      item.length = static_cast<std::uint64_t>(*length);
      const NodeId transforms = field(g_, info, "transform_descriptors");
      if (!is_none(g_, transforms)) {
        if (g_.kind(transforms) != Kind::list && g_.kind(transforms) != Kind::tuple) {
          fail(fmt::format("{}'s transform_descriptors is {}", what, what_is(g_, transforms)));
        }
        for (const NodeId t : g_.items(transforms)) {
          item.transforms.push_back(text_of(g_, t, what + "'s transform descriptor"));
        }
      }
      const std::string k = item_key(fqn, is_none(g_, offset_node) ? nullptr : &offset);
      if (auto [it, fresh] = items_.try_emplace(k, out_.items.size()); !fresh) {
        out_.items[it->second] = std::move(item);  // an equal key again: the last wins
      } else {
        out_.items.push_back(std::move(item));
      }
    }
  }

  std::uint32_t file_index(const std::string& name) {
    auto [it, fresh] = files_.try_emplace(name, static_cast<std::uint32_t>(out_.files.size()));
    if (fresh) {
      if (out_.files.size() >= limits_.max_files) {
        fail(fmt::format("its items are in more than {} files", limits_.max_files));
      }
      out_.files.push_back(name);
      out_.refused.push_back(refusal(name));
    }
    return it->second;
  }

  std::optional<std::uint32_t> item_of(const std::string& fqn,
                                       const std::vector<std::int64_t>* offset) const {
    const auto it = items_.find(item_key(fqn, offset));
    if (it == items_.end()) return std::nullopt;
    return static_cast<std::uint32_t>(it->second);
  }

  DcpEntry read_entry(const std::string& fqn, NodeId value) {
    DcpEntry e;
    e.fqn = fqn;
    const std::string what = fmt::format("the entry {}", quote(fqn, 200));
    const pickle::Global* cls = class_of(g_, value);
    if (cls && cls->name.ends_with("BytesStorageMetadata")) {
      e.kind = DcpEntry::Kind::bytes;
      e.item = item_of(fqn, nullptr);
      return e;
    }
    const Items& fields = fields_of(g_, value, what.c_str());
    const NodeId chunks = field(g_, fields, "chunks");
    if (!cls || chunks == no_node) {
      fail(fmt::format("{} is {}, not a TensorStorageMetadata or BytesStorageMetadata", what,
                       what_is(g_, value)));
    }
    e.kind = DcpEntry::Kind::tensor;
    e.size = int_tuple(g_, field(g_, fields, "size"), what + "'s size");
    read_properties(e, field(g_, fields, "properties"), what);
    if (g_.kind(chunks) != Kind::list && g_.kind(chunks) != Kind::tuple) {
      fail(fmt::format("{}'s chunks are {}, not a list", what, what_is(g_, chunks)));
    }
    for (const NodeId chunk : g_.items(chunks)) {
      if (++chunk_count_ > limits_.max_chunks) {
        fail(fmt::format("more than {} tensor chunks", limits_.max_chunks));
      }
      const Items& c = fields_of(g_, chunk, (what + "'s chunk").c_str());
      const auto offsets = int_tuple(g_, field(g_, c, "offsets"), what + "'s chunk offsets");
      const auto sizes = int_tuple(g_, field(g_, c, "sizes"), what + "'s chunk sizes");
      if (offsets.size() != e.size.size() || sizes.size() != e.size.size()) {
        fail(fmt::format("{} has {} dimensions, a chunk of it {}", what, e.size.size(),
                         offsets.size() != e.size.size() ? offsets.size() : sizes.size()));
      }
      e.chunk_numbers.insert(e.chunk_numbers.end(), offsets.begin(), offsets.end());
      e.chunk_numbers.insert(e.chunk_numbers.end(), sizes.begin(), sizes.end());
      e.chunk_items.push_back(item_of(fqn, &offsets));
    }
    return e;
  }

  // TensorProperties: its state is (dtype, layout, requires_grad, memory_format, pin_memory),
  // or a dict of those fields (torch before __getstate__ was written for it).
  void read_properties(DcpEntry& e, NodeId properties, const std::string& what) {
    if (properties == no_node || g_.kind(properties) != Kind::object) {
      fail(fmt::format("{}'s properties are {}", what, what_is(g_, properties)));
    }
    const NodeId state = g_.object(properties).state;
    NodeId dtype = no_node, layout = no_node;
    if (state != no_node && g_.kind(state) == Kind::tuple && !g_.items(state).empty()) {
      dtype = g_.items(state)[0];
      if (g_.items(state).size() > 1) layout = g_.items(state)[1];
    } else if (state != no_node && g_.kind(state) == Kind::dict) {
      dtype = field(g_, g_.dict_items(state), "dtype");
      layout = field(g_, g_.dict_items(state), "layout");
    }
    if (dtype == no_node || g_.kind(dtype) != Kind::global) {
      fail(fmt::format("{}'s dtype is {}", what, what_is(g_, dtype)));
    }
    const pickle::Global& d = g_.global(dtype);
    const auto known = d.module == "torch" ? dtype_from_name(d.name) : std::nullopt;
    if (!known) {
      e.broken = fmt::format("its dtype {} is not one ckptfs knows", quote(d.dotted(), 80));
    } else {
      e.dtype = *known;
    }
    // torch.serialization._get_layout("torch.strided"): another layout is no dense tensor.
    if (layout != no_node && g_.kind(layout) == Kind::object) {
      const NodeId args = g_.object(layout).args;
      if (args != no_node && g_.kind(args) == Kind::tuple && g_.items(args).size() == 1 &&
          g_.kind(g_.items(args)[0]) == Kind::string &&
          g_.text(g_.items(args)[0]) != "torch.strided") {
        e.broken = fmt::format("its layout {} is not a dense tensor's",
                               quote(g_.text(g_.items(args)[0]), 80));
      }
    }
  }

  std::vector<DcpPathPart> read_path(const std::string& fqn, NodeId path) {
    if (is_none(g_, path)) return {DcpPathPart{false, fqn, 0}};
    if (g_.kind(path) != Kind::tuple && g_.kind(path) != Kind::list) {
      fail(fmt::format("the planner_data path of {} is {}", quote(fqn, 200), what_is(g_, path)));
    }
    const auto& parts = g_.items(path);
    if (parts.empty() || parts.size() > limits_.max_path_parts) {
      fail(fmt::format("the planner_data path of {} has {} parts", quote(fqn, 200), parts.size()));
    }
    std::vector<DcpPathPart> out;
    for (const NodeId part : parts) {
      if (g_.kind(part) == Kind::string) {
        out.push_back({false, g_.text(part), 0});
      } else if (const auto value = as_int(g_, part);
                 value && *value >= 0 &&
                 static_cast<std::uint64_t>(*value) < limits_.max_list_index) {
        out.push_back({true, {}, *value});
      } else {
        fail(fmt::format("the planner_data path of {} holds {}, not a str or a position below {}",
                         quote(fqn, 200), what_is(g_, part), limits_.max_list_index));
      }
    }
    return out;
  }

  const Graph& g_;
  const DcpLimits& limits_;
  DcpMetadata out_;
  TextMap<std::size_t> items_;  // item_key() -> index into out_.items
  TextMap<std::uint32_t> files_;
  std::uint64_t chunk_count_ = 0;
};

}  // namespace

DcpMetadata read_dcp_metadata(const ByteSource& metadata, const ReadLimits& limits,
                              const DcpLimits& dcp) {
  if (metadata.size() > dcp.max_metadata_bytes) {
    fail(fmt::format("{} bytes, more than the {} a .metadata may have", metadata.size(),
                     dcp.max_metadata_bytes));
  }
  pickle::ParseResult parsed;
  try {
    parsed = pickle::parse(metadata, 0, metadata.size(), limits.pickle);
  } catch (const pickle::Truncated& e) {
    throw Error(e.code(), fmt::format(".metadata: {}: {}", e.what(), looks_truncated));
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format(".metadata: {}", e.what()));
  }
  return MetadataReader(parsed.graph, dcp).run();
}

}  // namespace ckptfs
