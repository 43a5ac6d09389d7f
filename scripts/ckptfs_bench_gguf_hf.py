#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ckptfs_bench_gguf_hf: the interop root's side of scripts/bench's section "GGUF to a
transformers model" (scripts/bench_gguf_hf.py). Runs in the root (scripts/interop-run:
transformers 5, gguf-py, llama-quantize), prints one JSON document.

usage: ckptfs_bench_gguf_hf.py make OUT_DIR LAYERS HIDDEN
       ckptfs_bench_gguf_hf.py gguf DIRECTORY FILE
       ckptfs_bench_gguf_hf.py mount VIEWS

  make   OUT_DIR/llama-LAYERS-HIDDEN-q4_k_m.gguf: a Llama of LAYERS layers, HIDDEN wide (feed-
         forward 2.75 x HIDDEN, 32,000 tokens, 32 heads, 8 KV heads) of random float16 weights,
         written by GGUFWriter a tensor at a time, quantized by llama-quantize to Q4_K_M (its
         usual mix: Q4_K, Q6_K); {"path", "bytes"}
  gguf   AutoModelForCausalLM.from_pretrained(DIRECTORY, gguf_file=FILE): transformers' GGUF loader
  mount  AutoModelForCausalLM.from_pretrained(VIEWS): a -o names=hf mount's .ckptfs
Each load prints {"seconds" (from_pretrained, then every parameter read once: a safetensors
file's weights are mapped, read when touched), "peak_mib" (this process's VmHWM then: mapped
file pages count), "base_mib" (its VmRSS before, the imports done), "sum" (of every weight),
"parameters"}; times are measured in this process, after its imports.
"""

import json
import os
import subprocess
import sys
import time


def status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def make(out_dir, layers, hidden):
    import numpy as np
    import gguf
    ff, vocab, heads, kv_heads = hidden * 11 // 4, 32000, 32, 8
    kv = hidden * kv_heads // heads
    f16 = os.path.join(out_dir, "llama-f16.gguf")
    out = os.path.join(out_dir, f"llama-{layers}-{hidden}-q4_k_m.gguf")
    shapes = [("token_embd.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"blk.{i}."
        shapes += [(p + "attn_norm.weight", (hidden,)), (p + "attn_q.weight", (hidden, hidden)),
                   (p + "attn_k.weight", (kv, hidden)), (p + "attn_v.weight", (kv, hidden)),
                   (p + "attn_output.weight", (hidden, hidden)), (p + "ffn_norm.weight", (hidden,)),
                   (p + "ffn_gate.weight", (ff, hidden)), (p + "ffn_up.weight", (ff, hidden)),
                   (p + "ffn_down.weight", (hidden, ff))]
    shapes += [("output_norm.weight", (hidden,)), ("output.weight", (vocab, hidden))]
    w = gguf.GGUFWriter(f16, "llama")
    w.add_name("bench")
    w.add_context_length(2048)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(vocab - 3)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [1] * (vocab - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for name, shape in shapes:
        dtype = np.float32 if len(shape) == 1 else np.float16
        w.add_tensor_info(name, shape, np.dtype(dtype),
                          int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(17)
    for name, shape in shapes:
        if len(shape) == 1:
            w.write_tensor_data(1 + rng.standard_normal(shape, dtype=np.float32) * 0.1)
        else:
            w.write_tensor_data((rng.standard_normal(shape, dtype=np.float32) * 0.02)
                                .astype(np.float16))
    w.close()
    subprocess.run(["llama-quantize", f16, out, "Q4_K_M", "2"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.unlink(f16)
    return {"path": out, "bytes": os.path.getsize(out)}


def load(*args, **kwargs):
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    import transformers.utils.import_utils as import_utils
    from transformers import AutoModelForCausalLM
    # The Debian gguf package's version, which transformers cannot parse (see gguf_hf_checks).
    import_utils.is_gguf_available = lambda *a, **k: True
    gguf_utils.is_gguf_available = lambda *a, **k: True
    transformers.logging.set_verbosity_error()
    base = status_kib("VmRSS")
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(*args, **kwargs)
    # Every weight read once: a safetensors file's are mapped, and read only when touched.
    with torch.no_grad():
        total = sum(float(p.sum()) for p in model.parameters())
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_mib": status_kib("VmHWM") / 1024,
            "base_mib": base / 1024, "sum": total,
            "parameters": sum(p.numel() for p in model.parameters())}


def main():
    what = sys.argv[1]
    if what == "make":
        result = make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif what == "gguf":
        result = load(sys.argv[2], gguf_file=sys.argv[3])
    elif what == "mount":
        result = load(sys.argv[2])
    else:
        raise SystemExit(f"unknown command {what}")
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
