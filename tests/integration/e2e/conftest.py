# pytest loads conftest.py files only up to its rootdir: load the shared agent
# fixtures here too (as api/conftest.py does), and make e2e_env importable.
import os
import sys

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
    env = e2e.make_env(lab, agent_factory)
    yield env
    e2e.assert_clean_exit(env.agent)


@pytest.fixture
def attached(env):
    env.egress, env.workspace = e2e.attach(env)
    env.egress_id = e2e.field(env.egress, "egress_id")
    env.workspace_id = e2e.field(env.workspace, "workspace_id")
    return env
