"""Revision swap and drain, as the reference says: new connections take the newest
revision at once; connections through older revisions close at now + drain_seconds
(0 = at once); an earlier deadline is kept; DeleteEgress closes draining ones."""
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dp_fixtures as dp  # noqa: E402

dp.labmod.require_root()

PORT = 9000


@pytest.fixture
def env():
    with dp.labmod.Lab() as lab:
        ws = lab.add_workspace()
        dst = lab.internet_v4(10)
        dp.start_bulk_server(lab, dst, PORT)
        # Two SOCKS servers leaving from different addresses, so the destination
        # shows which one carried a connection.
        second_out = lab.socks_inet_v4.rsplit(".", 1)[0] + ".3"
        lab.run(lab.socks, "ip", "addr", "add", f"{second_out}/28", "dev", "inet0")
        dp.start_dante(lab, 1080)
        proc = lab.popen(lab.socks, "/usr/bin/microsocks", "-i", lab.socks_v4, "-p", "1081", "-b", second_out)
        dp.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, 1081, timeout=0.5, read=False)[0])
        assert proc.poll() is None
        h = dp.Harness(lab)
        h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
        h.cmd(f"workspace w0 {ws.path} 0 1 e1={lab.internet_v4_cidr}")
        yield lab, ws, h, dst, second_out


def start_ticker(lab, ws, dst, seconds=30):
    return dp.start_ticker(lab, ws, dst, PORT, seconds)


ended = dp.ticker_end


def peer(lab, ws, dst):
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok, line
    return line.split()[1]


def test_update_sends_new_connections_to_the_new_revision_and_drains_old_ones(env):
    lab, ws, h, dst, second_out = env
    assert peer(lab, ws, dst) == lab.socks_inet_v4
    ticker = start_ticker(lab, ws, dst)
    t0 = time.monotonic()
    h.cmd(f"egress e1 2 3 {lab.socks_v4}:1081")
    assert peer(lab, ws, dst) == second_out  # at once
    dp.wait_for(lambda: h.egress_status("w0", "e1").get("applied_revision") == "2", what="applied 2")
    st = h.egress_status("w0", "e1")
    assert st["draining_connections"] == "1", st
    how, at = ended(ticker)
    assert how in ("reset", "eof"), how
    assert 2.5 <= at - t0 <= 6.0, at - t0
    dp.wait_for(lambda: h.egress_status("w0", "e1").get("draining_connections") == "0", what="drained")


def test_drain_zero_closes_old_connections_at_once(env):
    lab, ws, h, dst, second_out = env
    ticker = start_ticker(lab, ws, dst)
    t0 = time.monotonic()
    h.cmd(f"egress e1 2 0 {lab.socks_v4}:1081")
    how, at = ended(ticker)
    assert how in ("reset", "eof"), how
    assert at - t0 <= 1.5, at - t0


def test_a_second_update_keeps_the_first_deadline(env):
    lab, ws, h, dst, second_out = env
    ticker = start_ticker(lab, ws, dst)
    t0 = time.monotonic()
    h.cmd(f"egress e1 2 3 {lab.socks_v4}:1081")
    h.cmd(f"egress e1 3 60 {lab.socks_v4}:1080")
    how, at = ended(ticker)
    assert how in ("reset", "eof"), how
    assert 2.5 <= at - t0 <= 6.0, at - t0


def test_delete_egress_closes_its_draining_connections_at_once(env):
    lab, ws, h, dst, second_out = env
    ticker = start_ticker(lab, ws, dst)
    h.cmd(f"egress e2 1 0 {lab.socks_v4}:1081")
    # The policy stops referencing e1: its connection drains for 600 s...
    h.cmd(f"workspace w0 {ws.path} 600 2 e2={lab.internet_v4_cidr}")
    dp.wait_for(lambda: h.egress_status("w0", "e2") != {} and h.status("w0").get("applied_revision") == "2")
    assert peer(lab, ws, dst) == second_out
    t0 = time.monotonic()
    h.cmd("delete-egress e1")  # ...until the Egress is deleted.
    how, at = ended(ticker)
    assert how in ("reset", "eof"), how
    assert at - t0 <= 1.5, at - t0


def test_policy_update_drains_connections_routed_elsewhere_with_its_drain_seconds(env):
    lab, ws, h, dst, second_out = env
    ticker = start_ticker(lab, ws, dst)
    h.cmd(f"egress e2 1 0 {lab.socks_v4}:1081")
    t0 = time.monotonic()
    h.cmd(f"workspace w0 {ws.path} 2 2 e2={lab.internet_v4_cidr}")
    how, at = ended(ticker)
    assert how in ("reset", "eof"), how
    assert 1.5 <= at - t0 <= 5.0, at - t0
