// SPDX-License-Identifier: MIT
// Unit tests of the DeepSpeed ZeRO reader: checkpoints of stages 1, 2 and 3 written here in
// DeepSpeed's layout by the torch writers (format/torch/torch_writer.hpp) — flat groups padded
// to 2 x world size and partitioned (stage 1/2), parameters partitioned with padding (stage 3),
// buffers in bfloat16 and int64, a frozen parameter, a tied one — each key's served bytes
// compared with the weights the files were made from; the padding holds a sentinel no
// parameter may show. Then what may not be: missing optimizer states, missing ranks, short
// partitions, files of other kinds, `latest` naming what it may not, sizes that overflow, a
// link leading out. The real layout and zero_to_fp32's own output: tests/interop
// (test_interop_zero).
#include "support/temp_dir.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/open_model.hpp>
#include <ckptfs/format/torch/torch_writer.hpp>
#include <ckptfs/format/zero/zero_reader.hpp>
#include <ckptfs/view/served.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace ckptfs;
using ckptfs::test::TempDir;

namespace {

using Dims = std::vector<std::int64_t>;

// ---- Python objects as DeepSpeed's files hold them, written by the torch writers ----

struct TensorDef {
  DType dtype = DType::float32;
  std::size_t storage = 0;  // index into PyFile::storages
  std::int64_t offset = 0;
  Dims shape;
};

struct Py {
  enum class Kind {
    none,
    boolean,
    integer,
    str,
    list,
    dict,
    ordered_dict,
    tensor,
    size,
    stage,
    object
  };
  Kind kind = Kind::none;
  std::int64_t number = 0;
  std::string text;  // str; an object's class
  std::vector<Py> items;
  std::vector<std::pair<std::string, Py>> entries;
  Dims dims;

  static Py of(Kind kind) {
    Py p;
    p.kind = kind;
    return p;
  }
  static Py none() { return {}; }
  static Py boolean(bool b) { return num_of(Kind::boolean, b ? 1 : 0); }
  static Py num(std::int64_t n) {
    Py p = of(Kind::integer);
    p.number = n;
    return p;
  }
  static Py str(std::string s) {
    Py p = of(Kind::str);
    p.text = std::move(s);
    return p;
  }
  static Py list(std::vector<Py> items) {
    Py p = of(Kind::list);
    p.items = std::move(items);
    return p;
  }
  static Py dict(std::vector<std::pair<std::string, Py>> e, Kind kind = Kind::dict) {
    Py p = of(kind);
    p.entries = std::move(e);
    return p;
  }
  static Py odict(std::vector<std::pair<std::string, Py>> e) {
    return dict(std::move(e), Kind::ordered_dict);
  }
  static Py tensor(std::size_t index) {
    return num_of(Kind::tensor, static_cast<std::int64_t>(index));
  }
  static Py size(Dims d) {
    Py p = of(Kind::size);
    p.dims = std::move(d);
    return p;
  }
  static Py stage(std::int64_t s) { return num_of(Kind::stage, s); }
  // An instance of a class (a loss scaler) with a dict of state: NEWOBJ, BUILD.
  static Py object(std::string cls) {
    Py p = of(Kind::object);
    p.text = std::move(cls);
    return p;
  }
  static Py num_of(Kind kind, std::int64_t n) {
    Py p = of(kind);
    p.number = n;
    return p;
  }
};

class PyFile {
 public:
  std::size_t storage(std::string bytes) {
    storages_.push_back(std::move(bytes));
    return storages_.size() - 1;
  }
  std::size_t tensor(TensorDef t) {
    tensors_.push_back(std::move(t));
    return tensors_.size() - 1;
  }
  // A tensor of its own storage.
  std::size_t tensor(DType dtype, Dims shape, std::string bytes) {
    return tensor({dtype, storage(std::move(bytes)), 0, std::move(shape)});
  }

  std::string bytes(const Py& root, const std::string& prefix) {
    pickle::Writer w;
    TorchPickler torch(w);
    write(w, torch, root);
    TorchArchive a(std::move(w).finish(), torch.storages(), {.prefix = prefix});
    std::string out;
    a.write([&](std::string_view b) { out += b; },
            [&](std::size_t i, ZipStreamWriter& z) { z.write(storages_[a.storages()[i].id]); });
    return out;
  }

 private:
  void write(pickle::Writer& w, TorchPickler& torch, const Py& v) {
    using K = Py::Kind;
    auto entries = [&](std::size_t i) {
      w.string(v.entries[i].first);
      write(w, torch, v.entries[i].second);
    };
    switch (v.kind) {
      case K::none:
        return w.none();
      case K::boolean:
        return w.boolean(v.number != 0);
      case K::integer:
        return w.integer(v.number);
      case K::str:
        (void)w.string(v.text);
        return;
      case K::list:
        (void)w.list(v.items.size(), [&](std::size_t i) { write(w, torch, v.items[i]); });
        return;
      case K::dict:
        (void)w.dict(v.entries.size(), entries);
        return;
      case K::ordered_dict:
        (void)w.ordered_dict(v.entries.size(), entries);
        return;
      case K::tensor: {
        const TensorDef& t = tensors_[static_cast<std::size_t>(v.number)];
        (void)torch.tensor(
            {t.dtype, t.storage, storages_[t.storage].size(), t.offset, t.shape, {}, false});
        return;
      }
      case K::size:
        (void)w.torch_size(v.dims);
        return;
      case K::stage:  // ZeroStageEnum(stage), as an IntEnum pickles
        (void)w.global("deepspeed.runtime.zero.config", "ZeroStageEnum");
        (void)w.tuple(1, [&](std::size_t) { w.integer(v.number); });
        w.reduce();
        (void)w.put();
        return;
      case K::object:
        (void)w.global("deepspeed.runtime.fp16.loss_scaler", v.text);
        (void)w.tuple(1, [&](std::size_t) { w.integer(1); });
        w.reduce();
        (void)w.dict(1, [&](std::size_t) {
          w.string("cur_scale");
          w.floating(1.0);
        });
        w.build();
        return;
    }
  }

  std::vector<std::string> storages_;
  std::vector<TensorDef> tensors_;
};

// ---- A model and its ZeRO checkpoint ----

// The padding of flat groups and partitions: a value no parameter holds, seen if read.
constexpr float padding = -12345.0f;

std::string floats(const std::vector<float>& v) {
  std::string out(v.size() * 4, '\0');
  if (!v.empty())
    std::memcpy(out.data(), v.data(), out.size());  // an empty vector's data() may be null
  return out;
}

// bfloat16 of small integers (exact): the float's top half.
std::string bf16(const std::vector<float>& v) {
  std::string out;
  for (float f : v) {
    const auto bits = std::bit_cast<std::uint32_t>(f);
    out.push_back(static_cast<char>((bits >> 16) & 0xff));
    out.push_back(static_cast<char>(bits >> 24));
  }
  return out;
}

struct Param {
  std::string name;
  Dims shape;
  int group = 0;
  bool frozen = false;
  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
};

// Parameter p's element i: p × 100 + i + 1 (exact in float32; its bfloat16 is the float's top
// half, whatever it rounds to).
std::vector<float> values_of(std::size_t p, std::uint64_t n) {
  std::vector<float> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>(p * 100 + i + 1);
  return v;
}

struct Layout {
  int stage = 2;
  int world_size = 2;
  std::vector<Param> params = {{"embed.weight", {3, 5}, 0}, {"layer.weight", {4, 3}, 0},
                               {"layer.bias", {4}, 1},      {"frozen.weight", {2, 3}, 0, true},
                               {"proj.weight", {7}, 1},     {"norm.weight", {1}, 1}};
  std::vector<std::pair<std::string, std::string>> shared = {{"head.weight", "embed.weight"}};
  bool optimizer_states = true;
  int ranks_written = -1;     // optimizer states files written: -1 every rank
  std::int64_t short_by = 0;  // the last rank's first group saved this many elements short
  std::string optim_prefix = "bf16_";
};

// Writes `layout`'s checkpoint below `dir` (latest, global_step3/...); returns what each key of
// the mount must serve: its dtype and bytes, in zero_to_fp32's order.
std::vector<std::tuple<std::string, DType, std::string>> write_zero(const TempDir& dir,
                                                                    const Layout& l) {
  const auto ws = static_cast<std::uint64_t>(l.world_size);
  std::vector<std::tuple<std::string, DType, std::string>> expected;
  const std::vector<float> running_mean = {1.5f, -2.0f, 3.25f};

  // The module: bf16 weights (stage 3: empty placeholders) and buffers.
  auto model_states = [&](PyFile& f, std::size_t rank) {
    std::vector<std::pair<std::string, Py>> module;
    for (std::size_t p = 0; p < l.params.size(); ++p) {
      const Param& param = l.params[p];
      module.emplace_back(param.name,
                          Py::tensor(l.stage == 3 ? f.tensor(DType::bfloat16, {0}, "")
                                                  : f.tensor(DType::bfloat16, param.shape,
                                                             bf16(values_of(p, param.numel())))));
    }
    module.emplace_back("norm.running_mean",
                        Py::tensor(f.tensor(DType::bfloat16, {3}, bf16(running_mean))));
    std::string count(8, '\0');
    count[0] = 7;  // 7 batches
    module.emplace_back("norm.count", Py::tensor(f.tensor(DType::int64, {}, count)));
    std::vector<Py> shapes_per_group;
    int groups = 0;
    for (const Param& p : l.params) groups = std::max(groups, p.group + 1);
    for (int g = 0; g < groups; ++g) {
      std::vector<std::pair<std::string, Py>> shapes;
      for (const Param& p : l.params) {
        if (p.group == g && !p.frozen) shapes.emplace_back(p.name, Py::size(p.shape));
      }
      shapes_per_group.push_back(Py::odict(std::move(shapes)));
    }
    std::vector<std::pair<std::string, Py>> frozen_shapes, fragments;
    for (std::size_t p = 0; p < l.params.size(); ++p) {
      const Param& param = l.params[p];
      if (!param.frozen) continue;
      frozen_shapes.emplace_back(param.name, Py::size(param.shape));
      std::vector<float> v = values_of(p, param.numel());
      if (l.stage == 3) {  // this rank's ds_tensor: ceil(numel / ws) elements, padded
        const std::uint64_t part = (param.numel() + ws - 1) / ws;
        std::vector<float> mine(part, padding);
        for (std::uint64_t i = 0; i < part && rank * part + i < v.size(); ++i) {
          mine[i] = v[rank * part + i];
        }
        v = mine;
      }
      fragments.emplace_back(
          param.name,
          Py::tensor(f.tensor(
              DType::bfloat16,
              l.stage == 3 ? Dims{static_cast<std::int64_t>(v.size())} : param.shape, bf16(v))));
    }
    std::vector<std::pair<std::string, Py>> shared;
    if (rank == 0) {
      for (const auto& [alias, name] : l.shared) shared.emplace_back(alias, Py::str(name));
    }
    return Py::dict({
        {"module", Py::odict(std::move(module))},
        {"buffer_names", Py::list({Py::str("norm.running_mean"), Py::str("norm.count")})},
        {"optimizer", Py::none()},
        {"param_shapes", Py::list(std::move(shapes_per_group))},
        {"frozen_param_shapes", l.stage == 1 ? Py::none() : Py::odict(std::move(frozen_shapes))},
        {"shared_params", Py::dict(std::move(shared))},
        {"frozen_param_fragments", l.stage == 1 ? Py::none() : Py::odict(std::move(fragments))},
        {"dp_world_size", Py::num(l.world_size)},
        {"ds_config", Py::dict({{"bf16", Py::dict({{"enabled", Py::boolean(true)}})}})},
        {"ds_version", Py::str("0.18.5")},
    });
  };

  if (l.stage == 3) {
    for (std::size_t r = 0; r < ws; ++r) {
      PyFile f;
      dir.write(fmt::format("global_step3/zero_pp_rank_{}_mp_rank_00_model_states.pt", r),
                f.bytes(model_states(f, r), "model_states"));
    }
  } else {
    PyFile f;
    dir.write("global_step3/mp_rank_00_model_states.pt", f.bytes(model_states(f, 0), "m"));
  }
  dir.write("latest", "global_step3\n");

  // zero_to_fp32's order: buffers as float32, frozen (stage 2/3) as saved, trainable in fp32.
  expected.emplace_back("norm.running_mean", DType::float32, floats(running_mean));
  expected.emplace_back("norm.count", DType::float32, floats({7.0f}));
  if (l.stage != 1) {
    for (std::size_t p = 0; p < l.params.size(); ++p) {
      if (l.params[p].frozen) {
        expected.emplace_back(l.params[p].name, DType::bfloat16,
                              bf16(values_of(p, l.params[p].numel())));
      }
    }
  }
  int groups = 0;
  for (const Param& p : l.params) groups = std::max(groups, p.group + 1);
  for (int g = 0; g < groups; ++g) {
    for (std::size_t p = 0; p < l.params.size(); ++p) {
      if (l.params[p].group == g && !l.params[p].frozen) {
        expected.emplace_back(l.params[p].name, DType::float32,
                              floats(values_of(p, l.params[p].numel())));
      }
    }
  }
  for (const auto& [alias, name] : l.shared) {
    for (auto& e : expected) {
      if (std::get<0>(e) == name) {
        auto copy = e;
        std::get<0>(copy) = alias;
        expected.push_back(copy);
        break;
      }
    }
  }
  if (!l.optimizer_states) return expected;

  // Each rank's flat fp32 groups.
  std::vector<std::vector<std::vector<float>>> per_rank(ws);  // rank, group: elements
  std::vector<std::vector<std::uint64_t>> saved(ws);          // rank, group: elements saved
  for (int g = 0; g < groups; ++g) {
    if (l.stage == 3) {
      for (std::size_t r = 0; r < ws; ++r) per_rank[r].emplace_back();
      for (std::size_t p = 0; p < l.params.size(); ++p) {
        if (l.params[p].group != g || l.params[p].frozen) continue;
        const std::vector<float> v = values_of(p, l.params[p].numel());
        const std::uint64_t part = (v.size() + ws - 1) / ws;
        for (std::size_t r = 0; r < ws; ++r) {
          for (std::uint64_t i = 0; i < part; ++i) {
            const std::uint64_t at = r * part + i;
            per_rank[r].back().push_back(at < v.size() ? v[at] : padding);
          }
        }
      }
      for (std::size_t r = 0; r < ws; ++r) saved[r].push_back(per_rank[r].back().size());
    } else {
      std::vector<float> flat;
      for (std::size_t p = 0; p < l.params.size(); ++p) {
        if (l.params[p].group != g || l.params[p].frozen) continue;
        const std::vector<float> v = values_of(p, l.params[p].numel());
        flat.insert(flat.end(), v.begin(), v.end());
      }
      const std::uint64_t numel = flat.size(), align = 2 * ws;
      flat.resize((numel + align - 1) / align * align, padding);
      const std::uint64_t part = flat.size() / ws;
      for (std::size_t r = 0; r < ws; ++r) {
        per_rank[r].emplace_back(flat.begin() + static_cast<std::ptrdiff_t>(r * part),
                                 flat.begin() + static_cast<std::ptrdiff_t>((r + 1) * part));
        // Saved without the padding past the group's elements (the tensor a view of less).
        const std::uint64_t begin = r * part;
        saved[r].push_back(numel <= begin ? 0 : std::min(part, numel - begin));
      }
    }
  }
  const std::size_t ranks = l.ranks_written < 0 ? ws : static_cast<std::size_t>(l.ranks_written);
  for (std::size_t r = 0; r < ranks; ++r) {
    PyFile f;
    std::vector<Py> flats;
    for (int g = 0; g < groups; ++g) {
      std::int64_t n = static_cast<std::int64_t>(saved[r][static_cast<std::size_t>(g)]);
      if (g == 0 && r + 1 == ws) n -= l.short_by;
      const std::size_t s = f.storage(floats(per_rank[r][static_cast<std::size_t>(g)]));
      flats.push_back(Py::tensor(f.tensor({DType::float32, s, 0, {n}})));
    }
    Py count =
        l.stage == 3
            ? Py::num(l.world_size)
            : Py::list(std::vector<Py>(static_cast<std::size_t>(groups), Py::num(l.world_size)));
    Py state = Py::dict({
        {"loss_scaler", Py::object("LossScaler")},
        {"zero_stage", Py::stage(l.stage)},
        {"partition_count", count},
        {l.stage == 3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups",
         Py::list(std::move(flats))},
        {"ds_version", Py::str("0.18.5")},
    });
    dir.write(
        fmt::format("global_step3/{}zero_pp_rank_{}_mp_rank_00_optim_states.pt", l.optim_prefix, r),
        f.bytes(Py::dict({{"optimizer_state_dict", state}, {"ds_version", Py::str("0")}}),
                "optim"));
  }
  return expected;
}

std::vector<const ByteSource*> raw(const DirectoryModel& d) {
  std::vector<const ByteSource*> out;
  for (const auto& s : d.sources) out.push_back(s.get());
  return out;
}

// The bytes a mount serves for `tensor` (converted when it is stored in another dtype).
std::string served_bytes(const DirectoryModel& d, const Tensor& t,
                         std::optional<DType> convert_to = std::nullopt) {
  const ServedTensor s = serve(d.model, t, convert_to);
  const std::vector<const ByteSource*> sources = raw(d);
  ReadBuffer buffer;
  read_served(d.model, t, s, 0, s.nbytes, sources, buffer);
  std::string out;
  for (const ReadPiece& p : buffer.pieces()) {
    out += p.memory ? std::string(p.memory, p.length)
                    : sources[p.source]->read_string(p.source_offset, p.length);
  }
  return out;
}

// Every key in order, its dtype and its bytes, equal to `expected`; then the module's entries.
void check_model(const DirectoryModel& d,
                 const std::vector<std::tuple<std::string, DType, std::string>>& expected) {
  const Model& m = d.model;
  CHECK(m.format == Format::zero);
  REQUIRE(m.entries.size() >= expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& [key, dtype, bytes] = expected[i];
    CAPTURE(key);
    CHECK(m.entries[i].key == key);
    const Tensor& t = m.tensors[m.entries[i].tensor];
    CHECK(t.broken == "");
    CHECK(t.dtype == dtype);
    if (t.broken.empty()) CHECK(served_bytes(d, t) == bytes);
  }
}

std::string broken_of(const DirectoryModel& d, const std::string& key) {
  for (const Entry& e : d.model.entries) {
    if (e.key == key) return d.model.tensors[e.tensor].broken;
  }
  FAIL("no key " << key);
  return {};
}

std::pair<ExitCode, std::string> refusal(const std::string& dir) {
  try {
    read_zero_directory(dir);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ExitCode::ok, ""};
}

}  // namespace

TEST_SUITE_BEGIN("zero_reader");

TEST_CASE("stages 1, 2 and 3, world sizes 1 to 4: zero_to_fp32's keys, dtypes and bytes") {
  for (int stage : {1, 2, 3}) {
    for (int ws : {1, 2, 3, 4}) {
      CAPTURE(stage);
      CAPTURE(ws);
      TempDir t;
      Layout l;
      l.stage = stage;
      l.world_size = ws;
      const auto expected = write_zero(t, l);
      // The directory above (with latest), the tag directory, and through open_model().
      const DirectoryModel d = read_zero_directory(t.path());
      check_model(d, expected);
      check_model(read_zero_directory(t.path("global_step3")), expected);
      CHECK(looks_like_zero_directory(t.path()));
      CHECK(looks_like_zero_directory(t.path("global_step3")));
      CHECK(open_model(t.path()).model().entries.size() == d.model.entries.size());
      CHECK(d.model.sources[0] == (stage == 3
                                       ? "global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt"
                                       : "global_step3/mp_rank_00_model_states.pt"));
      // The tied alias is the tensor it shares, not a copy.
      const auto& e = d.model.entries;
      CHECK(e[expected.size() - 1].tensor == std::find_if(e.begin(), e.end(), [](const Entry& x) {
                                               return x.key == "embed.weight";
                                             })->tensor);
      // Stage 1/2: then the module as saved, under "module."; stage 3's placeholders are not.
      std::size_t module_entries = 0;
      for (const Entry& x : e) module_entries += x.key.starts_with("module.");
      CHECK(module_entries == (stage == 3 ? 0u : l.params.size() + 2));
      if (stage != 3) {
        const Entry& first = e[expected.size()];
        CHECK(first.key == "module.embed.weight");
        CHECK(served_bytes(d, d.model.tensors[first.tensor]) == bf16(values_of(0, 15)));
      }
      // Every trainable parameter is assembled from the ranks' partitions.
      const Tensor& w = d.model.tensors[e[expected.size() - 2].tensor];  // norm.weight
      CHECK(w.assembly.has_value());
    }
  }
}

TEST_CASE("a buffer stored in another dtype is served as float32, and through it as -o dtype") {
  TempDir t;
  write_zero(t, Layout{});
  const DirectoryModel d = read_zero_directory(t.path());
  const Tensor& mean = d.model.tensors[d.model.entries[0].tensor];
  CHECK(mean.dtype == DType::float32);
  CHECK(mean.stored_dtype == DType::bfloat16);
  CHECK(mean.nbytes() == 12);
  CHECK(mean.stored_nbytes() == 6);
  const Tensor& count = d.model.tensors[d.model.entries[1].tensor];
  CHECK(count.stored_dtype == DType::int64);
  const ServedTensor s = serve(d.model, count);
  CHECK(s.way == ServedTensor::Way::convert);
  CHECK(s.dtype == DType::float32);
  CHECK(s.stored == DType::int64);
  CHECK(s.nbytes == 4);
  // float16 of float32's 7.0: 0x4700; of running_mean (1.5, -2, 3.25) through float32.
  CHECK(served_bytes(d, count, DType::float16) == std::string("\x00\x47", 2));
  const ServedTensor half = serve(d.model, mean, DType::float16);
  CHECK(half.via == DType::float32);
  CHECK(half.nbytes == 6);
  CHECK(served_bytes(d, mean, DType::float16) == std::string("\x00\x3e\x00\xc0\x80\x42", 6));
  // -o dtype=float32 of a tensor served as float32 is no further conversion.
  CHECK_FALSE(serve(d.model, mean, DType::float32).via.has_value());
}

TEST_CASE("stage 3 across sub groups, and the bf16_ and plain names of optimizer states") {
  TempDir t;
  Layout l;
  l.stage = 3;
  l.world_size = 3;
  l.optim_prefix = "";
  // A group per parameter: each rank's run crosses groups between parameters.
  for (std::size_t i = 0; i < l.params.size(); ++i) l.params[i].group = static_cast<int>(i);
  check_model(read_zero_directory(t.path()), write_zero(t, l));
}

TEST_CASE("without the optimizer states: the fp32 weights broken, saying why, the rest served") {
  TempDir t;
  Layout l;
  l.stage = 3;
  l.optimizer_states = false;
  const auto expected = write_zero(t, l);
  const DirectoryModel d = read_zero_directory(t.path());
  REQUIRE(d.model.entries.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& [key, dtype, bytes] = expected[i];
    CAPTURE(key);
    CHECK(d.model.entries[i].key == key);
    const Tensor& tensor = d.model.tensors[d.model.entries[i].tensor];
    if (key == "norm.running_mean" || key == "norm.count" || key == "frozen.weight") {
      CHECK(tensor.broken == "");
      CHECK(served_bytes(d, tensor) == bytes);
    } else {
      CHECK(tensor.broken ==
            "no *_optim_states.pt in \"global_step3\": the fp32 weights are in the optimizer "
            "states, which this checkpoint lacks (only its model states are here); zero_to_fp32 "
            "needs them too");
      CHECK(tensor.dtype == DType::float32);
    }
  }
}

TEST_CASE("ranks missing, partitions short, group counts that disagree: broken, saying why") {
  SUBCASE("a rank's file missing") {
    TempDir t;
    Layout l;
    l.world_size = 3;
    l.ranks_written = 2;
    write_zero(t, l);
    const DirectoryModel d = read_zero_directory(t.path());
    CHECK(broken_of(d, "layer.weight") ==
          "expected 3 *_optim_states.pt files (rank 0's partition_count) but found 2: ranks are "
          "missing, or an older checkpoint's files are mixed in");
    CHECK(broken_of(d, "head.weight") == broken_of(d, "layer.weight"));
    CHECK(broken_of(d, "norm.running_mean") == "");
  }
  SUBCASE("the last rank's partition short of param_shapes") {
    TempDir t;
    Layout l;
    l.world_size = 2;
    l.short_by = 5;
    write_zero(t, l);
    const DirectoryModel d = read_zero_directory(t.path());
    CHECK(broken_of(d, "layer.weight") ==
          "group 0's param_shapes account for 27 elements, its partitions hold 22 (zero_to_fp32: "
          "\"consumed 28 numels out of 24 - something is wrong\")");
    CHECK(broken_of(d, "layer.bias") == "");  // group 1 is whole
  }
  SUBCASE("stage 3: a rank's flat group short") {
    TempDir t;
    Layout l;
    l.stage = 3;
    l.world_size = 2;
    l.short_by = 1;
    write_zero(t, l);
    CHECK(broken_of(read_zero_directory(t.path()), "proj.weight") ==
          "rank 1's flat group 0 holds 13 elements, rank 0's 14");
  }
  SUBCASE("an optimizer states file that is no zip") {
    TempDir t;
    Layout l;
    write_zero(t, l);
    t.write("global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", "not a zip");
    CHECK(broken_of(read_zero_directory(t.path()), "layer.weight") ==
          "the optimizer states of rank 1: \"global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_"
          "states.pt\": not in torch's zip format: DeepSpeed saves with torch.save of torch >= "
          "1.6");
  }
  SUBCASE("an optimizer states file that is not DeepSpeed's, or of no stage zero_to_fp32 knows") {
    TempDir t;
    write_zero(t, Layout{});
    const std::string rank0 = "global_step3/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt";
    PyFile f;
    t.write(rank0,
            f.bytes(Py::odict({{"w", Py::tensor(f.tensor(DType::float32, {1}, "abcd"))}}), "o"));
    CHECK(broken_of(read_zero_directory(t.path()), "layer.weight") ==
          "the optimizer states of rank 0: \"" + rank0 +
              "\": not a DeepSpeed optimizer states file: no optimizer_state_dict");
    // A stage past 3, and none (a bf16 optimizer's file, which zero_to_fp32 refuses too).
    for (std::int64_t stage : {5, -1}) {
      PyFile g;
      std::vector<std::pair<std::string, Py>> state = {
          {"partition_count", Py::num(2)},
          {"single_partition_of_fp32_groups",
           Py::list({Py::tensor(g.tensor(DType::float32, {1}, "abcd"))})}};
      if (stage >= 0) state.emplace_back("zero_stage", Py::stage(stage));
      t.write(rank0, g.bytes(Py::dict({{"optimizer_state_dict", Py::dict(state)}}), "o"));
      CHECK(broken_of(read_zero_directory(t.path()), "layer.weight") ==
            (stage >= 0 ? std::string("unknown ZeRO stage 5")
                        : "\"bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt\"'s "
                          "optimizer_state_dict has no zero_stage: not a ZeRO optimizer's "
                          "(zero_to_fp32 refuses it too)"));
    }
  }
  SUBCASE("an optimizer states file leading out of the directory") {
    TempDir t, outside;
    Layout l;
    write_zero(t, l);
    outside.write("x.pt", "whatever");
    t.remove("global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
    t.symlink(outside.path("x.pt"), "global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
    // Listed as glob lists it, and refused when opened: the fp32 weights broken, saying so.
    CHECK(broken_of(read_zero_directory(t.path()), "layer.weight") ==
          "the optimizer states of rank 1: "
          "\"global_step3/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt\": leads out of the "
          "directory (a symbolic link or \"..\")");
  }
}

TEST_CASE("what is refused: files of other kinds, latest naming what it may not") {
  TempDir t;
  write_zero(t, Layout{});
  SUBCASE("a model states file that is not DeepSpeed's") {
    PyFile f;
    t.write("global_step3/mp_rank_00_model_states.pt",
            f.bytes(Py::odict({{"w", Py::tensor(f.tensor(DType::float32, {1}, "abcd"))}}), "m"));
    CHECK(refusal(t.path()) ==
          std::pair{ExitCode::bad_checkpoint,
                    std::string("\"global_step3/mp_rank_00_model_states.pt\": not a DeepSpeed "
                                "model states file: no buffer_names")});
  }
  SUBCASE("a shape that is no list of sizes, and one past any tensor's") {
    PyFile f;
    auto with_shape = [&](Py shape) {
      return f.bytes(Py::dict({{"module", Py::odict({})},
                               {"buffer_names", Py::list({})},
                               {"param_shapes", Py::list({Py::odict({{"w", shape}})})},
                               {"shared_params", Py::dict({})}}),
                     "m");
    };
    t.write("global_step3/mp_rank_00_model_states.pt", with_shape(Py::str("3x4")));
    CHECK(refusal(t.path()).second ==
          "\"global_step3/mp_rank_00_model_states.pt\": the shape of \"w\" is not a torch.Size or "
          "a list of sizes");
    t.write("global_step3/mp_rank_00_model_states.pt",
            with_shape(Py::size({1ll << 40, 1ll << 40})));
    CHECK(refusal(t.path()).second ==
          "\"global_step3/mp_rank_00_model_states.pt\": the shape of \"w\" has more elements "
          "than a tensor can");
  }
  SUBCASE("latest naming a directory outside, or none") {
    t.write("latest", "../elsewhere");
    CHECK(refusal(t.path()) ==
          std::pair{ExitCode::bad_checkpoint,
                    std::string("latest: the tag \"../elsewhere\" has an empty, '.' or '..' part: "
                                "it must name a directory beneath the checkpoint's")});
    t.write("latest", "global_step4");
    CHECK(refusal(t.path()).second ==
          "latest names the tag \"global_step4\", which does not exist here: name the tag "
          "directory that holds the *_model_states.pt files, or write its name into latest");
    CHECK_FALSE(looks_like_zero_directory(t.path()));
    t.write("global_step4", "a file");
    CHECK(refusal(t.path()).second.starts_with(
        "latest names the tag \"global_step4\", which is no directory: "));
    t.remove("global_step4");
    t.mkdir("global_step4");
    CHECK(refusal(t.path()).second ==
          "latest names the tag \"global_step4\", which holds no *_model_states.pt: not a "
          "DeepSpeed checkpoint directory");
    TempDir outside;
    t.remove("global_step4");
    t.symlink(outside.path(), "global_step4");
    CHECK(refusal(t.path()).second.starts_with(
        "latest names the tag \"global_step4\", which is no directory beneath this one: "));
  }
  SUBCASE("a model states file leading out of the directory") {
    TempDir outside;
    outside.write("m.pt", "whatever");
    t.remove("global_step3/mp_rank_00_model_states.pt");
    t.symlink(outside.path("m.pt"), "global_step3/mp_rank_00_model_states.pt");
    // Listed, and refused when opened, saying why.
    CHECK(refusal(t.path()) ==
          std::pair{ExitCode::bad_checkpoint,
                    std::string("\"global_step3/mp_rank_00_model_states.pt\": leads out of the "
                                "directory (a symbolic link or \"..\")")});
  }
}

TEST_CASE("by URL: the files found by DeepSpeed's names, what is not there told apart") {
  TempDir t;
  Layout l;
  l.stage = 3;
  l.world_size = 3;
  l.optim_prefix = "";  // ds_config says bf16: the bf16_ names are asked for first, in vain
  const auto expected = write_zero(t, l);
  std::vector<std::string> asked;
  std::string refuse;        // a file name the server refuses (403), as S3 a missing key
  bool unreachable = false;  // the server does not answer
  auto open = [&](const std::string& url) -> std::unique_ptr<ByteSource> {
    asked.push_back(url);
    const std::string base = "https://h/run/";
    REQUIRE(url.starts_with(base));
    const std::string name = url.substr(base.size());
    if (unreachable) throw Error(ExitCode::unreachable, "connection refused");
    if (!refuse.empty() && name.ends_with(refuse)) throw Error(ExitCode::access_denied, "403");
    if (!std::filesystem::is_regular_file(t.path(name))) {
      throw Error(ExitCode::io, "not found (HTTP 404)");
    }
    return std::make_unique<FileSource>(t.path(name));
  };
  for (const char* url : {"https://h/run/", "https://h/run/latest"}) {
    CAPTURE(url);
    asked.clear();
    const DirectoryModel d = read_zero_remote(url, open);
    check_model(d, expected);
    CHECK(d.model.sources.size() == 6);  // 3 optimizer states, 3 model states (frozen fragments)
    CHECK(asked == std::vector<std::string>{
                       "https://h/run/latest",
                       "https://h/run/global_step3/mp_rank_00_model_states.pt",
                       "https://h/run/global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt",
                       "https://h/run/global_step3/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
                       "https://h/run/global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt",
                       "https://h/run/global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt",
                       "https://h/run/global_step3/zero_pp_rank_2_mp_rank_00_optim_states.pt",
                       "https://h/run/global_step3/zero_pp_rank_1_mp_rank_00_model_states.pt",
                       "https://h/run/global_step3/zero_pp_rank_2_mp_rank_00_model_states.pt"});
  }
  CHECK(looks_like_zero_location("https://h/run/"));
  CHECK(looks_like_zero_location("s3://b/run/latest"));
  CHECK_FALSE(looks_like_zero_location("https://h/run/model.pth"));
  // A tag directory's URL: no latest there.
  check_model(read_zero_remote("https://h/run/global_step3/", open), expected);
  // A refused (403) name is passed over as not there, as S3 refuses a missing key.
  refuse = "mp_rank_00_model_states.pt";
  CHECK_THROWS_WITH_AS(read_zero_remote("https://h/run/", open),
                       "latest names the tag \"global_step3\", in which no DeepSpeed model "
                       "states were found (\"global_step3/mp_rank_00_model_states.pt\": 403; "
                       "\"global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt\": 403): not a "
                       "DeepSpeed checkpoint directory",
                       Error);
  // The optimizer states not there: the fp32 weights broken, saying so.
  refuse = "optim_states.pt";
  CHECK(broken_of(read_zero_remote("https://h/run/", open), "layer.weight") ==
        "the fp32 weights are in the optimizer states, which are not there "
        "(\"global_step3/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt\": 403; "
        "\"global_step3/zero_pp_rank_0_mp_rank_00_optim_states.pt\": 403): zero_to_fp32 needs "
        "them too");
  // A server that does not answer is an error, not a missing file.
  refuse.clear();
  unreachable = true;
  try {
    read_zero_remote("https://h/run/", open);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::unreachable);
    CHECK(std::string(e.what()) == "latest: connection refused");
  }
}

TEST_CASE("bounded: parameters, pieces, ranks past the limits are refused") {
  TempDir t;
  Layout l;
  l.stage = 3;
  l.world_size = 4;
  write_zero(t, l);
  ZeroLimits zero;
  zero.max_pieces = 10;  // 5 trainable parameters of 4 ranks: 20 pieces
  auto refused = [&](const ZeroLimits& z) {
    try {
      read_zero_directory(t.path(), {}, z);
    } catch (const Error& e) {
      return std::pair{e.code(), std::string(e.what())};
    }
    return std::pair{ExitCode::ok, std::string()};
  };
  CHECK(refused(zero) ==
        std::pair{ExitCode::unsupported, std::string("more than 10 pieces of parameters in all")});
  zero = {};
  zero.max_parameters = 3;
  CHECK(refused(zero).second ==
        "\"global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt\": more than 3 entries in "
        "module");
  zero = {};
  zero.max_ranks = 3;
  CHECK(refused(zero) ==
        std::pair{ExitCode::unsupported, std::string("4 optimizer states files, more than 3")});
  zero = {};
  zero.max_directory_entries = 4;
  CHECK(refused(zero).first == ExitCode::unsupported);
}

TEST_CASE(
    "ranks in natural order (rank 10 after rank 9), latest's text stripped as Python strips") {
  TempDir t;
  Layout l;
  l.stage = 3;
  l.world_size = 11;  // in byte order rank 10 would come after rank 1
  const auto expected = write_zero(t, l);
  t.write("latest", " \tglobal_step3\r\n\x0c");
  check_model(read_zero_directory(t.path()), expected);
  t.write("latest", "global_step3/");  // an empty part
  CHECK(refusal(t.path()).first == ExitCode::bad_checkpoint);
  t.write("latest", "");
  CHECK(refusal(t.path()).second ==
        "latest: the tag \"\" is empty: it must name a directory beneath the checkpoint's");
  t.write("latest", std::string(5000, 'a'));
  CHECK(refusal(t.path()).second == "latest: 5000 bytes, more than a tag's 4096");
}

TEST_SUITE_END();
