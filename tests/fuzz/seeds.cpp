// SPDX-License-Identifier: MIT
// Writes hostile seed inputs built with the test builders (tests/support/) for the fuzzers:
//   fuzz_seeds OUTDIR   ->  OUTDIR/zip/*, OUTDIR/pickle/*, OUTDIR/checkpoint/*
// Each seed is a small valid or nearly valid case that takes the fuzzer straight to a corner:
// zip64 ends, lying counts and offsets, overlapping records, strided and broken tensors, legacy
// streams, memo tricks and calls that must stay inert. scripts/fuzz.sh seeds a fresh corpus
// with them (and with the fixtures); the committed corpus is their minimized union.
#include "support/fake_checkpoint.hpp"
#include "support/gguf_builder.hpp"
#include "support/pickle_builder.hpp"
#include "support/zip_builder.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

namespace {

using namespace ckptfs::test;
namespace fs = std::filesystem;

fs::path out_dir;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(out_dir / target);
  std::ofstream(out_dir / target / name, std::ios::binary) << bytes;
}

// A checkpoint seed is also a zip seed, and its data.pkl a pickle seed.
void checkpoint(const std::string& name, const std::string& pkl,
                const std::vector<std::pair<std::string, std::string>>& storages,
                const std::string& prefix = "archive") {
  const std::string zip = torch_zip(pkl, storages, prefix);
  write("checkpoint", name, zip);
  write("zip", name, zip);
  write("pickle", name, pkl);
}

std::string tensor_pickle(std::int64_t numel, std::int64_t offset,
                          std::initializer_list<std::int64_t> size,
                          std::initializer_list<std::int64_t> stride,
                          std::string_view storage_class = "FloatStorage") {
  PickleBuilder p;
  p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
  p.binunicode("w").tensor_v2(storage_class, "0", "cpu", numel, offset, size, stride);
  p.setitems().stop();
  return p.bytes();
}

void zip_seeds() {
  const std::string pkl = state_dict_pickle({{"a", "0", 6, 0, {2, 3}, {3, 1}}});
  {
    ZipBuilder z;
    z.add("archive/data.pkl", pkl).add("archive/data/0", floats(6)).add("archive/version", "3\n");
    write("zip", "plain", z.build());
  }
  {
    ZipBuilder z;
    z.add("archive/data.pkl", pkl, torch_entry()).add("archive/data/0", floats(6), torch_entry());
    write("zip", "zip64_saturated", z.build({.zip64 = true, .saturate_classic = true}));
  }
  {
    ZipBuilder z;
    z.add("archive/data.pkl", pkl, {.zip64_central = zip64_all})
        .add("archive/data/0", floats(6), {.zip64_local = true, .zip64_central = zip64_all});
    write("zip", "zip64_extras", z.build({.zip64 = true, .comment = "a comment PK\x05\x06"}));
  }
  {
    ZipBuilder z;
    z.add("a", "x").add("b", "yy");
    write("zip", "count_lies", z.build({.entry_count = 3}));
  }
  {
    ZipBuilder z;
    z.add("a", "x").add("b", "yy");
    write("zip", "cd_past_end", z.build({.cd_offset = 1u << 20}));
  }
  {
    ZipBuilder z;
    z.add("a", "hello").add("b", "world", {.header_offset = 0});
    write("zip", "overlap", z.build());
  }
  {
    ZipBuilder z;
    z.add("a", "hello", {.size = 1u << 30, .compressed_size = 1u << 30});
    write("zip", "size_lies", z.build());
  }
  {
    ZipBuilder z;
    z.add("archive/data.pkl", pkl, {.method = 8}).add("archive/data/0", floats(6));
    write("zip", "compressed", z.build());
  }
  {
    ZipBuilder z;
    z.add("a", "x", {.local_extra = std::string("\x01\x00\x10\x00", 4) + std::string(16, '\xff')});
    write("zip", "extra_fields", z.build({.prefix = "junk before the archive"}));
  }
  {
    ZipBuilder z;
    for (int i = 0; i < 64; ++i) z.add("e" + std::to_string(i), "");
    write("zip", "many_empty", z.build({.zip64 = true}));
  }
}

void pickle_seeds() {
  {
    PickleBuilder p;  // every kind of constant
    p.proto(4).mark().none().newtrue().newfalse().binint(-7).binint1(200).binint2(60000);
    p.long1(std::string("\x00\x00\x00\x00\x00\x00\x00\x80\x00", 9)).binfloat(1.5);
    p.short_binunicode("text").binunicode8("long text").short_binbytes("bytes");
    p.int_text("01").long_text("-123456789012345678901234567890").float_text("nan");
    p.unicode_text("caf\\u00e9").short_binstring("old");
    p.list().memoize().binget(0).append().stop();
    write("pickle", "constants", p.bytes());
  }
  {
    PickleBuilder p;  // calls that must stay records
    p.proto(2).global("os", "system").binunicode("touch /tmp/pwned").tuple1().reduce();
    p.global("builtins", "eval").binunicode("1+1").tuple1().reduce().tuple2();
    p.mark().binunicode("print(1)").inst("builtins", "exec").tuple2().stop();
    write("pickle", "calls", p.bytes());
  }
  {
    PickleBuilder p;  // a list appended to itself, dict items, sets, BUILD
    p.proto(4).empty_list().memoize().binget(0).append();
    p.empty_dict().memoize().binunicode("self").binget(1).setitem();
    p.op(0x8f).mark().binint1(1).binint1(2).op(0x90);
    p.mark().binint1(3).op(0x91);
    p.global("collections", "OrderedDict").empty_tuple().newobj().empty_dict().build();
    p.mark().binint1(4).tuple().stop();
    write("pickle", "structures", p.bytes());
  }
  {
    PickleBuilder p;  // STACK_GLOBAL, NEWOBJ_EX, frames, persistent ids
    p.proto(5).frame(40).short_binunicode("torch").short_binunicode("Size").stack_global();
    p.mark().binint1(2).binint1(3).tuple().tuple1().empty_dict().newobj_ex();
    p.persid("0").mark().binunicode("storage").global("torch", "FloatStorage");
    p.binunicode("0").binunicode("cpu").binint1(6).tuple().binpersid().tuple2().stop();
    write("pickle", "protocol5", p.bytes());
  }
  {
    PickleBuilder p;  // deep nesting
    p.proto(2);
    for (int i = 0; i < 1000; ++i) p.empty_list();
    for (int i = 0; i < 999; ++i) p.append();
    p.stop();
    write("pickle", "deep", p.bytes());
  }
  {
    PickleBuilder p;  // memo edge cases
    p.proto(2).none().long_binput(0xffffffff).pop().long_binget(0xffffffff).put(7).get(7);
    p.tuple2().stop();
    write("pickle", "memo", p.bytes());
  }
}

void checkpoint_seeds() {
  checkpoint("contiguous", tensor_pickle(6, 0, {2, 3}, {3, 1}), {{"0", floats(6)}});
  checkpoint("transposed", tensor_pickle(6, 0, {3, 2}, {1, 3}), {{"0", floats(6)}});
  checkpoint("expanded", tensor_pickle(3, 0, {4, 3}, {0, 1}), {{"0", floats(3)}});
  checkpoint("offset_view", tensor_pickle(12, 5, {2, 2}, {4, 2}), {{"0", floats(12)}});
  checkpoint("scalar", tensor_pickle(1, 0, {}, {}), {{"0", floats(1)}});
  checkpoint("empty", tensor_pickle(0, 0, {0, 3}, {3, 1}), {{"0", ""}});
  checkpoint("view_too_big", tensor_pickle(6, 0, {3, 3}, {3, 1}), {{"0", floats(6)}});
  checkpoint("short_storage", tensor_pickle(6, 0, {2, 3}, {3, 1}), {{"0", floats(5)}});
  checkpoint("missing_storage", tensor_pickle(6, 0, {2, 3}, {3, 1}), {});
  checkpoint("bytes_storage", tensor_pickle(7, 1, {3}, {2}, "ByteStorage"), {{"0", "abcdefg"}});
  checkpoint("double_storage", tensor_pickle(2, 0, {2}, {1}, "DoubleStorage"), {{"0", floats(4)}});
  checkpoint("tied",
             state_dict_pickle({{"a", "0", 8, 0, {2, 4}, {4, 1}},
                                {"b", "0", 8, 2, {3, 2}, {1, 3}},
                                {"c", "1", 4, 0, {2, 2}, {1, 2}}}),
             {{"0", floats(8)}, {"1", floats(4)}}, "model");
  {
    PickleBuilder p;  // values beside tensors
    p.proto(2).empty_dict().mark().binunicode("epoch").binint1(7);
    p.binunicode("lr").binfloat(0.001).binunicode("w");
    p.tensor_v2("HalfStorage", "0", "cpu", 4, 0, {2, 2}, {2, 1});
    p.binunicode("cfg").mark().binunicode("x").none().binunicode("y").newtrue().dict();
    p.setitems().stop();
    checkpoint("values", p.bytes(), {{"0", floats(2)}});
  }
  {
    // A legacy stream: magic, protocol, sys_info, the main pickle, the key list, the storages.
    PickleBuilder s;
    s.proto(2).long1(std::string("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10)).stop();
    s.proto(2).binint2(1001).stop();
    s.proto(2).empty_dict().binunicode("little_endian").newtrue().setitem().stop();
    s.proto(2).empty_dict().binunicode("w");
    s.global("torch._utils", "_rebuild_tensor_v2").mark();
    s.mark().binunicode("storage").global("torch", "FloatStorage").binunicode("k0");
    s.binunicode("cpu").integer(6).none().tuple().binpersid();
    s.integer(0).int_tuple({3, 2}).int_tuple({1, 3}).newfalse();
    s.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce();
    s.setitem().stop();
    s.proto(2).mark().binunicode("k0").list().stop();
    std::string stream = s.bytes();
    stream += std::string("\x06\0\0\0\0\0\0\0", 8) + floats(6);
    write("checkpoint", "legacy", stream);
  }
}

// GGUF: every kind of tensor and value, both byte orders, version 1, and lying counts.
void gguf_seeds() {
  const std::string f32(16, '\1');
  const std::string q4k(144, '\x21'), q8(34, '\x42'), iq2(66, '\x13'), nv(36, '\x38');
  GgufWriter kv;
  kv.key("general.architecture", 8).string("llama").key("n", 4).u32(7).key("f", 6).f32(0.5f);
  kv.key("tokens", 9).u32(8).u64(2).string("a").string("b");
  kv.key("nested", 9).u32(9).u64(1).u32(5).u64(1).u32(3);
  write("gguf", "types",
        gguf_file({{"f32", {4}, 0, f32},
                   {"q4k", {256}, 12, q4k},
                   {"q8", {32}, 8, q8},
                   {"iq2", {256}, 16, iq2},
                   {"nv", {64}, 40, nv},
                   {"q8k", {256}, 15, std::string(292, 0)}},
                  3, false, 32, kv.bytes, 5));
  GgufWriter be_kv(3, true);
  be_kv.key("n", 4).u32(7);
  write("gguf", "big_endian",
        gguf_file({{"f32", {4}, 0, f32}, {"q4k", {256}, 12, q4k}}, 3, true, 32, be_kv.bytes, 1));
  GgufWriter v1_kv(1);
  v1_kv.key("s", 8).string("v1");
  write("gguf", "v1", gguf_file({{"t", {2, 2}, 0, f32}}, 1, false, 32, v1_kv.bytes, 1));
  write("gguf", "aligned64", gguf_file({{"t", {4}, 0, f32}}, 3, false, 64));
  GgufWriter lie;
  lie.header(1, 1).key("k", 9).u32(0).u64(1ull << 40);
  write("gguf", "lying_count", lie.bytes);
  GgufWriter overlap;
  overlap.header(2, 0).tensor_info("a", {8}, 0, 0).tensor_info("b", {8}, 0, 0).align();
  overlap.bytes += std::string(32, '\0');
  write("gguf", "overlap", overlap.bytes);
  // -o names=hf: a Llama's Q and K (plain and Q8_0: assemblies, derivations), GPT-2's
  // transposes, Gemma's norms, Qwen3-MoE's experts (the fuzz target names every file so).
  GgufWriter llama;
  llama.key("general.architecture", 8).string("llama").key("llama.block_count", 4).u32(1);
  llama.key("llama.attention.head_count", 4).u32(2);
  llama.key("llama.attention.head_count_kv", 4).u32(1);
  write("gguf", "names_hf_llama",
        gguf_file({{"blk.0.attn_q.weight", {4, 8}, 0, std::string(128, '\1')},
                   {"blk.0.attn_k.weight", {32, 4}, 8, std::string(4 * 34, '\x42')},
                   {"blk.0.attn_v.weight", {4, 4}, 1, std::string(32, '\x3c')},
                   {"rope_freqs.weight", {2}, 0, std::string(8, '\0')}},
                  3, false, 32, llama.bytes, 4));
  GgufWriter gpt2;
  gpt2.key("general.architecture", 8).string("gpt2").key("gpt2.block_count", 4).u32(1);
  write("gguf", "names_hf_gpt2",
        gguf_file({{"blk.0.attn_qkv.weight", {2, 3}, 0, std::string(24, '\1')},
                   {"blk.0.ffn_up.weight", {32, 3}, 8, std::string(3 * 34, '\x42')},
                   {"output.weight", {2, 3}, 0, std::string(24, '\2')}},
                  3, false, 32, gpt2.bytes, 2));
  GgufWriter gemma;
  gemma.key("general.architecture", 8).string("gemma3").key("gemma3.block_count", 4).u32(1);
  write("gguf", "names_hf_gemma",
        gguf_file({{"blk.0.attn_norm.weight", {4}, 0, f32}}, 3, false, 32, gemma.bytes, 2));
  GgufWriter moe;
  moe.key("general.architecture", 8).string("qwen3moe").key("qwen3moe.block_count", 4).u32(1);
  write("gguf", "names_hf_moe",
        gguf_file({{"blk.0.ffn_gate_exps.weight", {32, 2, 2}, 8, std::string(4 * 34, '\x42')},
                   {"blk.0.ffn_up_exps.weight", {32, 2, 2}, 8, std::string(4 * 34, '\x43')},
                   {"blk.0.ffn_down_exps.weight", {2, 2, 2}, 0, std::string(32, '\1')}},
                  3, false, 32, moe.bytes, 2));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds OUTDIR\n";
    return 1;
  }
  out_dir = argv[1];
  zip_seeds();
  pickle_seeds();
  checkpoint_seeds();
  gguf_seeds();
  return 0;
}
