# SPDX-License-Identifier: MIT
"""The corpus of real checkpoints that the other modules read (CKPTFS_CORPUS, see fixtures.py):
every file its PROVENANCE*.tsv tables list is there, with the size they give, and every
checkpoint there is listed. Where there is no corpus (a user's fresh clone) this module is
reported skipped by ctest with the reason, as are the corpus tests of the other modules one by
one; with CKPTFS_CORPUS set (.ci/run) it runs and fails on a corpus that is missing.

Run by ctest as `/usr/bin/python3 -m unittest -v test_corpus` (see fixtures.py).
"""

import csv
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("corpus")  # else the module exits 77: skipped, with the reason

from fixtures import CORPUS, corpus_files  # noqa: E402


def provenance_rows():
    """(table, row) for every row of CORPUS/PROVENANCE.tsv and CORPUS/formats/PROVENANCE*.tsv;
    a row's local_name is relative to its table's folder."""
    rows = []
    for table in [CORPUS / "PROVENANCE.tsv", *sorted((CORPUS / "formats").glob("PROVENANCE*.tsv"))]:
        if table.is_file():
            with open(table, newline="", encoding="utf-8") as f:
                rows += [(table, row) for row in csv.DictReader(f, delimiter="\t")]
    return rows


class CorpusTests(unittest.TestCase):
    def test_provenance_files_present(self):
        rows = provenance_rows()
        self.assertTrue((CORPUS / "PROVENANCE.tsv").is_file(), f"no PROVENANCE.tsv in {CORPUS}")
        self.assertGreater(len(rows), 20, f"the PROVENANCE tables of {CORPUS}")
        for table, row in rows:
            path = table.parent / row["local_name"]
            with self.subTest(str(path.relative_to(CORPUS))):
                self.assertTrue(path.is_file(), f"{path} is listed in {table.name} but missing")
                size = row.get("size_bytes", "")
                if size.isdigit():
                    self.assertEqual(path.stat().st_size, int(size), f"{path}: size")

    def test_every_checkpoint_listed(self):
        listed = {row["local_name"] for table, row in provenance_rows() if table.parent == CORPUS}
        self.assertTrue(corpus_files(), f"no checkpoints in {CORPUS}")
        for path in corpus_files():
            self.assertIn(path.name, listed, f"{path.name} is not in PROVENANCE.tsv")


if __name__ == "__main__":
    unittest.main()
