"""Address families with the real agent (issue 26, "Namespaces as real hosts have
them"): a Workspace namespace with IPv6 disabled is enforced for IPv4 (its covered
traffic goes through the Egress) and its status says so without an error; IPv6
turned on later is enforced within seconds by the repair; a namespace carrying both
families has both enforced. Root only; the lab is removed even on failure."""
import time

import e2e_env as e2e
from test_guest_through_egress import start_dual_stack_dante

# The repair runs every 2 s; a change is enforced at the next pass.
PICKUP_TIMEOUT = 10


def families(agent, workspace_id):
    st = e2e.policy_status(agent, workspace_id)
    return e2e.field(st, "enforced_families", []) or [], e2e.field(st, "error") or None


def disable_ipv6(lab, ws):
    lab.run(ws.ws, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")


def enable_ipv6(lab, ws):
    """IPv6 back on in the Workspace namespace, with what turning it off removed there
    (its addresses, the default route), as the guest's network setup would."""
    lab.run(ws.ws, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=0")
    lab.run(ws.ws, "ip", "addr", "replace", f"{ws.ws_v6}/64", "dev", "guest0", "nodad")
    lab.run(ws.ws, "ip", "addr", "replace", f"{ws.uplink_v6}/64", "dev", "inet0", "nodad")
    lab.run(ws.ws, "ip", "-6", "route", "replace", "default", "via", ws.inet_side_v6)
    lab.settle(ws.ws)


def dual_stack_workspace(env):
    """An Egress (dual-stack dante) and a Workspace covering the v4 COVERED address and
    the lab's IPv6 internet; returns (workspace id, covered IPv6 destination)."""
    lab, agent = env.lab, env.agent
    dst6 = lab.internet_v6(10)
    lab._ensure_bindable(lab.inet, dst6)
    e2e.dp.start_bulk_server(lab, dst6, e2e.PORT)
    start_dual_stack_dante(lab, 1083)
    egress = e2e.create_egress(agent, f"{lab.socks_v4}:1083")
    eid = e2e.field(egress, "egress_id")
    pol = e2e.policy((eid, [e2e.covered(lab) + "/32", lab.internet_v6_cidr]))
    wid = e2e.field(e2e.ok(e2e.create_workspace(agent, env.ws.path, pol))["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, eid, 1)
    return wid, dst6


def test_a_namespace_with_ipv6_disabled_is_enforced_for_ipv4_without_error(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    disable_ipv6(lab, ws)
    _, workspace = e2e.attach(env)  # waits for the revision applied with no error
    wid = e2e.field(workspace, "workspace_id")
    assert families(agent, wid) == (["ipv4"], None)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4
    # Repair passes find nothing to put back: the status stays clean (it used to say
    # "add local route ipv6: No Access" with the attach retried forever).
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert families(agent, wid) == (["ipv4"], None)
        time.sleep(0.5)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4


def test_ipv6_enabled_later_is_enforced_within_seconds(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    disable_ipv6(lab, ws)
    wid, dst6 = dual_stack_workspace(env)
    assert families(agent, wid) == (["ipv4"], None)
    enable_ipv6(lab, ws)
    e2e.labmod.wait_for(lambda: families(agent, wid) == (["ipv4", "ipv6"], None), timeout=PICKUP_TIMEOUT,
                        what="ipv6 enforced after it was enabled")
    assert e2e.peer(lab, ws, dst6) == lab.socks_inet_v6, e2e.policy_status(agent, wid)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4


def test_a_namespace_with_both_families_has_both_enforced(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    wid, dst6 = dual_stack_workspace(env)
    assert families(agent, wid) == (["ipv4", "ipv6"], None)
    assert e2e.peer(lab, ws, dst6) == lab.socks_inet_v6
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
