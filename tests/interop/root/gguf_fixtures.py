# SPDX-License-Identifier: MIT
"""Runs in the interop root: the GGUF fixtures of tests/interop/test_interop_gguf.py, written by
the real tools (gguf-py's GGUFWriter, llama-quantize, gguf-convert-endian).

    write(out_dir)                 the files below; returns the manifest
    random_blocks(out_dir, types)  random blocks of each type, and gguf-py's values of them

write() writes into OUT_DIR:
  llama-f32.gguf        a tiny Llama (2 layers, every dimension a multiple of 256) written by
                        gguf-py's GGUFWriter: F32 weights, an F16 and a BF16 tensor, a vocabulary;
  llama-<TYPE>.gguf     that model quantized by llama-quantize to each type it offers (--pure:
                        every weight matrix of that type; the IQ1/IQ2 types with imatrix.gguf);
  imatrix.gguf          an importance matrix (GGUF, as llama-imatrix writes one) of random positive
                        activations: this root has no llama-imatrix;
  raw-<TYPE>.gguf       random blocks of the types llama-quantize does not write (NVFP4, MXFP4,
                        Q8_1, Q8_K...), written raw by GGUFWriter;
  split-0000k-of-00003.gguf  the f32 model written by GGUFWriter in three files (split_max_tensors);
  llama-be.gguf         llama-Q4_K_M.gguf converted big-endian by gguf-convert-endian;
  vocab150k.gguf        a tensorless file with a 150,000-token vocabulary and merges;
and returns {"quantized": [[file, type]...], "raw": [file], "split": [files], "big_endian": file,
"skipped": {type: why}} (paths relative to OUT_DIR). Seeded; a minute or two (llama-quantize).
"""

import subprocess
import warnings
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

EMBD, FF, VOCAB, LAYERS, HEADS = 256, 512, 512, 2, 4

# llama-quantize's names, and the GGML type the weight matrices get with --pure.
QUANTIZE = [
    ("Q4_0", T.Q4_0), ("Q4_1", T.Q4_1), ("Q5_0", T.Q5_0), ("Q5_1", T.Q5_1), ("Q8_0", T.Q8_0),
    ("Q2_K", T.Q2_K), ("Q3_K_M", T.Q3_K), ("Q4_K_M", T.Q4_K), ("Q5_K_M", T.Q5_K),
    ("Q6_K", T.Q6_K), ("IQ2_XXS", T.IQ2_XXS), ("IQ2_XS", T.IQ2_XS), ("IQ2_S", T.IQ2_S),
    ("IQ3_XXS", T.IQ3_XXS), ("IQ3_S", T.IQ3_S), ("IQ1_S", T.IQ1_S), ("IQ1_M", T.IQ1_M),
    ("IQ4_NL", T.IQ4_NL), ("IQ4_XS", T.IQ4_XS), ("TQ1_0", T.TQ1_0), ("TQ2_0", T.TQ2_0),
    ("Q1_0", T.Q1_0), ("Q2_0", T.Q2_0), ("F16", T.F16), ("BF16", T.BF16),
]
NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"}
RAW = [T.NVFP4, T.MXFP4, T.Q8_1, T.Q8_K, T.Q4_0, T.IQ4_XS]


def weights():
    """(name, array) of a Llama's tensors, in GGUF's usual order, C-order shapes."""
    rng = np.random.default_rng(2024)
    out = [("token_embd.weight", rng.standard_normal((VOCAB, EMBD), dtype=np.float32) * 0.02)]
    for i in range(LAYERS):
        p = f"blk.{i}."
        out += [
            (p + "attn_norm.weight", 1 + rng.standard_normal(EMBD, dtype=np.float32) * 0.1),
            (p + "attn_q.weight", rng.standard_normal((EMBD, EMBD), dtype=np.float32) * 0.05),
            (p + "attn_k.weight", rng.standard_normal((EMBD, EMBD), dtype=np.float32) * 0.05),
            (p + "attn_v.weight", rng.standard_normal((EMBD, EMBD), dtype=np.float32) * 0.05),
            (p + "attn_output.weight", rng.standard_normal((EMBD, EMBD), dtype=np.float32) * 0.05),
            (p + "ffn_norm.weight", 1 + rng.standard_normal(EMBD, dtype=np.float32) * 0.1),
            (p + "ffn_gate.weight", rng.standard_normal((FF, EMBD), dtype=np.float32) * 0.05),
            (p + "ffn_up.weight", rng.standard_normal((FF, EMBD), dtype=np.float32) * 0.05),
            (p + "ffn_down.weight", rng.standard_normal((EMBD, FF), dtype=np.float32) * 0.05),
        ]
    out += [("output_norm.weight", 1 + rng.standard_normal(EMBD, dtype=np.float32) * 0.1),
            ("output.weight", rng.standard_normal((VOCAB, EMBD), dtype=np.float32) * 0.02)]
    return out


def add_llama_metadata(w, vocab=VOCAB):
    w.add_context_length(256)
    w.add_embedding_length(EMBD)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(EMBD // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"tok{i}" for i in range(vocab - len(tokens))]
    w.add_token_list(tokens)
    w.add_token_scores([float(-i) for i in range(vocab)])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (vocab - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    # Metadata of every value type, for the metadata comparison.
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_int32("test.i32", -2000000000)
    w.add_uint64("test.u64", 2**64 - 1)
    w.add_int64("test.i64", -(2**63))
    w.add_float64("test.f64", 0.1)
    w.add_float32("test.f32", 1e-5)
    w.add_bool("test.bool", True)
    w.add_string("test.unicode", "héllo wörld ✓")
    w.add_array("test.floats", [0.5, -2.25, 3.0e38])


def write_llama(path, tensor_type=None, split_max_tensors=0):
    w = gguf.GGUFWriter(str(path), "llama", split_max_tensors=split_max_tensors)
    add_llama_metadata(w)
    for name, a in weights():
        if name == "blk.1.attn_norm.weight":
            w.add_tensor(name, a.astype(np.float16))  # an F16 tensor among the F32 ones
        elif name == "blk.1.ffn_norm.weight":
            w.add_tensor(name, gguf.quants.quantize(a, T.BF16), raw_dtype=T.BF16)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_imatrix(path):
    rng = np.random.default_rng(7)
    w = gguf.GGUFWriter(str(path), None)
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["random activations (ckptfs test)"])
    w.add_uint32("imatrix.chunk_count", 10)
    w.add_uint32("imatrix.chunk_size", 512)
    for name, a in weights():
        if a.ndim != 2:
            continue
        n_in = a.shape[1]
        w.add_tensor(name + ".in_sum2", (rng.random((1, n_in), dtype=np.float32) * 10 + 0.1))
        w.add_tensor(name + ".counts", np.array([[10.0]], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_raw(path, types):
    """A file of random blocks: one tensor per type, 3 rows of 2 blocks (4 for 32-value ones)."""
    rng = np.random.default_rng(99)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("test.nested", [[1, 2], [3]])  # gguf-py reads arrays of arrays; llama.cpp does not
    w.add_array("test.empty", [])
    for t in types:
        block, size = gguf.GGML_QUANT_SIZES[t]
        blocks_per_row = 4 if block <= 64 else 2
        raw = rng.integers(0, 256, size=(3, blocks_per_row * size), dtype=np.uint8)
        w.add_tensor(f"raw.{t.name}", raw, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_vocab(path, n=150_000):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"\u0120token{i}" for i in range(n)])
    w.add_token_types([1] * n)
    w.add_token_merges([f"\u0120tok en{i}" for i in range(n)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write(out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    f32 = out / "llama-f32.gguf"
    write_llama(f32)
    write_imatrix(out / "imatrix.gguf")
    manifest = {"quantized": [], "raw": [], "skipped": {}}
    for name, qtype in QUANTIZE:
        dest = out / f"llama-{name}.gguf"
        args = ["llama-quantize", "--pure"]
        if name in NEEDS_IMATRIX:
            args += ["--imatrix", str(out / "imatrix.gguf")]
        r = subprocess.run(args + [str(f32), str(dest), name, "2"], capture_output=True,
                           text=True)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            manifest["skipped"][name] = f"llama-quantize exited {r.returncode}: {tail}"
            continue
        manifest["quantized"].append([dest.name, qtype.name])
    write_raw(out / "raw.gguf", RAW)
    manifest["raw"] = ["raw.gguf"]
    write_llama(out / "split.gguf", split_max_tensors=8)
    manifest["split"] = sorted(p.name for p in out.glob("split-*-of-*.gguf"))
    be = out / "llama-be.gguf"
    be.write_bytes((out / "llama-Q4_K_M.gguf").read_bytes())
    r = subprocess.run(["gguf-convert-endian", str(be), "big"], input="YES\n",
                       capture_output=True, text=True)
    manifest["big_endian"] = be.name if r.returncode == 0 else None
    if r.returncode != 0:
        manifest["skipped"]["big-endian"] = r.stderr.strip()[-300:]
    write_vocab(out / "vocab150k.gguf")
    return manifest


def random_blocks(out_dir, types):
    """OUT_DIR/<TYPE>.blocks of random bytes (scales NaN, infinite, subnormal at times) and
    OUT_DIR/<TYPE>.values, gguf.quants.dequantize's float32 values of them, for each GGML type
    name in `types`. 37 rows of 9 blocks: numpy arrays of more than one block (see dequantize()'s
    contract for one block). Returns the number of blocks of each."""
    rng = np.random.default_rng(5)
    counts = {}
    for name in types:
        t = T[name]
        _, size = gguf.GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(37, size * 9), dtype=np.uint8)
        raw.tofile(f"{out_dir}/{name}.blocks")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NaN scales: numpy warns as it computes them
            gguf.quants.dequantize(raw, t).astype(np.float32).tofile(f"{out_dir}/{name}.values")
        counts[name] = 37 * 9
    return counts
