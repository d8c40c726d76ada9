"""A tiny authoritative DNS server for tests (UDP): answers A queries for every name
with the IPv4 address currently written in ANSWER_FILE (TTL 0), AAAA with no data."""
import socket
import struct
import sys


def answer(query, addr_text):
    qid, flags, qd, _, _, _ = struct.unpack("!HHHHHH", query[:12])
    i = 12
    while query[i] != 0:
        i += 1 + query[i]
    qname_end = i + 1
    qtype, qclass = struct.unpack("!HH", query[qname_end:qname_end + 4])
    question = query[12:qname_end + 4]
    ancount = 1 if qtype == 1 else 0
    head = struct.pack("!HHHHHH", qid, 0x8180 | (flags & 0x0100), 1, ancount, 0, 0)
    body = question
    if ancount:
        body += struct.pack("!HHHIH", 0xC00C, 1, 1, 0, 4) + socket.inet_aton(addr_text)
    return head + body


def main():
    listen, port, answer_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((listen, port))
    while True:
        q, src = s.recvfrom(4096)
        try:
            with open(answer_file) as f:
                addr = f.read().strip()
            s.sendto(answer(q, addr), src)
        except (OSError, IndexError, struct.error):
            pass


main()
