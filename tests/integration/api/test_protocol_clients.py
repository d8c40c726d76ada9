"""Every protocol connect-go serves, with clients nobody here wrote: buf curl with
--protocol connect|grpc|grpcweb, with --schema and without it (server reflection), over
the Unix socket and mTLS; @connectrpc/connect-node with its Connect, gRPC and gRPC-Web
transports, JSON and binary, gzip, errors and deadlines."""
import json

import pytest

from api_helpers import GET_AGENT, buf_curl, check_get_agent_json, connect_node, descriptor_set, npm_install

PROTOCOLS = ["connect", "grpc", "grpcweb"]
GET_EGRESS = "kibotos.ctrl.v1.EgressService/GetEgress"


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    npm_install()
    return {"descriptors": descriptor_set(str(tmp_path_factory.mktemp("desc")))}


def http_versions(protocol):
    return ["2"] if protocol == "grpc" else ["1.1", "2"]  # gRPC needs HTTP/2


@pytest.mark.parametrize("schema", [True, False], ids=["schema", "reflection"])
@pytest.mark.parametrize("h2", [False, True], ids=["http1", "http2"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_buf_curl_get_agent_over_unix_socket(agent, clients, protocol, h2, schema):
    args = ["--protocol", protocol, "--unix-socket", agent.socket_path, "--data", "{}"]
    args += ["--http2-prior-knowledge"] if h2 else []
    args += ["--schema", clients["descriptors"]] if schema else []
    out = buf_curl(args + ["http://localhost/" + GET_AGENT], timeout=30)
    assert out.returncode == 0, out.stderr
    check_get_agent_json(json.loads(out.stdout))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_buf_curl_sees_the_error_code(agent, clients, protocol):
    out = buf_curl(["--protocol", protocol, "--http2-prior-knowledge", "--unix-socket", agent.socket_path,
                    "--data", '{"egressId": "no-such-egress"}', "http://localhost/" + GET_EGRESS], timeout=30)
    assert out.returncode != 0
    assert "not_found" in out.stdout + out.stderr


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_buf_curl_lists_services_by_reflection(agent, clients, protocol):
    out = buf_curl(["--protocol", protocol, "--http2-prior-knowledge", "--unix-socket", agent.socket_path,
                    "--list-methods", "http://localhost"], timeout=30)
    assert out.returncode == 0, out.stderr
    assert GET_AGENT in out.stdout
    assert "grpc.health.v1.Health/Check" in out.stdout


@pytest.mark.parametrize("schema", [True, False], ids=["schema", "reflection"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_buf_curl_over_mtls(mtls, clients, protocol, schema):
    _, pki, port, (cert, key) = mtls
    args = ["--protocol", protocol, "--cacert", pki.ca_cert, "--cert", cert, "--key", key, "--data", "{}"]
    args += ["--schema", clients["descriptors"]] if schema else []
    out = buf_curl(args + ["https://127.0.0.1:%d/%s" % (port, GET_AGENT)], timeout=30)
    assert out.returncode == 0, out.stderr
    check_get_agent_json(json.loads(out.stdout))


def node_cases():
    for protocol in PROTOCOLS:
        for http in http_versions(protocol):
            for binary in (False, True):
                yield pytest.param(protocol, http, binary, id="%s-h%s-%s" % (protocol, http, "bin" if binary else "json"))


@pytest.mark.parametrize("protocol,http,binary", list(node_cases()))
def test_connect_node_transports_over_unix_socket(agent, clients, protocol, http, binary):
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_AGENT, "binary": binary, "http": http,
                        "socket": agent.socket_path, "protocol": protocol, "calls": 3})
    assert "response" in out, out
    check_get_agent_json(out["response"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connect_node_transports_see_error_codes(agent, clients, protocol):
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_EGRESS, "http": "2",
                        "request": {"egressId": "no-such-egress"}, "socket": agent.socket_path, "protocol": protocol})
    assert out.get("error", {}).get("code") == "not_found", out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connect_node_transports_send_gzip(agent, clients, protocol):
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_AGENT, "http": "2", "binary": True,
                        "socket": agent.socket_path, "protocol": protocol, "gzip": True})
    assert "response" in out, out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connect_node_transports_carry_deadlines(agent, clients, protocol):
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_AGENT, "http": "2",
                        "socket": agent.socket_path, "protocol": protocol, "timeoutMs": 5000})
    assert "response" in out, out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connect_node_transports_over_mtls(mtls, clients, protocol):
    _, pki, port, (cert, key) = mtls
    out = connect_node({"descriptors": clients["descriptors"], "method": GET_AGENT, "binary": True, "http": "2",
                        "url": "https://127.0.0.1:%d" % port, "ca": pki.ca_cert, "cert": cert, "key": key,
                        "protocol": protocol})
    assert "response" in out, out
    check_get_agent_json(out["response"])
