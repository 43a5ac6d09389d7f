#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""make_gguf_hf_tables: writes src/core/format/gguf/gguf_hf_tables.hpp, the tables with which
`-o names=hf` gives a GGUF file's tensors and metadata the names transformers' GGUF loader gives
them, read out of that loader itself (transformers 5: integrations/ggml.py,
modeling_gguf_pytorch_utils.py) and gguf-py's tensor names, as installed in the interop root.

usage: scripts/interop-run scripts/make_gguf_hf_tables.py /dev/stdout \
           > src/core/format/gguf/gguf_hf_tables.hpp
       clang-format -i src/core/format/gguf/gguf_hf_tables.hpp

What it writes, all data (the transforms themselves are C++, in gguf_hf_names.cpp):
  - GGUF_CONFIG_MAPPING: for each metadata prefix (an architecture, "general", "tokenizer"), the
    GGUF keys after the prefix and the config.json key each becomes (or none: read and dropped);
  - GGUF_CONFIG_DEFAULTS_MAPPING: the config values set first, as JSON;
  - GGUF_TOKENIZER_MAPPING: the keys of the tokenizer and of tokenizer_config;
  - per GGUF architecture (general.architecture): the config model_type transformers makes of
    it, its TensorProcessor class, its tokenizer converter class, and the tensor names:
    get_gguf_hf_weights_map() of the model class AutoModelForCausalLM makes for that model
    type, each block's number written '#' ("blk.#.attn_q.weight" ->
    "model.layers.#.self_attn.q_proj.weight").
An architecture whose model AutoModelForCausalLM cannot make (an encoder-decoder: t5) has no
names, and is told so in the header.
"""

import json
import re
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402
import transformers.modeling_gguf_pytorch_utils as gguf_utils  # noqa: E402
import transformers.utils.import_utils as import_utils  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.integrations import ggml  # noqa: E402

# The Debian gguf package has no version metadata transformers can parse ("N/A"): its check
# fails although gguf-py 0.19 is there.
import_utils.is_gguf_available = lambda *a, **k: True
gguf_utils.is_gguf_available = lambda *a, **k: True
transformers.logging.set_verbosity_error()

# general.architecture values and the config model_type load_gguf_checkpoint() makes of each
# (its "updated_architecture"; mistral is llama with general.name "mistral", t5encoder a t5).
GGUF_ARCHITECTURES = {
    "llama": "llama", "qwen2": "qwen2", "qwen2moe": "qwen2_moe", "gpt-oss": "gpt_oss",
    "lfm2": "lfm2", "qwen3": "qwen3", "qwen3moe": "qwen3_moe", "falcon": "falcon",
    "phi3": "phi3", "bloom": "bloom", "t5": "t5", "t5encoder": "t5", "stablelm": "stablelm",
    "gpt2": "gpt2", "starcoder2": "starcoder2", "mamba": "mamba", "nemotron": "nemotron",
    "gemma2": "gemma2", "gemma3": "gemma3", "gemma4": "gemma4", "deci": "deci",
    "minimax-m2": "minimax_m2",
}
# The config model_type after load_gguf_checkpoint's renames (the text backbone of Gemma 3/4).
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "gemma4": "gemma4_text"}
# Config values transformers derives from a GGUF file that a default config lacks, without
# which the model class cannot be made (nemotron's num_key_value_heads), or with which a model has the
# optional tensors a GGUF file may hold (stablelm's use_qkv_bias comes from its tensors).
CONFIG_VARIANTS = {
    "nemotron": [{"num_key_value_heads": 8}],
    "stablelm": [{"use_qkv_bias": False}, {"use_qkv_bias": True}],
    # LFM2's layers are short convolutions or attention, as its GGUF's per-layer KV heads say.
    "lfm2": [{"num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"]}],
}
LAYERS = 3


def model_of(model_type, overrides):
    config = AutoConfig.for_model(TEXT_MODEL_TYPES.get(model_type, model_type), **overrides)
    if "num_hidden_layers" not in overrides:
        config.num_hidden_layers = LAYERS
    with torch.device("meta"):
        return config, AutoModelForCausalLM.from_config(config)


def unloaded_parameters(model, names):
    """The model's parameters and buffers the name map loads nothing into, but those tied to
    one it does (an untied head's weight shared with the embedding)."""
    state = model.state_dict(keep_vars=True)
    loaded = {id(state[h]) for h in names.values() if h in state}
    return sorted(k for k, v in state.items() if k not in names.values() and id(v) not in loaded)


def patterns(arch, model_type):
    """{gguf pattern: hf pattern} of the architecture, '#' for the block number, and the
    parameters it loads nothing into; or None and the reason there is no map."""
    found = {}
    unloaded = set()
    for overrides in CONFIG_VARIANTS.get(model_type, [{}]):
        try:
            config, model = model_of(model_type, overrides)
        except Exception as e:  # noqa: BLE001 (the reason is what the header says)
            return None, f"AutoModelForCausalLM makes no model of it ({type(e).__name__})", []
        processor_class = gguf_utils.TENSOR_PROCESSORS.get(arch, gguf_utils.TensorProcessor)
        processor = processor_class(config=config.to_dict())
        try:
            names = gguf_utils.get_gguf_hf_weights_map(model, processor)
        except Exception as e:  # noqa: BLE001
            return None, f"get_gguf_hf_weights_map fails ({type(e).__name__})", []
        for name in unloaded_parameters(model, names):
            unloaded.add(re.sub(r"\.\d+\.", ".#.", name, count=1))
        for gguf_name, hf_name in names.items():
            m = re.match(r"blk\.(\d+)\.", gguf_name)
            if m:
                block = m.group(1)
                gguf_name = "blk.#." + gguf_name[m.end():]
                marked = re.sub(rf"\.{block}\.", ".#.", hf_name, count=1)
                if marked == hf_name:
                    raise SystemExit(f"{arch}: {hf_name} has no block number {block}")
                hf_name = marked
            if found.setdefault(gguf_name, hf_name) != hf_name:
                raise SystemExit(f"{arch}: {gguf_name} is {found[gguf_name]} and {hf_name}")
    return dict(sorted(found.items())), None, sorted(unloaded)


def cpp_string(s):
    return json.dumps(s, ensure_ascii=False)


def main():
    out = open(sys.argv[1], "w", encoding="utf-8") if len(sys.argv) > 1 else sys.stdout
    import gguf  # noqa: F401 (its version is in the header)
    w = out.write
    w("// SPDX-License-Identifier: MIT\n")
    w(f"// GENERATED by scripts/make_gguf_hf_tables.py from transformers {transformers.__version__}"
      " (integrations/ggml.py,\n// modeling_gguf_pytorch_utils.py) and gguf-py's tensor names:"
      " do not edit.\n")
    w("#pragma once\n\n#include <string_view>\n\nnamespace ckptfs::gguf_hf {\n\n")
    w("// A GGUF metadata key (after its prefix) and the config key it becomes; hf == nullptr:\n"
      "// read and dropped.\n"
      "struct ConfigKey {\n  const char* gguf;\n  const char* hf;\n};\n")
    w("struct ConfigPrefix {\n  std::string_view prefix;\n  const ConfigKey* keys;\n"
      "  std::size_t count;\n};\n")
    w("// A tensor's name in a GGUF file and in transformers, '#' standing for a block's number.\n"
      "struct NamePattern {\n  std::string_view gguf;\n  std::string_view hf;\n};\n")
    w("struct Architecture {\n"
      "  std::string_view gguf;        // general.architecture\n"
      "  std::string_view model_type;  // its config prefix (load_gguf_checkpoint's)\n"
      "  std::string_view config_model_type;  // config.json's model_type\n"
      "  std::string_view processor;   // the TensorProcessor class transformers uses\n"
      "  std::string_view tokenizer;   // the tokenizer converter class, or empty\n"
      "  std::string_view model_class; // what AutoModelForCausalLM makes of it\n"
      "  const NamePattern* names;     // nullptr: none (why_no_names says why)\n"
      "  std::size_t name_count;\n"
      "  std::string_view why_no_names;\n"
      "  // The model's parameters the loader loads nothing into, comma-separated (\"\": none).\n"
      "  std::string_view unloaded;\n"
      "  std::string_view defaults_json;  // GGUF_CONFIG_DEFAULTS_MAPPING's, or empty\n"
      "};\n\n")
    w(f'inline constexpr std::string_view transformers_version = "{transformers.__version__}";\n\n')

    prefixes = []
    for prefix, keys in ggml.GGUF_CONFIG_MAPPING.items():
        ident = "config_" + re.sub(r"\W", "_", prefix)
        prefixes.append((prefix, ident, len(keys)))
        w(f"inline constexpr ConfigKey {ident}[] = {{\n")
        for k, v in keys.items():
            w(f"    {{{cpp_string(k)}, {cpp_string(v) if v is not None else 'nullptr'}}},\n")
        w("};\n")
    w("inline constexpr ConfigPrefix config_prefixes[] = {\n")
    for prefix, ident, n in prefixes:
        w(f"    {{{cpp_string(prefix)}, {ident}, {n}}},\n")
    w("};\n\n")
    for part in ("tokenizer", "tokenizer_config"):
        keys = ggml.GGUF_TOKENIZER_MAPPING[part]
        w(f"// GGUF_TOKENIZER_MAPPING[\"{part}\"]: keys after \"tokenizer.\".\n")
        w(f"inline constexpr ConfigKey {part}_keys[] = {{\n")
        for k, v in keys.items():
            w(f"    {{{cpp_string(k)}, {cpp_string(v)}}},\n")
        w("};\n")
    w("\n")

    archs = []
    for arch, model_type in GGUF_ARCHITECTURES.items():
        names, why, unloaded = patterns(arch, model_type)
        ident = "names_" + re.sub(r"\W", "_", arch)
        if names:
            w(f"inline constexpr NamePattern {ident}[] = {{\n")
            for g, h in names.items():
                w(f"    {{{cpp_string(g)}, {cpp_string(h)}}},\n")
            w("};\n")
        config_type = TEXT_MODEL_TYPES.get(model_type, model_type)
        processor = gguf_utils.TENSOR_PROCESSORS.get(arch, gguf_utils.TensorProcessor).__name__
        converter = ggml.GGUF_TO_FAST_CONVERTERS.get(config_type)
        model_class = ""
        if names:
            model_class = type(model_of(model_type, CONFIG_VARIANTS.get(model_type, [{}])[0])[1]).__name__
        defaults = ggml.GGUF_CONFIG_DEFAULTS_MAPPING.get(model_type)
        archs.append((arch, model_type, config_type, processor,
                      converter.__name__ if converter else "", model_class,
                      ident if names else "nullptr", len(names) if names else 0, why or "",
                      ", ".join(unloaded), json.dumps(defaults) if defaults else ""))
    w("\ninline constexpr Architecture architectures[] = {\n")
    for a in archs:
        (arch, model_type, config_type, processor, converter, model_class, ident, n, why,
         unloaded, defaults) = a
        w(f"    {{{cpp_string(arch)}, {cpp_string(model_type)}, {cpp_string(config_type)}, "
          f"{cpp_string(processor)}, {cpp_string(converter)}, {cpp_string(model_class)}, "
          f"{ident}, {n}, {cpp_string(why)}, {cpp_string(unloaded)}, {cpp_string(defaults)}}},\n")
    w("};\n\n}  // namespace ckptfs::gguf_hf\n")


if __name__ == "__main__":
    main()
