"""Issue 5, limits: "EMFILE/ENFILE survived (pause accepting, log once, resume)".
The running agent's descriptor limit is lowered with prlimit until guest connections
exhaust it; the agent must log the pause once, stay up, and relay new connections
again once descriptors return."""
import os
import subprocess
import time

import pytest

import e2e_env as e2e
import proc_handles

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables, prlimit)", allow_module_level=True)

PAUSE_LOG = "accepting paused"
HOLDERS = 80
ROOM = 40  # fds the agent may open beyond those it has before the Workspace is attached

HOLD_CODE = """
import socket, sys, time
socks = []
for _ in range(int(sys.argv[3])):
    s = socket.socket(); s.settimeout(5)
    try:
        s.connect((sys.argv[1], int(sys.argv[2])))
    except OSError:
        break
    socks.append(s)
print("HOLDING", len(socks), flush=True)
sys.stdin.readline()
"""


def handles(pid):
    """(fds, ring slots) the process holds."""
    return proc_handles.open_fds(pid), proc_handles.ring_slots(pid)


@pytest.mark.parametrize("direct", [True, False], ids=["direct-descriptors", "plain-fds"])
def test_out_of_descriptors_pauses_accepting_logs_once_and_resumes(lab, agent_factory, direct):
    env = e2e.make_env(lab, agent_factory, {"direct_descriptors": direct})
    ws, agent = env.ws, env.agent
    pid = agent.proc.pid
    # The agent at its limit, as when a host's LimitNOFILE is reached: the hard limit
    # (lowering it needs no CAP_SYS_RESOURCE) set before the Workspace's listeners are
    # armed, since a multishot accept keeps the limit it was armed under. Room for a
    # few relayed connections (one or two fds each: the upstream socket may be a
    # direct descriptor), not for HOLDERS of them.
    limit = proc_handles.open_fds(pid) + ROOM
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:{limit}"], check=True)
    env.egress, env.workspace = e2e.attach(env)
    env.workspace_id = e2e.field(env.workspace, "workspace_id")
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    settled = handles(pid)
    holder = lab.popen(ws.guest, e2e.dp.PYTHON, "-c", HOLD_CODE, e2e.covered(lab), e2e.PORT, HOLDERS,
                       stdin=subprocess.PIPE, text=True)
    assert holder.stdout.readline().split()[0] == "HOLDING"
    e2e.labmod.wait_for(lambda: PAUSE_LOG in agent.log(), timeout=20, what="the accept-pause warning")
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(timeout=10)
    assert agent.alive()
    # Descriptors are back: a new guest connection is relayed through the Egress again,
    # and the API answers.
    assert e2e.get_workspace(agent, env.workspace_id)["workspaceId"] == env.workspace_id
    e2e.labmod.wait_for(lambda: e2e.peer(lab, ws, e2e.covered(lab), timeout=10) == lab.socks_inet_v4,
                        timeout=30, what="relaying to resume")
    assert agent.log().count(PAUSE_LOG) == 1, "the pause is logged once, not once per retry"
    assert ("direct descriptors (" in agent.log()) == direct
    # Every descriptor the holders took comes back (connections still in the listen
    # queue when they left are accepted and closed first). This also leaves the
    # sanitizers room: their first check of a type probes memory through a pipe.
    e2e.labmod.wait_for(lambda: all(now <= then for now, then in zip(handles(pid), settled)), timeout=30,
                        what=f"the agent's fds and ring slots to return to {settled}")
    e2e.assert_clean_exit(agent)
