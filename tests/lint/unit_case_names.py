#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every doctest case of the unit binary (argv[1]) has a name ctest can run it by.

doctest_discover_tests registers each case as a ctest test running `--test-case=NAME`. ctest
reads a ';' in NAME as a list separator: the test then runs `--test-case=` with the name cut at
the ';', which matches no case, and passes having run nothing (found with a case that failed
unseen). doctest.cmake escapes commas; nothing escapes a ';'. Exit 1 naming each such case."""

import subprocess
import sys


def main():
    out = subprocess.run([sys.argv[1], "--list-test-cases", "--no-version"], check=True,
                         capture_output=True, text=True).stdout
    names = [line.strip() for line in out.splitlines()
             if line.strip() and not line.startswith(("[doctest]", "====="))]
    if len(names) < 10:
        print(f"unit_case_names: only {len(names)} cases listed by {sys.argv[1]}", file=sys.stderr)
        return 1
    bad = [n for n in names if ";" in n]
    for n in bad:
        print(f"unit_case_names: {n!r}: a ';' in a case name makes ctest run nothing for it "
              f"(write ',' instead)", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
