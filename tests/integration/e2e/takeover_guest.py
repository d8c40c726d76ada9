"""Guest-side load for the take-over test (runs in the guest namespace), bounded in
count and time. Against the bulk server (dataplane/bulk_server.py) on addr:port:
  - `up` connections each stream `mib` MiB at a steady pace (UP; the server answers the
    sha256 of what it read), `down` connections each read `mib` MiB at a steady pace
    (DOWN; checked against the pattern): both are mid-transfer when agents switch;
  - `idle` connections wait on TICK (a byte every 50 ms) for `seconds`;
  - one new connection every `interval` seconds (PEER) for `seconds`: each must connect
    and be answered with the Egress's address `expect_peer`.
Prints "STARTED" once every long-lived connection is up, then one JSON line of results;
`stall_ms` is the longest a `down` or `idle` connection waited in one recv (the pace
of the server's bytes, a tick every 50 ms or the bulk stream's, plus any stall a
switch of agents caused)."""
import hashlib
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dataplane"))
from bulk_stream import MIB, block  # noqa: E402

results = {"up": [], "down": [], "idle": [], "new_ok": 0, "new_failed": [], "new_max_ms": 0.0, "stall_ms": 0.0}
lock = threading.Lock()


def connect(addr, port, timeout=10):
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((addr, port))
    return s


def record(kind, value):
    with lock:
        results[kind].append(value)


def timed_recv(s, n):
    t0 = time.monotonic()
    chunk = s.recv(n)
    ms = (time.monotonic() - t0) * 1000
    with lock:
        results["stall_ms"] = max(results["stall_ms"], ms)
    return chunk


def up(s, mib, seconds):
    try:
        s.sendall(b"UP\n")
        h = hashlib.sha256()
        for i in range(mib):
            b = block(i)
            s.sendall(b)
            h.update(b)
            time.sleep(seconds / mib)
        s.shutdown(socket.SHUT_WR)
        reply = s.makefile().readline().strip()
        record("up", "OK" if reply == h.hexdigest() else f"MISMATCH {reply!r}")
    except OSError as e:
        record("up", f"{type(e).__name__} {e}")


def down(s, mib, seconds):
    try:
        s.sendall(f"DOWN {mib * MIB}\n".encode())
        h, want, got = hashlib.sha256(), hashlib.sha256(), 0
        for i in range(mib):
            want.update(block(i))
        while True:
            chunk = timed_recv(s, MIB)
            if not chunk:
                break
            h.update(chunk)
            got += len(chunk)
            time.sleep(seconds / mib * len(chunk) / MIB)
        record("down", "OK" if got == mib * MIB and h.hexdigest() == want.hexdigest() else f"MISMATCH got {got}")
    except OSError as e:
        record("down", f"{type(e).__name__} {e}")


def idle(s, seconds):
    start, end = time.monotonic(), "timeout"
    s.settimeout(5)
    try:
        s.sendall(b"TICK\n")
        while time.monotonic() - start < seconds:
            if not timed_recv(s, 4096):
                end = "eof"
                break
    except ConnectionResetError:
        end = "reset"
    except socket.timeout:
        end = "stalled"
    except OSError as e:
        end = f"{type(e).__name__}"
    record("idle", end)
    s.close()


def new_connections(addr, port, interval, seconds, expect_peer):
    start = time.monotonic()
    threads = []

    def one():
        t0, step = time.monotonic(), "connect"
        try:
            s = connect(addr, port, timeout=10)
            step = "answer"
            s.sendall(b"PEER\n")
            line = s.makefile().readline().strip()
            s.close()
            ms = (time.monotonic() - t0) * 1000
            with lock:
                if line.split()[1:2] == [expect_peer]:
                    results["new_ok"] += 1
                    results["new_max_ms"] = max(results["new_max_ms"], ms)
                else:
                    results["new_failed"].append(f"answer {line!r}")
        except OSError as e:
            with lock:
                results["new_failed"].append(f"{step}: {type(e).__name__} {e}")

    while time.monotonic() - start < seconds:
        t = threading.Thread(target=one)
        t.start()
        threads.append(t)
        time.sleep(interval)
    for t in threads:
        t.join(30)


def main():
    addr, port, n_up, n_down, n_idle, mib, seconds, interval, expect_peer = sys.argv[1:10]
    port, n_up, n_down, n_idle, mib = int(port), int(n_up), int(n_down), int(n_idle), int(mib)
    seconds, interval = float(seconds), float(interval)
    socks = [connect(addr, port) for _ in range(n_up + n_down + n_idle)]
    threads = []
    for i, s in enumerate(socks):
        if i < n_up:
            target, args = up, (s, mib, seconds)
        elif i < n_up + n_down:
            target, args = down, (s, mib, seconds)
        else:
            target, args = idle, (s, seconds)
        threads.append(threading.Thread(target=target, args=args))
    threads.append(threading.Thread(target=new_connections, args=(addr, port, interval, seconds, expect_peer)))
    for t in threads:
        t.start()
    print("STARTED", flush=True)
    for t in threads:
        t.join(seconds + 60)
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
