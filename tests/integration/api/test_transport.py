"""The Connect server over the Unix socket: curl (HTTP/1.1 and HTTP/2 prior
knowledge), JSON and binary, keep-alive under load, and the protocol's error paths."""
import http.client
import json
import shutil
import socket
import subprocess
import threading
import time

import pytest

import h2_raw
from api_helpers import GET_AGENT, check_get_agent_json, python_protos, require_get_agent
from kibotos_agent import connect_call, metric, wait_for

UNKNOWN = "kibotos.ctrl.v1.AgentService/NoSuchMethod"


def curl(agent, method, data="{}", content_type="application/json", extra=()):
    """curl over the agent's Unix socket; returns (http_status, http_version, body)."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    out = subprocess.run(
        ["curl", "-sS", "--unix-socket", agent.socket_path, "-H", "Content-Type: " + content_type,
         "--data-binary", data, "-o", "-", "-w", "\n%{http_code} %{http_version}",
         "http://localhost/" + method] + list(extra),
        capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr
    body, _, tail = out.stdout.rpartition(b"\n")
    status, version = tail.decode().split()
    return int(status), version, body


@pytest.fixture(scope="module")
def agent_pb2(tmp_path_factory):
    return python_protos(str(tmp_path_factory.mktemp("pb")))


def test_get_agent_with_curl_json(agent):
    require_get_agent(agent)
    status, version, body = curl(agent, GET_AGENT)
    assert (status, version) == (200, "1.1")
    check_get_agent_json(json.loads(body))


def test_get_agent_with_curl_http2_prior_knowledge(agent):
    require_get_agent(agent)
    status, version, body = curl(agent, GET_AGENT, extra=["--http2-prior-knowledge"])
    assert (status, version) == (200, "2")
    check_get_agent_json(json.loads(body))


def test_get_agent_binary_over_http1_and_http2(agent, agent_pb2):
    require_get_agent(agent)
    for extra in ([], ["--http2-prior-knowledge"]):
        request = agent_pb2.GetAgentRequest().SerializeToString()
        status, _, body = curl(agent, GET_AGENT, data=request, content_type="application/proto", extra=extra)
        assert status == 200
        response = agent_pb2.GetAgentResponse.FromString(body)
        assert response.agent.version
        assert response.agent.uptime.seconds >= 0


def test_binary_answers_have_the_proto_content_type(agent):
    require_get_agent(agent)
    status, headers, _ = agent.call_raw(GET_AGENT, b"", content_type="application/proto")
    assert status == 200
    assert headers["content-type"] == "application/proto"


def test_unknown_method_is_unimplemented_404(agent):
    for extra in ([], ["--http2-prior-knowledge"]):
        status, _, body = curl(agent, UNKNOWN, extra=extra)
        assert status == 404
        assert json.loads(body)["code"] == "unimplemented"


def test_wrong_content_type_is_415(agent):
    for extra in ([], ["--http2-prior-knowledge"]):
        status, _, _ = curl(agent, GET_AGENT, content_type="text/plain", extra=extra)
        assert status == 415


def test_error_bodies_are_connect_json(agent):
    status, headers, data = agent.call_raw(UNKNOWN, "{}")
    assert status == 404
    assert headers["content-type"] == "application/json"
    body = json.loads(data)
    assert body["code"] == "unimplemented" and "message" in body


def test_body_over_1_mib_is_resource_exhausted(agent, tmp_state):
    big = json.dumps({"pad": "x" * (1 << 20)})
    path = tmp_state + "/big.json"
    with open(path, "w") as f:
        f.write(big)
    # http.client (no Expect), then curl HTTP/1.1 (Expect: 100-continue) and HTTP/2.
    status, body = agent.call(GET_AGENT, json.loads(big))
    assert status == 429 and body["code"] == "resource_exhausted"
    for extra in ([], ["--http2-prior-knowledge"]):
        status, _, data = curl(agent, GET_AGENT, data="@" + path, extra=extra)
        assert status == 429, data
        assert json.loads(data)["code"] == "resource_exhausted"


def test_a_body_just_under_1_mib_is_read(agent, tmp_state):
    require_get_agent(agent)
    path = tmp_state + "/almost.json"
    with open(path, "w") as f:
        f.write(json.dumps({"pad": "x" * (1000 * 1000)}))
    for extra in ([], ["--http2-prior-knowledge"]):
        status, _, data = curl(agent, GET_AGENT, data="@" + path, extra=extra)
        # Read whole and decoded: the unknown field is named.
        assert status == 400, data
        assert "pad" in json.loads(data)["message"]


def test_unknown_json_field_is_invalid_argument_naming_it(agent):
    require_get_agent(agent)
    status, body = agent.call(GET_AGENT, {"agentIdd": "x"})
    assert status == 400
    assert body["code"] == "invalid_argument"
    assert "agentIdd" in body["message"]


def test_invalid_connect_timeout_is_invalid_argument(agent):
    require_get_agent(agent)
    status, body = agent.call(GET_AGENT, {}, headers={"Connect-Timeout-Ms": "soon"})
    assert status == 400 and body["code"] == "invalid_argument"
    status, _ = agent.call(GET_AGENT, {}, headers={"Connect-Timeout-Ms": "10000", "Connect-Protocol-Version": "1"})
    assert status == 200


def test_1000_sequential_keep_alive_requests(agent):
    require_get_agent(agent)
    conn = agent.connection()
    conn.connect()
    first_sock = conn.sock
    for i in range(1000):
        status, _, data = connect_call(conn, GET_AGENT, {})
        assert status == 200, (i, data)
    assert conn.sock is first_sock  # one connection throughout
    conn.close()


def test_50_concurrent_keep_alive_clients(agent):
    require_get_agent(agent)
    errors = []

    def client(n):
        try:
            conn = agent.connection(timeout=30)
            conn.connect()
            first = conn.sock
            for _ in range(20):
                status, _, data = connect_call(conn, GET_AGENT, {})
                if status != 200:
                    errors.append((n, status, data))
            if conn.sock is not first:
                errors.append((n, "reconnected"))
            conn.close()
        except Exception as e:  # noqa: BLE001 - every failure is reported below
            errors.append((n, repr(e)))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_pipelined_requests_are_answered_in_order(agent):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(agent.socket_path)
    req = ("POST /kibotos.ctrl.v1.AgentService/Nope{} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           "Content-Length: 2\r\n\r\n{{}}")
    s.sendall((req.format(1) + req.format(2)).encode())
    data = b""
    deadline = time.monotonic() + 10
    while data.count(b"HTTP/1.1 404") < 2 and time.monotonic() < deadline:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    assert data.count(b"HTTP/1.1 404") == 2
    assert data.index(b"Nope1") < data.index(b"Nope2")


def unix_socket(a):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(a.socket_path)
    return s


def test_at_max_connections_a_new_client_takes_the_longest_idle_connections_place(agent_factory):
    """Issue 33 (2): idle connections cannot lock the socket: at api.max_connections the
    connection that waited longest for a request is closed for the new client."""
    a = agent_factory(config={"api": {"max_connections": 2}})

    def served_connection():
        # Retried: the readiness probe's connection may not have been noticed closed yet.
        try:
            c = a.connection(timeout=5)
            if connect_call(c, UNKNOWN, {})[0] == 404:
                return c
            c.close()
        except (OSError, http.client.HTTPException):
            pass
        return None

    held = [wait_for(served_connection, 10, interval=0.1, what="a served connection") for _ in range(2)]
    time.sleep(0.2)
    third = a.connection(timeout=5)
    assert connect_call(third, UNKNOWN, {})[0] == 404  # served
    # held[0] waited longest: closed. held[1] is still served.
    assert held[0].sock.recv(1) == b""
    assert connect_call(held[1], UNKNOWN, {})[0] == 404
    for c in (third, *held):
        c.close()


def test_at_max_connections_receiving_requests_are_kept_and_the_new_client_is_closed(agent_factory):
    a = agent_factory(config={"api": {"max_connections": 2, "request_timeout": "3s"}})
    # Both slots hold a request whose headers are not complete: neither is idle.
    busy = []
    for _ in range(2):
        s = unix_socket(a)
        s.sendall(b"POST /" + UNKNOWN.encode() + b" HTTP/1.1\r\nHost: x\r\n")
        busy.append(s)
    time.sleep(0.3)
    extra = unix_socket(a)
    assert extra.recv(1) == b""  # closed by the agent at once
    extra.close()
    # At request_timeout the half-sent requests are cut, and the slots are free again.
    start = time.monotonic()
    for s in busy:
        assert s.recv(1) == b""
    assert time.monotonic() - start < 5
    c = wait_for(lambda: (lambda c: c if connect_call(c, UNKNOWN, {})[0] == 404 else None)(a.connection(timeout=5)),
                 10, interval=0.2, what="a free slot")
    c.close()


def test_a_request_trickled_in_is_cut_at_request_timeout(agent_factory):
    """Issue 33 (2): one byte every 0.5 s keeps each read under api.idle_timeout, but the
    whole request must arrive within api.request_timeout."""
    a = agent_factory(config={"api": {"idle_timeout": "60s", "request_timeout": "2s"}})
    s = unix_socket(a)
    request = b"POST /" + UNKNOWN.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40
    start = time.monotonic()
    cut = False
    for byte in request:
        try:
            s.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            cut = True
            break
        time.sleep(0.5)
        if time.monotonic() - start > 8:
            break
    elapsed = time.monotonic() - start
    if not cut:
        s.settimeout(5)
        assert s.recv(1) == b""
    assert elapsed < 6, elapsed
    s.close()
    # A whole request sent at once is served as before.
    assert a.call("kibotos.ctrl.v1.AgentService/GetAgent")[0] == 200


def test_idle_connections_are_closed_after_idle_timeout(agent_factory):
    a = agent_factory(config={"api": {"idle_timeout": "1s"}})
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(a.socket_path)
    start = time.monotonic()
    assert s.recv(1) == b""
    assert time.monotonic() - start < 9
    s.close()


def raw_http1(agent, request):
    """Sends raw bytes; returns (status, lower-cased headers, body) of the answer, read
    until the agent closes. The agent may close before it read everything we sent."""
    data = h2_raw.send_and_read_all(agent.socket_path, request)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in (l.partition(":") for l in lines[1:]))
    return int(lines[0].split()[1]), headers, body


def connect_error(headers, body):
    """The Connect error body every refusal carries: (code, message)."""
    assert headers["content-type"] == "application/json"
    error = json.loads(body)
    return error["code"], error.get("message", "")


def test_malformed_http_is_400_with_a_connect_error_body(agent):
    status, headers, body = raw_http1(agent, b"NOT HTTP AT ALL\r\n\r\n")
    assert status == 400
    assert connect_error(headers, body)[0] == "invalid_argument"


def test_a_64_kib_request_line_is_414(agent):
    """Issue 33 (7): it was 400 with a plain-text "the on_url callback failed"."""
    status, headers, body = raw_http1(agent, b"POST /" + b"a" * 65536 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 414
    assert connect_error(headers, body)[0] == "resource_exhausted"


def test_an_http_version_other_than_1_is_505(agent):
    status, headers, body = raw_http1(agent, b"POST /%s HTTP/9.9\r\nHost: x\r\nContent-Type: application/json\r\n"
                                             b"Content-Length: 2\r\n\r\n{}" % GET_AGENT.encode())
    assert status == 505
    code, message = connect_error(headers, body)
    assert code == "unimplemented" and "HTTP/9.9" in message


def test_a_request_line_without_a_version_is_400(agent):
    status, headers, body = raw_http1(agent, b"POST /%s\r\n\r\n" % GET_AGENT.encode())
    assert status == 400
    assert connect_error(headers, body) == ("invalid_argument", "the request line has no HTTP version")


def test_obs_fold_headers_are_400(agent):
    """RFC 9112 section 5.2: a server MUST reject obs-fold with 400 (or unfold it)."""
    status, headers, body = raw_http1(agent, b"POST /%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/\r\n"
                                             b" json\r\nContent-Length: 2\r\n\r\n{}" % GET_AGENT.encode())
    assert status == 400
    code, message = connect_error(headers, body)
    assert code == "invalid_argument" and "obs-fold" in message


def test_error_bodies_are_utf8_json_when_the_request_was_not_utf8(agent):
    """Issue 33 (5): bytes C0 AD from the request were echoed into the error body."""
    for body in (b'{"commandId":"\xc0\xad"}', b'{"\xc0\xad":1}', b"\xc0\xad"):
        status, _, data = agent.call_raw("kibotos.ctrl.v1.EgressService/CreateEgress", body)
        assert status == 400
        error = json.loads(data.decode("utf-8"))  # strict: raises on bytes that are not UTF-8
        assert error["code"] == "invalid_argument"
    status, headers, data = raw_http1(agent, b"POST /kibotos.ctrl.v1.AgentService/\xc0\xad HTTP/1.1\r\nHost: x\r\n"
                                             b"Content-Type: application/json\r\nContent-Length: 2\r\n"
                                             b"Connection: close\r\n\r\n{}")
    assert status == 404
    assert json.loads(data.decode("utf-8"))["code"] == "unimplemented"


def test_duplicate_json_keys_are_invalid_argument_and_change_nothing(agent):
    """Issue 33 (4): the last of two values for one key won."""
    bodies = [b'{"commandId":"dup-a","commandId":"dup-b","spec":{"socks5":{"address":"1.2.3.4:1080"}}}',
              b'{"commandId":"dup-c","command_id":"dup-d","spec":{"socks5":{"address":"1.2.3.4:1080"}}}',
              b'{"commandId":"dup-e","spec":{"socks5":{"address":"1.2.3.4:1080","address":"5.6.7.8:1080"}}}']
    for body in bodies:
        status, _, data = agent.call_raw("kibotos.ctrl.v1.EgressService/CreateEgress", body)
        assert status == 400, data
        error = json.loads(data)
        assert error["code"] == "invalid_argument" and "given twice" in error["message"], error
    status, listed = agent.call("kibotos.ctrl.v1.EgressService/ListEgresses", {})
    assert status == 200 and not listed.get("egresses"), listed


def test_a_json_syntax_error_gives_a_position_not_the_request_bytes(agent):
    """Issue 33 (6): ~20 bytes around the error were echoed, e.g. an unquoted password."""
    body = b'{"commandId":"s1","spec":{"socks5":{"address":"1.2.3.4:1080","password": hunter2secret}}}'
    status, _, data = agent.call_raw("kibotos.ctrl.v1.EgressService/CreateEgress", body)
    assert status == 400
    message = json.loads(data)["message"]
    assert "hunter2" not in message and "1.2.3.4" not in message, message
    assert "line 1, column 74" in message, message


# -- GET /metrics ------------------------------------------------------------------------
def test_metrics_is_prometheus_text_with_the_counts_of_get_agent(agent):
    require_get_agent(agent)
    status, _, body = agent.call_raw(GET_AGENT, b"{}")
    counts = json.loads(body)["agent"]
    samples = agent.metrics()
    assert metric(samples, "kibotos_workspaces") == int(counts.get("workspaceCount", 0))
    assert metric(samples, "kibotos_egresses") == int(counts.get("egressCount", 0))
    assert metric(samples, "kibotos_connections", state="active") == 0
    assert metric(samples, "kibotos_connections", state="draining") == 0
    assert metric(samples, "kibotos_uptime_seconds") > 0
    # A stored Egress counts at once (storing one sends nothing anywhere).
    status, body = agent.call("kibotos.ctrl.v1.EgressService/CreateEgress", {
        "command_id": "metrics-1", "spec": {"socks5": {"address": "1.2.3.4:1080"}}})
    assert status == 200, body
    assert metric(agent.metrics(), "kibotos_egresses") == metric(samples, "kibotos_egresses") + 1


def test_metrics_over_http2_and_only_with_get(agent):
    out = subprocess.run(["curl", "-sS", "--http2-prior-knowledge", "--unix-socket", agent.socket_path,
                          "-w", "\n%{http_code} %{http_version}", "http://localhost/metrics"],
                         capture_output=True, timeout=30, text=True)
    body, _, tail = out.stdout.rpartition("\n")
    assert tail.split() == ["200", "2"], out
    assert "# TYPE kibotos_connections gauge" in body
    status, headers, _ = connect_call(agent.connection(), "metrics", {})  # a POST
    assert status == 405 and headers["allow"] == "GET"


# -- HTTP/2 frames python3-h2 will not send ---------------------------------------------
def test_h2_headers_on_a_lower_stream_id_is_goaway_protocol_error(agent):
    """RFC 9113 section 5.1.1; nghttp2 ignored it once it had forgotten the stream."""
    block = h2_raw.request_headers(GET_AGENT, [("content-type", "application/json")])
    frames = (h2_raw.frame(h2_raw.HEADERS, h2_raw.END_HEADERS | h2_raw.END_STREAM, 5, block)
              + h2_raw.frame(h2_raw.HEADERS, h2_raw.END_HEADERS | h2_raw.END_STREAM, 3, block))
    assert h2_raw.goaway_error(agent.socket_path, frames) == h2_raw.PROTOCOL_ERROR


def test_h2_rapid_reset_is_goaway_enhance_your_calm(agent):
    """CVE-2023-44487: streams opened and reset at once, past nghttp2's budget (1000)."""
    block = h2_raw.request_headers(GET_AGENT, [("content-type", "application/json")])
    frames = b"".join(h2_raw.frame(h2_raw.HEADERS, h2_raw.END_HEADERS, sid, block)
                      + h2_raw.frame(h2_raw.RST_STREAM, 0, sid, (8).to_bytes(4, "big"))  # CANCEL
                      for sid in range(1, 2 * 1100, 2))
    assert h2_raw.goaway_error(agent.socket_path, frames) == h2_raw.ENHANCE_YOUR_CALM


def test_h2_a_flood_of_header_fields_resets_the_stream_with_enhance_your_calm(agent):
    """More than the 100 header fields a request may have."""
    many = [("x-flood-%d" % i, "v") for i in range(150)]
    out = h2_raw.exchange(agent.socket_path, GET_AGENT, [("content-type", "application/json")] + many, body=b"{}")
    assert out.reset == h2_raw.ENHANCE_YOUR_CALM, vars(out)
