"""Issue 5, limits: "EMFILE/ENFILE survived (pause accepting, log once, resume)".
The running agent's descriptor limit is lowered with prlimit until guest connections
exhaust it; the agent must log the pause once, stay up, and relay new connections
again once descriptors return."""
import os
import subprocess
import time

import pytest

import e2e_env as e2e

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables, prlimit)", allow_module_level=True)

PAUSE_LOG = "accepting paused"
HOLDERS = 40

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


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def set_soft_nofile(pid, limit):
    # Only the soft limit: raising a hard limit back needs CAP_SYS_RESOURCE.
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={limit}:"], check=True)


def test_out_of_descriptors_pauses_accepting_logs_once_and_resumes(attached):
    env = attached
    lab, ws, agent = env.lab, env.ws, env.agent
    pid = agent.proc.pid
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    soft = subprocess.run(["prlimit", f"--pid={pid}", "--nofile", "--raw", "--noheadings", "--output=SOFT"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # Room for a few relayed connections (two fds each), not for HOLDERS of them.
    set_soft_nofile(pid, open_fds(pid) + 8)
    try:
        holder = lab.popen(ws.guest, e2e.dp.PYTHON, "-c", HOLD_CODE, e2e.covered(lab), e2e.PORT, HOLDERS,
                           stdin=subprocess.PIPE, text=True)
        assert holder.stdout.readline().split()[0] == "HOLDING"
        e2e.labmod.wait_for(lambda: PAUSE_LOG in agent.log(), timeout=20, what="the accept-pause warning")
        holder.stdin.write("\n")
        holder.stdin.flush()
        holder.wait(timeout=10)
    finally:
        set_soft_nofile(pid, soft)
    assert agent.alive()
    # Descriptors are back: a new guest connection is relayed through the Egress again,
    # and the API answers.
    assert e2e.get_workspace(agent, env.workspace_id)["workspaceId"] == env.workspace_id
    e2e.labmod.wait_for(lambda: e2e.peer(lab, ws, e2e.covered(lab), timeout=10) == lab.socks_inet_v4,
                        timeout=30, what="relaying to resume")
    assert agent.log().count(PAUSE_LOG) == 1, "the pause is logged once, not once per retry"
