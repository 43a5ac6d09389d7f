# SPDX-License-Identifier: MIT
"""The include graph of include/ and src/ (scripts/include_graph.py): layers in order
(sources and formats -> model -> views -> pack and one FUSE adapter -> the command line; the
views use the format writers for tensor.pt), no cycle, and
libfuse included by exactly one header. Checked on this repository, and on small trees that break
each rule, so that the check is known to fail when it should.

Run by ctest (test include_graph) as `python3 -m unittest -v test_include_graph` in tests/layout/:
standard library only, no fixtures, nothing mounted, so it lives apart from the integration
tests (which all need torch).
"""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parents[1] / "scripts" / "include_graph.py"

# A tree that keeps every rule: each layer, the one libfuse header, a .cpp using it.
GOOD = {
    "include/ckptfs/base/error.hpp": "#pragma once\n",
    "include/ckptfs/source/byte_source.hpp": "#include <ckptfs/base/error.hpp>\n",
    "include/ckptfs/model/model.hpp": "#include <ckptfs/base/error.hpp>\n",
    "include/ckptfs/format/reader.hpp": "#include <ckptfs/model/model.hpp>\n"
                                        "#include <ckptfs/source/byte_source.hpp>\n",
    "src/core/format/reader.cpp": "#include <ckptfs/format/reader.hpp>\n#include <vector>\n",
    "include/ckptfs/view/tree.hpp": "#include <ckptfs/model/model.hpp>\n",
    "src/fuse/libfuse.hpp": "#define FUSE_USE_VERSION 312\n#include <fuse_lowlevel.h>\n",
    "src/fuse/session.hpp": "#include <ckptfs/view/tree.hpp>\n",
    "src/fuse/session.cpp": '#include "libfuse.hpp"\n#include "session.hpp"\n',
    "src/cli/main.cpp": '#include "../fuse/session.hpp"\n#include <ckptfs/format/reader.hpp>\n',
}


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)],
                          capture_output=True, text=True, timeout=60)


class IncludeGraphTests(unittest.TestCase):
    def tree(self, changes):
        tmp = tempfile.TemporaryDirectory(prefix="ckptfs-include-graph-")
        self.addCleanup(tmp.cleanup)
        root = Path(tmp.name)
        files = dict(GOOD)
        files.update(changes)
        for name, text in files.items():
            if text is None:
                continue
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return root

    def assert_broken(self, changes, message):
        r = run(self.tree(changes))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn(message, r.stderr)

    def test_this_repository(self):
        r = run(HERE.parents[1])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("fuse -> view", r.stdout)
        self.assertIn("cli -> pack", r.stdout)
        self.assertNotIn("fuse -> pack", r.stdout)
        self.assertNotIn("fuse -> format", r.stdout)

    def test_a_good_tree(self):
        r = run(self.tree({}))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")

    def test_layer_order(self):
        self.assert_broken({"include/ckptfs/model/model.hpp": "#include <ckptfs/view/tree.hpp>\n"},
                           "(model) includes include/ckptfs/view/tree.hpp (view)")
        self.assert_broken({"src/fuse/session.cpp": '#include "libfuse.hpp"\n'
                                                    "#include <ckptfs/format/reader.hpp>\n"},
                           "(fuse) includes include/ckptfs/format/reader.hpp (format)")
        # pack writes files; the FUSE adapter serves a read-only tree and never uses it.
        self.assert_broken({"include/ckptfs/pack/pack.hpp": "#include <ckptfs/view/tree.hpp>\n",
                            "src/fuse/session.cpp": '#include "libfuse.hpp"\n'
                                                    "#include <ckptfs/pack/pack.hpp>\n"},
                           "(fuse) includes include/ckptfs/pack/pack.hpp (pack)")
        self.assert_broken({"include/ckptfs/view/tree.hpp": "#include <ckptfs/pack/pack.hpp>\n",
                            "include/ckptfs/pack/pack.hpp": "#pragma once\n"},
                           "(view) includes include/ckptfs/pack/pack.hpp (pack)")

    def test_cycles(self):
        self.assert_broken({"include/ckptfs/base/error.hpp": "#include <ckptfs/base/text.hpp>\n",
                            "include/ckptfs/base/text.hpp": "#include <ckptfs/base/error.hpp>\n"},
                           "include cycle")
        # A module cycle: a.cpp includes b.hpp, whose module includes a.hpp.
        self.assert_broken({"include/ckptfs/base/a.hpp": "#pragma once\n",
                            "src/core/base/a.cpp": "#include <ckptfs/base/b.hpp>\n",
                            "include/ckptfs/base/b.hpp": "#include <ckptfs/base/a.hpp>\n"},
                           "include cycle: base/a -> base/b -> base/a")

    def test_libfuse_in_one_header(self):
        self.assert_broken({"src/fuse/other.cpp": "#include <fuse_lowlevel.h>\n"},
                           "libfuse is included by 2 files")
        self.assert_broken({"src/fuse/libfuse.hpp": None,
                            "src/fuse/session.cpp": '#include "session.hpp"\n'},
                           "libfuse is included by 0 files")
        self.assert_broken({"src/fuse/session.hpp": '#include "libfuse.hpp"\n'},
                           "src/fuse/session.hpp includes src/fuse/libfuse.hpp: only .cpp files")
        self.assert_broken({"include/ckptfs/view/tree.hpp": "#include <fuse_lowlevel.h>\n",
                            "src/fuse/libfuse.hpp": "#pragma once\n"},
                           "not by a header of the fuse layer")

    def test_files_outside_the_layers(self):
        self.assert_broken({"src/other/thing.cpp": "#pragma once\n"}, "in no layer")
        # A directory of the core's that is no layer (a typo, or a layer nobody placed).
        self.assert_broken({"include/ckptfs/misc/thing.hpp": "#pragma once\n"}, "in no layer")


if __name__ == "__main__":
    unittest.main()
