# SPDX-License-Identifier: MIT
"""Real servers on loopback for the remote-source tests and the bench, started and stopped by
them: nginx (HTTP and HTTPS with a throw-away CA, its access log read back), an S3 API server
that checks SigV4 signatures (the s3rver fork installed by scripts/install-deps.sh), a fault
proxy that resets, truncates, stalls, trickles, drops validators or answers 200 to ranges on
demand, or breaks an answer's framing (bytes past its end, a Content-Range other than asked,
bytes of another offset), an object server that picks its answer by the whole URL, query
included (a download endpoint), with or without validators, and sshd (for the recipes that
copy out of a mount with scp and rsync over ssh). Ceph's RADOS Gateway, a real S3 server from
the interop root, is rgw_server.py's.

Every server listens on 127.0.0.1 only, is started with a deadline and stopped in the caller's
cleanup; nothing is left running.
"""

import ctypes
import http.client
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
S3RVER_DIR = REPO / "tests" / "integration" / "s3rver"
START_TIMEOUT = 20.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, timeout=START_TIMEOUT, what="server"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what} exited with status {proc.returncode} while starting")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} not listening on 127.0.0.1:{port} after {timeout:g} s")


def die_with_parent():
    """In a child before exec: SIGTERM when the process that started it dies, so that a test
    killed by its time limit leaves no server behind."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop_process(proc):
    """SIGTERM (nginx: fast shutdown, connections closed), then SIGKILL to its process group
    after 10 s."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def run(args, **kwargs):
    return subprocess.run([str(a) for a in args], capture_output=True, check=True, timeout=60,
                          **kwargs)


def make_tls_files(directory):
    """A throw-away CA and a certificate for 127.0.0.1 signed by it: (ca.pem, cert, key)."""
    d = Path(directory)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run(["openssl", "req", "-x509", *ec, "-keyout", d / "ca.key", "-out", d / "ca.pem",
         "-days", "2", "-subj", "/CN=ckptfs test CA"])
    run(["openssl", "req", *ec, "-keyout", d / "server.key", "-out", d / "server.csr",
         "-subj", "/CN=127.0.0.1"])
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run(["openssl", "x509", "-req", "-in", d / "server.csr", "-CA", d / "ca.pem",
         "-CAkey", d / "ca.key", "-CAcreateserial", "-out", d / "server.pem", "-days", "2",
         "-extfile", d / "server.ext"])
    return d / "ca.pem", d / "server.pem", d / "server.key"


LOG_LINE = re.compile(r'^(\S+) (\S+) (\d+) (\d+) "([^"]*)" (\S+)$')


class Nginx:
    """nginx serving `root` on 127.0.0.1: plain HTTP on .port, HTTPS (HTTP/2 offered) on
    .tls_port with a certificate of a throw-away CA (.ca). /private/ needs basic auth
    (user "reader", password "s3cret-pass"), /forbidden/ is denied. Its access log gives
    every request: method, path, status, body bytes sent, Range header."""

    USER, PASSWORD = "reader", "s3cret-pass"

    def __init__(self, root, workdir, tls=True):
        self.root = Path(root)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.tls_port = free_port() if tls else None
        self.proc = None
        self.log = self.dir / "access.log"
        self.ca = None
        tls_server = ""
        if tls:
            self.ca, cert, key = make_tls_files(self.dir)
            tls_server = f"""
  server {{
    listen 127.0.0.1:{self.tls_port} ssl http2;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {self.root};
  }}"""
        hashed = run(["openssl", "passwd", "-5", self.PASSWORD]).stdout.decode().strip()
        (self.dir / "htpasswd").write_text(f"{self.USER}:{hashed}\n")
        for sub in ("client", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.dir / sub).mkdir(exist_ok=True)
        self.config = self.dir / "nginx.conf"
        self.config.write_text(f"""
user root root;
daemon off;
worker_processes 2;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
events {{ worker_connections 512; }}
http {{
  log_format ckptfs '$request_method $uri $status $body_bytes_sent "$http_range" $server_protocol';
  access_log {self.log} ckptfs;
  client_body_temp_path {self.dir}/client;
  proxy_temp_path {self.dir}/proxy;
  fastcgi_temp_path {self.dir}/fastcgi;
  uwsgi_temp_path {self.dir}/uwsgi;
  scgi_temp_path {self.dir}/scgi;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 100000;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{self.port};
    root {self.root};
    location /private/ {{
      auth_basic "ckptfs test";
      auth_basic_user_file {self.dir}/htpasswd;
    }}
    location /forbidden/ {{ deny all; }}
  }}{tls_server}
}}
""")

    def start(self):
        if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
            raise AssertionError("nginx is not installed (run scripts/install-deps.sh)")
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        self.proc = subprocess.Popen([nginx, "-c", str(self.config), "-p", str(self.dir)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=die_with_parent)
        wait_for_port(self.port, self.proc, what="nginx")
        if self.tls_port:
            wait_for_port(self.tls_port, self.proc, what="nginx (TLS)")
        return self

    def stop(self):
        stop_process(self.proc)
        self.proc = None

    def url(self, path, tls=False, userinfo=""):
        at = f"{userinfo}@" if userinfo else ""
        if tls:
            return f"https://{at}127.0.0.1:{self.tls_port}/{path}"
        return f"http://{at}127.0.0.1:{self.port}/{path}"

    def requests(self):
        """Every logged request: dicts of method, path, status, bytes, range (nginx writes a
        line once the response is sent)."""
        if not self.log.exists():
            return []
        out = []
        for line in self.log.read_text().splitlines():
            m = LOG_LINE.match(line)
            if m:
                out.append({"method": m[1], "path": m[2], "status": int(m[3]),
                            "bytes": int(m[4]), "range": m[5], "protocol": m[6]})
        return out

    def mark(self):
        """The number of requests logged so far (to count the ones after it)."""
        return len(self.requests())

    def since(self, mark, settle=0.2):
        time.sleep(settle)  # lines are written once each response is complete
        return self.requests()[mark:]


class Sshd:
    """OpenSSH's sshd on 127.0.0.1 (.port), for the recipes that copy out of a mount with scp or
    rsync over ssh: its own host key, one client key (.key) authorized for the user running the
    test, key login only; never the machine's sshd or its configuration. `ssh_options` are what
    ssh, scp and rsync -e take to reach it without asking anything."""

    SSHD = "/usr/sbin/sshd"  # sshd re-executes itself, so it must be started by its full path

    def __init__(self, workdir):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.key = self.dir / "client_key"

    @classmethod
    def missing(cls):
        """Why no sshd can run here, or None."""
        if not Path(cls.SSHD).exists():
            return "sshd is not installed (package openssh-server)"
        for tool in ("ssh", "scp", "ssh-keygen"):
            if shutil.which(tool) is None:
                return f"{tool} is not installed (package openssh-client)"
        return None

    def start(self):
        why = self.missing()
        if why:
            raise AssertionError(why)
        host_key = self.dir / "host_key"
        for key in (host_key, self.key):
            run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key])
        authorized = self.dir / "authorized_keys"
        authorized.write_text(Path(f"{self.key}.pub").read_text())
        config = self.dir / "sshd_config"
        config.write_text(f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {host_key}
AuthorizedKeysFile {authorized}
PidFile {self.dir}/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
LogLevel ERROR
""")
        # Its privilege separation directory, which the package leaves to the service to make.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        with open(self.dir / "sshd.log", "wb") as log:
            self.proc = subprocess.Popen([self.SSHD, "-D", "-e", "-f", str(config)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=log, start_new_session=True,
                                         preexec_fn=die_with_parent)
        wait_for_port(self.port, self.proc, what="sshd")
        return self

    def stop(self):
        stop_process(self.proc)
        self.proc = None

    def ssh_options(self, port_flag="-p"):
        """Options of ssh (port_flag -p) or scp (-P) for this server."""
        return [port_flag, str(self.port), "-i", str(self.key), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "IdentitiesOnly=yes", "-o", "Compression=no"]

    def target(self, path):
        """USER@127.0.0.1:PATH for the user running the test."""
        import pwd
        return f"{pwd.getpwuid(os.getuid()).pw_name}@127.0.0.1:{path}"


class S3Api:
    """What the tests ask of an S3 server on 127.0.0.1:.port, with curl's SigV4 and the standard
    library's: objects put, requests with any secret, presigned URLs. A server class sets .port,
    .bucket, .endpoint, ACCESS_KEY and SECRET_KEY."""

    ACCESS_KEY = SECRET_KEY = None

    def curl(self, method, key, secret=None, upload=None, extra=()):
        """curl's own SigV4 (not ckptfs's) against the server: (status, body)."""
        args = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", method,
                "--aws-sigv4", "aws:amz:us-east-1:s3",
                "--user", f"{self.ACCESS_KEY}:{secret or self.SECRET_KEY}",
                "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *extra]
        if upload is not None:
            args += ["-T", str(upload)]
        args.append(f"{self.endpoint}/{self.bucket}/{key}")
        r = subprocess.run(args, capture_output=True, timeout=60)
        body, _, status = r.stdout.rpartition(b"\n")
        return int(status or 0), body

    def presign(self, key, expires=600):
        """A presigned GET URL of `key` (SigV4 in the query string, as `aws s3 presign` makes
        them), signed here with the standard library."""
        import datetime
        import hashlib
        import hmac
        from urllib.parse import quote
        t = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = t.strftime("%Y%m%dT%H%M%SZ"), t.strftime("%Y%m%d")
        scope = f"{day}/us-east-1/s3/aws4_request"
        query = {"X-Amz-Algorithm": "AWS4-HMAC-SHA256",
                 "X-Amz-Credential": f"{self.ACCESS_KEY}/{scope}", "X-Amz-Date": amz_date,
                 "X-Amz-Expires": str(expires), "X-Amz-SignedHeaders": "host"}
        canonical_query = "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
                                   for k, v in sorted(query.items()))
        path = f"/{self.bucket}/{quote(key, safe='/-_.~')}"
        host = f"127.0.0.1:{self.port}"
        request = "\n".join(["GET", path, canonical_query, f"host:{host}\n", "host",
                             "UNSIGNED-PAYLOAD"])
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(request.encode()).hexdigest()])
        k = ("AWS4" + self.SECRET_KEY).encode()
        for part in (day, "us-east-1", "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        return f"http://{host}{path}?{canonical_query}&X-Amz-Signature={signature}"

    def put(self, key, path):
        """`path` as the object `key`, in one PUT."""
        status, body = self.curl("PUT", key, upload=path)
        if status != 200:
            raise AssertionError(f"PUT {key}: HTTP {status} {body[:200]!r}")

    def delete(self, key):
        status, body = self.curl("DELETE", key)
        if status not in (200, 204):
            raise AssertionError(f"DELETE {key}: HTTP {status} {body[:200]!r}")


class S3Server(S3Api):
    """The s3rver fork (installed under tests/integration/s3rver by install-deps.sh) on
    127.0.0.1, with one bucket; it checks SigV4 signatures (a wrong secret gets 403
    SignatureDoesNotMatch). Its only account: access key and secret S3RVER."""

    ACCESS_KEY = SECRET_KEY = "S3RVER"
    NAME = "s3rver"

    def __init__(self, workdir, bucket):
        self.dir = Path(workdir)
        self.bucket = bucket
        self.port = free_port()
        self.proc = None
        self.endpoint = f"http://127.0.0.1:{self.port}"

    @staticmethod
    def installed():
        return (S3RVER_DIR / "node_modules" / "@20minutes" / "s3rver" / "lib" / "cli.js").is_file()

    def start(self):
        if not self.installed():
            raise AssertionError(f"the S3 test server is not installed in {S3RVER_DIR} "
                                 "(run scripts/install-deps.sh)")
        node = shutil.which("node") or shutil.which("nodejs")
        if node is None:
            raise AssertionError("node is not installed (run scripts/install-deps.sh)")
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.log = open(self.dir / "s3rver.log", "wb")
        self.proc = subprocess.Popen(
            [node, "-e", "require('@20minutes/s3rver/lib/cli.js').parseAsync(process.argv)",
             "s3rver", "-d", str(data), "-a", "127.0.0.1", "-p", str(self.port), "--silent",
             "--configure-bucket", self.bucket],
            cwd=S3RVER_DIR, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            start_new_session=True, preexec_fn=die_with_parent)
        wait_for_port(self.port, self.proc, what="s3rver")
        return self

    def stop(self):
        stop_process(self.proc)
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of an upstream server (nginx), in this process.
    .mode says what it does to the next responses (set it at any time):
      "pass"      forward as is
      "reset"     close the connection (RST) without an answer
      "reset_mid" send the status, headers and half the body, then reset
      "truncate"  send the headers with the full Content-Length and half the body, then close
      "ignore_range" answer 200 with the whole object to a Range request
      "to_the_end" answer a Range request with the bytes from its first to the object's end (a
                  206 larger than asked, as s3rver answers "bytes=0-0")
      "503"       answer 503; "429" answer 429 with Retry-After: 1
      "stall"     accept and say nothing until the connection is closed by the client
      "trickle"   send the status and headers, then the body at .trickle_rate bytes a second
                  (default 2) until the client goes away
    Protocol errors, each on a connection kept open for the next request (HTTP/1.1 keep-alive):
      "surplus"   the answer, then at once 512 bytes more than its Content-Length (in the same
                  write: they reach the client with the answer's last bytes)
      "surplus_late" the answer, then 512 bytes more 50 ms later (after the client took the
                  answer: they wait on the connection, where the next answer should start)
      "wrong_range" a 206 whose Content-Range names the bytes one past those asked (the body is
                  the bytes asked)
      "wrong_offset" a range not starting at 0 answered, right framing and Content-Range, with
                  the object's bytes from byte 1024 on, as the plain dbstore RGW does (without
                  its surplus bytes): caught only by comparing bytes
    .faults_left: how many responses get the fault before it goes back to "pass" (None: all).
    .drop_headers: names (lower-case) of header fields left out of every answer forwarded
    ({"etag"}, {"etag", "last-modified"}: a backend that sends no validator).
    .served counts the requests seen; .sent the body bytes sent (surplus included), for the
    bytes a test made the server send."""

    SURPLUS = b"\x00surplus" * 64  # 512 bytes past an answer's end

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.mode = "pass"
        self.faults_left = None
        self.drop_headers = set()
        self.trickle_rate = 2
        self.served = 0
        self.sent = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                self.connection.settimeout(60)
                try:
                    while proxy.serve_one(self):
                        pass
                except OSError:
                    pass  # the client went away (ckptfs gave up on this connection)

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.stopped = threading.Event()

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopped.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}"

    def take_mode(self):
        with self.lock:
            self.served += 1
            mode = self.mode
            if mode != "pass" and self.faults_left is not None:
                self.faults_left -= 1
                if self.faults_left <= 0:
                    self.mode = "pass"
            return mode

    def serve_one(self, handler):
        """Reads one request and answers it; False when the connection is done."""
        rfile, conn = handler.rfile, handler.connection
        try:
            line = rfile.readline(65537)
        except OSError:
            return False
        if not line:
            return False
        headers = {}
        while True:
            h = rfile.readline(65537)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        method, path, _ = line.decode("latin-1").split(" ", 2)
        mode = self.take_mode()
        if mode == "reset":
            self.reset(conn)
            return False
        if mode == "stall":
            while not self.stopped.is_set():
                try:
                    if conn.recv(1, socket.MSG_PEEK) == b"":
                        break
                except socket.timeout:
                    continue
                except OSError:
                    break
                time.sleep(0.05)
            return False
        if mode in ("503", "429"):
            extra = "Retry-After: 1\r\n" if mode == "429" else ""
            body = b"busy"
            conn.sendall(f"HTTP/1.1 {mode} Busy\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
                         .encode() + body)
            return True
        forward = {k: v for k, v in headers.items()
                   if k not in ("host", "connection", "keep-alive")}
        if mode == "ignore_range":
            forward.pop("range", None)
            forward.pop("if-match", None)
        wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", forward.get("range", ""))
        if mode == "to_the_end" and wanted:
            forward["range"] = f"bytes={wanted[1]}-"
        if mode == "wrong_offset" and wanted and int(wanted[1]) > 0:
            length = int(wanted[2]) - int(wanted[1]) + 1
            forward["range"] = f"bytes=1024-{1024 + length - 1}"
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            upstream.request(method, path, headers=forward)
            response = upstream.getresponse()
            body = response.read()
        except OSError:
            self.reset(conn)
            return False
        finally:
            upstream.close()
        head = f"HTTP/1.1 {response.status} {response.reason}\r\n"
        for k, v in response.getheaders():
            if k.lower() not in ("connection", "keep-alive", "transfer-encoding",
                                 *self.drop_headers):
                if k.lower() == "content-range" and mode in ("wrong_range", "wrong_offset"):
                    given = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", v)
                    if given and mode == "wrong_range":
                        v = f"bytes {int(given[1]) + 1}-{int(given[2]) + 1}/{given[3]}"
                    elif given and wanted:  # the range asked, over the bytes from 1024
                        v = f"bytes {wanted[1]}-{wanted[2]}/{given[3]}"
                head += f"{k}: {v}\r\n"
        head += "\r\n"
        with self.lock:
            self.sent += len(body) + (len(self.SURPLUS) if mode.startswith("surplus") else 0)
        if mode == "trickle":
            conn.sendall(head.encode("latin-1"))
            for at in range(0, len(body), self.trickle_rate):
                if self.stopped.is_set():
                    break
                conn.sendall(body[at:at + self.trickle_rate])
                time.sleep(1)
            return False
        if mode in ("truncate", "reset_mid"):
            conn.sendall(head.encode("latin-1") + body[:len(body) // 2])
            if mode == "reset_mid":
                self.reset(conn)
            else:
                conn.shutdown(socket.SHUT_RDWR)
            return False
        if mode == "surplus":
            conn.sendall(head.encode("latin-1") + body + self.SURPLUS)
            return True
        conn.sendall(head.encode("latin-1") + body)
        if mode == "surplus_late":
            time.sleep(0.05)
            conn.sendall(self.SURPLUS)
        return True

    @staticmethod
    def reset(conn):
        # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()


class CountingRelay:
    """A TCP relay on 127.0.0.1 in front of a server on 127.0.0.1:`upstream_port`: every byte
    forwarded as it is, both ways (splice(2) through a pipe, in this process: no copy, the
    requests' Host and signatures untouched), the bytes the server sent counted in .received
    (its answers' headers and bodies, over every connection)."""

    CHUNK = 1 << 20

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.received = 0
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.connections = []
        self.thread = threading.Thread(target=self.accept, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopped.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(timeout=10)
        with self.lock:
            connections, self.connections = self.connections, []
        for c in connections:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}"

    def open_connections(self):
        """How many relayed connections have not ended yet."""
        with self.lock:
            return len(self.connections) // 2

    def accept(self):
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.connections += [client, server]
            ended = [0]  # pumps of this pair that ended: the second closes both sockets
            for source, sink, count in ((client, server, False), (server, client, True)):
                threading.Thread(target=self.pump, args=(source, sink, count, ended),
                                 daemon=True).start()

    def pump(self, source, sink, count, ended):
        """Moves bytes from `source` to `sink` until `source` ends, then ends `sink`'s side."""
        r, w = os.pipe()
        try:
            import fcntl
            fcntl.fcntl(w, 1031, self.CHUNK)  # F_SETPIPE_SZ: whole chunks in one splice
        except OSError:
            pass
        try:
            while True:
                n = os.splice(source.fileno(), w, self.CHUNK)
                if n == 0:
                    break
                if count:
                    with self.lock:
                        self.received += n
                left = n
                while left:
                    left -= os.splice(r, sink.fileno(), left)
        except OSError:
            pass
        finally:
            os.close(r)
            os.close(w)
            try:
                sink.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            with self.lock:
                ended[0] += 1
                last = ended[0] == 2
                if last:
                    self.connections = [c for c in self.connections if c not in (source, sink)]
            if last:
                source.close()
                sink.close()


class ObjectServer:
    """An HTTP/1.1 server on 127.0.0.1, in this process, whose answer depends on the whole
    request target, query included: .objects maps a target ("/dl?f=a.pth") to bytes, as a
    download endpoint does. Query parameters named in .ignored (a presigned URL's signature) are
    left out before the lookup. Ranges get 206 with Content-Range. .etag and .last_modified
    (None: not sent) are sent with every object alike. .gets counts the GET requests, .ranges
    lists their Range headers."""

    def __init__(self, etag=None, last_modified=None):
        self.objects = {}
        self.ignored = ("X-Amz-Signature", "X-Amz-Date", "X-Amz-Credential", "Signature",
                        "Expires")
        self.etag = etag
        self.last_modified = last_modified
        self.gets = 0
        self.ranges = []
        self.lock = threading.Lock()
        owner = self

        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - the standard library's name
                path, _, query = self.path.partition("?")
                kept = [p for p in query.split("&") if p and p.split("=")[0] not in owner.ignored]
                target = path + ("?" + "&".join(kept) if kept else "")
                with owner.lock:
                    owner.gets += 1
                    owner.ranges.append(self.headers.get("Range"))
                data = owner.objects.get(target)
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                first, last = 0, len(data) - 1
                wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
                if wanted:
                    first, last = int(wanted[1]), min(int(wanted[2]), len(data) - 1)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(last - first + 1))
                if owner.etag is not None:
                    self.send_header("ETag", owner.etag)
                if owner.last_modified is not None:
                    self.send_header("Last-Modified", owner.last_modified)
                self.end_headers()
                self.wfile.write(data[first:last + 1])

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def url(self, target):
        return f"http://127.0.0.1:{self.port}{target}"
