"""Shared pieces of the data-plane integration tests: the relay harness (the real
DataplaneRuntime commanded over stdin), SOCKS5/TLS peers, and guest-side clients."""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lab as labmod  # noqa: E402
from stdin_harness import StdinHarness  # noqa: E402
from dante_process import popen_danted  # noqa: E402
import proc_handles  # noqa: E402

BUILD = os.environ.get("KIBOTOS_BUILD_ROOT", "")
HARNESS = os.path.join(BUILD, "tests/integration/dataplane/relay_harness")
PYTHON = "/usr/bin/python3"


class Harness(StdinHarness):
    """relay_harness in the root namespace (where the lab's agent dials from)."""

    def __init__(self, lab, *flags):
        super().__init__(HARNESS, lab, *flags)

    def status(self, ws_id):
        import json
        return json.loads(self.cmd(f"status {ws_id}", expect_ok=False))

    def egress_status(self, ws_id, egress_id):
        for e in self.status(ws_id).get("egresses", []):
            if e["egress_id"] == egress_id:
                return e
        return {}

    def open_fds(self):
        return proc_handles.open_fds(self.proc.pid)

    def slots_in_use(self):
        return proc_handles.ring_slots(self.proc.pid)


def dante_conf(lab, port, auth=False, internal=None):
    internal = internal or lab.socks_v4
    method = "username" if auth else "none"
    text = f"""logoutput: stderr
internal: {internal} port = {port}
external: {lab.socks_inet_v4}
clientmethod: none
socksmethod: {method}
user.privileged: root
user.unprivileged: nobody
client pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 }}
socks pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 command: connect }}
"""
    fd, path = tempfile.mkstemp(prefix="kib-dante-", suffix=".conf")
    os.write(fd, text.encode())
    os.close(fd)
    return path


def start_dante(lab, port=1080, auth=False):
    conf = dante_conf(lab, port, auth)
    proc = lab.popen(lab.socks, "/usr/sbin/danted", "-f", conf, "-N", "1")
    labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                    timeout=10, what="dante listening")
    return proc


def start_microsocks(lab, port=1081, user=None, password=None):
    args = ["/usr/bin/microsocks", "-i", lab.socks_v4, "-p", str(port), "-b", lab.socks_inet_v4]
    if user:
        args += ["-u", user, "-P", password]
    proc = lab.popen(lab.socks, *args)
    labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                    timeout=10, what="microsocks listening")
    return proc


def guest_curl(lab, ws, url, timeout=10, extra=()):
    """curl in the guest; returns (exit code, body, stderr)."""
    p = lab.run(ws.guest, "curl", "-sS", "--max-time", str(timeout), *extra, url,
                check=False, timeout=timeout + 10)
    return p.returncode, p.stdout, p.stderr


def peer_echo_server(lab, addr, port):
    """A TCP server in inet answering 'PEER <client ip>' so tests see who connected."""
    code = (
        "import socket, threading\n"
        f"s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(({addr!r}, {port})); s.listen(512)\n"
        "def serve(c, a):\n"
        "    try:\n"
        "        c.sendall(('PEER ' + a[0] + '\\n').encode())\n"
        "    finally:\n"
        "        c.close()\n"
        "while True:\n"
        "    c, a = s.accept()\n"
        "    threading.Thread(target=serve, args=(c, a), daemon=True).start()\n"
    )
    proc = lab.popen(lab.inet, PYTHON, "-c", code)
    labmod.wait_for(lambda: lab.tcp_request(lab.inet, addr, port, timeout=0.5)[0], timeout=10,
                    what="peer echo server")
    return proc


def wait_for(pred, timeout=10, what="condition"):
    return labmod.wait_for(pred, timeout=timeout, what=what)


def now():
    return time.monotonic()


HERE = os.path.dirname(os.path.abspath(__file__))


def start_bulk_server(lab, addr, port):
    proc = lab.popen(lab.inet, PYTHON, os.path.join(HERE, "bulk_server.py"), addr, port)
    labmod.wait_for(lambda: lab.tcp_request(lab.inet, addr, port, timeout=0.5, read=False)[0], timeout=10,
                    what="bulk server")
    return proc


def guest(lab, ws, *args, timeout=120):
    """Runs guest_client.py in the guest namespace; returns (ok, last output line)."""
    p = lab.run(ws.guest, PYTHON, os.path.join(HERE, "guest_client.py"), *map(str, args),
                check=False, timeout=timeout)
    lines = p.stdout.strip().splitlines()
    return p.returncode == 0, (lines[-1] if lines else p.stderr.strip())


def guest_popen(lab, ws, *args):
    return lab.popen(ws.guest, PYTHON, os.path.join(HERE, "guest_client.py"), *map(str, args),
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)


def start_ticker(lab, ws, addr, port, seconds):
    """A long-lived guest connection (the server streams until it breaks)."""
    p = guest_popen(lab, ws, "tick", addr, port, seconds)
    assert p.stdout.readline().strip() == "STARTED"
    return p


def ticker_end(p, timeout=40):
    """(how, monotonic time) the ticker's connection ended: reset, eof, stalled or timeout."""
    out, _ = p.communicate(timeout=timeout)
    _, how, at = out.strip().splitlines()[-1].split()
    return how, float(at)


def start_dante_with_user(lab, user, password, port=1082):
    """dante with RFC 1929 auth against a system user that exists only in a private
    mount namespace (bind-mounted passwd/shadow): the host's files are untouched."""
    conf = dante_conf(lab, port, auth=True)
    proc = popen_danted(lab, conf, user, password)
    labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                    timeout=10, what="dante (auth) listening")
    return proc


def make_ca(directory, name):
    """A throwaway CA (generated by the test, never committed)."""
    key, pem = os.path.join(directory, f"{name}.key"), os.path.join(directory, f"{name}.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", pem, "-days", "1", "-subj", f"/CN={name}"],
                   check=True, capture_output=True)
    return key, pem


def make_server_cert(directory, ca_key, ca_pem, san):
    key, csr, pem = (os.path.join(directory, n) for n in ("srv.key", "srv.csr", "srv.pem"))
    ext = os.path.join(directory, "ext.cnf")
    with open(ext, "w") as f:
        f.write(f"subjectAltName={san}\n")
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", csr, "-subj", "/CN=socks.test"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key,
                    "-CAcreateserial", "-out", pem, "-days", "1", "-extfile", ext],
                   check=True, capture_output=True)
    return key, pem


def start_stunnel(lab, directory, key, pem, port, backend_port, log=None):
    """stunnel in front of the SOCKS server; with log, its handshakes (info level) go
    to that file."""
    conf = os.path.join(directory, "stunnel.conf")
    with open(conf, "w") as f:
        if log:
            f.write(f"debug = info\noutput = {log}\n")
        f.write(f"foreground = yes\npid =\n[socks]\naccept = {lab.socks_v4}:{port}\n"
                f"connect = {lab.socks_v4}:{backend_port}\ncert = {pem}\nkey = {key}\n")
    proc = lab.popen(lab.socks, "/usr/bin/stunnel4", conf)
    labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                    timeout=10, what="stunnel listening")
    return proc
