"""Refusals go out as soon as the request headers are in, and a whole message is
answered while the client keeps its side open (issue 30: `buf curl` without --schema
waited for the 60 s idle timeout). Each exchange here leaves the request side open."""
import json
import socket

import pytest

from api_helpers import GET_AGENT, buf_curl, npm_install, require_get_agent
from h2_raw import envelope, exchange

# Far below the agent's idle timeout (60 s): an answer that waits for the body's end
# never comes within it.
PROMPT = 5.0


def test_unknown_path_is_refused_before_the_body_ends(agent):
    out = exchange(agent.socket_path, "kibotos.ctrl.v1.AgentService/NoSuchMethod",
                   [("content-type", "application/json")], body=b"{", end_stream=False, timeout=PROMPT)
    assert out.status == 404, vars(out)
    assert json.loads(out.body)["code"] == "unimplemented"


def test_unsupported_content_type_is_refused_before_the_body_ends(agent):
    out = exchange(agent.socket_path, GET_AGENT, [("content-type", "text/plain")], end_stream=False,
                   timeout=PROMPT)
    assert out.status == 415, vars(out)


def test_a_get_is_refused_at_once(agent):
    out = exchange(agent.socket_path, GET_AGENT, [("content-type", "application/json")], end_stream=False,
                   timeout=PROMPT, method="GET")
    assert out.status == 405, vars(out)


def test_a_connect_body_that_reached_its_content_length_is_answered(agent):
    require_get_agent(agent)
    out = exchange(agent.socket_path, GET_AGENT, [("content-type", "application/json"), ("content-length", "2")],
                   body=b"{}", end_stream=False, timeout=PROMPT)
    assert out.status == 200, vars(out)
    assert json.loads(out.body)["agent"]["version"]


def test_a_connect_body_short_of_its_content_length_waits(agent):
    require_get_agent(agent)
    out = exchange(agent.socket_path, GET_AGENT, [("content-type", "application/json"), ("content-length", "3")],
                   body=b"{}", end_stream=False, timeout=2.0)
    assert not out.ended and out.status == 0, vars(out)


@pytest.mark.parametrize("h2", [False, True], ids=["http1", "http2"])
def test_buf_curl_without_schema_finishes_promptly(agent, h2):
    """It asks the reflection service (a bidirectional stream) before the call."""
    npm_install()
    args = ["--unix-socket", agent.socket_path, "--data", "{}", "http://localhost/" + GET_AGENT]
    if h2:
        args.insert(0, "--http2-prior-knowledge")
    out = buf_curl(args, timeout=20)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["agent"]["version"]


def test_a_grpc_unary_message_is_answered_while_the_request_side_stays_open(agent):
    out = exchange(agent.socket_path, GET_AGENT, [("content-type", "application/grpc"), ("te", "trailers")],
                   body=envelope(b""), end_stream=False, timeout=PROMPT)
    assert out.status == 200 and out.ended, vars(out)
    assert out.trailers.get("grpc-status") == "0", vars(out)
    assert len(out.body) > 5


def test_a_grpc_refusal_is_trailers_only_at_once(agent):
    out = exchange(agent.socket_path, "kibotos.ctrl.v1.AgentService/NoSuchMethod",
                   [("content-type", "application/grpc"), ("te", "trailers")], end_stream=False, timeout=PROMPT)
    assert out.ended, vars(out)
    assert out.headers.get("grpc-status") == "12", vars(out)
    assert out.body == b""


def http1_head_only(socket_path, path, headers, timeout=1.0):
    """Sends an HTTP/1.1 request's head announcing a body that never comes; returns the
    answer once it is whole (its Content-Length), or what came within `timeout`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(socket_path)
    head = "POST /%s HTTP/1.1\r\nHost: localhost\r\n" % path + "".join("%s: %s\r\n" % h for h in headers) + "\r\n"
    sock.sendall(head.encode())
    data = b""
    try:
        while not whole_http1_response(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    finally:
        sock.close()
    return data


def whole_http1_response(data):
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    for line in data[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(data) - end - 4 >= int(value)
    return False


@pytest.mark.parametrize("path,headers,status", [
    ("kibotos.ctrl.v1.AgentService/NoSuchMethod", [("Content-Type", "application/json")], b"404"),
    (GET_AGENT, [("Content-Type", "text/plain")], b"415"),
    (GET_AGENT, [("Content-Type", "application/connect+json")], b"415"),
    ("kibotos.ctrl.v1.AgentService/NoSuchMethod", [("Content-Type", "application/grpc-web")], b"200"),
    (GET_AGENT, [("Content-Type", "application/grpc")], b"200"),
], ids=["unknown-path", "content-type", "connect-stream-to-unary", "grpc-web-unknown-path", "grpc-over-http1"])
def test_http1_refusals_go_out_when_the_headers_are_in(agent, path, headers, status):
    # Within a second (http1_head_only's timeout), not the 60 s idle timeout.
    data = http1_head_only(agent.socket_path, path, headers + [("Content-Length", "1000")])
    assert data.startswith(b"HTTP/1.1 " + status + b" "), data
    # The body is left unread: the answer says so, and the connection closes after it.
    assert b"connection: close\r\n" in data.lower(), data
    if status == b"200":
        assert b"grpc-status: 12" in data, data


def test_http1_chunked_refusal_goes_out_when_the_headers_are_in(agent):
    data = http1_head_only(agent.socket_path, "no.Such/Method",
                              [("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")])
    assert data.startswith(b"HTTP/1.1 404 "), data


def test_a_connect_stream_to_a_unary_method_is_415_over_http2(agent):
    out = exchange(agent.socket_path, GET_AGENT, [("content-type", "application/connect+proto")],
                   body=envelope(b""), end_stream=False, timeout=PROMPT)
    assert out.status == 415, vars(out)
    assert "application/json" in out.headers.get("accept-post", ""), vars(out)
