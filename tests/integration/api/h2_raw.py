"""A raw HTTP/2 exchange (python3-h2, prior knowledge over the Unix socket) for what stock
clients do not do on purpose: leave the request side open, send odd headers."""
import socket
import time

import h2.config
import h2.connection
import h2.events


class Exchange:
    """What came back on one stream: status, headers, body, trailers, and how."""

    def __init__(self):
        self.headers = {}
        self.body = b""
        self.trailers = {}
        self.ended = False
        self.reset = None
        self.seconds = None

    @property
    def status(self):
        return int(self.headers.get(":status", "0"))


def _text(pairs):
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in pairs}


def exchange(socket_path, path, headers, body=b"", end_stream=True, timeout=10.0, method="POST"):
    """Sends one request; returns an Exchange once the stream ended or was reset, or
    when `timeout` passed (then .ended is False)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(0.5)
    sock.connect(socket_path)
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", method), (":scheme", "http"), (":authority", "localhost"),
                            (":path", "/" + path)] + list(headers), end_stream=end_stream and not body)
    if body:
        conn.send_data(sid, body, end_stream=end_stream)
    sock.sendall(conn.data_to_send())
    out = Exchange()
    start = time.monotonic()
    try:
        while time.monotonic() - start < timeout and not out.ended and out.reset is None:
            try:
                data = sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                break
            for ev in conn.receive_data(data):
                if getattr(ev, "stream_id", None) != sid:
                    continue
                if isinstance(ev, h2.events.ResponseReceived):
                    out.headers = _text(ev.headers)
                elif isinstance(ev, h2.events.TrailersReceived):
                    out.trailers = _text(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    out.body += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                elif isinstance(ev, h2.events.StreamEnded):
                    out.ended = True
                elif isinstance(ev, h2.events.StreamReset):
                    out.reset = ev.error_code
            sock.sendall(conn.data_to_send())
    finally:
        out.seconds = time.monotonic() - start
        sock.close()
    return out


def envelope(message, flags=0):
    """One length-prefixed message of gRPC, gRPC-Web and Connect streaming."""
    return bytes([flags]) + len(message).to_bytes(4, "big") + message


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, RST_STREAM, SETTINGS, GOAWAY = 0x1, 0x3, 0x4, 0x7
END_STREAM, END_HEADERS = 0x1, 0x4
PROTOCOL_ERROR, ENHANCE_YOUR_CALM = 0x1, 0xb


def frame(kind, flags, stream_id, payload=b""):
    """One HTTP/2 frame (RFC 9113 section 4.1), with nothing checked: for what python3-h2
    refuses to send."""
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream_id.to_bytes(4, "big") + payload


def request_headers(path, extra=()):
    import hpack
    return hpack.Encoder().encode([(":method", "POST"), (":scheme", "http"), (":authority", "localhost"),
                                   (":path", "/" + path)] + list(extra))


def send_and_read_all(socket_path, request, timeout=10.0):
    """Sends raw bytes to the agent's Unix socket and returns all it answers, read until
    it closes (or `timeout` passes). The agent may close before it read everything."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.connect(socket_path)
    try:
        sock.sendall(request)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    finally:
        sock.close()
    return data


def goaway_error(socket_path, frames, timeout=10.0):
    """Sends the preface, an empty SETTINGS and `frames`; returns the error code of the
    GOAWAY the server answers with (None if the connection ends without one)."""
    data = send_and_read_all(socket_path, PREFACE + frame(SETTINGS, 0, 0) + frames, timeout)
    while len(data) >= 9:
        length, kind = int.from_bytes(data[:3], "big"), data[3]
        payload = data[9:9 + length]
        if kind == GOAWAY:
            return int.from_bytes(payload[4:8], "big")
        data = data[9 + length:]
    return None
