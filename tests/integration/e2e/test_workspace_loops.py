"""Which data-plane loops accept a Workspace's connections (config
dataplane.workspace_loops, issue 26 "fds per Workspace"): each accepting loop costs
the Workspace one listening socket per family, so by default one loop accepts for
each Workspace and Workspaces are spread over the loops. The agent logs (debug) the
loops it gave each Workspace. Root only; the lab is removed even on failure."""
import re

import pytest

import e2e_env as e2e

# The info line of an attach: "workspace ID: attached to NETNS ...; accepting on loop 0, 1".
PLACED = re.compile(r"workspace (\S+): (?:re-)?attached [^\n]*; accepting on loop ([0-9, ]+)")


def placements(agent):
    """workspace id -> the loops it was given, from the agent's log."""
    return {m.group(1): [int(x) for x in m.group(2).split(",")] for m in PLACED.finditer(agent.log())}


def relay_listeners(lab, ws):
    """The TCP sockets listening in the Workspace namespace (the relay's, no DNS here)."""
    return lab.run(ws.ws, "ss", "-Hltn").stdout.splitlines()


def attach_covering(env, egress, ws):
    eid = e2e.field(egress, "egress_id")
    body = e2e.ok(e2e.create_workspace(env.agent, ws.path, e2e.policy((eid, [e2e.covered(env.lab) + "/32"]))))
    wid = e2e.field(body["workspace"], "workspace_id")
    e2e.wait_applied(env.agent, wid, 1, eid, e2e.num(egress, "revision"))
    return wid


@pytest.fixture
def two_loops(lab, agent_factory, request):
    env = e2e.make_env(lab, agent_factory, dataplane={"threads": 2, "workspace_loops": request.param})
    yield env
    e2e.assert_clean_exit(env.agent)


@pytest.mark.parametrize("two_loops", [1], indirect=True)
def test_with_one_accepting_loop_two_workspaces_land_on_different_loops(two_loops):
    env = two_loops
    egress = e2e.create_egress(env.agent, env.socks)
    second = env.lab.add_workspace()
    ids = [attach_covering(env, egress, ws) for ws in (env.ws, second)]
    placed = placements(env.agent)
    assert sorted(placed[i][0] for i in ids) == [0, 1], placed
    assert all(len(placed[i]) == 1 for i in ids), placed
    for ws in (env.ws, second):
        assert len(relay_listeners(env.lab, ws)) == 2, relay_listeners(env.lab, ws)  # v4 + v6
        assert e2e.peer(env.lab, ws, e2e.covered(env.lab)) == env.lab.socks_inet_v4


@pytest.mark.parametrize("two_loops", [2], indirect=True)
def test_with_two_accepting_loops_a_workspace_listens_on_both(two_loops):
    env = two_loops
    wid = attach_covering(env, e2e.create_egress(env.agent, env.socks), env.ws)
    assert placements(env.agent)[wid] == [0, 1]
    assert len(relay_listeners(env.lab, env.ws)) == 4  # 2 loops x (v4 + v6)
    for _ in range(4):
        assert e2e.peer(env.lab, env.ws, e2e.covered(env.lab)) == env.lab.socks_inet_v4
