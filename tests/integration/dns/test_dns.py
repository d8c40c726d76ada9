"""A guest's DNS, intercepted in its Workspace namespace (TPROXY, any address, UDP and
TCP port 53), forwarded to its policy's resolvers: directly, through SOCKS5 UDP
ASSOCIATE (dante, with and without auth, behind stunnel), over TCP through CONNECT;
failover, IPv6, large EDNS0 answers, a thousand queries in flight."""
import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dns_fixtures as dx  # noqa: E402

dx.labmod.require_root()


@pytest.fixture
def lab():
    with dx.labmod.Lab() as lab:
        yield lab


@pytest.fixture
def env(lab):
    """A workspace, dnsmasq in inet (v4 and v6), routes from the host, the harness."""
    ws = lab.add_workspace()
    dx.route_root_to_inet(lab)
    up4, up6 = lab.internet_v4(53), lab.internet_v6(0x53)
    upstream = dx.Dnsmasq(lab, [up4, up6])
    h = dx.Harness(lab)
    return lab, ws, h, upstream, up4, up6


def asked(lab):
    """An address the guest asks that runs no DNS server: only interception answers."""
    return lab.internet_v4(99)


def test_udp_resolver_without_egress_answers_dig_over_udp_and_tcp(env):
    lab, ws, h, upstream, up4, _ = env
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME, tcp=True) == dx.TEST_V4
    # Plain UDP from the host namespace: the upstream sees the host's address.
    assert lab.root_v4 in upstream.clients()
    assert ws.guest_v4 not in upstream.clients()


def test_udp_associate_through_dante_on_a_lab_address(env):
    # dante listens on the socks namespace's lab address, not 127.0.0.1.
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME, tcp=True) == dx.TEST_V4
    # "The upstream's log shows the queries arriving from the SOCKS server."
    clients = upstream.clients()
    assert clients and set(clients) == {lab.socks_inet_v4}, clients
    assert "associated" in h.status("w0")


def test_udp_associate_with_user_password(env):
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1082, user="kibdns", password="s3cret")
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1082 user=kibdns pass=s3cret")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert set(upstream.clients()) == {lab.socks_inet_v4}


def test_udp_associate_with_a_wrong_password_fails_and_says_why(env):
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1082, user="kibdns", password="s3cret")
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1082 user=kibdns pass=wrong")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.TEST_V4 not in dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME)
    assert upstream.clients() == []
    assert "auth_failed" in h.status("w0")


def test_udp_associate_through_dante_behind_stunnel(env):
    # Control connection over TLS, datagrams in clear to the relay address.
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1080)
    d = tempfile.mkdtemp(prefix="kib-dns-tls-")
    ca = dx.make_tls_peer(lab, d, 1443, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1443 tls ca={ca}")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert set(upstream.clients()) == {lab.socks_inet_v4}


def test_tcp_resolver_through_connect(env):
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 tcp:{up4}:53@e1")
    # A guest UDP query is translated to DNS over TCP and back.
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME, tcp=True) == dx.TEST_V4
    assert set(upstream.clients()) == {lab.socks_inet_v4}


def test_tcp_resolver_without_egress(env):
    lab, ws, h, upstream, up4, _ = env
    h.cmd(f"workspace w0 {ws.path} 1 tcp:{up4}:53")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME, tcp=True) == dx.TEST_V4


def test_failover_when_the_first_resolver_is_black_holed(env):
    lab, ws, h, upstream, up4, _ = env
    hole = lab.internet_v4(66)
    # Datagrams to the first resolver vanish without an ICMP error.
    lab.run(lab.inet, "nft", "-f", "-", input=(
        "table inet kibdnstest {\n chain drop_dns {\n  type filter hook input priority 0;\n"
        f"  ip daddr {hole} udp dport 53 drop\n }}\n}}\n"))
    h.cmd(f"workspace w0 {ws.path} 1 udp:{hole}:53 udp:{up4}:53")
    # The harness's per-resolver timeout is 2 s; dig waits 5 s.
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME, timeout=5) == dx.TEST_V4
    c = h.counters("w0")
    assert c["timeouts"] >= 1 and c["failovers"] >= 1, c


def test_ipv6_resolver_and_aaaa_over_ipv6(env):
    lab, ws, h, upstream, _, up6 = env
    h.cmd(f"workspace w0 {ws.path} 1 udp:[{up6}]:53")
    v6_asked = lab.internet_v6(0x99)
    assert dx.dig_short(lab, ws, v6_asked, dx.TEST_NAME, "AAAA") == dx.TEST_V6
    assert dx.dig_short(lab, ws, v6_asked, dx.TEST_NAME, "AAAA", tcp=True) == dx.TEST_V6
    assert lab.root_v6 in upstream.clients()


def test_a_query_to_a_link_local_address_is_answered_from_it(env):
    """A guest asking its router's link-local address (a common RDNSS, fe80::1%eth0):
    the reply must come from that address on that link (a reply socket bound without
    the interface is refused by the kernel, and the query went unanswered)."""
    lab, ws, h, upstream, up4, _ = env
    lab.run(ws.ws, dx.labmod.IP, "-6", "addr", "add", "fe80::53/64", "dev", "guest0", "nodad")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53")
    assert dx.dig_short(lab, ws, "fe80::53%eth0", dx.TEST_NAME) == dx.TEST_V4
    assert dx.dig_short(lab, ws, "fe80::53%eth0", dx.TEST_NAME, tcp=True) == dx.TEST_V4


def test_ipv6_resolver_through_dante(env):
    lab, ws, h, upstream, _, up6 = env
    dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:[{up6}]:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME, "AAAA") == dx.TEST_V6
    assert set(upstream.clients()) == {lab.socks_inet_v6}


@pytest.mark.parametrize("through", ["direct", "associate"])
def test_edns0_answer_larger_than_512_bytes_arrives_intact(env, through):
    lab, ws, h, upstream, up4, _ = env
    suffix = ""
    if through == "associate":
        dx.start_dante_udp(lab, 1080)
        h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
        suffix = "@e1"
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53{suffix}")
    rc, out = dx.dig(lab, ws, asked(lab), dx.BIG_NAME, "TXT", extra=("+bufsize=1232", "+ignore"))
    assert rc == 0, out
    assert " tc" not in out.split("flags:")[1].split(";")[0], out
    for s in dx.BIG_STRINGS:
        assert s in out
    size = int(out.split("MSG SIZE  rcvd: ")[1].split()[0])
    assert size > 512


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_truncated_answer_makes_the_guest_retry_over_tcp(env, transport):
    lab, ws, h, upstream, up4, _ = env
    h.cmd(f"workspace w0 {ws.path} 1 {transport}:{up4}:53")
    # No EDNS0: over UDP the answer is truncated (by the upstream, or by the agent for
    # a tcp resolver's answer); dig retries over TCP by itself and gets it whole.
    rc, out = dx.dig(lab, ws, asked(lab), dx.BIG_NAME, "TXT", extra=("+noedns",))
    assert rc == 0, out
    assert "Truncated, retrying in TCP mode" in out
    for s in dx.BIG_STRINGS:
        assert s in out


THOUSAND = r"""
import os, select, socket, struct, sys, time
dst, n = sys.argv[1], int(sys.argv[2])
def query(qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in b"test.kib".split(b"."):
        q += bytes([len(label)]) + label
    return q + b"\x00" + struct.pack(">HH", 1, 1)
socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(10)]
for s in socks:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.setblocking(False)
for i in range(n):
    socks[i % 10].sendto(query(i), (dst, 53))
got = set()
deadline = time.monotonic() + 20
while len(got) < n and time.monotonic() < deadline:
    r, _, _ = select.select(socks, [], [], 0.5)
    for s in r:
        while True:
            try:
                data, src = s.recvfrom(4096)
            except BlockingIOError:
                break
            qid = struct.unpack(">H", data[:2])[0]
            if src[0] == dst and src[1] == 53 and qid % 10 == socks.index(s):
                got.add(qid)
print(len(got))
"""


def test_a_thousand_queries_in_flight_all_answered(env):
    lab, ws, h, upstream, up4, _ = env
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53")
    p = lab.run(ws.guest, dx.labmod.PYTHON, "-c", THOUSAND, asked(lab), 1000, timeout=60)
    assert p.stdout.strip() == "1000", (p.stdout, h.status("w0"))


def control_connections(lab, port):
    """Established TCP connections to the SOCKS server's port (associations' control
    connections among them)."""
    out = lab.run(lab.socks, "ss", "-Htn", "state", "established", f"( sport = :{port} )").stdout
    return len([line for line in out.splitlines() if line.strip()])


def test_association_is_reused_across_queries(env):
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    for _ in range(5):
        assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert control_connections(lab, 1080) == 1


def test_association_is_re_established_when_its_control_connection_dies(env):
    lab, ws, h, upstream, up4, _ = env
    dante = dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    dx.labmod._kill(dante)
    dx.labmod.wait_for(lambda: "associated" not in h.status("w0"), timeout=10, what="association closed")
    dx.start_dante_udp(lab, 1080)
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert "associated" in h.status("w0")


def test_idle_association_is_closed(lab):
    ws = lab.add_workspace()
    up4 = lab.internet_v4(53)
    dx.Dnsmasq(lab, [up4])
    h = dx.Harness(lab, "--channel-idle-ms", 1000)
    dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    dx.labmod.wait_for(lambda: control_connections(lab, 1080) == 0, timeout=10, what="idle association closed")


def test_egress_update_moves_queries_to_the_new_revision_and_closes_the_old_association(env):
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1080)
    dx.start_dante_udp(lab, 1081)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert control_connections(lab, 1080) == 1
    # drain_seconds 0: the old revision's association closes when the new one takes over.
    h.cmd(f"egress e1 2 0 {lab.socks_v4}:1081")
    dx.labmod.wait_for(lambda: control_connections(lab, 1080) == 0, timeout=10, what="old association closed")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert control_connections(lab, 1081) == 1
    assert "rev 2" in h.status("w0")


def test_draining_association_keeps_its_deadline(env):
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1080)
    dx.start_dante_udp(lab, 1081)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    # drain_seconds 30: the old association stays for queries in flight, at most as
    # long as a query can wait for its answer (2 s here), then closes.
    h.cmd(f"egress e1 2 30 {lab.socks_v4}:1081")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert control_connections(lab, 1081) == 1
    dx.labmod.wait_for(lambda: control_connections(lab, 1080) == 0, timeout=10, what="drained association closed")


def test_deleting_the_egress_closes_its_association(env):
    lab, ws, h, upstream, up4, _ = env
    dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    h.cmd("delete-egress e1")
    dx.labmod.wait_for(lambda: control_connections(lab, 1080) == 0, timeout=10, what="association closed")


FAKE_SOCKS = r"""
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(8)
held = []
while True:
    c, _ = s.accept()
    try:
        if len(c.recv(3)) != 3:
            continue
        c.sendall(b"\x05\x00")
        c.recv(10)
        # UDP ASSOCIATE answered with a loopback relay address: 127.0.0.1:5353.
        c.sendall(b"\x05\x00\x00\x01\x7f\x00\x00\x01\x14\xe9")
        held.append(c)
    except OSError:
        pass
"""


def test_relay_address_in_a_special_purpose_range_is_refused(env):
    lab, ws, h, upstream, up4, _ = env
    lab.popen(lab.socks, dx.labmod.PYTHON, "-c", FAKE_SOCKS, lab.socks_v4, 1090)
    dx.labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, 1090, timeout=0.5, read=False)[0],
                       timeout=10, what="fake SOCKS server")
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1090")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.TEST_V4 not in dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME)
    assert upstream.clients() == []
    assert "relay address refused" in h.status("w0")


IDLE_CLIENT = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], 53), timeout=10)
start = time.monotonic()
data = s.recv(10)  # nothing is asked: the agent closes the idle connection
print("closed" if data == b"" else "data", round(time.monotonic() - start, 1))
"""


def test_idle_guest_tcp_connection_is_closed(lab):
    ws = lab.add_workspace()
    up4 = lab.internet_v4(53)
    dx.Dnsmasq(lab, [up4])
    h = dx.Harness(lab, "--guest-tcp-idle-ms", 1000)
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53")
    p = lab.run(ws.guest, dx.labmod.PYTHON, "-c", IDLE_CLIENT, asked(lab), timeout=30)
    assert p.stdout.startswith("closed"), p.stdout


def test_policy_update_switches_resolvers_and_keeps_unchanged_ones(env):
    lab, ws, h, upstream, up4, up6 = env
    dx.start_dante_udp(lab, 1080)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    h.cmd(f"workspace w0 {ws.path} 1 udp:{up4}:53@e1")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    # Same resolvers in a new policy revision: the association stays.
    h.cmd(f"workspace w0 {ws.path} 2 udp:{up4}:53@e1")
    assert control_connections(lab, 1080) == 1
    # Different resolvers: the next query goes to the new one (plain UDP from the host).
    h.cmd(f"workspace w0 {ws.path} 3 udp:[{up6}]:53")
    dx.labmod.wait_for(lambda: control_connections(lab, 1080) == 0, timeout=10, what="old association closed")
    assert dx.dig_short(lab, ws, asked(lab), dx.TEST_NAME) == dx.TEST_V4
    assert upstream.clients()[-1] == lab.root_v6
