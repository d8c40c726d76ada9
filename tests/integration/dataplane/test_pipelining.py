"""SOCKS5 pipelining: each Egress revision's server is asked once whether it reads
the requests sent together with the greeting; dials then send them at once (one round
trip less), or wait for each reply. Real dante and microsocks, and a server that
reports how each handshake arrived."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dp_fixtures as dp  # noqa: E402

dp.labmod.require_root()

PORT = 9000
READS = "reads requests sent with the greeting"
DOES_NOT = "does not read requests sent with the greeting"


@pytest.fixture
def lab():
    with dp.labmod.Lab() as lab:
        yield lab


def attach(h, lab, ws):
    h.cmd(f"workspace w{ws.index} {ws.path} 0 1 e1={lab.internet_v4_cidr}")


def start_fake(lab, mode, port=1090):
    lab.popen(lab.socks, dp.PYTHON, os.path.join(dp.HERE, "fake_socks.py"), lab.socks_v4, port, mode)
    dp.labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                       timeout=10, what="fake SOCKS server listening")
    return port


def start_dante(lab, auth):
    if not auth:
        dp.start_dante(lab)
        return f"{lab.socks_v4}:1080"
    dp.start_dante_with_user(lab, "kibuser", "s3cret", port=1082)
    return f"{lab.socks_v4}:1082 user=kibuser pass=s3cret"


def start_microsocks(lab, auth):
    if not auth:
        dp.start_microsocks(lab, 1081)
        return f"{lab.socks_v4}:1081"
    dp.start_microsocks(lab, 1081, user="u1", password="p1")
    return f"{lab.socks_v4}:1081 user=u1 pass=p1"


# dante 1.4.2 reads them; microsocks 1.0.3 reads one message per recv() and drops the
# rest, so its dials must wait for each reply. Either way every dial works.
@pytest.mark.parametrize("server,verdict", [(start_dante, READS), (start_microsocks, DOES_NOT)],
                         ids=["dante", "microsocks"])
@pytest.mark.parametrize("auth", [False, True], ids=["no-auth", "user-password"])
def test_the_servers_verdict_is_learned_and_its_dials_work(lab, server, verdict, auth):
    ws = lab.add_workspace()
    dst = lab.internet_v4(10)
    dp.start_bulk_server(lab, dst, PORT)
    h = dp.Harness(lab)
    h.cmd(f"egress e1 1 0 {server(lab, auth)}")
    assert "egress e1 revision 1" in h.wait_log(verdict)
    attach(h, lab, ws)
    for _ in range(3):
        ok, line = dp.guest(lab, ws, "peer", dst, PORT)
        assert ok and line == f"PEER {lab.socks_inet_v4}", line


def test_once_the_server_is_known_to_read_them_the_connect_goes_with_the_greeting(lab):
    ws = lab.add_workspace()
    port = start_fake(lab, "careful")
    h = dp.Harness(lab)
    # Dials before the answer (none here) and after a new revision's own probe.
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:{port}")
    h.wait_log(READS)
    attach(h, lab, ws)
    assert lab.tcp_request(ws.guest, lab.internet_v4(10), PORT, timeout=5) == (True, "FAKE pipelined")


def test_a_server_that_no_longer_reads_them_is_dialed_one_request_at_a_time(lab):
    """It answered the probe, then drops a dial's CONNECT: that dial fails (handshake
    timeout, the guest reset, status says why) and the revision's later dials wait
    for each reply."""
    ws = lab.add_workspace()
    port = start_fake(lab, "greedy")
    h = dp.Harness(lab, "--handshake-timeout", 2)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:{port}")
    h.wait_log(READS)
    attach(h, lab, ws)
    ok, line = lab.tcp_request(ws.guest, lab.internet_v4(10), PORT, timeout=6)
    assert not ok, line
    assert "answered the greeting only" in h.egress_status(f"w{ws.index}", "e1")["last_error"]
    assert lab.tcp_request(ws.guest, lab.internet_v4(10), PORT, timeout=5) == (True, "FAKE sequential")
