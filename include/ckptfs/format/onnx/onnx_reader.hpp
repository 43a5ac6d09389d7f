// SPDX-License-Identifier: MIT
// ONNX models (.onnx: a protobuf ModelProto, its initializers' bytes inside it or in external
// files beside it) read into a Model: every initializer of the graph and its subgraphs, and every
// sparse initializer, a key; the protobuf walked by a bounded reader of our own
// (protobuf_wire.hpp), without recursion and without reading tensor bytes.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

struct OnnxLimits {
  // Messages within messages: a graph in a node's attribute in a graph... (the model, its graph,
  // a node and its attribute are 4; protobuf's own parser stops at 100).
  std::size_t max_depth = 64;
  std::uint64_t max_tensors = 4'000'000;  // initializers (a sparse one counts two)
  std::size_t max_dims = 64;              // torch's own limit on dimensions
  // All initializer names (as JSON, as index.json lists them) and the graph paths meta.json
  // gives them, together; what pickle checkpoints allow their keys.
  std::uint64_t max_names_json_bytes = 64ull << 20;
  // The model's metadata (producer, domain, doc_string, opset_import, metadata_props) as JSON.
  std::uint64_t max_metadata_json_bytes = 64ull << 20;
  // STRING tensors' strings as JSON (their value.json files), together.
  std::uint64_t max_strings_json_bytes = 64ull << 20;
  // Distinct external data files; a tensor in one more is broken.
  std::size_t max_external_files = 65'536;
};

// Opens an external data file by the name a tensor gives it (its `location`, made relative to
// the model's directory: "weights/model.onnx.data"), beneath the model's directory or beside its
// URL. Throws Error naming the problem without the name (the reader names it): a name that leads
// out of the directory, a missing file...
using OnnxMemberOpener = std::function<std::unique_ptr<ByteSource>(const std::string& name)>;

// What read_onnx() read: the model, and the sources it opened or made for it, which are
// Model::sources[1...] in order (sources[0] is the .onnx itself, the caller's).
struct OnnxModel {
  Model model;
  std::vector<std::unique_ptr<ByteSource>> sources;
};

// Whether `source` starts like a serialized ModelProto (an .onnx file has no magic number):
// ir_version (field 1, a varint of 1 to 255) first, as every writer puts it, then well-formed
// fields of ModelProto's numbers up to the first 4 KiB or the end. Never true of a safetensors,
// GGUF, zip or pickle file.
bool looks_like_onnx(const ByteSource& source);

// Reads an ONNX model. Entries, in the file's order (the graph's, then those of subgraphs as
// their nodes come, training_info's and functions' graphs after):
//   - each initializer a tensor keyed by its name; each sparse initializer two, "<name>.values"
//     and "<name>.indices" (key_path [name, {"__part__": ...}]); a STRING initializer a value,
//     its strings as JSON (nested by its shape; bytes that are not UTF-8 as \udcXX);
//   - dtypes as onnx.numpy_helper.to_array reads them (its ml_dtypes named as torch names them):
//     FLOAT float32 ... BFLOAT16 bfloat16, FLOAT8* float8_*, FLOAT8E8M0 float8_e8m0fnu; INT4 and
//     INT2 as int8, UINT4 and UINT2 as uint8, one element a byte, unpacked on read; FLOAT4E2M1
//     as uint8, each element's 4-bit code in a byte (numpy and torch have no float4 of one
//     element);
//   - raw_data: a range of the .onnx; external data (data_location EXTERNAL): `location`
//     (relative to the model's directory; an absolute one, a "..", a link out is refused by
//     `open`), `offset`, `length` (or the tensor's size when absent), a range of that file,
//     each file opened once; `checksum` shown, not verified (onnx neither writes nor checks it);
//   - typed fields (float_data, int32_data...), and 4-bit and 2-bit types: decoded on read, in an
//     OnnxDecodedSource per source ("<file>#decoded");
//   - Model::tensor_notes: each tensor's ONNX facts as JSON ({"data_type", "data_type_id",
//     "graph", "stored_in", "external", "decoded", "served_as" (how a type numpy lacks is
//     served: its bits...), "sparse"}), for meta.json.
// A tensor that cannot be served is broken, saying why: an unknown data type, a segment (which
// to_array refuses too), a shape whose size overflows or has a negative dimension, bytes that do
// not fit its shape, an external file that is missing or leads out, an encoding that is not
// valid protobuf within the TensorProto.
// Refused with Error(bad_checkpoint), naming the byte offset: a ModelProto, GraphProto,
// NodeProto or AttributeProto that is no valid protobuf (a length past its message or the file,
// a varint of 11 bytes), nesting deeper than max_depth; Error(unsupported) past the other limits.
// The model's metadata is in Model::metadata (producer_name, producer_version, domain,
// doc_string, metadata_props) and Model::json_metadata (ir_version, model_version,
// opset_import). A file that is none is named for what it is (read_or_name_impostor()).
OnnxModel read_onnx(const ByteSource& source, const std::string& source_name,
                    const OnnxMemberOpener& open, const OnnxLimits& limits = {});

// The ONNX name of TensorProto data type `id` ("FLOAT16" for 10); empty for an unknown one.
std::string_view onnx_data_type_name(std::int64_t id) noexcept;

}  // namespace ckptfs
