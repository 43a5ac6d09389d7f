# SPDX-License-Identifier: MIT
"""The README's recipes, as blocks of code: every code block that README.md marks with
`<!-- readme-test: NAME -->` on the line before its fence, taken from the README at test time
(tests/integration/test_readme.py runs them; tests/interop/test_interop_readme.py those that
need torch 2.x). Standard library only.
"""

import re

from fixtures import REPO

README = REPO / "README.md"
MARKER = re.compile(r"^<!-- readme-test: ([a-z0-9_-]+) -->$")


class Block:
    def __init__(self, name, lang, code, line):
        self.name, self.lang, self.code, self.line = name, lang, code, line

    def where(self):
        return f"README.md:{self.line} ({self.name}, {self.lang})"


def readme_blocks(text=None):
    """The tagged blocks of the README, in order: [Block], `line` the first line of the code.
    A marker not followed by a fenced block is an error, not a recipe silently dropped."""
    lines = (README.read_text() if text is None else text).split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i].strip())
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        fence = re.match(r"^```(\w+)$", lines[j]) if j < len(lines) else None
        if fence is None:
            raise AssertionError(f"README.md:{i + 1}: readme-test marker without a ```LANG block")
        end = j + 1
        while end < len(lines) and lines[end] != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"README.md:{j + 1}: block never closed")
        blocks.append(Block(m.group(1), fence.group(1), "\n".join(lines[j + 1:end]) + "\n", j + 2))
        i = end + 1
    return blocks


def recipe(name):
    blocks = [b for b in readme_blocks() if b.name == name]
    if not blocks:
        raise AssertionError(f"the README has no recipe tagged readme-test: {name}")
    return blocks
