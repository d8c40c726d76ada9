"""A SOCKS5 server (no auth) that tells its client how the handshake arrived, for
the pipelining tests. It never dials: after a successful CONNECT it sends one line,
"FAKE pipelined" or "FAKE sequential" (whether the CONNECT was already queued when
the greeting was read), and closes. A CONNECT to 0.0.0.0:0 (the agent's probe) is
refused with REP 2, as dante does.

    fake_socks.py HOST PORT careful   # reads message by message, like dante
    fake_socks.py HOST PORT greedy    # one recv() per message, the rest dropped, like
                                      # microsocks 1.0.3 (but answers the probe)
"""
import socket
import sys
import threading

PROBE = bytes([5, 1, 0, 1, 0, 0, 0, 0, 0, 0])


def recv_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def read_connect(conn, first=b""):
    head = first[:4] if len(first) >= 4 else first + recv_exact(conn, 4 - len(first))
    rest_len = {1: 6, 4: 18}[head[3]]
    rest = first[4:4 + rest_len]
    return head + rest + recv_exact(conn, rest_len - len(rest))


def serve(conn, mode):
    with conn:
        if mode == "careful":
            recv_exact(conn, 3)
            try:
                queued = conn.recv(64, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                queued = b""
            conn.sendall(bytes([5, 0]))
            request = read_connect(conn)
        else:
            data = conn.recv(4096)
            queued = data[3:]
            conn.sendall(bytes([5, 0]))
            if queued and queued != PROBE:
                queued = b""  # dropped, as a server reading one message per recv() does
            request = read_connect(conn, queued)
        if request == PROBE:
            conn.sendall(bytes([5, 2, 0, 1, 0, 0, 0, 0, 0, 0]))
            return
        conn.sendall(bytes([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]))
        conn.sendall(b"FAKE " + (b"pipelined" if queued else b"sequential") + b"\n")


def main():
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, port))
    srv.listen(64)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn, mode), daemon=True).start()


if __name__ == "__main__":
    main()
