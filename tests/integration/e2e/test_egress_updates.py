"""UpdateEgress and DeleteEgress against a live Workspace through the real agent:
new connections take the new revision at once, old ones drain for drain_seconds,
applied_revision follows, and an Egress in use cannot be deleted."""
import os

import pytest

import e2e_env as e2e

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


def test_update_egress_sends_new_connections_to_the_second_server_and_drains_the_old_ones(attached):
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    e2e.start_second_socks(lab, 1081)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    ticker = e2e.start_ticker(lab, ws, e2e.covered(lab))

    t0 = e2e.now()
    updated = e2e.update_egress(agent, attached.egress, f"{lab.socks_v4}:1081", drain_seconds=3)
    assert e2e.num(updated, "revision") == 2
    assert e2e.peer(lab, ws, e2e.covered(lab)) == e2e.second_socks_out(lab)  # at once
    st = e2e.wait_applied(agent, attached.workspace_id, 1, attached.egress_id, 2)
    # An Egress update never changes the policy's revision.
    assert e2e.num(st, "applied_revision") == 1
    es = e2e.egress_status(e2e.policy_status(agent, attached.workspace_id), attached.egress_id)
    assert e2e.num(es, "draining_connections") == 1, es

    how, at = e2e.ticker_end(ticker)
    assert how in ("reset", "eof"), how
    assert 2.5 <= at - t0 <= 6.0, at - t0
    e2e.labmod.wait_for(lambda: e2e.num(e2e.egress_status(e2e.policy_status(agent, attached.workspace_id),
                                                          attached.egress_id), "draining_connections") == 0,
                        timeout=10, what="the drained connection to leave the count")


def test_delete_egress_is_failed_precondition_while_referenced_and_succeeds_after_the_policy_drops_it(attached):
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    status, body = e2e.delete_egress(agent, attached.egress_id)
    assert (status, e2e.field(body, "code")) == (400, "failed_precondition"), body
    e2e.ok(e2e.call(agent, e2e.EGRESS + "GetEgress", {"egressId": attached.egress_id}))
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4

    e2e.start_second_socks(lab, 1081)
    other = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1081"), "egress_id")
    ticker = e2e.start_ticker(lab, ws, e2e.covered(lab))
    e2e.update_policy(agent, attached.workspace,
                      e2e.policy((other, [e2e.covered(lab) + "/32"])), drain_seconds=600)
    e2e.wait_applied(agent, attached.workspace_id, 2, other, 1)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == e2e.second_socks_out(lab)
    # The dropped Egress keeps a status entry while its connection drains, and
    # GetAgent counts that connection as draining, not active.
    dropped = e2e.egress_status(e2e.policy_status(agent, attached.workspace_id), attached.egress_id)
    assert (e2e.num(dropped, "active_connections"), e2e.num(dropped, "draining_connections")) == (0, 1), dropped

    def agent_counts():
        a = e2e.ok(e2e.call(agent, "kibotos.ctrl.v1.AgentService/GetAgent", {}))["agent"]
        return e2e.num(a, "active_connections"), e2e.num(a, "draining_connections")
    e2e.labmod.wait_for(lambda: agent_counts() == (0, 1), timeout=10,
                        what="GetAgent to count 0 active and 1 draining")

    # No longer referenced: the delete succeeds and closes what still drains through it.
    t0 = e2e.now()
    e2e.ok(e2e.delete_egress(agent, attached.egress_id))
    how, at = e2e.ticker_end(ticker)
    assert how in ("reset", "eof"), how
    assert at - t0 <= 3.0, at - t0
    assert e2e.error_code(e2e.call(agent, e2e.EGRESS + "GetEgress", {"egressId": attached.egress_id})) == "not_found"


def test_delete_egress_succeeds_once_its_workspace_is_deleted(attached):
    agent = attached.agent
    assert e2e.error_code(e2e.delete_egress(agent, attached.egress_id)) == "failed_precondition"
    e2e.ok(e2e.delete_workspace(agent, attached.workspace_id))
    e2e.ok(e2e.delete_egress(agent, attached.egress_id))
    assert e2e.error_code(e2e.call(agent, e2e.EGRESS + "GetEgress", {"egressId": attached.egress_id})) == "not_found"
