"""A restarted agent adopts what it left in each namespace (issue 26: 2,000 Workspaces
enforced again within 2 s): where nothing changed since its last table write, the
table stays as it is, not one nftables transaction, and the new listeners bind the
ports it points at; where something changed, that namespace alone gets its table
written again. Either way every policy is enforced exactly as stored, and covered
traffic never leaves directly meanwhile (test_lifecycle.py covers fail closed)."""
import os
import signal
import time

import pytest

import e2e_env as e2e
from test_lifecycle import attach_at

Monitor = e2e.labmod.NftMonitor

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


def restarted(agent, sig, wids, eid, revision=1):
    agent.stop(sig)
    agent.start()
    for wid in wids:
        e2e.wait_applied(agent, wid, revision, eid, 1)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["killed", "stopped"])
def test_a_restart_adopts_untouched_namespaces_with_no_table_write(env, sig):
    lab, agent = env.lab, env.agent
    ws0, ws1 = env.ws, lab.add_workspace()
    eid, _, wids = attach_at(env, ws0.path, ws1.path)
    time.sleep(2.5)  # past a repair pass: nothing of the agent's own left to check
    before = {ws.ws: lab.kernel_state(ws.ws) for ws in (ws0, ws1)}
    monitors = {ws.ws: Monitor(lab, ws.ws) for ws in (ws0, ws1)}
    restarted(agent, sig, wids, eid)
    for ws in (ws0, ws1):
        assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
        assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4
    time.sleep(2.5)  # the first repair pass after the start writes nothing either
    for ws in (ws0, ws1):
        assert monitors[ws.ws].events() == "", f"{ws.ws}: nftables written at the restart"
        assert lab.kernel_state(ws.ws) == before[ws.ws]  # ports included: the same table
    assert "writing its rules again" not in agent.log()
    assert os.path.exists(os.path.join(agent.state_dir, "attachments"))


def test_a_restart_writes_again_only_the_table_of_a_namespace_that_changed(env):
    lab, agent = env.lab, env.agent
    ws0, ws1 = env.ws, lab.add_workspace()
    eid, _, wids = attach_at(env, ws0.path, ws1.path)
    agent.stop(signal.SIGKILL)
    # Another table added and removed in ws1: nftables there moved on, so only a
    # listing could tell whether the agent's table is intact; it is written again.
    lab.run(ws1.ws, "nft", "add", "table", "inet", "other")
    lab.run(ws1.ws, "nft", "delete", "table", "inet", "other")
    monitors = {ws.ws: Monitor(lab, ws.ws) for ws in (ws0, ws1)}
    agent.start()
    for wid in wids:
        e2e.wait_applied(agent, wid, 1, eid, 1)
    assert monitors[ws0.ws].events() == ""
    assert "table inet kibotos" in monitors[ws1.ws].events()
    for ws in (ws0, ws1):
        assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
        assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4
    assert "nftables there changed since the agent's last write" in agent.log()


def test_a_table_flushed_while_the_agent_was_down_is_written_again(attached):
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    installed = e2e.without_listener_ports(lab.kernel_state(ws.ws))
    agent.stop(signal.SIGKILL)
    lab.run(ws.ws, "nft", "flush", "table", "inet", "kibotos")  # covered traffic would leave directly
    agent.start()
    e2e.wait_applied(agent, attached.workspace_id, 1, attached.egress_id, 1)
    assert e2e.state_diff(installed, e2e.without_listener_ports(lab.kernel_state(ws.ws))) == ""
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4


def test_a_policy_update_just_before_a_crash_is_what_the_restart_enforces(env):
    lab, agent = env.lab, env.agent
    ws = env.ws
    eid, pol, (wid,) = attach_at(env, ws.path)
    # Now the uncovered destination is covered too, and the agent killed at once.
    both = e2e.policy((eid, [e2e.covered(lab) + "/32", e2e.uncovered(lab) + "/32"]))
    e2e.update_policy(agent, e2e.get_workspace(agent, wid), both)
    agent.stop(signal.SIGKILL)
    agent.start()
    e2e.wait_applied(agent, wid, 2, eid, 1)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == lab.socks_inet_v4


def test_a_memo_that_is_not_one_is_ignored_and_every_table_written_again(attached):
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    agent.stop(signal.SIGKILL)
    with open(os.path.join(agent.state_dir, "attachments"), "w") as f:
        f.write("not a memo\n+ 1 2 3\n")
    monitor = Monitor(lab, ws.ws)
    agent.start()
    e2e.wait_applied(agent, attached.workspace_id, 1, attached.egress_id, 1)
    assert "table inet kibotos" in monitor.events()
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    assert "not an attach memo line" in agent.log()
