# SPDX-License-Identifier: MIT
"""scripts/debian-mirror: the Debian archive found in apt's own sources, in the one-line format
(sources.list) and the deb822 format (sources.list.d/*.sources), beside the entries it must pass
over (the -security and -updates suites, third-party repositories, commented and disabled
entries); one line and exit 1 when there is none; CKPTFS_DEBIAN_MIRROR over all of it. And the
repository names no registry host: the scripts that fetch from Debian take the mirror from here.

Sample sources are given to apt through its own configuration (APT_CONFIG naming a file that sets
Dir::Etc::sourcelist, sourceparts and the lists directory), so that the script's run of apt reads
them instead of the machine's. Run by ctest (test debian_mirror): standard library only, nothing
mounted, nothing fetched.
"""

import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPT = REPO / "scripts" / "debian-mirror"


def machine_codename():
    """The release the script looks for: VERSION_CODENAME of /etc/os-release, as it reads it."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return "sid"
    m = re.search(r'^VERSION_CODENAME="?([^"\n]*)"?$', text, re.M)
    return m.group(1) if m and m.group(1) else "sid"


CODENAME = machine_codename()


@unittest.skipIf(shutil.which("apt-get") is None, "apt-get is not installed (not a Debian system)")
class DebianMirror(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="ckptfs-mirror-"))
        self.addCleanup(shutil.rmtree, self.tmp)
        (self.tmp / "sources.list.d").mkdir()
        (self.tmp / "lists" / "partial").mkdir(parents=True)
        (self.tmp / "apt.conf").write_text(
            f'Dir::Etc::sourcelist "{self.tmp}/sources.list";\n'
            f'Dir::Etc::sourceparts "{self.tmp}/sources.list.d";\n'
            f'Dir::State::Lists "{self.tmp}/lists";\n')

    def mirror(self, **env):
        environment = {k: v for k, v in os.environ.items() if k != "CKPTFS_DEBIAN_MIRROR"}
        environment.update(APT_CONFIG=str(self.tmp / "apt.conf"), **env)
        return subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=120,
                              env=environment)

    def assert_mirror(self, url, **env):
        r = self.mirror(**env)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, url + "\n", ""))

    def test_one_line_format(self):
        (self.tmp / "sources.list").write_text(
            "# deb http://commented.example/archive " + CODENAME + " main\n"
            "deb [signed-by=/usr/share/keyrings/nodesource.gpg] https://node.example/node_20.x "
            "nodistro main\n"
            f"deb http://security.example/sec {CODENAME}-security main\n"
            f"deb http://updates.example/archive {CODENAME}-updates main\n"
            f"deb-src http://contrib.example/archive {CODENAME} contrib\n"
            f"deb http://archive.example/archive/ {CODENAME} main contrib non-free-firmware\n"
            f"deb http://second.example/archive {CODENAME} main\n")
        self.assert_mirror("http://archive.example/archive")

    def test_deb822_format(self):
        parts = self.tmp / "sources.list.d"
        # Read in the order of their names: the third-party ones come first here.
        (parts / "a-google.sources").write_text(
            "Types: deb\nURIs: https://packages.example/apt\nSuites: cloud-sdk\nComponents: main\n")
        (parts / "b-nodesource.sources").write_text(
            "Types: deb\nURIs: https://node.example/node_20.x\nSuites: nodistro\n"
            "Components: main\n")
        (parts / "debian.sources").write_text(
            "Types: deb\n"
            "URIs: http://disabled.example/archive\n"
            f"Suites: {CODENAME}\n"
            "Components: main\n"
            "Enabled: no\n"
            "\n"
            "Types: deb\n"
            "# http://snapshot.example/archive/20250520/20250520T000000Z\n"
            "URIs: http://security.example/sec\n"
            f"Suites: {CODENAME}-security\n"
            "Components: main\n"
            "\n"
            "Types: deb deb-src\n"
            "URIs: http://archive.example/archive\n"
            f"Suites: {CODENAME}-updates {CODENAME}\n"
            "Components: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
        self.assert_mirror("http://archive.example/archive")

    def test_both_formats_the_list_first(self):
        (self.tmp / "sources.list").write_text(f"deb http://listed.example/archive {CODENAME} main\n")
        (self.tmp / "sources.list.d" / "debian.sources").write_text(
            f"Types: deb\nURIs: http://parts.example/archive\nSuites: {CODENAME}\n"
            "Components: main\n")
        self.assert_mirror("http://listed.example/archive")

    def test_no_archive_is_one_line_and_status_1(self):
        for name, text in (("empty", ""),
                           ("only others",
                            f"deb http://security.example/sec {CODENAME}-security "
                            "main\ndeb https://node.example/node_20.x nodistro main\n")):
            with self.subTest(name):
                (self.tmp / "sources.list").write_text(text)
                r = self.mirror()
                self.assertEqual((r.returncode, r.stdout), (1, ""))
                self.assertRegex(r.stderr, r"^debian-mirror: apt's sources have no Debian archive "
                                           r".*CKPTFS_DEBIAN_MIRROR.*\n$")

    def test_the_variable_overrides_apt(self):
        (self.tmp / "sources.list").write_text("")
        self.assert_mirror("http://override.example/archive",
                           CKPTFS_DEBIAN_MIRROR="http://override.example/archive/")


class NoRegistryHost(unittest.TestCase):
    def test_the_repository_names_no_debian_registry_host(self):
        """Code, comments and docs: the mirror comes from apt's configuration (scripts/debian-mirror),
        never from a host written here."""
        if shutil.which("git") is None or not (REPO / ".git").exists():
            self.skipTest("not a git clone")
        r = subprocess.run(["git", "-C", str(REPO), "grep", "-nIE",
                            r"https?://[A-Za-z0-9.-]+/debian(/|\b)"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual((r.returncode, r.stdout), (1, ""))


if __name__ == "__main__":
    unittest.main()
