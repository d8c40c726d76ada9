"""The mTLS listener: TLS 1.2+, a client certificate chaining to the Operator CA is
required ("no certificate, or one from another CA, gets no access"), HTTP/2 by ALPN,
and certificates reloaded on SIGHUP without dropping connections."""
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import warnings

import pytest

from api_helpers import GET_AGENT, Pki, check_get_agent_json, free_port, require_get_agent
from kibotos_agent import connect_call, wait_for

UNKNOWN = "kibotos.ctrl.v1.AgentService/NoSuchMethod"


@pytest.fixture
def pki(tmp_state):
    good = Pki(tmp_state + "/pki", "operator")
    other = Pki(tmp_state + "/pki", "other")
    server = good.issue("agent-server", server=True)
    return {
        "ca": good.ca_cert,
        "server": server,
        "client": good.issue("operator"),
        "other_client": other.issue("intruder"),
        "good": good,
    }


@pytest.fixture
def tls_agent(agent_factory, pki):
    port = free_port()
    cert, key = pki["server"]
    a = agent_factory(config={"api": {"tls": {"listen": "127.0.0.1:%d" % port, "cert": cert, "key": key,
                                              "client_ca": pki["ca"]}}})
    a.tls_port = port
    return a


def client_context(pki, client="client"):
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if client:
        ctx.load_cert_chain(*pki[client])
    return ctx


def https(agent, pki, client="client"):
    return http.client.HTTPSConnection("127.0.0.1", agent.tls_port, context=client_context(pki, client), timeout=10)


def curl_tls(agent, pki, client="client", extra=()):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    args = ["curl", "-sS", "--cacert", pki["ca"], "-H", "Content-Type: application/json", "-d", "{}",
            "-o", "-", "-w", "\n%{http_code} %{http_version}"]
    if client:
        args += ["--cert", pki[client][0], "--key", pki[client][1]]
    args += list(extra) + ["https://127.0.0.1:%d/%s" % (agent.tls_port, GET_AGENT)]
    return subprocess.run(args, capture_output=True, timeout=30)


def test_a_client_certificate_from_the_operator_ca_is_accepted(tls_agent, pki):
    conn = https(tls_agent, pki)
    status, _, data = connect_call(conn, UNKNOWN, {})
    assert status == 404 and json.loads(data)["code"] == "unimplemented"
    conn.close()


def test_get_agent_over_mtls_with_curl_http1_and_http2(tls_agent, pki):
    require_get_agent(tls_agent)
    for extra, version in ((["--http1.1"], "1.1"), (["--http2"], "2")):
        out = curl_tls(tls_agent, pki, extra=extra)
        assert out.returncode == 0, out.stderr
        body, _, tail = out.stdout.rpartition(b"\n")
        assert tail.decode().split() == ["200", version]
        check_get_agent_json(json.loads(body))


def test_metrics_over_mtls(tls_agent, pki):
    conn = https(tls_agent, pki)
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    assert r.status == 200, body
    assert "\nkibotos_connections{state=\"active\"} 0\n" in body
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        conn = https(tls_agent, pki, client=None)
        conn.request("GET", "/metrics")
        conn.getresponse().read()


def test_no_client_certificate_gets_no_access(tls_agent, pki):
    out = curl_tls(tls_agent, pki, client=None)
    assert out.returncode != 0
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        conn = https(tls_agent, pki, client=None)
        connect_call(conn, UNKNOWN, {})


def test_a_certificate_from_another_ca_gets_no_access(tls_agent, pki):
    out = curl_tls(tls_agent, pki, client="other_client")
    assert out.returncode != 0
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        conn = https(tls_agent, pki, client="other_client")
        connect_call(conn, UNKNOWN, {})


def test_tls_below_1_2_is_refused(tls_agent, pki):
    ctx = client_context(pki)
    ctx.set_ciphers("ALL:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_1
        ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError) as e:
        conn = http.client.HTTPSConnection("127.0.0.1", tls_agent.tls_port, context=ctx, timeout=10)
        connect_call(conn, UNKNOWN, {})
    assert "PROTOCOL_VERSION" in str(e.value).upper() or "NO_PROTOCOLS" in str(e.value).upper(), e.value


def test_alpn_offers_h2_and_http1(tls_agent, pki):
    ctx = client_context(pki)
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    import socket
    with socket.create_connection(("127.0.0.1", tls_agent.tls_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.selected_alpn_protocol() == "h2"


def peer_cn(agent, pki):
    conn = https(agent, pki)
    conn.connect()
    subject = dict(x[0] for x in conn.sock.getpeercert()["subject"])
    conn.close()
    return subject["commonName"]


def test_sighup_reloads_the_certificate_without_dropping_connections(tls_agent, pki):
    kept = https(tls_agent, pki)
    assert connect_call(kept, UNKNOWN, {})[0] == 404
    kept_sock = kept.sock
    assert peer_cn(tls_agent, pki) == "agent-server"

    # Same file names, new certificate (as a renewal would do), then SIGHUP.
    new_cert, new_key = pki["good"].issue("agent-server-renewed", server=True)
    cert, key = pki["server"]
    shutil.copy(new_cert, cert)
    shutil.copy(new_key, key)
    tls_agent.signal(signal.SIGHUP)
    wait_for(lambda: peer_cn(tls_agent, pki) == "agent-server-renewed", 10, interval=0.1,
             what="new connections to get the renewed certificate")

    # The connection opened before the reload still works, on the same socket.
    for _ in range(3):
        assert connect_call(kept, UNKNOWN, {})[0] == 404
    assert kept.sock is kept_sock
    kept.close()


def test_a_failed_reload_keeps_the_previous_certificate(tls_agent, pki):
    cert, _ = pki["server"]
    with open(cert, "w") as f:
        f.write("not a certificate\n")
    tls_agent.signal(signal.SIGHUP)
    wait_for(lambda: "TLS reload failed" in tls_agent.log(), 10, what="the reload error in the log")
    assert tls_agent.alive()
    assert peer_cn(tls_agent, pki) == "agent-server"


def test_a_bad_tls_certificate_stops_the_start(agent_factory, pki, tmp_state):
    bad = tmp_state + "/bad.pem"
    with open(bad, "w") as f:
        f.write("nope\n")
    a = agent_factory(start=False, config={"api": {"tls": {"listen": "127.0.0.1:%d" % free_port(), "cert": bad,
                                                           "key": pki["server"][1], "client_ca": pki["ca"]}}})
    a.start(wait=False)
    assert a.proc.wait(15) == 1
    assert "api.tls" in a.log()


def test_silent_tls_peers_neither_lock_out_the_unix_socket_nor_hold_their_slots(agent_factory, pki):
    """Issue 33 (1): connections to the TLS port that never send a ClientHello do not
    take the Unix socket's budget, one address holds at most a quarter of the TLS
    listener's, and each is dropped at the 10 s handshake deadline, not api.idle_timeout."""
    port = free_port()
    cert, key = pki["server"]
    a = agent_factory(config={"api": {"max_connections": 16, "idle_timeout": "60s", "tls": {
        "listen": "127.0.0.1:%d" % port, "cert": cert, "key": key, "client_ca": pki["ca"]}}})
    a.tls_port = port
    silent = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(40)]
    started = time.monotonic()
    assert a.call("kibotos.ctrl.v1.AgentService/GetAgent")[0] == 200

    def closed(s):
        s.setblocking(False)
        try:
            return s.recv(1) == b""
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True

    wait_for(lambda: sum(closed(s) for s in silent) == 36, 5, what="all but 4 silent connections closed")
    held = [s for s in silent if not closed(s)]
    assert len(held) == 4  # 16 / 4 from one address
    for s in held:
        s.settimeout(20)
        assert s.recv(1) == b""
    waited = time.monotonic() - started
    assert 8 < waited < 20, waited
    # The slots are free again for a real client.
    c = https(a, pki)
    c.request("POST", "/kibotos.ctrl.v1.AgentService/GetAgent", body=b"{}", headers={"Content-Type": "application/json"})
    assert c.getresponse().status == 200
    for s in silent:
        s.close()


def test_kibotosctl_with_a_refused_certificate_names_the_refusal(tls_agent, pki):
    """Issue 33 (6): it said "getpeername() failed with errno 107"."""
    from kibotos_agent import BUILD_ROOT
    cert, key = pki["other_client"]
    out = subprocess.run([os.path.join(BUILD_ROOT, "agent", "ctl", "kibotosctl"), "--server",
                          "127.0.0.1:%d" % tls_agent.tls_port, "--cert", cert, "--key", key, "--ca", pki["ca"],
                          "agent"], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "the server refused the TLS handshake: " in out.stderr, out.stderr
    assert "getpeername" not in out.stderr, out.stderr
