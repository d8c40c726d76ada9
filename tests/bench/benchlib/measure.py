"""One bounded measurement each, taken from the guest namespace through whatever path is
set up. Relay CPU is the utime+stime delta of the relay's pids across the measurement."""
import json
import re
import subprocess
import time

from . import lab as L
from . import peers


def _cpu(pids):
    return peers.cpu_seconds_of(pids) if pids else 0.0


def iperf(lab, streams, reverse, seconds, relay_pids, server_pids=None, tries=2):
    """One iperf3 run; a failed run (the server still busy with a dead client) is retried
    once after a short pause. server_pids: a function giving the Egress side's processes
    (their CPU per GB is reported too: on one host, part of the relay's TCP sending runs
    in their context, see docs/bench)."""
    for attempt in range(tries):
        try:
            return _iperf_once(lab, streams, reverse, seconds, relay_pids, server_pids)
        except RuntimeError:
            if attempt == tries - 1:
                raise
            time.sleep(2)


def _iperf_once(lab, streams, reverse, seconds, relay_pids, server_pids):
    argv = ["iperf3", "-c", L.INET_IP, "-p", str(peers.IPERF_PORT), "-t", str(seconds),
            "-P", str(streams), "-J", "--connect-timeout", "3000"]
    if reverse:
        argv.append("-R")
    c0 = _cpu(relay_pids)
    s0 = peers.cpu_seconds_by_pid(server_pids(), reaped_children=True) if server_pids else {}
    r = lab.run(lab.guest, argv, timeout=seconds + 20)
    cpu = _cpu(relay_pids) - c0
    s1 = peers.cpu_seconds_by_pid(server_pids(), reaped_children=True) if server_pids else {}
    server_cpu = peers.cpu_seconds_used(s0, s1)
    try:
        j = json.loads(r.stdout)
        recv = j["end"]["sum_received"]
    except (ValueError, KeyError) as e:
        raise RuntimeError(f"iperf3 failed: {r.stdout[-300:]} {r.stderr[-300:]}") from e
    gb = recv["bytes"] / 1e9

    def per_gb(seconds):
        return seconds / gb if gb > 0 else None
    return {"gbps": recv["bits_per_second"] / 1e9, "bytes": recv["bytes"], "cpu_s": cpu,
            "cpu_s_per_gb": per_gb(cpu), "server_cpu_s": server_cpu if server_pids else None,
            "server_cpu_s_per_gb": per_gb(server_cpu) if server_pids else None}


def wrk(lab, seconds, conns, relay_pids, server_pids=None):
    """New connections per second: wrk with `Connection: close` (one request per
    connection), one thread so the other core is left to the relay and servers.
    server_pids: as for iperf; the Egress side's CPU per connection is reported too (a
    relay can make its SOCKS server work harder per connection)."""
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "2s",
            "-H", "Connection: close", f"http://{L.INET_IP}:{peers.HTTP_PORT}/"]
    c0 = _cpu(relay_pids)
    s0 = peers.cpu_seconds_by_pid(server_pids(), reaped_children=True) if server_pids else {}
    r = lab.run(lab.guest, argv, timeout=seconds + 20)
    cpu = _cpu(relay_pids) - c0
    s1 = peers.cpu_seconds_by_pid(server_pids(), reaped_children=True) if server_pids else {}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+)", r.stdout)
    if not m:
        raise RuntimeError(f"wrk failed: {r.stdout[-300:]} {r.stderr[-300:]}")
    reqs = int(m.group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", r.stdout).group(1))
    err = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", r.stdout)
    errors = sum(int(x) for x in err.groups()) if err else 0
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", r.stdout)

    def per_conn(seconds):
        return seconds / reqs * 1e6 if reqs else None
    server_cpu = peers.cpu_seconds_used(s0, s1) if server_pids else None
    return {"conn_per_s": rps, "connections": reqs, "errors": errors + (int(non2xx.group(1)) if non2xx else 0),
            "cpu_s": cpu, "cpu_us_per_conn": per_conn(cpu), "server_cpu_s": server_cpu,
            "server_cpu_us_per_conn": per_conn(server_cpu) if server_pids else None}


def crypto_floor(seconds):
    """What sealing or opening one GB costs one core here: `openssl speed` with the
    cipher the TLS Egress negotiates (TLS 1.3, AES-256-GCM) on 16 KiB records, the size
    a bulk TLS stream carries. {cipher, gb_per_s, s_per_gb}."""
    cipher = "aes-256-gcm"
    r = subprocess.run(["openssl", "speed", "-evp", cipher, "-bytes", "16384", "-seconds", str(seconds)],
                       capture_output=True, text=True, timeout=seconds + 60)
    # The last line: "AES-256-GCM  <thousands of bytes per second>k".
    m = re.search(rf"^{cipher}\s+([\d.]+)k\s*$", r.stdout, re.MULTILINE | re.IGNORECASE)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"openssl speed failed: {r.stdout[-300:]} {r.stderr[-300:]}")
    gb_per_s = float(m.group(1)) * 1e3 / 1e9
    return {"cipher": cipher, "record_bytes": 16384, "seconds": seconds, "gb_per_s": gb_per_s,
            "s_per_gb": 1 / gb_per_s}


def latency(lab, tools, n, relay_pids, timeout_ms=3000):
    """Connect + first response byte over n sequential connections (bench_client lat)."""
    c0 = _cpu(relay_pids)
    r = lab.run(lab.guest, [tools["client"], "lat", L.INET_IP, str(peers.HTTP_PORT), str(n),
                            str(timeout_ms)], timeout=n * timeout_ms / 1000 + 30)
    cpu = _cpu(relay_pids) - c0
    try:
        j = json.loads(r.stdout)
    except ValueError as e:
        raise RuntimeError(f"bench_client lat failed: {r.stderr[-300:]}") from e
    j["cpu_s"] = cpu
    return j


def _cpu_ticks():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]  # all, idle + iowait


def wait_idle(busy_below, max_seconds, window_s=1.0):
    """Waits until the machine's CPUs were busy less than busy_below (0..1) over one
    window, for at most max_seconds. Returns (seconds waited, busy share of the last
    window): after a hold or a wrk run the SOCKS server and the kernel finish their
    work (helper processes, TIME_WAIT, RCU) for a few seconds, and a latency series
    taken then measures them, not the relay."""
    if max_seconds <= 0:
        return 0.0, None
    t0 = time.monotonic()
    while True:
        a = _cpu_ticks()
        time.sleep(window_s)
        b = _cpu_ticks()
        busy = 1 - (b[1] - a[1]) / max(1, b[0] - a[0])
        waited = time.monotonic() - t0
        if busy < busy_below or waited >= max_seconds:
            return waited, busy


def time_wait_count(lab):
    """TIME_WAIT sockets in the lab's namespaces (/proc/net/sockstat counts them per
    namespace)."""
    total = 0
    for ns in lab.ns.values():
        out = lab.sh(ns, "cat /proc/net/sockstat", check=False).stdout
        m = re.search(r"^TCP:.* tw (\d+)", out, re.M)
        total += int(m.group(1)) if m else 0
    return total


def wait_time_wait(lab, below, max_seconds):
    """Waits until fewer than `below` TIME_WAIT sockets are left in the lab, for at most
    max_seconds (they last 60 s). Returns (seconds waited, count left). wrk and the
    holds leave tens of thousands of them in the kernel's tables; waiting them out
    starts every latency pass from the same state."""
    t0 = time.monotonic()
    while True:
        n = time_wait_count(lab)
        waited = time.monotonic() - t0
        if n < below or waited >= max_seconds:
            return waited, n
        time.sleep(2)


def reachable(lab, tools, n=3):
    j = latency(lab, tools, n, None, timeout_ms=2000)
    return j["ok"] == n


def seen_from(lab, tools):
    """The address the destination sees a guest connection come from: the guest's own on
    the routed path, the SOCKS server's when relayed."""
    r = lab.run(lab.guest, [tools["client"], "who", L.INET_IP, str(peers.HTTP_PORT)], timeout=15)
    return r.stdout.strip() if r.returncode == 0 else None


def _total(fn, pids):
    """fn summed over the relay's processes (one, or a chain such as redsocks + stunnel)."""
    return sum(fn(pid) for pid in pids)


def hold(lab, tools, n, relay_pids, max_seconds, rss_base=None):
    """Holds n idle connections, each confirmed end to end, and reads the memory they
    cost: relay RSS (summed over relay_pids) and system-wide MemAvailable. Then checks the relay's fds return to
    their idle count once the client closes (no fd leak). The relay's RSS per connection
    is counted from `rss_base` (its RSS when fresh) when given: allocators keep what an
    earlier run freed, so the RSS just before a later run would hide the cost."""
    relay_pids = list(relay_pids or [])
    rss0 = _total(peers.rss_kib, relay_pids) if relay_pids else None
    if relay_pids and rss_base is not None:
        rss0 = rss_base
    fds0 = _total(peers.handle_count, relay_pids) if relay_pids else None
    m0 = peers.settled_meminfo()
    kern0, avail0, slab0 = peers.kernel_kib(m0), peers.mem_available_kib(m0), m0["Slab"]
    own0 = _total(peers.own_kernel_kib, relay_pids)
    tcp0 = peers.tcp_mem_kib()
    others0 = peers.lab_pss_kib(lab, exclude=relay_pids)
    p = lab.spawn(lab.guest, [tools["client"], "hold", L.INET_IP, str(peers.HTTP_PORT), str(n),
                              str(max_seconds)],
                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().split()  # "ready OK ERRORS" (bounded by max_seconds)
        if len(line) != 3 or line[0] != "ready":
            raise RuntimeError(f"bench_client hold: unexpected {line!r}")
        held, errors = int(line[1]), int(line[2])
        m1 = peers.settled_meminfo()
        kern1, avail1, slab1 = peers.kernel_kib(m1), peers.mem_available_kib(m1), m1["Slab"]
        own1 = _total(peers.own_kernel_kib, relay_pids)
        tcp1 = peers.tcp_mem_kib()
        others1 = peers.lab_pss_kib(lab, exclude=relay_pids)
        rss1 = _total(peers.rss_kib, relay_pids) if relay_pids else None
        fds1 = _total(peers.handle_count, relay_pids) if relay_pids else None
        p.stdin.write("close\n")
        p.stdin.flush()
        p.stdout.readline()
        p.wait(30)
    finally:
        lab.stop(p)
    fds_after = fds0
    if relay_pids:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            fds_after = _total(peers.handle_count, relay_pids)
            if fds_after <= fds0:
                break
            time.sleep(0.1)
    out = {"n": n, "held": held, "errors": errors,
           "sys_kib_per_conn": (avail0 - avail1) / held if held else None,
           "tcp_mem_kib_per_conn": (tcp1 - tcp0) / held if held else None,
           "kernel_kib_per_conn": (kern1 - kern0) / held if held else None,
           # The lab's other processes (SOCKS server, servers, clients) move the
           # machine-wide figure too: dante forks and reaps helpers at its own pace
           # (-9 to +196 KiB per held connection between runs of one mode).
           "others_pss_kib_per_conn": (others1 - others0) / held if held else None}
    # MemAvailable's drop less what those processes gained: the relay and the kernel.
    out["sys_net_kib_per_conn"] = (out["sys_kib_per_conn"] - out["others_pss_kib_per_conn"]
                                   if held else None)
    # Relay RSS + kernel: what the relay adds: slab (every socket's and pipe's kernel
    # state, machine-wide) and the relay's own page tables and thread stacks. Not the
    # other processes' stacks and page tables: dante forks helpers as load grows and
    # reaps them later, which moved this figure by ~3 KiB per connection between runs.
    if held:
        own = (own1 - own0) + ((rss1 - rss0) if relay_pids else 0)
        out["lab_kib_per_conn"] = ((slab1 - slab0) + own) / held
    else:
        out["lab_kib_per_conn"] = None
    if relay_pids:
        out |= {"rss_idle_kib": rss0, "rss_held_kib": rss1,
                "rss_kib_per_conn": (rss1 - rss0) / held if held else None,
                "fds_idle": fds0, "fds_held": fds1, "fds_after": fds_after,
                "fd_leak": max(0, fds_after - fds0)}
    return out


def dns(lab, tools, server_ip, n, window, relay_pids, timeout_ms=1000):
    c0 = _cpu(relay_pids)
    r = lab.run(lab.guest, [tools["client"], "dns", server_ip, str(peers.DNS_PORT), str(n),
                            str(window), str(timeout_ms)], timeout=60)
    cpu = _cpu(relay_pids) - c0
    try:
        j = json.loads(r.stdout)
    except ValueError as e:
        raise RuntimeError(f"bench_client dns failed: {r.stderr[-300:]}") from e
    j["cpu_s"] = cpu
    return j
