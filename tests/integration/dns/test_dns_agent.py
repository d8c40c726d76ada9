"""The guest's DNS through the real kibotos-agent and its API: Egress with
udp_enabled, a Workspace whose policy has resolvers, dig in the guest (the data-plane
runtime drives kib::dns::DnsService)."""
import itertools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dns_fixtures as dx  # noqa: E402

dx.labmod.require_root()

_ids = itertools.count(1)


def call(agent, method, request):
    request = dict(request, command_id=f"dns-test-{os.getpid()}-{next(_ids)}")
    status, body = agent.call(method, request)
    assert status == 200, (method, status, body)
    return body


@pytest.fixture
def env(agent_factory):
    with dx.labmod.Lab() as lab:
        ws = lab.add_workspace()
        dx.route_root_to_inet(lab)
        up4 = lab.internet_v4(53)
        upstream = dx.Dnsmasq(lab, [up4])
        agent = agent_factory(config={"egress": {"allowed_special_purpose_cidrs": ["10.0.0.0/8", "fd00::/8"]}})
        yield lab, ws, agent, upstream, up4


def create_workspace(agent, ws, resolvers):
    return call(agent, "kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", {
        "netns": ws.path,
        "network_policy": {"mode": "NETWORK_MODE_PUBLIC_INTERNET", "resolvers": resolvers},
    })["workspace"]


def create_egress(agent, address, udp_enabled=True):
    egress = call(agent, "kibotos.ctrl.v1.EgressService/CreateEgress", {
        "spec": {"socks5": {"address": address}, "udp_enabled": udp_enabled},
    })["egress"]
    return egress.get("egressId", egress.get("egress_id"))


def test_dig_through_the_agent_without_egress(env):
    lab, ws, agent, upstream, up4 = env
    create_workspace(agent, ws, [{"udp": {"address": f"{up4}:53"}}])
    assert dx.dig_short(lab, ws, lab.internet_v4(99), dx.TEST_NAME) == dx.TEST_V4
    assert dx.dig_short(lab, ws, lab.internet_v4(99), dx.TEST_NAME, tcp=True) == dx.TEST_V4


def test_dig_through_the_agent_with_udp_associate(env):
    lab, ws, agent, upstream, up4 = env
    dx.start_dante_udp(lab, 1080)
    egress = create_egress(agent, f"{lab.socks_v4}:1080")
    create_workspace(agent, ws, [{"udp": {"address": f"{up4}:53"}, "egress_id": egress}])
    assert dx.dig_short(lab, ws, lab.internet_v4(99), dx.TEST_NAME) == dx.TEST_V4
    assert set(upstream.clients()) == {lab.socks_inet_v4}


def test_dig_through_the_agent_with_a_tcp_resolver_over_connect(env):
    lab, ws, agent, upstream, up4 = env
    dx.start_dante_udp(lab, 1080)
    egress = create_egress(agent, f"{lab.socks_v4}:1080", udp_enabled=False)
    create_workspace(agent, ws, [{"tcp": {"address": f"{up4}:53"}, "egress_id": egress}])
    assert dx.dig_short(lab, ws, lab.internet_v4(99), dx.TEST_NAME) == dx.TEST_V4
    assert set(upstream.clients()) == {lab.socks_inet_v4}


def test_udp_resolver_through_an_egress_without_udp_enabled_is_refused(env):
    lab, ws, agent, upstream, up4 = env
    egress = create_egress(agent, f"{lab.socks_v4}:1080", udp_enabled=False)
    status, body = agent.call("kibotos.ctrl.v1.WorkspaceService/CreateWorkspace", {
        "command_id": f"dns-test-{os.getpid()}-refused",
        "netns": ws.path,
        "network_policy": {"mode": "NETWORK_MODE_PUBLIC_INTERNET",
                           "resolvers": [{"udp": {"address": f"{up4}:53"}, "egress_id": egress}]},
    })
    assert body.get("code") == "failed_precondition", (status, body)
