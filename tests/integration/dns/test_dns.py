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
