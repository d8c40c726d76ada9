"""Every EgressService RPC with curl and JSON over the Unix socket, as an operator would
drive it; the password never comes back, nor appears in the agent's log."""
import json
import subprocess

import pytest

from egress_calls import CONFIG, SERVICE, command_id, revision

PASSWORD = "s3cret-pw-never-shown-%d"


def curl(agent, method, request):
    out = subprocess.run(
        ["curl", "-sS", "--unix-socket", agent.socket_path, "-H", "Content-Type: application/json",
         "-d", json.dumps(request), "-w", "\n%{http_code}", "http://localhost/" + SERVICE + method],
        capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    body, _, status = out.stdout.rpartition("\n")
    return int(status), (json.loads(body) if body else None), body


@pytest.fixture
def egress_agent(agent_factory):
    return agent_factory(config=CONFIG)


def test_every_egress_rpc_with_curl_json(egress_agent):
    a = egress_agent
    pw = PASSWORD % 1
    raw_bodies = []

    def rpc(method, request, want_status=200):
        status, body, raw = curl(a, method, request)
        raw_bodies.append(raw)
        assert status == want_status, (method, status, body)
        return body

    created = rpc("CreateEgress", {
        "commandId": command_id(), "labels": {"team": "a"}, "annotations": {"note": "x"},
        "spec": {"socks5": {"address": "203.0.113.5:1080", "username": "alice", "password": pw}}})["egress"]
    eid = created["egressId"]
    assert revision(created) == 1
    assert created["createdAt"] == created["updatedAt"]
    assert created["spec"]["socks5"] == {"address": "203.0.113.5:1080", "username": "alice"}

    got = rpc("GetEgress", {"egressId": eid})["egress"]
    assert got == created

    listed = rpc("ListEgresses", {"labelSelector": {"team": "a"}})
    assert [e["egressId"] for e in listed["egresses"]] == [eid]

    updated = rpc("UpdateEgress", {"commandId": command_id(), "egressId": eid, "expectedRevision": "1",
                                   "drainSeconds": 0, "spec": {"socks5": {
                                       "address": "203.0.113.6:1080", "username": "alice", "password": pw + "2",
                                       "tls": {"serverName": "proxy.example"}}, "udpEnabled": True}})["egress"]
    assert revision(updated) == 2
    assert updated["spec"]["udpEnabled"] is True
    assert updated["spec"]["socks5"]["tls"] == {"serverName": "proxy.example"}

    labelled = rpc("UpdateEgressLabels", {"commandId": command_id(), "egressId": eid,
                                          "expectedLabelsRevision": "1", "labels": {"team": "b"}})["egress"]
    assert labelled["labels"] == {"team": "b"} and labelled["labelsRevision"] == "2"
    assert revision(labelled) == 2

    annotated = rpc("UpdateEgressAnnotations", {"commandId": command_id(), "egressId": eid,
                                                "expectedAnnotationsRevision": "1",
                                                "annotations": {"note": "y"}})["egress"]
    assert annotated["annotations"] == {"note": "y"} and annotated["annotationsRevision"] == "2"

    assert rpc("DeleteEgress", {"commandId": command_id(), "egressId": eid}) == {}
    err = rpc("GetEgress", {"egressId": eid}, want_status=404)
    assert err["code"] == "not_found"

    for raw in raw_bodies:
        assert pw not in raw
    assert pw not in a.log()


def test_errors_carry_their_connect_codes(egress_agent):
    a = egress_agent
    status, body, _ = curl(a, "CreateEgress", {"commandId": command_id(), "spec": {}})
    assert (status, body["code"]) == (400, "invalid_argument")
    status, body, _ = curl(a, "CreateEgress", {"commandId": command_id(),
                                               "spec": {"socks5": {"address": "127.0.0.1:1080"}}})
    assert (status, body["code"]) == (400, "invalid_argument")
    status, body, _ = curl(a, "CreateEgress", {"commandId": command_id(),
                                               "spec": {"socks5": {"address": "203.0.113.5:1080"}}})
    eid = body["egress"]["egressId"]
    status, body, _ = curl(a, "UpdateEgress", {"commandId": command_id(), "egressId": eid,
                                               "expectedRevision": "5",
                                               "spec": {"socks5": {"address": "203.0.113.6:1080"}}})
    assert (status, body["code"]) == (409, "aborted")
    status, body, _ = curl(a, "ListEgresses", {"pageSize": 1001})
    assert (status, body["code"]) == (400, "invalid_argument")
    status, body, _ = curl(a, "ListEgresses", {"pageToken": "forged"})
    assert (status, body["code"]) == (400, "invalid_argument")
    status, body, _ = curl(a, "DeleteEgress", {"egressId": eid})
    assert (status, body["code"]) == (400, "invalid_argument")  # no command_id
