"""Issue 29: Egress health. While a Workspace uses an Egress, the agent asks its server
for a whole SOCKS5 exchange once per dataplane.egress_probe_interval: status and
metrics turn unhealthy within one interval of the server stopping, and healthy again
after it returns; a server that never answers is socks_failed; an Egress no Workspace
uses is not asked at all."""
import os
import signal
import time

import pytest

import e2e_env as e2e
from kibotos_agent import metric
from test_accounting import start_hostile

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)

INTERVAL = 1.0  # s
PROBE_TIMEOUT = 3.0  # relay::ProbeOptions' connect and reply timeout


def health(agent, wid, eid):
    return e2e.field(e2e.egress_status(e2e.policy_status(agent, wid), eid), "health", {}) or {}


def wait_state(agent, wid, eid, state, timeout):
    return e2e.labmod.wait_for(lambda: (lambda h: h if e2e.field(h, "state") == state else None)(
        health(agent, wid, eid)), timeout=timeout, what=f"egress {eid} to be {state}")


def test_health_follows_the_egress_server_down_and_back_and_only_for_egresses_in_use(lab, agent_factory):
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    dante = e2e.dp.start_dante(lab, 1080)
    start_hostile(lab, 1091, "never")
    config = e2e.agent_config(lab)
    config["dataplane"] = {"egress_probe_interval": f"{int(INTERVAL)}s"}
    agent = agent_factory(config=config)
    eid = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1080"), "egress_id")
    mute = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1091"), "egress_id")
    unused = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1999"), "egress_id")
    wid = e2e.field(e2e.ok(e2e.create_workspace(agent, ws.path, e2e.policy(
        (eid, [e2e.covered(lab) + "/32"]), (mute, [lab.internet_v4(41) + "/32"]))))["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, eid, 1)

    h = wait_state(agent, wid, eid, "healthy", timeout=10)
    assert e2e.field(h, "last_success_time"), h
    assert metric(agent.metrics(), "kibotos_egress_up", egress_id=eid) == 1
    h = wait_state(agent, wid, mute, "socks_failed", timeout=10)
    assert "no answer" in e2e.field(h, "last_failure"), h
    samples = agent.metrics()
    assert metric(samples, "kibotos_egress_up", egress_id=mute) == 0
    assert metric(samples, "kibotos_egress_probe_failures_total", egress_id=mute) >= 1
    # No Workspace uses it: never asked (nothing listens there; asking would fail).
    assert metric(samples, "kibotos_egress_up", egress_id=unused) is None

    # The server stops: unhealthy within one interval (plus the probe's own timeout,
    # and the mute Egress's probe that may come first in the round).
    os.killpg(dante.pid, signal.SIGKILL)
    dante.wait(timeout=10)
    stopped = time.monotonic()
    h = wait_state(agent, wid, eid, "unreachable", timeout=15)
    took = time.monotonic() - stopped
    assert took <= INTERVAL + 2 * PROBE_TIMEOUT + 1.0, took
    assert "refused" in e2e.field(h, "last_failure").lower(), h
    assert e2e.field(h, "last_failure_time"), h
    assert metric(agent.metrics(), "kibotos_egress_up", egress_id=eid) == 0
    print(f"unhealthy {took:.2f} s after the server stopped")

    # It returns: healthy again within an interval, with no API call.
    e2e.dp.start_dante(lab, 1080)
    returned = time.monotonic()
    wait_state(agent, wid, eid, "healthy", timeout=15)
    assert time.monotonic() - returned <= INTERVAL + 2 * PROBE_TIMEOUT + 1.0
    assert metric(agent.metrics(), "kibotos_egress_up", egress_id=eid) == 1
    log = agent.log()
    assert f"egress {eid}: unreachable: " in log and f"egress {eid}: healthy" in log
    e2e.assert_clean_exit(agent)
