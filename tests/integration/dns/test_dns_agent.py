"""The guest's DNS through the real kibotos-agent and its API: Egress with
udp_enabled, a Workspace whose policy has resolvers, dig in the guest (the data-plane
runtime drives kib::dns::DnsService)."""
import itertools
import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dns_fixtures as dx  # noqa: E402
from kibotos_agent import metric  # noqa: E402

dx.labmod.require_root()

_ids = itertools.count(1)


def call(agent, method, request):
    request = dict(request, command_id=f"dns-test-{os.getpid()}-{next(_ids)}")
    status, body = agent.call(method, request)
    assert status == 200, (method, status, body)
    return body


LAB_CONFIG = {"egress": {"allowed_special_purpose_cidrs": ["10.0.0.0/8", "fd00::/8"]}}
# DNS limits from the config file (not the defaults), so status shows they arrived.
MAX_IN_FLIGHT = 123
DNS_CONFIG = dict(LAB_CONFIG, dns={"max_in_flight": MAX_IN_FLIGHT, "query_timeout": "1s"})


def make_env(agent_factory, config):
    with dx.labmod.Lab() as lab:
        ws = lab.add_workspace()
        dx.route_root_to_inet(lab)
        up4 = lab.internet_v4(53)
        upstream = dx.Dnsmasq(lab, [up4])
        agent = agent_factory(config=config)
        yield lab, ws, agent, upstream, up4


@pytest.fixture
def env(agent_factory):
    yield from make_env(agent_factory, LAB_CONFIG)


@pytest.fixture
def dns_env(agent_factory):
    yield from make_env(agent_factory, DNS_CONFIG)


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


# -- network_policy_status.dns ---------------------------------------------------------
def field(obj, name, default=None):
    """A proto3 JSON field by its proto name or its lowerCamelCase JSON name."""
    if not isinstance(obj, dict):
        return default
    if name in obj:
        return obj[name]
    head, *rest = name.split("_")
    return obj.get(head + "".join(p[:1].upper() + p[1:] for p in rest), default)


def num(obj, name):
    """A uint64/uint32 field (proto3 JSON writes uint64 as a string and omits zero)."""
    return int(field(obj, name, 0) or 0)


def workspace_id(ws_resource):
    return field(ws_resource, "workspace_id")


def policy_status(agent, wid):
    status, body = agent.call("kibotos.ctrl.v1.WorkspaceService/GetWorkspace", {"workspace_id": wid})
    assert status == 200, (status, body)
    got = body["workspace"]
    return field(got, "network_policy_status", {}) or {}


def dns_status(agent, wid):
    return field(policy_status(agent, wid), "dns")


def failures(dns):
    return {k: int(v) for k, v in (field(dns, "failures", {}) or {}).items()}


def kibotosctl_json(agent, *args):
    binary = os.path.join(dx.BUILD, "agent", "ctl", "kibotosctl")
    p = subprocess.run([binary, "--socket", agent.socket_path, "-o", "json", *args], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return json.loads(p.stdout)


def test_status_counts_queries_and_answers_and_shows_the_association(dns_env):
    lab, ws, agent, upstream, up4 = dns_env
    dx.start_dante_udp(lab, 1080)
    egress = create_egress(agent, f"{lab.socks_v4}:1080")
    wid = workspace_id(create_workspace(agent, ws, [{"udp": {"address": f"{up4}:53"}, "egress_id": egress}]))
    for _ in range(3):
        assert dx.dig_short(lab, ws, lab.internet_v4(99), dx.TEST_NAME) == dx.TEST_V4
    dns = dx.labmod.wait_for(lambda: (d := dns_status(agent, wid)) and num(d, "answers") == 3 and d,
                             timeout=10, what="three answers counted")
    assert num(dns, "queries") == 3, dns
    # Three same-size queries and answers, each at least a header and the question;
    # each answer also carries the A record.
    question = 12 + len(dx.TEST_NAME.rstrip(".")) + 2 + 4
    assert num(dns, "query_bytes") % 3 == 0 and num(dns, "query_bytes") >= 3 * question, dns
    assert num(dns, "answer_bytes") % 3 == 0 and num(dns, "answer_bytes") >= 3 * (question + 16), dns
    assert num(dns, "in_flight") == 0, dns
    assert num(dns, "max_in_flight") == MAX_IN_FLIGHT, dns
    assert num(dns, "timeouts") == 0 and num(dns, "failovers") == 0, dns
    assert set(failures(dns).values()) == {0} and "timeout" in failures(dns), dns
    [r] = field(dns, "resolvers")
    assert field(r, "address") == f"{up4}:53", r
    assert field(r, "transport") == "udp", r
    assert field(r, "egress_id") == egress, r
    assert field(r, "state") == "associated", r
    assert field(r, "relay_address"), r
    assert num(r, "egress_revision") == 1, r
    # kibotosctl prints the same field (its output follows the proto).
    shown = kibotosctl_json(agent, "workspace", "status", wid)
    shown = field(shown, "network_policy_status", shown)
    shown_dns = field(shown, "dns")
    assert num(shown_dns, "answers") == 3, shown
    assert field(field(shown_dns, "resolvers")[0], "state") == "associated", shown
    # /metrics has the same counters.
    samples = agent.metrics()
    assert metric(samples, "kibotos_dns_queries_total", workspace_id=wid) == 3, samples
    assert metric(samples, "kibotos_dns_answers_total", workspace_id=wid) == 3, samples
    assert metric(samples, "kibotos_dns_in_flight", workspace_id=wid) == 0, samples
    assert metric(samples, "kibotos_dns_failures_total", workspace_id=wid, reason="timeout") == 0, samples


def egress_entries(agent, wid):
    return {field(e, "egress_id"): e for e in field(policy_status(agent, wid), "egresses", []) or []}


def test_an_egress_only_a_resolver_uses_has_a_status_entry_that_follows_its_updates(env):
    lab, ws, agent, upstream, up4 = env
    dx.start_dante_udp(lab, 1080)
    egress = create_egress(agent, f"{lab.socks_v4}:1080")
    wid = workspace_id(create_workspace(agent, ws, [{"udp": {"address": f"{up4}:53"}, "egress_id": egress}]))
    entry = dx.labmod.wait_for(lambda: egress_entries(agent, wid).get(egress), timeout=10,
                               what="an entry for the resolver's Egress")
    assert num(entry, "applied_revision") == 1, entry
    assert dx.dig_short(lab, ws, lab.internet_v4(99), dx.TEST_NAME) == dx.TEST_V4
    dx.start_dante_udp(lab, 1081)
    call(agent, "kibotos.ctrl.v1.EgressService/UpdateEgress", {
        "egress_id": egress, "expected_revision": 1, "drain_seconds": 0,
        "spec": {"socks5": {"address": f"{lab.socks_v4}:1081"}, "udp_enabled": True}})
    entry = dx.labmod.wait_for(lambda: num(egress_entries(agent, wid).get(egress), "applied_revision") == 2
                               and egress_entries(agent, wid)[egress], timeout=10, what="revision 2 applied")
    assert num(entry, "active_connections") == 0 and num(entry, "draining_connections") == 0, entry
    # The queries now go through revision 2.
    assert dx.dig_short(lab, ws, lab.internet_v4(99), dx.TEST_NAME) == dx.TEST_V4
    [r] = field(dns_status(agent, wid), "resolvers")
    assert num(r, "egress_revision") == 2, r


def test_status_counts_a_black_holed_resolver_as_timeouts(dns_env):
    lab, ws, agent, upstream, up4 = dns_env
    hole = lab.internet_v4(66)
    # Datagrams to the resolver vanish without an ICMP error.
    lab.run(lab.inet, "nft", "-f", "-", input=(
        "table inet kibdnstest {\n chain drop_dns {\n  type filter hook input priority 0;\n"
        f"  ip daddr {hole} udp dport 53 drop\n }}\n}}\n"))
    wid = workspace_id(create_workspace(agent, ws, [{"udp": {"address": f"{hole}:53"}}]))
    rc, out = dx.dig(lab, ws, lab.internet_v4(99), dx.TEST_NAME, timeout=3)
    # Every resolver timed out: the agent answers SERVFAIL itself (not a resolver's answer).
    assert rc == 0 and "status: SERVFAIL" in out, out
    # The configured query timeout (1 s) is shorter than dig's wait (3 s).
    dns = dx.labmod.wait_for(lambda: (d := dns_status(agent, wid)) and failures(d).get("timeout") == 1 and d,
                             timeout=10, what="the timeout counted")
    assert num(dns, "queries") == 1, dns
    assert num(dns, "answers") == 0, dns
    assert num(dns, "timeouts") == 1, dns
    assert num(dns, "in_flight") == 0, dns
    assert sum(failures(dns).values()) == 1, dns
    [r] = field(dns, "resolvers")
    assert field(r, "address") == f"{hole}:53" and field(r, "transport") == "udp", r
    assert not field(r, "egress_id"), r
    assert field(r, "state") == "ready", r
    samples = agent.metrics()
    assert metric(samples, "kibotos_dns_failures_total", workspace_id=wid, reason="timeout") == 1, samples
    assert metric(samples, "kibotos_dns_timeouts_total", workspace_id=wid) == 1, samples
    assert metric(samples, "kibotos_dns_answers_total", workspace_id=wid) == 0, samples


def test_a_policy_without_resolvers_has_no_dns_status(dns_env):
    lab, ws, agent, upstream, up4 = dns_env
    wid = workspace_id(create_workspace(agent, ws, []))
    dx.labmod.wait_for(lambda: num(policy_status(agent, wid), "applied_revision") == 1, timeout=10,
                       what="policy applied")
    assert field(policy_status(agent, wid), "dns") is None
    samples = agent.metrics()
    assert not [k for k in samples if k[0].startswith("kibotos_dns_")], samples


# -- DNS listeners only while the policy has resolvers (issue 26, fds per Workspace) --
def namespace_sockets(lab, ws):
    """(listening TCP, bound UDP) sockets in the Workspace namespace: the agent's
    transparent listeners (nothing else listens there in this lab)."""
    return (lab.run(ws.ws, "ss", "-Hltn").stdout.splitlines(), lab.run(ws.ws, "ss", "-Hlun").stdout.splitlines())


def agent_table(lab, ws):
    return lab.run(ws.ws, "nft", "list", "table", "inet", "kibotos").stdout


def intercepts_dns(table):
    # Port 53 as a whole word: a listener's ephemeral port may begin with 53 (53685).
    return re.search(r"dport 53\b", table) is not None


def update_resolvers(agent, wid, resolvers):
    status, body = agent.call("kibotos.ctrl.v1.WorkspaceService/GetWorkspace", {"workspace_id": wid})
    assert status == 200, (status, body)
    current = body["workspace"]
    revision = num(field(current, "network_policy"), "revision")
    call(agent, "kibotos.ctrl.v1.WorkspaceService/UpdateNetworkPolicy", {
        "workspace_id": wid, "expected_revision": str(revision),
        "network_policy": {"mode": "NETWORK_MODE_PUBLIC_INTERNET", "resolvers": resolvers},
    })
    dx.labmod.wait_for(lambda: num(policy_status(agent, wid), "applied_revision") == revision + 1, timeout=10,
                       what="policy applied")


def test_a_workspace_without_resolvers_holds_no_dns_listener(env):
    lab, ws, agent, upstream, up4 = env
    wid = workspace_id(create_workspace(agent, ws, []))
    dx.labmod.wait_for(lambda: num(policy_status(agent, wid), "applied_revision") == 1, timeout=10,
                       what="policy applied")
    tcp, udp = namespace_sockets(lab, ws)
    assert len(tcp) == 2, tcp  # the relay's, v4 + v6
    assert udp == [], udp
    assert not intercepts_dns(agent_table(lab, ws))


def test_an_update_that_adds_resolvers_serves_dns_and_one_that_removes_them_closes_its_listeners(env):
    lab, ws, agent, upstream, up4 = env
    asked = lab.internet_v4(99)  # nothing answers DNS there but the agent
    wid = workspace_id(create_workspace(agent, ws, []))
    dx.labmod.wait_for(lambda: num(policy_status(agent, wid), "applied_revision") == 1, timeout=10,
                       what="policy applied")
    assert dx.dig_short(lab, ws, asked, dx.TEST_NAME, timeout=1).startswith("rc=")

    update_resolvers(agent, wid, [{"udp": {"address": f"{up4}:53"}}])
    tcp, udp = namespace_sockets(lab, ws)
    assert len(tcp) == 4 and len(udp) == 2, (tcp, udp)  # relay + DNS/TCP, DNS/UDP; v4 + v6 each
    assert dx.dig_short(lab, ws, asked, dx.TEST_NAME) == dx.TEST_V4
    assert dx.dig_short(lab, ws, asked, dx.TEST_NAME, tcp=True) == dx.TEST_V4
    assert num(dns_status(agent, wid), "answers") == 2

    update_resolvers(agent, wid, [])
    assert not intercepts_dns(agent_table(lab, ws))
    # The DNS service closes them on its loop right after the rules stop pointing at them.
    dx.labmod.wait_for(lambda: namespace_sockets(lab, ws)[1] == [], timeout=5, what="DNS/UDP listeners closed")
    tcp, udp = namespace_sockets(lab, ws)
    assert len(tcp) == 2, tcp
    assert dns_status(agent, wid) is None
    assert dx.dig_short(lab, ws, asked, dx.TEST_NAME, timeout=1).startswith("rc=")

    # Back again: new listeners, DNS answered again.
    update_resolvers(agent, wid, [{"udp": {"address": f"{up4}:53"}}])
    assert dx.dig_short(lab, ws, asked, dx.TEST_NAME) == dx.TEST_V4
