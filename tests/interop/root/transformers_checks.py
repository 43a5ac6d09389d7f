# SPDX-License-Identifier: MIT
"""Runs in the interop root: models loaded by the root's transformers (5.x) and accelerate from a
mount's views, against the same libraries' loading of the model as saved.

    from_pretrained_via_mount(original, views, out, dtype=None)
        a model directory OUT (the original's config.json, the mount's model.safetensors or
        shard set as symbolic links) loaded by from_pretrained, against from_pretrained of the
        original; with `dtype` ("bfloat16"), both loaded with dtype=torch.<dtype>
    accelerate_via_mount(original, checkpoint)
        init_empty_weights + load_checkpoint_in_model from CHECKPOINT (the mount's
        model.safetensors, or its views folder holding a shard set), against from_pretrained
        of the original
    from_pretrained_of_views(original, views, dtype=None)
        from_pretrained(VIEWS) itself: the mount's views folder as the model directory it
        serves (config.json, tokenizer files beside the export); with `dtype`, VIEWS loaded
        with dtype="auto" against the original loaded with dtype=torch.<dtype>; the tokenizers
        of both encode and apply the chat template alike
    dispatch_via_mount(original, checkpoint)
        init_empty_weights + load_checkpoint_and_dispatch from CHECKPOINT
    load_model_via_mount(original, checkpoint)
        safetensors.torch.load_model of CHECKPOINT (the mount's model.safetensors) into a model
        made from the original's config

Each returns {"logits_equal", "max_difference", "dtype", "problems": [...]}: the logits of a
fixed input and every tensor of the state dict must be the same, bit for bit.
"""

import os
import shutil

import torch
from transformers import AutoConfig, AutoModelForCausalLM

INPUT = torch.tensor([[1, 5, 17, 42, 100, 3, 7, 250, 511, 0]])
WEIGHT_NAMES = ("model.safetensors", "model.safetensors.index.json")


def logits(model):
    with torch.no_grad():
        return model(INPUT).logits


def link_dir(original, views, out):
    """OUT: the config files of model directory ORIGINAL, copied, and the weights of the mount's
    views (model.safetensors, or model-*-of-*.safetensors and their index) as symbolic links."""
    os.makedirs(out, exist_ok=True)
    for name in ("config.json", "generation_config.json"):
        if os.path.exists(os.path.join(original, name)):
            shutil.copy(os.path.join(original, name), out)
    for name in os.listdir(views):
        if name in WEIGHT_NAMES or (name.startswith("model-") and name.endswith(".safetensors")):
            os.symlink(os.path.join(views, name), os.path.join(out, name))
    return out


def compare_models(got, want, report):
    """Logits and state dicts of two models; the differences into report["problems"]."""
    a, b = logits(got), logits(want)
    report["dtype"] = str(got.dtype)
    report["logits_equal"] = bool(torch.equal(a, b))
    report["max_difference"] = float((a.float() - b.float()).abs().max())
    if not report["logits_equal"]:
        report["problems"].append(f"logits differ by up to {report['max_difference']}")
    got_sd, want_sd = got.state_dict(), want.state_dict()
    if sorted(got_sd) != sorted(want_sd):
        report["problems"].append(f"state dict keys {sorted(set(got_sd) ^ set(want_sd))}")
    for key, t in want_sd.items():
        u = got_sd.get(key)
        if u is None:
            continue
        if u.device.type == "meta":
            report["problems"].append(f"{key}: left on the meta device")
        elif u.dtype != t.dtype or not torch.equal(u, t):
            report["problems"].append(f"{key}: {u.dtype} differs from {t.dtype}")
    return report


def from_pretrained_via_mount(original, views, out, dtype=None):
    kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
    want = AutoModelForCausalLM.from_pretrained(original, **kwargs).eval()
    got, info = AutoModelForCausalLM.from_pretrained(link_dir(original, views, out),
                                                     output_loading_info=True, **kwargs)
    report = {"problems": [], "linked": sorted(os.listdir(out))}
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            report["problems"].append(f"from_pretrained of the mount: {kind} {info[kind]}")
    return compare_models(got.eval(), want, report)


def accelerate_via_mount(original, checkpoint):
    from accelerate import init_empty_weights, load_checkpoint_in_model
    want = AutoModelForCausalLM.from_pretrained(original).eval()
    config = AutoConfig.from_pretrained(original)
    with init_empty_weights():
        got = AutoModelForCausalLM.from_config(config)
    got.tie_weights()
    # device_map: without one, accelerate 1.14 hands a model on the meta device to torch 2.14's
    # set_model_state_dict, which asks for a process group and fails, whatever the checkpoint
    # (the original files too); with one it sets each tensor itself, as for big models.
    load_checkpoint_in_model(got, checkpoint, device_map={"": "cpu"})
    return compare_models(got.eval(), want, {"problems": []})


def from_pretrained_of_views(original, views, dtype=None):
    want = AutoModelForCausalLM.from_pretrained(
        original, **({"dtype": getattr(torch, dtype)} if dtype else {})).eval()
    got, info = AutoModelForCausalLM.from_pretrained(
        views, output_loading_info=True, **({"dtype": "auto"} if dtype else {}))
    report = {"problems": [], "files": sorted(os.listdir(views))}
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            report["problems"].append(f"from_pretrained of the views: {kind} {info[kind]}")
    if os.path.exists(os.path.join(original, "tokenizer.json")):
        from transformers import AutoTokenizer
        text, chat = "w1 w7 w499 unknown w0", [{"role": "user", "content": "w3 w4"}]
        a, b = AutoTokenizer.from_pretrained(views), AutoTokenizer.from_pretrained(original)
        if a(text)["input_ids"] != b(text)["input_ids"]:
            report["problems"].append("the views' tokenizer encodes differently")
        if a.apply_chat_template(chat, tokenize=False) != b.apply_chat_template(chat,
                                                                                tokenize=False):
            report["problems"].append("the views' chat template differs")
    return compare_models(got.eval(), want, report)


def empty_model(original):
    from accelerate import init_empty_weights
    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(original))
    model.tie_weights()
    return model


def dispatch_via_mount(original, checkpoint):
    from accelerate import load_checkpoint_and_dispatch
    want = AutoModelForCausalLM.from_pretrained(original).eval()
    got = load_checkpoint_and_dispatch(empty_model(original), checkpoint, device_map={"": "cpu"})
    return compare_models(got.eval(), want, {"problems": []})


def load_model_via_mount(original, checkpoint):
    from safetensors.torch import load_model
    want = AutoModelForCausalLM.from_pretrained(original).eval()
    config = AutoConfig.from_pretrained(original)
    got = AutoModelForCausalLM.from_config(config).eval()
    missing, unexpected = load_model(got, checkpoint, strict=False)
    report = {"problems": []}
    # A tied head is no tensor of a safetensors file: load_model reports it missing, and it is
    # tied. A .bin holds both names of a tied weight, as its export does: load_model keeps one
    # name per shared tensor and reports the other unexpected, though it is the model's own.
    tied = {k for k in missing if k == "lm_head.weight" and config.tie_word_embeddings}
    own = set(got.state_dict())
    if set(missing) - tied or set(unexpected) - own:
        report["problems"].append(f"missing {missing}, unexpected {unexpected}")
    return compare_models(got, want, report)
