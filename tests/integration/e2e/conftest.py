# pytest loads conftest.py files only up to its rootdir: load the shared agent
# fixtures here too (as api/conftest.py does), and make e2e_env importable.
import os
import sys
import types

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from kibotos_agent import agent, agent_factory, tmp_state  # noqa: E402,F401
import e2e_env as e2e  # noqa: E402


@pytest.fixture
def lab():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, nftables)")
    with e2e.labmod.Lab() as lab:
        yield lab


@pytest.fixture
def env(lab, agent_factory):
    """One guest/ws pair, the two destinations, dante (no auth) on the socks namespace's
    port 1080 and a running agent; no Egress or Workspace yet. The agent is stopped
    before the lab is removed (fixture teardown runs in reverse), and must exit
    cleanly with no sanitizer report in its log."""
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    e2e.dp.start_dante(lab, 1080)
    agent = agent_factory(config=e2e.agent_config(lab))
    yield types.SimpleNamespace(lab=lab, ws=ws, agent=agent, socks=f"{lab.socks_v4}:1080")
    e2e.assert_clean_exit(agent)


@pytest.fixture
def attached(env):
    env.egress, env.workspace = e2e.attach(env)
    env.egress_id = e2e.field(env.egress, "egress_id")
    env.workspace_id = e2e.field(env.workspace, "workspace_id")
    return env
