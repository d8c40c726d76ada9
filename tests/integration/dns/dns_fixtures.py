"""Shared pieces of the DNS integration tests: the DNS harness (the real netns
attachment and DnsService, commanded over stdin), a dnsmasq upstream in `inet`,
dante with UDP ASSOCIATE in `socks`, and dig in the guest."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import lab as labmod  # noqa: E402
from stdin_harness import StdinHarness  # noqa: E402
from dante_process import popen_danted  # noqa: E402

BUILD = os.environ.get("KIBOTOS_BUILD_ROOT", "")
HARNESS = os.path.join(BUILD, "tests/integration/dns/dns_harness")

TEST_NAME = "test.kib"
TEST_V4 = "10.99.0.9"
TEST_V6 = "fd00:99::9"
BIG_NAME = "big.kib"
# Three 250-byte strings: a TXT answer of about 800 bytes, over the classic 512.
BIG_STRINGS = ["a" * 250, "b" * 250, "c" * 250]


class Harness(StdinHarness):
    """dns_harness in the root namespace (where the agent sends upstream DNS from)."""

    def __init__(self, lab, *flags):
        super().__init__(HARNESS, lab, *flags)

    def counters(self, ws_id):
        words = self.cmd(f"counters {ws_id}", expect_ok=False).split()
        return {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}

    def status(self, ws_id):
        return self.cmd(f"status {ws_id}", expect_ok=False)


def route_root_to_inet(lab):
    """Routes the lab's 'internet' from the root namespace through `socks`, so a
    resolver without Egress (plain UDP from the host namespace) is reachable. The
    routes go with the lab's root veth when the lab is removed."""
    x = lab.x
    labmod._run([labmod.IP, "route", "replace", f"10.204.{x}.0/24", "via", lab.socks_v4])
    labmod._run([labmod.IP, "-6", "route", "replace", f"fd00:204:{x:x}::/64", "via", lab.socks_v6])
    lab.run(lab.inet, labmod.IP, "route", "replace", f"10.202.{x}.0/28", "via", lab.socks_inet_v4)


class Dnsmasq:
    """dnsmasq in `inet` answering test.kib (A, AAAA) and big.kib (a large TXT), with
    every query logged with its client address."""

    def __init__(self, lab, addrs):
        self.lab = lab
        self.dir = tempfile.mkdtemp(prefix="kib-dnsmasq-")
        self.log = os.path.join(self.dir, "queries.log")
        open(self.log, "w").close()
        args = ["/usr/sbin/dnsmasq", "-k", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                "--bind-interfaces", "--port=53", "--log-queries", f"--log-facility={self.log}",
                "--pid-file=", "--user=root", "--group=root",
                f"--host-record={TEST_NAME},{TEST_V4},{TEST_V6}",
                "--txt-record=" + BIG_NAME + "," + ",".join(BIG_STRINGS)]
        for a in addrs:
            lab._ensure_bindable(lab.inet, a)
            args.append(f"--listen-address={a}")
        self.proc = lab.popen(lab.inet, *args)
        for a in addrs:
            labmod.wait_for(lambda a=a: self._answers(a), timeout=10, what=f"dnsmasq on {a}")
        self.ready_lines = len(self._query_clients())

    def _answers(self, addr):
        p = self.lab.run(self.lab.inet, "dig", f"@{addr}", TEST_NAME, "A", "+short", "+time=1",
                         "+tries=1", check=False, timeout=10)
        return TEST_V4 in p.stdout

    def clients(self):
        """The client addresses of the queries logged since it was ready (the
        readiness probes from inet itself left out)."""
        return self._query_clients()[self.ready_lines:]

    def _query_clients(self):
        out = []
        with open(self.log) as f:
            for line in f:
                if " query[" in line and " from " in line:
                    out.append(line.rsplit(" from ", 1)[1].strip())
        return out


def dante_udp_conf(lab, port, auth=False):
    method = "username" if auth else "none"
    text = f"""logoutput: stderr
internal: {lab.socks_v4} port = {port}
external: {lab.socks_inet_v4}
external: {lab.socks_inet_v6}
clientmethod: none
socksmethod: {method}
user.privileged: root
user.unprivileged: nobody
client pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 }}
socks pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 command: connect udpassociate }}
socks pass {{ from: 0.0.0.0/0 to: ::/0 command: connect udpassociate }}
socks pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 command: udpreply }}
socks pass {{ from: ::/0 to: 0.0.0.0/0 command: udpreply }}
"""
    fd, path = tempfile.mkstemp(prefix="kib-dante-udp-", suffix=".conf")
    os.write(fd, text.encode())
    os.close(fd)
    return path


def start_dante_udp(lab, port=1080, user=None, password=None):
    """dante allowing CONNECT and UDP ASSOCIATE; with user/password, RFC 1929 against a
    user that exists only in a private mount namespace (the host's files untouched)."""
    conf = dante_udp_conf(lab, port, auth=bool(user))
    proc = popen_danted(lab, conf, user, password)
    labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                    timeout=10, what="dante listening")
    return proc


def make_tls_peer(lab, directory, port, backend_port):
    """stunnel in front of a SOCKS server, with a CA made by the test; returns the CA."""
    ca_key, ca_pem = _run_openssl_ca(directory)
    key, pem = _server_cert(directory, ca_key, ca_pem, f"IP:{lab.socks_v4}")
    conf = os.path.join(directory, "stunnel.conf")
    with open(conf, "w") as f:
        f.write(f"foreground = yes\npid =\n[socks]\naccept = {lab.socks_v4}:{port}\n"
                f"connect = {lab.socks_v4}:{backend_port}\ncert = {pem}\nkey = {key}\n")
    lab.popen(lab.socks, "/usr/bin/stunnel4", conf)
    labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                    timeout=10, what="stunnel listening")
    return ca_pem


def _run_openssl_ca(directory):
    key, pem = os.path.join(directory, "ca.key"), os.path.join(directory, "ca.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", pem, "-days", "1", "-subj", "/CN=kib-dns-test-ca"],
                   check=True, capture_output=True)
    return key, pem


def _server_cert(directory, ca_key, ca_pem, san):
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


def dig(lab, ws, server, name, rtype="A", tcp=False, extra=(), timeout=3):
    """dig in the guest; returns (exit code, stdout)."""
    args = ["dig", f"@{server}", name, rtype, f"+time={timeout}", "+tries=1", *extra]
    if tcp:
        args.append("+tcp")
    p = lab.run(ws.guest, *args, check=False, timeout=timeout * 3 + 10)
    return p.returncode, p.stdout


def dig_short(lab, ws, server, name, rtype="A", tcp=False, timeout=3):
    rc, out = dig(lab, ws, server, name, rtype, tcp, extra=("+short",), timeout=timeout)
    return out.strip() if rc == 0 else f"rc={rc} {out.strip()}"
