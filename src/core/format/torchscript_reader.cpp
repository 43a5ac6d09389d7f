// SPDX-License-Identifier: MIT
// read_torchscript(): data.pkl's modules walked as torch's state_dict() walks them, constants.pkl
// as constants.N, and every other tensor of the module under attributes.
#include <ckptfs/base/error.hpp>
#include <ckptfs/format/flatten.hpp>
#include <ckptfs/format/torch_interpreter.hpp>
#include <ckptfs/format/torchscript_reader.hpp>

#include "torch_storages.hpp"

#include <fmt/format.h>

#include <string_view>
#include <unordered_set>

namespace ckptfs {
namespace {

using namespace detail;
using pickle::Graph;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;

// The qualified class name of an object of a TorchScript class ("__torch__.a.b.C"), or "".
std::string torch_class_of(const Graph& g, NodeId id) {
  if (g.kind(id) != Kind::object) return {};
  NodeId callable = g.object(id).callable;
  if (callable == no_node || g.kind(callable) != Kind::global) return {};
  const pickle::Global& cls = g.global(callable);
  if (cls.module != "__torch__" && !cls.module.starts_with("__torch__.")) return {};
  return cls.dotted();
}

// The dict state of an object, or no_node.
NodeId dict_state(const Graph& g, NodeId id) {
  NodeId state = g.object(id).state;
  return state != no_node && g.kind(state) == Kind::dict ? state : no_node;
}

// TorchScript's typed containers: torch.jit._pickle.build_intlist(list) and the like are their
// first argument, and so is restore_type_tag(value, type). Each alias resolves to a node that is
// not one: an argument always exists before the call that takes it, so one pass in creation
// order resolves chains of them.
std::unordered_map<NodeId, NodeId> typed_container_aliases(const Graph& g) {
  static const std::unordered_set<std::string_view> transparent = {
      "build_intlist", "build_tensorlist", "build_doublelist", "build_boollist",
      "restore_type_tag"};
  std::unordered_map<NodeId, NodeId> aliases;
  for (NodeId id = 0; id < g.size(); ++id) {
    if (g.kind(id) != Kind::object) continue;
    const pickle::Object& obj = g.object(id);
    if (obj.callable == no_node || g.kind(obj.callable) != Kind::global) continue;
    const pickle::Global& fn = g.global(obj.callable);
    if (fn.module != "torch.jit._pickle" || !transparent.contains(fn.name)) continue;
    if (obj.args == no_node || g.kind(obj.args) != Kind::tuple || g.items(obj.args).empty()) {
      continue;
    }
    NodeId target = g.items(obj.args).front();
    if (target >= id) continue;  // never for a real call; keeps the resolution a single pass
    auto it = aliases.find(target);
    aliases.emplace(id, it == aliases.end() ? target : it->second);
  }
  return aliases;
}

// What torch.jit.load makes of an object: whether it is a module, and which attributes are
// its parameters and buffers.
struct ModuleShape {
  bool module = false;
  std::unordered_set<std::string> parameters;  // parameters and buffers both keep their
  std::unordered_set<std::string> buffers;     // state order; parameters come first
};

struct Walks {
  bool root_is_module = false;
  WalkPlan state_dict;  // modules: parameters, buffers, submodules
  WalkPlan attributes;  // modules: every other attribute, then submodules
};

class ModuleWalker {
 public:
  ModuleWalker(const Graph& g, const Interpretation& in,
               const std::unordered_map<std::string, ClassDeclaration>& declarations)
      : g_(g), in_(in), declarations_(declarations) {}

  Walks run() {
    Walks walks;
    walks.state_dict.aliases = typed_container_aliases(g_);
    walks.attributes.aliases = walks.state_dict.aliases;
    aliases_ = &walks.state_dict.aliases;
    shapes_.assign(g_.size(), std::nullopt);
    for (NodeId id = 0; id < g_.size(); ++id) shapes_[id] = shape_of(id);
    for (NodeId id = 0; id < g_.size(); ++id) {
      if (is_module(id)) plan_module(id, walks);
    }
    walks.root_is_module = g_.root() != no_node && is_module(resolve(g_.root()));
    return walks;
  }

 private:
  NodeId resolve(NodeId id) const {
    auto it = aliases_->find(id);
    return it == aliases_->end() ? id : it->second;
  }

  bool is_tensor(NodeId id) const { return in_.tensor_of[id] >= 0; }
  bool is_module(NodeId id) const { return shapes_[id] && shapes_[id]->module; }

  static std::optional<std::string_view> name_of(const Graph& g, NodeId key) {
    if (g.kind(key) != Kind::string) return std::nullopt;
    return std::string_view(g.text(key));
  }

  std::optional<ModuleShape> shape_of(NodeId id) const {
    std::string cls = torch_class_of(g_, id);
    if (cls.empty()) return std::nullopt;
    NodeId state = dict_state(g_, id);
    ModuleShape shape;
    if (auto it = declarations_.find(cls); it != declarations_.end()) {
      shape.module = it->second.module;
      shape.parameters.insert(it->second.parameters.begin(), it->second.parameters.end());
      shape.buffers.insert(it->second.buffers.begin(), it->second.buffers.end());
      return shape;
    }
    // No declaration: where torch.jit.script and trace put a module's parameters and buffers,
    // before `training` (the first attribute nn.Module.__init__ sets).
    if (state == no_node) return shape;
    const auto& items = g_.dict_items(state);
    std::size_t training = items.size();
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (name_of(g_, items[i].first) == "training" &&
          g_.kind(resolve(items[i].second)) == Kind::boolean) {
        training = i;
        break;
      }
    }
    if (training == items.size()) return shape;
    shape.module = true;
    for (std::size_t i = 0; i < training; ++i) {
      auto name = name_of(g_, items[i].first);
      if (name && is_tensor(resolve(items[i].second))) shape.parameters.emplace(*name);
    }
    return shape;
  }

  void plan_module(NodeId id, Walks& walks) {
    NodeId state = dict_state(g_, id);
    auto& state_dict = walks.state_dict.children[id];
    // A module pickled through its own __getstate__ (the packed parameters of quantized
    // modules): state_dict() shows nothing of it; its state is walked as an object's.
    if (state == no_node) return;
    const ModuleShape& shape = *shapes_[id];
    // The attributes once each, as torch sets them: the first position, the last value.
    std::vector<std::pair<NodeId, NodeId>> attributes;
    std::unordered_map<std::string_view, std::size_t> position;
    for (const auto& [key, value] : g_.dict_items(state)) {
      auto name = name_of(g_, key);
      if (name) {
        auto [it, inserted] = position.emplace(*name, attributes.size());
        if (!inserted) {
          attributes[it->second].second = resolve(value);
          continue;
        }
      }
      attributes.emplace_back(key, resolve(value));
    }
    auto& other = walks.attributes.children[id];
    std::vector<std::pair<NodeId, NodeId>> buffers, modules;
    for (const auto& [key, value] : attributes) {
      auto name = name_of(g_, key);
      if (name && is_tensor(value) && shape.parameters.contains(std::string(*name))) {
        state_dict.emplace_back(key, value);
      } else if (name && is_tensor(value) && shape.buffers.contains(std::string(*name))) {
        buffers.emplace_back(key, value);
      } else if (is_module(value)) {
        modules.emplace_back(key, value);
      } else {
        other.emplace_back(key, value);
      }
    }
    state_dict.insert(state_dict.end(), buffers.begin(), buffers.end());
    state_dict.insert(state_dict.end(), modules.begin(), modules.end());
    other.insert(other.end(), modules.begin(), modules.end());
  }

  const Graph& g_;
  const Interpretation& in_;
  const std::unordered_map<std::string, ClassDeclaration>& declarations_;
  const std::unordered_map<NodeId, NodeId>* aliases_ = nullptr;
  std::vector<std::optional<ModuleShape>> shapes_;
};

// The qualified names of the TorchScript classes of data.pkl's objects.
std::vector<std::string> torch_classes(const Graph& g) {
  std::unordered_set<std::string> seen;
  std::vector<std::string> out;
  for (NodeId id = 0; id < g.size(); ++id) {
    std::string cls = torch_class_of(g, id);
    if (!cls.empty() && seen.insert(cls).second) out.push_back(std::move(cls));
  }
  return out;
}

const ZipEntry& record_or_refuse(const ZipArchive& zip, const std::string& name) {
  const ZipEntry* e = zip.find(name);
  if (e == nullptr) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("a TorchScript archive without its {} record", quote(name)));
  }
  return *e;
}

}  // namespace

Model read_torchscript(const ByteSource& source, const ZipArchive& zip, const std::string& prefix,
                       std::string source_name, const ReadLimits& limits,
                       const CodeLimits& code_limits) {
  const ZipEntry& data_record = record_or_refuse(zip, prefix + "/data.pkl");
  const ZipEntry& constants_record = record_or_refuse(zip, prefix + "/constants.pkl");
  bool big_endian = read_byteorder(source, zip, prefix);
  pickle::ParseResult data = parse_record(source, data_record, limits.pickle);
  pickle::ParseResult constants = parse_record(source, constants_record, limits.pickle);
  NodeId constants_root = constants.graph.root();
  if (constants_root == no_node || constants.graph.kind(constants_root) != Kind::tuple) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("{} is not a tuple of constants (torch.jit.save writes one)",
                            quote(constants_record.name)));
  }

  Interpretation data_in = interpret(data.graph, limits.max_dims);
  Interpretation constants_in = interpret(constants.graph, limits.max_dims);
  StorageTable data_table =
      zip_storages(zip, prefix + "/data/", data_in, CompressedStorage::broken);
  StorageTable constants_table =
      zip_storages(zip, prefix + "/constants/", constants_in, CompressedStorage::broken);
  bind_tensors(data_in.tensors, data_in.storage_refs, data_table);
  bind_tensors(constants_in.tensors, constants_in.storage_refs, constants_table);

  auto declarations =
      read_class_declarations(source, zip, prefix, torch_classes(data.graph), code_limits);
  Walks walks = ModuleWalker(data.graph, data_in, declarations).run();
  WalkPlan constants_plan;
  constants_plan.aliases = typed_container_aliases(constants.graph);

  // state_dict() is that of the root module; any other root's tensors are all attributes.
  std::vector<Entry> entries;
  if (walks.root_is_module) {
    entries = flatten(data.graph, data_in, limits, {&walks.state_dict, true, {}});
  }
  std::vector<Entry> constant_entries = flatten(constants.graph, constants_in, limits,
                                                {&constants_plan, true, torchscript_constants_part});
  std::vector<Entry> other_entries = flatten(data.graph, data_in, limits,
                                             {&walks.attributes, true, torchscript_attributes_part});
  if (entries.empty() && constant_entries.empty() && other_entries.empty()) {
    throw Error(ExitCode::unsupported,
                "a TorchScript archive without tensors: its module has no parameter, buffer or "
                "tensor attribute and constants.pkl holds no tensor, so there is nothing to serve");
  }

  // One list of tensors and storages: data.pkl's, then constants.pkl's renumbered after them.
  std::vector<Tensor> tensors = std::move(data_in.tensors);
  const std::size_t tensor_base = tensors.size();
  const std::size_t storage_base = data_table.storages.size();
  for (Tensor& t : constants_in.tensors) {
    if (t.storage) *t.storage += storage_base;
    if (t.quantization) {
      for (auto* part : {&t.quantization->scales, &t.quantization->zero_points}) {
        if (*part) **part += tensor_base;
      }
    }
    tensors.push_back(std::move(t));
  }
  for (Entry& e : constant_entries) {
    if (e.kind == Entry::Kind::tensor) e.tensor += tensor_base;
  }
  std::vector<Storage> storages = std::move(data_table.storages);
  for (Storage& s : constants_table.storages) storages.push_back(std::move(s));
  entries.insert(entries.end(), std::make_move_iterator(constant_entries.begin()),
                 std::make_move_iterator(constant_entries.end()));
  entries.insert(entries.end(), std::make_move_iterator(other_entries.begin()),
                 std::make_move_iterator(other_entries.end()));

  Model m;
  m.format = Format::torchscript;
  m.sources.push_back(std::move(source_name));
  m.entries = std::move(entries);
  m.tensors = used_tensors(m.entries, tensors);
  m.storages = used_storages(m.tensors, storages);
  for (Storage& s : m.storages) s.big_endian = big_endian;
  return m;
}

}  // namespace ckptfs
