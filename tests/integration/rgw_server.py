# SPDX-License-Identifier: MIT
"""Ceph's RADOS Gateway (radosgw, Ceph 20 from the interop root's Debian sid: scripts/interop-root)
on 127.0.0.1, for the remote tests and the bench: a real S3 server, standalone, with Ceph's
dbstore config store and backend and

  posix=True   the POSIX filter: objects kept as files under its directory, the layout Ceph
               documents for a standalone gateway; it serves objects and ranges right;
  posix=False  plain dbstore, which answers a ranged GET that does not start at 0 with other
               bytes of the object (from byte 1024 on), and every range with more bytes than its
               Content-Length (issue 32): the server a client must never take bytes from.

It runs in the root (scripts/interop-run: chroot, a mount namespace of its own, the network of
this machine), in a directory of the root's /tmp that is removed when it stops. One user, whose
keys are ACCESS_KEY and SECRET_KEY, is made with radosgw-admin before the gateway starts; one
bucket (names of 3 characters or more). Objects are put whole, one PUT each: its multipart
uploads lose keys that hold a dot. `rgw_frontends = beast endpoint=127.0.0.1:PORT` binds
loopback only (`port=` would bind every address). Stopped by its PID: SIGTERM, and SIGKILL after
a few seconds (it sets itself a two-minute alarm on SIGTERM and may wait for it).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from fixtures import INTEROP_ROOT, REPO
from remote_servers import S3Api, die_with_parent, free_port, wait_for_port

RUNNER = REPO / "scripts" / "interop-run"
START_TIMEOUT = 60.0  # the gateway's start on a loaded machine: its database, then its port


class Rgw(S3Api):
    ACCESS_KEY = "CKPTFSRGWTESTKEY"
    SECRET_KEY = "ckptfs-rgw-test-secret"
    USER = "ckptfs"

    def __init__(self, bucket, posix=True):
        if len(bucket) < 3:
            raise ValueError("RGW refuses bucket names of fewer than 3 characters")
        self.bucket = bucket
        self.posix = posix
        self.NAME = "RGW (dbstore, POSIX filter)" if posix else "RGW (plain dbstore)"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.dir = None      # its directory, here
        self.inside = None   # the same, as the root sees it
        self.log = None

    @staticmethod
    def missing():
        """Why no gateway can run here, or None."""
        if not (INTEROP_ROOT / "usr" / "bin" / "radosgw").exists():
            return (f"the interop root {INTEROP_ROOT} has no radosgw (scripts/interop-root "
                    "installs it)")
        if os.geteuid() != 0:
            return "radosgw runs in the interop root (chroot): it needs root"
        return None

    def config(self):
        d = self.inside
        posix = (f"  rgw_filter = posix\n"
                 f"  rgw_posix_base_path = {d}/objects\n"
                 f"  rgw_posix_database_root = {d}/posix-db\n") if self.posix else ""
        return (f"[client]\n"
                f"  rgw_backend_store = dbstore\n"
                f"  rgw_config_store = dbstore\n"
                f"{posix}"
                f"  dbstore_db_dir = {d}/db\n"
                f"  dbstore_config_uri = file:{d}/db/config.db\n"
                f"  rgw_frontends = beast endpoint=127.0.0.1:{self.port}\n"
                f"  log_file = {d}/radosgw.log\n"
                f"  run_dir = {d}/run\n"
                f"  admin_socket = {d}/run/radosgw.asok\n")

    def in_root(self, *args):
        return [str(RUNNER), *map(str, args)]

    def start(self):
        why = self.missing()
        if why:
            raise AssertionError(why)
        self.dir = Path(tempfile.mkdtemp(prefix="ckptfs-rgw-", dir=INTEROP_ROOT / "tmp"))
        self.inside = "/" + str(self.dir.relative_to(INTEROP_ROOT))
        try:
            for sub in ("db", "objects", "posix-db", "run"):
                (self.dir / sub).mkdir()
            (self.dir / "ceph.conf").write_text(self.config())
            conf = f"{self.inside}/ceph.conf"
            r = subprocess.run(self.in_root("radosgw-admin", "-c", conf, "--no-mon-config",
                                            "user", "create", f"--uid={self.USER}",
                                            "--display-name=ckptfs tests",
                                            f"--access-key={self.ACCESS_KEY}",
                                            f"--secret-key={self.SECRET_KEY}"),
                               capture_output=True, timeout=START_TIMEOUT,
                               stdin=subprocess.DEVNULL)
            if r.returncode != 0:
                raise AssertionError(f"radosgw-admin user create: exit {r.returncode}: "
                                     f"{r.stderr.decode(errors='replace')[-500:]}")
            self.log = open(self.dir / "radosgw.out", "wb")
            # interop-run execs unshare, chroot and env in turn: the process is radosgw itself.
            self.proc = subprocess.Popen(self.in_root("radosgw", "-c", conf, "--no-mon-config",
                                                      "-d"),
                                         stdin=subprocess.DEVNULL, stdout=self.log,
                                         stderr=self.log, start_new_session=True,
                                         preexec_fn=die_with_parent)
            wait_for_port(self.port, self.proc, timeout=START_TIMEOUT, what="radosgw")
            self.create_bucket()
        except BaseException:
            self.stop()
            raise
        return self

    def create_bucket(self):
        """The bucket, once the gateway answers (it listens a moment before it serves)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            r = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", "PUT",
                                "--aws-sigv4", "aws:amz:us-east-1:s3",
                                "--user", f"{self.ACCESS_KEY}:{self.SECRET_KEY}",
                                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                                f"{self.endpoint}/{self.bucket}"],
                               capture_output=True, timeout=60)
            body, _, status = r.stdout.rpartition(b"\n")
            if status == b"200":
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"radosgw: creating bucket {self.bucket}: HTTP "
                                     f"{status.decode() or '(none)'} {body[:200]!r}")
            time.sleep(0.2)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.proc = None
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def object_file(self, key):
        """Where the POSIX filter keeps object `key` (a test replaces it behind the gateway's
        back)."""
        return self.dir / "objects" / self.bucket / key
