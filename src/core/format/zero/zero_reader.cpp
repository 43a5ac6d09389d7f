// SPDX-License-Identifier: MIT
// read_zero_directory() and read_zero_remote(): the files found, the model states and optimizer
// states read, and the state dict zero_to_fp32 would return made as entries: buffers converted,
// frozen parameters as saved or concatenated, trainable parameters assembled from the ranks'
// flat fp32 partitions, shared parameters as the tensors they share.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/hash.hpp>
#include <ckptfs/format/pickle/flatten.hpp>
#include <ckptfs/format/zero/zero_reader.hpp>
#include <ckptfs/model/assembly.hpp>
#include <ckptfs/source/location.hpp>

#include "zero_files.hpp"
#include "zero_states.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

namespace ckptfs {
namespace {

using namespace zero;

// a + b, or the largest uint64 when that overflows: counts of hostile sizes, compared after.
std::uint64_t add_saturated(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? ~std::uint64_t{0} : r;
}

// The state dict being made: keys in zero_to_fp32's order, a key assigned again keeping its
// place (a Python dict's), each an entry of a tensor of the model.
class StateDict {
 public:
  void set(const std::string& key, std::size_t tensor) {
    auto [it, fresh] = position_.try_emplace(key, entries_.size());
    if (fresh) {
      Entry e;
      e.key = key;
      e.kind = Entry::Kind::tensor;
      e.tensor = tensor;
      entries_.push_back(std::move(e));
    } else {
      entries_[it->second].tensor = tensor;
    }
  }
  std::optional<std::size_t> tensor_of(const std::string& key) const {
    auto it = position_.find(key);
    if (it == position_.end()) return std::nullopt;
    return entries_[it->second].tensor;
  }
  std::vector<Entry> take() { return std::move(entries_); }

 private:
  std::vector<Entry> entries_;
  TextMap<std::size_t> position_;
};

// A file read, a source of the model: its storages enter the model as tensors use them.
struct Loaded {
  std::uint32_t source = 0;
  const TorchFile* file = nullptr;
  std::vector<std::optional<std::size_t>> storage_in_model;  // per storage of the file
};

// The elements [start, start + count) of one rank's flat group tensor: where a piece is.
struct Range {
  const Loaded* loaded;
  std::size_t tensor;   // in the file's interpretation
  std::uint64_t start;  // first element, in the flat tensor
  std::uint64_t count;
};

class Reader {
 public:
  Reader(const Files& files, const ReadLimits& limits, const ZeroLimits& zero)
      : files_(files), limits_(limits), zero_(zero) {
    out_.model.format = Format::zero;
    out_.times = files.times();
    out_.permissions = files.permissions();
  }

  DirectoryModel read();

 private:
  // Reads a file of the tag directory (opened now unless `source` is given) as a source of the
  // model; errors name it.
  template <class Read>
  auto read_file(const std::string& name, Read read, std::unique_ptr<ByteSource> source = {}) {
    try {
      if (!source) source = files_.open(name);
      auto states = read(*source);
      add_source(name, std::move(source));
      return states;
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: {}", quote(files_.prefix() + name, 300), e.what()));
    }
  }
  std::uint32_t add_source(const std::string& name, std::unique_ptr<ByteSource> source) {
    out_.model.sources.push_back(files_.prefix() + name);
    out_.sources.push_back(std::move(source));
    return static_cast<std::uint32_t>(out_.sources.size() - 1);
  }
  Loaded loaded(const TorchFile& file) {
    return {static_cast<std::uint32_t>(out_.sources.size() - 1), &file,
            std::vector<std::optional<std::size_t>>(file.storages.size())};
  }

  std::vector<std::string> model_states_names(const ModelStates& first) const;
  void read_optimizer_states(const ModelStates& first);
  std::size_t storage(Loaded& f, std::size_t local);
  std::size_t add_tensor(Tensor t);
  std::size_t copy_tensor(Loaded& f, std::size_t local);
  std::size_t broken_tensor(DType dtype, std::vector<std::int64_t> shape, std::string why);
  void add_buffers(const ModelStates& first, Loaded& f);
  void add_frozen(const ModelStates& first, Loaded& f, bool stage3);
  void add_trainable_stage12(const ModelStates& first);
  void add_trainable_stage3(const ModelStates& first);
  std::string check_group_tensor(std::size_t rank, std::size_t group);
  std::size_t assembled(const NamedShape& p, DType dtype, const std::vector<Range>& ranges);
  void add_module(const ModelStates& first, Loaded& f);

  const Files& files_;
  const ReadLimits& limits_;
  const ZeroLimits& zero_;
  DirectoryModel out_;
  StateDict state_;
  std::uint64_t pieces_ = 0;

  std::vector<OptimStates> optim_;
  std::vector<Loaded> optim_loaded_;
  std::string optim_broken_;  // why the optimizer states give no fp32 weights; "" when they do
  std::int64_t world_size_ = 0;
  std::optional<std::int64_t> stage_;
};

std::size_t Reader::storage(Loaded& f, std::size_t local) {
  if (!f.storage_in_model[local]) {
    Storage s = f.file->storages[local];
    s.source = f.source;
    f.storage_in_model[local] = out_.model.storages.size();
    out_.model.storages.push_back(std::move(s));
  }
  return *f.storage_in_model[local];
}

std::size_t Reader::add_tensor(Tensor t) {
  out_.model.tensors.push_back(std::move(t));
  return out_.model.tensors.size() - 1;
}

// The run of `starts` (sorted starts of consecutive runs, then the end of the last) that holds
// element `at`: the last whose start is at most `at`, found in O(log runs), so that a parameter
// costs its pieces and not a walk over every rank or group. Empty runs before it are skipped.
std::size_t run_holding(const std::vector<std::uint64_t>& starts, std::uint64_t at) {
  const auto it = std::upper_bound(starts.begin(), starts.end(), at);
  return it == starts.begin() ? 0 : static_cast<std::size_t>(it - starts.begin()) - 1;
}

// A tensor of a file, its storage (and its quantization's tensors) made the model's.
std::size_t Reader::copy_tensor(Loaded& f, std::size_t local) {
  Tensor t = f.file->interpretation.tensors[local];
  if (t.storage) t.storage = storage(f, *t.storage);
  if (t.quantization) {
    Quantization& q = *t.quantization;
    if (q.scales) q.scales = copy_tensor(f, *q.scales);
    if (q.zero_points) q.zero_points = copy_tensor(f, *q.zero_points);
  }
  return add_tensor(std::move(t));
}

std::size_t Reader::broken_tensor(DType dtype, std::vector<std::int64_t> shape, std::string why) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.stride.assign(t.shape.size(), 1);
  t.broken = std::move(why);
  return add_tensor(std::move(t));
}

// zero_to_fp32's buffers: {k: v.float() for k, v in module.items() if k in buffer_names}.
void Reader::add_buffers(const ModelStates& first, Loaded& f) {
  TextMap<bool> is_buffer;
  for (const std::string& name : first.buffer_names) is_buffer.emplace(name, true);
  for (const NamedTensor& b : first.module) {
    if (!is_buffer.contains(b.name)) continue;
    if (!b.tensor) {
      state_.set(b.name, broken_tensor(DType::float32, {}, "the buffer is not a tensor"));
      continue;
    }
    const std::size_t index = copy_tensor(f, *b.tensor);
    Tensor& t = out_.model.tensors[index];
    if (t.dtype != DType::float32 && t.broken.empty()) {
      if (t.quantization || !stored_convertible(t.dtype, DType::float32)) {
        t.broken = fmt::format(
            "a buffer of {}, which zero_to_fp32 gives as float32 (.float()): ckptfs converts "
            "floating-point, integer and bool buffers only",
            info(t.dtype).name);
      } else {
        t.stored_dtype = t.dtype;
      }
    }
    t.dtype = DType::float32;
    t.quantization.reset();
    state_.set(b.name, index);
  }
}

// zero_to_fp32's frozen parameters: stage 1/2 the first file's fragment as saved; stage 3 the
// ranks' fragments concatenated, cut to the shape's elements and viewed as the shape.
void Reader::add_frozen(const ModelStates& first, Loaded& f, bool stage3) {
  if (!first.frozen_param_shapes || first.frozen_param_shapes->empty()) return;
  if (!stage3) {
    TextMap<std::size_t> fragment;
    if (first.frozen_param_fragments) {
      for (std::size_t i = 0; i < first.frozen_param_fragments->size(); ++i) {
        fragment.emplace((*first.frozen_param_fragments)[i].name, i);
      }
    }
    for (const NamedShape& p : *first.frozen_param_shapes) {
      auto it = fragment.find(p.name);
      if (it == fragment.end() || !(*first.frozen_param_fragments)[it->second].tensor) {
        state_.set(p.name, broken_tensor(DType::float32, p.shape,
                                         "frozen_param_fragments holds no tensor of it"));
        continue;
      }
      state_.set(p.name, copy_tensor(f, *(*first.frozen_param_fragments)[it->second].tensor));
    }
    return;
  }

  // Stage 3: every rank's model states file holds its fragment of each frozen parameter.
  const std::vector<std::string> names = model_states_names(first);
  std::vector<ModelStates> others;
  std::vector<Loaded> others_loaded;
  std::string failed;
  others.reserve(names.size());
  others_loaded.reserve(names.size());
  for (std::size_t r = 1; r < names.size() && failed.empty(); ++r) {
    try {
      others.push_back(read_file(
          names[r], [&](const ByteSource& s) { return read_model_states(s, limits_, zero_); }));
      others_loaded.push_back(loaded(others.back().file));
    } catch (const Error& e) {
      failed = fmt::format("the model states of rank {}: {}", r, e.what());
    }
  }
  struct RankFragments {
    Loaded* loaded;
    TextMap<std::optional<std::size_t>> by_name;
  };
  std::vector<RankFragments> ranks;
  auto add_rank = [&](const ModelStates& m, Loaded& l) {
    RankFragments r{&l, {}};
    if (m.frozen_param_fragments) {
      for (const NamedTensor& t : *m.frozen_param_fragments) r.by_name[t.name] = t.tensor;
    }
    ranks.push_back(std::move(r));
  };
  add_rank(first, f);
  for (std::size_t r = 0; r < others.size(); ++r) add_rank(others[r], others_loaded[r]);

  for (const NamedShape& p : *first.frozen_param_shapes) {
    if (!failed.empty()) {
      state_.set(p.name, broken_tensor(DType::float32, p.shape, failed));
      continue;
    }
    std::vector<Range> pieces;
    std::optional<DType> dtype;
    std::string why;
    std::uint64_t at = 0;
    for (std::size_t r = 0; r < ranks.size() && why.empty(); ++r) {
      auto it = ranks[r].by_name.find(p.name);
      if (it == ranks[r].by_name.end() || !it->second) {
        why = fmt::format("rank {}'s frozen_param_fragments holds no tensor of it", r);
        break;
      }
      const Tensor& t = ranks[r].loaded->file->interpretation.tensors[*it->second];
      if (!t.broken.empty()) {
        why = fmt::format("rank {}'s fragment: {}", r, t.broken);
      } else if (t.shape.size() != 1) {
        why = fmt::format("rank {}'s fragment is not flat (one dimension)", r);
      } else if (dtype && *dtype != t.dtype) {
        why = fmt::format("its fragments are of {} and {}", info(*dtype).name, info(t.dtype).name);
      } else if (t.quantization || !t.storage) {
        why = fmt::format("rank {}'s fragment is quantized or has no data", r);
      }
      dtype = t.dtype;
      const auto n = static_cast<std::uint64_t>(t.shape.empty() ? 0 : t.shape[0]);
      if (why.empty() && at < p.numel && n != 0) {
        pieces.push_back({ranks[r].loaded, *it->second, 0, std::min(n, p.numel - at)});
      }
      at += n;
    }
    if (why.empty() && at < p.numel) {
      why = fmt::format("its fragments hold {} elements, its shape {}", at, p.numel);
    }
    if (!why.empty()) {
      state_.set(p.name, broken_tensor(dtype.value_or(DType::float32), p.shape, why));
      continue;
    }
    state_.set(p.name, assembled(p, *dtype, pieces));
  }
}

// A tensor of `p`'s shape assembled from `ranges`, each the next elements of it in C order.
std::size_t Reader::assembled(const NamedShape& p, DType dtype, const std::vector<Range>& ranges) {
  Tensor t;
  t.dtype = dtype;
  t.shape = p.shape;
  t.stride.assign(p.shape.size(), 1);
  for (std::size_t d = p.shape.size(); d-- > 1;) {
    // 0 past int64: an empty shape's (shape_of() bounds the elements, not the strides).
    if (__builtin_mul_overflow(t.stride[d], p.shape[d], &t.stride[d - 1])) t.stride[d - 1] = 0;
  }
  pieces_ += ranges.size();
  if (pieces_ > zero_.max_pieces) {
    throw Error(ExitCode::unsupported,
                fmt::format("more than {} pieces of parameters in all", zero_.max_pieces));
  }
  Assembly a(Assembly::Grid::flat, 1);
  std::int64_t at = 0;
  bool overflow = false;
  for (const Range& r : ranges) {
    // const: storage() only fills the file's table of storages in the model.
    Loaded& l = const_cast<Loaded&>(*r.loaded);
    const Tensor& flat = l.file->interpretation.tensors[r.tensor];
    const std::int64_t stride = flat.stride.empty() ? 1 : flat.stride[0];
    std::int64_t skip = 0, first = 0;
    overflow = overflow ||
               __builtin_mul_overflow(static_cast<std::int64_t>(r.start), stride, &skip) ||
               __builtin_add_overflow(flat.storage_offset, skip, &first);
    const Piece piece{storage(l, *flat.storage), first};
    const std::int64_t offset[1] = {at};
    const std::int64_t length[1] = {static_cast<std::int64_t>(r.count)};
    const std::int64_t strides[1] = {stride};
    a.add(piece, offset, length, strides);
    at += static_cast<std::int64_t>(r.count);
  }
  out_.model.assemblies.push_back(std::move(a));
  t.assembly = out_.model.assemblies.size() - 1;
  const std::size_t index = add_tensor(std::move(t));
  Tensor& added = out_.model.tensors[index];
  added.broken = overflow
                     ? "a piece's view overflows"
                     : index_assembly(out_.model, added, out_.model.assemblies[*added.assembly]);
  return index;
}

// Why rank `rank`'s flat group `group` cannot be read ("" when it can): not a tensor, broken,
// not one dimension, quantized.
std::string Reader::check_group_tensor(std::size_t rank, std::size_t group) {
  const auto& index = optim_[rank].groups[group];
  if (!index) return fmt::format("rank {}'s flat group {} is not a tensor", rank, group);
  const Tensor& t = optim_[rank].file.interpretation.tensors[*index];
  if (!t.broken.empty()) return fmt::format("rank {}'s flat group {}: {}", rank, group, t.broken);
  if (t.shape.size() != 1 || t.stride.size() != 1) {
    return fmt::format("rank {}'s flat group {} is not flat (one dimension)", rank, group);
  }
  if (t.quantization) return fmt::format("rank {}'s flat group {} is quantized", rank, group);
  if (!t.storage) return fmt::format("rank {}'s flat group {} has no data", rank, group);
  return {};
}

// Stage 1/2: group by group, the ranks' partitions concatenated, each parameter the next
// elements of it; the groups' element counts checked as zero_to_fp32 checks them.
void Reader::add_trainable_stage12(const ModelStates& first) {
  const std::size_t groups = first.param_shapes.size();
  std::string all_broken = optim_broken_;
  if (all_broken.empty() && optim_[0].groups.size() != groups) {
    all_broken = fmt::format("param_shapes has {} groups, the optimizer states {}", groups,
                             optim_[0].groups.size());
  }
  for (std::size_t r = 1; all_broken.empty() && r < optim_.size(); ++r) {
    if (optim_[r].groups.size() != optim_[0].groups.size()) {
      all_broken = fmt::format("rank {}'s optimizer states have {} groups, rank 0's {}", r,
                               optim_[r].groups.size(), optim_[0].groups.size());
    }
  }
  // zero_to_fp32 aligns both counts to 2 × the world size before comparing them.
  const auto align_to = static_cast<std::uint64_t>(2 * std::max<std::int64_t>(world_size_, 1));
  auto aligned = [&](std::uint64_t n) {
    return n / align_to * align_to + (n % align_to ? align_to : 0);
  };
  for (std::size_t g = 0; g < groups; ++g) {
    const std::vector<NamedShape>& params = first.param_shapes[g];
    std::string broken = all_broken;
    std::optional<DType> dtype;
    std::vector<std::uint64_t> rank_start{0};  // where each rank's partition starts, and the end
    for (std::size_t r = 0; broken.empty() && r < optim_.size(); ++r) {
      broken = check_group_tensor(r, g);
      if (!broken.empty()) break;
      const Tensor& t = optim_[r].file.interpretation.tensors[*optim_[r].groups[g]];
      if (dtype && *dtype != t.dtype) {
        broken = fmt::format("group {}'s partitions are of {} and {}", g, info(*dtype).name,
                             info(t.dtype).name);
      }
      dtype = t.dtype;
      rank_start.push_back(
          add_saturated(rank_start.back(), static_cast<std::uint64_t>(t.shape[0])));
    }
    const std::uint64_t available = rank_start.back();
    std::uint64_t consumed = 0;
    for (const NamedShape& p : params) consumed = add_saturated(consumed, p.numel);
    if (broken.empty() && aligned(consumed) != aligned(available)) {
      broken = fmt::format(
          "group {}'s param_shapes account for {} elements, its partitions hold {} (zero_to_fp32: "
          "\"consumed {} numels out of {} - something is wrong\")",
          g, consumed, available, aligned(consumed), aligned(available));
    }
    std::uint64_t offset = 0;
    for (const NamedShape& p : params) {
      const std::uint64_t begin = offset;
      offset = add_saturated(offset, p.numel);
      if (!broken.empty()) {
        state_.set(p.name, broken_tensor(dtype.value_or(DType::float32), p.shape, broken));
        continue;
      }
      if (offset > available) {
        state_.set(p.name,
                   broken_tensor(*dtype, p.shape,
                                 fmt::format("param_shapes places it at elements [{}, {}) of group "
                                             "{}, whose partitions hold {}",
                                             begin, offset, g, available)));
        continue;
      }
      std::vector<Range> ranges;
      for (std::size_t r = run_holding(rank_start, begin);
           r + 1 < rank_start.size() && rank_start[r] < offset; ++r) {
        const std::uint64_t from = std::max(begin, rank_start[r]);
        const std::uint64_t to = std::min(offset, rank_start[r + 1]);
        if (from < to) {
          ranges.push_back(
              {&optim_loaded_[r], *optim_[r].groups[g], from - rank_start[r], to - from});
        }
      }
      state_.set(p.name, assembled(p, *dtype, ranges));
    }
  }
}

// Stage 3: the parameters of all groups in one order; each its ceil(numel / world size)
// elements in every rank's groups taken as one flat run, the last rank's padding left out.
void Reader::add_trainable_stage3(const ModelStates& first) {
  // param_shapes merged into one dict: a name given again keeps its place, takes its shape.
  std::vector<const NamedShape*> params;
  {
    TextMap<std::size_t> position;
    for (const auto& group : first.param_shapes) {
      for (const NamedShape& p : group) {
        auto [it, fresh] = position.try_emplace(p.name, params.size());
        if (fresh) {
          params.push_back(&p);
        } else {
          params[it->second] = &p;
        }
      }
    }
  }
  const auto ws = static_cast<std::uint64_t>(std::max<std::int64_t>(world_size_, 1));
  std::string broken = optim_broken_;
  std::optional<DType> dtype;
  // Each group's elements (every rank's the same) and where it starts in a rank's run.
  std::vector<std::uint64_t> group_start{0};
  if (broken.empty()) {
    const std::size_t groups = optim_[0].groups.size();
    for (std::size_t r = 0; broken.empty() && r < optim_.size(); ++r) {
      if (optim_[r].groups.size() != groups) {
        broken = fmt::format("rank {}'s optimizer states have {} groups, rank 0's {}", r,
                             optim_[r].groups.size(), groups);
        break;
      }
      for (std::size_t g = 0; g < groups && broken.empty(); ++g) {
        broken = check_group_tensor(r, g);
        if (!broken.empty()) break;
        const Tensor& t = optim_[r].file.interpretation.tensors[*optim_[r].groups[g]];
        const auto n = static_cast<std::uint64_t>(t.shape[0]);
        if (dtype && *dtype != t.dtype) {
          broken = fmt::format("the flat groups are of {} and {}", info(*dtype).name,
                               info(t.dtype).name);
        }
        dtype = t.dtype;
        if (r == 0) {
          group_start.push_back(add_saturated(group_start.back(), n));
        } else if (n != group_start[g + 1] - group_start[g]) {
          broken = fmt::format("rank {}'s flat group {} holds {} elements, rank 0's {}", r, g, n,
                               group_start[g + 1] - group_start[g]);
        }
      }
    }
  }
  std::uint64_t consumed = 0;
  for (const NamedShape* p : params) {
    consumed = add_saturated(consumed, p->numel / ws + (p->numel % ws ? 1 : 0));
  }
  if (broken.empty() && consumed != group_start.back()) {
    broken = fmt::format(
        "param_shapes account for {} elements of each rank, its flat groups hold {} "
        "(zero_to_fp32: \"consumed {} numels out of {} - something is wrong\")",
        consumed, group_start.back(), consumed * ws, group_start.back() * ws);
  }
  std::uint64_t offset = 0;  // of the parameter's partition in each rank's run
  for (const NamedShape* p : params) {
    const std::uint64_t partition = p->numel / ws + (p->numel % ws ? 1 : 0);
    if (!broken.empty()) {
      state_.set(p->name, broken_tensor(dtype.value_or(DType::float32), p->shape, broken));
      continue;
    }
    std::vector<Range> ranges;
    for (std::uint64_t r = 0; r < ws && r * partition < p->numel; ++r) {
      // Elements [r × partition, ...) of the parameter: [offset, offset + count) of the run.
      const std::uint64_t count = std::min(partition, p->numel - r * partition);
      const std::uint64_t begin = offset, end = offset + count;
      for (std::size_t g = run_holding(group_start, begin);
           g + 1 < group_start.size() && group_start[g] < end; ++g) {
        const std::uint64_t from = std::max(begin, group_start[g]);
        const std::uint64_t to = std::min(end, group_start[g + 1]);
        if (from < to) {
          ranges.push_back(
              {&optim_loaded_[r], *optim_[r].groups[g], from - group_start[g], to - from});
        }
      }
    }
    state_.set(p->name, assembled(*p, *dtype, ranges));
    offset += partition;
  }
}

// Stage 1/2: the first model states file's module, each entry under "module.".
void Reader::add_module(const ModelStates& first, Loaded& f) {
  if (first.module_key_node == pickle::no_node) return;
  WalkPlan plan;
  plan.children[first.file.graph.root()] = {{first.module_key_node, first.module_node}};
  FlattenOptions options;
  options.plan = &plan;
  std::vector<Entry> entries =
      flatten(first.file.graph, first.file.interpretation, limits_, options).entries;
  std::unordered_map<std::size_t, std::size_t> copied;  // the file's tensor -> the model's
  for (Entry& e : entries) {
    if (e.kind == Entry::Kind::tensor) {
      auto it = copied.find(e.tensor);
      if (it == copied.end()) it = copied.emplace(e.tensor, copy_tensor(f, e.tensor)).first;
      e.tensor = it->second;
    }
    // Flat keys of the consolidated state dict (an OrderedDict), as the fp32 weights' are.
    e.key_path.clear();
    e.containers.clear();
    out_.model.entries.push_back(std::move(e));
  }
}

// Every model states file (stage 3: one per rank), the first one included: listed, or by
// DeepSpeed's names for each rank of dp_world_size.
std::vector<std::string> Reader::model_states_names(const ModelStates& first) const {
  if (!files_.is_remote()) return files_.listed_model_states();
  std::vector<std::string> names;
  const std::int64_t ranks = first.dp_world_size.value_or(1);
  for (std::int64_t r = 0; r < ranks && static_cast<std::uint64_t>(r) < zero_.max_ranks; ++r) {
    names.push_back(fmt::format("zero_pp_rank_{}_mp_rank_00_model_states.pt", r));
  }
  return names;
}

// The optimizer states files, each rank's: optim_ and optim_loaded_, or optim_broken_ saying
// why they give no fp32 weights.
void Reader::read_optimizer_states(const ModelStates& first) {
  std::vector<std::string> names;
  std::unique_ptr<ByteSource> rank0;  // remote: opened to find its name
  if (!files_.is_remote()) {
    names = files_.listed_optim_states();
  } else {
    // No listing: DeepSpeed's names for each rank of dp_world_size, bf16_ first when ds_config
    // enables bf16 (as DeepSpeed names them), the other spelling when those are not there.
    if (!first.dp_world_size || *first.dp_world_size <= 0 ||
        static_cast<std::uint64_t>(*first.dp_world_size) > zero_.max_ranks) {
      optim_broken_ =
          "its model states say no dp_world_size: the optimizer states files of a "
          "URL are found by rank";
      return;
    }
    const std::string bf16 = "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt";
    const std::string plain = "zero_pp_rank_0_mp_rank_00_optim_states.pt";
    std::string why;
    auto found =
        files_.open_first(first.bf16 ? std::vector{bf16, plain} : std::vector{plain, bf16}, why);
    if (!found) {
      optim_broken_ = fmt::format(
          "the fp32 weights are in the optimizer states, which are not there ({}): zero_to_fp32 "
          "needs them too",
          why);
      return;
    }
    rank0 = std::move(found->source);
    const std::string found_prefix = found->name == bf16 ? "bf16_" : "";
    for (std::int64_t r = 0; r < *first.dp_world_size; ++r) {
      names.push_back(fmt::format("{}zero_pp_rank_{}_mp_rank_00_optim_states.pt", found_prefix, r));
    }
  }
  if (names.empty()) {
    optim_broken_ = fmt::format(
        "no *_optim_states.pt in {}: the fp32 weights are in the optimizer states, which this "
        "checkpoint lacks (only its model states are here); zero_to_fp32 needs them too",
        files_.prefix().empty() ? std::string("the checkpoint directory")
                                : quote(files_.prefix().substr(0, files_.prefix().size() - 1)));
    return;
  }
  if (names.size() > zero_.max_ranks) {
    throw Error(ExitCode::unsupported, fmt::format("{} optimizer states files, more than {}",
                                                   names.size(), zero_.max_ranks));
  }
  optim_.reserve(names.size());
  optim_loaded_.reserve(names.size());
  for (std::size_t r = 0; r < names.size(); ++r) {
    try {
      optim_.push_back(read_file(
          names[r], [&](const ByteSource& s) { return read_optim_states(s, limits_, zero_); },
          std::move(rank0)));
    } catch (const Error& e) {
      if (files_.is_remote() && e.code() != ExitCode::io && e.code() != ExitCode::bad_checkpoint &&
          e.code() != ExitCode::bad_zip && e.code() != ExitCode::unsupported) {
        throw;  // a server that refuses or does not answer: not a damaged checkpoint
      }
      optim_broken_ = fmt::format("the optimizer states of rank {}: {}", r, e.what());
      break;
    }
    optim_loaded_.push_back(loaded(optim_.back().file));
  }
  if (!optim_broken_.empty()) return;
  stage_ = optim_[0].zero_stage;
  if (!stage_) {
    optim_broken_ = fmt::format(
        "{}'s optimizer_state_dict has no zero_stage: not a ZeRO optimizer's (zero_to_fp32 "
        "refuses it too)",
        quote(names[0]));
    return;
  }
  if (*stage_ < 0 || *stage_ > 3) {
    optim_broken_ = fmt::format("unknown ZeRO stage {}", *stage_);
    return;
  }
  world_size_ = optim_[0].partition_count.value_or(0);
  if (world_size_ != static_cast<std::int64_t>(optim_.size())) {
    optim_broken_ = fmt::format(
        "expected {} *_optim_states.pt files (rank 0's partition_count) but found {}: ranks "
        "are missing, or an older checkpoint's files are mixed in",
        world_size_, optim_.size());
  }
}

DirectoryModel Reader::read() {
  // The first model states file: zero_to_fp32 takes everything but the flat groups from it.
  std::vector<std::string> names;
  std::unique_ptr<ByteSource> opened;
  if (files_.is_remote()) {
    // Stage 1/2 saves mp_rank_00_model_states.pt, stage 3 one per rank.
    std::string why;
    auto found = files_.open_first(
        {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"}, why);
    if (!found && files_.prefix().empty()) {
      throw Error(ExitCode::io,
                  fmt::format("no DeepSpeed model states ({}): not a DeepSpeed checkpoint "
                              "directory",
                              why));
    }
    if (!found) {
      throw Error(ExitCode::io,
                  fmt::format("latest names the tag {}, in which no DeepSpeed model states "
                              "were found ({}): not a DeepSpeed checkpoint directory",
                              quote(files_.prefix().substr(0, files_.prefix().size() - 1)), why));
    }
    names.push_back(found->name);
    opened = std::move(found->source);
  } else {
    names = files_.listed_model_states();
  }
  const bool stage3_names = names[0].starts_with("zero_pp_rank_");
  ModelStates first = read_file(
      names[0], [&](const ByteSource& s) { return read_model_states(s, limits_, zero_); },
      std::move(opened));
  Loaded first_loaded = loaded(first.file);

  read_optimizer_states(first);
  // Without the optimizer states, the stage the files are named for.
  const bool stage3 = stage_ ? *stage_ == 3 : stage3_names;

  add_buffers(first, first_loaded);
  add_frozen(first, first_loaded, stage3);
  if (stage3) {
    add_trainable_stage3(first);
  } else {
    add_trainable_stage12(first);
  }
  // Shared parameters: the alias is the tensor of the name it shares, when that is a key.
  for (const auto& [alias, name] : first.shared_params) {
    if (auto tensor = state_.tensor_of(name)) state_.set(alias, *tensor);
  }
  out_.model.entries = state_.take();
  if (!stage3) add_module(first, first_loaded);
  return std::move(out_);
}

}  // namespace

bool looks_like_zero_directory(const std::string& directory) {
  try {
    (void)Files::local(directory, ZeroLimits{});
    return true;
  } catch (const Error&) {
    return false;
  }
}

DirectoryModel read_zero_directory(const std::string& directory, const ReadLimits& limits,
                                   const ZeroLimits& zero) {
  const Files files = Files::local(directory, zero);
  return Reader(files, limits, zero).read();
}

bool looks_like_zero_location(const std::string& location) {
  auto url = parse_url(location);
  return url && (url->path.ends_with('/') || url->path.ends_with("/latest"));
}

DirectoryModel read_zero_remote(const std::string& location, const ZeroOpener& open,
                                const ReadLimits& limits, const ZeroLimits& zero) {
  const Files files = Files::remote(location, open, zero);
  return Reader(files, limits, zero).read();
}

}  // namespace ckptfs
