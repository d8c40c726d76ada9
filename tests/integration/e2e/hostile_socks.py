"""Hostile SOCKS5 (and SOCKS5-in-TLS) servers for test_hostile_egress.py: one
behaviour per process. Every connection gets its own thread; every wait is bounded.

    hostile_socks.py HOST PORT BEHAVIOUR [--cert PEM --key KEY] [--log FILE]

Behaviours (the agent's dials send the greeting alone, then wait for each reply):
  garbage      answers the greeting with an HTTP error page
  truncated    answers the greeting, then 6 of the CONNECT reply's 10 bytes, then FIN
  slow         correct replies, one byte every 80 ms (about 1 s in all), then relays
  trickle      correct replies, one byte every 600 ms (past any 2 s handshake timeout)
  domain-bnd   a correct CONNECT reply whose BND.ADDR is a 255-byte domain name
  wrong-version  answers the greeting as version 4
  unoffered    picks method 2 (username/password), which the agent did not offer
  rst          answers the greeting, reads the CONNECT, then resets (SO_LINGER 0)
  rst-after-reply  correct replies, reads the client's first line, then resets: a
               failure after the dial
  never        reads the greeting and never answers
  flood        right after accept, sends a greeting reply and then up to 100 MB nobody
               asked for (logs "flood sent N" to --log when the peer gives up)
  ahead        answers the greeting and the CONNECT in one segment before the CONNECT
               arrives
  tls-good     TLS with --cert, then a correct SOCKS5 server (the control case)
  tls-bad-cert TLS with --cert (a certificate the agent must reject), same server
  tls-stall    reads the ClientHello, sends 7 bytes of a ServerHello record, stalls

A server that "relays" after a successful CONNECT reads the client's first line and
answers "HOSTILE ok". The pipelining probe (greeting and a CONNECT to 0.0.0.0:0 in one
segment) is answered with the greeting reply only, then closed, so the verdict is
"does not read requests sent with the greeting" and every dial is one request per
reply."""
import argparse
import socket
import ssl
import struct
import threading
import time

PROBE_CONNECT = bytes([5, 1, 0, 1, 0, 0, 0, 0, 0, 0])
OK_REPLY = bytes([5, 0, 0, 1, 10, 0, 0, 1, 0x1f, 0x90])
STALL = 30  # seconds: longer than any handshake timeout the tests use, still bounded
FLOOD_BYTES = 100 << 20

log_lock = threading.Lock()
log_path = None


def log(line):
    if log_path:
        with log_lock, open(log_path, "a") as f:
            f.write(line + "\n")


def recv_exact(conn, n, timeout=10):
    conn.settimeout(timeout)
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_connect(conn):
    head = recv_exact(conn, 4)
    rest = {1: 6, 4: 18}.get(head[3])
    if rest is None:
        raise ConnectionError("unexpected ATYP")
    return head + recv_exact(conn, rest)


def read_greeting(conn):
    """The greeting; True when it is the pipelining probe (handled here)."""
    conn.settimeout(10)
    data = conn.recv(64)
    if not data:
        raise ConnectionError("closed")
    if len(data) > 3 and data.endswith(PROBE_CONNECT):
        conn.sendall(bytes([5, 0]))
        return True
    if len(data) < 3:
        data += recv_exact(conn, 3 - len(data))
    return False


def send_slowly(conn, data, gap):
    for i in range(len(data)):
        conn.sendall(data[i:i + 1])
        if i + 1 < len(data):
            time.sleep(gap)


def relay_line(conn):
    """After a successful CONNECT: read the client's first line, answer, close."""
    conn.settimeout(10)
    got = b""
    while b"\n" not in got and len(got) < 4096:
        chunk = conn.recv(4096)
        if not chunk:
            break
        got += chunk
    conn.sendall(b"HOSTILE ok\n")
    if isinstance(conn, ssl.SSLSocket):
        # A correct TLS server ends with close_notify (without it the agent sees the
        # stream cut short): it comes back once the agent's own close_notify arrives.
        try:
            conn = conn.unwrap()
        except (OSError, ValueError):
            return
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(5)
    try:
        while conn.recv(4096):
            pass
    except OSError:
        pass


def correct_socks(conn, gap=0.0):
    if read_greeting(conn):
        return
    (send_slowly(conn, bytes([5, 0]), gap) if gap else conn.sendall(bytes([5, 0])))
    read_connect(conn)
    (send_slowly(conn, OK_REPLY, gap) if gap else conn.sendall(OK_REPLY))
    relay_line(conn)


def serve(conn, behaviour, tls_ctx):
    try:
        if behaviour == "flood":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
            sent = 0
            chunk = bytes([5, 0]) + bytes(65534)
            conn.settimeout(10)
            try:
                while sent < FLOOD_BYTES:
                    sent += conn.send(chunk if sent == 0 else bytes(65536))
            except OSError:
                pass
            log(f"flood sent {sent}")
            return
        if behaviour == "tls-stall":
            conn.settimeout(10)
            conn.recv(4096)  # the ClientHello
            conn.sendall(bytes([0x16, 3, 3, 0, 100, 2, 0]))  # a 100-byte record, 2 bytes of it
            time.sleep(STALL)
            return
        if behaviour in ("tls-good", "tls-bad-cert"):
            conn.settimeout(10)
            try:
                conn = tls_ctx.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log(f"tls refused {type(e).__name__}")
                return
            return correct_socks(conn)
        if behaviour == "rst-after-reply":
            if read_greeting(conn):
                return
            conn.sendall(bytes([5, 0]))
            read_connect(conn)
            conn.sendall(OK_REPLY)
            conn.settimeout(10)
            conn.recv(4096)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() resets
            return
        if behaviour == "slow":
            return correct_socks(conn, 0.08)
        if behaviour == "trickle":
            return correct_socks(conn, 0.6)
        if read_greeting(conn):
            return
        if behaviour == "garbage":
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            time.sleep(1)
        elif behaviour == "truncated":
            conn.sendall(bytes([5, 0]))
            read_connect(conn)
            conn.sendall(OK_REPLY[:6])
        elif behaviour == "domain-bnd":
            conn.sendall(bytes([5, 0]))
            read_connect(conn)
            conn.sendall(bytes([5, 0, 0, 3, 255]) + b"d" * 251 + b".tst" + bytes([0x1f, 0x90]))
            relay_line(conn)
        elif behaviour == "wrong-version":
            conn.sendall(bytes([4, 0]))
            time.sleep(1)
        elif behaviour == "unoffered":
            conn.sendall(bytes([5, 2]))
            time.sleep(1)
        elif behaviour == "rst":
            conn.sendall(bytes([5, 0]))
            read_connect(conn)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() resets
        elif behaviour == "never":
            time.sleep(STALL)
        elif behaviour == "ahead":
            conn.sendall(bytes([5, 0]) + OK_REPLY)
            time.sleep(1)
        else:
            raise SystemExit(f"unknown behaviour {behaviour}")
    except (OSError, ConnectionError):
        pass
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main():
    global log_path
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("behaviour")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--log")
    a = p.parse_args()
    log_path = a.log
    tls_ctx = None
    if a.cert:
        tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_ctx.load_cert_chain(a.cert, a.key)
    family = socket.AF_INET6 if ":" in a.host else socket.AF_INET
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((a.host, a.port))
    srv.listen(512)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, a.behaviour, tls_ctx), daemon=True).start()


if __name__ == "__main__":
    main()
