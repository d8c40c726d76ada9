"""Guest-side client for data-plane tests (runs in the guest namespace). Prints one
result line; exit status 0 when the exchange went as the command expects.

  up ADDR PORT MIB        send MIB MiB, shut down writes, compare the server's sha256
  down ADDR PORT MIB      receive MIB MiB and compare their sha256
  sink ADDR PORT MIB      receive MIB MiB of zeros (the server's ZEROS) as fast as it
                          can, unchecked; print the seconds from request to FIN
  expect-reset ADDR PORT  connect, send a request, expect a reset (RST), not EOF/data
  peer ADDR PORT          print the address the server saw
  tick ADDR PORT SECONDS  read ticks; print how long the stream lasted and how it ended
  many ADDR PORT N        hold N connections open at once, each answered "HELD"
  burst ADDR PORT N       N small writes back to back, no FIN after them: all must
                          arrive within 2 s (nothing left corked in the relay)
  late ADDR PORT N        4 MiB, then N time-stamped markers (the server's LATE N
                          500); print how long each took to arrive, in ms
  pairs ADDR PORT N       N rounds of two small server writes 2 ms apart; print the
                          median gap between their arrivals and the median round
                          (the reply to the second write, then both arriving), in ms
"""
import hashlib
import socket
import sys
import time

from bulk_stream import MIB, block


def connect(addr, port, timeout=30):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect((addr, port))
    return s


def up(addr, port, mib):
    s = connect(addr, port)
    s.sendall(b"UP\n")
    h = hashlib.sha256()
    for i in range(mib):
        b = block(i)
        s.sendall(b)
        h.update(b)
    s.shutdown(socket.SHUT_WR)  # half-close: the reply must still arrive
    reply = s.makefile().readline().strip()
    ok = reply == h.hexdigest()
    print("OK" if ok else f"MISMATCH {reply}")
    return ok


def down(addr, port, mib):
    s = connect(addr, port)
    s.sendall(f"DOWN {mib << 20}\n".encode())
    h = hashlib.sha256()
    got = 0
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        h.update(chunk)
        got += len(chunk)
    want = hashlib.sha256()
    for i in range(mib):
        want.update(block(i))
    ok = got == mib << 20 and h.hexdigest() == want.hexdigest()
    print("OK" if ok else f"MISMATCH got {got}")
    return ok


def sink(addr, port, mib):
    s = connect(addr, port)
    buf = bytearray(4 << 20)
    start = time.monotonic()
    s.sendall(f"ZEROS {mib << 20}\n".encode())
    got = 0
    while (n := s.recv_into(buf)) > 0:
        got += n
    print(f"SINK {got} {time.monotonic() - start:.3f}")
    return got == mib << 20


def expect_reset(addr, port):
    try:
        s = connect(addr, port, timeout=15)
        s.sendall(b"PEER\n")
        data = s.recv(4096)
        print(f"NO-RESET {data!r}")
        return False
    except ConnectionResetError:
        print("RESET")
        return True
    except OSError as e:
        print(f"ERROR {type(e).__name__} {e}")
        return False


def peer(addr, port):
    s = connect(addr, port)
    s.sendall(b"PEER\n")
    print(s.makefile().readline().strip())
    return True


def tick(addr, port, seconds):
    s = connect(addr, port)
    s.sendall(b"TICK\n")
    start = time.monotonic()
    print("STARTED", flush=True)
    end = "timeout"
    try:
        while time.monotonic() - start < seconds:
            if not s.recv(4096):
                end = "eof"
                break
    except ConnectionResetError:
        end = "reset"
    except socket.timeout:
        end = "stalled"
    print(f"ENDED {end} {time.monotonic():.3f}")
    return True


def many(addr, port, n):
    socks = []
    for _ in range(n):
        s = connect(addr, port, timeout=60)
        s.sendall(b"HOLD\n")
        socks.append(s)
    ok = 0
    for s in socks:
        if s.makefile().readline().strip() == "HELD":
            ok += 1
    print(f"HELD {ok}", flush=True)
    if len(sys.argv) > 5:  # keep them open until stdin closes
        sys.stdin.read()
    return ok == n


def burst(addr, port, n):
    s = connect(addr, port, timeout=2)
    s.sendall(f"BURST {n}\n".encode())
    want = b"".join(b"%09d\n" % i for i in range(n))
    got = b""
    deadline = time.monotonic() + 2
    try:
        while len(got) < len(want) and time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except socket.timeout:
        pass
    took = 2 - (deadline - time.monotonic())
    print(f"OK {1000 * took:.1f}" if got == want else f"SHORT {len(got)} of {len(want)}")
    return got == want


def pairs(addr, port, n):
    s = connect(addr, port)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(f"PAIRS {n}\n".encode())
    gaps, rounds = [], []
    for _ in range(n):
        start = time.monotonic()
        if s.recv(1) != b"a":
            print("SHORT")
            return False
        t = time.monotonic()
        if s.recv(1) != b"b":
            print("SHORT")
            return False
        gaps.append(time.monotonic() - t)
        rounds.append(time.monotonic() - start)
        s.sendall(b"k")

    def median_ms(xs):
        xs = sorted(xs[n // 2:])  # past the handshake's quick ACKs
        return 1000 * xs[len(xs) // 2]
    print(f"GAP {median_ms(gaps):.1f} ROUND {median_ms(rounds):.1f}")
    return True


def late(addr, port, n):
    s = connect(addr, port)
    s.sendall(f"LATE {n} 500\n".encode())
    f = s.makefile("rb")
    if len(f.read(4 * MIB)) != 4 * MIB:
        print("SHORT")
        return False
    took = []
    for _ in range(n):
        marker = f.readline()
        if not marker.startswith(b"M"):
            print("SHORT")
            return False
        took.append(1000 * (time.monotonic() - float(marker[1:])))
    print("LATE " + " ".join(f"{t:.1f}" for t in took))
    return True


def main():
    cmd, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    arg = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    fn = {"up": up, "down": down, "sink": sink, "peer": peer, "tick": tick, "many": many,
          "pairs": pairs, "burst": burst, "late": late, "expect-reset": expect_reset}[cmd]
    ok = fn(addr, port, arg) if cmd not in ("expect-reset", "peer") else fn(addr, port)
    sys.exit(0 if ok else 1)


main()
