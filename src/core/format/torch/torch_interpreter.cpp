// SPDX-License-Identifier: MIT
// Recognises torch's storage references and tensor rebuild calls in an inert pickle graph.
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/torch/torch_interpreter.hpp>

#include <fmt/format.h>

#include <string_view>

namespace ckptfs {
namespace {

using pickle::Graph;
using pickle::Kind;
using pickle::no_node;
using pickle::NodeId;

std::optional<std::int64_t> as_int(const Graph& g, NodeId id) {
  if (id == no_node) return std::nullopt;
  if (g.kind(id) == Kind::integer) return g.integer(id);
  if (g.kind(id) == Kind::boolean) return g.boolean(id) ? 1 : 0;
  return std::nullopt;
}

std::optional<bool> as_bool(const Graph& g, NodeId id) {
  if (id == no_node) return std::nullopt;
  if (g.kind(id) == Kind::boolean) return g.boolean(id);
  if (g.kind(id) == Kind::integer) return g.integer(id) != 0;
  return std::nullopt;
}

const std::vector<NodeId>* as_sequence(const Graph& g, NodeId id) {
  if (id == no_node) return nullptr;
  Kind k = g.kind(id);
  if (k == Kind::tuple || k == Kind::list) return &g.items(id);
  return nullptr;
}

const pickle::Global* as_global(const Graph& g, NodeId id) {
  if (id == no_node || g.kind(id) != Kind::global) return nullptr;
  return &g.global(id);
}

std::optional<std::string> as_text(const Graph& g, NodeId id) {
  if (id == no_node) return std::nullopt;
  if (g.kind(id) == Kind::string || g.kind(id) == Kind::bytes) return g.text(id);
  if (g.kind(id) == Kind::integer) return std::to_string(g.integer(id));
  return std::nullopt;
}

// A shape or stride: a tuple/list of ints, or torch.Size((...)).
std::optional<std::vector<std::int64_t>> as_int_tuple(const Graph& g, NodeId id) {
  if (id != no_node && g.kind(id) == Kind::object) {
    const auto& obj = g.object(id);
    const auto* cls = as_global(g, obj.callable);
    const auto* args = as_sequence(g, obj.args);
    if (cls && cls->dotted() == "torch.Size" && args && args->size() == 1) id = (*args)[0];
  }
  const auto* items = as_sequence(g, id);
  if (!items) return std::nullopt;
  std::vector<std::int64_t> out;
  out.reserve(items->size());
  for (NodeId item : *items) {
    auto v = as_int(g, item);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

// A dtype argument: the global torch.float16 (or torch.half...).
std::optional<DType> as_dtype(const Graph& g, NodeId id) {
  const auto* glob = as_global(g, id);
  if (!glob || glob->module != "torch") return std::nullopt;
  return dtype_from_name(glob->name);
}

class Interpreter {
 public:
  Interpreter(const Graph& graph, std::size_t max_dims) : g_(graph), max_dims_(max_dims) {
    out_.tensor_of.assign(g_.size(), -1);
    ref_of_.assign(g_.size(), -1);
  }

  Interpretation run() {
    // Persistent ids first: a legacy tensor's BUILD state names its storage in a node created
    // after the tensor's own node.
    for (NodeId id = 0; id < g_.size(); ++id) {
      if (g_.kind(id) == Kind::persistent_id) add_storage_ref(id);
    }
    for (NodeId id = 0; id < g_.size(); ++id) {
      if (g_.kind(id) == Kind::object) interpret_object(id);
    }
    return std::move(out_);
  }

 private:
  void add_storage_ref(NodeId id) {
    const auto* pid = as_sequence(g_, g_.persistent_id(id));
    if (!pid || pid->size() < 5) return;
    if (as_text(g_, (*pid)[0]) != "storage") return;
    StorageRef ref;
    const auto* cls = as_global(g_, (*pid)[1]);
    auto key = as_text(g_, (*pid)[2]);
    auto numel = as_int(g_, (*pid)[4]);
    if (!cls || !key || !numel || *numel < 0) return;
    ref.key = *key;
    ref.class_name = cls->name;
    ref.dtype = dtype_from_storage_class(cls->name);
    ref.declared_numel = static_cast<std::uint64_t>(*numel);
    if (pid->size() >= 6 && g_.kind((*pid)[5]) != Kind::none) {
      const auto* view = as_sequence(g_, (*pid)[5]);
      auto offset = view && view->size() == 3 ? as_int(g_, (*view)[1]) : std::nullopt;
      auto size = view && view->size() == 3 ? as_int(g_, (*view)[2]) : std::nullopt;
      if (!offset || !size || *offset < 0 || *size < 0) return;
      ref.view = {static_cast<std::uint64_t>(*offset), static_cast<std::uint64_t>(*size)};
    }
    ref_of_[id] = static_cast<std::int32_t>(out_.storage_refs.size());
    out_.storage_refs.push_back(std::move(ref));

    // A storage saved as a value (torch.save(storage), old rng states) reads as a 1-d tensor.
    const auto& r = out_.storage_refs.back();
    Tensor t;
    t.dtype = r.dtype.value_or(DType::uint8);
    std::uint64_t n = r.view ? r.view->second : r.declared_numel;
    t.shape = {static_cast<std::int64_t>(n)};
    t.stride = {1};
    t.storage = static_cast<std::size_t>(ref_of_[id]);
    if (!r.dtype && r.class_name != "UntypedStorage" && r.class_name != "TypedStorage") {
      t.broken = fmt::format("unknown storage class {}", quote(r.class_name));
    }
    add_tensor(id, std::move(t));
  }

  void add_tensor(NodeId id, Tensor t) {
    out_.tensor_of[id] = static_cast<std::int32_t>(out_.tensors.size());
    out_.tensors.push_back(std::move(t));
  }

  const Tensor* tensor_at(NodeId id) const {
    if (id == no_node || out_.tensor_of[id] < 0) return nullptr;
    return &out_.tensors[static_cast<std::size_t>(out_.tensor_of[id])];
  }

  NodeId arg(const std::vector<NodeId>& args, std::size_t i) const {
    return i < args.size() ? args[i] : no_node;
  }

  // The dense tensor of _rebuild_tensor(_v2/_v3), _rebuild_qtensor and legacy tensor classes.
  Tensor dense(NodeId storage, NodeId offset, NodeId size, NodeId stride,
               std::optional<DType> dtype_override) const {
    Tensor t;
    auto shape = as_int_tuple(g_, size);
    auto strides = as_int_tuple(g_, stride);
    auto off = as_int(g_, offset);
    if (shape) t.shape = *shape;
    if (strides) t.stride = *strides;
    if (off) t.storage_offset = *off;
    std::int32_t ref = storage == no_node ? -1 : ref_of_[storage];
    if (ref >= 0) {
      const auto& r = out_.storage_refs[static_cast<std::size_t>(ref)];
      t.storage = static_cast<std::size_t>(ref);
      t.dtype = dtype_override.value_or(r.dtype.value_or(DType::uint8));
      if (!r.dtype && !dtype_override && r.class_name != "UntypedStorage" &&
          r.class_name != "TypedStorage") {
        t.broken = fmt::format("unknown storage class {}", quote(r.class_name));
      }
    } else if (dtype_override) {
      t.dtype = *dtype_override;
    }
    if (!t.broken.empty()) return t;
    if (ref < 0) {
      t.broken = "its storage argument is not a storage reference";
    } else if (!shape || !strides || !off) {
      t.broken = "malformed size, stride or storage offset";
    } else if (shape->size() != strides->size()) {
      t.broken =
          fmt::format("size has {} dimensions but stride has {}", shape->size(), strides->size());
    } else if (shape->size() > max_dims_) {
      t.broken = fmt::format("{} dimensions (at most {})", shape->size(), max_dims_);
    } else if (*off < 0) {
      t.broken = fmt::format("negative storage offset {}", *off);
    } else {
      for (std::size_t i = 0; i < shape->size(); ++i) {
        if ((*shape)[i] < 0 || (*strides)[i] < 0) {
          t.broken = fmt::format("negative size or stride in dimension {}", i);
          break;
        }
      }
    }
    return t;
  }

  // The qparams of _rebuild_qtensor: (qscheme, scale, zero_point) for per-tensor schemes,
  // (qscheme, scales, zero_points, axis) for per-channel ones, scales and zero points being
  // tensors rebuilt before this call (or lists in old files, which are not tensors: refused).
  std::optional<Quantization> quantization(NodeId qparams) const {
    const auto* items = as_sequence(g_, qparams);
    const auto* scheme = items && !items->empty() ? as_global(g_, (*items)[0]) : nullptr;
    if (!scheme || scheme->module != "torch") return std::nullopt;
    Quantization q;
    q.scheme = scheme->name;
    if (items->size() == 3) {
      NodeId scale = (*items)[1];
      auto zero_point = as_int(g_, (*items)[2]);
      if (!zero_point) return std::nullopt;
      if (g_.kind(scale) == Kind::floating) {
        q.scale = g_.floating(scale);
      } else if (auto integral = as_int(g_, scale)) {
        q.scale = static_cast<double>(*integral);
      } else {
        return std::nullopt;
      }
      q.zero_point = *zero_point;
      return q;
    }
    if (items->size() == 4) {
      auto axis = as_int(g_, (*items)[3]);
      auto scales = tensor_index((*items)[1]);
      auto zero_points = tensor_index((*items)[2]);
      if (!axis || !scales || !zero_points) return std::nullopt;
      q.axis = *axis;
      q.scales = scales;
      q.zero_points = zero_points;
      return q;
    }
    return std::nullopt;
  }

  std::optional<std::size_t> tensor_index(NodeId id) const {
    if (id == no_node || out_.tensor_of[id] < 0) return std::nullopt;
    return static_cast<std::size_t>(out_.tensor_of[id]);
  }

  // A tensor that torch saved without bytes (meta device, wrapper subclasses).
  Tensor without_data(NodeId dtype, NodeId size, NodeId stride, std::string why) const {
    Tensor t;
    t.dtype = as_dtype(g_, dtype).value_or(DType::float32);
    t.shape = as_int_tuple(g_, size).value_or(std::vector<std::int64_t>{});
    t.stride = as_int_tuple(g_, stride).value_or(std::vector<std::int64_t>{});
    t.broken = std::move(why);
    return t;
  }

  void interpret_object(NodeId id) {
    const auto& obj = g_.object(id);
    const auto* callable = as_global(g_, obj.callable);
    if (!callable) return;
    static const std::vector<NodeId> no_args;
    const auto* args = as_sequence(g_, obj.args);
    interpret_call(id, *callable, args ? *args : no_args, obj.state);
  }

  void interpret_call(NodeId id, const pickle::Global& fn, const std::vector<NodeId>& a,
                      NodeId state) {
    const std::string& m = fn.module;
    const std::string& n = fn.name;
    if (m == "torch._utils") {
      if (n == "_rebuild_tensor_v2" || n == "_rebuild_tensor") {
        Tensor t = dense(arg(a, 0), arg(a, 1), arg(a, 2), arg(a, 3), std::nullopt);
        t.requires_grad = as_bool(g_, arg(a, 4)).value_or(false);
        add_tensor(id, std::move(t));
      } else if (n == "_rebuild_tensor_v3") {
        auto dtype = as_dtype(g_, arg(a, 6));
        Tensor t = dense(arg(a, 0), arg(a, 1), arg(a, 2), arg(a, 3), dtype);
        t.requires_grad = as_bool(g_, arg(a, 4)).value_or(false);
        if (!dtype && t.broken.empty()) t.broken = "_rebuild_tensor_v3 without a known dtype";
        add_tensor(id, std::move(t));
      } else if (n == "_rebuild_qtensor") {
        Tensor t = dense(arg(a, 0), arg(a, 1), arg(a, 2), arg(a, 3), std::nullopt);
        t.requires_grad = as_bool(g_, arg(a, 5)).value_or(false);
        t.quantization = quantization(arg(a, 4));
        if (!t.quantization && t.broken.empty()) {
          t.broken = "its quantization parameters are malformed";
        }
        add_tensor(id, std::move(t));
      } else if (n == "_rebuild_parameter" || n == "_rebuild_parameter_with_state") {
        if (const Tensor* inner = tensor_at(arg(a, 0))) {
          Tensor t = *inner;
          t.requires_grad = as_bool(g_, arg(a, 1)).value_or(true);
          add_tensor(id, std::move(t));
        }
      } else if (n == "_rebuild_device_tensor_from_cpu_tensor") {
        if (const Tensor* inner = tensor_at(arg(a, 0))) {
          Tensor t = *inner;
          t.requires_grad = as_bool(g_, arg(a, 3)).value_or(false);
          add_tensor(id, std::move(t));
        }
      } else if (n == "_rebuild_meta_tensor_no_storage") {
        Tensor t = without_data(arg(a, 0), arg(a, 1), arg(a, 2), "a meta tensor: no data saved");
        t.requires_grad = as_bool(g_, arg(a, 3)).value_or(false);
        add_tensor(id, std::move(t));
      } else if (n == "_rebuild_wrapper_subclass") {
        add_tensor(id, without_data(arg(a, 1), arg(a, 2), arg(a, 3),
                                    "a tensor subclass saved without data"));
      } else if (n == "_rebuild_sparse_tensor" || n == "_rebuild_sparse_csr_tensor") {
        add_sparse(id, arg(a, 0), arg(a, 1));
      } else if (n == "_rebuild_nested_tensor") {
        Composite c{{"buffer", arg(a, 0)},
                    {"sizes", arg(a, 1)},
                    {"strides", arg(a, 2)},
                    {"storage_offsets", arg(a, 3)}};
        // A call with fewer arguments has fewer parts (flatten indexes by every part).
        std::erase_if(c, [](const auto& part) { return part.second == no_node; });
        out_.composites[id] = std::move(c);
      }
      return;
    }
    if ((m == "torch._tensor" || m == "torch.tensor") &&
        (n == "_rebuild_from_type_v2" || n == "_rebuild_from_type")) {
      // A tensor subclass or a tensor with a __dict__: the tensor is func(*args).
      const auto* func = as_global(g_, arg(a, 0));
      const auto* inner_args = as_sequence(g_, arg(a, 2));
      // One level only: a func that is itself _rebuild_from_type* is not followed, so a hostile
      // chain of them cannot recurse.
      if (func && inner_args && !func->name.starts_with("_rebuild_from_type")) {
        interpret_call(id, *func, *inner_args, no_node);
      }
      return;
    }
    if (m == "torch.nn.parameter" && n == "Parameter") {
      if (const Tensor* inner = tensor_at(arg(a, 0))) {
        Tensor t = *inner;
        // Parameter(data, requires_grad); torch 0.1-0.3 pickles put (requires_grad, volatile,
        // hooks) in the BUILD state instead.
        auto rg = as_bool(g_, arg(a, 1));
        if (!rg) {
          const auto* st = as_sequence(g_, state);
          if (st && !st->empty()) rg = as_bool(g_, (*st)[0]);
        }
        t.requires_grad = rg.value_or(true);
        add_tensor(id, std::move(t));
      }
      return;
    }
    if ((m == "torch" || m == "torch.cuda") && state != no_node) {
      // torch <= 0.3: torch.FloatTensor() REDUCE, then BUILD (storage, offset, size, stride).
      auto dtype = dtype_from_tensor_class(n);
      const auto* st = as_sequence(g_, state);
      if (dtype && st && st->size() >= 4) {
        NodeId storage = (*st)[0];
        if (g_.kind(storage) == Kind::none) {
          Tensor t;
          t.dtype = *dtype;
          t.shape = {0};
          t.stride = {1};
          add_tensor(id, std::move(t));  // an empty tensor without a storage
        } else {
          add_tensor(id, dense(storage, (*st)[1], (*st)[2], (*st)[3], dtype));
        }
      }
    }
  }

  void add_sparse(NodeId id, NodeId layout, NodeId data) {
    const auto* parts = as_sequence(g_, data);
    if (!parts) return;
    std::string name;
    if (const auto* glob = as_global(g_, layout)) {
      name = glob->name;
    } else if (layout != no_node && g_.kind(layout) == Kind::object) {
      // torch.serialization._get_layout("torch.sparse_coo")
      const auto* largs = as_sequence(g_, g_.object(layout).args);
      if (largs && !largs->empty()) name = as_text(g_, (*largs)[0]).value_or("");
    }
    if (name.starts_with("torch.")) name = name.substr(6);
    Composite c;
    auto at = [&](std::size_t i) { return arg(*parts, i); };
    if (name == "sparse_coo") {
      c = {{"indices", at(0)}, {"values", at(1)}, {"size", at(2)}};
    } else if (name == "sparse_csr" || name == "sparse_bsr") {
      c = {{"crow_indices", at(0)}, {"col_indices", at(1)}, {"values", at(2)}, {"size", at(3)}};
    } else if (name == "sparse_csc" || name == "sparse_bsc") {
      c = {{"ccol_indices", at(0)}, {"row_indices", at(1)}, {"values", at(2)}, {"size", at(3)}};
    } else {
      return;
    }
    std::erase_if(c, [](const auto& part) { return part.second == no_node; });
    out_.composites[id] = std::move(c);
  }

  const Graph& g_;
  std::size_t max_dims_;
  Interpretation out_;
  std::vector<std::int32_t> ref_of_;  // per node: index into storage_refs, or -1
};

}  // namespace

Interpretation interpret(const pickle::Graph& graph, std::size_t max_dims) {
  return Interpreter(graph, max_dims).run();
}

}  // namespace ckptfs
