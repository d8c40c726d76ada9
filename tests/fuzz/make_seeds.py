#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz (corpus/<target>/), deterministically.

Seeds are well-formed exchanges each target's parser meets in real use (and a few
known-hostile ones), laid out as the target's LLVMFuzzerTestOneInput reads its input.
Inputs a fuzzer found (crashes, broken invariants) are kept beside them as
corpus/<target>/found-*, and the corpus a long run grew (minimized with libFuzzer's
-merge=1) as corpus/<target>/grown-*, so every build replays them. The corpora are
committed; run this again only when a target's input layout changes:
    python3 tests/fuzz/make_seeds.py
HTTP/2 seeds are framed by python3-h2, the library Debian ships.
"""
import gzip
import json
import os
import struct

import h2.config
import h2.connection

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, seeds):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    for old in os.listdir(folder):  # inputs the fuzzers found ("found-*", "grown-*") stay
        if not old.startswith(("found-", "grown-")):
            os.remove(os.path.join(folder, old))
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())


def be16(n):
    return struct.pack(">H", n)


# --- SOCKS5 (RFC 1928, RFC 1929) -------------------------------------------------
V4_REPLY = b"\x05\x00\x00\x01" + bytes([203, 0, 113, 7]) + be16(1080)
V6_REPLY = b"\x05\x00\x00\x04" + bytes(range(16)) + be16(8443)
DOMAIN_REPLY = b"\x05\x00\x00\x03\x0bexample.com" + be16(80)


def socks5_client():
    # option bits: 1 pipelined, 2 credentials, 4 UDP ASSOCIATE, 8 IPv6 destination
    return {
        "noauth-v4": b"\x00" + b"\x05\x00" + V4_REPLY,
        "noauth-v4-tunnel-data": b"\x00" + b"\x05\x00" + V4_REPLY + b"HTTP/1.1 200 OK\r\n",
        "pipelined-v6": b"\x09" + b"\x05\x00" + V6_REPLY,
        "userpass": b"\x02" + b"\x05\x02" + b"\x01\x00" + V4_REPLY,
        "userpass-pipelined": b"\x03" + b"\x05\x02" + b"\x01\x00" + V4_REPLY,
        "userpass-refused": b"\x02" + b"\x05\x02" + b"\x01\x01",
        "domain-bound": b"\x00" + b"\x05\x00" + DOMAIN_REPLY,
        "udp-associate": b"\x04" + b"\x05\x00" + V4_REPLY,
        "connection-refused": b"\x00" + b"\x05\x00" + b"\x05\x05\x00\x01" + bytes(6),
        "unknown-reply-code": b"\x00" + b"\x05\x00" + b"\x05\x42\x00\x01" + bytes(6),
        "no-acceptable-method": b"\x00" + b"\x05\xff",
        "socks4-answer": b"\x00" + b"\x00\x5a" + bytes(6),
        "bad-atyp": b"\x00" + b"\x05\x00" + b"\x05\x00\x00\x07" + bytes(8),
        "longest-domain": b"\x00" + b"\x05\x00" + b"\x05\x00\x00\x03\xff" + b"a" * 255 + be16(1),
    }


def socks5_udp():
    return {
        "v4": b"\x00\x00\x00\x01" + bytes([10, 0, 0, 53]) + be16(53) + b"\x12\x34payload",
        "v6": b"\x00\x00\x00\x04" + bytes(15) + b"\x01" + be16(53) + b"dns",
        "domain": b"\x00\x00\x00\x03\x07example" + be16(53) + b"x",
        "fragment": b"\x00\x00\x01\x01" + bytes(6),
        "truncated": b"\x00\x00\x00\x04" + bytes(5),
        "empty-domain": b"\x00\x00\x00\x03\x00" + be16(53),
    }


# --- DNS (RFC 1035, RFC 6891) -------------------------------------------------------
def name(n):
    return b"".join(bytes([len(p)]) + p.encode() for p in n.split(".")) + b"\x00"


def query(qid=0x1234, qname="example.com", qtype=1, edns=None, flags=0x0100):
    ar = 1 if edns else 0
    msg = be16(qid) + be16(flags) + be16(1) + be16(0) + be16(0) + be16(ar) + name(qname) + be16(qtype) + be16(1)
    if edns:
        msg += b"\x00" + be16(41) + be16(edns) + b"\x00\x00\x00\x00" + be16(0)
    return msg


def answer(q, rdatas=1, rdlen=4):
    head = q[:2] + be16(0x8180) + be16(1) + be16(rdatas) + be16(0) + be16(0)
    question = q[12:12 + len(q) - 12 - (11 if q[11] else 0)]
    rr = b"\xc0\x0c" + be16(1) + be16(1) + b"\x00\x00\x0e\x10" + be16(rdlen) + bytes(rdlen)
    return head + question + rr * rdatas


def dns_message():
    plain = query()
    edns = query(edns=4096)
    loop = be16(1) + be16(0x0100) + be16(1) + bytes(6) + b"\xc0\x0c" + be16(1) + be16(1)
    seeds = {
        "a-query-and-answer": be16(len(plain)) + plain + be16(0x0580) + answer(plain),
        "edns-4096": be16(len(edns)) + edns + be16(0) + answer(edns),
        "answer-too-big-for-512": be16(len(plain)) + plain + be16(0) + answer(plain, rdatas=40, rdlen=16),
        "compression-loop": be16(len(loop)) + loop + be16(0),
        "aaaa-long-name": (lambda q: be16(len(q)) + q + be16(0))(query(qname=".".join(["a" * 63] * 3), qtype=28)),
        "response-bit-set": (lambda q: be16(len(q)) + q + be16(0))(query(flags=0x8100)),
    }
    return seeds


def dns_query_mux():
    q1, q2 = query(qid=1), query(qid=2, qname="example.org", edns=1232)
    big = answer(q1, rdatas=50, rdlen=16)[12:]

    def submit(tcp, q):
        return b"\x00" + bytes([tcp]) + be16(len(q)) + q

    def reply(which, flags, body):
        return b"\x01" + bytes([which, flags]) + be16(len(body)) + body

    ok_body = answer(q1)[len(q1):]
    return {
        "udp-query-answered": b"\x00" + submit(0, q1) + reply(0, 0x80, ok_body),
        "servfail-fails-over": b"\x01" + submit(0, q1) + reply(0, 0x82, b"") + reply(1, 0x80, ok_body),
        "timeout-then-servfail": b"\x00" + submit(0, q1) + b"\x03\xff" + b"\x03\xff",
        "tcp-forgotten": b"\x01" + submit(2, q2) + b"\x05\x02" + reply(0, 0x80, ok_body),
        "resolver-broke": b"\x02" + submit(1, q1) + submit(0, q2) + b"\x04\x00" + b"\x04\x01",
        "big-answer-over-udp": b"\x00" + submit(0, q1) + reply(0, 0x80, big),
        "raw-answer": b"\x00" + submit(0, q1) + b"\x02\x00" + be16(len(answer(q1))) + answer(q1),
        "cap-of-eight": b"\x00" + submit(0, q1) * 10,
    }


def dns_tcp_framing():
    q = query()
    return {
        "two-frames": b"\x00" + be16(len(q)) + q + be16(len(q)) + q,
        "byte-reads": b"\x00" + be16(len(q)) + q,
        "seven-byte-reads": b"\x06" + (be16(len(q)) + q) * 3,
        "zero-length": b"\x01" + be16(0),
        "length-lies": b"\x02" + be16(65535) + q,
    }


# --- API conventions ---------------------------------------------------------------
def api_conventions():
    def entries(pairs):
        out = bytes([len(pairs)])
        for k, v in pairs:
            out += bytes([len(k)]) + k.encode() + bytes([len(v)]) + v.encode()
        return out

    seq = bytes([0, 0, 0, 0, 0, 42])
    return {
        "empty-token": b"\x00" + seq + entries([]),
        "selector": b"\x01" + seq + entries([("team", "a"), ("example.com/tier", "gold")]) + b"0000002a" + b"ab" * 32,
        "bad-label": b"\x00" + seq + entries([("-bad", "x" * 70)]) + b"zz",
        "command-id": b"\x00" + seq + entries([]) + b"create-egress-7f3a",
        "long-command-id": b"\x00" + seq + entries([]) + b"c" * 129,
    }


# --- config and policy files ---------------------------------------------------------
def config():
    with open(os.path.join(HERE, "..", "..", "packaging", "config", "agent.yaml"), "rb") as f:
        sample = f.read()
    return {
        "packaged-sample": sample,
        "small": b"state_dir: /var/lib/kibotos\nlog:\n  level: debug\n  format: json\n",
        "lists": b"egress:\n  allowed_special_purpose_cidrs: [203.0.113.0/24, 2001:db8::/32]\n",
        "durations": b"dataplane:\n  idle_timeout: 3600s\napi:\n  request_timeout: 30s\n",
        "unknown-key": b"nope: 1\n",
        "anchors": b"a: &x {b: [*x]}\n",
    }


POLICY_YAML = b"""mode: NETWORK_MODE_EGRESS
egresses:
  - egressId: eg-1
    destinations: [0.0.0.0/0, "::/0"]
    ports: [{first: 443, last: 443}]
resolvers:
  - egressId: eg-1
    udp: {address: "10.0.0.53:53"}
"""


def ctl_message_file():
    return {
        "policy-yaml": b"\x00" + POLICY_YAML,
        "policy-json": b"\x00" + json.dumps({"egresses": [{"egressId": "eg-1", "destinations": ["10.0.0.0/8"]}]}).encode(),
        "egress-spec": b"\x01" + b"socks5:\n  address: 203.0.113.5:1080\n  username: u\n  password: p\n",
        "create-workspace": b"\x02" + b"netns: /run/netns/guest\nlabels: {team: a}\nnetworkPolicy:\n  egresses: []\n",
        "update-policy": b"\x03" + b"commandId: c1\nworkspaceId: ws-1\nexpectedRevision: '3'\n",
        "bad-enum": b"\x00" + b"mode: NOPE\n",
    }


# --- the API server -----------------------------------------------------------------
def h1(path, body, ctype="application/json", extra=b""):
    body = body if isinstance(body, bytes) else body.encode()
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\nContent-Type: " + ctype.encode() +
            b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


def pb_string(field, s):
    s = s.encode()
    return bytes([field << 3 | 2, len(s)]) + s


def envelope(msg, flags=0):
    return bytes([flags]) + struct.pack(">I", len(msg)) + msg


def h2_exchange(requests, end_streams=True):
    """Client bytes for requests [(headers, body)] on one HTTP/2 connection."""
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream = 1
    for headers, body in requests:
        conn.send_headers(stream, headers)
        conn.send_data(stream, body, end_stream=end_streams)
        stream += 2
    return conn.data_to_send()


def h2_headers(path, ctype, extra=()):
    return [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", path),
            ("content-type", ctype)] + list(extra)


EGRESS = "/kibotos.ctrl.v1.EgressService/"
WORKSPACE = "/kibotos.ctrl.v1.WorkspaceService/"
AGENT = "/kibotos.ctrl.v1.AgentService/"
CREATE = json.dumps({"commandId": "c-1", "spec": {"socks5": {"address": "203.0.113.5:1080"}}})
CREATE_WS = json.dumps({"commandId": "w-1", "netns": "/run/netns/fuzz",
                        "networkPolicy": {"egresses": [{"egressId": "eg-x", "destinations": ["0.0.0.0/0"]}]}})


def http_api():
    h1_seeds = {
        "h1-get-agent": h1(AGENT + "GetAgent", "{}"),
        "h1-create-egress": h1(EGRESS + "CreateEgress", CREATE),
        "h1-create-then-list": h1(EGRESS + "CreateEgress", CREATE) + h1(EGRESS + "ListEgresses", '{"pageSize":1}'),
        "h1-create-workspace": h1(WORKSPACE + "CreateWorkspace", CREATE_WS),
        "h1-proto-get-egress": h1(EGRESS + "GetEgress", pb_string(1, "eg-1"), "application/proto"),
        "h1-gzip": h1(AGENT + "GetAgent", gzip.compress(b"{}", mtime=0), extra=b"Content-Encoding: gzip\r\n"),
        "h1-grpc-web": h1(AGENT + "GetAgent", envelope(b""), "application/grpc-web+proto"),
        "h1-chunked": (b"POST " + AGENT.encode() + b"GetAgent HTTP/1.1\r\nContent-Type: application/json\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
        "h1-metrics": b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "h1-bad-json": h1(EGRESS + "CreateEgress", '{"commandId":"a","commandId":"b"}'),
    }
    h2_seeds = {
        "h2-connect-json": h2_exchange([(h2_headers(AGENT + "GetAgent", "application/json"), b"{}")]),
        "h2-create-and-get": h2_exchange([
            (h2_headers(EGRESS + "CreateEgress", "application/json"), CREATE.encode()),
            (h2_headers(EGRESS + "GetEgress", "application/proto"), pb_string(1, "eg-1"))]),
        "h2-grpc": h2_exchange([(h2_headers(AGENT + "GetAgent", "application/grpc", [("te", "trailers"),
                                                                                   ("grpc-timeout", "5S")]),
                                 envelope(b""))]),
        "h2-grpc-web": h2_exchange([(h2_headers(AGENT + "GetAgent", "application/grpc-web"), envelope(b""))]),
        "h2-reflection-open": h2_exchange([(h2_headers("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                                                       "application/grpc"), envelope(b"\x3a\x00"))],
                                          end_streams=False),
        "h2-health": h2_exchange([(h2_headers("/grpc.health.v1.Health/Check", "application/grpc"), envelope(b""))]),
    }
    seeds = {}
    for name, data in h1_seeds.items():
        seeds[name] = b"\x00\x00" + data
        seeds[name + "-cut"] = b"\x80\x00" + data  # read in small pieces
    for name, data in h2_seeds.items():
        seeds[name] = b"\x00\x00" + data
        seeds[name + "-cut"] = b"\x83\x00" + data
    # The harness adds the preface and SETTINGS: frames only.
    frames = h2_seeds["h2-connect-json"][24:]
    seeds["h2-frames-only"] = b"\x00\x01" + frames
    return seeds


def main():
    write("socks5_client", socks5_client())
    write("socks5_udp", socks5_udp())
    write("dns_message", dns_message())
    write("dns_query_mux", dns_query_mux())
    write("dns_tcp_framing", dns_tcp_framing())
    write("api_conventions", api_conventions())
    write("config", config())
    write("ctl_message_file", ctl_message_file())
    write("http_api", http_api())


if __name__ == "__main__":
    main()
