"""python3-grpcio (Debian's gRPC library, written by nobody here) calling every RPC of
the API over gRPC: the Unix socket and mTLS, error codes, deadlines, gzip, the body
limit, command-ID retries, and the health service."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from h2_raw import envelope, exchange
from kibotos_agent import SOURCE_ROOT

EGRESS_CONFIG = {"egress": {"allowed_special_purpose_cidrs": ["203.0.113.0/24"]}}
PROTOS = ["kibotos/ctrl/v1/agent.proto", "kibotos/ctrl/v1/egress.proto", "kibotos/ctrl/v1/workspace.proto"]


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """The ctrl and health messages, generated with protoc's Python output."""
    out = str(tmp_path_factory.mktemp("pb"))
    subprocess.run(["protoc", "--proto_path=" + os.path.join(SOURCE_ROOT, "proto"), "--python_out=" + out] + PROTOS,
                   check=True)
    # health.proto's own path would make a Python package "grpc", hiding grpcio's.
    os.makedirs(os.path.join(out, "src", "kib_health"))
    shutil.copy(os.path.join(SOURCE_ROOT, "proto", "grpc", "health", "v1", "health.proto"),
                os.path.join(out, "src", "kib_health"))
    subprocess.run(["protoc", "--proto_path=" + os.path.join(out, "src"), "--python_out=" + out,
                    "kib_health/health.proto"], check=True)
    sys.path.insert(0, out)
    from kib_health import health_pb2
    from kibotos.ctrl.v1 import agent_pb2, egress_pb2, workspace_pb2
    return {"agent": agent_pb2, "egress": egress_pb2, "workspace": workspace_pb2, "health": health_pb2}


class Api:
    """Calls by method path with the generated message classes (no generated stubs)."""

    def __init__(self, channel, pb):
        self.channel, self.pb = channel, pb

    def call(self, service, method, request, response_type, **kw):
        rpc = self.channel.unary_unary("/%s/%s" % (service, method), request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=response_type.FromString)
        return rpc(request, **kw)

    def egress(self, method, **fields):
        e = self.pb["egress"]
        return self.call("kibotos.ctrl.v1.EgressService", method, getattr(e, method + "Request")(**fields),
                         getattr(e, method + "Response"))

    def workspace(self, method, **fields):
        w = self.pb["workspace"]
        return self.call("kibotos.ctrl.v1.WorkspaceService", method, getattr(w, method + "Request")(**fields),
                         getattr(w, method + "Response"))

    def get_agent(self, **kw):
        a = self.pb["agent"]
        return self.call("kibotos.ctrl.v1.AgentService", "GetAgent", a.GetAgentRequest(), a.GetAgentResponse, **kw)


@pytest.fixture
def api(agent_factory, pb):
    a = agent_factory(config=EGRESS_CONFIG)
    with grpc.insecure_channel("unix:" + a.socket_path) as channel:
        yield Api(channel, pb)


def code_of(call):
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code()


def spec(pb, address="203.0.113.5:1080"):
    e = pb["egress"]
    return e.EgressSpec(socks5=e.Socks5Egress(address=address))


def test_get_agent_lists_the_protocols(api):
    agent = api.get_agent().agent
    assert agent.version
    for feature in ("grpc.http2", "grpc_web.http1", "grpc_web.http2", "grpc.reflection.v1", "grpc.health.v1",
                    "compression.gzip"):
        assert feature in agent.features


def test_every_egress_rpc(api, pb):
    created = api.egress("CreateEgress", command_id="grpc-create", spec=spec(pb), labels={"team": "a"}).egress
    eid = created.egress_id
    assert api.egress("GetEgress", egress_id=eid).egress.revision == created.revision
    assert [e.egress_id for e in api.egress("ListEgresses").egresses] == [eid]
    labelled = api.egress("UpdateEgressLabels", command_id="grpc-labels", egress_id=eid,
                          expected_labels_revision=created.labels_revision, labels={"team": "b"}).egress
    assert dict(labelled.labels) == {"team": "b"}
    annotated = api.egress("UpdateEgressAnnotations", command_id="grpc-ann", egress_id=eid,
                           expected_annotations_revision=created.annotations_revision, annotations={"note": "x"}).egress
    assert dict(annotated.annotations) == {"note": "x"}
    updated = api.egress("UpdateEgress", command_id="grpc-update", egress_id=eid, expected_revision=created.revision,
                         spec=spec(pb, "203.0.113.6:1080")).egress
    assert updated.revision == created.revision + 1
    api.egress("DeleteEgress", command_id="grpc-delete", egress_id=eid)
    assert code_of(lambda: api.egress("GetEgress", egress_id=eid)) == grpc.StatusCode.NOT_FOUND


def test_every_workspace_rpc_reaches_its_rules(api, pb):
    w = pb["workspace"]
    assert list(api.workspace("ListWorkspaces").workspaces) == []
    policy = w.NetworkPolicy(mode=w.NETWORK_MODE_ISOLATED)
    assert code_of(lambda: api.workspace("CreateWorkspace", command_id="grpc-ws", netns="/run/netns/kib-no-such",
                                         network_policy=policy)) == grpc.StatusCode.FAILED_PRECONDITION
    missing = "no-such-workspace"
    assert code_of(lambda: api.workspace("GetWorkspace", workspace_id=missing)) == grpc.StatusCode.NOT_FOUND
    assert list(api.workspace("ListConnections").connections) == []
    assert code_of(lambda: api.workspace("ListConnections", workspace_id=missing)) == grpc.StatusCode.NOT_FOUND
    assert code_of(lambda: api.workspace("ListConnections", page_size=1001)) == grpc.StatusCode.INVALID_ARGUMENT
    for method, extra in (("UpdateNetworkPolicy", {"network_policy": policy}), ("DeleteWorkspace", {}),
                          ("UpdateWorkspaceLabels", {}), ("UpdateWorkspaceAnnotations", {})):
        code = code_of(lambda: api.workspace(method, command_id="grpc-" + method, workspace_id=missing, **extra))
        # The service's own rules answer (validation or the missing workspace), not the transport.
        assert code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), method


def test_error_codes_arrive_as_grpc_statuses(api, pb):
    assert code_of(lambda: api.egress("CreateEgress", command_id="", spec=spec(pb))) == grpc.StatusCode.INVALID_ARGUMENT
    eid = api.egress("CreateEgress", command_id="grpc-cas", spec=spec(pb)).egress.egress_id
    assert code_of(lambda: api.egress("UpdateEgress", command_id="grpc-cas-2", egress_id=eid, expected_revision=99,
                                      spec=spec(pb))) == grpc.StatusCode.ABORTED
    with pytest.raises(grpc.RpcError) as e:
        api.call("kibotos.ctrl.v1.EgressService", "NoSuchMethod", pb["egress"].GetEgressRequest(),
                 pb["egress"].GetEgressResponse)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_command_ids_mean_the_same_on_grpc(api, pb):
    first = api.egress("CreateEgress", command_id="grpc-retry", spec=spec(pb)).egress
    again = api.egress("CreateEgress", command_id="grpc-retry", spec=spec(pb)).egress
    assert again.egress_id == first.egress_id
    assert len(api.egress("ListEgresses").egresses) == 1
    other = spec(pb, "203.0.113.9:1080")
    assert code_of(lambda: api.egress("CreateEgress", command_id="grpc-retry", spec=other)) == \
        grpc.StatusCode.INVALID_ARGUMENT


def test_deadlines(api, agent_factory):
    assert api.get_agent(timeout=5).agent.version
    # grpcio may give up on its own before sending a tiny deadline; the agent's side of
    # the rule is shown with the header itself: 1 ns has passed once the call returns.
    a = agent_factory()
    out = exchange(a.socket_path, "kibotos.ctrl.v1.AgentService/GetAgent",
                   [("content-type", "application/grpc"), ("te", "trailers"), ("grpc-timeout", "1n")],
                   body=envelope(b""))
    assert out.headers.get("grpc-status") == "4", vars(out)


def test_gzip_both_ways(agent_factory, pb):
    a = agent_factory()
    with grpc.insecure_channel("unix:" + a.socket_path, compression=grpc.Compression.Gzip) as channel:
        assert Api(channel, pb).get_agent().agent.version


def test_a_message_over_the_body_limit_is_resource_exhausted(api, pb):
    big = {"note": "x" * (1 << 20)}
    assert code_of(lambda: api.egress("CreateEgress", command_id="grpc-big", spec=spec(pb), annotations=big)) == \
        grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_zip_bomb_is_resource_exhausted(agent_factory, pb):
    a = agent_factory(config=EGRESS_CONFIG)
    with grpc.insecure_channel("unix:" + a.socket_path, compression=grpc.Compression.Gzip) as channel:
        api = Api(channel, pb)
        bomb = {"note": "a" * ((1 << 20) + 1000)}  # a few KiB on the wire, over 1 MiB inflated
        assert code_of(lambda: api.egress("CreateEgress", command_id="grpc-bomb", spec=spec(pb), annotations=bomb)) \
            == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_health_check(api, pb):
    h = pb["health"]
    check = lambda service: api.call("grpc.health.v1.Health", "Check", h.HealthCheckRequest(service=service),  # noqa
                                     h.HealthCheckResponse)
    assert check("").status == h.HealthCheckResponse.SERVING
    assert check("kibotos.ctrl.v1.EgressService").status == h.HealthCheckResponse.SERVING
    assert code_of(lambda: check("no.such.Service")) == grpc.StatusCode.NOT_FOUND


def watch(channel, pb, service="", **kw):
    """Health/Watch through grpcio's own streaming call: an iterator of statuses."""
    h = pb["health"]
    rpc = channel.unary_stream("/grpc.health.v1.Health/Watch", request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=h.HealthCheckResponse.FromString)
    return rpc(h.HealthCheckRequest(service=service), **kw)


def test_health_watch_sends_the_status_then_not_serving_at_sigterm(agent_factory, pb):
    a = agent_factory()
    h = pb["health"].HealthCheckResponse
    with grpc.insecure_channel("unix:" + a.socket_path) as channel:
        stream = watch(channel, pb, timeout=30)
        assert next(stream).status == h.SERVING
        # Open and quiet: another call on the channel goes through while it waits.
        assert Api(channel, pb).get_agent(timeout=5).agent.version
        assert not stream.done()
        a.signal(signal.SIGTERM)
        # STOPPING=1 means NOT_SERVING, sent before the server stops; then the stream
        # ends with UNAVAILABLE, said by the agent (not a cut connection).
        assert next(stream).status == h.NOT_SERVING
        with pytest.raises(grpc.RpcError) as e:
            next(stream)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "stopping" in e.value.details()
    assert a.stop() == 0


def test_health_watch_of_each_service_and_of_an_unknown_one(api, pb):
    h = pb["health"].HealthCheckResponse
    known = watch(api.channel, pb, "kibotos.ctrl.v1.EgressService", timeout=30)
    unknown = watch(api.channel, pb, "no.such.Service", timeout=30)
    assert next(known).status == h.SERVING
    # "the server will send a single message with status SERVICE_UNKNOWN but will not
    # terminate the call" (health.proto)
    assert next(unknown).status == h.SERVICE_UNKNOWN
    assert api.get_agent(timeout=5).agent.version  # a round trip after both answers
    assert not known.done() and not unknown.done()
    for stream in (known, unknown):
        stream.cancel()  # RST_STREAM: the agent drops the stream, the connection serves on
        with pytest.raises(grpc.RpcError) as e:
            next(stream)
        assert e.value.code() == grpc.StatusCode.CANCELLED
    assert api.get_agent(timeout=5).agent.version


def test_health_watch_outlives_the_idle_timeout(agent_factory, pb):
    """A Watch waits for events, not for its client: the agent PINGs a connection quiet
    for api.idle_timeout instead of closing it, and closes it only if no answer comes."""
    a = agent_factory(config={"api": {"idle_timeout": "1s"}})
    h = pb["health"].HealthCheckResponse
    with grpc.insecure_channel("unix:" + a.socket_path) as channel:
        stream = watch(channel, pb, timeout=30)
        assert next(stream).status == h.SERVING
        time.sleep(3.5)  # what is tested is this time passing: three idle timeouts
        assert not stream.done()
        a.signal(signal.SIGTERM)
        assert next(stream).status == h.NOT_SERVING
    assert a.stop() == 0


def test_health_watch_ends_at_take_over_and_the_new_agent_serves_it(agent_factory, pb):
    a = agent_factory()
    h = pb["health"].HealthCheckResponse
    with grpc.insecure_channel("unix:" + a.socket_path) as channel:
        stream = watch(channel, pb, timeout=60)
        assert next(stream).status == h.SERVING
        a.take_over()
        assert next(stream).status == h.NOT_SERVING
        with pytest.raises(grpc.RpcError) as e:
            next(stream)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel("unix:" + a.socket_path) as channel:
        assert next(watch(channel, pb, timeout=30)).status == h.SERVING


def test_health_watch_over_mtls(mtls, pb):
    a, pki, port, (cert, key) = mtls
    h = pb["health"].HealthCheckResponse
    creds = grpc.ssl_channel_credentials(root_certificates=read(pki.ca_cert), private_key=read(key),
                                         certificate_chain=read(cert))
    with grpc.secure_channel("127.0.0.1:%d" % port, creds) as channel:
        stream = watch(channel, pb, timeout=30)
        assert next(stream).status == h.SERVING
        assert Api(channel, pb).get_agent(timeout=10).agent.version  # TLS records both ways meanwhile
        a.signal(signal.SIGTERM)
        assert next(stream).status == h.NOT_SERVING
    assert a.stop() == 0


def test_a_watching_client_that_answers_no_ping_is_closed(agent_factory, pb):
    """The other side of the idle timeout rule: a Watch's client that is gone (here:
    one that reads but never answers the agent's PING) does not hold its connection."""
    a = agent_factory(config={"api": {"idle_timeout": "1s"}})
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(a.socket_path)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"),
                            (":path", "/grpc.health.v1.Health/Watch"), ("content-type", "application/grpc"),
                            ("te", "trailers")])
    conn.send_data(sid, envelope(pb["health"].HealthCheckRequest().SerializeToString()), end_stream=True)
    sock.sendall(conn.data_to_send())
    start, pinged, messages = time.monotonic(), False, b""
    while True:
        data = sock.recv(65536)
        if not data:
            break
        for ev in conn.receive_data(data):
            pinged = pinged or isinstance(ev, h2.events.PingReceived)
            if isinstance(ev, h2.events.DataReceived):
                messages += ev.data
        # What h2 queues in answer (the PING's ACK among it) is never sent.
    sock.close()
    assert messages.startswith(envelope(pb["health"].HealthCheckResponse(status=1).SerializeToString()))
    assert pinged
    assert 1.5 < time.monotonic() - start < 8  # two idle timeouts, not one, not never


def test_health_watch_over_http1_is_unimplemented(agent):
    """gRPC-Web over HTTP/1.1 answers whole requests: a stream that stays open is not
    served there (Check is)."""
    body = envelope(b"")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(agent.socket_path)
    sock.sendall(b"POST /grpc.health.v1.Health/Watch HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/grpc-web+proto\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    data = b""
    while b"grpc-status" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 200"), data
    assert b"grpc-status: 12" in data, data


def read(path):
    with open(path, "rb") as f:
        return f.read()


def test_grpc_over_mtls(mtls, pb):
    _, pki, port, (cert, key) = mtls
    creds = grpc.ssl_channel_credentials(root_certificates=read(pki.ca_cert), private_key=read(key),
                                         certificate_chain=read(cert))
    with grpc.secure_channel("127.0.0.1:%d" % port, creds) as channel:
        assert Api(channel, pb).get_agent(timeout=10).agent.version


def test_grpc_over_tls_without_a_client_certificate_gets_nothing(mtls, pb):
    _, pki, port, _ = mtls
    creds = grpc.ssl_channel_credentials(root_certificates=read(pki.ca_cert))
    with grpc.secure_channel("127.0.0.1:%d" % port, creds) as channel:
        assert code_of(lambda: Api(channel, pb).get_agent(timeout=10)) == grpc.StatusCode.UNAVAILABLE
