# SPDX-License-Identifier: MIT
"""Bench: the state every section shares (the options, the private copy of the binary, the mount
points, the generated checkpoints, the warm worker, the groups of the table), its setup, and the
run of the sections asked for (benchlib/sections/: each one's run(bench))."""

import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

import ckptfs_mounts  # scripts/: mountinfo, waiting, unmounting
from benchlib.common import (BENCH, FULL, QUICK, ROOT, TORCH_PY, GiB, BenchError, cpu_idle,
                             describe_storage, human_bytes, loadavg, log, now,
                             read_status_meminfo)
from benchlib.processes import Worker
from benchlib.readers import read_files
from benchlib.sections import SECTIONS, in_order
from benchlib.table import render


class Bench:
    def __init__(self, args, procs):
        self.args = args
        self.procs = procs
        self.cfg = QUICK if args.quick else FULL
        self.runs = args.runs if args.runs else (2 if args.quick else 5)
        self.work = Path(args.workdir).resolve()
        self.mnt = self.work / "mnt" / "ckptfs"
        self.zmnt = self.work / "mnt" / "fuse-zip"
        self.groups = []
        self.worker = None
        self.shm_dirs = []  # tmpfs copies (section 16), removed at the end
        self.fusezip = shutil.which("fuse-zip")
        self.only = set(args.only.split(",")) if args.only else None
        self.ckptfs = None      # the private copy of the binary (setup)
        # The generated checkpoints the sections asked for need (setup; registry: needs).
        self.seq_file = None    # "seq": the 1.6 GB state_dict, or --checkpoint
        self.seq_entries = None  # its tensors (inspect), every one's directory in the mount
        self.many_file = None   # "many": 10,000 tensors
        self.big_file = None    # "big": 4.7 GiB
        # Rows that sections 1 (sequential) and 3 (many) fill and section 5 (rss) shows.
        self.rss_seq_ckptfs = self.rss_seq_fz = None
        self.rss_many_torch = self.rss_many_ckptfs = None
        self.rss_mount_ckptfs = self.rss_mount_fz = None

    def wanted(self, *sections):
        """Whether --only asks for any of these sections (all, without --only)."""
        return self.only is None or bool(self.only & set(sections))

    def setup(self):
        """The workdir and its mount points, a private copy of the binary, the checkpoints the
        sections asked for need, the warm worker."""
        self.work.mkdir(parents=True, exist_ok=True)
        for m in (self.mnt, self.zmnt):
            m.mkdir(parents=True, exist_ok=True)
            if ckptfs_mounts.is_mounted(m):
                log(f"{m}: left mounted by an earlier run; unmounting")
                self.procs.unmount(m)
        # A private copy of the binary: someone may rebuild build/ckptfs during the run.
        src = Path(self.args.ckptfs or os.environ.get("CKPTFS") or ROOT / "build" / "ckptfs")
        if not src.is_file():
            raise BenchError(f"{src}: no ckptfs binary (run scripts/build.sh)")
        self.ckptfs_src = src
        self.ckptfs_mtime = time.strftime("%Y-%m-%d %H:%M", time.localtime(src.stat().st_mtime))
        tmp = self.work / ".ckptfs.tmp"
        shutil.copy2(src, tmp)
        os.replace(tmp, self.work / "ckptfs")
        self.ckptfs = str(self.work / "ckptfs")
        if self.args.mount_option:
            # Every mount of every section with these options (-o io_uring: the whole bench over
            # io_uring): a wrapper named ckptfs (daemon_pids() finds the daemon by that name)
            # that adds them to mounts, not to inspect or pack.
            os.replace(self.work / "ckptfs", self.work / "ckptfs.bin")
            opts = ",".join(self.args.mount_option)
            (self.work / "ckptfs").write_text(
                "#!/bin/bash\n"
                'case "$1" in inspect|pack|--version|-V|--help|-h) exec -a "$0" "$0.bin" "$@";; esac\n'
                f'exec -a "$0" "$0.bin" "$@" -o {opts}\n')
            os.chmod(self.work / "ckptfs", 0o755)
        # Section 16's -o io_uring: a ckptfs built with libfuse 3.18 (its RUNPATH finds it).
        uring = Path(self.args.ckptfs_uring or ROOT / "build-uring" / "ckptfs")
        self.ckptfs_uring = None
        if uring.is_file():
            shutil.copy2(uring, tmp)
            os.replace(tmp, self.work / "ckptfs-uring")
            self.ckptfs_uring = str(self.work / "ckptfs-uring")
        self.ckptfs_version = subprocess.run([self.ckptfs, "--version"], capture_output=True,
                                             text=True, check=True).stdout.strip()

        # Only the checkpoints of the sections asked for.
        needs = set().union(*(s.needs for s in SECTIONS if self.wanted(s.name)))
        n, rows, cols = self.cfg["seq"]
        self.needs_seq = "seq" in needs
        if not self.needs_seq:
            pass
        elif self.args.checkpoint:
            self.seq_file = Path(self.args.checkpoint).resolve()
            if not self.seq_file.is_file():
                raise BenchError(f"{self.seq_file}: no such file")
        else:
            self.seq_file = self.generate("seq", f"seq-{n}x{rows}x{cols}.pth", n, rows, cols)
        if "many" in needs:
            self.many_file = self.generate("many", f"many-{self.cfg['many']}.pth",
                                           self.cfg["many"])
        n, rows, cols = self.cfg["big"]
        if "big" in needs:
            self.big_file = self.generate("big", f"big-{n}x{rows}x{cols}.pth", n, rows, cols)

        log("starting the warm Python worker (import torch, numpy)")
        self.worker = Worker(self.procs)
        self.versions = self.worker.call("imports")

    def generate(self, kind, name, *args):
        path = self.work / name
        if path.is_file():
            return path
        log(f"generating {path} with torch")
        t0 = now()
        self.procs.run([TORCH_PY, str(BENCH), "--worker", "gen", kind, str(path),
                        *map(str, args)], timeout=3600)
        log(f"  {human_bytes(path.stat().st_size)} in {now() - t0:.1f} s")
        return path

    def inspect_entries(self, path):
        """The tensors `ckptfs inspect --json` finds in `path`, without mounting it."""
        out = subprocess.run([self.ckptfs, "inspect", "--json", str(path)], capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise BenchError(f"ckptfs inspect exited {out.returncode}: {out.stderr.strip()}")
        return [e for e in json.loads(out.stdout)["entries"] if e["kind"] == "tensor"]

    def inspect(self, path):
        entries = self.inspect_entries(path)
        # The directory names come from the mount's own index.json.
        p = self.procs.mount_foreground([self.ckptfs, "-f", str(path), str(self.mnt)], self.mnt)
        try:
            index = json.load(open(ckptfs_mounts.views_dir(self.mnt) / "index.json"))
        finally:
            self.procs.unmount(self.mnt, p)
        dirs = {e["key"]: e["path"] for e in index["entries"]}
        for e in entries:
            e["path"] = dirs[e["key"]]
        return entries

    def warm(self, path):
        """Reads `path` whole, so that it is in the page cache (reads through a ckptfs mount drop
        the pages they took from it)."""
        read_files([path])

    def progress(self, section, run):
        log(f"{section}: run {run + 1}/{self.runs}")

    def run(self):
        """setup(), then every section asked for, in order; returns the table."""
        started = time.time()
        load_start = loadavg()
        known = {s.name for s in SECTIONS}
        if self.only and not self.only <= known:
            raise BenchError(f"--only: unknown section(s) {', '.join(sorted(self.only - known))}")
        self.setup()
        if self.needs_seq:
            self.seq_entries = self.inspect(self.seq_file)
        for section in in_order():
            if self.wanted(section.name):
                section.run(self)
        return render(self.header(load_start, started), self.groups, self.args.markdown)

    def header(self, load_start, started):
        cpu = "?"
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        mem = read_status_meminfo()
        storage = describe_storage(self.work)
        fz = "not installed"
        if self.fusezip:
            r = subprocess.run(["fuse-zip", "-V"], capture_output=True, text=True)
            text = (r.stdout + r.stderr).splitlines()
            ver = next((l.split(":", 1)[1].strip() for l in text if l.startswith("fuse-zip")), "?")
            lib = next((l.split(":", 1)[1].strip() for l in text
                        if l.startswith("FUSE library")), "?")
            fz = f"{ver} (libfuse {lib})"
        fm = subprocess.run(["fusermount3", "--version"], capture_output=True, text=True)
        fm = (fm.stdout + fm.stderr).strip().split(":")[-1].strip()
        v = self.versions
        mode = "quick" if self.args.quick else "full"
        return [
            f"ckptfs benchmark, {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, "
            f"{mode} mode, {self.runs} runs per figure (medians; min..max over the runs)",
            f"machine: {cpu}, {os.cpu_count()} cores, {mem / GiB:.1f} GiB RAM, "
            f"Linux {platform.release()}; workdir {self.work}: {storage}",
            f"versions: {self.ckptfs_version} ({self.ckptfs_src}, built {self.ckptfs_mtime}"
            f"{', every mount with -o ' + ','.join(self.args.mount_option) if self.args.mount_option else ''}), "
            f"fuse-zip {fz}, fusermount3 {fm}, torch {v['torch']}, numpy {v['numpy']}, "
            f"Python {v['python']}",
            f"load average (1 min) at start {load_start}, at end {loadavg()}: other work on the "
            f"machine shows up as noise",
            f"idle CPUs: {cpu_idle()}",
            "GB/s = 10^9 bytes/s. vs ref = median / median of the group's (ref) row: for GB/s "
            "and IOPS higher is better, for ms and MiB lower is better.",
        ]
