"""A guest's TCP connection, intercepted in its Workspace namespace, relayed through
a SOCKS5 Egress (dante, microsocks) end to end."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dp_fixtures as dp  # noqa: E402

dp.labmod.require_root()


@pytest.fixture
def lab():
    with dp.labmod.Lab() as lab:
        yield lab


def attach(h, lab, ws, egress="e1", drain=0, rev=1):
    h.cmd(f"workspace w{ws.index} {ws.path} {drain} {rev} {egress}={lab.internet_v4_cidr}")


def test_curl_through_dante_reaches_http_server(lab):
    ws = lab.add_workspace()
    dp.start_dante(lab)
    lab.start_http_server(lab.inet, lab.internet_v4(10), 8080, directory=os.path.dirname(__file__))
    h = dp.Harness(lab)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    attach(h, lab, ws)
    rc, body, err = dp.guest_curl(lab, ws, f"http://{lab.internet_v4(10)}:8080/test_relay.py")
    assert rc == 0, err
    assert "curl_through_dante" in body


def test_server_sees_the_socks_server_not_the_guest(lab):
    ws = lab.add_workspace()
    dp.start_dante(lab)
    dp.peer_echo_server(lab, lab.internet_v4(11), 9000)
    h = dp.Harness(lab)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    attach(h, lab, ws)
    ok, line = lab.tcp_request(ws.guest, lab.internet_v4(11), 9000)
    assert ok, line
    assert line == f"PEER {lab.socks_inet_v4}"
