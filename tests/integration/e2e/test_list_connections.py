"""Issue 29, the live connections view: ListConnections and `kibotosctl workspace
connections`, through the real agent, dante and a SOCKS server that never answers.
Each connection is shown with the guest's address and port, the original destination,
its Egress and revision, its state (dialing, relaying, draining), its age and the
guest's bytes each way; paging never repeats one and shows one opened meanwhile on a
later page; bad requests change nothing and get the right code."""
import json
import os
import subprocess
import time

import pytest

import e2e_env as e2e
from test_accounting import start_hostile

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)

LIST = e2e.WORKSPACE + "ListConnections"

# In the guest: N connections to ADDR:PORT; with "hold" each asks the server to hold
# it ("HOLD\n" out, "HELD\n" back); prints their local ports, then keeps them open
# until stdin closes (then resets them: a FIN alone does not end a dial).
HOLDER = r"""
import socket, struct, sys
addr, port, n, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "hold"
socks = []
for _ in range(n):
    s = socket.create_connection((addr, port), timeout=10)
    if hold:
        s.sendall(b"HOLD\n")
        assert s.recv(16).startswith(b"HELD")
    socks.append(s)
print("PORTS", *(s.getsockname()[1] for s in socks), flush=True)
sys.stdin.read()
for s in socks:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
"""


def hold(lab, ws, addr, n, how="hold"):
    """(process, the connections' guest ports); closing its stdin ends them."""
    p = lab.popen(ws.guest, e2e.dp.PYTHON, "-c", HOLDER, addr, e2e.PORT, n, how, stdin=subprocess.PIPE,
                  text=True, bufsize=1)
    line = p.stdout.readline().split()
    assert line and line[0] == "PORTS", (line, p.stderr.read() if p.poll() is not None else "")
    return p, [int(x) for x in line[1:]]


def listing(agent, **request):
    return e2e.ok(e2e.call(agent, LIST, request))


def conns(agent, wid=None, **request):
    if wid:
        request["workspaceId"] = wid
    return e2e.field(listing(agent, **request), "connections", []) or []


def ports(cs):
    return sorted(int(e2e.field(c, "guest_address").rsplit(":", 1)[1]) for c in cs)


def all_pages(agent, wid, size):
    """Every page, in order, and the pages' sizes."""
    got, sizes, token = [], [], ""
    for _ in range(100):
        body = listing(agent, workspaceId=wid, pageSize=size, pageToken=token)
        page = e2e.field(body, "connections", []) or []
        got += page
        sizes.append(len(page))
        token = e2e.field(body, "next_page_token", "")
        if not token:
            return got, sizes
    raise AssertionError("more than 100 pages")


def ids(cs):
    return [int(e2e.field(c, "connection_id")) for c in cs]


def test_live_connections_with_addresses_egress_state_age_and_bytes_paged_without_repeats(attached):
    env = attached
    agent, lab, ws, wid, eid = env.agent, env.lab, env.ws, env.workspace_id, env.egress_id
    assert conns(agent, wid) == []
    before = time.time()
    holder, held = hold(lab, ws, e2e.covered(lab), 5)
    cs = conns(agent, wid)
    assert ports(cs) == sorted(held), cs
    assert ids(cs) == sorted(ids(cs)) and len(set(ids(cs))) == 5, cs  # oldest first, each once
    for c in cs:
        assert e2e.field(c, "workspace_id") == wid
        assert e2e.field(c, "guest_address").rsplit(":", 1)[0] == ws.guest_v4, c
        assert e2e.field(c, "original_destination") == f"{e2e.covered(lab)}:{e2e.PORT}", c
        assert e2e.field(c, "egress_id") == eid and e2e.num(c, "egress_revision") == 1, c
        assert e2e.field(c, "state") == "CONNECTION_STATE_RELAYING", c
        # The guest's bytes, to the byte: "HOLD\n" out, "HELD\n" back.
        assert e2e.num(c, "bytes_from_guest") == 5 and e2e.num(c, "bytes_to_guest") == 5, c
        opened = e2e.field(c, "open_time")
        at = time.mktime(time.strptime(opened[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert before - 2 <= at <= time.time() + 1, (opened, before)
        assert 0 <= e2e.num(c, "age_ms") <= (time.time() - before) * 1000 + 1000, c
    # Ages grow while the connections live.
    time.sleep(1.2)
    assert all(e2e.num(c, "age_ms") >= 1000 for c in conns(agent, wid)), conns(agent, wid)
    # Without a Workspace: every Workspace's (there is one).
    assert ids(conns(agent)) == ids(cs)

    # Pages of 2: 2, 2, 1, no repeats; a connection opened while paging is on a later page.
    body = listing(agent, workspaceId=wid, pageSize=2)
    first = e2e.field(body, "connections")
    assert ids(first) == ids(cs)[:2]
    late, late_ports = hold(lab, ws, e2e.covered(lab), 1)
    rest, token = [], e2e.field(body, "next_page_token")
    sizes = []
    while token:
        body = listing(agent, workspaceId=wid, pageSize=2, pageToken=token)
        page = e2e.field(body, "connections", []) or []
        rest += page
        sizes.append(len(page))
        token = e2e.field(body, "next_page_token", "")
    assert sizes == [2, 2], sizes  # 3 older ones, then the late one
    assert ids(first + rest) == sorted(set(ids(first + rest))), (first, rest)
    assert ports(first + rest) == sorted(held + late_ports)
    assert max(ids(rest)) == ids(rest)[-1] and ports([rest[-1]]) == late_ports

    # Bad requests: the right code, and the listing stays what it was.
    token = e2e.field(listing(agent, workspaceId=wid, pageSize=1), "next_page_token")
    assert token
    for request, code in (
            ({"workspaceId": wid, "pageSize": 1001}, "invalid_argument"),
            ({"pageSize": 1, "pageToken": token}, "invalid_argument"),  # issued for another filter
            ({"workspaceId": wid, "pageToken": token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]},
             "invalid_argument"),
            ({"workspaceId": "ws-0123456789abcdef0123456789abcdef"}, "not_found"),
            ({"workspaceId": "not an id"}, "not_found")):  # as GetWorkspace answers it
        assert e2e.error_code(e2e.call(agent, LIST, request)) == code, request
    got, sizes = all_pages(agent, wid, 4)
    assert sizes == [4, 2] and ports(got) == sorted(held + late_ports), (sizes, got)

    # A new Egress revision drains the old connections (drain_seconds 60): shown as
    # draining on revision 1, while a new connection relays on revision 2.
    e2e.ok(e2e.call(agent, e2e.EGRESS + "UpdateEgress", {
        "commandId": e2e.command_id("update-egress"), "egressId": eid, "expectedRevision": "1", "drainSeconds": 60,
        "spec": {**e2e.socks_spec(env.socks), "udpEnabled": True}}))  # another spec: revision 2
    e2e.wait_applied(agent, wid, 1, eid, 2)
    fresh, fresh_ports = hold(lab, ws, e2e.covered(lab), 1)
    by_port = {ports([c])[0]: c for c in conns(agent, wid)}
    assert set(by_port) == set(held + late_ports + fresh_ports), by_port
    for p in held + late_ports:
        assert e2e.field(by_port[p], "state") == "CONNECTION_STATE_DRAINING", by_port[p]
        assert e2e.num(by_port[p], "egress_revision") == 1
    assert e2e.field(by_port[fresh_ports[0]], "state") == "CONNECTION_STATE_RELAYING"
    assert e2e.num(by_port[fresh_ports[0]], "egress_revision") == 2

    # kibotosctl: a table, JSON, and --watch showing it again every 2 s.
    r = e2e.kibotosctl(agent, "workspace", "connections", wid)
    assert r.returncode == 0, r.stderr
    head, *rows = r.stdout.splitlines()
    assert head.split()[:4] == ["ID", "STATE", "AGE", "GUEST"], head
    assert len(rows) == 7 and sum("DRAINING" in row for row in rows) == 6, r.stdout
    assert all(f"{e2e.covered(lab)}:{e2e.PORT}" in row and eid in row for row in rows), r.stdout
    r = e2e.kibotosctl(agent, "workspace", "connections", wid, "--page-size", "3", "--all", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert ids(json.loads(r.stdout)["connections"]) == ids(conns(agent, wid))
    r = e2e.kibotosctl(agent, "workspace", "connections", "ws-0123456789abcdef0123456789abcdef")
    assert r.returncode != 0 and "not_found" in r.stderr, (r.returncode, r.stderr)
    binary = os.path.join(e2e.BUILD_ROOT, "agent", "ctl", "kibotosctl")
    watch = subprocess.Popen([binary, "--socket", agent.socket_path, "workspace", "connections", wid, "--watch"],
                             stdout=subprocess.PIPE, text=True)
    try:
        frames, start = [], time.monotonic()
        while len(frames) < 3 and time.monotonic() - start < 15:
            line = watch.stdout.readline()
            if line.startswith("Every 2 s: "):
                frames.append(time.monotonic())
        assert len(frames) == 3, frames
        assert 1.5 < frames[2] - frames[1] < 4, frames
    finally:
        watch.kill()
        watch.wait(timeout=5)

    # Connections that end leave the view.
    for p in (holder, late, fresh):
        p.stdin.close()
    e2e.labmod.wait_for(lambda: conns(agent, wid) == [], timeout=10, what="the closed connections to leave")


def test_a_dial_that_waits_shows_as_dialing_with_no_bytes(lab, agent_factory):
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    start_hostile(lab, 1091, "never")  # reads the greeting, never answers
    config = e2e.agent_config(lab)
    config["dataplane"] = {"handshake_timeout": "20s"}
    agent = agent_factory(config=config)
    never = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1091"), "egress_id")
    body = e2e.ok(e2e.create_workspace(agent, ws.path, e2e.policy((never, [e2e.covered(lab) + "/32"]))))
    wid = e2e.field(body["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, never, 1)
    holder, held = hold(lab, ws, e2e.covered(lab), 2, how="connect-only")
    try:
        cs = e2e.labmod.wait_for(lambda: conns(agent, wid) if len(conns(agent, wid)) == 2 else None, timeout=5,
                                 what="two connections listed")
        assert ports(cs) == sorted(held)
        for c in cs:
            assert e2e.field(c, "state") == "CONNECTION_STATE_DIALING", c
            assert e2e.num(c, "bytes_from_guest") == 0 and e2e.num(c, "bytes_to_guest") == 0, c
            assert e2e.field(c, "egress_id") == never
        r = e2e.kibotosctl(agent, "workspace", "connections", wid)
        assert r.returncode == 0 and r.stdout.count("DIALING") == 2, (r.stdout, r.stderr)
    finally:
        holder.stdin.close()
    e2e.labmod.wait_for(lambda: conns(agent, wid) == [], timeout=10, what="the closed connections to leave")
