# SPDX-License-Identifier: MIT
"""Runs in the interop root: what the README's recipes that need torch 2.x are run with, and
their python blocks run as a reader runs them (tests/interop/test_interop_readme.py).

    write_dcp(directory)       step-100/ in `directory`: the README's model with AdamW, trained
                               two steps, saved by torch.distributed.checkpoint.save of
                               get_state_dict(model, optimizer), as the DCP docs say; and
                               step-100.reference.pt, dcp_to_torch_save's file of it
    run_python(steps, cwd)     the python blocks and checks of a recipe in one namespace, in
                               `cwd`, as consecutive blocks run in one process
"""

import os
import shutil

import torch


def readme_model():
    """The model of the README's recipes (test_readme.readme_model), and its optimizer."""
    torch.manual_seed(21)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    return model, torch.optim.AdamW(model.parameters())


def train_step(model, optimizer, seed):
    gen = torch.Generator().manual_seed(seed)
    optimizer.zero_grad()
    model(torch.randn(8, 256, generator=gen)).square().mean().backward()
    optimizer.step()


def write_dcp(directory):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model, optimizer = readme_model()
    for seed in (1, 2):
        train_step(model, optimizer, seed)
    model_state, optim_state = get_state_dict(model, optimizer)
    out = os.path.join(directory, "step-100")
    shutil.rmtree(out, ignore_errors=True)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=out)
    dcp_to_torch_save(out, os.path.join(directory, "step-100.reference.pt"))
    return out


def run_python(steps, cwd):
    """Runs [(code, filename)] in order in one namespace, in directory `cwd` (a traceback names
    the README's lines: the code is padded to its line)."""
    namespace = {"__name__": "__main__"}
    here = os.getcwd()
    os.chdir(cwd)
    try:
        for code, name in steps:
            exec(compile(code, name, "exec"), namespace)  # noqa: S102: the README's own code
    finally:
        os.chdir(here)
    return True
