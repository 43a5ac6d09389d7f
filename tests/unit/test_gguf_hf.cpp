// SPDX-License-Identifier: MIT
// Unit tests of name_gguf_as_transformers() and gguf_transformers_config() (-o names=hf) on GGUF
// files assembled in C++: renames, the row permutation of Q and K (an assembly of plain rows, a
// derivation of quantized ones) checked against the permutation computed here, w - 1, GPT-2's
// transposes, the config's values, what is left out and said, and hostile metadata. Whether the
// names and values are transformers' own is the interop test's to say
// (tests/interop/test_interop_gguf_hf.py, against transformers itself).
#include "support/gguf_builder.hpp"

#include <ckptfs/base/error.hpp>
#include <ckptfs/format/gguf/gguf_hf.hpp>
#include <ckptfs/format/gguf/gguf_reader.hpp>
#include <ckptfs/view/dequantize.hpp>
#include <ckptfs/view/served.hpp>
#include <ckptfs/view/tree.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace ckptfs;
using namespace ckptfs::test;

namespace {

constexpr std::uint32_t gguf_uint32 = 4, gguf_int32 = 5, gguf_float32 = 6, gguf_string = 8,
                        gguf_array = 9;
constexpr std::uint32_t ggml_f32 = 0, ggml_f16 = 1, ggml_q8_0 = 8;

// Key-value pairs, written as GgufWriter writes them.
struct Metadata {
  GgufWriter w;
  std::uint64_t count = 0;
  Metadata& string(const std::string& key, const std::string& value) {
    w.key(key, gguf_string).string(value);
    ++count;
    return *this;
  }
  Metadata& u32(const std::string& key, std::uint32_t value) {
    w.key(key, gguf_uint32).u32(value);
    ++count;
    return *this;
  }
  Metadata& i32(const std::string& key, std::int32_t value) {
    w.key(key, gguf_int32).u32(static_cast<std::uint32_t>(value));
    ++count;
    return *this;
  }
  Metadata& f32(const std::string& key, float value) {
    w.key(key, gguf_float32).f32(value);
    ++count;
    return *this;
  }
  Metadata& strings(const std::string& key, const std::vector<std::string>& values) {
    w.key(key, gguf_array).u32(gguf_string).size(values.size());
    for (const auto& v : values) w.string(v);
    ++count;
    return *this;
  }
  Metadata& i32s(const std::string& key, const std::vector<std::int32_t>& values) {
    w.key(key, gguf_array).u32(gguf_int32).size(values.size());
    for (auto v : values) w.u32(static_cast<std::uint32_t>(v));
    ++count;
    return *this;
  }
};

std::string f32_bytes(std::size_t n, float first = 0.5f) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i);
  return {reinterpret_cast<const char*>(v.data()), n * 4};
}

std::string f16_bytes(std::size_t n) {
  // float16 i + 1 for small i: exact.
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    float f = static_cast<float>(i + 1);
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, 4);
    const auto exponent = static_cast<std::uint16_t>(((bits >> 23) & 0xff) - 127 + 15);
    const auto half = static_cast<std::uint16_t>(exponent << 10 | ((bits >> 13) & 0x3ff));
    out += static_cast<char>(half & 0xff);
    out += static_cast<char>(half >> 8);
  }
  return out;
}

// Q8_0 blocks of scale 1.0 and values (row × 7 + k) % 100 - 50.
std::string q8_rows(std::size_t rows, std::size_t blocks_per_row) {
  std::string out;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t b = 0; b < blocks_per_row; ++b) {
      out += std::string("\x00\x3c", 2);
      for (std::size_t k = 0; k < 32; ++k) {
        out += static_cast<char>(static_cast<int>((r * 7 + b * 3 + k) % 100) - 50);
      }
    }
  }
  return out;
}

struct Opened {
  std::unique_ptr<MemorySource> source;
  std::vector<const ByteSource*> sources;
  Model model;
};

Opened open_named(const std::vector<GgufTensor>& tensors, const Metadata& meta) {
  Opened o;
  o.source = std::make_unique<MemorySource>(
      gguf_file(tensors, 3, false, 32, meta.w.bytes, meta.count), "m.gguf");
  o.sources = {o.source.get()};
  o.model = read_gguf(*o.source, "m.gguf");
  name_gguf_as_transformers(o.model);
  return o;
}

const Entry* entry(const Model& m, const std::string& key) {
  for (const Entry& e : m.entries) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

// The served float32 values of `key`.
std::vector<float> values(const Opened& o, const std::string& key) {
  const Entry* e = entry(o.model, key);
  REQUIRE(e != nullptr);
  const Tensor& t = o.model.tensors[e->tensor];
  REQUIRE(t.broken == "");
  const ServedTensor served = serve(o.model, t);
  REQUIRE(served.dtype == DType::float32);
  ReadBuffer buffer;
  read_served(o.model, t, served, 0, served.nbytes, o.sources, buffer);
  std::string bytes;
  for (const ReadPiece& p : buffer.pieces()) {
    if (p.memory) {
      bytes.append(p.memory, p.length);
    } else {
      std::string part(p.length, '\0');
      o.sources[p.source]->read(p.source_offset,
                                std::as_writable_bytes(std::span(part.data(), part.size())));
      bytes += part;
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// convert_hf_to_gguf.py's permutation undone, as the definition says: row h*2d + j*d + i of the
// result is row h*2d + 2i + j of the file's.
std::vector<float> unpermuted(const std::vector<float>& rows, std::size_t heads,
                              std::size_t columns) {
  const std::size_t n = rows.size() / columns;
  const std::size_t dim = n / heads / 2;
  std::vector<float> out(rows.size());
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::size_t j = 0; j < 2; ++j) {
      for (std::size_t i = 0; i < dim; ++i) {
        const std::size_t to = h * 2 * dim + j * dim + i, from = h * 2 * dim + 2 * i + j;
        std::memcpy(&out[to * columns], &rows[from * columns], columns * 4);
      }
    }
  }
  return out;
}

std::vector<float> as_floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

Metadata llama(std::uint32_t heads, std::uint32_t kv_heads) {
  Metadata m;
  m.string("general.architecture", "llama").string("general.name", "tiny");
  m.u32("llama.block_count", 1).u32("llama.embedding_length", 4);
  m.u32("llama.attention.head_count", heads).u32("llama.attention.head_count_kv", kv_heads);
  m.f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  return m;
}

}  // namespace

TEST_CASE("names=hf: a Llama's tensors under transformers' names, Q and K rows un-permuted") {
  const std::string q = f32_bytes(8 * 4), k = f16_bytes(4 * 4);
  const std::string qq = q8_rows(8, 1);
  Opened o = open_named({{"token_embd.weight", {4, 3}, ggml_f32, f32_bytes(12)},
                         {"blk.0.attn_q.weight", {4, 8}, ggml_f32, q},
                         {"blk.0.attn_k.weight", {4, 4}, ggml_f16, k},
                         {"blk.0.attn_v.weight", {32, 8}, ggml_q8_0, qq},
                         {"rope_freqs.weight", {2}, ggml_f32, f32_bytes(2)},
                         {"blk.1.attn_q.weight", {4, 8}, ggml_f32, q}},
                        llama(2, 1));
  std::vector<std::string> keys;
  for (const Entry& e : o.model.entries) keys.push_back(e.key);
  // The file's order; rope_freqs (no parameter) and layer 1 (the config says 1 layer) left out.
  CHECK(keys == std::vector<std::string>{"model.embed_tokens.weight",
                                         "model.layers.0.self_attn.q_proj.weight",
                                         "model.layers.0.self_attn.k_proj.weight",
                                         "model.layers.0.self_attn.v_proj.weight"});
  REQUIRE(o.model.origins.size() == 4);
  CHECK(o.model.origins[1].key == "blk.0.attn_q.weight");
  CHECK(o.model.origins[1].how.find("un-permuted (2 heads)") != std::string::npos);
  CHECK(o.model.origins[0].how == "");
  // What was left out, and that no tokenizer files are made (the file has no vocabulary).
  REQUIRE(o.model.notes.size() == 2);
  CHECK(o.model.notes[0].find("left out 2 tensors") != std::string::npos);
  CHECK(o.model.notes[0].find("\"rope_freqs.weight\"") != std::string::npos);
  CHECK(o.model.notes[1].find("no tokenizer files") != std::string::npos);
  // Q by its 2 heads (an assembly of the file's rows), K by its 1 KV head (from float16).
  const Tensor& qt =
      o.model.tensors[entry(o.model, "model.layers.0.self_attn.q_proj.weight")->tensor];
  CHECK(qt.assembly.has_value());
  CHECK(values(o, "model.layers.0.self_attn.q_proj.weight") == unpermuted(as_floats(q), 2, 4));
  std::vector<float> k_values;
  for (int i = 0; i < 16; ++i) k_values.push_back(static_cast<float>(i + 1));
  CHECK(values(o, "model.layers.0.self_attn.k_proj.weight") == unpermuted(k_values, 1, 4));
  CHECK(serve(o.model,
              o.model.tensors[entry(o.model, "model.layers.0.self_attn.k_proj.weight")->tensor])
            .stored == DType::float16);
  // V is renamed only: still its Q8_0 blocks, its values dequantized.
  const Tensor& vt =
      o.model.tensors[entry(o.model, "model.layers.0.self_attn.v_proj.weight")->tensor];
  CHECK(vt.blocks == BlockFormat::q8_0);
}

TEST_CASE("names=hf: quantized Q rows are a derivation of their dequantized rows") {
  const std::string blocks = q8_rows(8, 2);  // 8 rows of 64 values
  Metadata m = llama(2, 2);
  Opened o = open_named({{"blk.0.attn_q.weight", {64, 8}, ggml_q8_0, blocks}}, m);
  const Tensor& t =
      o.model.tensors[entry(o.model, "model.layers.0.self_attn.q_proj.weight")->tensor];
  CHECK(t.derived());
  std::vector<float> dequantized(8 * 64);
  dequantize(BlockFormat::q8_0, reinterpret_cast<const std::byte*>(blocks.data()),
             reinterpret_cast<std::byte*>(dequantized.data()), 16);
  CHECK(values(o, "model.layers.0.self_attn.q_proj.weight") == unpermuted(dequantized, 2, 64));
}

TEST_CASE("names=hf: Gemma's norms are w - 1, GPT-2's Conv1D weights transposed") {
  Metadata gemma;
  gemma.string("general.architecture", "gemma2").u32("gemma2.block_count", 1);
  const std::string norm = f32_bytes(4, 1.25f);
  Opened g = open_named({{"blk.0.attn_norm.weight", {4}, ggml_f32, norm},
                         {"blk.0.attn_q.weight", {4, 4}, ggml_f32, f32_bytes(16)}},
                        gemma);
  std::vector<float> want = as_floats(norm);
  for (float& v : want) v -= 1.0f;
  CHECK(values(g, "model.layers.0.input_layernorm.weight") == want);
  CHECK(values(g, "model.layers.0.self_attn.q_proj.weight") == as_floats(f32_bytes(16)));

  Metadata gpt2;
  gpt2.string("general.architecture", "gpt2").u32("gpt2.block_count", 1);
  const std::string plain = f32_bytes(3 * 2);
  const std::string quantized = q8_rows(3, 1);
  Opened p = open_named({{"blk.0.attn_qkv.weight", {2, 3}, ggml_f32, plain},
                         {"blk.0.ffn_up.weight", {32, 3}, ggml_q8_0, quantized},
                         {"output.weight", {2, 3}, ggml_f32, plain}},
                        gpt2);
  const std::vector<float> rows = as_floats(plain);  // [3, 2]
  CHECK(values(p, "transformer.h.0.attn.c_attn.weight") ==
        std::vector<float>{rows[0], rows[2], rows[4], rows[1], rows[3], rows[5]});
  std::vector<float> q(3 * 32), qt;
  dequantize(BlockFormat::q8_0, reinterpret_cast<const std::byte*>(quantized.data()),
             reinterpret_cast<std::byte*>(q.data()), 3);
  for (std::size_t c = 0; c < 32; ++c) {
    for (std::size_t r = 0; r < 3; ++r) qt.push_back(q[r * 32 + c]);
  }
  CHECK(values(p, "transformer.h.0.mlp.c_fc.weight") == qt);
  // output.weight is lm_head.weight, untransposed (the processor's own rule).
  CHECK(values(p, "lm_head.weight") == rows);
}

TEST_CASE("names=hf: config.json is made of the metadata as the loader reads it") {
  Metadata m = llama(2, 1);
  m.u32("llama.context_length", 128).string("tokenizer.ggml.model", "gpt2");
  m.u32("tokenizer.ggml.bos_token_id", 1);
  Opened o = open_named({{"token_embd.weight", {4, 3}, ggml_f32, f32_bytes(12)}}, m);
  REQUIRE(o.model.files.size() == 1);  // no vocabulary: no tokenizer files
  CHECK(o.model.files[0].name == "config.json");
  const std::string config = o.model.files[0].make(o.model, std::nullopt);
  // A FLOAT32 is the float32's value as a Python float; no output.weight: tied.
  CHECK(config.find("\"rms_norm_eps\": 9.999999747378752e-06") != std::string::npos);
  CHECK(config.find("\"max_position_embeddings\": 128") != std::string::npos);
  CHECK(config.find("\"num_key_value_heads\": 1") != std::string::npos);
  CHECK(config.find("\"bos_token_id\": 1") != std::string::npos);
  CHECK(config.find("\"tie_word_embeddings\": true") != std::string::npos);
  CHECK(config.find("\"model_type\": \"llama\"") != std::string::npos);
  CHECK(config.find("\"_model_name_or_path\": \"tiny\"") != std::string::npos);
  CHECK(config.find("\"dtype\": \"float32\"") != std::string::npos);
  CHECK(o.model.files[0].make(o.model, DType::bfloat16).find("\"dtype\": \"bfloat16\"") !=
        std::string::npos);
  // The tree shows it beside index.json, made on first use.
  Tree tree(std::move(o.model), {});
  const Tree::Ino ino = tree.lookup(Tree::views_ino, "config.json");
  REQUIRE(ino != 0);
  ReadBuffer buffer;
  tree.read(ino, 0, 1 << 16, o.sources, buffer);
  std::string read;
  for (const ReadPiece& p : buffer.pieces()) read.append(p.memory, p.length);
  CHECK(read == config);

  // A llama named "mistral" is a mistral; gemma3 is gemma3_text.
  Metadata mistral;
  mistral.string("general.architecture", "llama").string("general.name", "mistral");
  mistral.u32("llama.block_count", 1);
  MemorySource s1(gguf_file({}, 3, false, 32, mistral.w.bytes, mistral.count), "m.gguf");
  CHECK(gguf_transformers_config(read_gguf(s1, "m.gguf"))->find("\"model_type\": \"mistral\"") !=
        std::string::npos);
  Metadata gemma3;
  gemma3.string("general.architecture", "gemma3");
  MemorySource s2(gguf_file({}, 3, false, 32, gemma3.w.bytes, gemma3.count), "g.gguf");
  CHECK(gguf_transformers_config(read_gguf(s2, "g.gguf"))->find("\"gemma3_text\"") !=
        std::string::npos);
}

TEST_CASE("names=hf: an architecture the loader does not load keeps llama.cpp's names") {
  Metadata m;
  m.string("general.architecture", "rwkv7");
  Opened o = open_named({{"token_embd.weight", {4, 3}, ggml_f32, f32_bytes(12)}}, m);
  REQUIRE(o.model.entries.size() == 1);
  CHECK(o.model.entries[0].key == "token_embd.weight");
  REQUIRE(o.model.notes.size() == 1);
  CHECK(o.model.notes[0].find("\"rwkv7\"") != std::string::npos);
  CHECK(o.model.notes[0].find("keep llama.cpp's names") != std::string::npos);
  CHECK(o.model.files.empty());
  // mamba: its processor (numpy's float32 log) is not done; t5: no causal LM to name it by;
  // no general.architecture at all.
  for (const std::string arch : {"mamba", "t5", ""}) {
    Metadata other;
    if (!arch.empty()) other.string("general.architecture", arch);
    Opened x = open_named({{"token_embd.weight", {4, 3}, ggml_f32, f32_bytes(12)}}, other);
    CAPTURE(arch);
    CHECK(x.model.entries[0].key == "token_embd.weight");
    CHECK(x.model.notes.size() == 1);
  }
}

TEST_CASE("names=hf: hostile head counts break the tensor, never the mount") {
  // Heads that do not divide the rows, 0, negative, huge (2 heads would need 2^40 rows), and
  // more heads than there are row pairs.
  for (std::int64_t heads : {3ll, 0ll, -4ll, 1ll << 31, 5ll}) {
    Metadata m;
    m.string("general.architecture", "llama").u32("llama.block_count", 1);
    m.i32("llama.attention.head_count", static_cast<std::int32_t>(heads));
    m.i32("llama.attention.head_count_kv", static_cast<std::int32_t>(heads));
    Opened o = open_named({{"blk.0.attn_q.weight", {4, 8}, ggml_f32, f32_bytes(32)}}, m);
    CAPTURE(heads);
    const Tensor& t = o.model.tensors[o.model.entries.at(0).tensor];
    CHECK(t.broken.find("no whole number of") != std::string::npos);
    CHECK(serve(o.model, t).way == ServedTensor::Way::none);
  }
  // general.architecture that is no string: an error of the file.
  Metadata bad;
  bad.u32("general.architecture", 7);
  MemorySource source(gguf_file({}, 3, false, 32, bad.w.bytes, bad.count), "b.gguf");
  Model model = read_gguf(source, "b.gguf");
  try {
    name_gguf_as_transformers(model);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::bad_checkpoint);
    CHECK(std::string(e.what()).find("general.architecture is UINT32") != std::string::npos);
  }
}

namespace {

// A BPE vocabulary: three CONTROL tokens, one twice-listed token, merges.
Metadata with_vocabulary(Metadata m, const std::vector<std::string>& merges) {
  m.string("tokenizer.ggml.model", "gpt2");
  m.strings("tokenizer.ggml.tokens", {"<s>", "</s>", "<unk>", "a", "b", "ab", "a"});
  m.i32s("tokenizer.ggml.token_type", {3, 3, 3, 1, 1, 1, 1});
  m.strings("tokenizer.ggml.merges", merges);
  m.u32("tokenizer.ggml.bos_token_id", 0).u32("tokenizer.ggml.eos_token_id", 1);
  m.u32("tokenizer.ggml.unknown_token_id", 2);
  m.string("tokenizer.chat_template", "{{ messages }}");
  return m;
}

std::string file_of(const Model& m, const std::string& name) {
  for (const Model::File& f : m.files) {
    if (f.name == name) return f.make(m, std::nullopt);
  }
  return {};
}

}  // namespace

TEST_CASE("names=hf: the tokenizer files of a BPE vocabulary, as each architecture's rule says") {
  // Llama's rule: every CONTROL token added at its id, the model's unk_token the file's, its
  // bos_token and (as the loader has it) eos_token the token at bos's id.
  Opened l = open_named({{"token_embd.weight", {4, 7}, ggml_f32, f32_bytes(28)}},
                        with_vocabulary(llama(2, 1), {"a b"}));
  const std::string json = file_of(l.model, "tokenizer.json");
  REQUIRE(!json.empty());
  CHECK(json.find("\"added_tokens\":[{\"id\":0,\"content\":\"<s>\"") != std::string::npos);
  CHECK(json.find("{\"id\":2,\"content\":\"<unk>\"") != std::string::npos);
  CHECK(json.find("\"unk_token\":\"<unk>\"") != std::string::npos);
  // A token listed twice has its last id, once; merges are pairs.
  CHECK(json.find("\"vocab\":{\"<s>\":0,\"</s>\":1,\"<unk>\":2,\"b\":4,\"ab\":5,\"a\":6}") !=
        std::string::npos);
  CHECK(json.find("\"merges\":[[\"a\",\"b\"]]") != std::string::npos);
  const std::string config = file_of(l.model, "tokenizer_config.json");
  CHECK(config.find("\"bos_token\": \"<s>\"") != std::string::npos);
  CHECK(config.find("\"eos_token\": \"<s>\"") != std::string::npos);
  CHECK(config.find("\"pad_token\": null") != std::string::npos);
  CHECK(config.find("\"chat_template\": \"{{ messages }}\"") != std::string::npos);

  // Qwen2's rule: its own three tokens, after the vocabulary (none of them is in it).
  Metadata qwen;
  qwen.string("general.architecture", "qwen2").u32("qwen2.block_count", 1);
  Opened q = open_named({{"token_embd.weight", {4, 7}, ggml_f32, f32_bytes(28)}},
                        with_vocabulary(qwen, {"a b"}));
  const std::string qjson = file_of(q.model, "tokenizer.json");
  CHECK(qjson.find("{\"id\":7,\"content\":\"<|endoftext|>\"") != std::string::npos);
  CHECK(qjson.find("{\"id\":9,\"content\":\"<|im_end|>\"") != std::string::npos);
  CHECK(qjson.find("\"id\":0,") == std::string::npos);

  // A merge that is no pair, or a vocabulary that is not BPE: no files, a note saying why.
  Opened bad = open_named({{"token_embd.weight", {4, 7}, ggml_f32, f32_bytes(28)}},
                          with_vocabulary(llama(2, 1), {"a b c"}));
  CHECK(file_of(bad.model, "tokenizer.json").empty());
  CHECK(bad.model.notes.back().find("a merge that is no pair") != std::string::npos);
  Metadata spm = llama(2, 1);
  spm.string("tokenizer.ggml.model", "llama");
  Opened s2 = open_named({{"token_embd.weight", {4, 3}, ggml_f32, f32_bytes(12)}}, spm);
  CHECK(s2.model.notes.back().find("not a BPE one") != std::string::npos);
}
