// SPDX-License-Identifier: MIT
// read_torchscript(): data.pkl's modules walked as torch's state_dict() walks them, constants.pkl
// as constants.N, and every other tensor of the module under attributes.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/format/pickle/flatten.hpp>
#include <ckptfs/format/torch/torch_interpreter.hpp>
#include <ckptfs/format/torch/torchscript_reader.hpp>

#include "torch_storages.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ckptfs {
namespace {

using namespace detail;
using pickle::Graph;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;

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
  static const TextViewSet transparent = {"build_intlist", "build_tensorlist", "build_doublelist",
                                          "build_boollist", "restore_type_tag"};
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

// The TorchScript classes of data.pkl's objects: their qualified names ("__torch__.a.b.C"),
// and the class of each object of one.
struct TorchClasses {
  std::vector<std::string> names;
  std::unordered_map<NodeId, std::uint32_t> of_object;  // object node -> index into names
};

TorchClasses torch_classes(const Graph& g) {
  TorchClasses out;
  std::unordered_map<NodeId, std::int64_t> of_global;  // GLOBAL node -> index, -1: not one
  TextMap<std::uint32_t> index;
  for (NodeId id = 0; id < g.size(); ++id) {
    if (g.kind(id) != Kind::object) continue;
    NodeId callable = g.object(id).callable;
    if (callable == no_node || g.kind(callable) != Kind::global) continue;
    auto [it, inserted] = of_global.emplace(callable, -1);
    if (inserted) {
      const pickle::Global& cls = g.global(callable);
      if (cls.module == "__torch__" || cls.module.starts_with("__torch__.")) {
        auto [name, added] = index.emplace(cls.dotted(), out.names.size());
        if (added) out.names.push_back(name->first);
        it->second = name->second;
      }
    }
    if (it->second >= 0) out.of_object.emplace(id, static_cast<std::uint32_t>(it->second));
  }
  return out;
}

// A class as torch.jit.load makes it from its declaration: a module or not, and which
// attributes are parameters and buffers.
struct DeclaredClass {
  bool module = false;
  TextViewSet parameters;  // views into the declaration
  TextViewSet buffers;
};

struct Walks {
  bool root_is_module = false;
  WalkPlan state_dict;  // modules: parameters, buffers, submodules
  WalkPlan attributes;  // modules: every other attribute, then submodules
};

// Plans the two walks of data.pkl's modules. Memory: a few words per TorchScript object and
// per attribute of a module, one set of names per declared class.
class ModuleWalker {
 public:
  ModuleWalker(const Graph& g, const Interpretation& in, const TorchClasses& classes,
               const TextMap<ClassDeclaration>& declarations)
      : g_(g), in_(in), classes_(classes) {
    declared_.resize(classes.names.size());
    for (std::size_t i = 0; i < classes.names.size(); ++i) {
      auto it = declarations.find(classes.names[i]);
      if (it == declarations.end()) continue;
      DeclaredClass& d = declared_[i].emplace();
      d.module = it->second.module;
      d.parameters.insert(it->second.parameters.begin(), it->second.parameters.end());
      d.buffers.insert(it->second.buffers.begin(), it->second.buffers.end());
    }
  }

  Walks run() {
    Walks walks;
    walks.state_dict.aliases = typed_container_aliases(g_);
    walks.attributes.aliases = walks.state_dict.aliases;
    aliases_ = &walks.state_dict.aliases;
    for (const auto& [id, cls] : classes_.of_object) {
      if (auto training = module_shape(id, cls)) modules_.emplace(id, *training);
    }
    for (const auto& [id, training] : modules_) plan_module(id, training, walks);
    walks.root_is_module = g_.root() != no_node && is_module(resolve(g_.root()));
    return walks;
  }

 private:
  // Without a declaration, the attributes before this position of a module's state are its
  // parameters and buffers; with one, no position says anything.
  static constexpr std::size_t declared = std::numeric_limits<std::size_t>::max();

  NodeId resolve(NodeId id) const {
    auto it = aliases_->find(id);
    return it == aliases_->end() ? id : it->second;
  }

  bool is_tensor(NodeId id) const { return in_.tensor_of[id] >= 0; }
  bool is_module(NodeId id) const { return modules_.contains(id); }

  static std::optional<std::string_view> name_of(const Graph& g, NodeId key) {
    if (g.kind(key) != Kind::string) return std::nullopt;
    return std::string_view(g.text(key));
  }

  // Whether an object of TorchScript class `cls` is a module: nullopt if not, else `declared`
  // or, without a declaration, the position of its bool `training` (the first attribute
  // nn.Module.__init__ sets; where torch.jit.script and trace put a module's parameters and
  // buffers: before it).
  std::optional<std::size_t> module_shape(NodeId id, std::uint32_t cls) const {
    if (declared_[cls]) {
      return declared_[cls]->module ? std::optional<std::size_t>(declared) : std::nullopt;
    }
    NodeId state = dict_state(g_, id);
    if (state == no_node) return std::nullopt;
    const auto& items = g_.dict_items(state);
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (name_of(g_, items[i].first) == "training" &&
          g_.kind(resolve(items[i].second)) == Kind::boolean) {
        return i;
      }
    }
    return std::nullopt;
  }

  void plan_module(NodeId id, std::size_t training, Walks& walks) {
    NodeId state = dict_state(g_, id);
    auto& state_dict = walks.state_dict.children[id];
    // A module pickled through its own __getstate__ (the packed parameters of quantized
    // modules): state_dict() shows nothing of it; its state is walked as an object's.
    if (state == no_node) return;
    const DeclaredClass* declaration =
        training == declared ? &*declared_[classes_.of_object.at(id)] : nullptr;
    // The attributes once each, as torch sets them: the first position, the last value.
    struct Attribute {
      NodeId key, value;
      std::size_t position;
    };
    std::vector<Attribute> attributes;
    TextViewMap<std::size_t> seen;
    const auto& items = g_.dict_items(state);
    for (std::size_t i = 0; i < items.size(); ++i) {
      auto [key, value] = items[i];
      if (auto name = name_of(g_, key)) {
        auto [it, inserted] = seen.emplace(*name, attributes.size());
        if (!inserted) {
          attributes[it->second].value = resolve(value);
          continue;
        }
      }
      attributes.push_back({key, resolve(value), i});
    }
    auto& other = walks.attributes.children[id];
    std::vector<std::pair<NodeId, NodeId>> buffers, modules;
    for (const auto& a : attributes) {
      auto name = name_of(g_, a.key);
      bool tensor = name && is_tensor(a.value);
      bool parameter = declaration ? tensor && declaration->parameters.contains(*name)
                                   : tensor && a.position < training;
      if (parameter) {
        state_dict.emplace_back(a.key, a.value);
      } else if (tensor && declaration && declaration->buffers.contains(*name)) {
        buffers.emplace_back(a.key, a.value);
      } else if (is_module(a.value)) {
        modules.emplace_back(a.key, a.value);
      } else {
        other.emplace_back(a.key, a.value);
      }
    }
    state_dict.insert(state_dict.end(), buffers.begin(), buffers.end());
    state_dict.insert(state_dict.end(), modules.begin(), modules.end());
    other.insert(other.end(), modules.begin(), modules.end());
  }

  const Graph& g_;
  const Interpretation& in_;
  const TorchClasses& classes_;
  std::vector<std::optional<DeclaredClass>> declared_;  // per class of classes_
  std::unordered_map<NodeId, std::size_t> modules_;     // module object -> its `training`
  const std::unordered_map<NodeId, NodeId>* aliases_ = nullptr;
};

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
      zip_storages(source, zip, prefix + "/data/", data_in, CompressedStorage::broken);
  StorageTable constants_table =
      zip_storages(source, zip, prefix + "/constants/", constants_in, CompressedStorage::broken);
  bind_tensors(data_in.tensors, data_in.storage_refs, data_table);
  bind_tensors(constants_in.tensors, constants_in.storage_refs, constants_table);

  TorchClasses classes = torch_classes(data.graph);
  auto declarations = read_class_declarations(source, zip, prefix, classes.names, code_limits);
  Walks walks = ModuleWalker(data.graph, data_in, classes, declarations).run();
  WalkPlan constants_plan;
  constants_plan.aliases = typed_container_aliases(constants.graph);

  // state_dict() is that of the root module; any other root's tensors are all attributes.
  std::vector<Entry> entries;
  if (walks.root_is_module) {
    entries = flatten(data.graph, data_in, limits, {&walks.state_dict, true, {}}).entries;
  }
  std::vector<Entry> constant_entries = flatten(constants.graph, constants_in, limits,
                                                {&constants_plan, true, torchscript_constants_part})
                                            .entries;
  std::vector<Entry> other_entries =
      flatten(data.graph, data_in, limits, {&walks.attributes, true, torchscript_attributes_part})
          .entries;
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
  // torch.jit.load gives a module: pack writes its entries under their flattened keys.
  m.root = ContainerKind::object;
  m.sources.push_back(std::move(source_name));
  m.entries = std::move(entries);
  m.tensors = used_tensors(m.entries, tensors);
  m.storages = used_storages(m.tensors, storages);
  for (Storage& s : m.storages) s.big_endian = big_endian;
  return m;
}

}  // namespace ckptfs
