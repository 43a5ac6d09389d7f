# SPDX-License-Identifier: MIT
"""What the tests that are not about the tree itself read of a mount's whole-checkpoint views
(index.json): found through ckptfs_mounts.views_dir, the one place that knows where they are."""

import hashlib
import json
from pathlib import Path

from ckptfs_mounts import views_dir


def index_entries(mnt):
    """index.json's entries of `mnt`, {key: entry}."""
    doc = json.loads((views_dir(mnt) / "index.json").read_bytes())
    return {e["key"]: e for e in doc["entries"]}


def tensor_digests(mnt):
    """Every tensor's data of `mnt`, as {key: SHA-256 of its bytes} (a difference between two
    of them is then shown in a few lines)."""
    return {key: hashlib.sha256((Path(mnt) / e["path"] / "data").read_bytes()).hexdigest()
            for key, e in index_entries(mnt).items() if e["kind"] == "tensor"}
