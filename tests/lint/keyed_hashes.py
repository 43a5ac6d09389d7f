#!/usr/bin/env python3
"""Fails when the sources hash text with std::hash: a default-hashed unordered container keyed by
text, or std::hash<std::string(_view)> called by hand.

Text keys come from files (zip names, pickle keys, safetensors names); std::hash has no key, so a
file can make all of them collide (base/hash.hpp says how). Such tables use ckptfs::TextMap,
TextViewMap, TextSet or TextViewSet, or KeyedHash directly.

    keyed_hashes.py SOURCE_ROOT
"""
import re
import sys
from pathlib import Path

# std::unordered_map<std::string, V> or <std::string_view, V> with no third argument, and
# std::unordered_set<std::string> or <std::string_view>.
DEFAULT_HASHED = re.compile(
    r"std::unordered_(?:map|set)\s*<\s*(?:const\s+)?std::(?:string|string_view)\s*"
    r"(?:>|,\s*[^,<>]+(?:<[^<>]*>)?\s*>)"
    # or std::hash of text used by hand (an open-addressing table of one's own)
    r"|std::hash\s*<\s*(?:const\s+)?std::(?:string|string_view)\s*>")


def main():
    root = Path(sys.argv[1])
    found = []
    for path in sorted([*root.glob("src/**/*.[ch]pp"), *root.glob("include/**/*.hpp")]):
        if path.name == "hash.hpp":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if DEFAULT_HASHED.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    for line in found:
        print(f"{line}\n  text keys hashed without a key: use TextMap/TextSet (base/hash.hpp)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
