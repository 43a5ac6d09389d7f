# SPDX-License-Identifier: MIT
"""Integration tests of ckptfs as an installed filesystem: the man page against --help, the
install tree, the Debian package, mount(8) and fstab through mount.fuse3, the readiness line and
the notify fd, the bash completion and the systemd unit example.

Run by ctest as `/usr/bin/python3 -m unittest -v test_packaging` in tests/integration/, with
    CKPTFS  the ckptfs binary in its build tree (default: build/ckptfs); the build tree is its
            directory (CMakeCache.txt, CPackConfig.cmake, cmake_install.cmake)
Needs /dev/fuse and fusermount3; the mount(8) tests need root, unshare(1) and mount.fuse3 (they
run in a private mount namespace, see MountCommandTests); the package test needs cpack,
dpkg-deb and dpkg-shlibdeps (scripts/install-deps.sh installs them). What is missing is skipped
with the reason, never passed silently.
"""

import configparser
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(HERE))
from fixtures import VIEWS_FOLDER, views_dir  # noqa: E402,F401
from fixtures import require  # noqa: E402

# The mounts need FUSE, and the install tests run ckptfs-verify (torch): the module exits 77
# (skipped) where they are missing.
require("fuse", "torch")

from ckptfs_mounts import is_mounted, mount_of, mount_points  # noqa: E402
from ckptfs_mounts import unmount as force_unmount  # noqa: E402
from fixtures import processes_with_arg, wait_until  # noqa: E402
CKPTFS = Path(os.environ.get("CKPTFS", REPO / "build" / "ckptfs")).absolute()
BUILD = CKPTFS.parent
PACKAGING = REPO / "packaging"
MAN_PAGE = PACKAGING / "ckptfs.1"
COMPLETION = PACKAGING / "ckptfs.bash-completion"
UNIT = PACKAGING / "mnt-model.mount"
SAMPLE = REPO / "tests" / "data" / "sample.pth"

TIMEOUT = 30.0        # seconds for a mount to become ready, or a command to finish
EXIT_TIMEOUT = 10.0   # seconds for ckptfs to exit once unmounted
PACKAGE_TIMEOUT = 300.0
READY_LINE = re.compile(r"ckptfs: mounted (.+) on (.+) \((\d+) tensors, (\d+) values, "
                        r"(\d+) bytes\)")


def run(args, timeout=TIMEOUT, **kwargs):
    return subprocess.run([str(a) for a in args], capture_output=True, timeout=timeout, **kwargs)


def text(result):
    return (result.stdout + result.stderr).decode("utf-8", "replace")


def help_text():
    r = run([CKPTFS, "--help"])
    assert r.returncode == 0, text(r)
    return r.stdout.decode()


def version():
    r = run([CKPTFS, "--version"])
    assert r.returncode == 0, text(r)
    m = re.fullmatch(r"ckptfs (\S+)\n", r.stdout.decode())
    assert m, r.stdout
    return m.group(1)


def read_pipe(fd, timeout=TIMEOUT):
    """Everything written to the pipe `fd` until end-of-file."""
    data = b""
    deadline = time.monotonic() + timeout
    os.set_blocking(fd, False)
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 64)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"no end-of-file on the notify pipe after {timeout:g} s (got {data!r})")


class TempDirTestCase(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="ckptfs-packaging-test-")
        self.tmp = Path(tmp.name)
        self.addCleanup(tmp.cleanup)
        self.addCleanup(self._nothing_left)

    def _nothing_left(self):
        prefix = str(self.tmp) + "/"
        left = [p for p in mount_points() if p.startswith(prefix)]
        for path in left:
            force_unmount(path)
        self.assertEqual(left, [], "mounts were left behind")
        # A daemon exits a moment after its unmount.
        wait_until(lambda: not processes_with_arg(self.tmp / "mnt"), EXIT_TIMEOUT)
        stray = processes_with_arg(self.tmp / "mnt")
        for pid in stray:
            os.kill(pid, signal.SIGKILL)
        self.assertEqual(stray, [], "ckptfs processes were left behind")

    def new_dir(self, name):
        path = self.tmp / name
        path.mkdir(parents=True)
        return path


# --------------------------------------------------------------------------------------------
# The man page, and its agreement with --help
# --------------------------------------------------------------------------------------------

def troff_plain(line):
    """A man source line's text: a macro's name and quotes, and font escapes, removed."""
    if line.startswith("."):
        line = re.sub(r"^\.\w+\s*", "", line).replace('"', "")
    line = re.sub(r"\\f[BIRP]", "", line)
    return line.replace("\\-", "-").replace("\\ ", " ").replace("\\(dq", '"')


def man_sections(source):
    """{section name: [lines]} of the man page's source."""
    sections, name = {}, None
    for line in source.splitlines():
        if line.startswith(".SH "):
            name = troff_plain(line).strip()
            sections[name] = []
        elif name:
            sections[name].append(line)
    return sections


def man_tags(lines):
    """The tag line after every .TP of `lines`, as plain text."""
    return [troff_plain(lines[i + 1]).strip() for i, line in enumerate(lines[:-1])
            if line.strip() == ".TP"]


def options_of_tags(tags):
    """Command-line options (-f, --debug...) and -o names (uid=, allow_other...) in tags."""
    options, names = set(), set()
    for tag in tags:
        if tag.startswith("-"):
            options.update(t.rstrip(",") for t in re.findall(r"(?<![\w=-])--?[A-Za-z][\w-]*", tag))
        else:
            m = re.match(r"[a-z_]+=?", tag)
            if m:
                names.add(m.group(0))
    return options, names


def help_options(help_):
    """Options and -o names that `ckptfs --help` lists."""
    options, names = set(), set()
    block = help_.split("\noptions", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    for line in block:
        m = re.match(r"  (-[^\s,]+)(?:, (-\S+))?", line)
        if m:
            options.update(o for o in m.groups() if o)
            continue
        if re.match(r" {7}[a-z_]", line):
            column = re.split(r"\s{2,}", line.strip())[0]
            for part in column.split(", "):
                names.add(re.match(r"[a-z_]+=?", part).group(0))
    inspect = re.search(r"^inspect CHECKPOINT (.*)$", help_, re.M)
    options.update(re.findall(r"--?[a-z][\w-]*", inspect.group(1)))
    pack = re.search(r"^pack SRC OUT (.*)$", help_, re.M)
    options.update(re.findall(r"--?[a-z][\w-]*", pack.group(1)))
    return options, names


def help_exit_codes(help_):
    block = help_.split("\nexit status:\n", 1)[1].split("\n\n", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^  (\d+)  (.*)$", block, re.M)}


def man_exit_codes(lines):
    """{code: its description} of the .TP/.B N items of the EXIT STATUS section."""
    codes, current, i = {}, None, 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == ".TP":
            m = re.fullmatch(r"\.B (\d+)", lines[i + 1]) if i + 1 < len(lines) else None
            current = int(m.group(1)) if m else None
            if m:
                codes[current] = ""
            i += 2
            continue
        if current is not None:
            codes[current] += " " + troff_plain(line)
        i += 1
    return codes


def words(s):
    return set(re.findall(r"[a-z0-9/]{3,}", s.lower()))


class ManPageTests(TempDirTestCase):
    def setUp(self):
        super().setUp()
        self.source = MAN_PAGE.read_text()
        self.sections = man_sections(self.source)
        self.help = help_text()

    def test_renders_without_warnings(self):
        if not shutil.which("groff"):
            self.skipTest("groff is not installed (scripts/install-deps.sh installs groff-base)")
        r = run(["groff", "-man", "-Tutf8", "-ww", "-z", MAN_PAGE])
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(text(r), "", "groff -ww warned")

    def test_man_shows_it(self):
        if not shutil.which("man"):
            self.skipTest("man is not installed (scripts/install-deps.sh installs man-db)")
        r = run(["man", "-l", "-P", "cat", MAN_PAGE], env={**os.environ, "MANWIDTH": "80"})
        self.assertEqual(r.returncode, 0, text(r))
        page = re.sub(r".\x08", "", r.stdout.decode())
        for heading in ["NAME", "SYNOPSIS", "DESCRIPTION", "THE TREE", "OPTIONS", "EXIT STATUS",
                        "SECURITY", "EXAMPLES", "FSTAB", "FILES", "SEE ALSO"]:
            self.assertRegex(page, rf"(?m)^{heading}$")
        self.assertIn("ckptfs - mount a PyTorch checkpoint as a read-only filesystem", page)
        for example in ["ls -d /mnt/model/layer3.*", "np.load(", "torch.from_numpy(", "rsync -a",
                        "scp -r", "fuse.ckptfs  ro,allow_other", "Type=fuse.ckptfs"]:
            self.assertIn(example, page)
        self.assertNotRegex(page, r"\\[f(\-]", "a troff escape was printed")

    def test_version(self):
        th = re.search(r"^\.TH CKPTFS 1 \S+ \"ckptfs (\S+)\"", self.source, re.M)
        self.assertIsNotNone(th, "no .TH line")
        self.assertEqual(th.group(1), version(), "the man page's version is not ckptfs --version")

    def test_options_are_those_of_help(self):
        """Every option and -o name of --help is in OPTIONS, and OPTIONS has no other."""
        help_opts, help_names = help_options(self.help)
        man_opts, man_names = options_of_tags(man_tags(self.sections["OPTIONS"]))
        self.assertGreaterEqual(help_opts, {"-f", "-d", "--debug", "-o", "--notify-fd", "-h",
                                            "--help", "-V", "--version", "--json", "--keys",
                                            "--dtype", "--force"})
        self.assertGreaterEqual(help_names, {"uid=", "gid=", "umask=", "allow_other",
                                             "notify_fd="})
        self.assertEqual(man_opts, help_opts, "options: man page vs --help")
        self.assertEqual(man_names, help_names, "-o options: man page vs --help")

    def test_exit_codes_are_those_of_help(self):
        """The same codes, each described with (at least) the words --help uses."""
        help_codes = help_exit_codes(self.help)
        man_codes = man_exit_codes(self.sections["EXIT STATUS"])
        self.assertEqual(sorted(help_codes), list(range(9)))
        self.assertEqual(sorted(man_codes), sorted(help_codes), "exit codes: man vs --help")
        for code, meaning in help_codes.items():
            missing = words(meaning) - words(man_codes[code])
            self.assertEqual(missing, set(), f"exit status {code}: --help says {meaning!r}, "
                                             f"the man page {man_codes[code].strip()!r}")

    def test_tree_fields_are_documented(self):
        """Every field of a real index.json and meta.json is in THE TREE."""
        mnt = self.new_dir("mnt")
        r = run([CKPTFS, SAMPLE, mnt])
        self.assertEqual(r.returncode, 0, text(r))
        try:
            index = json.loads((views_dir(mnt) / "index.json").read_text())
            meta = json.loads((mnt / index["entries"][0]["path"] / "meta.json").read_text())
        finally:
            force_unmount(mnt)
        tree = "\n".join(map(troff_plain, self.sections["THE TREE"]))
        fields = set(index) | set(index["entries"][0]) | set(meta) | set(meta["storage"])
        for field in sorted(fields):
            self.assertRegex(tree, rf"(?<!\w){field}(?!\w)", f"field {field!r} undocumented")
        for name in [VIEWS_FOLDER, "index.json", "data", "meta.json", "tensor.npy", "tensor.pt",
                     "value.json", "%25", "%2F", "%00", "FNV-1a"]:
            self.assertTrue(name in tree, f"{name!r} is not in THE TREE")


# --------------------------------------------------------------------------------------------
# cmake --install and the Debian package
# --------------------------------------------------------------------------------------------

INSTALLED = {  # relative to the prefix
    "bin/ckptfs", "bin/ckptfs-verify", "libexec/ckptfs/ckptfs-verify",
    "libexec/ckptfs/ckptfs_reference.py", "libexec/ckptfs/ckptfs_mounts.py",
    "libexec/ckptfs/ckptfs_safetensors.py",
    "share/man/man1/ckptfs.1.gz",
    "share/bash-completion/completions/ckptfs", "share/doc/ckptfs/README.md",
    "share/doc/ckptfs/copyright", "share/doc/ckptfs/examples/mnt-model.mount",
} | {f"share/doc/ckptfs/docs/{p.name}" for p in (REPO / "docs").glob("*.md")}  # the README's links
PYTHON_FILES = {p.name for p in (REPO / "python" / "ckptfs").glob("*.py")}
# Where Debian's python3 finds the package: under /usr (DESTDIR, the .deb) its own directory for
# packaged modules, under any other prefix (/usr/local) the version's, which it searches there.
DEBIAN_PYTHON = f"python{sys.version_info[0]}.{sys.version_info[1]}"
PYTHON_DIR_USR = "lib/python3/dist-packages"
PYTHON_DIR_OTHER = f"lib/{DEBIAN_PYTHON}/dist-packages"


def installed(python_dir):
    """Every file cmake --install puts under the prefix, the package in `python_dir`."""
    return INSTALLED | {f"{python_dir}/ckptfs/{name}" for name in PYTHON_FILES}


def files_under(root):
    return {str(p.relative_to(root)) for p in Path(root).rglob("*")
            if p.is_file() or p.is_symlink()}


def needs_build_tree(test):
    reason = None if (BUILD / "cmake_install.cmake").is_file() else \
        f"{BUILD} is not a CMake build tree (CKPTFS should be the built binary)"
    return unittest.skipIf(reason, reason)(test)


class InstallTests(TempDirTestCase):
    def check_tree(self, prefix, python_dir):
        self.assertEqual(files_under(prefix), installed(python_dir))
        for name in PYTHON_FILES:
            self.assertEqual((prefix / python_dir / "ckptfs" / name).read_bytes(),
                             (REPO / "python" / "ckptfs" / name).read_bytes())
        link = prefix / "bin" / "ckptfs-verify"
        self.assertTrue(link.is_symlink())
        self.assertEqual(os.readlink(link), "../libexec/ckptfs/ckptfs-verify",
                         "the link is not relative")
        self.assertTrue(os.access(prefix / "libexec/ckptfs/ckptfs-verify", os.X_OK))
        self.assertTrue(os.access(prefix / "bin/ckptfs", os.X_OK))
        with gzip.open(prefix / "share/man/man1/ckptfs.1.gz") as f:
            self.assertEqual(f.read(), MAN_PAGE.read_bytes())
        self.assertEqual((prefix / "share/bash-completion/completions/ckptfs").read_bytes(),
                         COMPLETION.read_bytes())

    def check_runs(self, prefix, python_dir):
        """The installed ckptfs, ckptfs-verify from PATH (which finds that ckptfs), and the
        Python package from its directory (which finds that ckptfs on PATH)."""
        r = run([prefix / "bin/ckptfs", "--version"])
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(r.stdout.decode().strip(), f"ckptfs {version()}")
        env = {k: v for k, v in os.environ.items() if k not in ("CKPTFS", "CKPTFS_BINARY")}
        env["PATH"] = f"{prefix / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        code = ("import ckptfs, sys\n"
                "with ckptfs.open(sys.argv[1]) as ck:\n"
                "    w = ck['encoder.weight']\n"
                "    print(ckptfs.__file__, ck.path_of('encoder.weight'), len(w))\n")
        r = run([sys.executable, "-c", code, SAMPLE],
                env={**env, "PYTHONPATH": str(prefix / python_dir)}, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(r.stdout.decode().split(),
                         [str(prefix / python_dir / "ckptfs" / "__init__.py"), "file", "4"])
        r = run(["ckptfs-verify", SAMPLE], env=env, timeout=120, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, text(r))
        self.assertIn("all agree", text(r))
        if shutil.which("man"):
            r = run(["man", "-P", "cat", "ckptfs"],
                    env={**env, "MANPATH": str(prefix / "share/man"), "MANWIDTH": "80"})
            self.assertEqual(r.returncode, 0, text(r))
            self.assertIn("mount a PyTorch checkpoint", r.stdout.decode())

    @needs_build_tree
    def test_install_prefix(self):
        prefix = self.tmp / "prefix"
        r = run(["cmake", "--install", BUILD, "--prefix", prefix])
        self.assertEqual(r.returncode, 0, text(r))
        self.check_tree(prefix, PYTHON_DIR_OTHER)
        self.check_runs(prefix, PYTHON_DIR_OTHER)
        # Under the default prefix, /usr/local, that directory is one Debian's python3 searches.
        self.assertIn(f"/usr/local/{PYTHON_DIR_OTHER}", sys.path)

    @needs_build_tree
    def test_install_destdir(self):
        root = self.tmp / "root"
        r = run(["cmake", "--install", BUILD, "--prefix", "/usr"],
                env={**os.environ, "DESTDIR": str(root)})
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(os.listdir(root), ["usr"])
        self.check_tree(root / "usr", PYTHON_DIR_USR)
        self.check_runs(root / "usr", PYTHON_DIR_USR)
        self.assertIn(f"/usr/{PYTHON_DIR_USR}", sys.path)


class DebianPackageTests(TempDirTestCase):
    @needs_build_tree
    def test_package(self):
        for tool in ["cpack", "dpkg-deb", "dpkg-shlibdeps", "file"]:
            if not shutil.which(tool):
                self.skipTest(f"{tool} is not installed (scripts/install-deps.sh installs it)")
        out = self.new_dir("package")
        r = run(["cpack", "--config", BUILD / "CPackConfig.cmake", "-G", "DEB", "-B", out],
                timeout=PACKAGE_TIMEOUT)
        self.assertEqual(r.returncode, 0, text(r))
        arch = run(["dpkg", "--print-architecture"]).stdout.decode().strip()
        deb = out / f"ckptfs_{version()}_{arch}.deb"
        self.assertTrue(deb.is_file(), f"{deb} not built: {sorted(os.listdir(out))}")

        def field(name):
            r = run(["dpkg-deb", "-f", deb, name])
            self.assertEqual(r.returncode, 0, text(r))
            return r.stdout.decode().strip()

        self.assertEqual(field("Package"), "ckptfs")
        self.assertEqual(field("Version"), version())
        self.assertEqual(field("Architecture"), arch)
        self.assertRegex(field("Maintainer"), r".+ <.+@.+>")
        self.assertEqual(field("Section"), "utils")
        self.assertTrue(field("Description").startswith(
            "mount a PyTorch checkpoint as a read-only filesystem\n "))
        depends = {d.split()[0]: d for d in field("Depends").split(", ")}
        for package in ["fuse3", "libfuse3-3", "libfmt9", "libc6", "libstdc++6", "zlib1g",
                        "libcurl4"]:
            self.assertIn(package, depends, f"Depends: {field('Depends')}")
        self.assertRegex(depends["libfuse3-3"], r"\(>= 3\.\d+")
        # Loaded with dlopen (dpkg-shlibdeps cannot see it), no older than the build asks.
        self.assertEqual(depends["libcurl4"], "libcurl4 (>= 7.85.0)")
        self.assertIn("python3", field("Recommends").split(", "))
        self.assertEqual(set(field("Suggests").split(", ")), {"python3-numpy", "python3-torch"})
        self.assertNotIn("python3-torch", field("Depends") + field("Recommends"))

        listing = run(["dpkg-deb", "-c", deb])
        self.assertEqual(listing.returncode, 0, text(listing))
        paths = {line.split()[5].removeprefix("./") for line in listing.stdout.decode().splitlines()
                 if not line.startswith("d")}
        self.assertEqual(paths, {"usr/" + p for p in installed(PYTHON_DIR_USR)})
        self.assertIn("./usr/bin/ckptfs-verify -> ../libexec/ckptfs/ckptfs-verify",
                      listing.stdout.decode())
        for line in listing.stdout.decode().splitlines():
            self.assertIn("root/root", line)

        root = self.new_dir("root")
        r = run(["dpkg", "-x", deb, root])
        self.assertEqual(r.returncode, 0, text(r))
        binary = root / "usr/bin/ckptfs"
        r = run([binary, "--version"])
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(r.stdout.decode().strip(), f"ckptfs {version()}")
        self.assertNotIn("debug_info", run(["file", binary]).stdout.decode(),
                         "the packaged binary is not stripped")
        r = run([binary, "inspect", SAMPLE])
        self.assertEqual(r.returncode, 0, text(r))
        self.assertTrue((root / "usr/bin/ckptfs-verify").resolve().is_file())
        r = run(["bash", "-n", root / "usr/share/bash-completion/completions/ckptfs"])
        self.assertEqual(r.returncode, 0, text(r))

        if os.geteuid() == 0 and shutil.which("apt-get"):
            # What `apt-get install ./ckptfs_*.deb` would do here, without doing it.
            r = run(["apt-get", "install", "-s", "-q", f"./{deb.name}"], cwd=out, timeout=120)
            self.assertEqual(r.returncode, 0, text(r))
            self.assertRegex(r.stdout.decode(), r"(?m)^Inst ckptfs ")


# --------------------------------------------------------------------------------------------
# The readiness line, the notify fd and sd_notify
# --------------------------------------------------------------------------------------------

class ReadinessTests(TempDirTestCase):
    def counts(self, mnt):
        index = json.loads((views_dir(mnt) / "index.json").read_text())
        return index["tensors"], index["values"], index["total_bytes"]

    def start(self, args, mnt, **kwargs):
        log = open(self.tmp / f"stderr-{mnt.name}.log", "w+b")
        self.addCleanup(log.close)
        proc = subprocess.Popen([str(CKPTFS), *map(str, args)], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True, **kwargs)
        self.addCleanup(self.stop, proc, mnt)
        proc.log = log
        return proc

    def stop(self, proc, mnt):
        force_unmount(mnt)
        try:
            proc.wait(timeout=EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.fail("ckptfs still ran after its unmount")

    @staticmethod
    def output(proc):
        proc.log.seek(0)
        return proc.log.read().decode("utf-8", "replace")

    def unmount(self, mnt, proc=None):
        r = run(["fusermount3", "-u", mnt])
        self.assertEqual(r.returncode, 0, text(r))
        if proc is not None:
            self.assertEqual(proc.wait(timeout=EXIT_TIMEOUT), 0, self.output(proc))

    def test_foreground_notify_fd_and_ready_line(self):
        """-f -o notify_fd=N: "1\\n" then end-of-file once mounted; one line on stderr."""
        mnt = self.new_dir("mnt")
        r_fd, w_fd = os.pipe()
        self.addCleanup(os.close, r_fd)
        proc = self.start(["-f", SAMPLE, mnt, "-o", f"notify_fd={w_fd}"], mnt, pass_fds=[w_fd])
        os.close(w_fd)
        self.assertEqual(read_pipe(r_fd), b"1\n", self.output(proc))
        self.assertTrue(is_mounted(mnt), "notified before the mount existed")
        self.assertIsNone(proc.poll())
        tensors, values, nbytes = self.counts(mnt)
        self.assertTrue(wait_until(lambda: "\n" in self.output(proc), TIMEOUT))
        line = self.output(proc)
        m = READY_LINE.fullmatch(line.rstrip("\n"))
        self.assertIsNotNone(m, f"readiness line: {line!r}")
        self.assertEqual(m.groups(), (str(SAMPLE), str(mnt), str(tensors), str(values),
                                      str(nbytes)))
        self.unmount(mnt, proc)
        self.assertEqual(self.output(proc), line, "more than the readiness line on stderr")

    def test_daemon_notify_fd(self):
        """--notify-fd N without -f: "1\\n" before ckptfs returns, nothing on stderr."""
        mnt = self.new_dir("mnt")
        for form in (["--notify-fd", "{}"], ["--notify-fd={}"], ["-onotify_fd={}"]):
            with self.subTest(form=form):
                r_fd, w_fd = os.pipe()
                args = [a.format(w_fd) for a in form]
                r = run([CKPTFS, *args, SAMPLE, mnt], pass_fds=[w_fd], stdin=subprocess.DEVNULL)
                os.close(w_fd)
                try:
                    self.assertEqual(r.returncode, 0, text(r))
                    self.assertEqual(r.stderr, b"")
                    self.assertEqual(read_pipe(r_fd), b"1\n")
                    self.assertTrue(is_mounted(mnt))
                    self.unmount(mnt)
                    self.assertTrue(wait_until(lambda: not processes_with_arg(mnt),
                                               EXIT_TIMEOUT), "the daemon did not exit")
                finally:
                    os.close(r_fd)
                    force_unmount(mnt)

    def test_notify_fd_failures(self):
        """A failure writes "0\\n" after the error line; a closed descriptor is a usage error."""
        bad = self.tmp / "bad.pth"
        bad.write_bytes(b"not a checkpoint")
        mnt = self.new_dir("mnt")
        cases = {"bad checkpoint": ([bad, mnt], {2, 3, 4, 5}),
                 "missing mountpoint": ([SAMPLE, self.tmp / "missing"], {6}),
                 "unsupported option": ([SAMPLE, mnt, "-o", "no_such_option"], {1}),
                 "unsupported option first in its list": (
                     [SAMPLE, mnt, "-o", "no_such_option,uid=0"], {1}),
                 "usage error": ([SAMPLE], {1})}
        for what, (args, codes) in cases.items():
            for foreground in ([], ["-f"]):
                with self.subTest(what, foreground=foreground):
                    r_fd, w_fd = os.pipe()
                    r = run([CKPTFS, *foreground, "--notify-fd", w_fd, *args], pass_fds=[w_fd],
                            stdin=subprocess.DEVNULL)
                    os.close(w_fd)
                    try:
                        self.assertIn(r.returncode, codes, text(r))
                        self.assertEqual(read_pipe(r_fd), b"0\n")
                    finally:
                        os.close(r_fd)
                    lines = r.stderr.decode().splitlines()
                    self.assertEqual(len(lines), 1, lines)
                    self.assertTrue(lines[0].startswith("ckptfs: "), lines)
                    self.assertFalse(is_mounted(mnt))
        with self.subTest("unsupported option message"):
            r = run([CKPTFS, SAMPLE, mnt, "-o", "no_such_option"])
            self.assertEqual(r.stderr.decode().strip(), "ckptfs: unsupported mount option "
                                                        "'no_such_option' (try 'ckptfs --help')")
        with self.subTest("closed descriptor"):
            r = run([CKPTFS, "-o", "notify_fd=99", SAMPLE, mnt])
            self.assertEqual(r.returncode, 1, text(r))
            self.assertIn("notify_fd=99", r.stderr.decode())
        for value in ["x", "-1", "99999999999"]:
            with self.subTest("invalid", value=value):
                r = run([CKPTFS, f"--notify-fd={value}", SAMPLE, mnt])
                self.assertEqual(r.returncode, 1, text(r))

    def test_reader_gone(self):
        """A notify pipe nobody reads any more does not kill ckptfs (SIGPIPE)."""
        mnt = self.new_dir("mnt")
        r_fd, w_fd = os.pipe()
        os.close(r_fd)
        r = run([CKPTFS, "--notify-fd", w_fd, SAMPLE, mnt], pass_fds=[w_fd])
        os.close(w_fd)
        self.assertEqual(r.returncode, 0, text(r))
        self.assertTrue(is_mounted(mnt))
        self.unmount(mnt)

    def test_sd_notify(self):
        """With -f and $NOTIFY_SOCKET (a Type=notify service): READY=1 once mounted."""
        for abstract in (False, True):
            with self.subTest(abstract=abstract):
                mnt = self.new_dir(f"mnt-{abstract}")
                server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self.addCleanup(server.close)
                if abstract:
                    name = f"@ckptfs-test-{os.getpid()}-{time.monotonic_ns()}"
                    server.bind("\0" + name[1:])
                else:
                    name = str(self.tmp / "notify.sock")
                    server.bind(name)
                server.settimeout(TIMEOUT)
                proc = self.start(["-f", SAMPLE, mnt], mnt,
                                  env={**os.environ, "NOTIFY_SOCKET": name})
                message = server.recv(4096).decode()
                self.assertTrue(is_mounted(mnt))
                self.assertTrue(message.startswith("READY=1\nSTATUS=ckptfs: mounted "), message)
                self.unmount(mnt, proc)


# --------------------------------------------------------------------------------------------
# The argument conventions of mount.fuse3, without mount(8)
# --------------------------------------------------------------------------------------------

class MountHelperConventionTests(TempDirTestCase):
    def test_fstab_and_generic_options(self):
        """What mount.fuse3 passes: options after the arguments, rw by default, dev/suid, the
        generic and fstab-only options. ckptfs mounts read-only, ignoring what means nothing."""
        mnt = self.new_dir("mnt")
        options = [
            "rw,dev,suid",
            "defaults,x-systemd.automount,x-systemd.requires=a.service,owner,group,comment=x,"
            "_rnetdev,helper=x,dev,suid",
            "ro,noatime,nodiratime,relatime,strictatime,lazytime,iversion,nosymfollow,"
            "noexec,exec,nodev,nosuid,sync,async,dirsync",
            "rw,auto,noauto,user,nouser,users,nofail,_netdev,mand,nomand,silent,loud,atime",
        ]
        for option in options:
            with self.subTest(option=option):
                r = run([CKPTFS, SAMPLE, mnt, "-o", option])
                self.assertEqual(r.returncode, 0, text(r))
                try:
                    point = mount_of(mnt)
                    self.assertIsNotNone(point)
                    self.assertEqual(point.fstype, "fuse.ckptfs")
                    self.assertIn("ro", point.options)
                    self.assertNotIn("rw", point.options)
                    with self.assertRaises(OSError):
                        (views_dir(mnt) / "index.json").write_text("x")
                finally:
                    force_unmount(mnt)
        with self.subTest("nodev,nosuid,noexec reach the kernel"):
            r = run([CKPTFS, SAMPLE, mnt, "-o", "nodev,nosuid,noexec,noatime"])
            self.assertEqual(r.returncode, 0, text(r))
            try:
                flags = mount_of(mnt).options
                self.assertGreaterEqual(flags, {"ro", "nodev", "nosuid", "noexec", "noatime"})
            finally:
                force_unmount(mnt)

    def test_fuse_fd_mountpoint(self):
        """/dev/fd/N (mount.fuse3 -o drop_privileges) is left to libfuse: no directory check."""
        r = run([CKPTFS, SAMPLE, "/dev/fd/7"])
        self.assertEqual(r.returncode, 6, text(r))
        self.assertNotIn("not a directory", r.stderr.decode())


# --------------------------------------------------------------------------------------------
# mount(8) and fstab, for real
# --------------------------------------------------------------------------------------------

MOUNT_SCRIPT = r"""
set -u
# The namespace starts with a copy of every mount of the machine: another test's FUSE mount
# copied here would keep its daemon serving after that test unmounts it, as long as this
# namespace lives. Detached here at once (this namespace only).
while read -r target; do
    umount -l "$(printf '%b' "$target")" 2>/dev/null
done < <(awk '{ for (i = 7; $i != "-"; i++); if ($(i + 1) ~ /^fuse/) print $5 }' /proc/self/mountinfo)
# mount(8) runs helpers with no PATH, so /bin/sh in mount.fuse3 searches its default path,
# which starts with /usr/local/sbin: this namespace's /usr/local/sbin holds the ckptfs tested.
mount --bind "$BIN" /usr/local/sbin || exit 90
cleanup() {
    for m in "$MNT"; do
        for _ in 1 2 3 4 5; do
            mountpoint -q "$m" || break
            umount "$m" 2>/dev/null || umount -l "$m"
        done
    done
}
trap cleanup EXIT
wait_gone() {  # until no ckptfs process serves $1
    for _ in $(seq 200); do
        pgrep -f "ckptfs .*$1" >/dev/null || return 0
        sleep 0.05
    done
    echo "a ckptfs process still serves $1" >&2
    return 1
}
check() {  # NAME: what a user sees on $MNT, into $OUT/NAME.*
    findmnt -n -o FSTYPE,SOURCE,OPTIONS --mountpoint "$MNT" > "$OUT/$1.findmnt" || return 1
    stat -c '%u %g %a' "$MNT/@VIEWS@/index.json" > "$OUT/$1.stat" || return 1
    cp "$MNT/@VIEWS@/index.json" "$OUT/$1.index.json" || return 1
}
""".replace("@VIEWS@", VIEWS_FOLDER) + "\n"


class MountCommandTests(TempDirTestCase):
    """mount -t fuse.ckptfs and mount -T FSTAB, run in a private mount namespace (unshare -m):
    the mounts, and the bind mount that puts this ckptfs first in mount.fuse3's search path, are
    invisible outside it and go with it."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("mount(8) needs root")
        for tool in ["unshare", "mount", "findmnt", "pgrep"]:
            if not shutil.which(tool):
                raise unittest.SkipTest(f"{tool} is missing")
        if not any(Path(d, "mount.fuse3").exists() for d in ["/sbin", "/usr/sbin"]):
            raise unittest.SkipTest("mount.fuse3 is missing (package fuse3)")
        probe = run(["unshare", "--mount", "--propagation", "private", "true"])
        if probe.returncode != 0:
            raise unittest.SkipTest(f"no private mount namespace: {text(probe).strip()}")

    def setUp(self):
        super().setUp()
        self.bin = self.new_dir("bin")
        (self.bin / "ckptfs").symlink_to(CKPTFS)
        self.out = self.new_dir("out")
        self.mnt = self.new_dir("mnt")
        self.source = self.tmp / "model.pth"
        shutil.copyfile(SAMPLE, self.source)
        os.chmod(self.source, 0o644)  # the mount's modes follow it: files 0644

    def namespace(self, script):
        env = {**os.environ, "BIN": str(self.bin), "OUT": str(self.out), "MNT": str(self.mnt),
               "SRC": str(self.source), "TMP": str(self.tmp)}
        r = run(["unshare", "--mount", "--propagation", "private", "bash", "-c",
                 MOUNT_SCRIPT + textwrap.dedent(script)], env=env, timeout=120)
        return r

    def result(self, name):
        fstype, source, options = (self.out / f"{name}.findmnt").read_text().split()
        return fstype, source, set(options.split(",")), \
            (self.out / f"{name}.stat").read_text().split(), \
            json.loads((self.out / f"{name}.index.json").read_text())

    def test_mount_t(self):
        r = self.namespace("""
            set -e
            mount -t fuse.ckptfs "$SRC" "$MNT" -o ro,allow_other
            check allow_other
            umount "$MNT"
            wait_gone "$MNT"
            mount -t fuse.ckptfs "$SRC" "$MNT"
            check plain
            fusermount3 -u "$MNT"
            wait_gone "$MNT"
            mount -t fuse.ckptfs -o notify_fd=3,nodev,noexec "$SRC" "$MNT" 3>"$OUT/notify"
            check notify
            umount "$MNT"
            wait_gone "$MNT"
            echo done
        """)
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(r.stdout.decode().strip(), "done")
        fstype, source, options, owner, index = self.result("allow_other")
        self.assertEqual((fstype, source), ("fuse.ckptfs", str(self.source)))
        self.assertGreaterEqual(options, {"ro", "allow_other", "default_permissions"})
        self.assertEqual(index["source"], str(self.source))
        self.assertEqual(index["tensors"], 5)
        fstype, source, options, owner, index = self.result("plain")
        self.assertIn("ro", options, "mount.fuse3's default rw made a writable mount")
        self.assertNotIn("allow_other", options)
        self.assertEqual(owner, ["0", "0", "644"])
        _, _, options, _, _ = self.result("notify")
        self.assertGreaterEqual(options, {"ro", "nodev", "noexec"})
        self.assertEqual((self.out / "notify").read_bytes(), b"1\n")

    def test_fstab(self):
        """An fstab line with fstab's own options, systemd's and ckptfs's, through mount -T."""
        fstab = self.tmp / "fstab"
        fstab.write_text(
            "# a comment\n"
            f"{self.source}  {self.mnt}  fuse.ckptfs  ro,allow_other,noauto,nofail,_netdev,"
            "x-systemd.automount,x-systemd.idle-timeout=60,uid=1234,gid=4321,umask=0227  0  0\n")
        defaults = self.tmp / "fstab.defaults"
        defaults.write_text(f"{self.source} {self.mnt} fuse.ckptfs defaults 0 0\n")
        r = self.namespace("""
            set -e
            mount -T "$TMP/fstab" "$MNT"
            check fstab
            umount "$MNT"
            wait_gone "$MNT"
            mount -T "$TMP/fstab.defaults" "$MNT"
            check defaults
            fusermount3 -u "$MNT"
            wait_gone "$MNT"
            echo done
        """)
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(r.stdout.decode().strip(), "done")
        fstype, source, options, owner, index = self.result("fstab")
        self.assertEqual((fstype, source), ("fuse.ckptfs", str(self.source)))
        self.assertGreaterEqual(options, {"ro", "allow_other"})
        self.assertEqual(owner, ["1234", "4321", "440"])
        fstype, source, options, owner, index = self.result("defaults")
        self.assertIn("ro", options)
        self.assertEqual(owner, ["0", "0", "644"])

    def test_fstab_view_options_and_mount_a(self):
        """An fstab line with options that change the view: /proc/mounts shows them after the
        checkpoint. `mount -a` finds a line mounted by its source: run again, it skips a plain
        line, and tries a line with view options again, which ckptfs refuses (already a mount
        point, mount's status 32), unless the line gives fsname= the checkpoint's path (the man
        page's FSTAB says so)."""
        # files= with its list, as mount.fuse3 passes an fstab line's options on.
        lines = {"plain": "ro", "view": "ro,files=data,meta.json,nodev,dtype=float16",
                 "fsname": f"ro,dtype=float16,fsname={self.source}"}
        for name, options in lines.items():
            (self.tmp / f"fstab.{name}").write_text(
                f"{self.source} {self.mnt} fuse.ckptfs {options} 0 0\n")
        r = self.namespace("""
            for name in plain view fsname; do
                mount -a -T "$TMP/fstab.$name"
                echo "$name first $?"
                findmnt -n -o SOURCE --mountpoint "$MNT" > "$OUT/$name.source"
                mount -a -T "$TMP/fstab.$name" 2>"$OUT/$name.stderr"
                echo "$name second $?"
                umount "$MNT"
                wait_gone "$MNT"
            done
            echo done
        """)
        self.assertEqual(r.returncode, 0, text(r))
        self.assertEqual(r.stdout.decode().split("\n"),
                         ["plain first 0", "plain second 0", "view first 0", "view second 32",
                          "fsname first 0", "fsname second 0", "done", ""])
        self.assertEqual((self.out / "plain.source").read_text(), f"{self.source}\n")
        self.assertEqual((self.out / "view.source").read_text(),
                         f"{self.source}[dtype=float16,files=data,meta.json]\n")
        self.assertEqual((self.out / "fsname.source").read_text(), f"{self.source}\n")
        self.assertIn("already a mount point", (self.out / "view.stderr").read_text())

    def test_drop_privileges(self):
        """mount.fuse3 -o drop_privileges mounts itself and hands ckptfs /dev/fd/N."""
        r = self.namespace("""
            set -e
            mount -t fuse.ckptfs "$SRC" "$MNT" -o ro,drop_privileges
            check dropped
            pgrep -a -f "ckptfs $SRC /dev/fd/" > "$OUT/process"
            umount "$MNT"
            for _ in $(seq 200); do
                pgrep -f "ckptfs $SRC /dev/fd/" >/dev/null || break
                sleep 0.05
            done
            echo done
        """)
        self.assertEqual(r.returncode, 0, text(r))
        fstype, _, options, _, index = self.result("dropped")
        self.assertEqual(fstype, "fuse.ckptfs")
        self.assertIn("ro", options)
        self.assertEqual(index["tensors"], 5)

    def test_failure(self):
        """A bad checkpoint: mount(8) fails with ckptfs's line and nothing is mounted."""
        (self.tmp / "bad.pth").write_bytes(b"PK\x03\x04 not really")
        r = self.namespace("""
            mount -t fuse.ckptfs "$TMP/bad.pth" "$MNT" -o ro 2>"$OUT/stderr"
            echo "status $?"
            mountpoint -q "$MNT" && echo mounted
            true
        """)
        self.assertEqual(r.returncode, 0, text(r))
        lines = r.stdout.decode().split()
        self.assertNotIn("mounted", lines)
        self.assertNotEqual(lines[:2], ["status", "0"])
        self.assertRegex((self.out / "stderr").read_text(), rf"ckptfs: {re.escape(str(self.tmp))}"
                                                            r"/bad.pth: ")


# --------------------------------------------------------------------------------------------
# bash completion, the systemd unit, the README
# --------------------------------------------------------------------------------------------

COMPLETE = r"""
source "$COMPLETION" || exit 1
line=$1
COMP_LINE=$line
COMP_POINT=${#line}
# Split as readline does: at blanks, and at COMP_WORDBREAKS' '=' and ':'.
s=${line//=/ = }
s=${s//:/ : }
read -ra COMP_WORDS <<<"$s"
[[ $line == *[[:space:]] || $line == *[=:] ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_ckptfs
printf '%s\n' "${COMPREPLY[@]}"
"""


class CompletionTests(TempDirTestCase):
    def setUp(self):
        super().setUp()
        if not shutil.which("bash"):
            self.skipTest("bash is missing")
        self.dir = self.new_dir("files")
        for name in ["a.pth", "b.PT", "c.ckpt", "d.bin", "e.tar", "notes.txt", "model.safetensors",
                     "model.safetensors.index.json", "config.json", "my model.pth", "models/x.pth", "models/y.txt"]:
            (self.dir / name).parent.mkdir(exist_ok=True)
            (self.dir / name).write_bytes(b"")
        (self.dir / "mnt").mkdir()

    def complete(self, line):
        r = run(["bash", "--norc", "--noprofile", "-c", COMPLETE, "complete", line],
                env={**os.environ, "COMPLETION": str(COMPLETION)}, cwd=self.dir)
        self.assertEqual(r.returncode, 0, text(r))
        return sorted(w for w in r.stdout.decode().split("\n") if w)

    def test_registered(self):
        r = run(["bash", "--norc", "-c", f"source {COMPLETION}; complete -p ckptfs"])
        self.assertEqual(r.stdout.decode().strip(), "complete -F _ckptfs ckptfs")

    def test_options(self):
        self.assertEqual(self.complete("ckptfs -"),
                         sorted(["-f", "-d", "--debug", "-o", "--notify-fd", "-h", "--help", "-V",
                                 "--version"]))
        self.assertEqual(self.complete("ckptfs --v"), ["--version"])
        self.assertEqual(self.complete("ckptfs inspect a.pth -"), ["--json", "--verify"])
        self.assertEqual(self.complete("ckptfs pack a.pth out.pth -"),
                         sorted(["--keys", "--dtype", "--names", "--flat", "--force",
                                 "--progress", "--quiet", "-o", "-h", "--help"]))
        self.assertEqual(self.complete("ckptfs pack a.pth --f"), ["--flat", "--force"])
        self.assertEqual(self.complete("ckptfs pack a.pth --fo"), ["--force"])
        self.assertEqual(self.complete("ckptfs pack a.pth out.pth --dtype "),
                         ["bfloat16", "float16", "float32"])
        self.assertEqual(self.complete("ckptfs pack a.pth out.pth --dtype b"), ["bfloat16"])
        self.assertEqual(self.complete("ckptfs pack a.gguf out.pth --names "), ["file", "hf"])
        self.assertEqual(self.complete("ckptfs pack a.pth --keys "), [])

    def test_checkpoint_then_mountpoint(self):
        checkpoints = ["a.pth", "b.PT", "c.ckpt", "d.bin", "e.tar", "mnt", "model.safetensors",
                       "model.safetensors.index.json", "models", "my model.pth"]
        self.assertEqual(self.complete("ckptfs "), sorted(checkpoints + ["inspect", "pack"]))
        self.assertEqual(self.complete("ckptfs -f -o uid=5 "),
                         sorted(checkpoints + ["inspect", "pack"]))
        self.assertEqual(self.complete("ckptfs p"), ["pack"])
        self.assertEqual(self.complete("ckptfs --notify-fd 3 m"),
                         ["mnt", "model.safetensors", "model.safetensors.index.json", "models",
                          "my model.pth"])
        self.assertEqual(self.complete("ckptfs models/"), ["models/x.pth"])
        self.assertEqual(self.complete("ckptfs inspect "), sorted(checkpoints))
        self.assertEqual(self.complete("ckptfs a.pth "), ["mnt", "models"])
        self.assertEqual(self.complete("ckptfs -f a.pth mo"), ["models"])
        self.assertEqual(self.complete("ckptfs a.pth mnt "), [])
        self.assertEqual(self.complete("ckptfs inspect a.pth "), [])
        # pack SRC OUT: SRC as a checkpoint, OUT a directory or a file of a format pack writes.
        self.assertEqual(self.complete("ckptfs pack "), sorted(checkpoints))
        self.assertEqual(self.complete("ckptfs pack --keys 'enc*' m"),
                         ["mnt", "model.safetensors", "model.safetensors.index.json", "models",
                          "my model.pth"])
        self.assertEqual(self.complete("ckptfs pack a.pth "),
                         ["a.pth", "b.PT", "c.ckpt", "d.bin", "mnt", "model.safetensors",
                          "models", "my model.pth"])
        self.assertEqual(self.complete("ckptfs pack --dtype float16 a.pth mo"),
                         ["model.safetensors", "models"])
        self.assertEqual(self.complete("ckptfs pack a.pth out.pth "), [])

    def test_mount_options(self):
        """Every -o option --help lists, and ro: a new option cannot be left out."""
        _, help_names = help_options(help_text())
        self.assertGreaterEqual(help_names, {"uid=", "dtype=", "direct_io", "insecure"})
        names = sorted(help_names | {"ro"})
        self.assertEqual(self.complete("ckptfs -o "), names)
        self.assertEqual(self.complete("ckptfs a.pth mnt -o "), names)
        self.assertEqual(self.complete("ckptfs -o u"), ["uid=", "umask="])
        self.assertEqual(self.complete("ckptfs -o allow_other,n"),
                         ["allow_other,names=", "allow_other,no_open", "allow_other,notify_fd="])
        self.assertEqual(self.complete("ckptfs -o uid=5,al"), ["5,allow_other", "5,allow_root"])
        self.assertEqual(self.complete("ckptfs -oal"), ["-oallow_other", "-oallow_root"])
        self.assertEqual(self.complete("ckptfs -o uid="), [])
        # files=NAME[,NAME...]: the names of a key directory's files, as long as the list goes on.
        files = ["data", "meta.json", "tensor.npy", "tensor.pt"]
        self.assertEqual(self.complete("ckptfs -o files="), files)
        self.assertEqual(self.complete("ckptfs -o files=t"), ["tensor.npy", "tensor.pt"])
        self.assertEqual(self.complete("ckptfs -o uid=5,files=data,me"), ["data,meta.json"])
        self.assertEqual(self.complete("ckptfs -o files=npy,pt,d"),
                         ["npy,pt,data", "npy,pt,direct_io", "npy,pt,dtype="])
        self.assertEqual(self.complete("ckptfs -o files=data,allow_other,d"),
                         ["data,allow_other,direct_io", "data,allow_other,dtype="])
        remote = sorted(["timeout=", "cache_size=", "cache_dir=", "cache_dir_size=", "cacert=",
                         "insecure"])
        self.assertEqual(self.complete("ckptfs inspect -o "), sorted(remote + ["names="]))
        self.assertEqual(self.complete("ckptfs pack a.pth out.pth -o "), remote)
        self.assertEqual(self.complete("ckptfs pack -o cache_size=1G,c"),
                         sorted(["1G,cache_dir=", "1G,cache_dir_size=", "1G,cache_size=",
                                 "1G,cacert="]))
        self.assertEqual(self.complete("ckptfs --notify-fd "), [])


class UnitAndReadmeTests(unittest.TestCase):
    def test_systemd_unit(self):
        unit = configparser.ConfigParser(strict=True, interpolation=None)
        unit.optionxform = str
        unit.read_string(UNIT.read_text())
        mount = unit["Mount"]
        self.assertEqual(mount["Type"], "fuse.ckptfs")
        self.assertEqual(mount["Options"], "ro,allow_other")
        self.assertTrue(mount["What"].endswith(".pth"))
        self.assertEqual(UNIT.name, mount["Where"].strip("/").replace("/", "-") + ".mount")
        if shutil.which("systemd-analyze"):
            r = run(["systemd-analyze", "verify", "--man=no", UNIT])
            self.assertEqual(r.returncode, 0, text(r))
            self.assertEqual(text(r).strip(), "", "systemd-analyze verify complained")

    def test_readme(self):
        readme = (REPO / "README.md").read_text()
        for needle in ["scripts/package.sh", "apt-get install ./", "cmake --install",
                       "fuse.ckptfs", "packaging/mnt-model.mount", "notify_fd"]:
            self.assertTrue(needle in readme, f"the README does not mention {needle!r}")


if __name__ == "__main__":
    unittest.main()
