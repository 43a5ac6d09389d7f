# SPDX-License-Identifier: MIT
"""Runs in the interop root: calls of functions of the modules beside it, asked for by the
interop tests outside (tests/interop/interop_support.py, RootSession), one Python process for a
whole test module, so that torch and transformers are imported once, not once per check.

The protocol, one JSON document a line each way:
    in   {"call": "module.function", "args": [...], "kwargs": {...}}
    out  {"result": <what the function returned, as JSON>}
      or {"error": "<the exception and its traceback>"}
A function's own prints go to stderr (the session's log), never into the replies. The process
ends when its input does.
"""

import importlib
import json
import os
import sys
import traceback


def main():
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # print() and C libraries writing to fd 1 end up in the log
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            module_name, _, function_name = request["call"].rpartition(".")
            function = getattr(importlib.import_module(module_name), function_name)
            reply = {"result": function(*request.get("args", []), **request.get("kwargs", {}))}
            text = json.dumps(reply)
        except BaseException:  # noqa: BLE001: every failure is the caller's to see
            text = json.dumps({"error": traceback.format_exc()})
        replies.write(text + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
