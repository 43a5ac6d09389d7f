// SPDX-License-Identifier: MIT
// GGUF files (llama.cpp, Ollama) read into a Model: the header, the typed key-value metadata and
// the tensor infos, streamed and checked, without reading tensor bytes; split sets
// (model-00001-of-00003.gguf...) combined into one Model.
#pragma once

#include <ckptfs/model/model.hpp>
#include <ckptfs/source/byte_source.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

struct GgufLimits {
  // Bytes of header (metadata and tensor infos) read before the tensors' data: what bounds the
  // time a mount spends on a hostile header (a 150,000-token vocabulary takes ~5 MB).
  std::uint64_t max_header_bytes = 512ull << 20;
  std::uint64_t max_tensors = 4'000'000;
  // All metadata keys, values and type names as JSON, together (index.json holds them): a
  // string is refused unread when its length alone would pass it, and before it is written when
  // its escaped form would.
  std::uint64_t max_metadata_json_bytes = 128ull << 20;
  // All tensor names as JSON, together (index.json lists them; each is kept in the model).
  std::uint64_t max_names_json_bytes = 64ull << 20;
  std::size_t max_array_depth = 8;  // arrays of arrays of ... (no GGUF writer nests them)
  std::size_t max_dims = 4;         // GGML_MAX_DIMS: ggml and gguf-py refuse more
};

// Whether the source starts with GGUF's magic ("GGUF").
bool looks_like_gguf(const ByteSource& source);

// Reads a GGUF file, version 1 (32-bit counts and lengths), 2 or 3, little- or big-endian (a
// version whose low 16 bits are 0 is read byte-swapped, as gguf-py tells them apart):
//   - metadata: every key-value pair in Model::json_metadata, in the file's order, its type as
//     GGUF names it ("UINT32", "FLOAT32", "STRING", "ARRAY[STRING]", "ARRAY[ARRAY[INT32]]"), its
//     value as JSON: integers and bools as numbers and true/false, FLOAT32 as the shortest
//     decimal that reads back as the same float32 ("1e-05"), FLOAT64 as the shortest for the
//     double, a NaN or infinity as {"__float__": "nan"|"inf"|"-inf"}, strings as JSON strings
//     (bytes that are not UTF-8 as lone surrogates, as append_json_string() writes them),
//     arrays as arrays;
//   - tensors: one entry each, keyed by its name, in the file's order, each with its own storage
//     (its bytes: data start + offset); shape in C order (GGUF's ne[0], the innermost, last);
//     F32, F16, BF16, F64, I8-I64 as those dtypes; block-quantized types (Q4_K...) as float32
//     tensors with Tensor::blocks (model/block_format.hpp); a type GGML does not define (or no
//     longer: Q4_2) is a broken tensor saying so. Big-endian files: every storage big-endian.
// The data start: the end of the tensor infos, aligned up to general.alignment (a UINT32 power
// of two; 32 without it).
//
// Refused with Error(bad_checkpoint), naming the key or tensor and the byte offset where it
// applies: not GGUF, a version other than 1-3, a header that runs past the end of the file (a
// count or length larger than the bytes left: counts and lengths up to 2^64 are never
// allocated for), a value type GGUF does not define (13 and up), a key or tensor name twice,
// general.alignment not a UINT32 power of two, more than max_dims dimensions, a shape whose
// element count overflows or whose float32 values would not fit a file (max_tensor_bytes), a
// block-quantized tensor whose rows (ne[0]) are no whole number of blocks, an offset that is not
// a multiple of the alignment, data outside the file, tensors whose data overlap, an array of
// arrays whose arrays hold different types. Refused with Error(unsupported): files past
// `limits`. Messages start with "GGUF header: " when the header itself is wrong.
Model read_gguf(const ByteSource& source, std::string source_name, const GgufLimits& limits = {});

// A GGUF split set's file name: the number of this file and of all, as llama.cpp's
// llama_split_path() writes them ("<prefix>-00002-of-00005.gguf": 2 and 5, prefix "<prefix>").
struct GgufSplitName {
  std::string prefix;
  std::uint32_t number = 0;
  std::uint32_t count = 0;
};
std::optional<GgufSplitName> gguf_split_name(std::string_view file_name);
// The name of split `number` (1-based) of `count` of `prefix`: "<prefix>-0000N-of-0000M.gguf".
std::string gguf_split_file(std::string_view prefix, std::uint32_t number, std::uint32_t count);

// One Model of a split set's files (models[i] read from names[i], in split order, each with its
// storages in source 0): its sources are `names`, its entries every file's tensors in order, its
// metadata the first file's (the one llama.cpp writes it all in). Throws Error(bad_checkpoint)
// when a file's split.no or split.count metadata (when present) says another place in the set,
// or a tensor name is in two files.
Model combine_gguf_splits(const std::vector<std::string>& names, std::vector<Model> models);

}  // namespace ckptfs
