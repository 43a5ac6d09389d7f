// SPDX-License-Identifier: MIT
// read_split_directory(): key directories listed beneath the directory, each meta.json read by
// the strict JSON reader and checked field by field against its data file, index.json streamed
// for the order, and the entries ordered and checked for keys claimed twice.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/json_reader.hpp>
#include <ckptfs/base/json_writer.hpp>
#include <ckptfs/base/names.hpp>
#include <ckptfs/base/numbers.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/split/split_reader.hpp>
#include <ckptfs/source/directory.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

namespace ckptfs {
namespace {

using Token = JsonReader::Token;

// The limits of a reader of the mount's own JSON (index.json, meta.json, value.json), nested at
// most `depth` deep: what the mount writes reads back, the \udcXX escapes of bytes that are not
// UTF-8 (a key or str with a lone surrogate) and value_json()'s ints of up to 1024 bytes (2467
// digits) included.
JsonLimits own_json_limits(std::size_t depth) {
  JsonLimits limits;
  limits.max_depth = depth;
  limits.max_number_chars = 4096;
  limits.surrogate_escapes = true;
  return limits;
}

[[noreturn]] void fail(ExitCode code, std::string_view file, std::string_view what) {
  throw Error(code, fmt::format("{}: {}", quote(file, 300), what));
}

// Runs `body`, naming `file` in the message of any Error it throws.
template <class Body>
auto naming(std::string_view file, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    fail(e.code(), file, e.what());
  }
}

// Keeps in `out` the times and permission bits of a file read that is no source.
void note_read(DirectoryModel& out, const struct stat& st) {
  keep_newest(out.times,
              {st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec});
  out.permissions &= st.st_mode & 0777;
}

// The whole of a small file beneath the directory, at most `max_bytes`; noted in `out`.
std::string read_small_file(const Directory& dir, const std::string& relative,
                            std::uint64_t max_bytes, DirectoryModel& out) {
  OpenedFile file = naming(relative, [&] { return dir.open(relative, FileKind::regular); });
  const auto size = static_cast<std::uint64_t>(file.st.st_size);
  if (size > max_bytes) {
    fail(ExitCode::unsupported, relative,
         fmt::format("{} bytes, over the limit of {}", size, max_bytes));
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  naming(relative,
         [&] { pread_exactly(file.fd.get(), 0, std::as_writable_bytes(std::span(text))); });
  note_read(out, file.st);
  return text;
}

// A key path as index.json and meta.json write it, read and written back compact: an array of
// parts, each a string, number, boolean or null (a Python key), or an object of one string
// member ({"__bytes__": "ff"}, {"__part__": "q_per_channel_scales"}...). null: no key path ("").
// `parts` gets the number of parts.
std::string read_key_path(JsonReader& json, std::size_t& parts) {
  parts = 0;
  Token t = json.next();
  if (t == Token::null) return {};
  if (t != Token::begin_array) json.fail("key_path is not an array");
  std::string out;
  JsonWriter w(out, 0);
  w.begin_array();
  for (t = json.next(); t != Token::end_array; t = json.next()) {
    ++parts;
    if (copy_json_scalar(json, t, w)) continue;
    switch (t) {
      case Token::begin_object: {
        if (json.next() != Token::key) json.fail("a key_path part is an empty object");
        w.begin_object().key(json.string());
        if (json.next() != Token::string) json.fail("a key_path part's member is not a string");
        w.string(json.string()).end_object();
        if (json.next() != Token::end_object) json.fail("a key_path part has several members");
        break;
      }
      default:
        json.fail("a key_path part is not a key");
    }
  }
  w.end_array();
  return out;
}

// "containers" as index.json and meta.json write it: an array of container_name()s, one per part
// of the key path, read into Entry::containers' codes. null: none ("").
std::string read_containers(JsonReader& json) {
  Token t = json.next();
  if (t == Token::null) return {};
  if (t != Token::begin_array) json.fail("containers is not an array");
  std::string out;
  for (t = json.next(); t != Token::end_array; t = json.next()) {
    const auto kind = t == Token::string ? container_from_name(json.string()) : std::nullopt;
    if (!kind) {
      json.fail(
          "a part of containers is not \"dict\", \"OrderedDict\", \"list\", "
          "\"tuple\", \"set\", \"frozenset\" or \"object\"");
    }
    out += container_code(*kind);
  }
  return out;
}

// Containers given must say one container for each part of the key path.
void check_containers(JsonReader& json, const std::string& containers, std::size_t parts) {
  if (!containers.empty() && containers.size() != parts) {
    json.fail(fmt::format("containers has {} parts, key_path {}", containers.size(), parts));
  }
}

std::string read_string(JsonReader& json, std::string_view member) {
  if (json.next() != Token::string) json.fail(fmt::format("{} is not a string", member));
  return std::string(json.string());
}

std::uint64_t read_uint(JsonReader& json, std::string_view member) {
  if (json.next() != Token::number || !json.uint64()) {
    json.fail(fmt::format("{} is not an integer in [0, 2^64)", member));
  }
  return *json.uint64();
}

std::int64_t read_int(JsonReader& json, std::string_view member) {
  if (json.next() != Token::number || !json.int64()) {
    json.fail(fmt::format("{} is not a 64-bit integer", member));
  }
  return *json.int64();
}

// ---- index.json ------------------------------------------------------------------------------

struct Indexed {
  std::size_t position = 0;
  std::string key;
  std::string key_path;
  std::string containers;
  bool value = false;
};

struct Index {
  std::map<std::string, Indexed, std::less<>> entries;  // by directory name
  // "root": absent (an older mount's index.json), or what it says (null: one entry).
  std::optional<std::optional<ContainerKind>> root;
};

// A directory name as index.json's "path" gives it: one component of the root.
bool is_single_component(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

// Where a copy keeps the mount's index.json: .ckptfs/index.json (the views' folder of a mount),
// else index.json at the root (copies made before the views moved there); nullopt for neither.
// A .ckptfs or a .ckptfs/index.json that leads out of the directory is refused, as a key
// directory would be.
std::optional<std::string> find_index(const Directory& dir,
                                      const std::vector<DirectoryEntry>& listed,
                                      const SplitLimits& limits) {
  const std::string in_views = std::string(views_folder) + "/index.json";
  for (const DirectoryEntry& e : listed) {
    if (e.name != views_folder || !e.directory) continue;
    for (const DirectoryEntry& inner : dir.list(views_folder, limits.max_entries)) {
      if (inner.name != "index.json") continue;
      if (inner.error == EXDEV || inner.error == ELOOP) {
        naming(in_views, [&] { (void)dir.open(in_views, FileKind::regular); });
      }
      if (inner.regular) return in_views;
    }
  }
  for (const DirectoryEntry& e : listed) {
    if (e.name == "index.json" && e.regular) return std::string("index.json");
  }
  return std::nullopt;
}

Index read_index(const Directory& dir, const std::string& name, const SplitLimits& limits,
                 DirectoryModel& out) {
  OpenedFile file = naming(name, [&] { return dir.open(name, FileKind::regular); });
  const auto size = static_cast<std::uint64_t>(file.st.st_size);
  if (size > limits.max_index_bytes) {
    fail(ExitCode::unsupported, name,
         fmt::format("{} bytes, over the limit of {}", size, limits.max_index_bytes));
  }
  note_read(out, file.st);
  std::uint64_t consumed = 0;
  // Streamed: a million entries are read a chunk at a time.
  JsonReader json(
      [&](std::span<char> buffer) -> std::size_t {
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - consumed));
        pread_exactly(file.fd.get(), consumed, std::as_writable_bytes(buffer.first(n)));
        consumed += n;
        return n;
      },
      own_json_limits(limits.max_depth + limits.max_value_depth));  // entries hold values
  Index index;
  naming(name, [&] {
    if (json.next() != Token::begin_object) json.fail("not a JSON object");
    bool has_entries = false;
    for (Token t = json.next(); t != Token::end_object; t = json.next()) {
      if (json.string() == "root") {
        if (json.next() == Token::null) {
          index.root.emplace(std::nullopt);
        } else if (json.token() == Token::string && container_from_name(json.string())) {
          index.root.emplace(container_from_name(json.string()));
        } else {
          json.fail("root is not null or a container's name");
        }
        continue;
      }
      if (json.string() != "entries") {
        json.skip_value();
        continue;
      }
      has_entries = true;
      if (json.next() != Token::begin_array) json.fail("entries is not an array");
      for (t = json.next(); t != Token::end_array; t = json.next()) {
        if (t != Token::begin_object) json.fail("an entry is not an object");
        if (index.entries.size() == limits.max_entries) {
          throw Error(ExitCode::unsupported,
                      fmt::format("more than {} entries", limits.max_entries));
        }
        std::optional<std::string> key, path, kind;
        std::string key_path, containers;
        std::size_t parts = 0;
        for (t = json.next(); t != Token::end_object; t = json.next()) {
          const std::string member(json.string());
          if (member == "key") {
            key = read_string(json, "an entry's key");
          } else if (member == "path") {
            path = read_string(json, "an entry's path");
          } else if (member == "kind") {
            kind = read_string(json, "an entry's kind");
          } else if (member == "key_path") {
            key_path = read_key_path(json, parts);
          } else if (member == "containers") {
            containers = read_containers(json);
          } else {
            json.skip_value();
          }
        }
        check_containers(json, containers, parts);
        if (!key || !path || !kind || (*kind != "tensor" && *kind != "value")) {
          json.fail("an entry without a key, a path, or a kind of \"tensor\" or \"value\"");
        }
        if (!is_single_component(*path)) {
          json.fail(fmt::format("entry path {} is not a name in the directory", quote(*path)));
        }
        Indexed entry{index.entries.size(), std::move(*key), std::move(key_path),
                      std::move(containers), *kind == "value"};
        if (!index.entries.emplace(std::move(*path), std::move(entry)).second) {
          json.fail("two entries name one directory");
        }
      }
    }
    json.next();  // the end, or an error for what follows
    if (!has_entries) {
      throw Error(ExitCode::bad_checkpoint, "no \"entries\": not a mount's index.json");
    }
  });
  return index;
}

// ---- meta.json ---------------------------------------------------------------------------------

struct QuantizationFields {
  std::string scheme;
  std::optional<double> scale;
  std::optional<std::int64_t> zero_point;
  std::optional<std::int64_t> axis;
  std::optional<std::string> scales;
  std::optional<std::string> zero_points;
};

struct Meta {
  std::optional<std::string> key;
  std::string key_path;
  std::string containers;
  std::optional<std::string> dtype;
  std::optional<std::vector<std::int64_t>> shape;
  std::optional<std::uint64_t> nbytes;
  bool big_endian = false;
  bool requires_grad = false;
  std::optional<QuantizationFields> quantization;
  std::optional<std::string> broken;
  // "ggml" of a block-quantized tensor (a GGUF's Q4_K...): its GGML type, data's size, and the
  // blocks' byte order; none for every other tensor.
  std::optional<BlockFormat> blocks;
  std::uint64_t blocks_nbytes = 0;
  bool blocks_big_endian = false;
};

// A float as meta.json writes it: a number, or {"__float__": "nan"|"inf"|"-inf"}.
double read_float(JsonReader& json, std::string_view member) {
  Token t = json.next();
  if (t == Token::number) return json.floating();
  if (t == Token::begin_object && json.next() == Token::key && json.string() == "__float__" &&
      json.next() == Token::string) {
    const std::string text(json.string());
    if (json.next() == Token::end_object) {
      if (text == "nan") return std::numeric_limits<double>::quiet_NaN();
      if (text == "inf") return std::numeric_limits<double>::infinity();
      if (text == "-inf") return -std::numeric_limits<double>::infinity();
    }
  }
  json.fail(fmt::format("{} is not a number", member));
}

// The members of a quantization object, its '{' read.
QuantizationFields read_quantization(JsonReader& json) {
  QuantizationFields q;
  bool has_scheme = false;
  for (Token t = json.next(); t != Token::end_object; t = json.next()) {
    const std::string member(json.string());
    if (member == "qscheme") {
      q.scheme = read_string(json, "qscheme");
      has_scheme = true;
    } else if (member == "scale") {
      q.scale = read_float(json, "scale");
    } else if (member == "zero_point") {
      q.zero_point = read_int(json, "zero_point");
    } else if (member == "axis") {
      q.axis = read_int(json, "axis");
    } else if (member == "scales") {
      q.scales = read_string(json, "scales");
    } else if (member == "zero_points") {
      q.zero_points = read_string(json, "zero_points");
    } else {
      json.skip_value();
    }
  }
  if (!has_scheme) json.fail("quantization without a qscheme");
  return q;
}

Meta parse_meta(std::string_view text, const SplitLimits& limits) {
  JsonReader json(text, own_json_limits(limits.max_depth));
  Meta m;
  std::size_t parts = 0;
  if (json.next() != Token::begin_object) json.fail("not a JSON object");
  for (Token t = json.next(); t != Token::end_object; t = json.next()) {
    const std::string member(json.string());
    if (member == "key") {
      m.key = read_string(json, "key");
    } else if (member == "key_path") {
      m.key_path = read_key_path(json, parts);
    } else if (member == "containers") {
      m.containers = read_containers(json);
    } else if (member == "dtype") {
      m.dtype = read_string(json, "dtype");
    } else if (member == "shape") {
      if (json.next() != Token::begin_array) json.fail("shape is not an array");
      std::vector<std::int64_t> shape;
      for (t = json.next(); t != Token::end_array; t = json.next()) {
        if (shape.size() == limits.max_dims) {
          throw Error(ExitCode::unsupported,
                      fmt::format("shape has more than {} dimensions", limits.max_dims));
        }
        if (t != Token::number || !json.uint64() ||
            *json.uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
          json.fail("a dimension of shape is not an integer in [0, 2^63)");
        }
        shape.push_back(static_cast<std::int64_t>(*json.uint64()));
      }
      m.shape = std::move(shape);
    } else if (member == "nbytes") {
      m.nbytes = read_uint(json, "nbytes");
    } else if (member == "byteorder") {
      const std::string order = read_string(json, "byteorder");
      if (order != "little" && order != "big") json.fail("byteorder is not \"little\" or \"big\"");
      m.big_endian = order == "big";
    } else if (member == "requires_grad") {
      Token b = json.next();
      if (b != Token::true_value && b != Token::false_value) {
        json.fail("requires_grad is not a boolean");
      }
      m.requires_grad = b == Token::true_value;
    } else if (member == "quantization") {
      const Token q = json.next();
      if (q == Token::begin_object) {
        m.quantization = read_quantization(json);
      } else if (q != Token::null) {
        json.fail("quantization is not an object or null");
      }
    } else if (member == "ggml") {
      // Only what makes a block-quantized tensor (a plain GGUF tensor's is its dtype's).
      if (json.next() != Token::begin_object) {
        if (json.token() != Token::null) json.fail("ggml is not an object or null");
        continue;
      }
      std::optional<std::uint64_t> type, nbytes;
      bool big = false;
      for (Token g = json.next(); g != Token::end_object; g = json.next()) {
        const std::string field(json.string());
        if (field == "type_id") {
          if (json.next() == Token::null) continue;
          if (json.token() != Token::number || !json.uint64()) json.fail("ggml type_id");
          type = *json.uint64();
        } else if (field == "nbytes") {
          nbytes = read_uint(json, "ggml nbytes");
        } else if (field == "byteorder") {
          big = read_string(json, "ggml byteorder") == "big";
        } else {
          json.skip_value();
        }
      }
      if (type && *type <= 0xffffffffu) {
        if (const auto format = block_format_from_ggml(static_cast<std::uint32_t>(*type))) {
          if (!nbytes) json.fail("ggml of a block-quantized tensor without nbytes");
          m.blocks = *format;
          m.blocks_nbytes = *nbytes;
          m.blocks_big_endian = big;
        }
      }
    } else if (member == "broken") {
      Token b = json.next();
      if (b == Token::string) {
        m.broken = std::string(json.string());
      } else if (b != Token::null) {
        json.fail("broken is not a string or null");
      }
    } else {
      json.skip_value();
    }
  }
  json.next();  // the end, or an error for what follows
  check_containers(json, m.containers, parts);
  if (!m.key) throw Error(ExitCode::bad_checkpoint, "no \"key\"");
  if (!m.dtype) throw Error(ExitCode::bad_checkpoint, "no \"dtype\"");
  if (!m.shape) throw Error(ExitCode::bad_checkpoint, "no \"shape\"");
  if (!m.nbytes && !m.broken) throw Error(ExitCode::bad_checkpoint, "no \"nbytes\"");
  return m;
}

// torch's contiguous strides (a size of 0 counts as 1, as torch computes them).
std::vector<std::int64_t> c_order_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> stride(shape.size());
  std::int64_t step = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    stride[i] = step;
    // Cannot overflow once numel() has been checked; a 0 in the shape makes numel() 0, and the
    // steps past it may grow past int64 without harm to a tensor that has no element.
    if (__builtin_mul_overflow(step, std::max<std::int64_t>(shape[i], 1), &step)) step = 0;
  }
  return stride;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// The tensor meta.json describes, its quantization's references to other entries aside.
Tensor tensor_of(const Meta& m, QuantizationFields* per_channel) {
  Tensor t;
  const auto dtype = dtype_from_name(*m.dtype);
  if (!dtype)
    throw Error(ExitCode::bad_checkpoint, fmt::format("unknown dtype {}", quote(*m.dtype)));
  t.dtype = *dtype;
  t.shape = *m.shape;
  t.stride = c_order_strides(t.shape);
  t.requires_grad = m.requires_grad;
  if (m.broken) {
    t.broken = *m.broken;
    return t;
  }
  if (m.blocks) {
    // Its data holds blocks: its values are float32 (whatever dtype the mount served them as).
    t.dtype = DType::float32;
    t.blocks = *m.blocks;
    const BlockFormatInfo& b = info(t.blocks);
    const bool overflow = !element_count(t.shape);
    const std::uint64_t row = t.shape.empty() ? 1 : static_cast<std::uint64_t>(t.shape.back());
    if (!size_problem(t).empty() || row % b.block_elements != 0 ||
        t.stored_nbytes() != m.blocks_nbytes) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("ggml nbytes {}, but {} blocks of shape {} hold {}", m.blocks_nbytes,
                              b.name, shape_text(t.shape),
                              overflow ? std::string("more than 64 bits count")
                                       : std::to_string(t.stored_nbytes())));
    }
    return t;
  }
  // tensor_nbytes() (numel x element size, or a packed dtype's rows of bytes), checked
  // (Tensor::nbytes() is 0 for a shape it refuses, as for an empty one).
  if (const std::string why = size_problem(t); !why.empty()) {
    throw Error(ExitCode::bad_checkpoint, fmt::format("a {} tensor: {}", info(t.dtype).name, why));
  }
  const std::uint64_t nbytes = t.nbytes();
  if (nbytes != *m.nbytes) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("nbytes {}, but a {} tensor of shape {} holds {}", *m.nbytes,
                            info(t.dtype).name, shape_text(t.shape), nbytes));
  }
  if (m.quantization && !is_quantized(t.dtype)) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("quantization given for a {} tensor", info(t.dtype).name));
  }
  if (!m.quantization && is_quantized(t.dtype)) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("a {} tensor without its quantization", info(t.dtype).name));
  }
  if (m.quantization) {
    const QuantizationFields& q = *m.quantization;
    Quantization out;
    out.scheme = q.scheme;
    if (q.scheme == "per_tensor_affine" || q.scheme == "per_tensor_symmetric") {
      if (!q.scale || !q.zero_point) {
        throw Error(ExitCode::bad_checkpoint,
                    "per-tensor quantization without scale and zero_point");
      }
      out.scale = *q.scale;
      out.zero_point = *q.zero_point;
    } else if (q.scheme == "per_channel_affine" || q.scheme == "per_channel_symmetric" ||
               q.scheme == "per_channel_affine_float_qparams") {
      if (!q.axis || !q.scales || !q.zero_points || *q.axis < 0 ||
          static_cast<std::uint64_t>(*q.axis) >= t.shape.size()) {
        throw Error(ExitCode::bad_checkpoint,
                    "per-channel quantization without an axis of the tensor, scales and "
                    "zero_points");
      }
      out.axis = *q.axis;
      *per_channel = q;
    } else {
      throw Error(ExitCode::bad_checkpoint, fmt::format("unknown qscheme {}", quote(q.scheme)));
    }
    t.quantization = std::move(out);
  }
  return t;
}

// ---- the directory -----------------------------------------------------------------------------

struct Found {
  std::string directory;
  Entry entry;
  std::optional<QuantizationFields> per_channel;  // the tensor's, to link to other entries
};

bool key_order(const Found& a, const Found& b) {
  return a.entry.key != b.entry.key ? a.entry.key < b.entry.key
                                    : a.entry.key_path < b.entry.key_path;
}

// Links each per-channel quantized tensor to the entries holding its scales and zero points
// (meta.json names them by key), or marks it broken when they are not in the directory.
void link_quantization(std::vector<Found>& found, Model& m) {
  std::multimap<std::string_view, std::size_t> tensors_by_key;
  for (const Found& f : found) {
    if (f.entry.kind == Entry::Kind::tensor) tensors_by_key.emplace(f.entry.key, f.entry.tensor);
  }
  for (const Found& f : found) {
    if (!f.per_channel) continue;
    Tensor& t = m.tensors[f.entry.tensor];
    auto find = [&](const std::string& key) -> std::optional<std::size_t> {
      auto it = tensors_by_key.find(key);
      if (it == tensors_by_key.end()) return std::nullopt;
      return it->second;
    };
    const auto scales = find(*f.per_channel->scales);
    const auto zero_points = find(*f.per_channel->zero_points);
    if (!scales || !zero_points) {
      t.broken = fmt::format("its per-channel {} (entry {}) are not in the directory",
                             scales ? "zero points" : "scales",
                             quote(scales ? *f.per_channel->zero_points : *f.per_channel->scales));
      continue;
    }
    t.quantization->scales = *scales;
    t.quantization->zero_points = *zero_points;
  }
}

// What holds the entries without a key path: what index.json says; without it, the first
// container of an entry that says its containers (all say the same of one checkpoint; pack
// checks), none when an entry is the whole checkpoint (key path []), else an OrderedDict: a flat
// checkpoint, or one copied from a mount that did not say containers.
std::optional<ContainerKind> root_of(const Index& index, const std::vector<Entry>& entries) {
  if (index.root) return *index.root;
  for (const Entry& e : entries) {
    if (e.key_path == "[]") return std::nullopt;
    if (!e.containers.empty()) return container_from_code(e.containers[0]);
  }
  return ContainerKind::ordered_dict;
}

}  // namespace

bool looks_like_split_directory(const std::string& directory) {
  try {
    const Directory dir(directory);
    if (dir.has(std::string(views_folder) + "/index.json", FileKind::regular) ||
        dir.has("index.json", FileKind::regular)) {
      return true;
    }
    for (const DirectoryEntry& e : dir.list("", SplitLimits{}.max_entries)) {
      if (e.directory && (dir.has(e.name + "/meta.json", FileKind::regular) ||
                          dir.has(e.name + "/value.json", FileKind::regular))) {
        return true;
      }
    }
  } catch (const Error&) {
  }
  return false;
}

DirectoryModel read_split_directory(const std::string& directory, const SplitLimits& limits) {
  auto dir = std::make_shared<const Directory>(directory);
  DirectoryModel out;
  Model& m = out.model;
  m.format = Format::split;

  std::vector<DirectoryEntry> listed = dir->list("", limits.max_entries);
  // The file system's order is no order: names sorted make every step below deterministic.
  std::sort(listed.begin(), listed.end(),
            [](const DirectoryEntry& a, const DirectoryEntry& b) { return a.name < b.name; });
  Index index;
  if (auto found = find_index(*dir, listed, limits)) {
    index = read_index(*dir, *found, limits, out);
  }

  std::vector<Found> found;
  std::uint64_t json_bytes = 0;
  auto charge = [&](std::uint64_t bytes, const std::string& file) {
    json_bytes += bytes;
    if (json_bytes > limits.max_json_bytes) {
      fail(ExitCode::unsupported, file,
           fmt::format("the meta.json and value.json files pass {} bytes together",
                       limits.max_json_bytes));
    }
  };
  for (const DirectoryEntry& e : listed) {
    if (e.error == EXDEV || e.error == ELOOP) {
      fail(ExitCode::bad_checkpoint, e.name,
           e.error == EXDEV ? "leads out of the directory (a symbolic link)"
                            : "leads through a loop of symbolic links");
    }
    // index.json, files copied along (an old mount's model.safetensors...), and the views'
    // folder of a whole mount copied (no key's name is .ckptfs)
    if (!e.directory || e.name == views_folder) continue;
    const std::string meta_name = e.name + "/meta.json";
    const std::string value_name = e.name + "/value.json";
    const bool is_tensor = dir->has(meta_name, FileKind::regular);
    const bool is_value = dir->has(value_name, FileKind::regular);
    auto indexed = index.entries.find(e.name);
    const Indexed* in_index = indexed == index.entries.end() ? nullptr : &indexed->second;
    if (is_tensor == is_value) {
      // Neither: perhaps because its meta.json or value.json is a link that leads out.
      for (const DirectoryEntry& inner : dir->list(e.name, limits.max_entries)) {
        if ((inner.name == "meta.json" || inner.name == "value.json") &&
            (inner.error == EXDEV || inner.error == ELOOP)) {
          naming(e.name + "/" + inner.name,
                 [&] { (void)dir->open(e.name + "/" + inner.name, FileKind::regular); });
        }
      }
      fail(ExitCode::bad_checkpoint, e.name,
           is_tensor ? "holds both meta.json and value.json"
                     : "holds neither meta.json nor value.json: not a key directory of a mount "
                       "(or one copied from a mount whose -o files= left meta.json out)");
    }
    Found f;
    f.directory = e.name;
    if (is_value) {
      const std::string text = read_small_file(*dir, value_name, limits.max_value_json_bytes, out);
      charge(text.size(), value_name);
      f.entry.kind = Entry::Kind::value;
      f.entry.value_json = naming(
          value_name, [&] { return compact_json(text, own_json_limits(limits.max_value_depth)); });
      if (in_index) {
        if (!in_index->value)
          fail(ExitCode::bad_checkpoint, e.name, "index.json says it holds a tensor");
        f.entry.key = in_index->key;
        f.entry.key_path = in_index->key_path;
        f.entry.containers = in_index->containers;
      } else if (auto key = key_of_name(e.name)) {
        f.entry.key = std::move(*key);
      } else {
        fail(ExitCode::bad_checkpoint, value_name,
             "a value whose directory name does not say its key (a name the mount cut or "
             "suffixed): copy the mount's index.json along");
      }
    } else {
      const std::string text = read_small_file(*dir, meta_name, limits.max_meta_json_bytes, out);
      charge(text.size(), meta_name);
      const Meta meta = naming(meta_name, [&] { return parse_meta(text, limits); });
      QuantizationFields per_channel;
      Tensor t = naming(meta_name, [&] { return tensor_of(meta, &per_channel); });
      if (in_index &&
          (in_index->value || in_index->key != *meta.key || in_index->key_path != meta.key_path ||
           (!in_index->containers.empty() && !meta.containers.empty() &&
            in_index->containers != meta.containers))) {
        fail(ExitCode::bad_checkpoint, meta_name,
             fmt::format("key {}, but index.json says its directory holds {} {}", quote(*meta.key),
                         in_index->value ? "the value" : "the tensor", quote(in_index->key)));
      }
      if (t.broken.empty()) {
        const std::string data_name = e.name + "/data";
        auto source = naming(data_name,
                             [&] { return std::make_unique<DirectoryFileSource>(dir, data_name); });
        // A block-quantized tensor's data holds its blocks (meta.json's nbytes: its values').
        const std::uint64_t nbytes = meta.blocks ? meta.blocks_nbytes : *meta.nbytes;
        if (source->size() != nbytes) {
          fail(ExitCode::bad_checkpoint, data_name,
               fmt::format("holds {} bytes, but meta.json says {}nbytes {}", source->size(),
                           meta.blocks ? "ggml " : "", nbytes));
        }
        Storage s;
        s.source = static_cast<std::uint32_t>(m.sources.size());
        s.key = e.name;
        s.nbytes = nbytes;
        s.big_endian = meta.blocks ? meta.blocks_big_endian : meta.big_endian;
        m.sources.push_back(data_name);
        out.sources.push_back(std::move(source));
        t.storage = m.storages.size();
        m.storages.push_back(std::move(s));
      }
      if (t.quantization && !per_channel.scheme.empty()) f.per_channel = std::move(per_channel);
      f.entry.kind = Entry::Kind::tensor;
      f.entry.key = *meta.key;
      f.entry.key_path = meta.key_path;
      f.entry.containers =
          meta.containers.empty() && in_index ? in_index->containers : meta.containers;
      f.entry.tensor = m.tensors.size();
      m.tensors.push_back(std::move(t));
    }
    found.push_back(std::move(f));
  }

  // A key (with its key path) claimed by two directories: which one holds it is unknown.
  std::vector<std::size_t> by_key(found.size());
  std::iota(by_key.begin(), by_key.end(), std::size_t{0});
  std::sort(by_key.begin(), by_key.end(),
            [&](std::size_t a, std::size_t b) { return key_order(found[a], found[b]); });
  for (std::size_t i = 1; i < by_key.size(); ++i) {
    const Found& a = found[by_key[i - 1]];
    const Found& b = found[by_key[i]];
    if (a.entry.key == b.entry.key && a.entry.key_path == b.entry.key_path) {
      throw Error(ExitCode::bad_checkpoint,
                  fmt::format("key {} is claimed by two directories, {} and {}", quote(a.entry.key),
                              quote(a.directory), quote(b.directory)));
    }
  }
  link_quantization(found, m);

  // index.json's order for the directories it names, then the others by key.
  auto position = [&](const Found& f) {
    auto it = index.entries.find(f.directory);
    return it == index.entries.end() ? std::numeric_limits<std::size_t>::max()
                                     : it->second.position;
  };
  std::stable_sort(found.begin(), found.end(), [&](const Found& a, const Found& b) {
    const std::size_t pa = position(a), pb = position(b);
    return pa != pb ? pa < pb : key_order(a, b);
  });
  m.entries.reserve(found.size());
  for (Found& f : found) m.entries.push_back(std::move(f.entry));
  m.root = root_of(index, m.entries);
  return out;
}

}  // namespace ckptfs
