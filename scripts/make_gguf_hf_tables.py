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


# The tokenizer: what AutoTokenizer.from_pretrained(dir, gguf_file=F) makes of a GGUF file with
# a BPE vocabulary (tokenizer.ggml.model "gpt2"), learnt from probes: files of each architecture
# whose special tokens (four CONTROL tokens at the bos, eos, unk and pad ids, two more CONTROL
# tokens, a USER_DEFINED one) sit at other ids in each probe, so that where each of its added
# tokens and special tokens comes from can be told: every CONTROL token, the token at one of
# those ids, or a text of transformers' own (a converter's or tokenizer class's).
PROBE_SPECIAL = ["<P0>", "<P1>", "<P2>", "<P3>", "<C0>", "<C1>", "<U0>"]
PROBE_TYPES = [3, 3, 3, 3, 3, 3, 4]
PROBES = {"first": dict(bos=0, eos=1, unk=2, pad=3), "swapped": dict(bos=1, eos=0, unk=3, pad=2)}
ROLES = ("bos", "eos", "unk", "pad")


def probe_vocabulary():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog " * 20], trainer)
    j = json.loads(tok.to_str())
    vocab = sorted(j["model"]["vocab"], key=j["model"]["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    return PROBE_SPECIAL + vocab, PROBE_TYPES + [1] * len(vocab), merges


def tokenizer_rule(arch, directory):
    """(rule, None) or (None, why): the tokenizer transformers makes of a BPE GGUF of `arch`."""
    import gguf
    from transformers import AutoTokenizer
    tokens, types, merges = probe_vocabulary()
    made = {}
    for probe, ids in PROBES.items():
        name = f"{arch}-{probe}.gguf"
        w = gguf.GGUFWriter(f"{directory}/{name}", arch)
        w.add_block_count(1)
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        for role, i in ids.items():
            getattr(w, f"add_{role}_token_id")(i)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        try:
            t = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        except Exception as e:  # noqa: BLE001 (the reason is what the header says)
            return None, f"the loader makes no tokenizer of it ({type(e).__name__})"
        backend = json.loads(t.backend_tokenizer.to_str())
        added = backend.pop("added_tokens")
        vocab = backend["model"].pop("vocab")
        backend["model"].pop("merges")
        if vocab != {tok: i for i, tok in enumerate(tokens)}:
            return None, "its vocabulary is not the file's tokens"
        made[probe] = (backend, added, {r: getattr(t, r + "_token") for r in ROLES})
    (first, added, special), (second, added2, special2) = made["first"], made["swapped"]
    ids, ids2 = PROBES["first"], PROBES["swapped"]
    # The model's unk_token may be the file's (Llama's converter): "unk", filled in per file.
    model_unk = ""
    if first["model"].get("unk_token") is not None:
        if (first["model"]["unk_token"], second["model"]["unk_token"]) != \
                (tokens[ids["unk"]], tokens[ids2["unk"]]):
            return None, "its model's unk_token comes from the file in a way the probes cannot tell"
        model_unk = "unk"
        first["model"]["unk_token"] = second["model"]["unk_token"] = None
    if first != second:
        return None, "its tokenizer depends on the special tokens' ids"
    control = {tok for tok, ty in zip(tokens, types) if ty == 3}

    def source(text, text2):
        """Where a token of both probes comes from: a role, or its own text."""
        if text is None:
            return "" if text2 is None else None
        if text not in tokens:
            return "=" + text if text == text2 else None
        for role in ROLES:
            if tokens[ids[role]] == text and tokens[ids2[role]] == text2:
                return role
        return None

    from_file = [a for a in added if a["content"] in tokens]
    rules = []
    if {a["content"] for a in from_file} == control:
        rules.append(("control", "", from_file[0]))
    elif {a["content"] for a in from_file} == {tokens[ids[r]] for r in ROLES}:
        rules += [(r, "", next(a for a in from_file if a["content"] == tokens[ids[r]]))
                  for r in ROLES]
    elif from_file:
        return None, "its added tokens come from the file in a way the probes cannot tell"
    for a in sorted(added, key=lambda a: a["id"]):
        if a["content"] not in tokens:
            rules.append(("", a["content"], a))
    if [a["content"] for a in added if a["content"] not in tokens] != \
            [a["content"] for a in added2 if a["content"] not in tokens]:
        return None, "its own added tokens depend on the file"
    specials = {}
    for role in ROLES:
        got = source(special[role], special2[role])
        if got is None:
            return None, f"its {role}_token comes from the file in a way the probes cannot tell"
        specials[role] = got
    return {"backend": json.dumps(first, ensure_ascii=False, separators=(",", ":")),
            "added": rules, "special": specials, "model_unk": model_unk}, None


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
    w("// A token the loader's tokenizer adds: from the file (source \"control\": every CONTROL\n"
      "// token; \"bos\", \"eos\", \"unk\", \"pad\": the token at that id) or its own `content`\n"
      "// (source \"\"), with the flags tokenizers gives it.\n"
      "struct AddedToken {\n  std::string_view source;\n  std::string_view content;\n"
      "  bool special, normalized, lstrip, rstrip, single_word;\n};\n")
    w("// The tokenizer the loader makes of a BPE vocabulary: tokenizers' JSON of it without\n"
      "// \"added_tokens\" and without the model's \"vocab\" and \"merges\" (the file's tokens and\n"
      "// merges), its added tokens, and its special tokens: \"bos\"... (the token at that id of the\n"
      "// file), \"=TEXT\" (TEXT), \"\" (none).\n"
      "// The model's \"unk_token\" is null in backend_json; model_unk \"unk\": the file's.\n"
      "struct Tokenizer {\n  std::string_view backend_json;\n  const AddedToken* added;\n"
      "  std::size_t added_count;\n  std::string_view bos, eos, unk, pad;\n"
      "  std::string_view model_unk;\n};\n")
    w("struct Architecture {\n"
      "  std::string_view gguf;        // general.architecture\n"
      "  std::string_view model_type;  // its config prefix (load_gguf_checkpoint's)\n"
      "  std::string_view config_model_type;  // config.json's model_type\n"
      "  std::string_view processor;   // the TensorProcessor class transformers uses\n"
      "  std::string_view converter;   // the loader's tokenizer converter class, or empty\n"
      "  std::string_view model_class; // what AutoModelForCausalLM makes of it\n"
      "  const NamePattern* names;     // nullptr: none (why_no_names says why)\n"
      "  std::size_t name_count;\n"
      "  std::string_view why_no_names;\n"
      "  // The model's parameters the loader loads nothing into, comma-separated (\"\": none).\n"
      "  std::string_view unloaded;\n"
      "  std::string_view defaults_json;  // GGUF_CONFIG_DEFAULTS_MAPPING's, or empty\n"
      "  const Tokenizer* tokenizer;     // of a BPE (\"gpt2\") vocabulary; nullptr: none\n"
      "  std::string_view why_no_tokenizer;\n"
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

    import tempfile
    probes = tempfile.mkdtemp(prefix="gguf-hf-probes-")
    archs = []
    for arch, model_type in GGUF_ARCHITECTURES.items():
        rule, why_no_tokenizer = tokenizer_rule(arch, probes)
        tokenizer_ident = "nullptr"
        if rule:
            tokenizer_ident = "&tokenizer_" + re.sub(r"\W", "_", arch)
            w(f"inline constexpr AddedToken added_{re.sub(r'[^a-zA-Z0-9_]', '_', arch)}[] = {{\n")
            for src, content, a in rule["added"]:
                w(f"    {{{cpp_string(src)}, {cpp_string(content)}, {str(a['special']).lower()}, "
                  f"{str(a['normalized']).lower()}, {str(a['lstrip']).lower()}, "
                  f"{str(a['rstrip']).lower()}, {str(a['single_word']).lower()}}},\n")
            w("};\n")
            sp = rule["special"]
            w(f"inline constexpr Tokenizer {tokenizer_ident[1:]} = {{{cpp_string(rule['backend'])}, "
              f"added_{re.sub(r'[^a-zA-Z0-9_]', '_', arch)}, {len(rule['added'])}, "
              f"{cpp_string(sp['bos'])}, {cpp_string(sp['eos'])}, {cpp_string(sp['unk'])}, "
              f"{cpp_string(sp['pad'])}, {cpp_string(rule['model_unk'])}}};\n")
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
                      ", ".join(unloaded), json.dumps(defaults) if defaults else "",
                      tokenizer_ident, why_no_tokenizer or ""))
    w("\ninline constexpr Architecture architectures[] = {\n")
    for a in archs:
        (arch, model_type, config_type, processor, converter, model_class, ident, n, why,
         unloaded, defaults, tokenizer_ident, why_no_tokenizer) = a
        w(f"    {{{cpp_string(arch)}, {cpp_string(model_type)}, {cpp_string(config_type)}, "
          f"{cpp_string(processor)}, {cpp_string(converter)}, {cpp_string(model_class)}, "
          f"{ident}, {n}, {cpp_string(why)}, {cpp_string(unloaded)}, {cpp_string(defaults)}, "
          f"{tokenizer_ident}, {cpp_string(why_no_tokenizer)}}},\n")
    w("};\n\n}  // namespace ckptfs::gguf_hf\n")


if __name__ == "__main__":
    main()
