"""Hostile guests (issue 33): one Workspace's guest opens connections that never send
(past its connection cap), an RST storm, DNS-over-TCP connections whose length prefixes
lie, and a flood of malformed DNS datagrams, while a second Workspace's guest keeps
connecting through the same agent. The agent stays up, the other Workspace is served
throughout (its connect latency measured idle and under the flood, in the same run),
the counters say what was refused and dropped, and everything is released once the
hostile guest lets go.

CI runs a smaller load; KIBOTOS_HOSTILE_FULL=1 runs the issue's (5,000 silent
connections over a 4,000 cap, malformed DNS at 10,000 q/s for 60 s) and then also
holds the other Workspace's p99 connect latency within 2x of idle (a release build:
KIBOTOS_BUILD_ROOT=build-release)."""
import json
import os
import subprocess
import time

import pytest

import e2e_env as e2e
import kibotos_agent
from test_scale_smoke import HOLD_PORT, nofile, start_hold_lab  # noqa: F401 (a fixture)

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)

FULL = bool(os.environ.get("KIBOTOS_HOSTILE_FULL"))
SILENT, CAP = (5000, 4000) if FULL else (1500, 1000)
RST_STORM = 2000 if FULL else 1000
TCP_LIARS = 200 if FULL else 100
DNS_RATE = int(os.environ.get("KIBOTOS_HOSTILE_DNS_RATE", "10000"))
DNS_SECONDS = 60 if FULL else 6
DNS_TARGET_HOST = 99  # any address: the agent takes every DNS packet of the guest

# The hostile guest, bounded in count and time. Prints "SILENT <connected> <failed>"
# once its silent connections are up, "FLOODING" as the DNS flood starts, then one JSON
# line; holds everything until a line on stdin.
HOSTILE = r"""
import errno, json, os, random, resource, selectors, socket, struct, sys, time
addr, port, dns_ip = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n_silent, n_rst, n_liars, rate, seconds = (int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]),
                                           int(sys.argv[7]), float(sys.argv[8]))
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
res = {}

# Silent: connected, never a byte sent; at most 256 handshakes at a time, 60 s at most.
sel = selectors.DefaultSelector()
silent, failed, started, pending = [], 0, 0, 0
deadline = time.monotonic() + 60
while len(silent) + failed < n_silent and time.monotonic() < deadline:
    while pending < 256 and started < n_silent:
        started += 1
        s = socket.socket()
        s.setblocking(False)
        if s.connect_ex((addr, port)) not in (0, errno.EINPROGRESS):
            s.close(); failed += 1; continue
        sel.register(s, selectors.EVENT_WRITE)
        pending += 1
    for key, _ in sel.select(0.1):
        s = key.fileobj
        sel.unregister(s); pending -= 1
        if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
            s.close(); failed += 1
        else:
            silent.append(s)
print("SILENT", len(silent), failed, flush=True)

# RST storm: connect, then close with SO_LINGER 0.
rst = 0
end = time.monotonic() + 30
for _ in range(n_rst):
    if time.monotonic() > end:
        break
    try:
        s = socket.create_connection((addr, port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close(); rst += 1
    except OSError:
        pass
res["rst_sent"] = rst

# DNS over TCP whose length prefixes lie: 65535 announced and 10 bytes sent, or 12
# announced and 12 bytes that are no DNS query; both kept open.
liars = []
for i in range(n_liars):
    try:
        s = socket.create_connection((dns_ip, 53), timeout=5)
        s.sendall(b"\xff\xff" + os.urandom(10) if i % 2 == 0 else b"\x00\x0c" + b"\xff" * 12)
        liars.append(s)
    except OSError:
        pass
res["tcp_liars"] = len(liars)

# Malformed DNS datagrams at `rate` a second for `seconds`: random bytes, short
# headers, answers (QR set), a question count of 0 or 2, a name running past the end.
def junk(i):
    kind = i % 5
    if kind == 0:
        return os.urandom(random.randint(0, 64))
    if kind == 1:
        return os.urandom(random.randint(1, 11))
    hdr = struct.pack("!HHHHHH", i & 0xffff, 0x8180 if kind == 2 else 0x0100, 0 if kind == 3 else (2 if kind == 4 else 1), 0, 0, 0)
    return hdr + (b"\x3fabc" if kind != 3 else b"")
print("FLOODING", flush=True)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setblocking(False)
sent, i = 0, 0
t0 = time.monotonic()
while True:
    now = time.monotonic()
    if now - t0 >= seconds:
        break
    due = int((now - t0) * rate)
    while sent < due:
        try:
            u.sendto(junk(i), (dns_ip, 53)); sent += 1
        except BlockingIOError:
            break
        i += 1
    time.sleep(0.001)
res["dns_sent"] = sent
res["dns_rate"] = sent / max(time.monotonic() - t0, 1e-9)

# Which silent connections the agent ended (over the cap): readable with EOF or reset.
ended = 0
for s in silent:
    s.setblocking(False)
    try:
        ended += s.recv(1) == b""
    except BlockingIOError:
        pass
    except OSError:
        ended += 1
res["silent_connected"], res["silent_failed"], res["silent_ended"] = len(silent), failed, ended
print(json.dumps(res), flush=True)
sys.stdin.readline()
for s in silent + liars:
    s.close()
"""

# The other Workspace's guest: `n` connections one after another, each answered end
# to end (PEER); prints the milliseconds of each, or -1 for a failure.
PROBE = r"""
import json, socket, sys, time
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = []
for _ in range(n):
    t0 = time.monotonic()
    try:
        s = socket.create_connection((addr, port), timeout=5)
        s.settimeout(5)
        s.sendall(b"PEER\n")
        ok = bool(s.recv(64))
        s.close()
        out.append((time.monotonic() - t0) * 1000 if ok else -1)
    except OSError:
        out.append(-1)
    time.sleep(0.01)
print(json.dumps(out), flush=True)
"""


def probe(lab, ws, n=300 if FULL else 150):
    out = lab.run(ws.guest, e2e.dp.PYTHON, "-c", PROBE, e2e.covered(lab), e2e.PORT, n, timeout=120).stdout
    return json.loads(out.strip().splitlines()[-1])


def p99(samples):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * 0.99))]


def samples(agent, name, wid, **labels):
    return kibotos_agent.metric(agent.metrics(), name, workspace_id=wid, **labels) or 0


def agent_fds(agent):
    return len(os.listdir(f"/proc/{agent.proc.pid}/fd"))


def test_hostile_guest_leaves_the_agent_and_other_workspaces_served(lab, agent_factory, nofile):  # noqa: F811
    hostile, victim = lab.add_workspace(), lab.add_workspace()
    config = start_hold_lab(lab)
    config["dataplane"] = {"max_connections_per_workspace": CAP}
    agent = agent_factory(config=config)
    # Each Workspace its own SOCKS5 server (dante, microsocks): what is measured is the
    # agent, not how one server copes with the hostile guest's thousand sessions.
    e2e.start_second_socks(lab, 1081)
    eid = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1080"), "egress_id")
    vid_egress = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1081"), "egress_id")
    resolver = [{"tcp": {"address": f"{lab.internet_v4(53)}:53"}, "egressId": eid}]
    ids = []
    for ws, egress, resolvers in ((hostile, eid, resolver), (victim, vid_egress, [])):
        pol = dict(e2e.policy((egress, [e2e.covered(lab) + "/32"])), resolvers=resolvers)
        body = e2e.ok(e2e.create_workspace(agent, ws.path, pol))
        ids.append(e2e.field(body["workspace"], "workspace_id"))
        e2e.wait_applied(agent, ids[-1], 1, egress, 1)
    hid = ids[0]
    base_fds = agent_fds(agent)

    idle = probe(lab, victim)
    assert all(ms >= 0 for ms in idle), idle
    guest = lab.popen(hostile.guest, e2e.dp.PYTHON, "-c", HOSTILE, e2e.covered(lab), HOLD_PORT,
                      lab.internet_v4(DNS_TARGET_HOST), SILENT, RST_STORM, TCP_LIARS, DNS_RATE, DNS_SECONDS,
                      text=True, stdin=subprocess.PIPE)
    try:
        line = guest.stdout.readline().split()
        assert line[0] == "SILENT", line
        assert guest.stdout.readline().strip() == "FLOODING"
        loaded = probe(lab, victim)
        res = json.loads(guest.stdout.readline())
        assert agent.alive(), agent.log()[-4000:]
        over = samples(agent, "kibotos_guest_connections_refused_total", hid, reason="over_limit")
        malformed = samples(agent, "kibotos_dns_failures_total", hid, reason="malformed_query")
        active = samples(agent, "kibotos_egress_active_connections", hid, egress_id=eid)
        print("hostile guest:", json.dumps(res), "over_limit", over, "malformed_query", malformed,
              "active", active, "agent fds", base_fds, "->", agent_fds(agent))
        print("other Workspace's connect p99: idle %.1f ms, under the hostile guest %.1f ms (x%.2f); "
              "median %.1f -> %.1f ms; slowest %s ms"
              % (p99(idle), p99(loaded), p99(loaded) / max(p99(idle), 1e-3), sorted(idle)[len(idle) // 2],
                 sorted(loaded)[len(loaded) // 2], ["%.0f" % x for x in sorted(loaded)[-5:]]))
        # The other Workspace was served throughout.
        assert all(ms >= 0 for ms in loaded), loaded
        # The cap held and the excess was refused and counted.
        assert res["silent_connected"] + res["silent_failed"] == SILENT, res
        assert active <= CAP
        assert over >= SILENT - CAP, over
        assert res["silent_ended"] >= SILENT - CAP - res["silent_failed"], res
        # Malformed DNS was dropped and counted, never more than was sent.
        assert 0 < malformed <= res["dns_sent"] + res["tcp_liars"], (malformed, res)
        assert samples(agent, "kibotos_dns_answers_total", hid) == 0
        if FULL:
            assert res["dns_rate"] >= 0.9 * DNS_RATE, res
            assert p99(loaded) <= 2 * p99(idle), (p99(idle), p99(loaded))
    finally:
        if guest.poll() is None:
            guest.stdin.write("\n")
            guest.stdin.flush()
        guest.wait(timeout=60)
    # Let go: the hostile guest's connections end and the agent's fds come back.
    kibotos_agent.wait_for(lambda: samples(agent, "kibotos_egress_active_connections", hid, egress_id=eid) == 0,
                           timeout=60, what="the hostile guest's relays to end")
    kibotos_agent.wait_for(lambda: agent_fds(agent) <= base_fds + 16, timeout=60,
                           what=f"the agent's fds back to {base_fds} (+16)")
    assert all(ms >= 0 for ms in probe(lab, victim, 20))
    e2e.assert_clean_exit(agent)
