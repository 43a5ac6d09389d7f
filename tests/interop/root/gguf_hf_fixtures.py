# SPDX-License-Identifier: MIT
"""Runs in the interop root: the fixtures of tests/interop/test_interop_gguf_hf.py (-o names=hf):
tiny random Hugging Face models saved by transformers' save_pretrained, converted to GGUF by
llama.cpp's convert_hf_to_gguf.py, quantized by llama-quantize.

    write(out_dir)   the files below; returns the manifest

write() writes into OUT_DIR:
  <arch>/                 a model directory (save_pretrained, and a tokenizer) of each
                          architecture of ARCHITECTURES: 2 layers, hidden size 256 (rows of
                          whole K-quant blocks), seeded random weights;
  <arch>-f16.gguf         its conversion (--outtype f16: 2-d weights F16, norms F32);
  <arch>-<TYPE>.gguf      QUANTIZED's architectures quantized by llama-quantize to each of
                          TYPES (from the F16 file: the types' usual mixes);
  split-0000k-of-0000n.gguf  the llama model converted as a split set (--split-max-tensors);
  unknown.gguf            a tiny GGUF of an architecture transformers' GGUF loader does not
                          load ("rwkv7"), written by gguf-py;
and returns {"models": {arch: directory}, "f16": {arch: file}, "quantized": {arch: {type:
file}}, "split": [files], "unknown": file, "skipped": {what: why}} (paths relative to OUT_DIR).

Every model shares one byte-level BPE tokenizer trained on a few sentences by the tokenizers
library (the hub is offline). The converter runs in this process, with two of its steps
changed for such models: its check of the pre-tokenizer (a hash of what known tokenizers make
of a test text, which a new tokenizer never matches) gives "gpt-2", and the SentencePiece
vocabularies it would read (this root has no sentencepiece) are read as BPE ones. Neither
touches a tensor. About a minute (the models' creation, 15 conversions, 9 quantizations).
"""

import json
import logging
import runpy
import subprocess
import sys
from pathlib import Path

import torch

SEED = 30
CONVERTER = "/usr/share/doc/llama.cpp-tools/scripts/convert_hf_to_gguf.py"
CONVERTER_MODULES = "/usr/share/llama.cpp/llama.cpp-tools"
TEXT = ("The quick brown fox jumps over the lazy dog. Hello world, ckptfs mounts checkpoints! "
        "12345 67890. Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n\t tabs and  "
        "spaces; naïve café, 東京, Привет. ") * 20
SPECIALS = ["<s>", "</s>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"

COMMON = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
# arch: (config class, model class, config arguments): each a different processing of the
# loader's (Q and K un-permuted, norms - 1, transposes, QKV reshaped, experts merged) or a
# different table.
ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(COMMON, tie_word_embeddings=False)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(COMMON, tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(COMMON, tie_word_embeddings=False)),
    # qwen3's GGUF keys say no head_dim: the config's default (128) must be the model's.
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(COMMON, num_attention_heads=2, num_key_value_heads=1, head_dim=128)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(COMMON, head_dim=64)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(COMMON, head_dim=64)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(COMMON, pad_token_id=0)),
    # gpt2's GGUF keys say no n_positions: the config's default (1024) must be the model's.
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(n_embd=256, n_layer=2, n_head=4, n_positions=1024)),
    "falcon": ("FalconConfig", "FalconForCausalLM",
               dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=1,
                    new_decoder_architecture=False, multi_query=True)),
    "bloom": ("BloomConfig", "BloomForCausalLM", dict(hidden_size=256, n_layer=2, n_head=4)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(COMMON)),
    "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", dict(COMMON)),
    "nemotron": ("NemotronConfig", "NemotronForCausalLM", dict(COMMON)),
    # LFM2: short convolution layers (0, 2) and attention layers (1, 3).
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM",
             dict(COMMON, num_hidden_layers=4,
                  layer_types=["conv", "full_attention", "conv", "full_attention"])),
    # qwen3moe's GGUF keys say no moe_intermediate_size: the config's default (768) must be
    # the model's. (Qwen2-MoE is not here: the loader makes its shared_expert_gate [1, 1, n],
    # which its model refuses, whatever the file.)
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                 dict(COMMON, head_dim=64, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=768)),
}
TYPES = ["Q8_0", "Q4_K_M", "Q5_K_M"]
# Un-permuted rows, norms - 1, transposes: each of TYPES; experts merged: one.
QUANTIZED = {"llama": TYPES, "gemma3": TYPES, "gpt2": TYPES, "qwen3moe": ["Q4_K_M"]}


def tokenizer(directory):
    """A byte-level BPE tokenizer trained on TEXT, saved into DIRECTORY; its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(directory)
    # A BPE vocabulary to the converter (Phi-3's looks for SentencePiece otherwise).
    path = Path(directory) / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "GPT2Tokenizer"
    config["chat_template"] = CHAT_TEMPLATE  # the converter writes it as tokenizer.chat_template
    path.write_text(json.dumps(config))
    return tok.get_vocab_size()


def save_model(directory, arch, vocab_size):
    import transformers
    config_class, model_class, arguments = ARCHITECTURES[arch]
    torch.manual_seed(SEED)
    config = getattr(transformers, config_class)(vocab_size=vocab_size, **arguments)
    getattr(transformers, model_class)(config).eval().save_pretrained(directory)
    if arch == "gpt2":  # the converter reads GPT-2's context length from n_ctx
        path = Path(directory) / "config.json"
        saved = json.loads(path.read_text())
        saved["n_ctx"] = arguments["n_positions"]
        path.write_text(json.dumps(saved))


def patch_converter():
    """The converter's two steps a tiny offline model needs changed (see above)."""
    if CONVERTER_MODULES not in sys.path:
        sys.path.insert(1, CONVERTER_MODULES)
    import conversion.base as base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    base.TextModel._set_vocab_sentencepiece = (
        lambda self, add_to_gguf=True: base.TextModel._set_vocab_gpt2(self))


def convert(directory, out, *arguments):
    """convert_hf_to_gguf.py DIRECTORY --outfile OUT ARGUMENTS..., in this process."""
    patch_converter()
    argv = sys.argv
    sys.argv = [CONVERTER, str(directory), "--outfile", str(out), *arguments]
    try:
        runpy.run_path(CONVERTER, run_name="__main__")
    finally:
        sys.argv = argv


def quantize(source, out, qtype):
    r = subprocess.run(["llama-quantize", str(source), str(out), qtype, "2"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or ["?"])[-1]
    return None


def write_unknown(path):
    import gguf
    import numpy as np
    w = gguf.GGUFWriter(str(path), "rwkv7")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("blk.0.time_mix_w0.weight", np.ones((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write(out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    logging.disable(logging.INFO)  # the converter's listing of every tensor
    manifest = {"models": {}, "f16": {}, "quantized": {}, "skipped": {}}
    for arch in ARCHITECTURES:
        directory = out / arch
        vocab_size = tokenizer(directory)
        save_model(directory, arch, vocab_size)
        manifest["models"][arch] = arch
        f16 = out / f"{arch}-f16.gguf"
        try:
            convert(directory, f16, "--outtype", "f16")
        except Exception as e:  # noqa: BLE001 (the test says which converter step failed)
            manifest["skipped"][f"{arch} f16"] = f"convert_hf_to_gguf.py: {e!r}"[:300]
            continue
        manifest["f16"][arch] = f16.name
    for arch, types in QUANTIZED.items():
        if arch not in manifest["f16"]:
            continue
        manifest["quantized"][arch] = {}
        for qtype in types:
            dest = out / f"{arch}-{qtype}.gguf"
            why = quantize(out / manifest["f16"][arch], dest, qtype)
            if why:
                manifest["skipped"][f"{arch} {qtype}"] = f"llama-quantize: {why}"
            else:
                manifest["quantized"][arch][qtype] = dest.name
    convert(out / "llama", out / "split.gguf", "--outtype", "f16", "--split-max-tensors", "8")
    manifest["split"] = sorted(p.name for p in out.glob("split-*-of-*.gguf"))
    write_unknown(out / "unknown.gguf")
    manifest["unknown"] = "unknown.gguf"
    logging.disable(logging.NOTSET)
    return manifest


if __name__ == "__main__":
    print(json.dumps(write(sys.argv[1]), indent=1))
