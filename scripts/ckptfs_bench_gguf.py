#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ckptfs_bench_gguf: the gguf-py side of scripts/bench's GGUF section. Runs in the interop root
(scripts/interop-run: gguf-py, numpy 2, llama-quantize), prints one JSON document.

usage: ckptfs_bench_gguf.py make OUT_DIR LAYERS
       ckptfs_bench_gguf.py open GGUF
       ckptfs_bench_gguf.py first GGUF TENSOR
       ckptfs_bench_gguf.py dequantize GGUF

  make        OUT_DIR/llama-q4_k.gguf: a Llama of LAYERS layers (4096 wide, 11008 feed-forward,
              32000 tokens) of random float16 weights, written by GGUFWriter a tensor at a time,
              then quantized by llama-quantize --pure to Q4_K (the float16 file removed);
              {"path", "bytes"}
  open        GGUFReader(GGUF): {"seconds", "tensors"}
  first       GGUFReader(GGUF), then TENSOR dequantized: {"seconds"}
  dequantize  every tensor dequantized to float32 with gguf.quants.dequantize, one after the
              other (each dropped before the next: the least memory gguf-py needs), the file warm:
              {"seconds", "bytes" (of float32 made), "maxrss_mib" (this process's peak)}
Times are measured in this process, after its imports.
"""

import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import gguf


def make(out_dir, layers):
    embd, ff, vocab = 4096, 11008, 32000
    f16 = os.path.join(out_dir, "llama-f16.gguf")
    q4k = os.path.join(out_dir, "llama-q4_k.gguf")
    shapes = [("token_embd.weight", (vocab, embd))]
    for i in range(layers):
        p = f"blk.{i}."
        shapes += [(p + "attn_norm.weight", (embd,)), (p + "attn_q.weight", (embd, embd)),
                   (p + "attn_k.weight", (embd, embd)), (p + "attn_v.weight", (embd, embd)),
                   (p + "attn_output.weight", (embd, embd)), (p + "ffn_norm.weight", (embd,)),
                   (p + "ffn_gate.weight", (ff, embd)), (p + "ffn_up.weight", (ff, embd)),
                   (p + "ffn_down.weight", (embd, ff))]
    shapes += [("output_norm.weight", (embd,)), ("output.weight", (vocab, embd))]
    w = gguf.GGUFWriter(f16, "llama")
    w.add_context_length(4096)
    w.add_embedding_length(embd)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(32)
    w.add_head_count_kv(32)
    w.add_rope_dimension_count(128)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(vocab - 3)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([1] * vocab)
    for name, shape in shapes:
        dtype = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(15)
    for name, shape in shapes:
        if len(shape) == 1:
            w.write_tensor_data(np.ones(shape, np.float32))
        else:
            w.write_tensor_data((rng.standard_normal(shape, dtype=np.float32) * 0.02)
                                .astype(np.float16))
    w.close()
    subprocess.run(["llama-quantize", "--pure", f16, q4k, "Q4_K", "2"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.unlink(f16)
    return {"path": q4k, "bytes": os.path.getsize(q4k)}


def open_only(path):
    t0 = time.monotonic()
    reader = gguf.GGUFReader(path)
    return {"seconds": time.monotonic() - t0, "tensors": len(reader.tensors)}


def first(path, name):
    t0 = time.monotonic()
    reader = gguf.GGUFReader(path)
    t = next(t for t in reader.tensors if t.name == name)
    gguf.quants.dequantize(t.data, t.tensor_type)
    return {"seconds": time.monotonic() - t0}


def dequantize_all(path):
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:  # the file warm, as ckptfs's reads of it are
        np.asarray(t.data).sum(dtype=np.uint64) if t.data.dtype == np.uint8 else None
    t0 = time.monotonic()
    made = 0
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        made += values.size * 4
        del values
    return {"seconds": time.monotonic() - t0, "bytes": made,
            "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main():
    what, args = sys.argv[1], sys.argv[2:]
    if what == "make":
        result = make(args[0], int(args[1]))
    elif what == "open":
        result = open_only(args[0])
    elif what == "first":
        result = first(args[0], args[1])
    elif what == "dequantize":
        result = dequantize_all(args[0])
    else:
        raise SystemExit(f"unknown command {what}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
