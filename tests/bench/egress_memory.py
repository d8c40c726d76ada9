#!/usr/bin/python3
"""kibotos-agent memory per Egress (issue 33, item 3): the agent's RSS growth while N
Egresses are created, plain and over TLS (the system roots), each kind on a fresh
agent, in the same run; TLS reported also as a ratio to plain. No traffic: the
Egresses name TEST-NET-3 addresses, which nothing dials.

    tests/bench/egress_memory.py                 # 150 of each kind
    tests/bench/egress_memory.py --count 500

Uses the build in KIBOTOS_BUILD_ROOT (default build/). An ASan build keeps freed memory
in quarantine and inflates the figures: run it with ASAN_OPTIONS=quarantine_size_mb=0,
or on a release build."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
import kibotos_agent  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


def growth(count, spec):
    agent = kibotos_agent.Agent(config={"egress": {"allowed_special_purpose_cidrs": ["203.0.113.0/24"]}})
    agent.start()
    try:
        time.sleep(1)
        before = rss_kib(agent.proc.pid)
        start = time.monotonic()
        for i in range(count):
            s = dict(spec, address=f"203.0.113.{1 + i % 200}:{1080 + i // 200}")
            status, body = agent.call("kibotos.ctrl.v1.EgressService/CreateEgress",
                                      {"commandId": f"bench-{i}", "spec": {"socks5": s}})
            assert status == 200, body
        took = time.monotonic() - start
        time.sleep(1)
        return (rss_kib(agent.proc.pid) - before) / count, took
    finally:
        agent.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=150)
    count = p.parse_args().count
    kinds = {"plain": {}, "tls (system roots)": {"tls": {"serverName": "socks.test"}}}
    figures = {name: growth(count, spec) for name, spec in kinds.items()}
    plain = max(figures["plain"][0], 1e-9)
    for name, (kib, took) in figures.items():
        print(f"{name:20s} {kib:8.1f} KiB each ({kib / plain:4.1f}x plain), {count} created in {took:.2f} s")


if __name__ == "__main__":
    main()
