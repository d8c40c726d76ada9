"""Stock Connect clients work unmodified: @connectrpc/connect-node (JSON and binary,
HTTP/1.1 and HTTP/2) and buf curl (binary), over the Unix socket and mTLS. Both come
from npm (node/package-lock.json), installed with npm ci at test time."""
import json

import pytest

from api_helpers import (GET_AGENT, buf_curl, check_get_agent_json, connect_node, descriptor_set, npm_install,
                         require_get_agent)


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    npm_install()
    return {"descriptors": descriptor_set(str(tmp_path_factory.mktemp("desc")))}


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("http", ["1.1", "2"])
def test_connect_node_get_agent_over_unix_socket(agent, clients, binary, http):
    require_get_agent(agent)
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_AGENT, "binary": binary,
                        "http": http, "socket": agent.socket_path})
    assert "response" in out, out
    check_get_agent_json(out["response"])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_connect_node_sees_connect_errors(agent, clients, binary):
    out = connect_node({"descriptors": clients["descriptors"], "method": "kibotos.ctrl.v1.EgressService/GetEgress",
                        "request": {"egressId": "no-such-egress"}, "binary": binary, "http": "2",
                        "socket": agent.socket_path})
    assert "error" in out, out
    # not_found once EgressService is linked; unimplemented before.
    assert out["error"]["code"] in ("not_found", "unimplemented")


def test_connect_node_keep_alive_calls(agent, clients):
    require_get_agent(agent)
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_AGENT, "http": "1.1",
                        "socket": agent.socket_path, "calls": 200})
    assert "response" in out, out


@pytest.mark.parametrize("h2", [False, True], ids=["http1", "http2"])
def test_buf_curl_get_agent_over_unix_socket(agent, clients, h2):
    require_get_agent(agent)
    args = ["--unix-socket", agent.socket_path, "--schema", clients["descriptors"], "--data", "{}"]
    if h2:
        args.append("--http2-prior-knowledge")
    out = buf_curl(args + ["http://localhost/" + GET_AGENT])
    assert out.returncode == 0, out.stderr
    check_get_agent_json(json.loads(out.stdout))


def test_buf_curl_sees_connect_errors(agent, clients):
    out = buf_curl(["--unix-socket", agent.socket_path, "--schema", clients["descriptors"],
                    "--data", '{"egressId": "no-such-egress"}',
                    "http://localhost/kibotos.ctrl.v1.EgressService/GetEgress"])
    if out.returncode == 0:
        pytest.skip("EgressService answers GetEgress in this build")
    assert "not_found" in out.stderr or "unimplemented" in out.stderr


@pytest.mark.parametrize("http", ["1.1", "2"])
def test_connect_node_over_mtls(mtls, clients, http):
    a, pki, port, (cert, key) = mtls
    require_get_agent(a)
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_AGENT, "binary": True, "http": http,
                        "url": "https://127.0.0.1:%d" % port, "ca": pki.ca_cert, "cert": cert, "key": key})
    assert "response" in out, out
    check_get_agent_json(out["response"])


def test_buf_curl_over_mtls(mtls, clients):
    a, pki, port, (cert, key) = mtls
    require_get_agent(a)
    out = buf_curl(["--schema", clients["descriptors"], "--cacert", pki.ca_cert, "--cert", cert, "--key", key,
                    "--data", "{}", "https://127.0.0.1:%d/%s" % (port, GET_AGENT)])
    assert out.returncode == 0, out.stderr
    check_get_agent_json(json.loads(out.stdout))
