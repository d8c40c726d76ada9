"""Destination server for data-plane tests (runs in the lab's inet namespace).

Each connection sends one command line:
  UP            the client streams bytes then shuts down its writes; the server
                answers the sha256 of everything it read, then closes.
  DOWN <bytes>  the server sends <bytes> of the deterministic pattern, then closes.
  ZEROS <bytes> the server sends <bytes> zero bytes as fast as it can, then closes.
  HOLD          the server answers "HELD\\n" and keeps the connection open until the
                client closes it (idle connections).
  TICK          the server sends one byte every 50 ms until the connection breaks.
  PEER          the server answers the client's address.
  BURST <n>     n writes of 10 bytes back to back, then the connection stays open
                (no FIN) until the client closes it.
  LATE <n> <ms> 4 MiB of the pattern, then n markers, each the CLOCK_MONOTONIC time
                it was sent at ("M%017.6f\n"): the first 5 ms after the bulk, the
                others <ms> apart; then the server closes.
  PAIRS <n>     n rounds of: send b"a", wait 2 ms, send b"b", read the client's b"k".
                Small writes with no reply in between: a hop that delays the second
                until the first is acknowledged (Nagle against a delayed ACK) shows.
"""
import hashlib
import socket
import sys
import threading
import time

from bulk_stream import MIB, block


def handle(c, addr):
    try:
        f = c.makefile("rb")
        line = f.readline().decode().split()
        if not line:
            return
        if line[0] == "UP":
            h = hashlib.sha256()
            # The makefile buffer may hold bytes already: read through it.
            while True:
                chunk = f.read1(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
            c.sendall((h.hexdigest() + "\n").encode())
        elif line[0] == "DOWN":
            left = int(line[1])
            i = 0
            while left > 0:
                n = min(left, MIB)
                c.sendall(block(i)[:n])
                left -= n
                i += 1
        elif line[0] == "ZEROS":
            left, zeros = int(line[1]), bytes(4 * MIB)
            while left > 0:
                c.sendall(zeros[:min(left, len(zeros))])
                left -= len(zeros)
        elif line[0] == "HOLD":
            c.sendall(b"HELD\n")
            while c.recv(4096):
                pass
        elif line[0] == "TICK":
            while True:
                c.sendall(b".")
                time.sleep(0.05)
        elif line[0] == "BURST":
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(int(line[1])):
                c.sendall(b"%09d\n" % i)
            while c.recv(4096):
                pass
        elif line[0] == "PAIRS":
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(int(line[1])):
                c.sendall(b"a")
                time.sleep(0.002)
                c.sendall(b"b")
                if f.read(1) != b"k":
                    break
        elif line[0] == "LATE":
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i in range(4):
                c.sendall(block(i))
            for i in range(int(line[1])):
                time.sleep(0.005 if i == 0 else int(line[2]) / 1000)
                c.sendall(b"M%017.6f\n" % time.monotonic())
        elif line[0] == "PEER":
            c.sendall(("PEER " + addr[0] + "\n").encode())
    except OSError:
        pass
    finally:
        c.close()


def main():
    addr, port = sys.argv[1], int(sys.argv[2])
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(4096)
    while True:
        c, a = s.accept()
        threading.Thread(target=handle, args=(c, a), daemon=True).start()


main()
