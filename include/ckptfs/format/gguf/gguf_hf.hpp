// SPDX-License-Identifier: MIT
// -o names=hf: a GGUF model as transformers' GGUF loader (transformers 5's
// from_pretrained(dir, gguf_file=F)) makes it: its tensors under transformers' names, with their
// values as that loader computes them, the config.json it makes of the file's metadata, and the
// tokenizer it makes of a BPE vocabulary (tokenizer.json, tokenizer_config.json). The
// loader's tables (which GGUF key becomes which config key, which tensor which parameter) are
// read out of transformers itself by scripts/make_gguf_hf_tables.py; the loader's tensor
// processors are done here, in the format-neutral model:
//   - Llama's Q and K rows, which convert_hf_to_gguf.py permuted for llama.cpp's RoPE, are put
//     back in transformers' order: an assembly of row blocks of the file's bytes, or, for
//     block-quantized tensors, a derivation of their dequantized rows;
//   - Gemma 2/3's and Nemotron's norm weights, stored as w + 1, are w - 1 (derived);
//   - GPT-2's Conv1D weights are the transpose of the file's (a strided view; derived when
//     block-quantized), and its output.weight is lm_head.weight;
//   - Bloom's fused QKV rows go back to per-head order (as Llama's Q and K);
//   - Qwen2-MoE's, Qwen3-MoE's and MiniMax-M2's expert gate and up tensors are one gate_up_proj
//     (an assembly of both; derived when block-quantized), and a shared expert gate vector a
//     [1, n] matrix;
//   - LFM2's short convolution weights gain their middle dimension of 1.
// Every floating-point tensor is then served as float32, what the loader gives by default (F16
// and BF16 tensors converted on read, block-quantized ones dequantized); -o dtype converts on.
#pragma once

#include <ckptfs/model/model.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

// Renames and transforms `model`, a GGUF file or split set as read_gguf() or
// combine_gguf_splits() made it, into transformers' state dict (see above): its entries are
// the parameters the loader gives, in the file's order (a merged tensor where its first part
// was); tensors the loader does not load are left out. Model::origins says each entry's GGUF
// name and how its values were made; Model::files gets config.json, and for a BPE vocabulary
// the loader makes a tokenizer of, tokenizer.json and tokenizer_config.json; Model::notes says,
// a line each, what was left out and why there are no tokenizer files. A tensor whose transform
// cannot be done (rows that are no whole number of heads) is broken, saying so, as transformers
// would fail on it.
//
// When the file's architecture is one transformers' GGUF loader does not load, or one whose
// tensor processor ckptfs does not do, the model is left as it is, with llama.cpp's names, and
// one note says so. Throws Error(bad_checkpoint) only for metadata the loader reads that is
// not what GGUF allows (general.architecture that is not a string).
void name_gguf_as_transformers(Model& model);

// The configuration transformers' load_gguf_checkpoint(F, return_tensors=False)["config"] makes
// of a GGUF model's metadata (what AutoConfig.from_pretrained(dir, gguf_file=F) is made from),
// as JSON text, keys sorted and indented as save_pretrained writes config.json, and "dtype":
// `dtype`'s name (float32 unless -o dtype says otherwise: what from_pretrained then loads
// in). Floats are Python's repr() of the values the loader reads (a FLOAT32 1e-05 is
// 9.999999747378752e-06). nullopt when general.architecture is not one the loader knows.
std::optional<std::string> gguf_transformers_config(const Model& model,
                                                    std::optional<DType> dtype = std::nullopt);

}  // namespace ckptfs
