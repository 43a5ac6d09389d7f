// SPDX-License-Identifier: MIT
// read_onnx(): ModelProto -> GraphProto -> NodeProto -> AttributeProto -> GraphProto... walked with
// an explicit stack; each TensorProto read field by field, its bytes located (raw_data, an
// external file) or its typed field counted and indexed for decoding on read.
#include <ckptfs/base/error.hpp>
#include <ckptfs/base/text.hpp>
#include <ckptfs/format/impostor.hpp>
#include <ckptfs/format/onnx/onnx_decoded_source.hpp>
#include <ckptfs/format/onnx/onnx_reader.hpp>
#include <ckptfs/format/onnx/protobuf_wire.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>

namespace ckptfs {
namespace {

using protobuf::Tag;
using protobuf::WireReader;
using protobuf::WireType;

// TensorProto's typed fields (onnx.proto).
constexpr std::uint32_t float_data = 4;
constexpr std::uint32_t int32_data = 5;
constexpr std::uint32_t string_data = 6;
constexpr std::uint32_t int64_data = 7;
constexpr std::uint32_t double_data = 10;
constexpr std::uint32_t uint64_data = 11;

std::string_view field_name(std::uint32_t field) {
  switch (field) {
    case float_data:
      return "float_data";
    case int32_data:
      return "int32_data";
    case string_data:
      return "string_data";
    case int64_data:
      return "int64_data";
    case double_data:
      return "double_data";
    case uint64_data:
      return "uint64_data";
    default:
      return "";
  }
}

// A TensorProto data type: what it is served as, and how its typed field holds it (onnx's
// helper.tensor_dtype_to_field and numpy_helper.to_array, which keeps each value's low bytes).
struct OnnxType {
  std::string_view name;
  std::optional<DType> dtype;       // served; none for STRING (a value) and UNDEFINED
  std::uint32_t field;              // the typed field
  WireType wire;                    // of its values
  std::uint8_t value_bytes;         // low bytes of each typed value served (a sub-byte type: 1)
  std::uint8_t sub_bits;            // 4 or 2: elements packed 2 or 4 a byte, served one a byte
  bool sign_extend;                 // INT4, INT2
  std::uint8_t values_per_element;  // complex: 2 (real, imaginary)
};

constexpr WireType varint = WireType::varint;
constexpr std::array<OnnxType, 27> types{{
    {"UNDEFINED", std::nullopt, 0, varint, 0, 0, false, 1},
    {"FLOAT", DType::float32, float_data, WireType::fixed32, 4, 0, false, 1},
    {"UINT8", DType::uint8, int32_data, varint, 1, 0, false, 1},
    {"INT8", DType::int8, int32_data, varint, 1, 0, false, 1},
    {"UINT16", DType::uint16, int32_data, varint, 2, 0, false, 1},
    {"INT16", DType::int16, int32_data, varint, 2, 0, false, 1},
    {"INT32", DType::int32, int32_data, varint, 4, 0, false, 1},
    {"INT64", DType::int64, int64_data, varint, 8, 0, false, 1},
    {"STRING", std::nullopt, string_data, WireType::length, 0, 0, false, 1},
    {"BOOL", DType::boolean, int32_data, varint, 1, 0, false, 1},
    {"FLOAT16", DType::float16, int32_data, varint, 2, 0, false, 1},
    {"DOUBLE", DType::float64, double_data, WireType::fixed64, 8, 0, false, 1},
    {"UINT32", DType::uint32, uint64_data, varint, 4, 0, false, 1},
    {"UINT64", DType::uint64, uint64_data, varint, 8, 0, false, 1},
    {"COMPLEX64", DType::complex64, float_data, WireType::fixed32, 4, 0, false, 2},
    {"COMPLEX128", DType::complex128, double_data, WireType::fixed64, 8, 0, false, 2},
    {"BFLOAT16", DType::bfloat16, int32_data, varint, 2, 0, false, 1},
    {"FLOAT8E4M3FN", DType::float8_e4m3fn, int32_data, varint, 1, 0, false, 1},
    {"FLOAT8E4M3FNUZ", DType::float8_e4m3fnuz, int32_data, varint, 1, 0, false, 1},
    {"FLOAT8E5M2", DType::float8_e5m2, int32_data, varint, 1, 0, false, 1},
    {"FLOAT8E5M2FNUZ", DType::float8_e5m2fnuz, int32_data, varint, 1, 0, false, 1},
    {"UINT4", DType::uint8, int32_data, varint, 1, 4, false, 1},
    {"INT4", DType::int8, int32_data, varint, 1, 4, true, 1},
    {"FLOAT4E2M1", DType::uint8, int32_data, varint, 1, 4, false, 1},
    {"FLOAT8E8M0", DType::float8_e8m0fnu, int32_data, varint, 1, 0, false, 1},
    {"UINT2", DType::uint8, int32_data, varint, 1, 2, false, 1},
    {"INT2", DType::int8, int32_data, varint, 1, 2, true, 1},
}};
constexpr std::int64_t string_type = 8;

// How a data type numpy lacks is served (meta.json's onnx.served_as); empty for numpy's own.
std::string_view served_as_note(std::int64_t id) {
  switch (id) {
    case 16:  // BFLOAT16
      return "its bits: numpy has no bfloat16, tensor.npy holds them as uint16 (<u2); "
             "tensor.pt and model.safetensors as bfloat16";
    case 17:  // FLOAT8E4M3FN
    case 18:  // FLOAT8E4M3FNUZ
    case 19:  // FLOAT8E5M2
    case 20:  // FLOAT8E5M2FNUZ
    case 24:  // FLOAT8E8M0
      return "its bits: numpy has no float8, tensor.npy holds them as uint8 (|u1); tensor.pt "
             "and model.safetensors as torch's float8 dtype";
    case 23:  // FLOAT4E2M1
      return "its 4-bit E2M1 codes, one element a byte (the low 4 bits): numpy and torch have "
             "no float4 of one element";
    case 21:  // UINT4
    case 25:  // UINT2
      return "uint8 values, one element a byte (numpy and torch have no 4-bit or 2-bit "
             "integers)";
    case 22:  // INT4
    case 26:  // INT2
      return "int8 values, one element a byte, sign-extended (numpy and torch have no 4-bit or "
             "2-bit integers)";
    default:
      return {};
  }
}

const OnnxType* type_of(std::int64_t id) {
  if (id <= 0 || id >= static_cast<std::int64_t>(types.size())) return nullptr;
  return &types[static_cast<std::size_t>(id)];
}

// What one TensorProto holds, read field by field (the last of a singular field wins, as in
// protobuf); its bytes are located, not read.
struct TensorFields {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::vector<std::int64_t> dims;
  bool too_many_dims = false;
  std::int64_t data_type = 0;
  std::string name;
  bool segment = false;
  bool has_raw = false;
  std::uint64_t raw_position = 0;
  std::uint64_t raw_length = 0;
  bool external = false;  // data_location EXTERNAL
  std::vector<std::pair<std::string, std::string>> external_data;
  // Per typed field number: how often it occurs (a packed run or a single value each), and its
  // first packed run (a fixed-width field in one run is one range of the file).
  struct Seen {
    std::uint64_t occurrences = 0;
    std::uint64_t first_position = 0;
    std::uint64_t first_length = 0;
    bool first_packed = false;
  };
  std::array<Seen, 12> seen{};
  std::string problem;  // the TensorProto is no valid protobuf: the tensor is broken with this
};

// The longest external_data value kept (a location is a path: PATH_MAX).
constexpr std::size_t max_external_value = 4096;

std::int64_t as_int64(std::uint64_t v) { return static_cast<std::int64_t>(v); }

// A small string field (a name, a key), at most `max` bytes, else Error(unsupported) saying
// `what`.
std::string read_string(WireReader& r, std::uint64_t max, std::string_view what) {
  const std::uint64_t n = r.length();
  if (n > max) {
    throw Error(ExitCode::unsupported, fmt::format("byte {}: {} of {} bytes, over the limit of {}",
                                                   r.position(), what, n, max));
  }
  return std::string(r.bytes(static_cast<std::size_t>(n)));
}

class Reader {
 public:
  Reader(const ByteSource& source, const std::string& source_name, const OnnxMemberOpener& open,
         const OnnxLimits& limits)
      : source_(source), open_(open), limits_(limits), r_(source, 0, source.size()) {
    out_.model.format = Format::onnx;
    out_.model.tensor_notes_key = "onnx";
    out_.model.sources.push_back(source_name);
    decoded_.emplace_back();  // the .onnx's own
  }

  OnnxModel read();

 private:
  enum class Kind : std::uint8_t { model, graph, node, attribute };
  struct Frame {
    Kind kind;
    std::uint64_t end;
    std::string path;         // graph: its path; node: its graph's path and index; attribute:
                              // the node's path and the attribute's name
    std::uint64_t count = 0;  // graph: nodes seen; attribute: graphs seen (its `graphs`)
    std::uint32_t graph = 0;  // the graph's ordinal (entries are grouped by graph, in order)
  };

  void walk();
  void read_model_field(const Tag& tag, std::vector<Frame>& stack);
  void read_metadata_entry(bool opset);
  void add_metadata(std::string key, std::string value);
  void add_json_metadata(std::string key, std::string type, std::string json);
  void push(std::vector<Frame>& stack, Frame frame);

  TensorFields read_tensor_fields(std::uint64_t end);
  void read_tensor_fields_into(TensorFields& t);
  void read_external_entry(TensorFields& t);
  void add_initializer(const std::string& graph_path, std::uint32_t graph);
  void add_sparse_initializer(const std::string& graph_path, std::uint32_t graph);
  // Adds the tensor (or STRING value) of `t` under `key`; `sparse` is its part's JSON note.
  void add_tensor(TensorFields& t, std::string key, std::string key_path,
                  const std::string& graph_path, std::uint32_t graph, const std::string& sparse);
  void add_string_value(TensorFields& t, Entry& e);
  std::optional<std::uint32_t> external_source(const std::string& location, std::string& why);
  void charge_names(std::uint64_t bytes);

  const ByteSource& source_;
  const OnnxMemberOpener& open_;
  const OnnxLimits& limits_;
  WireReader r_;
  OnnxModel out_;
  std::vector<std::uint32_t> entry_graph_;  // per entry, its graph's ordinal
  std::uint32_t graphs_ = 1;                // subgraphs seen, the main graph 0
  std::uint64_t names_bytes_ = 0;
  std::uint64_t metadata_bytes_ = 0;
  std::set<std::string, std::less<>> metadata_keys_;  // the first of a key is kept
  std::uint64_t strings_bytes_ = 0;
  std::uint64_t tensors_ = 0;
  // External files by location: their index into out_.sources (Model::sources[index + 1]), or
  // why they cannot be opened.
  struct External {
    std::optional<std::uint32_t> index;
    std::string why;
  };
  std::map<std::string, External, std::less<>> externals_;
  // Per source (0: the .onnx, i: out_.sources[i - 1]), the tensors decoded on read from it and
  // the storages to point at their OnnxDecodedSource once its index is known.
  struct Decoded {
    std::vector<EncodedTensor> tensors;
    std::vector<std::size_t> storages;
    std::uint64_t size = 0;
  };
  std::vector<Decoded> decoded_;
};

void Reader::charge_names(std::uint64_t bytes) {
  names_bytes_ += bytes;
  if (names_bytes_ > limits_.max_names_json_bytes) {
    throw Error(ExitCode::unsupported,
                fmt::format("its initializers' names take more than {} bytes as JSON (at byte {})",
                            limits_.max_names_json_bytes, r_.position()));
  }
}

void Reader::add_metadata(std::string key, std::string value) {
  if (!metadata_keys_.insert(key).second) return;  // index.json's metadata is an object
  metadata_bytes_ += json_escaped_size(key) + json_escaped_size(value) + 6;
  if (metadata_bytes_ > limits_.max_metadata_json_bytes) {
    throw Error(ExitCode::unsupported,
                fmt::format("its metadata take more than {} bytes as JSON (at byte {})",
                            limits_.max_metadata_json_bytes, r_.position()));
  }
  out_.model.metadata.emplace_back(std::move(key), std::move(value));
}

void Reader::add_json_metadata(std::string key, std::string type, std::string json) {
  if (!metadata_keys_.insert(key).second) return;
  metadata_bytes_ += json_escaped_size(key) + json.size() + type.size() + 12;
  if (metadata_bytes_ > limits_.max_metadata_json_bytes) {
    throw Error(ExitCode::unsupported,
                fmt::format("its metadata take more than {} bytes as JSON (at byte {})",
                            limits_.max_metadata_json_bytes, r_.position()));
  }
  out_.model.json_metadata.push_back({std::move(key), std::move(type), std::move(json)});
}

void Reader::push(std::vector<Frame>& stack, Frame frame) {
  if (stack.size() >= limits_.max_depth) {
    throw Error(ExitCode::bad_checkpoint,
                fmt::format("byte {}: messages nested more than {} deep (graphs within nodes "
                            "within graphs...)",
                            r_.position(), limits_.max_depth));
  }
  stack.push_back(std::move(frame));
}

// An OperatorSetIdProto (opset_import: domain 1, version 2) or a StringStringEntryProto
// (metadata_props: key 1, value 2), the reader at its first byte and its limit its end.
void Reader::read_metadata_entry(bool opset) {
  std::string key;
  std::string value;
  std::int64_t version = 0;
  const std::uint64_t budget = limits_.max_metadata_json_bytes;
  while (!r_.at_limit()) {
    const Tag tag = r_.tag();
    if (tag.field == 1 && tag.type == WireType::length) {
      key = read_string(r_, budget, "a metadata string");
    } else if (tag.field == 2 && opset && tag.type == WireType::varint) {
      version = as_int64(r_.varint());
    } else if (tag.field == 2 && !opset && tag.type == WireType::length) {
      value = read_string(r_, budget, "a metadata string");
    } else {
      r_.skip(tag);
    }
  }
  if (opset) {
    // One entry per domain ("" is the default domain, ai.onnx), its version.
    std::string k = "opset_import";
    if (!key.empty()) k += "." + key;
    add_json_metadata(std::move(k), "INT64", std::to_string(version));
  } else {
    add_metadata(std::move(key), std::move(value));
  }
}

void Reader::read_model_field(const Tag& tag, std::vector<Frame>& stack) {
  const std::uint64_t budget = limits_.max_metadata_json_bytes;
  if (tag.type == WireType::varint && (tag.field == 1 || tag.field == 5)) {
    add_json_metadata(tag.field == 1 ? "ir_version" : "model_version", "INT64",
                      std::to_string(as_int64(r_.varint())));
    return;
  }
  if (tag.type != WireType::length) {
    r_.skip(tag);
    return;
  }
  switch (tag.field) {
    case 2:
      add_metadata("producer_name", read_string(r_, budget, "producer_name"));
      return;
    case 3:
      add_metadata("producer_version", read_string(r_, budget, "producer_version"));
      return;
    case 4:
      add_metadata("domain", read_string(r_, budget, "domain"));
      return;
    case 6:
      add_metadata("doc_string", read_string(r_, budget, "doc_string"));
      return;
    case 7: {  // graph
      const std::uint64_t n = r_.length();
      // Ordinal 0: a second graph field is the same graph, merged, as protobuf reads it.
      push(stack, {Kind::graph, r_.position() + n, "graph", 0, 0});
      return;
    }
    case 8:     // opset_import
    case 14: {  // metadata_props
      const std::uint64_t n = r_.length();
      r_.set_limit(r_.position() + n);
      read_metadata_entry(tag.field == 8);
      r_.set_limit(stack.back().end);
      return;
    }
    default:
      r_.skip(tag);  // functions, training_info...: no initializers of the graph
  }
}

void Reader::walk() {
  std::vector<Frame> stack;
  stack.push_back({Kind::model, source_.size(), "", 0, 0});
  while (!stack.empty()) {
    Frame& top = stack.back();
    r_.set_limit(top.end);
    if (r_.at_limit()) {
      stack.pop_back();
      continue;
    }
    const Tag tag = r_.tag();
    if (top.kind == Kind::model) {
      read_model_field(tag, stack);
      continue;
    }
    if (tag.type != WireType::length) {
      r_.skip(tag);
      continue;
    }
    switch (top.kind) {
      case Kind::graph:
        if (tag.field == 1) {  // node
          const std::uint64_t n = r_.length();
          Frame node{Kind::node, r_.position() + n,
                     fmt::format("{}/node[{}]", top.path, top.count++), 0, top.graph};
          push(stack, std::move(node));
        } else if (tag.field == 5) {  // initializer
          add_initializer(top.path, top.graph);
        } else if (tag.field == 15) {  // sparse_initializer
          add_sparse_initializer(top.path, top.graph);
        } else {
          r_.skip(tag);
        }
        break;
      case Kind::node:
        if (tag.field == 5) {  // attribute
          const std::uint64_t n = r_.length();
          push(stack, {Kind::attribute, r_.position() + n, top.path, 0, top.graph});
        } else {
          r_.skip(tag);
        }
        break;
      case Kind::attribute:
        if (tag.field == 1) {  // name: comes first, as writers order fields
          const std::uint64_t n = r_.length();
          if (n > 256) {
            r_.skip_bytes(n);
            top.path += "/(a long name)";
          } else {
            top.path += "/" + escape_for_terminal(r_.bytes(static_cast<std::size_t>(n)), 64);
          }
        } else if (tag.field == 6 || tag.field == 11) {  // g, graphs
          const std::uint64_t n = r_.length();
          std::string path =
              tag.field == 6 ? top.path : fmt::format("{}[{}]", top.path, top.count++);
          push(stack, {Kind::graph, r_.position() + n, std::move(path), 0, graphs_++});
        } else {
          r_.skip(tag);
        }
        break;
      case Kind::model:
        break;
    }
  }
}

void Reader::read_external_entry(TensorFields& t) {
  std::string key;
  std::string value;
  bool too_long = false;
  while (!r_.at_limit()) {
    const Tag tag = r_.tag();
    if ((tag.field == 1 || tag.field == 2) && tag.type == WireType::length) {
      const std::uint64_t n = r_.length();
      if (n > max_external_value) {
        too_long = true;
        r_.skip_bytes(n);
        continue;
      }
      (tag.field == 1 ? key : value) = std::string(r_.bytes(static_cast<std::size_t>(n)));
    } else {
      r_.skip(tag);
    }
  }
  if (too_long) {
    t.problem =
        fmt::format("an external_data key or value of more than {} bytes", max_external_value);
    return;
  }
  if (key == "location" || key == "offset" || key == "length" || key == "checksum") {
    // As onnx's ExternalDataInfo sets attributes: the last of a key wins.
    for (auto& kv : t.external_data) {
      if (kv.first == key) {
        kv.second = std::move(value);
        return;
      }
    }
    t.external_data.emplace_back(std::move(key), std::move(value));
  }
}

void Reader::read_tensor_fields_into(TensorFields& t) {
  r_.set_limit(t.end);
  while (!r_.at_limit()) {
    const Tag tag = r_.tag();
    const std::uint64_t at = r_.position();
    switch (tag.field) {
      case 1:  // dims: single varints, or packed
        if (tag.type == WireType::varint) {
          const std::int64_t d = as_int64(r_.varint());
          if (t.dims.size() < limits_.max_dims) {
            t.dims.push_back(d);
          } else {
            t.too_many_dims = true;
          }
          continue;
        }
        if (tag.type == WireType::length) {
          const std::uint64_t n = r_.length();
          r_.set_limit(r_.position() + n);
          while (!r_.at_limit()) {
            const std::int64_t d = as_int64(r_.varint());
            if (t.dims.size() < limits_.max_dims) {
              t.dims.push_back(d);
            } else {
              t.too_many_dims = true;
            }
          }
          r_.set_limit(t.end);
          continue;
        }
        break;
      case 2:  // data_type (int32: a varint's low 32 bits, as protobuf reads it)
        if (tag.type == WireType::varint) {
          t.data_type = static_cast<std::int32_t>(static_cast<std::uint32_t>(r_.varint()));
          continue;
        }
        break;
      case 3:  // segment: its bytes do not matter, to_array refuses any
        if (tag.type == WireType::length) t.segment = true;
        break;
      case 8:  // name
        if (tag.type == WireType::length) {
          const std::uint64_t n = r_.length();
          if (n > limits_.max_names_json_bytes) charge_names(n);  // refused
          t.name = std::string(r_.bytes(static_cast<std::size_t>(n)));
          continue;
        }
        break;
      case 9:  // raw_data
        if (tag.type == WireType::length) {
          t.raw_length = r_.length();
          t.raw_position = r_.position();
          t.has_raw = true;
          r_.skip_bytes(t.raw_length);
          continue;
        }
        break;
      case 13:  // external_data: StringStringEntryProto
        if (tag.type == WireType::length) {
          const std::uint64_t n = r_.length();
          r_.set_limit(r_.position() + n);
          read_external_entry(t);
          r_.set_limit(t.end);
          continue;
        }
        break;
      case 14:  // data_location
        if (tag.type == WireType::varint) {
          t.external = static_cast<std::int32_t>(static_cast<std::uint32_t>(r_.varint())) == 1;
          continue;
        }
        break;
      case float_data:
      case int32_data:
      case string_data:
      case int64_data:
      case double_data:
      case uint64_data: {
        TensorFields::Seen& s = t.seen[tag.field];
        if (s.occurrences++ == 0) {
          s.first_packed = tag.type == WireType::length;
          s.first_position = at;
          if (s.first_packed) {
            s.first_length = r_.length();
            s.first_position = r_.position();
            r_.skip_bytes(s.first_length);
            continue;
          }
        }
        break;
      }
      default:
        break;
    }
    r_.skip(tag);
  }
}

TensorFields Reader::read_tensor_fields(std::uint64_t end) {
  TensorFields t;
  t.begin = r_.position();
  t.end = end;
  try {
    read_tensor_fields_into(t);
  } catch (const Error& e) {
    if (e.code() != ExitCode::bad_checkpoint) throw;
    t.problem = fmt::format("its TensorProto (bytes {} to {}) is no valid protobuf: {}", t.begin,
                            t.end, e.what());
  }
  r_.set_limit(t.end);
  r_.seek(t.end);
  return t;
}

void Reader::add_initializer(const std::string& graph_path, std::uint32_t graph) {
  const std::uint64_t n = r_.length();
  TensorFields t = read_tensor_fields(r_.position() + n);
  std::string key = t.name;
  add_tensor(t, std::move(key), "", graph_path, graph, "");
}

void Reader::add_sparse_initializer(const std::string& graph_path, std::uint32_t graph) {
  const std::uint64_t n = r_.length();
  const std::uint64_t end = r_.position() + n;
  const std::uint64_t outer = r_.limit();
  // SparseTensorProto: values (1) and indices (2), TensorProtos; dims (3), the dense shape.
  std::optional<TensorFields> values;
  std::optional<TensorFields> indices;
  std::vector<std::int64_t> dims;
  bool too_many_dims = false;
  std::string problem;
  try {
    r_.set_limit(end);
    while (!r_.at_limit()) {
      const Tag tag = r_.tag();
      if ((tag.field == 1 || tag.field == 2) && tag.type == WireType::length) {
        const std::uint64_t m = r_.length();
        (tag.field == 1 ? values : indices) = read_tensor_fields(r_.position() + m);
        r_.set_limit(end);
      } else if (tag.field == 3 && tag.type == WireType::varint) {
        if (dims.size() < limits_.max_dims) {
          dims.push_back(as_int64(r_.varint()));
        } else {
          r_.varint();
          too_many_dims = true;
        }
      } else if (tag.field == 3 && tag.type == WireType::length) {
        const std::uint64_t m = r_.length();
        r_.set_limit(r_.position() + m);
        while (!r_.at_limit()) {
          const std::int64_t d = as_int64(r_.varint());
          if (dims.size() < limits_.max_dims) {
            dims.push_back(d);
          } else {
            too_many_dims = true;
          }
        }
        r_.set_limit(end);
      } else {
        r_.skip(tag);
      }
    }
  } catch (const Error& e) {
    if (e.code() != ExitCode::bad_checkpoint) throw;
    problem = fmt::format("its SparseTensorProto (bytes {} to {}) is no valid protobuf: {}",
                          end - n, end, e.what());
  }
  r_.set_limit(outer);
  r_.seek(end);
  // The sparse tensor's name is its values' (onnx.proto).
  const std::string name = values ? values->name : indices ? indices->name : std::string();
  std::string dims_json = "null";
  if (!too_many_dims) dims_json = fmt::format("[{}]", fmt::join(dims, ","));
  for (const bool is_values : {true, false}) {
    std::optional<TensorFields>& part = is_values ? values : indices;
    const std::string_view part_name = is_values ? "values" : "indices";
    if (!part) {
      part.emplace();
      part->problem = fmt::format("the sparse initializer has no {} tensor", part_name);
    }
    if (!problem.empty()) part->problem = problem;
    std::string key_path = "[";
    append_json_string(key_path, name);
    key_path += fmt::format(",{{\"__part__\":\"{}\"}}]", part_name);
    add_tensor(*part, name + "." + std::string(part_name), std::move(key_path), graph_path, graph,
               fmt::format("{{\"dims\":{},\"part\":\"{}\"}}", dims_json, part_name));
  }
}

// Whether `text` is a decimal integer in [0, 2^63): what offset and length must be (onnx's
// int() takes more, such as " 12" or "+1"; no writer writes those).
std::optional<std::uint64_t> decimal(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
  return v;
}

// `location` as a name relative to the model's directory: "." and empty components dropped (as
// onnx's lexically_normal() drops them); nullopt for an absolute path, a "..", a NUL, or nothing.
std::optional<std::string> relative_location(std::string_view location) {
  if (location.empty() || location.front() == '/' ||
      location.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  std::string out;
  std::size_t at = 0;
  while (at <= location.size()) {
    std::size_t slash = location.find('/', at);
    if (slash == std::string_view::npos) slash = location.size();
    const std::string_view part = location.substr(at, slash - at);
    at = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") return std::nullopt;
    if (!out.empty()) out += '/';
    out += part;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<std::uint32_t> Reader::external_source(const std::string& location,
                                                     std::string& why) {
  auto it = externals_.find(location);
  if (it == externals_.end()) {
    External e;
    if (externals_.size() >= limits_.max_external_files) {
      why = fmt::format("in more than {} external data files", limits_.max_external_files);
      return std::nullopt;
    }
    try {
      std::unique_ptr<ByteSource> file = open_(location);
      e.index = static_cast<std::uint32_t>(out_.sources.size());
      out_.sources.push_back(std::move(file));
      out_.model.sources.push_back(location);
      decoded_.emplace_back();
    } catch (const Error& error) {
      e.why = fmt::format("its external data file {}: {}", quote(location), error.what());
    }
    it = externals_.emplace(location, std::move(e)).first;
  }
  why = it->second.why;
  return it->second.index;
}

void Reader::add_string_value(TensorFields& t, Entry& e) {
  // Counted first: as many strings as the shape has elements, else the tensor is broken.
  std::uint64_t numel = 1;
  for (const std::int64_t d : t.dims) numel *= static_cast<std::uint64_t>(d);  // checked
  const auto for_each_string = [&](auto visit) {
    r_.seek(t.begin);
    r_.set_limit(t.end);
    while (!r_.at_limit()) {
      const Tag tag = r_.tag();
      if (tag.field != string_data || tag.type != WireType::length) {
        r_.skip(tag);
        continue;
      }
      visit(r_.length());
    }
    r_.seek(t.end);
  };
  std::uint64_t count = 0;
  for_each_string([&](std::uint64_t n) {
    ++count;
    r_.skip_bytes(n);
  });
  if (count != numel) {
    t.problem = fmt::format("a STRING tensor of {} strings, but its shape [{}] holds {}", count,
                            fmt::join(t.dims, ", "), numel);
    return;
  }
  // Then written nested by the shape ([["a", "b"], ["c", "d"]]; a 0-d tensor's one string), the
  // JSON charged before it is made. A shape with a 0 is arrays of empty arrays down to it
  // ([2, 0, 3]: [[], []]).
  std::vector<std::int64_t> shape = t.dims;
  const auto zero = std::find(shape.begin(), shape.end(), 0);
  const bool empty = zero != shape.end();
  shape.erase(zero, shape.end());
  std::string json;
  const auto charge = [&](std::uint64_t bytes) {
    if (bytes > limits_.max_strings_json_bytes - strings_bytes_) {
      throw Error(ExitCode::unsupported,
                  fmt::format("its STRING tensors take more than {} bytes as JSON (at {})",
                              limits_.max_strings_json_bytes, quote(t.name)));
    }
    strings_bytes_ += bytes;
  };
  const auto write = [&](std::string_view text) {
    charge(text.size());
    json += text;
  };
  // Before element i > 0: as many arrays closed and opened again as dimensions wrap there.
  std::uint64_t i = 0;
  const auto separate = [&] {
    if (i++ == 0) return;
    std::size_t wraps = 0;
    std::uint64_t span = 1;
    for (std::size_t d = shape.size(); d-- > 1;) {
      span *= static_cast<std::uint64_t>(shape[d]);
      if ((i - 1) % span != 0) break;
      ++wraps;
    }
    write(std::string(wraps, ']') + "," + std::string(wraps, '['));
  };
  if (empty && shape.empty()) {
    write("[]");
  } else {
    write(std::string(shape.size(), '['));
    if (empty) {
      std::uint64_t outer = 1;
      for (const std::int64_t d : shape) outer *= static_cast<std::uint64_t>(d);
      for (std::uint64_t k = 0; k < outer; ++k) {
        separate();
        write("[]");
      }
    } else {
      for_each_string([&](std::uint64_t n) {
        charge(n);  // at least its bytes, before they are read
        const std::string_view text = r_.bytes(static_cast<std::size_t>(n));
        strings_bytes_ -= n;
        separate();
        std::string quoted = "\"";
        append_json_escaped(quoted, text);
        quoted += '"';
        write(quoted);
      });
    }
    write(std::string(shape.size(), ']'));
  }
  e.kind = Entry::Kind::value;
  e.value_json = std::move(json);
}

void Reader::add_tensor(TensorFields& t, std::string key, std::string key_path,
                        const std::string& graph_path, std::uint32_t graph,
                        const std::string& sparse) {
  if (++tensors_ > limits_.max_tensors) {
    throw Error(ExitCode::unsupported, fmt::format("more than {} initializers (at byte {})",
                                                   limits_.max_tensors, r_.position()));
  }
  charge_names(json_escaped_size(key) + json_escaped_size(key_path) + graph_path.size() + 64);
  Model& m = out_.model;
  Entry e;
  e.key = std::move(key);
  e.key_path = std::move(key_path);
  e.kind = Entry::Kind::tensor;
  e.tensor = m.tensors.size();
  Tensor tensor;
  tensor.dtype = DType::uint8;
  const OnnxType* type = type_of(t.data_type);

  // The shape: dims in C order, each in [0, 2^63).
  std::string& broken = tensor.broken;
  if (!t.problem.empty()) broken = t.problem;
  if (broken.empty() && t.too_many_dims) {
    broken = fmt::format("more than {} dimensions", limits_.max_dims);
  }
  for (const std::int64_t d : t.dims) {
    if (broken.empty() && d < 0) broken = fmt::format("a negative dimension ({})", d);
  }
  if (broken.empty()) tensor.shape = t.dims;
  if (broken.empty() && type == nullptr) {
    broken = t.data_type == 0 ? "its data_type is UNDEFINED (0)"
                              : fmt::format("an unknown data_type ({})", t.data_type);
  }
  if (broken.empty() && t.segment) {
    broken = "it is stored in segments (TensorProto.segment), which onnx's to_array does not read";
  }
  if (type != nullptr && type->dtype) tensor.dtype = *type->dtype;
  tensor.stride.assign(tensor.shape.size(), 1);
  for (std::size_t d = tensor.shape.size(); d-- > 1;) {
    if (__builtin_mul_overflow(tensor.stride[d], std::max<std::int64_t>(tensor.shape[d], 1),
                               &tensor.stride[d - 1])) {
      tensor.stride[d - 1] = 0;
    }
  }
  std::uint64_t numel = 1;
  for (const std::int64_t d : tensor.shape) {
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel)) {
      if (broken.empty()) broken = "a shape of more elements than 64 bits count";
    }
  }
  if (broken.empty() && type != nullptr && type->dtype &&
      (numel > max_tensor_bytes / info(*type->dtype).element_size)) {
    broken = "a shape with more bytes than a file can hold";
  }

  // Where its bytes are.
  std::string stored_in = "null";
  std::string external_json = "null";
  std::string decoded_note;
  if (broken.empty() && t.data_type == string_type) {
    add_string_value(t, e);
    stored_in = "\"string_data\"";
    broken = t.problem;
  } else if (broken.empty()) {
    const std::uint64_t nbytes = numel * info(tensor.dtype).element_size;
    // Bytes the stored form takes: sub-byte types packed, the others as served.
    const std::uint64_t packed_bytes = type->sub_bits ? (numel * type->sub_bits + 7) / 8 : nbytes;
    std::optional<std::uint32_t> source;  // the source holding the stored bytes (index)
    std::uint64_t position = 0;           // where they start there, with raw_data or external
    bool raw = false;
    std::uint64_t length = 0;
    if (t.external) {
      std::string location;
      std::optional<std::uint64_t> offset = 0;
      std::optional<std::uint64_t> given_length;
      std::string checksum_json = "null";
      bool has_location = false;
      bool bad_number = false;
      for (const auto& [k, v] : t.external_data) {
        if (k == "location") {
          location = v;
          has_location = true;
        } else if (k == "offset") {
          offset = decimal(v);
          bad_number = bad_number || !offset;
        } else if (k == "length") {
          given_length = decimal(v);
          bad_number = bad_number || !given_length;
        } else if (k == "checksum") {
          checksum_json.clear();
          append_json_string(checksum_json, v);
        }
      }
      std::string location_json;
      append_json_string(location_json, location);
      external_json =
          fmt::format("{{\"location\":{},\"offset\":{},\"length\":{},\"checksum\":{}}}",
                      location_json, offset ? std::to_string(*offset) : "null",
                      given_length ? std::to_string(*given_length) : "null", checksum_json);
      stored_in = "\"external\"";
      const auto name = relative_location(location);
      if (!has_location) {
        broken =
            "its data is external (data_location EXTERNAL), but external_data has no "
            "location";
      } else if (bad_number) {
        broken = "external_data's offset or length is not a decimal number";
      } else if (!name) {
        broken = fmt::format(
            "its external data file {} is not a path relative to the model's directory (an "
            "absolute path or a \"..\"), which onnx refuses too",
            quote(location));
      } else if (given_length && *given_length != packed_bytes) {
        broken = fmt::format(
            "its external data is {} bytes, but a {} tensor of shape [{}] "
            "takes {}",
            *given_length, type->name, fmt::join(tensor.shape, ", "), packed_bytes);
      } else if (const auto index = external_source(*name, broken)) {
        const ByteSource& file = *out_.sources[*index];
        if (!file.contains(*offset, packed_bytes)) {
          broken = fmt::format(
              "its external data, bytes {} to {} of {}, lie past its end ({} "
              "bytes)",
              *offset, *offset + packed_bytes, quote(*name), file.size());
          try {
            // Raw bytes: only a text impostor (a Git LFS pointer, an HTML page) is told.
            refuse_impostor(file, ImpostorCheck::text_only);
          } catch (const Error& error) {
            broken = fmt::format("its external data file {}: {}", quote(*name), error.what());
          }
        } else {
          source = *index + 1;
          position = *offset;
          length = packed_bytes;
          raw = true;
        }
      }
    } else if (t.has_raw) {
      stored_in = "\"raw_data\"";
      if (t.raw_length != packed_bytes) {
        broken = fmt::format("its raw_data is {} bytes, but a {} tensor of shape [{}] takes {}",
                             t.raw_length, type->name, fmt::join(tensor.shape, ", "), packed_bytes);
      } else {
        source = 0;
        position = t.raw_position;
        length = packed_bytes;
        raw = true;
      }
    } else {
      // A typed field: its values in order, as many as the tensor has (complex: two each;
      // sub-byte types: a byte per 2 or 4 elements).
      stored_in = fmt::format("\"{}\"", field_name(type->field));
      const std::uint64_t expected =
          type->sub_bits ? packed_bytes : numel * type->values_per_element;
      const TensorFields::Seen& seen = t.seen[type->field];
      const std::size_t width = type->wire == WireType::fixed32   ? 4
                                : type->wire == WireType::fixed64 ? 8
                                                                  : 0;
      if (width != 0 && seen.occurrences == 1 && seen.first_packed) {
        // One packed run of little-endian values, as served: a range of the file.
        if (seen.first_length != expected * width) {
          broken = fmt::format("its {} holds {} bytes, but a {} tensor of shape [{}] takes {}",
                               field_name(type->field), seen.first_length, type->name,
                               fmt::join(tensor.shape, ", "), expected * width);
        } else {
          source = 0;
          position = seen.first_position;
          length = nbytes;
        }
      } else if (expected == 0 && seen.occurrences == 0) {
        source = 0;  // empty
      } else {
        EncodedTensor enc;
        enc.kind = EncodedTensor::Kind::field;
        enc.begin = t.begin;
        enc.end = t.end;
        enc.field = type->field;
        enc.wire = type->wire;
        enc.value_bytes = type->value_bytes;
        enc.sub_bits = type->sub_bits;
        enc.sign_extend = type->sign_extend;
        if (std::string why = index_field(source_, enc); !why.empty()) {
          broken = fmt::format("its {} is no valid protobuf: {}", field_name(type->field), why);
        } else if (enc.values != expected) {
          broken = fmt::format("its {} holds {} values, but a {} tensor of shape [{}] needs {}",
                               field_name(type->field), enc.values, type->name,
                               fmt::join(tensor.shape, ", "), expected);
        } else {
          enc.size = nbytes;
          Decoded& d = decoded_[0];
          enc.offset = d.size;
          d.size += nbytes;
          d.storages.push_back(m.storages.size());
          d.tensors.push_back(std::move(enc));
          decoded_note = type->sub_bits
                             ? fmt::format(
                                   "{}'s values, each a byte of {} {}-bit elements, "
                                   "unpacked one a byte on read",
                                   field_name(type->field), 8 / type->sub_bits, type->sub_bits)
                             : fmt::format("{}'s values decoded on read (the low {} bytes of each)",
                                           field_name(type->field), type->value_bytes);
          Storage s;
          s.source = 0;  // made the decoded source's below
          s.key = t.name;
          s.nbytes = nbytes;
          tensor.storage = m.storages.size();
          m.storages.push_back(std::move(s));
        }
      }
    }
    if (broken.empty() && raw && type->sub_bits != 0) {
      // Packed sub-byte elements, unpacked on read from their bytes.
      EncodedTensor enc;
      enc.kind = EncodedTensor::Kind::packed;
      enc.begin = position;
      enc.end = position + length;
      enc.value_bytes = 1;
      enc.sub_bits = type->sub_bits;
      enc.sign_extend = type->sign_extend;
      enc.values = length;
      enc.size = nbytes;
      Decoded& d = decoded_[*source];
      enc.offset = d.size;
      d.size += nbytes;
      d.storages.push_back(m.storages.size());
      d.tensors.push_back(std::move(enc));
      decoded_note =
          fmt::format("{} {}-bit elements a byte in the file, unpacked one a byte on read",
                      8 / type->sub_bits, type->sub_bits);
      Storage s;
      s.source = *source;  // made the decoded source's below
      s.key = t.name;
      s.nbytes = nbytes;
      tensor.storage = m.storages.size();
      m.storages.push_back(std::move(s));
    } else if (broken.empty() && source && !tensor.storage) {
      Storage s;
      s.source = *source;
      s.key = t.name;
      s.file_offset = position;
      s.nbytes = nbytes;
      tensor.storage = m.storages.size();
      m.storages.push_back(std::move(s));
    }
  }

  // Its note for meta.json.
  std::string note = "{\"data_type\":";
  const std::string_view type_name = onnx_data_type_name(t.data_type);
  if (type_name.empty()) {
    note += "null";
  } else {
    append_json_string(note, type_name);
  }
  note += fmt::format(",\"data_type_id\":{},\"graph\":", t.data_type);
  append_json_string(note, graph_path);
  note += fmt::format(",\"stored_in\":{},\"external\":{},\"decoded\":", stored_in, external_json);
  if (decoded_note.empty()) {
    note += "null";
  } else {
    append_json_string(note, decoded_note);
  }
  note += ",\"served_as\":";
  const std::string_view served_as = served_as_note(t.data_type);
  if (served_as.empty()) {
    note += "null";
  } else {
    append_json_string(note, served_as);
  }
  note += ",\"sparse\":";
  note += sparse.empty() ? "null" : sparse;
  note += '}';

  if (e.kind == Entry::Kind::value) {
    m.entries.push_back(std::move(e));
    entry_graph_.push_back(graph);
    return;
  }
  if (!broken.empty()) tensor.storage.reset();
  m.tensors.push_back(std::move(tensor));
  m.tensor_notes.push_back(std::move(note));
  m.entries.push_back(std::move(e));
  entry_graph_.push_back(graph);
}

OnnxModel Reader::read() {
  walk();
  Model& m = out_.model;
  // Entries grouped by graph: the main graph's first (its nodes, with their subgraphs, come
  // before its initializers in the file), each graph's in the file's order.
  std::vector<std::size_t> order(m.entries.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return entry_graph_[a] < entry_graph_[b]; });
  std::vector<Entry> entries;
  entries.reserve(m.entries.size());
  for (const std::size_t i : order) entries.push_back(std::move(m.entries[i]));
  m.entries = std::move(entries);
  // The decoded sources, after the external files: one per source that has decoded tensors.
  for (std::size_t i = 0; i < decoded_.size(); ++i) {
    Decoded& d = decoded_[i];
    if (d.tensors.empty()) continue;
    const auto index = static_cast<std::uint32_t>(m.sources.size());
    for (const std::size_t s : d.storages) {
      m.storages[s].source = index;
    }
    // Storages of decoded tensors start where their tensor's bytes do in the decoded source.
    for (std::size_t k = 0; k < d.storages.size(); ++k) {
      m.storages[d.storages[k]].file_offset = d.tensors[k].offset;
    }
    const ByteSource& encoded = i == 0 ? source_ : *out_.sources[i - 1];
    std::string name = m.sources[i] + "#decoded";
    m.sources.push_back(name);
    out_.sources.push_back(
        std::make_unique<OnnxDecodedSource>(encoded, std::move(d.tensors), std::move(name)));
  }
  return std::move(out_);
}

}  // namespace

std::string_view onnx_data_type_name(std::int64_t id) noexcept {
  const OnnxType* type = type_of(id);
  if (id == 0) return types[0].name;
  return type ? type->name : std::string_view();
}

bool looks_like_onnx(const ByteSource& source) {
  // The first 4 KiB (or the file): ir_version first, then fields of ModelProto of the right wire
  // type, a length-delimited one within the file.
  const std::uint64_t size = source.size();
  if (size < 2) return false;
  // Its first byte rules out every other format's file before the window is read: a read of
  // 4 KiB at mount would start a remote source's sequential stream, which the first tensor read
  // near the start of the file (a zip's first record) would continue into a readahead window.
  if (source.read_string(0, 1)[0] != 0x08) return false;
  const std::string head =
      source.read_string(0, static_cast<std::size_t>(std::min<std::uint64_t>(size, 4096)));
  MemorySource window(head);
  try {
    WireReader r(window, 0, head.size());
    r.tag();
    const std::uint64_t ir_version = r.varint();
    if (ir_version < 1 || ir_version > 255) return false;
    while (!r.at_limit()) {
      const std::uint64_t at = r.position();
      Tag tag;
      try {
        tag = r.tag();
      } catch (const Error&) {
        return at + 10 >= head.size() && head.size() < size;  // a tag cut by the window
      }
      const bool varint_field = tag.field == 1 || tag.field == 5;
      const bool length_field = (tag.field >= 2 && tag.field <= 4) ||
                                (tag.field >= 6 && tag.field <= 8) || tag.field == 14 ||
                                tag.field == 20 || tag.field == 25;
      if (varint_field && tag.type == WireType::varint) {
        r.varint();
      } else if (length_field && tag.type == WireType::length) {
        // Its length may run past the window, not past the file.
        std::uint64_t n = 0;
        unsigned shift = 0;
        for (;;) {
          if (r.at_limit()) return head.size() < size;
          const auto byte = static_cast<std::uint8_t>(r.bytes(1)[0]);
          n |= std::uint64_t{byte & 0x7fu} << shift;
          if (byte < 0x80) break;
          if ((shift += 7) >= 64) return false;
        }
        if (n > size - r.position()) return false;
        if (n >= head.size() - r.position()) return true;  // past the window: all looked fine
        r.skip_bytes(n);
      } else {
        return false;
      }
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

OnnxModel read_onnx(const ByteSource& source, const std::string& source_name,
                    const OnnxMemberOpener& open, const OnnxLimits& limits) {
  return read_or_name_impostor(source, [&] {
    Reader reader(source, source_name, open, limits);
    return reader.read();
  });
}

}  // namespace ckptfs
