"""Workspace lifecycle with the real agent: fail closed when it is killed, re-attach
on restart from the same state dir, and DeleteWorkspace leaving the namespace exactly
as it was while closing the relayed connections."""
import contextlib
import os
import signal
import sqlite3
import subprocess
import time

import pytest

import e2e_env as e2e

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


@contextlib.contextmanager
def second_path(tmp_path, netns):
    """Another path to a namespace (a bind mount), as a Workspace's netns; unmounted
    lazily at the end (the agent may still hold the namespace open through it)."""
    alias = tmp_path / "netns"
    alias.touch()
    subprocess.run(["mount", "--bind", netns, str(alias)], check=True)
    try:
        yield alias
    finally:
        subprocess.run(["umount", "-l", str(alias)], capture_output=True)


def repoint(alias, netns):
    """The path names another namespace now (None: nothing). Lazily unmounted, as
    `ip netns del` does: the agent may hold the namespace open through the path."""
    subprocess.run(["umount", "-l", str(alias)], check=True)
    if netns:
        subprocess.run(["mount", "--bind", netns, str(alias)], check=True)


def attach_at(env, *paths):
    """An Egress to dante, then a Workspace at each path routing the covered
    destination through it, applied. Returns (egress_id, policy, workspace ids)."""
    eid = e2e.field(e2e.create_egress(env.agent, env.socks), "egress_id")
    pol = e2e.policy((eid, [e2e.covered(env.lab) + "/32"]))
    wids = [e2e.field(e2e.ok(e2e.create_workspace(env.agent, str(p), pol))["workspace"], "workspace_id")
            for p in paths]
    for wid in wids:
        e2e.wait_applied(env.agent, wid, 1, eid, 1)
    return eid, pol, wids



# Killed (crash) and stopped cleanly (SIGTERM): in both the table stays and drops.
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_fail_closed_covered_traffic_is_dropped_while_the_agent_is_killed_or_stopped(attached, sig):
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    code = agent.stop(sig)
    assert code == (-sig if sig == signal.SIGKILL else 0), (code, agent.log()[-4000:])
    # "While the agent is stopped, crashed [...] covered traffic must be dropped,
    # never delivered directly": several bounded attempts, none may connect.
    for _ in range(3):
        assert not e2e.reachable(lab, ws, e2e.covered(lab), timeout=2.0)
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_restart_on_the_same_state_dir_reattaches_and_covered_traffic_flows_through_the_egress(attached, sig):
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    installed = e2e.without_listener_ports(lab.kernel_state(ws.ws))
    agent.stop(sig)
    assert not e2e.reachable(lab, ws, e2e.covered(lab), timeout=2.0)
    agent.start()
    e2e.wait_applied(agent, attached.workspace_id, 1, attached.egress_id, 1)
    # Re-attached in place of what the killed agent left: the same rules, once
    # (only the new listeners' ports differ).
    diff = e2e.state_diff(installed, e2e.without_listener_ports(lab.kernel_state(ws.ws)))
    assert not diff, diff
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4
    # The same stored resources, not new ones.
    listed = e2e.ok(e2e.call(agent, e2e.WORKSPACE + "ListWorkspaces", {}))
    assert [e2e.field(w, "workspace_id") for w in e2e.field(listed, "workspaces", [])] == [attached.workspace_id]


def test_rules_removed_behind_the_agents_back_are_put_back(attached):
    """A firewall reload or `nft flush ruleset` in the namespace would let covered
    traffic leave directly: the agent checks every attached namespace each retry
    period (2 s) and puts back the table and the policy routing, as they were."""
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    installed = lab.kernel_state(ws.ws)
    lab.run(ws.ws, "nft", "delete", "table", "inet", "kibotos")
    fwmark = [line for line in installed["rule4"].splitlines() if "fwmark" in line]
    assert len(fwmark) == 1, installed["rule4"]
    lab.run(ws.ws, e2e.labmod.IP, "-4", "rule", "del", "priority", fwmark[0].split(":")[0])
    assert lab.kernel_state(ws.ws) != installed
    e2e.labmod.wait_for(lambda: lab.kernel_state(ws.ws) == installed, timeout=15,
                        what="the table and rule put back")
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4
    assert "changed behind the agent's back" in agent.log()
    assert "error" not in e2e.policy_status(agent, attached.workspace_id)
    # The table still there but emptied (`nft flush table`): covered traffic would
    # leave directly just the same.
    lab.run(ws.ws, "nft", "flush", "table", "inet", "kibotos")
    assert lab.kernel_state(ws.ws) != installed
    e2e.labmod.wait_for(lambda: lab.kernel_state(ws.ws) == installed, timeout=15, what="the rules put back")
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    # With nftables untouched since the table was last found in place (it is then not
    # listed), a removed route is still seen and put back.
    time.sleep(4.5)  # two checks: the one after the repair records the generation
    table = fwmark[0].split("lookup")[1].split()[0]
    lab.run(ws.ws, e2e.labmod.IP, "-4", "route", "del", "local", "default", "dev", "lo", "table", table)
    assert lab.kernel_state(ws.ws) != installed
    e2e.labmod.wait_for(lambda: lab.kernel_state(ws.ws) == installed, timeout=15, what="the route put back")


def host_ruleset():
    """The nftables ruleset of the namespace the agent runs in (the host's, here)."""
    return subprocess.run(["nft", "list", "ruleset"], capture_output=True, text=True, check=True).stdout


def test_the_agents_own_namespace_is_never_attached(env):
    """A /proc/PID/ns/net path whose PID came to name a host process (or a slip of
    the operator's) must not put the agent's rules on the host's own traffic."""
    before = host_ruleset()
    eid = e2e.field(e2e.create_egress(env.agent, env.socks), "egress_id")
    pol = e2e.policy((eid, [e2e.covered(env.lab) + "/32"]))
    own = f"/proc/{env.agent.proc.pid}/ns/net"
    r = e2e.create_workspace(env.agent, own, pol)
    assert e2e.error_code(r) == "failed_precondition"
    assert "agent's own network namespace" in e2e.field(r[1], "message"), r
    assert e2e.field(e2e.ok(e2e.call(env.agent, e2e.WORKSPACE + "ListWorkspaces", {})), "workspaces", []) == []
    assert host_ruleset() == before


def test_a_path_that_comes_to_name_the_agents_own_namespace_is_not_attached_there(env, tmp_path):
    """As a guest's /proc/PID/ns/net after its PID went to a host process: nothing
    is installed there, status says why, and the old namespace keeps its table."""
    lab, agent = env.lab, env.agent
    before = host_ruleset()
    with second_path(tmp_path, env.ws.path) as alias:
        eid, pol, (wid,) = attach_at(env, alias)
        repoint(alias, f"/proc/{agent.proc.pid}/ns/net")
        e2e.labmod.wait_for(lambda: "agent's own network namespace" in
                            (e2e.field(e2e.policy_status(agent, wid), "error") or ""),
                            timeout=10, what="the refusal in status")
        assert not e2e.reachable(lab, env.ws, e2e.covered(lab), timeout=2.0)
        assert host_ruleset() == before
        repoint(alias, None)


def test_delete_workspace_leaves_the_namespace_exactly_as_before_and_closes_relayed_connections(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    before = lab.kernel_state(ws.ws)
    egress, workspace = e2e.attach(env)
    wid = e2e.field(workspace, "workspace_id")
    assert lab.kernel_state(ws.ws) != before  # the agent did install something
    ticker = e2e.start_ticker(lab, ws, e2e.covered(lab))
    e2e.labmod.wait_for(lambda: e2e.num(e2e.egress_status(e2e.policy_status(agent, wid),
                                                          e2e.field(egress, "egress_id")), "active_connections") == 1,
                        timeout=10, what="the relayed connection in status")

    t0 = e2e.now()
    e2e.ok(e2e.delete_workspace(agent, wid))
    how, at = e2e.ticker_end(ticker, timeout=20)
    assert how in ("reset", "eof"), how
    assert at - t0 <= 3.0, at - t0

    diff = e2e.state_diff(before, lab.kernel_state(ws.ws))
    assert not diff, diff
    assert e2e.error_code(e2e.call(agent, e2e.WORKSPACE + "GetWorkspace", {"workspaceId": wid})) == "not_found"
    # With nothing installed, the destination is simply reached directly.
    assert e2e.peer(lab, ws, e2e.covered(lab)) == ws.guest_v4


def attached_then_killed(env):
    """The namespace's kernel state before the agent touched it, then a Workspace
    attached through an Egress and the agent killed (its rules left in the kernel).
    Returns (that state, egress_id, workspace_id)."""
    before = env.lab.kernel_state(env.ws.ws)
    egress, workspace = e2e.attach(env)
    env.agent.stop(signal.SIGKILL)
    return before, e2e.field(egress, "egress_id"), e2e.field(workspace, "workspace_id")


def test_delete_workspace_after_a_restart_still_leaves_the_namespace_exactly_as_before(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    before, eid, wid = attached_then_killed(env)
    agent.start()
    e2e.wait_applied(agent, wid, 1, eid, 1)
    e2e.ok(e2e.delete_workspace(agent, wid))
    diff = e2e.state_diff(before, lab.kernel_state(ws.ws))
    assert not diff, diff


def test_restart_reports_a_vanished_namespace_in_status_and_still_reattaches_the_others(env):
    lab, agent = env.lab, env.agent
    ws0, ws1 = env.ws, lab.add_workspace()
    eid, _, (w0, w1) = attach_at(env, ws0.path, ws1.path)
    agent.stop(signal.SIGKILL)
    lab.run(ws0.ws, "true")  # exists until now
    e2e.labmod._run([e2e.labmod.IP, "netns", "del", ws0.ws])
    agent.start()
    e2e.labmod.wait_for(lambda: e2e.field(e2e.policy_status(agent, w0), "error"), timeout=15,
                        what="an error for the vanished namespace")
    e2e.wait_applied(agent, w1, 1, eid, 1)
    assert e2e.peer(lab, ws1, e2e.covered(lab)) == lab.socks_inet_v4
    # The vanished one can still be deleted.
    e2e.ok(e2e.delete_workspace(agent, w0))


def test_deleting_one_workspace_leaves_the_other_attached(env):
    lab, agent = env.lab, env.agent
    ws0, ws1 = env.ws, lab.add_workspace()
    eid, _, (w0, w1) = attach_at(env, ws0.path, ws1.path)
    ticker = e2e.start_ticker(lab, ws1, e2e.covered(lab))
    try:
        state1 = lab.kernel_state(ws1.ws)
        e2e.ok(e2e.delete_workspace(agent, w0))
        assert e2e.peer(lab, ws0, e2e.covered(lab)) == ws0.guest_v4
        assert e2e.peer(lab, ws1, e2e.covered(lab)) == lab.socks_inet_v4
        assert lab.kernel_state(ws1.ws) == state1
        assert ticker.poll() is None  # ws1's relayed connection still flows
        assert e2e.num(e2e.egress_status(e2e.policy_status(agent, w1), eid), "active_connections") == 1
    finally:
        ticker.kill()
        ticker.wait(timeout=10)


def test_delete_workspace_lets_the_guest_reconnect_at_once_from_a_port_it_used_through_the_egress(attached):
    # Relayed connections the destination ended first leave the agent's side in
    # TIME_WAIT inside the workspace namespace, under the destination's address. Left
    # there after DeleteWorkspace, early demux would pin a routed SYN with the same
    # 4-tuple to that socket and forwarding drops it: the guest could not reconnect
    # from that port for up to 60 s.
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    dst, port, src_port = e2e.covered(lab), 9101, 40124
    lab.start_tcp_server(lab.inet, dst, port, "reuse")
    p = e2e.reuse_port(lab, ws, dst, port, src_port, 3, connect_timeout=4)
    assert p.returncode == 0, p.stderr
    assert time_wait_at(lab, ws, dst, port), "the relayed connections left no TIME_WAIT to test against"
    # A connection the namespace itself served (its own address) is not the agent's:
    # its TIME_WAIT must stay.
    lab.start_tcp_server(ws.ws, ws.ws_v4, port, "own")
    p = e2e.reuse_port(lab, ws, ws.ws_v4, port, src_port, 1, connect_timeout=4)
    assert p.returncode == 0, p.stderr
    assert time_wait_at(lab, ws, ws.ws_v4, port)

    e2e.ok(e2e.delete_workspace(agent, attached.workspace_id))
    assert not time_wait_at(lab, ws, dst, port)
    assert time_wait_at(lab, ws, ws.ws_v4, port)
    t0 = e2e.now()
    p = e2e.reuse_port(lab, ws, dst, port, src_port, 1, connect_timeout=4)
    assert p.returncode == 0, p.stderr
    assert e2e.now() - t0 < 5.0  # a dropped SYN is first retried after 1 s, then 3 s...
    assert e2e.peer(lab, ws, dst) == ws.guest_v4  # routed now, not relayed


def time_wait_at(lab, ws, addr, port, ns=None, peer=None):
    """TIME_WAIT sockets whose local end is addr:port (and remote end peer), in the
    workspace namespace unless ns says otherwise."""
    argv = ["ss", "-Htn", "state", "time-wait", "src", f"{addr}:{port}"] + (["dst", peer] if peer else [])
    out = lab.run(ns or ws.ws, *argv, check=False).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_a_policy_update_that_uncovers_a_destination_lets_the_guest_reach_it_at_once_from_a_used_port(attached):
    # The same TIME_WAIT trap after an update: the destination port the policy no
    # longer covers is now routed, and the guest must reach it from a port it used
    # through the Egress. A destination still covered keeps its TIME_WAIT (tproxy
    # reopens it onto the listener).
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    dst, uncovered_port, kept_port, src_port = e2e.covered(lab), 9103, 9104, 40125
    for port in (uncovered_port, kept_port):
        lab.start_tcp_server(lab.inet, dst, port, "reuse")
        p = e2e.reuse_port(lab, ws, dst, port, src_port, 2, connect_timeout=4)
        assert p.returncode == 0, p.stderr
        assert time_wait_at(lab, ws, dst, port)

    narrowed = e2e.policy((attached.egress_id, [dst + "/32"]))
    narrowed["egresses"][0]["ports"] = [{"first": kept_port, "last": kept_port}]
    e2e.update_policy(agent, attached.workspace, narrowed)
    e2e.wait_applied(agent, attached.workspace_id, 2, attached.egress_id, 1)
    assert not time_wait_at(lab, ws, dst, uncovered_port)
    assert time_wait_at(lab, ws, dst, kept_port)
    t0 = e2e.now()
    p = e2e.reuse_port(lab, ws, dst, uncovered_port, src_port, 1, connect_timeout=4)
    assert p.returncode == 0, p.stderr
    assert e2e.now() - t0 < 5.0
    # Routed: the destination saw the guest's own address and port.
    assert time_wait_at(lab, ws, dst, uncovered_port, ns=lab.inet, peer=f"{ws.guest_v4}:{src_port}")


def test_a_namespace_missing_at_start_is_attached_once_it_is_back_without_a_call(env, tmp_path):
    # As after a host reboot, when the agent starts before the guests' namespaces
    # exist: the Workspace's path (a bind mount of the namespace here) names nothing
    # at start, then names the namespace again.
    lab, ws, agent = env.lab, env.ws, env.agent
    with second_path(tmp_path, ws.path) as alias:
        eid = e2e.field(e2e.create_egress(agent, env.socks), "egress_id")
        body = e2e.ok(e2e.create_workspace(agent, str(alias), e2e.policy((eid, [e2e.covered(lab) + "/32"]))))
        wid = e2e.field(body["workspace"], "workspace_id")
        e2e.wait_applied(agent, wid, 1, eid, 1)
        agent.stop(signal.SIGKILL)
        repoint(alias, None)
        agent.start()
        err = e2e.labmod.wait_for(lambda: e2e.field(e2e.policy_status(agent, wid), "error"), timeout=10,
                                  what="the reason in status")
        assert str(alias) in err or "namespace" in err, err
        # The killed agent's table still drops covered traffic meanwhile.
        assert not e2e.reachable(lab, ws, e2e.covered(lab), timeout=2.0)
        subprocess.run(["mount", "--bind", ws.path, str(alias)], check=True)
        e2e.wait_applied(agent, wid, 1, eid, 1)
        assert not e2e.field(e2e.policy_status(agent, wid), "error")
        assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4


def test_a_workspace_deleted_just_before_a_crash_has_its_rules_removed_at_the_next_start(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    before, _, wid = attached_then_killed(env)
    # What a DeleteWorkspace that committed just before the crash left in the store
    # (its rules were not removed yet): the same transaction as the agent's.
    db = sqlite3.connect(os.path.join(agent.state_dir, "state.db"))
    with db:
        dev, ino = db.execute("SELECT netns_dev, netns_ino FROM resources WHERE id = ?", (wid,)).fetchone()
        db.execute("INSERT INTO pending_detaches(workspace_id, netns, netns_dev, netns_ino) VALUES(?, ?, ?, ?)",
                   (wid, ws.path, dev, ino))
        db.execute("UPDATE resources SET deleted = 1, body = x'' WHERE id = ?", (wid,))
        db.execute("DELETE FROM egress_refs WHERE workspace_id = ?", (wid,))
    db.close()
    assert e2e.state_diff(before, lab.kernel_state(ws.ws))  # the killed agent's rules are there
    agent.start()
    diff = e2e.state_diff(before, lab.kernel_state(ws.ws))
    assert not diff, diff  # removed before the agent serves
    assert e2e.error_code(e2e.call(agent, e2e.WORKSPACE + "GetWorkspace", {"workspaceId": wid})) == "not_found"
    assert e2e.peer(lab, ws, e2e.covered(lab)) == ws.guest_v4  # no Workspace: direct


def test_a_path_that_names_another_namespace_at_start_counts_as_that_namespace(env, tmp_path):
    # As after a host reboot: the Workspace's path names a new namespace (here: a bind
    # mount moved from ws0's namespace to ws1's while the agent was down). The
    # Workspace holds the namespace its path names now, and only that one.
    lab, agent = env.lab, env.agent
    ws0, ws1 = env.ws, lab.add_workspace()
    with second_path(tmp_path, ws0.path) as alias:
        eid, pol, (wid,) = attach_at(env, alias)
        agent.stop(signal.SIGKILL)
        repoint(alias, ws1.path)
        agent.start()
        e2e.wait_applied(agent, wid, 1, eid, 1)
        assert e2e.peer(lab, ws1, e2e.covered(lab)) == lab.socks_inet_v4
        # ws1's namespace is held: a second Workspace there is refused...
        assert e2e.error_code(e2e.create_workspace(agent, ws1.path, pol)) == "failed_precondition"
        # ...and ws0's is nobody's now (the killed agent's table there is replaced).
        other = e2e.field(e2e.ok(e2e.create_workspace(agent, ws0.path, pol))["workspace"], "workspace_id")
        e2e.wait_applied(agent, other, 1, eid, 1)
        assert e2e.peer(lab, ws0, e2e.covered(lab)) == lab.socks_inet_v4


def test_a_workspace_whose_path_names_another_workspaces_namespace_at_start_is_refused_by_the_data_plane(
        env, tmp_path):
    # Two Workspaces, then (agent down) the second one's path comes to name the first
    # one's namespace. Attaching it would replace the first one's table, and deleting
    # it would remove that table: the first guest's covered traffic would leave
    # directly. The second is not attached; status says which Workspace holds it.
    lab, agent = env.lab, env.agent
    ws0, ws1 = env.ws, lab.add_workspace()
    with second_path(tmp_path, ws1.path) as alias:
        eid, _, (w0, w1) = attach_at(env, ws0.path, alias)
        agent.stop(signal.SIGKILL)
        repoint(alias, ws0.path)
        # And the second one's stored identity is the first one's namespace (as when a
        # namespace number is reused after a reboot): its delete must still leave that
        # namespace's rules alone.
        db = sqlite3.connect(os.path.join(agent.state_dir, "state.db"))
        with db:
            db.execute("UPDATE resources SET (netns_dev, netns_ino) = (SELECT netns_dev, netns_ino FROM "
                       "resources WHERE id = ?) WHERE id = ?", (w0, w1))
        db.close()
        agent.start()
        e2e.wait_applied(agent, w0, 1, eid, 1)
        err = e2e.labmod.wait_for(lambda: e2e.field(e2e.policy_status(agent, w1), "error"), timeout=10,
                                  what="the second Workspace's error")
        assert w0 in err, err
        state0 = lab.kernel_state(ws0.ws)
        e2e.ok(e2e.delete_workspace(agent, w1))
        assert lab.kernel_state(ws0.ws) == state0
        assert e2e.peer(lab, ws0, e2e.covered(lab)) == lab.socks_inet_v4
        assert not e2e.field(e2e.policy_status(agent, w0), "error")


def test_a_path_that_comes_to_name_another_namespace_while_the_agent_runs_is_attached_there(env, tmp_path):
    # A guest's namespace deleted and created again at the same path while the agent
    # runs (here: the bind mount taken away from ws0's namespace, then put on ws1's).
    # While the path names nothing, the Workspace keeps the namespace it holds; once
    # it names another, that one gets the rules (else its covered traffic would leave
    # directly), and the old one keeps its table (covered traffic there stays dropped).
    lab, agent = env.lab, env.agent
    ws0, ws1 = env.ws, lab.add_workspace()
    with second_path(tmp_path, ws0.path) as alias:
        eid, pol, (wid,) = attach_at(env, alias)
        repoint(alias, None)
        err = e2e.labmod.wait_for(lambda: e2e.field(e2e.policy_status(agent, wid), "error"), timeout=10,
                                  what="the gone namespace in status")
        assert "gone" in err, err
        assert e2e.peer(lab, ws0, e2e.covered(lab)) == lab.socks_inet_v4
        subprocess.run(["mount", "--bind", ws1.path, str(alias)], check=True)
        e2e.wait_applied(agent, wid, 1, eid, 1)
        assert e2e.peer(lab, ws1, e2e.covered(lab)) == lab.socks_inet_v4
        assert not e2e.reachable(lab, ws0, e2e.covered(lab), timeout=2.0)
