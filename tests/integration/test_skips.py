# SPDX-License-Identifier: MIT
"""The test suite on a machine without FUSE, without torch or without the interop root: every
module that needs one says so at import (fixtures.require) and exits 77, which ctest reports as
skipped, with the reason (a missing interop root fails instead with CKPTFS_INTEROP_REQUIRED=1).
And in a clone with no corpus beside it: every test that reads the corpus is skipped with the
reason, never failed (unless CKPTFS_CORPUS names it: then they fail).

Each module is run here as ctest runs it, once with a FUSE device that does not exist
(CKPTFS_FUSE_DEVICE) and once with torch and numpy hidden (modules of those names that fail to
import, first on PYTHONPATH); so is scripts/make_fixtures.py. The ctest properties are checked in
the build tree of CKPTFS. This module needs neither, and runs everywhere.

Run by ctest as `/usr/bin/python3 -m unittest -v test_skips` (see fixtures.py).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fixtures import CKPTFS, REPO, SKIP_EXIT_STATUS, missing, require  # noqa: E402

require()  # needs nothing: it runs everywhere

TIMEOUT = 120.0
MODULES = sorted(p.stem for p in HERE.glob("test_*.py") if p.stem != "test_skips")
DECLARING = [*MODULES, "test_skips"]  # every module calls require(), with no needs here
INTEROP = HERE.parent / "interop"
INTEROP_MODULES = sorted(p.stem for p in INTEROP.glob("test_*.py"))
HIDDEN = "hidden by test_skips.py"
# Integration modules that run a server of the interop root (Ceph's RGW), and need it.
ROOT_MODULES = ["test_rgw"]


def module_dir(module):
    return INTEROP if module in INTEROP_MODULES else HERE


def needs_of(module):
    """The needs a module declares: the arguments of its require(...) call, or None."""
    m = re.search(r"^require\(([^)]*)\)", (module_dir(module) / f"{module}.py").read_text(),
                  re.M)
    return None if m is None else set(re.findall(r'"(\w+)"', m.group(1)))


class SkipTests(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="ckptfs-skips-test-")
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)
        self.no_torch = self.tmp / "no-torch"
        self.no_torch.mkdir()
        for name in ("torch", "numpy"):
            (self.no_torch / f"{name}.py").write_text(f"raise ImportError({HIDDEN!r})\n")

    def run_python(self, args, env, cwd=HERE):
        # CI exports CKPTFS_INTEROP_REQUIRED=1 (a missing interop root fails there): the skip
        # checks start from a user's environment, where it is unset, unless a check sets it.
        base = {k: v for k, v in os.environ.items() if k != "CKPTFS_INTEROP_REQUIRED"}
        return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True,
                              timeout=TIMEOUT, env={**base, **env},
                              stdin=subprocess.DEVNULL)

    def assert_skipped(self, r, reason, where):
        err = r.stderr.decode("utf-8", "replace")
        self.assertEqual(r.returncode, SKIP_EXIT_STATUS, f"{where}: {err[-2000:]}")
        self.assertRegex(err, rf"(?m)^SKIPPED: .*{reason}", where)
        self.assertNotIn(b"Ran ", r.stderr, f"{where}: tests ran")

    def test_every_module_declares_its_needs(self):
        self.assertTrue(MODULES)
        for module in DECLARING:
            with self.subTest(module):
                needs = needs_of(module)
                self.assertIsNotNone(needs, f"{module}.py calls no require(...)")
                # The RGW tests run Ceph's gateway from the interop root.
                allowed = {"fuse", "torch", "corpus"} | ({"interop"} if module in ROOT_MODULES
                                                         else set())
                self.assertLessEqual(needs, allowed)
                if module not in ("test_skips", "test_corpus"):
                    self.assertIn("torch", needs, "every module reads fixtures made with torch")
        # The interop modules mount, and run the real tools in the root (no torch here); some
        # take their reference from the corpus too (the ZeRO tests: its zero_to_fp32.py).
        self.assertTrue(INTEROP_MODULES)
        for module in INTEROP_MODULES:
            with self.subTest(module):
                needs = needs_of(module)
                self.assertLessEqual({"fuse", "interop"}, needs)
                self.assertLessEqual(needs, {"fuse", "interop", "corpus"})

    def test_without_fuse(self):
        device = self.tmp / "no-fuse"
        for module in [*MODULES, *INTEROP_MODULES]:
            if "fuse" not in (needs_of(module) or ()):
                continue
            with self.subTest(module):
                r = self.run_python(["-m", "unittest", module], {"CKPTFS_FUSE_DEVICE": str(device)},
                                    cwd=module_dir(module))
                self.assert_skipped(r, re.escape(f"{device} cannot be opened"), module)

    def test_without_interop_root(self):
        root = self.tmp / "no-root"
        for module in [*INTEROP_MODULES, *ROOT_MODULES]:
            with self.subTest(module):
                r = self.run_python(["-m", "unittest", module], {"CKPTFS_INTEROP_ROOT": str(root)},
                                    cwd=module_dir(module))
                self.assert_skipped(r, re.escape(f"the interop root {root} does not exist (make "
                                                 f"it: scripts/interop-root"), module)
            with self.subTest(module, required=True):
                r = self.run_python(["-m", "unittest", module], {"CKPTFS_INTEROP_ROOT": str(root),
                                                                 "CKPTFS_INTEROP_REQUIRED": "1"},
                                    cwd=module_dir(module))
                err = r.stderr.decode("utf-8", "replace")
                self.assertEqual(r.returncode, 1, err)
                self.assertRegex(err,
                                 r"(?m)^FAILED \(CKPTFS_INTEROP_REQUIRED=1\): .*the interop root")
        with self.subTest("half-made root"):
            root.mkdir()  # exists, without the stamp interop-root writes last
            r = self.run_python(["-m", "unittest", INTEROP_MODULES[0]],
                                {"CKPTFS_INTEROP_ROOT": str(root)}, cwd=INTEROP)
            self.assert_skipped(r, re.escape(f"the interop root {root} is not complete"), "root")

    def test_without_torch(self):
        path = os.pathsep.join(filter(None, [str(self.no_torch), os.environ.get("PYTHONPATH")]))
        for module in MODULES:
            if "torch" not in (needs_of(module) or ()):
                continue
            with self.subTest(module):
                r = self.run_python(["-m", "unittest", module], {"PYTHONPATH": path})
                self.assert_skipped(r, rf"cannot import numpy \({HIDDEN}\)", module)
        with self.subTest("make_fixtures.py"):
            r = self.run_python([REPO / "scripts" / "make_fixtures.py", self.tmp / "fixtures"],
                                {"PYTHONPATH": path})
            self.assert_skipped(r, rf"needs torch and numpy .*\({HIDDEN}\)", "make_fixtures.py")
            self.assertFalse((self.tmp / "fixtures").exists())

    def clone_without_corpus(self):
        """A copy of the test modules, the scripts, tests/data and the Python package in
        self.tmp/clone, as in a fresh clone with nothing beside it (no self.tmp/shared)."""
        clone = self.tmp / "clone"
        for part in ("tests/integration", "tests/data", "scripts", "python"):
            shutil.copytree(REPO / part, clone / part,
                            ignore=shutil.ignore_patterns("__pycache__", "s3rver"))
        self.assertFalse((self.tmp / "shared").exists())
        return clone

    def test_without_corpus(self):
        """In a clone with no ../shared/corpus and no CKPTFS_CORPUS: every test that reads the
        corpus (the tests whose name has "corpus") is skipped with the reason, test_corpus as a
        whole (exit 77); none fails. With CKPTFS_CORPUS naming a missing folder they fail."""
        if missing("torch"):
            self.skipTest("; ".join(missing("torch")))
        clone = self.clone_without_corpus()
        reason = re.escape(f"no corpus at {self.tmp / 'shared' / 'corpus'} (the default:")
        env = {k: v for k, v in os.environ.items() if k != "CKPTFS_CORPUS"}
        users = [m for m in MODULES if "needs_corpus" in (HERE / f"{m}.py").read_text()]
        self.assertGreaterEqual(len(users), 6, users)
        # One process for all of them: torch is imported once.
        r = subprocess.run([sys.executable, "-m", "unittest", "-v", "-k", "corpus", "-k", "Corpus",
                            *users], cwd=clone / "tests" / "integration", capture_output=True,
                           timeout=3 * TIMEOUT, env=env, stdin=subprocess.DEVNULL)
        err = r.stderr.decode("utf-8", "replace")
        self.assertEqual(r.returncode, 0, err[-3000:])
        ran = int(re.search(r"(?m)^Ran (\d+) tests?", err).group(1))
        self.assertRegex(err, rf"(?m)^OK \(skipped={ran}\)$")
        for module in users:
            with self.subTest(module):
                skipped = re.findall(rf"(?m)^\w+ \({module}\.\w+\.\w+\)(?:\n.*?)? \.\.\. "
                                     rf"skipped '{reason}", err)
                self.assertTrue(skipped, f"no corpus test of {module} was skipped:\n{err}")
        self.assertEqual(len(re.findall(rf"\.\.\. skipped '{reason}", err)), ran, err)
        with self.subTest("test_corpus"):
            r = subprocess.run([sys.executable, "-m", "unittest", "test_corpus"],
                               cwd=clone / "tests" / "integration", capture_output=True,
                               timeout=TIMEOUT, env=env, stdin=subprocess.DEVNULL)
            self.assert_skipped(r, reason, "test_corpus")
        with self.subTest("CKPTFS_CORPUS set"):
            r = subprocess.run([sys.executable, "-m", "unittest", "-k", "Corpus", "test_inspect"],
                               cwd=clone / "tests" / "integration", capture_output=True,
                               timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                               env={**env, "CKPTFS_CORPUS": str(self.tmp / "nowhere")})
            err = r.stderr.decode("utf-8", "replace")
            self.assertEqual(r.returncode, 1, err[-3000:])
            self.assertIn(f"no checkpoints in {self.tmp / 'nowhere'}", err)
            self.assertNotIn("skipped", err)

    def test_ctest_takes_77_for_skipped(self):
        build = CKPTFS.parent
        if not (build / "CTestTestfile.cmake").is_file() or not shutil.which("ctest"):
            self.skipTest(f"{build} is not a ctest build tree (CKPTFS is not the built binary)")
        r = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                           capture_output=True, timeout=TIMEOUT)
        self.assertEqual(r.returncode, 0, r.stderr)
        tests = {t["name"]: {p["name"]: p["value"] for p in t.get("properties", [])}
                 for t in json.loads(r.stdout)["tests"]}
        for name in ["make_fixtures", *MODULES, "test_skips", *INTEROP_MODULES]:
            with self.subTest(name):
                self.assertIn(name, tests)
                self.assertEqual(tests[name].get("SKIP_RETURN_CODE"), SKIP_EXIT_STATUS)
                # The interop group is its label's, and only its; the remote group likewise.
                self.assertEqual("interop" in tests[name].get("LABELS", []),
                                 name in INTEROP_MODULES)
                self.assertEqual("remote" in tests[name].get("LABELS", []),
                                 name in ("test_remote", "test_disk_cache", "test_rgw"))


if __name__ == "__main__":
    unittest.main()
