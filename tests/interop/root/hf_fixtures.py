# SPDX-License-Identifier: MIT
"""Runs in the interop root: files written by the Hugging Face libraries of the root, the
fixtures of tests/interop/test_interop_safetensors.py and test_interop_transformers.py.

    write_safetensors(out_dir)  safetensors.torch.save_file of every dtype it saves
    write_models(out_dir)       tiny GPT-2 and Llama models saved by transformers'
                                save_pretrained, single file and sharded, and as .bin

Seeded, small (about 1 MB a model), seconds.
"""

import os

import torch

SEED = 22


def random_tensor(dtype, shape, gen):
    """A tensor of `dtype` and `shape` whose bytes are random (bools 0 or 1)."""
    numel = 1
    for s in shape:
        numel *= s
    raw = torch.randint(0, 256, (numel * dtype.itemsize,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def write_safetensors(out_dir):
    """OUT_DIR/all_dtypes.safetensors: for every dtype safetensors.torch saves (its own table),
    a (3, 4), a 0-d (but float4_e2m1fn_x2: the library refuses it) and an empty tensor, with
    __metadata__. Returns {"path", "dtypes",
    "metadata"}."""
    from safetensors.torch import _SIZE, save_file
    gen = torch.Generator().manual_seed(SEED)
    tensors, names = {}, []
    for dtype in sorted((d for d in _SIZE if d is not None), key=str):
        name = str(dtype).removeprefix("torch.")
        names.append(name)
        tensors[f"{name}.matrix"] = random_tensor(dtype, (3, 4), gen)
        if dtype != torch.float4_e2m1fn_x2:  # (0-d: the library refuses half a byte)
            tensors[f"{name}.scalar"] = random_tensor(dtype, (), gen)
        tensors[f"{name}.empty"] = random_tensor(dtype, (0, 4), gen)
    metadata = {"format": "pt", "written_by": "tests/interop/root/hf_fixtures.py"}
    path = os.path.join(out_dir, "all_dtypes.safetensors")
    save_file(tensors, path, metadata=metadata)
    return {"path": path, "dtypes": names, "metadata": metadata}


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(SEED)
    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    return GPT2LMHeadModel(config).eval()


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(SEED + 1)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, tie_word_embeddings=False)
    return LlamaForCausalLM(config).eval()


def save_tokenizer(directory):
    """A word-level tokenizer and a chat template saved by save_pretrained beside the model
    (tokenizer.json, tokenizer_config.json, chat_template.jinja), made offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {f"w{i}": i for i in range(500)}
    vocab["[UNK]"] = 500
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="w0")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    tokenizer.save_pretrained(directory)


def save_bin(model, directory, max_shard_size=None):
    """The model as transformers 4 saved it with safe_serialization=False (transformers 5 no
    longer writes .bin): pytorch_model.bin, or pytorch_model-0000N-of-0000M.bin shards and
    pytorch_model.bin.index.json split by huggingface_hub's rule, torch.save'd state dicts."""
    import json
    from huggingface_hub import split_torch_state_dict_into_shards
    model.config.save_pretrained(directory)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if max_shard_size is None:
        torch.save(state, os.path.join(directory, "pytorch_model.bin"))
        return
    split = split_torch_state_dict_into_shards(state, filename_pattern="pytorch_model{suffix}.bin",
                                               max_shard_size=max_shard_size)
    for filename, keys in split.filename_to_tensors.items():
        torch.save({k: state[k] for k in keys}, os.path.join(directory, filename))
    index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    with open(os.path.join(directory, "pytorch_model.bin.index.json"), "w") as f:
        json.dump(index, f, indent=2)


def write_models(out_dir):
    """The saved models, each a directory of OUT_DIR: {name: {"path", "files", "sharded"}}.
        gpt2            save_pretrained: model.safetensors
        gpt2_sharded    save_pretrained(max_shard_size="100KB"): model-0000N-of-0000M...
        gpt2_bin        pytorch_model.bin (save_bin)
        gpt2_bin_sharded  pytorch_model-0000N-of-0000M.bin (save_bin, 100KB)
        llama_sharded   a Llama (untied head), save_pretrained(max_shard_size="200KB")
    Each with a tokenizer beside it (save_tokenizer)."""
    out = {}

    def record(name, directory, sharded):
        out[name] = {"path": directory, "files": sorted(os.listdir(directory)),
                     "sharded": sharded}

    gpt2, llama = tiny_gpt2(), tiny_llama()
    for name, model, size in (("gpt2", gpt2, None), ("gpt2_sharded", gpt2, "100KB"),
                              ("llama_sharded", llama, "200KB")):
        directory = os.path.join(out_dir, name)
        if size is None:
            model.save_pretrained(directory)
        else:
            model.save_pretrained(directory, max_shard_size=size)
        save_tokenizer(directory)
        record(name, directory, size is not None)
    for name, size in (("gpt2_bin", None), ("gpt2_bin_sharded", "100KB")):
        directory = os.path.join(out_dir, name)
        os.makedirs(directory)
        save_bin(gpt2, directory, size)
        save_tokenizer(directory)
        record(name, directory, size is not None)
    return out
