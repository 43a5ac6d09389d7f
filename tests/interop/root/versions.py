# SPDX-License-Identifier: MIT
"""Runs in the interop root: which releases of the tools it holds, for the tests' messages."""

import importlib.metadata

TOOLS = ["torch", "safetensors", "transformers", "accelerate", "gguf", "numpy", "onnx", "h5py"]


def tools():
    """"torch 2.14.1, safetensors 0.8.0, ...": the installed versions of TOOLS."""
    out = []
    for name in TOOLS:
        try:
            out.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{name} (not installed)")
    return ", ".join(out)
