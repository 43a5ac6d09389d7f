#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""zero_reference.py: DeepSpeed's zero_to_fp32.py run for the benchmark (scripts/bench, section
zero), in the interop root (torch 2.x), with the stand-in `deepspeed` package of the interop
tests for its imports and the classes DeepSpeed pickles.

    zero_reference.py convert CKPT OUT   CKPT/zero_to_fp32.py's command line: CKPT OUT
                                         --safe_serialization (OUT/model.safetensors)
    zero_reference.py load CKPT KEY      get_fp32_state_dict_from_zero_checkpoint(CKPT)[KEY]:
                                         the whole load, for one tensor

Prints {"seconds", "peak_kib", "import_seconds", "bytes"} as JSON: the time from this script's
start (the interpreter's own start before it excluded, torch's import included, as a user's run
pays it), the process's peak RSS (ru_maxrss), the time `import torch` took, and the tensor's
bytes (load). Run by `scripts/interop-run scripts/zero_reference.py ...`.
"""

import time

started = time.monotonic()

import contextlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import runpy  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, "/opt/ckptfs/tests/interop/root/zero_standin")
import torch  # noqa: E402,F401  (timed: zero_to_fp32.py imports it first thing)

imported = time.monotonic()


def main():
    mode, ckpt = sys.argv[1], sys.argv[2]
    script = f"{ckpt}/zero_to_fp32.py"
    nbytes = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if mode == "convert":
            sys.argv = [script, ckpt, sys.argv[3], "--safe_serialization"]
            runpy.run_path(script, run_name="__main__")
        elif mode == "load":
            module = runpy.run_path(script, run_name="zero_to_fp32")
            tensor = module["get_fp32_state_dict_from_zero_checkpoint"](ckpt)[sys.argv[3]]
            nbytes = tensor.numel() * tensor.element_size()
        else:
            raise SystemExit(f"unknown mode {mode}")
    print(json.dumps({"seconds": time.monotonic() - started,
                      "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "import_seconds": imported - started, "bytes": nbytes}))


if __name__ == "__main__":
    main()
