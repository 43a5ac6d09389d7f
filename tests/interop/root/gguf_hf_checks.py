# SPDX-License-Identifier: MIT
"""Runs in the interop root: a mount's -o names=hf views (or `ckptfs pack --names hf`'s file)
loaded by the root's transformers, safetensors and accelerate, against transformers' own GGUF
loader: from_pretrained(directory, gguf_file=FILE).

    compare(directory, gguf_file, views, dtype=None)
        AutoModelForCausalLM.from_pretrained(VIEWS) (its config.json and model.safetensors),
        against from_pretrained(DIRECTORY, gguf_file=GGUF_FILE): the same class, the same state
        dict (keys, dtypes, bits), the same logits of a fixed input, the same config (to_dict()
        but _name_or_path); with `dtype` ("bfloat16"), both loaded with dtype=torch.<dtype>
    load_model(directory, gguf_file, views)
    load_checkpoint_and_dispatch(directory, gguf_file, views)
        the export loaded by safetensors.torch.load_model, and by accelerate's
        init_empty_weights + load_checkpoint_and_dispatch, into a model made from the views'
        config.json, against the loader's model

    tokenizers(directory, gguf_file, views)
        AutoTokenizer.from_pretrained(VIEWS) (its tokenizer.json and tokenizer_config.json)
        against AutoTokenizer.from_pretrained(DIRECTORY, gguf_file=GGUF_FILE): the ids of TEXTS
        (special tokens among them), their decoding, the special tokens, the chat template;
        {"loader": "" or why the loader makes no tokenizer, "problems"}
    run_recipe(code, directory, gguf_file)
        a python block of the README run in DIRECTORY; the `model` it makes against
        from_pretrained(DIRECTORY, gguf_file=GGUF_FILE)

Each returns {"problems": [...], ...}: one line per difference.

transformers' is_gguf_available() reads the Debian gguf package's version as "N/A", which it
cannot parse, and so refuses gguf-py 0.19, which is there: patched here (a test's fix, not the
product's).
"""

import os

import torch
import transformers
import transformers.modeling_gguf_pytorch_utils as gguf_utils
import transformers.utils.import_utils as import_utils
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

import_utils.is_gguf_available = lambda *a, **k: True
gguf_utils.is_gguf_available = lambda *a, **k: True
transformers.logging.set_verbosity_error()

INPUT = torch.tensor([[1, 5, 17, 42, 100, 3, 7, 250, 300, 0]])
TEXTS = ["Hello world, the quick brown fox", "  two  spaces\tand\ttabs\n\nlines ",
         "naïve café, 東京, Привет 🚀", "<s>special</s> <|im_start|>user<|im_end|><|endoftext|>",
         "12345 67890 ckptfs mounts checkpoints!", ""]


def logits(model):
    with torch.no_grad():
        return model(INPUT).logits


def same_models(got, want, problems):
    """The state dicts, logits and configs of two models; differences into `problems`."""
    if type(got) is not type(want):
        problems.append(f"{type(got).__name__}, not {type(want).__name__}")
    got_sd, want_sd = got.state_dict(), want.state_dict()
    if sorted(got_sd) != sorted(want_sd):
        problems.append(f"state dict keys {sorted(set(got_sd) ^ set(want_sd))[:10]}")
    for key, t in want_sd.items():
        u = got_sd.get(key)
        if u is None:
            continue
        if u.device.type == "meta":
            problems.append(f"{key}: left on the meta device")
        elif u.dtype != t.dtype or u.shape != t.shape or not torch.equal(u, t):
            problems.append(f"{key}: {u.dtype} {list(u.shape)} differs from {t.dtype} "
                            f"{list(t.shape)}")
    if not problems:
        a, b = logits(got), logits(want)
        if not torch.equal(a, b):
            problems.append(f"logits differ by up to {float((a - b).abs().max())}")
    got_config, want_config = got.config.to_dict(), want.config.to_dict()
    for key in sorted(set(got_config) | set(want_config)):
        if key != "_name_or_path" and got_config.get(key) != want_config.get(key):
            problems.append(f"config {key}: {got_config.get(key)!r}, not "
                            f"{want_config.get(key)!r}")


def compare(directory, gguf_file, views, dtype=None):
    kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
    want = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_file, **kwargs).eval()
    got, info = AutoModelForCausalLM.from_pretrained(views, output_loading_info=True)
    report = {"problems": [], "class": type(want).__name__, "dtype": str(got.dtype),
              "tensors": len(want.state_dict())}
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            report["problems"].append(f"from_pretrained of the views: {kind} {info[kind]}")
    same_models(got.eval(), want, report["problems"])
    return report


def load_model(directory, gguf_file, views):
    """safetensors.torch.load_model of the views' model.safetensors into a model made from their
    config.json, against the loader's model."""
    from safetensors.torch import load_model as load
    want = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_file).eval()
    config = AutoConfig.from_pretrained(views)
    report = {"problems": []}
    model = AutoModelForCausalLM.from_config(config).eval()
    missing, unexpected = load(model, f"{views}/model.safetensors", strict=False)
    # A tied head is no tensor of the file: load_model reports it missing, and it is tied.
    tied = {k for k in missing if k == "lm_head.weight" and config.tie_word_embeddings}
    if set(missing) - tied or unexpected:
        report["problems"].append(f"missing {missing}, unexpected {unexpected}")
    same_models(model, want, report["problems"])
    return report


def load_checkpoint_and_dispatch(directory, gguf_file, views):
    """accelerate's init_empty_weights + load_checkpoint_and_dispatch of the views'
    model.safetensors, against the loader's model."""
    from accelerate import init_empty_weights
    from accelerate import load_checkpoint_and_dispatch as dispatch
    want = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_file).eval()
    config = AutoConfig.from_pretrained(views)
    with init_empty_weights():
        empty = AutoModelForCausalLM.from_config(config)
    empty.tie_weights()
    got = dispatch(empty, f"{views}/model.safetensors", device_map={"": "cpu"}).eval()
    report = {"problems": []}
    same_models(got, want, report["problems"])
    return report


def run_recipe(code, directory, gguf_file):
    before = os.getcwd()
    os.chdir(directory)
    try:
        names = {}
        exec(compile(code, "README.md (recipe)", "exec"), names)  # noqa: S102 (the recipe)
    finally:
        os.chdir(before)
    want = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf_file).eval()
    report = {"problems": []}
    same_models(names["model"].eval(), want, report["problems"])
    return report


def tokenizers(directory, gguf_file, views):
    report = {"loader": "", "problems": []}
    try:
        want = AutoTokenizer.from_pretrained(directory, gguf_file=gguf_file)
    except Exception as e:  # noqa: BLE001 (the mount must then have no tokenizer files)
        report["loader"] = f"{type(e).__name__}: {e}"[:200]
        return report
    got = AutoTokenizer.from_pretrained(views)
    for text in TEXTS:
        a, b = got(text)["input_ids"], want(text)["input_ids"]
        if a != b:
            report["problems"].append(f"{text!r}: ids {a}, not {b}")
        elif got.decode(a) != want.decode(b):
            report["problems"].append(f"{text!r}: decoded {got.decode(a)!r}, not "
                                      f"{want.decode(b)!r}")
    for role in ("bos_token", "eos_token", "unk_token", "pad_token"):
        if getattr(got, role) != getattr(want, role):
            report["problems"].append(f"{role} {getattr(got, role)!r}, not "
                                      f"{getattr(want, role)!r}")
    if got.chat_template != want.chat_template:
        report["problems"].append(f"chat template {got.chat_template!r}, not "
                                  f"{want.chat_template!r}")
    return report
