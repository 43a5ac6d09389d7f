# SPDX-License-Identifier: MIT
"""The README's recipes, run as written (issue 21): every code block that README.md marks with
`<!-- readme-test: NAME -->` on the line before its fence is taken from the README at test time
and run, the blocks of one NAME in order, in one fresh directory holding what the README says
they are run with:

  model.pth   tests/data/sample.pth (the demo's sample)
  train.pth   a training checkpoint: {"model": the README's nn.Sequential's state_dict,
              "optimizer": SGD with momentum, "epoch": 3}

with `ckptfs` (the binary under test) and `python3` (/usr/bin/python3, torch's) first on PATH.
`sh` blocks run with `bash -euo pipefail`, `python` blocks with /usr/bin/python3 (a traceback
names the README's line), `console` blocks command by command, each command's output compared
with the lines the README shows under it (`ls` output as a set of names: a terminal arranges it
in columns). After the blocks, each recipe's test checks what they made against torch.load and
the reference safetensors reader. Nothing of a block is changed, but for what names another
machine: `gpu-box:` (rsync and scp) is an sshd of this test's own on 127.0.0.1
(remote_servers.Sshd), `https://host/` the plain-HTTP URL of an nginx on loopback, and
`s3://bucket/` an S3 server on loopback that the AWS_* variables name, as the README says.

A tagged recipe without a test here, or a test whose recipe is gone, fails
(test_every_recipe_is_run).

Run by ctest as `/usr/bin/python3 -m unittest -v test_readme` with CKPTFS (see fixtures.py).
Needs /dev/fuse, fusermount3, torch, and what scripts/install-deps.sh installs: rsync, jq, sshd
(the copy recipe; skipped with the reason without it), nginx and the S3 server (the remote one).
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "scripts"))
sys.path.insert(0, str(HERE))

from fixtures import require  # noqa: E402

require("fuse", "torch")  # else the module exits 77: skipped, with the reason

import torch  # noqa: E402

from ckptfs_mounts import mount_points, unmount  # noqa: E402
from readme_blocks import readme_blocks, recipe  # noqa: E402
from ckptfs_safetensors import read_safetensors  # noqa: E402
from fixtures import CKPTFS, REPO  # noqa: E402
from remote_servers import Nginx, S3Server, Sshd  # noqa: E402

SAMPLE = REPO / "tests" / "data" / "sample.pth"
BLOCK_TIMEOUT = 180  # seconds for one block (a mount, copies, a python3 importing torch)
# Recipes that need torch 2.x, run in the interop root by the module named (its test_<name>).
INTEROP_RECIPES = {"resume_dcp": REPO / "tests" / "interop" / "test_interop_readme.py"}


# The model of the README's "Load into a model" recipe, as train.pth holds it.
def readme_model():
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))


def training_checkpoint(path):
    torch.manual_seed(21)
    model = readme_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(8, 256)).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, path)


def console_steps(code):
    """[(command, [expected output lines])] of a console block."""
    steps = []
    for line in code.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        else:
            raise AssertionError(f"console block output before any command: {line!r}")
    return steps


class ReadmeRecipes(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="ckptfs-readme-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.addCleanup(self.unmount_all)
        self.dir = self.tmp / "work"
        self.dir.mkdir()
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir()
        (bin_dir / "ckptfs").symlink_to(CKPTFS)
        (bin_dir / "python3").symlink_to("/usr/bin/python3")
        # The Python package as it is installed (a clone's python/ on PYTHONPATH).
        self.env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        PYTHONPATH=str(REPO / "python"))
        self.env.pop("CKPTFS_BINARY", None)
        self.prelude = ""  # shell functions standing in for other machines (gpu-box)
        shutil.copyfile(SAMPLE, self.dir / "model.pth")
        training_checkpoint(self.dir / "train.pth")

    def unmount_all(self):
        """Whatever a failed recipe left mounted below the test's directory."""
        for point in reversed(mount_points()):
            if Path(point).is_relative_to(self.tmp):
                unmount(point)

    # -- running blocks ----------------------------------------------------------------------

    def run_block(self, block):
        """Runs one sh or console block in the recipe's directory. Returns its stdout."""
        if block.lang == "console":
            return self.run_console(block)
        if block.lang != "sh":
            raise AssertionError(f"{block.where()}: no runner for {block.lang!r} blocks")
        return self.run_process(["bash", "-euo", "pipefail", "-c", self.prelude + block.code],
                                block.where())

    def run_python(self, blocks):
        """Consecutive python blocks, in one process as a reader runs them one after the other,
        each followed by its check (test code, given with the block). A traceback names the
        README's lines."""
        steps = []
        for block, check in blocks:
            steps.append(("\n" * (block.line - 1) + block.code, "README.md"))
            if check:
                steps.append((check, f"<check after README.md:{block.line}>"))
        script = self.tmp / f"{blocks[0][0].name}-{blocks[0][0].line}.py"
        script.write_text(f"import json\nns = {{'__name__': '__main__'}}\n"
                          f"for code, name in json.loads({json.dumps(json.dumps(steps))}):\n"
                          f"    exec(compile(code, name, 'exec'), ns)\n")
        return self.run_process(["/usr/bin/python3", str(script)],
                                " + ".join(b.where() for b, _ in blocks))

    def run_process(self, args, where):
        r = subprocess.run(args, cwd=self.dir, env=self.env, capture_output=True,
                           timeout=BLOCK_TIMEOUT)
        self.assertEqual(r.returncode, 0,
                         f"{where} failed (exit {r.returncode}):\n--- stdout\n"
                         f"{r.stdout.decode(errors='replace')[-3000:]}\n--- stderr\n"
                         f"{r.stderr.decode(errors='replace')[-3000:]}")
        return r.stdout.decode()

    def run_console(self, block):
        out = []
        for command, expected in console_steps(block.code):
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=self.dir,
                               env=self.env, capture_output=True, timeout=BLOCK_TIMEOUT)
            got = r.stdout.decode()
            self.assertEqual(r.returncode, 0, f"{block.where()}: `{command}` failed: "
                                              f"{r.stderr.decode(errors='replace')}")
            shown = "\n".join(expected)
            if command.split()[0] == "ls":
                self.assertEqual(sorted(got.split()), sorted(shown.split()),
                                 f"{block.where()}: `{command}` lists other names than the README")
            else:
                self.assertEqual(got.split(), shown.split(),
                                 f"{block.where()}: `{command}` prints other than the "
                                 f"README:\n{got}")
            out.append(got)
        return "".join(out)

    def run_recipe(self, name, checks=None):
        """Every block of recipe `name`, in order (consecutive python blocks in one process);
        `checks` maps a block's index in the recipe to the python run after it. Returns the
        blocks' stdout."""
        out, python = [], []
        for i, b in enumerate(recipe(name) + [None]):
            if b is not None and b.lang == "python":
                python.append((b, (checks or {}).get(i, "")))
                continue
            if python:
                out.append(self.run_python(python))
                python = []
            if b is not None:
                out.append(self.run_block(b))
        return "".join(out)

    def assert_nothing_mounted(self):
        left = [p for p in mount_points() if Path(p).is_relative_to(self.tmp)]
        self.assertEqual(left, [], "the recipe left mounts behind (its fusermount3 -u failed?)")

    # -- helpers for the checks ----------------------------------------------------------------

    def sample(self):
        return torch.load(SAMPLE)

    def assert_safetensors(self, path, expected, what):
        """The safetensors file at `path` holds exactly the tensors `expected` (name -> tensor),
        in this order, read by the strict reference reader."""
        _, tensors = read_safetensors(path, strict=True)
        self.assertEqual([t.name for t in tensors], list(expected), what)
        for t in tensors:
            self.assertEqual(t.read(path), expected[t.name].contiguous().numpy().tobytes(),
                             f"{what}: {t.name}")

    # -- the recipes ---------------------------------------------------------------------------

    def test_every_recipe_is_run(self):
        names = {b.name for b in readme_blocks()}
        tested = {n[len("test_"):] for n in dir(self) if n.startswith("test_")} - {
            "every_recipe_is_run", "parser_refuses_a_marker_without_block"}
        self.assertEqual(names, tested | set(INTEROP_RECIPES),
                         "README recipes vs the tests of this module and of the interop one")
        for name, module in INTEROP_RECIPES.items():
            self.assertIn(f"    def test_{name}(self):", module.read_text(), f"{module}: {name}")

    def test_parser_refuses_a_marker_without_block(self):
        with self.assertRaises(AssertionError):
            readme_blocks("<!-- readme-test: x -->\nno block here\n")
        blocks = readme_blocks("text\n<!-- readme-test: x -->\n\n```sh\nls\n```\n")
        self.assertEqual([(b.name, b.lang, b.code, b.line) for b in blocks],
                         [("x", "sh", "ls\n", 5)])

    def test_quickstart(self):
        out = self.run_recipe("quickstart")
        self.assertIn("model.0.weight", out.split())
        self.assertIn("epoch", out.split())
        model = torch.load(self.dir / "train.pth")["model"]
        copied = sorted(os.listdir(self.dir / "model-only"))
        self.assertEqual(copied, sorted(f"model.{k}" for k in model))
        for k, t in model.items():
            got = torch.load(self.dir / "model-only" / f"model.{k}" / "tensor.pt")
            self.assertTrue(torch.equal(got, t), k)
        self.assert_nothing_mounted()

    def test_see(self):
        self.run_recipe("see")
        self.assert_nothing_mounted()

    def test_copy(self):
        why = Sshd.missing()
        if why:
            self.skipTest(f"{why}: the copy recipe sends to gpu-box over ssh")
        sshd = Sshd(self.tmp / "sshd").start()
        self.addCleanup(sshd.stop)
        remote = self.tmp / "gpu-box"
        remote.mkdir()
        target = shlex.quote(sshd.target(f"{remote}/"))
        ssh = shlex.quote(" ".join(["ssh", *sshd.ssh_options("-p")]))
        scp_options = " ".join(shlex.quote(o) for o in sshd.ssh_options("-P"))
        # gpu-box:PATH is PATH below the test's remote directory, through the test's sshd.
        self.prelude = f"""
to_gpu_box() {{ case $1 in gpu-box:*) printf '%s' {target}"${{1#gpu-box:}}";; *) printf '%s' "$1";; esac; }}
rsync() {{ local a args=() remote=0; for a in "$@"; do case $a in gpu-box:*) remote=1;; esac; args+=("$(to_gpu_box "$a")"); done
  if [ $remote = 1 ]; then command rsync -e {ssh} "${{args[@]}}"; else command rsync "${{args[@]}}"; fi; }}
scp() {{ local a args=(); for a in "$@"; do args+=("$(to_gpu_box "$a")"); done; command scp {scp_options} "${{args[@]}}"; }}
"""
        out = self.run_recipe("copy")
        train = torch.load(self.dir / "train.pth")
        model = {f"model.{k}": t for k, t in train["model"].items()}
        # ls -d: the model's keys, and nothing else.
        listed = [Path(p).name for p in out.split() if p.startswith("mnt/")]
        self.assertEqual(sorted(listed), sorted(model))
        # rsync --stats: at most 1.05x the tensors' bytes plus their meta.json.
        m = re.search(r"Total bytes sent: ([\d,]+)", out)
        self.assertIsNotNone(m, f"no byte count printed: {out}")
        sent = int(m.group(1).replace(",", ""))
        tensors = sum(t.numel() * t.element_size() for t in model.values())
        meta = sum((self.dir / "copy" / k / "meta.json").stat().st_size for k in model)
        print(f"\nthe README's rsync: {sent} bytes sent for {tensors} bytes of tensors + {meta} of "
              f"meta.json: {sent / (tensors + meta):.3f}x", file=sys.stderr)
        self.assertLessEqual(sent, 1.05 * tensors + meta)
        for where in (self.dir / "copy", remote / "model"):
            self.assertEqual(sorted(os.listdir(where)), sorted(model), str(where))
            for k, t in model.items():
                self.assertEqual(sorted(os.listdir(where / k)), ["data", "meta.json"])
                self.assertEqual((where / k / "data").read_bytes(), t.numpy().tobytes(), k)
        # pack: one checkpoint of them again, nested as train.pth was (meta.json's key paths).
        packed = torch.load(self.dir / "model-only.pth")
        self.assertEqual(list(packed), ["model"])
        self.assertEqual(sorted(packed["model"]), sorted(train["model"]))
        for k, t in packed["model"].items():
            self.assertTrue(torch.equal(t, train["model"][k]), k)
        self.assert_nothing_mounted()

    def test_load(self):
        """Both ways load the checkpoint's model. tensor.pt's: what the first block's `model`
        holds, saved after it; then the test zeroes the parameters, so that what the second
        block's `model` holds is tensor.npy's doing."""
        after_pt = ("torch.save(model.state_dict(), 'by-tensor-pt.pt')\n"
                    "with torch.no_grad():\n"
                    "    for p in model.state_dict().values(): p.zero_()\n")
        after_npy = "torch.save(model.state_dict(), 'by-tensor-npy.pt')\n"
        self.run_recipe("load", checks={1: after_pt, 2: after_npy})
        expected = torch.load(self.dir / "train.pth")["model"]
        for what in ("by-tensor-pt.pt", "by-tensor-npy.pt"):
            got = torch.load(self.dir / what)
            self.assertEqual(list(got), list(expected), what)
            for k, t in expected.items():
                self.assertTrue(torch.equal(got[k], t), f"{what}: {k}")
        self.assert_nothing_mounted()

    def test_python(self):
        """The package's recipe: what it prints, and load_into's model is train.pth's."""
        after = "import torch\ntorch.save(model.state_dict(), 'by-load-into.pt')\n"
        out = self.run_recipe("python", checks={0: after})
        self.assertEqual(out.split(), ["3", "torch.Size([512,", "256])"])
        expected = torch.load(self.dir / "train.pth")["model"]
        got = torch.load(self.dir / "by-load-into.pt")
        self.assertEqual(list(got), list(expected))
        for k, t in expected.items():
            self.assertTrue(torch.equal(got[k], t), k)
        self.assert_nothing_mounted()

    def test_convert(self):
        self.run_recipe("convert")
        sample = self.sample()
        self.assert_safetensors(self.dir / "model.safetensors", sample, "cp of the export")
        index = json.loads((self.dir / "model.safetensors.index.json").read_text())
        shards = sorted(set(index["weight_map"].values()))
        self.assertEqual(list(index["weight_map"]), list(sample))
        self.assertGreater(len(shards), 1, "shard_size made one file")
        for shard in shards:
            keys = [k for k, f in index["weight_map"].items() if f == shard]
            self.assert_safetensors(self.dir / shard, {k: sample[k] for k in keys}, shard)
        half = {k: t.half() if t.is_floating_point() else t for k, t in sample.items()}
        self.assert_safetensors(self.dir / "model-fp16.safetensors", half, "-o dtype=float16")
        self.assert_safetensors(self.dir / "packed.safetensors", sample, "ckptfs pack")
        encoder = torch.load(self.dir / "encoder-fp16.pth")
        self.assertEqual(list(encoder), [k for k in sample if k.startswith("encoder.")])
        for k, t in encoder.items():
            self.assertEqual(t.dtype, torch.float16, k)
            self.assertTrue(torch.equal(t, sample[k].half()), k)
        self.assert_nothing_mounted()

    def test_remote(self):
        served = self.tmp / "served"
        (served / "models").mkdir(parents=True)
        shutil.copyfile(SAMPLE, served / "models" / "model.pth")
        nginx = Nginx(served, self.tmp / "nginx", tls=False).start()
        self.addCleanup(nginx.stop)
        s3 = S3Server(self.tmp / "s3", "bucket").start()
        self.addCleanup(s3.stop)
        s3.put("models/model.pth", SAMPLE)
        self.env.update(AWS_ACCESS_KEY_ID=S3Server.ACCESS_KEY,
                        AWS_SECRET_ACCESS_KEY=S3Server.SECRET_KEY, AWS_REGION="us-east-1",
                        AWS_ENDPOINT_URL=s3.endpoint)
        self.env.pop("AWS_PROFILE", None)
        self.env.pop("AWS_SESSION_TOKEN", None)
        blocks = recipe("remote")
        self.assertTrue(any("https://host/" in b.code for b in blocks), "no https://host/ URL")
        for b in blocks:
            b.code = b.code.replace("https://host/", nginx.url(""))
        mark = nginx.mark()
        out = "".join(self.run_block(b) for b in blocks)
        self.assertTrue(nginx.since(mark), "nginx served nothing: the URL was not substituted")
        sample = self.sample()
        self.assertEqual(sorted(os.listdir(self.dir / "encoder")),
                         ["encoder.bias", "encoder.weight"])
        for k in ("encoder.weight", "encoder.bias"):
            self.assertEqual((self.dir / "encoder" / k / "data").read_bytes(),
                             sample[k].numpy().tobytes(), k)
        for k in sample:
            self.assertIn(k, out.split(), "inspect of the s3:// URL")
        self.assert_nothing_mounted()

    def test_rfc(self):
        check = ("expected = torch.load('model.pth')\n"
                 "assert list(state_dict) == list(expected), list(state_dict)\n"
                 "assert all(torch.equal(state_dict[k], expected[k]) for k in expected)\n"
                 "print('rfc: state_dict equal')\n")
        out = self.run_recipe("rfc", checks={1: check})
        self.assertIn("rfc: state_dict equal", out)
        self.assert_nothing_mounted()


if __name__ == "__main__":
    unittest.main()
