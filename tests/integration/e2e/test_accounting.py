"""Issue 29: who sent what where, through which Egress. Through the real agent and real
peers (dante, stunnel with a test CA, hostile SOCKS servers): the bytes counted are the
bytes the guest sent and received, to the byte, through a plain and a TLS Egress; every
close reason and dial cause the lab can cause is counted where it happened; the dial
stage histograms move; last_error carries its time and count and clears after a
success; the events an operator follows are logged (dial failures within a budget);
a deleted Egress's series leave /metrics."""
import os
import re
import subprocess
import time

import pytest

import e2e_env as e2e
from kibotos_agent import metric, parse_metrics
from test_take_over import plain_and_tls_lab

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTILE = os.path.join(HERE, "hostile_socks.py")
MIB = 4
REASONS = ("guest_closed", "upstream_closed", "guest_reset", "upstream_reset", "relay_error", "idle_timeout",
           "drain_deadline", "dial_failed", "agent_closed", "handed_over")
CAUSES = ("resolve", "refused", "connect", "tls", "socks5", "closed", "timeout", "io_error", "local")
STAGES = ("resolve", "connect", "socks5", "dial", "first_byte")


def counters(entry):
    return e2e.field(entry, "connections", {}) or {}


def closed(c):
    """Every close reason with its count (each reason is always present)."""
    got = e2e.field(c, "closed", {}) or {}
    assert set(got) == set(REASONS), got
    return {r: int(got[r]) for r in REASONS}


def dial_failures(c):
    got = e2e.field(c, "dial_failures", {}) or {}
    assert set(got) == set(CAUSES), got
    return {k: int(got[k]) for k in CAUSES}


def egress_entry(agent, wid, eid):
    return e2e.egress_status(e2e.policy_status(agent, wid), eid)


def histogram_count(samples, family, eid, **labels):
    return metric(samples, family + "_count", egress_id=eid, **labels) or 0


def expect_only(counts, **want):
    """counts equal want for the keys named, 0 for every other."""
    assert counts == {k: want.get(k, 0) for k in counts}, counts


def test_bytes_counted_equal_the_bytes_sent_both_ways_through_plain_and_tls_egresses(lab, agent_factory):
    ws = lab.add_workspace()
    agent, wid, tls_dst = plain_and_tls_lab(lab, ws, agent_factory)
    routes = e2e.field(e2e.field(e2e.get_workspace(agent, wid), "network_policy"), "egresses")
    plain, tls = (e2e.field(r, "egress_id") for r in routes)
    for dst in (e2e.covered(lab), tls_dst):
        for how in ("up", "down"):
            ok, line = e2e.dp.guest(lab, ws, how, dst, e2e.PORT, MIB)  # sha256-checked by the guest
            assert ok, (how, dst, line)

    def settled():
        st = e2e.policy_status(agent, wid)
        entries = [e2e.egress_status(st, eid) for eid in (plain, tls)]
        return st if all(e2e.num(e, "active_connections") == 0 and sum(closed(counters(e)).values()) == 2
                         for e in entries) else None
    st = e2e.labmod.wait_for(settled, timeout=15, what="both Egresses' connections to close")
    samples = agent.metrics()
    up_request, down_request = len(b"UP\n"), len(f"DOWN {MIB << 20}\n".encode())
    sha_line = 65  # the server's sha256 hex and a line feed
    for eid in (plain, tls):
        c = counters(e2e.egress_status(st, eid))
        # The guest's own bytes, plaintext inside TLS: never the SOCKS5 or TLS overhead.
        assert e2e.num(c, "bytes_from_guest") == up_request + (MIB << 20) + down_request, (eid, c)
        assert e2e.num(c, "bytes_to_guest") == sha_line + (MIB << 20), (eid, c)
        assert e2e.num(c, "opened") == 2, c
        # up: the guest half-closed first; down: the server ended first.
        expect_only(closed(c), guest_closed=1, upstream_closed=1)
        expect_only(dial_failures(c))
        labels = {"workspace_id": wid, "egress_id": eid}
        assert metric(samples, "kibotos_egress_bytes_total", direction="from_guest", **labels) == \
            e2e.num(c, "bytes_from_guest")
        assert metric(samples, "kibotos_egress_bytes_total", direction="to_guest", **labels) == \
            e2e.num(c, "bytes_to_guest")
        assert metric(samples, "kibotos_egress_connections_opened_total", **labels) == 2
        assert metric(samples, "kibotos_egress_connections_closed_total", reason="upstream_closed", **labels) == 1
        # Every successful dial moved each stage it went through once (the endpoint is
        # an IP literal: no resolve).
        for stage in ("connect", "socks5", "dial"):
            assert histogram_count(samples, f"kibotos_egress_{stage}_duration_seconds", eid) == 2, (eid, stage)
        assert histogram_count(samples, "kibotos_egress_first_byte_seconds", eid) == 2, eid
        assert histogram_count(samples, "kibotos_egress_resolve_duration_seconds", eid) == 0, eid
        assert metric(samples, "kibotos_egress_dial_duration_seconds_sum", egress_id=eid) > 0
    tls_handshakes = [histogram_count(samples, "kibotos_egress_tls_handshake_duration_seconds", tls, session=s)
                      for s in ("full", "resumed")]
    assert tls_handshakes[0] >= 1 and sum(tls_handshakes) == 2, tls_handshakes
    assert histogram_count(samples, "kibotos_egress_tls_handshake_duration_seconds", plain, session="full") == 0
    # The Workspace's totals add up its Egresses'.
    total = counters(st)
    assert e2e.num(total, "bytes_from_guest") == 2 * (up_request + (MIB << 20) + down_request), total
    assert e2e.num(total, "bytes_to_guest") == 2 * (sha_line + (MIB << 20)), total
    assert e2e.num(total, "opened") == 4, total
    expect_only(closed(total), guest_closed=2, upstream_closed=2)
    # kibotosctl shows the counters beside one "applied revision" per kind.
    r = e2e.kibotosctl(agent, "workspace", "status", wid)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith("applied_policy_revision: 1\n"), out
    assert "EGRESS REV" in out and "APPLIED REV" not in out, out
    assert str(sha_line + (MIB << 20)) in out, out
    assert f"connections.bytes_to_guest: {2 * (sha_line + (MIB << 20))}" in out, out
    # Prometheus' own linter (naming, units, types) on a scrape with these families populated.
    text = agent.get("/metrics")[2]
    assert "kibotos_egress_tls_handshake_duration_seconds_bucket{" in text
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), (r.stdout, r.stderr)
    e2e.assert_clean_exit(agent)


# A guest connection that waits for the dial, then resets (SO_LINGER 0) after `wait` s.
RESET_WHILE_DIALING = r"""
import socket, struct, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(b"PEER\n")
time.sleep(float(sys.argv[3]))
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
print("RESET SENT")
"""

# A guest connection that asks to be held, then waits for its end; prints how it ended
# and after how long.
HOLD_UNTIL_CLOSED = r"""
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(b"HOLD\n")
assert s.recv(16).startswith(b"HELD")
start = time.monotonic()
s.settimeout(30)
try:
    how = "eof" if s.recv(16) == b"" else "data"
except ConnectionResetError:
    how = "reset"
except socket.timeout:
    how = "timeout"
print(how, round(time.monotonic() - start, 2))
"""


def guest_python(lab, ws, script, *args, timeout=60):
    p = lab.run(ws.guest, e2e.dp.PYTHON, "-c", script, *map(str, args), check=False, timeout=timeout)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def start_hostile(lab, port, behaviour):
    proc = lab.popen(lab.socks, e2e.dp.PYTHON, HOSTILE, lab.socks_v4, str(port), behaviour)
    e2e.labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                        timeout=10, what=f"hostile socks ({behaviour})")
    return proc


def test_close_reasons_dial_causes_and_last_error_as_an_operator_follows_them(lab, agent_factory, tmp_path):
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    e2e.dp.start_dante(lab, 1080)
    start_hostile(lab, 1091, "never")
    start_hostile(lab, 1092, "rst-after-reply")
    config = e2e.agent_config(lab)
    config["dataplane"] = {"idle_timeout": "3s", "handshake_timeout": "20s"}
    access_path = str(tmp_path / "access.log")
    config["log"] = {"access": {"path": access_path}}
    agent = agent_factory(config=config)
    good = e2e.create_egress(agent, f"{lab.socks_v4}:1080")
    dead = e2e.create_egress(agent, f"{lab.socks_v4}:1999")  # nothing listens
    never = e2e.create_egress(agent, f"{lab.socks_v4}:1091")
    rst = e2e.create_egress(agent, f"{lab.socks_v4}:1092")
    ids = {n: e2e.field(e, "egress_id") for n, e in
           (("good", good), ("dead", dead), ("never", never), ("rst", rst))}
    dst = {"good": e2e.covered(lab), "dead": lab.internet_v4(40), "never": lab.internet_v4(41),
           "rst": lab.internet_v4(42)}
    e2e.dp.start_bulk_server(lab, dst["dead"], e2e.PORT)  # reached once the Egress is back
    body = e2e.ok(e2e.create_workspace(agent, ws.path, e2e.policy(*((ids[n], [dst[n] + "/32"]) for n in ids))))
    workspace = body["workspace"]
    wid = e2e.field(workspace, "workspace_id")
    e2e.wait_applied(agent, wid, 1, ids["good"], 1)

    # A dial nothing answers, twice: counted by cause, shown with its time and count.
    before = time.time()
    for _ in range(2):
        ok, line = e2e.dp.guest(lab, ws, "expect-reset", dst["dead"], e2e.PORT, timeout=60)
        assert ok, line
    e = egress_entry(agent, wid, ids["dead"])
    assert e2e.field(e, "last_error").startswith(f"dial failed: connect {lab.socks_v4}:1999: "), e
    assert e2e.num(e, "consecutive_failures") == 2, e
    at = e2e.field(e, "last_error_time")
    assert at and before - 1 <= time.mktime(time.strptime(at[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone \
        <= time.time() + 1, at
    expect_only(dial_failures(counters(e)), connect=2)
    expect_only(closed(counters(e)), dial_failed=2)
    # Both failures came within the log budget's 10 s: one line, the second held back.
    lines = [ln for ln in agent.log().splitlines() if f"egress {ids['dead']}: dial failed" in ln]
    assert len(lines) == 1, lines
    # The Egress comes back (a new revision at dante): the next success clears
    # last_error; the counters keep the history.
    # Back at a dante that checks credentials (RFC 1929): never in the access log.
    e2e.dp.start_dante_with_user(lab, "kibacct", "pw-secret-42", port=1082)
    dead = e2e.ok(e2e.call(agent, e2e.EGRESS + "UpdateEgress", {
        "commandId": e2e.command_id("update-egress"), "egressId": ids["dead"], "expectedRevision": "1",
        "spec": {"socks5": {"address": f"{lab.socks_v4}:1082", "username": "kibacct", "password": "pw-secret-42"}}}))
    e2e.wait_applied(agent, wid, 1, ids["dead"], 2)
    assert e2e.peer(lab, ws, dst["dead"]) == lab.socks_inet_v4
    e = egress_entry(agent, wid, ids["dead"])
    assert not e2e.field(e, "last_error") and not e2e.field(e, "last_error_time"), e
    assert e2e.num(e, "consecutive_failures") == 0, e
    expect_only(dial_failures(counters(e)), connect=2)
    ended = closed(counters(e))
    # PEER: the server answers and closes while the guest closes on reading: either end first.
    assert ended.pop("guest_closed") + ended.pop("upstream_closed") == 1, ended
    expect_only(ended, dial_failed=2)

    # A guest that resets while its dial waits (the server never answers; the handshake
    # timeout is 20 s) stops counting at once.
    assert guest_python(lab, ws, RESET_WHILE_DIALING, dst["never"], e2e.PORT, 0.5) == "RESET SENT"
    reset_at = time.monotonic()
    e2e.labmod.wait_for(lambda: closed(counters(egress_entry(agent, wid, ids["never"])))["guest_reset"] == 1,
                        timeout=5, what="the reset while dialing to end the connection")
    assert time.monotonic() - reset_at < 2.0
    e = egress_entry(agent, wid, ids["never"])
    assert e2e.num(e, "active_connections") == 0, e
    expect_only(dial_failures(counters(e)))  # not the Egress's failure

    # The Egress answers, then resets the established connection: a failure too.
    ok, line = e2e.dp.guest(lab, ws, "expect-reset", dst["rst"], e2e.PORT, timeout=60)
    assert ok, line
    e = e2e.labmod.wait_for(lambda: (lambda x: x if closed(counters(x))["upstream_reset"] == 1 else None)(
        egress_entry(agent, wid, ids["rst"])), timeout=5, what="the reset after the dial to count")
    assert "reset by the Egress" in e2e.field(e, "last_error"), e
    assert e2e.num(e, "consecutive_failures") == 1, e
    expect_only(dial_failures(counters(e)))

    # Idle for the idle timeout (3 s): reset by the agent.
    how, after = guest_python(lab, ws, HOLD_UNTIL_CLOSED, dst["good"], e2e.PORT).split()
    assert how == "reset" and 2.5 <= float(after) <= 8, (how, after)
    e2e.labmod.wait_for(lambda: closed(counters(egress_entry(agent, wid, ids["good"])))["idle_timeout"] == 1,
                        timeout=5, what="the idle timeout to count")

    # A new revision (another server: an identical spec is no new revision) with drain
    # 0: the ticker's connection ends at once.
    ticker = e2e.dp.start_ticker(lab, ws, dst["good"], e2e.PORT, 20)

    def ticking():  # relayed, and the server's ticks reach the guest
        cs = e2e.field(e2e.ok(e2e.call(agent, e2e.WORKSPACE + "ListConnections", {"workspaceId": wid})),
                       "connections", []) or []
        return any(e2e.num(c, "bytes_to_guest") > 0 for c in cs)
    e2e.labmod.wait_for(ticking, timeout=10, what="the ticker's connection to relay")
    good = e2e.update_egress(agent, good, f"{lab.socks_v4}:1092", drain_seconds=0)
    how, _ = e2e.dp.ticker_end(ticker)
    assert how == "reset", how
    e2e.labmod.wait_for(lambda: closed(counters(egress_entry(agent, wid, ids["good"])))["drain_deadline"] == 1,
                        timeout=5, what="the drain deadline to count")

    # /metrics says what status says, per reason and cause.
    samples = agent.metrics()
    for name in ids:
        c = counters(egress_entry(agent, wid, ids[name]))
        labels = {"workspace_id": wid, "egress_id": ids[name]}
        for reason, n in closed(c).items():
            assert metric(samples, "kibotos_egress_connections_closed_total", reason=reason, **labels) == n
        for cause, n in dial_failures(c).items():
            assert metric(samples, "kibotos_egress_dial_failures_by_cause_total", cause=cause, **labels) == n

    # The hostile Egresses leave the policy and are deleted: their series leave
    # /metrics; the Workspace's totals keep their counts.
    totals_before = counters(e2e.policy_status(agent, wid))
    workspace = e2e.update_policy(agent, workspace, e2e.policy((ids["good"], [dst["good"] + "/32"])))
    e2e.wait_applied(agent, wid, 2)
    for name in ("never", "rst"):
        assert e2e.delete_egress(agent, ids[name])[0] == 200
    text = agent.get("/metrics")[2]
    for name in ("never", "rst"):
        assert f'egress_id="{ids[name]}"' not in text, name
    assert f'egress_id="{ids["good"]}"' in text
    totals = counters(e2e.policy_status(agent, wid))
    assert closed(totals)["upstream_reset"] == closed(totals_before)["upstream_reset"] == 1, totals
    assert closed(totals)["guest_reset"] == 1, totals
    assert parse_metrics(text)  # still well formed

    # The access log has a line per connection, each reason with its facts.
    import json
    text = open(access_path).read()
    assert "pw-secret-42" not in text
    lines = [json.loads(ln) for ln in text.splitlines()]
    assert all(ln["workspace_id"] == wid and ln["guest"].startswith(ws.guest_v4 + ":") for ln in lines), lines
    by = {}
    for ln in lines:
        by.setdefault(ln["close_reason"], []).append(ln)
    failed = by["dial_failed"]
    assert len(failed) == 2 and {ln["dial_cause"] for ln in failed} == {"connect"}, failed
    assert all(ln["egress_id"] == ids["dead"] and ln["egress_revision"] == 1 and "connect" in ln["error"] and
               ln["destination"] == f"{dst['dead']}:{e2e.PORT}" for ln in failed), failed
    assert [ln["egress_id"] for ln in by["guest_reset"]] == [ids["never"]], by["guest_reset"]
    assert [ln["egress_id"] for ln in by["upstream_reset"]] == [ids["rst"]], by["upstream_reset"]
    [idle] = by["idle_timeout"]
    assert idle["egress_id"] == ids["good"] and 2500 <= idle["duration_ms"] <= 8000, idle
    assert idle["bytes_from_guest"] == len(b"HOLD\n") and idle["bytes_to_guest"] == len(b"HELD\n"), idle
    [drained] = by["drain_deadline"]
    assert drained["egress_revision"] == 1 and drained["bytes_to_guest"] > 0, drained
    assert not any("dial_cause" in ln for r, group in by.items() if r != "dial_failed" for ln in group)
    samples = agent.metrics()
    assert metric(samples, "kibotos_access_log_lines_total") == len(lines)
    assert metric(samples, "kibotos_access_log_dropped_total") == 0

    # The events of a Workspace's life are logged at info.
    assert e2e.ok(e2e.delete_workspace(agent, wid)) is not None
    log = agent.log()
    assert re.search(rf"workspace {wid}: attached to {re.escape(ws.path)} with policy revision 1", log), log[-3000:]
    assert f"workspace {wid}: policy revision 2 applied" in log
    assert f"workspace {wid}: detached (its rules removed)" in log
    assert f"egress {ids['rst']}: an established connection was reset by the Egress" in log
    e2e.assert_clean_exit(agent)
