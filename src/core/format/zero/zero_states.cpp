// SPDX-License-Identifier: MIT
// read_model_states() and read_optim_states(): DeepSpeed's dicts found in the inert pickle graph
// by their keys, as zero_to_fp32 indexes them, each value checked for the kind it must be.
#include "zero_states.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/format/zip/zip_reader.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace ckptfs::zero {
namespace {

using pickle::Graph;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;

[[noreturn]] void bad(const std::string& message) {
  throw Error(ExitCode::bad_checkpoint, message);
}

// A dict's items with str keys, as Python sees the dict: a key given twice keeps its first
// position and its last value. Items whose key is not a str are left out.
struct DictItems {
  std::vector<std::pair<NodeId, NodeId>> items;  // key node, value node

  DictItems(const Graph& g, NodeId dict) {
    TextMap<std::size_t> position;
    for (const auto& [key, value] : g.dict_items(dict)) {
      if (g.kind(key) != Kind::string) continue;
      auto [it, fresh] = position.try_emplace(g.text(key), items.size());
      if (fresh) {
        items.emplace_back(key, value);
      } else {
        items[it->second].second = value;
      }
    }
  }
};

// The value of `key` in the dict `dict` (its last), or no_node.
NodeId find(const Graph& g, NodeId dict, std::string_view key) {
  NodeId found = no_node;
  for (const auto& [k, v] : g.dict_items(dict)) {
    if (g.kind(k) == Kind::string && g.text(k) == key) found = v;
  }
  return found;
}

// The key node of `key` in `dict` (its first), or no_node.
NodeId find_key(const Graph& g, NodeId dict, std::string_view key) {
  for (const auto& [k, v] : g.dict_items(dict)) {
    if (g.kind(k) == Kind::string && g.text(k) == key) return k;
  }
  return no_node;
}

bool is_none(const Graph& g, NodeId id) { return id == no_node || g.kind(id) == Kind::none; }
bool is_dict(const Graph& g, NodeId id) { return id != no_node && g.kind(id) == Kind::dict; }
bool is_sequence(const Graph& g, NodeId id) {
  return id != no_node && (g.kind(id) == Kind::list || g.kind(id) == Kind::tuple);
}

// The object a global named `name` (in any module) was called with one argument: torch.Size(...),
// DeepSpeed's ZeroStageEnum(2). Its argument, or no_node.
NodeId single_argument_of(const Graph& g, NodeId id, std::string_view name) {
  if (id == no_node || g.kind(id) != Kind::object) return no_node;
  const pickle::Object& o = g.object(id);
  if (o.callable == no_node || g.kind(o.callable) != Kind::global ||
      g.global(o.callable).name != name || !is_sequence(g, o.args) || g.items(o.args).size() != 1) {
    return no_node;
  }
  return g.items(o.args)[0];
}

// An int, a bool (an int in Python) or an IntEnum such as ZeroStageEnum (pickled as a call of
// its class with the int).
std::optional<std::int64_t> integer_of(const Graph& g, NodeId id, std::string_view enum_name = {}) {
  if (id == no_node) return std::nullopt;
  if (g.kind(id) == Kind::integer) return g.integer(id);
  if (g.kind(id) == Kind::boolean) return g.boolean(id) ? 1 : 0;
  if (!enum_name.empty()) {
    NodeId arg = single_argument_of(g, id, enum_name);
    if (arg != no_node && g.kind(arg) == Kind::integer) return g.integer(arg);
  }
  return std::nullopt;
}

// A shape: torch.Size(sizes) or a list or tuple of sizes, each an int >= 0, their product
// without overflow. What math.prod(shape) takes, and what .view(shape) needs.
NamedShape shape_of(const Graph& g, const std::string& name, NodeId id, std::size_t max_dims) {
  NodeId sizes = id;
  if (NodeId arg = single_argument_of(g, id, "Size"); arg != no_node) sizes = arg;
  if (!is_sequence(g, sizes)) {
    bad(fmt::format("the shape of {} is not a torch.Size or a list of sizes", quote(name)));
  }
  const auto& items = g.items(sizes);
  if (items.size() > max_dims) {
    bad(fmt::format("the shape of {} has {} dimensions, more than {}", quote(name), items.size(),
                    max_dims));
  }
  NamedShape out{name, {}, 1};
  for (NodeId item : items) {
    const auto size = integer_of(g, item);
    if (!size || *size < 0) {
      bad(fmt::format("the shape of {} holds something other than a size", quote(name)));
    }
    out.shape.push_back(*size);
  }
  const auto numel = element_count(out.shape);
  if (!numel || *numel > (std::uint64_t{1} << 62)) {
    bad(fmt::format("the shape of {} has more elements than a tensor can", quote(name)));
  }
  out.numel = *numel;
  return out;
}

// A dict of name -> shape (an OrderedDict of param_shapes), appended to `out`.
void read_shapes(const Graph& g, NodeId dict, const char* what, std::vector<NamedShape>& out,
                 std::uint64_t& count, const ReadLimits& limits, const ZeroLimits& zero) {
  if (!is_dict(g, dict)) bad(fmt::format("{} is not a dict of names and shapes", what));
  for (const auto& [key, value] : DictItems(g, dict).items) {
    if (++count > zero.max_parameters) {
      throw Error(ExitCode::unsupported,
                  fmt::format("more than {} parameters in {}", zero.max_parameters, what));
    }
    out.push_back(shape_of(g, g.text(key), value, limits.max_dims));
  }
}

// A dict of name -> tensor.
std::vector<NamedTensor> read_tensors(const TorchFile& f, NodeId dict, const char* what,
                                      const ZeroLimits& zero) {
  const Graph& g = f.graph;
  if (!is_dict(g, dict)) bad(fmt::format("{} is not a dict", what));
  std::vector<NamedTensor> out;
  const DictItems items(g, dict);
  if (items.items.size() > zero.max_parameters) {
    throw Error(ExitCode::unsupported,
                fmt::format("more than {} entries in {}", zero.max_parameters, what));
  }
  out.reserve(items.items.size());
  for (const auto& [key, value] : items.items) {
    NamedTensor t{g.text(key), std::nullopt};
    const std::int32_t index = f.interpretation.tensor_of[value];
    if (index >= 0) t.tensor = static_cast<std::size_t>(index);
    out.push_back(std::move(t));
  }
  return out;
}

// Whether ds_config (a dict) enables bf16: {"bf16": {"enabled": true}} (or "bfloat16").
bool bf16_enabled(const Graph& g, NodeId config) {
  if (!is_dict(g, config)) return false;
  for (const char* section : {"bf16", "bfloat16"}) {
    NodeId s = find(g, config, section);
    if (!is_dict(g, s)) continue;
    NodeId enabled = find(g, s, "enabled");
    if (enabled != no_node && g.kind(enabled) == Kind::boolean && g.boolean(enabled)) return true;
  }
  return false;
}

}  // namespace

TorchFile read_torch_file(const ByteSource& source, const ReadLimits& limits) {
  if (!looks_like_zip(source)) {
    throw Error(ExitCode::unsupported,
                "not in torch's zip format: DeepSpeed saves with torch.save of torch >= 1.6");
  }
  ReadLimits zip_limits = limits;
  zip_limits.zip.defer_local_headers = zip_limits.zip.defer_local_headers || source.remote();
  return detail::read_zip_pickle(source, zip_limits);
}

ModelStates read_model_states(const ByteSource& source, const ReadLimits& limits,
                              const ZeroLimits& zero) {
  ModelStates m{
      read_torch_file(source, limits), {}, {}, no_node, no_node, {}, {}, {}, {}, {}, false};
  const Graph& g = m.file.graph;
  const NodeId root = g.root();
  if (!is_dict(g, root)) bad("not a DeepSpeed model states file: its pickle is not a dict");
  const NodeId buffer_names = find(g, root, "buffer_names");
  if (buffer_names == no_node) bad("not a DeepSpeed model states file: no buffer_names");
  if (!is_sequence(g, buffer_names)) bad("buffer_names is not a list");
  TextSet seen;
  for (NodeId n : g.items(buffer_names)) {
    if (g.kind(n) != Kind::string) bad("buffer_names holds something other than a str");
    if (seen.insert(g.text(n)).second) m.buffer_names.push_back(g.text(n));
  }

  m.module_node = find(g, root, "module");
  m.module_key_node = find_key(g, root, "module");
  if (!is_dict(g, m.module_node)) bad("its module (the model's state_dict) is not a dict");
  m.module = read_tensors(m.file, m.module_node, "module", zero);

  const NodeId param_shapes = find(g, root, "param_shapes");
  if (param_shapes == no_node || is_none(g, param_shapes)) {
    bad("no param_shapes: not saved by a ZeRO optimizer");
  }
  if (!is_sequence(g, param_shapes)) bad("param_shapes is not a list of dicts");
  if (g.items(param_shapes).size() > zero.max_groups) {
    throw Error(ExitCode::unsupported,
                fmt::format("more than {} param groups in param_shapes", zero.max_groups));
  }
  std::uint64_t count = 0;
  for (NodeId group : g.items(param_shapes)) {
    read_shapes(g, group, "a group of param_shapes", m.param_shapes.emplace_back(), count, limits,
                zero);
  }

  const NodeId frozen_shapes = find(g, root, "frozen_param_shapes");
  if (!is_none(g, frozen_shapes)) {
    read_shapes(g, frozen_shapes, "frozen_param_shapes", m.frozen_param_shapes.emplace(), count,
                limits, zero);
  }
  const NodeId fragments = find(g, root, "frozen_param_fragments");
  if (!is_none(g, fragments)) {
    m.frozen_param_fragments = read_tensors(m.file, fragments, "frozen_param_fragments", zero);
  }

  const NodeId shared = find(g, root, "shared_params");
  if (shared == no_node || !is_dict(g, shared)) bad("shared_params is not a dict");
  for (const auto& [alias, name] : DictItems(g, shared).items) {
    if (g.kind(name) != Kind::string) bad("shared_params holds something other than a str");
    if (m.shared_params.size() >= zero.max_parameters) {
      throw Error(ExitCode::unsupported,
                  fmt::format("more than {} shared parameters", zero.max_parameters));
    }
    m.shared_params.emplace_back(g.text(alias), g.text(name));
  }

  m.dp_world_size = integer_of(g, find(g, root, "dp_world_size"));
  m.bf16 = bf16_enabled(g, find(g, root, "ds_config"));
  return m;
}

OptimStates read_optim_states(const ByteSource& source, const ReadLimits& limits,
                              const ZeroLimits& zero) {
  OptimStates o{read_torch_file(source, limits), std::nullopt, std::nullopt, {}};
  const Graph& g = o.file.graph;
  const NodeId root = g.root();
  const NodeId state = is_dict(g, root) ? find(g, root, "optimizer_state_dict") : no_node;
  if (!is_dict(g, state)) {
    bad("not a DeepSpeed optimizer states file: no optimizer_state_dict");
  }
  o.zero_stage = integer_of(g, find(g, state, "zero_stage"), "ZeroStageEnum");
  const NodeId count = find(g, state, "partition_count");
  if (auto n = integer_of(g, count)) {
    o.partition_count = *n;
  } else if (is_sequence(g, count)) {
    for (NodeId item : g.items(count)) {
      if (auto each = integer_of(g, item)) {
        o.partition_count = std::max(o.partition_count.value_or(*each), *each);
      }
    }
  }
  // The stage names its groups; a file without a stage (a bf16 optimizer's) has the first.
  const bool stage3 = o.zero_stage == 3;
  NodeId groups = find(g, state, stage3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups");
  if (groups == no_node && !o.zero_stage) groups = find(g, state, "fp32_flat_groups");
  if (groups == no_node) {
    bad(fmt::format("its optimizer_state_dict has no {}",
                    stage3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups"));
  }
  if (!is_sequence(g, groups)) bad("its flat fp32 groups are not a list");
  if (g.items(groups).size() > zero.max_groups) {
    throw Error(ExitCode::unsupported, fmt::format("more than {} groups", zero.max_groups));
  }
  for (NodeId item : g.items(groups)) {
    const std::int32_t index = o.file.interpretation.tensor_of[item];
    o.groups.push_back(index >= 0 ? std::optional<std::size_t>(index) : std::nullopt);
  }
  return o;
}

}  // namespace ckptfs::zero
