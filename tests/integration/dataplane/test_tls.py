"""SOCKS5 inside TLS: stunnel (certificate from a CA the test generates) in front of
dante. Verification against ca_cert and the server name, or the IP literal."""
import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dp_fixtures as dp  # noqa: E402

dp.labmod.require_root()

PORT = 9000


@pytest.fixture
def env():
    with dp.labmod.Lab() as lab, tempfile.TemporaryDirectory(prefix="kib-tls-") as tmp:
        ws = lab.add_workspace()
        dst = lab.internet_v4(10)
        dp.start_bulk_server(lab, dst, PORT)
        dp.start_dante(lab)
        ca_key, ca_pem = dp.make_ca(tmp, "kib-test-ca")
        key, pem = dp.make_server_cert(tmp, ca_key, ca_pem, f"DNS:socks.test,IP:{lab.socks_v4}")
        dp.start_stunnel(lab, tmp, key, pem, 1443, 1080, log=os.path.join(tmp, "stunnel.log"))
        h = dp.Harness(lab)
        yield lab, ws, h, dst, tmp, ca_pem


def attach(h, lab, ws):
    h.cmd(f"workspace w{ws.index} {ws.path} 0 1 e1={lab.internet_v4_cidr}")


def test_tls_with_ca_cert_and_server_name(env):
    lab, ws, h, dst, tmp, ca_pem = env
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1443 tls sni=socks.test ca={ca_pem}")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok and line == f"PEER {lab.socks_inet_v4}", line


def test_tls_ip_literal_endpoint_is_verified_against_its_ip(env):
    lab, ws, h, dst, tmp, ca_pem = env
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1443 tls ca={ca_pem}")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok and line == f"PEER {lab.socks_inet_v4}", line


def test_tls_bulk_both_ways(env):
    lab, ws, h, dst, tmp, ca_pem = env
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1443 tls sni=socks.test ca={ca_pem}")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "up", dst, PORT, 64)
    assert ok, line
    ok, line = dp.guest(lab, ws, "down", dst, PORT, 64)
    assert ok, line


def test_tls_wrong_ca_resets_the_guest(env):
    lab, ws, h, dst, tmp, ca_pem = env
    _, other_ca = dp.make_ca(tmp, "other-ca")
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1443 tls sni=socks.test ca={other_ca}")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "expect-reset", dst, PORT)
    assert ok, line
    assert "verify" in h.egress_status("w0", "e1")["last_error"]


def test_tls_wrong_server_name_resets_the_guest(env):
    lab, ws, h, dst, tmp, ca_pem = env
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1443 tls sni=wrong.test ca={ca_pem}")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "expect-reset", dst, PORT)
    assert ok, line
    assert "verify" in h.egress_status("w0", "e1")["last_error"]


def handshakes(tmp):
    """stunnel's count of (full handshakes, resumptions) so far."""
    with open(os.path.join(tmp, "stunnel.log")) as f:
        text = f.read()
    return text.count("new session negotiated"), text.count("previous session reused")


def test_tls_a_burst_of_dials_resumes_on_the_tickets_the_first_dial_brought(env):
    """Through stunnel, end to end (its info-level log counts the handshakes): the
    first dial of a revision makes a full handshake and brings two tickets; a burst
    of four dials then all resume: two on a ticket each, two on copies of the one
    handed out last (stunnel's tickets are reusable), however the dials interleave
    with the first resumptions completing (each resumption spends only its copy)."""
    lab, ws, h, dst, tmp, ca_pem = env
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1443 tls sni=socks.test ca={ca_pem}")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "many", dst, PORT, 1)
    assert ok, line
    dp.labmod.wait_for(lambda: sum(handshakes(tmp)) == 1, timeout=10, what="stunnel's first handshake")
    assert handshakes(tmp) == (1, 0)
    ok, line = dp.guest(lab, ws, "many", dst, PORT, 4)
    assert ok, line
    dp.labmod.wait_for(lambda: sum(handshakes(tmp)) == 5, timeout=10, what="stunnel's next 4 handshakes")
    assert handshakes(tmp) == (1, 4)
