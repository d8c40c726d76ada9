"""The lab's peers (Debian packages, started here) and what is read off processes."""
import os
import resource
import signal
import subprocess
import time

import proc_handles  # tests/integration, on the path run.py sets

from . import lab as L

SOCKS_PORTS = {"dante": 1080, "microsocks": 1081}
STUNNEL_PORT = 1443
STUNNEL_CLIENT_PORT = 1444  # the TLS chain's local stunnel client, in the ws namespace
REDSOCKS_PORT = 12345
HTTP_PORT = 8080
IPERF_PORT = 5201
DNS_PORT = 53
TLS_NAME = "socks.lab"


# -- process readings ------------------------------------------------------------
def cpu_seconds(pid, reaped_children=False):
    """utime+stime of the whole process (the leader's stat sums all its threads);
    reaped_children: plus cutime+cstime, what its children that ended and were waited
    for used (a server's helper process that ends mid-run is counted there)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if reaped_children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_seconds_by_pid(pids, reaped_children=False):
    """cpu_seconds of each of pids still alive."""
    out = {}
    for pid in pids:
        try:
            out[pid] = cpu_seconds(pid, reaped_children)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def cpu_seconds_used(before, after):
    """CPU seconds a set of processes used between two cpu_seconds_by_pid(...,
    reaped_children=True) samples. One that ended in between shows up in its parent's
    reaped-children time with its whole life's CPU, so what it had used by the first
    sample is taken off again (its parent is assumed to be in the set, as dante's
    helpers' is)."""
    return (sum(v - before.get(pid, 0.0) for pid, v in after.items())
            - sum(v for pid, v in before.items() if pid not in after))


def cpu_seconds_of(pids):
    return sum(cpu_seconds_by_pid(pids).values())


def proc_status(pid):
    """/proc/PID/status as {key: [fields]}."""
    with open(f"/proc/{pid}/status") as f:
        return {key: val.split() for key, _, val in (line.partition(":") for line in f)}


def rss_kib(pid):
    return int(proc_status(pid).get("VmRSS", [0])[0])


def handle_count(pid):
    """The relay's fds plus the direct descriptors its io_uring rings hold."""
    return proc_handles.open_fds(pid) + proc_handles.ring_slots(pid)


def meminfo():
    with open("/proc/meminfo") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f}


def settled_meminfo(settle_s=1.0):
    """/proc/meminfo once the kernel's deferred work has caught up: frees of sockets and
    request socks wait for RCU grace periods, and each CPU's counter deltas are folded
    into the totals only every second (vm.stat_refresh folds them now)."""
    time.sleep(settle_s)
    try:
        with open("/proc/sys/vm/stat_refresh", "w") as f:
            f.write("1")
    except OSError:
        pass
    return meminfo()


def mem_available_kib(m=None):
    return (m or meminfo())["MemAvailable"]


def kernel_kib(m=None):
    """Kernel memory that idle sockets, pipes and threads cost (slab: socket structs,
    skb heads; stacks; page tables). Also machine-wide, but compilers running beside the
    benchmark move it far less than MemAvailable."""
    m = m or meminfo()
    return m["Slab"] + m["KernelStack"] + m["PageTables"]


def own_kernel_kib(pid):
    """The kernel memory one process holds outside slab: its page tables and its
    threads' kernel stacks (16 KiB each on x86-64)."""
    st = proc_status(pid)
    return int(st["VmPTE"][0]) + 16 * int(st["Threads"][0])


def pss_kib(pid):
    """Proportional set size: shared pages split among their users, so forked helpers
    are counted once, as MemAvailable sees them."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def lab_pss_kib(lab, exclude=()):
    """PSS of the lab's processes but those in exclude (the relay's)."""
    total = 0
    for ns in lab.ns.values():
        for pid in lab.ns_pids(ns):
            if pid in exclude:
                continue
            try:
                total += pss_kib(pid)
            except OSError:  # ended since it was listed
                pass
    return total


def tcp_mem_kib():
    """Kernel memory in TCP socket buffers, machine-wide (sockstat's `mem` is in pages and
    is not per namespace): less noisy than MemAvailable on a shared machine."""
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                parts = line.split()
                return int(parts[parts.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return 0


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def wait_listening(lab, ns, port, proto="t", timeout=10.0, proc=None):
    """Polls `ss` in `ns` until something listens on `port` (bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[3:]} exited with {proc.returncode}")
        out = lab.sh(ns, f"ss -Hln{proto} 'sport = :{port}'", check=False).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} in {ns} after {timeout}s")


# -- destinations in inet ------------------------------------------------------------
def start_destinations(lab, tools, max_seconds):
    http = lab.spawn(lab.inet, [tools["server"], L.INET_IP, str(HTTP_PORT), str(max_seconds)])
    # --rcv-timeout/--idle-timeout: a client that dies mid-test must not leave the
    # server stuck in "busy" for the rest of the run.
    iperf = lab.spawn(lab.inet, ["iperf3", "-s", "-B", L.INET_IP, "-p", str(IPERF_PORT),
                                 "--rcv-timeout", "5000", "--idle-timeout", "30"])
    dns = lab.spawn(lab.inet, [
        "dnsmasq", "-k", "--no-resolv", "--no-hosts", "--bind-interfaces",
        f"--listen-address={L.INET_IP}", "--port", str(DNS_PORT), "--cache-size=1000",
        "--address=/bench.lab/" + L.INET_IP, "--user=root", "--pid-file=",
        "--dns-forward-max=1000"])
    wait_listening(lab, lab.inet, HTTP_PORT, proc=http)
    wait_listening(lab, lab.inet, IPERF_PORT, proc=iperf)
    wait_listening(lab, lab.inet, DNS_PORT, proto="u", proc=dns)
    return {"http": http, "iperf3": iperf, "dnsmasq": dns}


# -- SOCKS servers and TLS in the socks namespace ------------------------------------------
def start_dante(lab, workdir):
    conf = os.path.join(workdir, "danted.conf")
    with open(conf, "w") as f:
        f.write(f"""logoutput: stderr
internal: 0.0.0.0 port = {SOCKS_PORTS['dante']}
external: {L.SOCKS_INET_IP}
clientmethod: none
socksmethod: none
user.privileged: root
user.unprivileged: nobody
client pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 }}
socks pass {{ from: 0.0.0.0/0 to: 0.0.0.0/0 command: bind connect udpassociate bindreply udpreply }}
""")
    p = lab.spawn(lab.socks, ["danted", "-f", conf, "-p", os.path.join(workdir, "danted.pid")],
                  stderr=open(os.path.join(workdir, "danted.log"), "w"))
    wait_listening(lab, lab.socks, SOCKS_PORTS["dante"], proc=p)
    return p


def start_microsocks(lab, workdir):
    p = lab.spawn(lab.socks, ["microsocks", "-i", "0.0.0.0", "-p", str(SOCKS_PORTS["microsocks"])],
                  stderr=open(os.path.join(workdir, "microsocks.log"), "w"))
    wait_listening(lab, lab.socks, SOCKS_PORTS["microsocks"], proc=p)
    return p


def socks_server_pids(lab, name):
    want = {"dante": "danted", "microsocks": "microsocks"}[name]
    return [pid for pid in lab.ns_pids(lab.socks) if comm(pid) == want]


def stop_socks_server(lab, p, name, timeout=10.0):
    """Stops a SOCKS server started here and every process it forked."""
    lab.stop(p)
    deadline = time.monotonic() + timeout
    while (left := socks_server_pids(lab, name)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    if left:
        raise RuntimeError(f"{name} processes {left} did not end")


def make_certs(workdir):
    """A throwaway CA and a server certificate for TLS_NAME (openssl CLI)."""
    d = os.path.join(workdir, "pki")
    os.makedirs(d, exist_ok=True)

    def ossl(*args):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True, timeout=30)

    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=kibotos-bench-ca")
    ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={TLS_NAME}")
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write(f"subjectAltName=DNS:{TLS_NAME}\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf")
    return {"ca": os.path.join(d, "ca.crt"), "server": os.path.join(d, "server.crt"),
            "server_key": os.path.join(d, "server.key")}


def _start_stunnel(lab, ns, workdir, name, service, port):
    """stunnel4 in ns with one service ([name] followed by `service`'s lines), listening
    on port."""
    conf = os.path.join(workdir, f"{name}.conf")
    with open(conf, "w") as f:
        f.write(f"""foreground = yes
pid =
debug = err
socket = l:TCP_NODELAY=1
socket = r:TCP_NODELAY=1
[{name}]
{service}""")
    p = lab.spawn(ns, ["stunnel4", conf], stderr=open(os.path.join(workdir, f"{name}.log"), "w"))
    wait_listening(lab, ns, port, proc=p)
    return p


def start_stunnel(lab, workdir, certs, socks_port):
    """The TLS Egress: stunnel in the socks namespace in front of the SOCKS server."""
    return _start_stunnel(lab, lab.socks, workdir, "stunnel", f"""accept = 0.0.0.0:{STUNNEL_PORT}
connect = 127.0.0.1:{socks_port}
cert = {certs['server']}
key = {certs['server_key']}
""", STUNNEL_PORT)


# -- redsocks in the ws namespace (REDIRECT: redsocks has no TPROXY) -----------------------------
REDIRECT_TABLE = "kibotos_bench_redirect"


def start_stunnel_client(lab, workdir, certs):
    """What users put between redsocks and a SOCKS5-over-TLS server: a local stunnel
    client (in the ws namespace, beside redsocks) that wraps each SOCKS5 connection in
    TLS toward the lab's stunnel server, verifying it as kibotos does."""
    return _start_stunnel(lab, lab.ws, workdir, "stunnel-client", f"""client = yes
accept = 127.0.0.1:{STUNNEL_CLIENT_PORT}
connect = {L.SOCKS_WS_IP}:{STUNNEL_PORT}
CAfile = {certs['ca']}
verifyChain = yes
checkHost = {TLS_NAME}
sslVersionMin = TLSv1.2
""", STUNNEL_CLIENT_PORT)


def start_redsocks(lab, workdir, socks_port, splice, upstream_ip=L.SOCKS_WS_IP):
    """redsocks toward the SOCKS server at upstream_ip:socks_port (the TLS chain: its
    local stunnel client)."""
    conf = os.path.join(workdir, f"redsocks-{'splice' if splice else 'copy'}-{socks_port}.conf")
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    # `splice` is not in redsocks(8); redsocks 0.5's parser knows the key (verified with
    # `redsocks -t`), and its relay then moves bytes with splice(2) through pipes. Copy
    # mode is redsocks' default, so it has no key: an explicit `splice = off;` made
    # Debian's redsocks relay about 6× slower at 17× the CPU per GB (0.46 against 2.84
    # Gbit/s, found by bisecting the config), which is not what users run.
    with open(conf, "w") as f:
        f.write(f"""base {{ log_debug = off; log_info = off; log = stderr; daemon = off;
  redirector = iptables; redsocks_conn_max = 30000; rlimit_nofile = {nofile}; }}
redsocks {{ local_ip = 0.0.0.0; local_port = {REDSOCKS_PORT}; ip = {upstream_ip};
  port = {socks_port}; type = socks5; listenq = 4096;{' splice = on;' if splice else ''} }}
""")
    p = lab.spawn(lab.ws, ["redsocks", "-c", conf],
                  stderr=open(conf.replace(".conf", ".log"), "w"))
    wait_listening(lab, lab.ws, REDSOCKS_PORT, proc=p)
    guest_if = lab.veth_name("w", "g")
    lab.sh(lab.ws, f"""nft -f - <<'EOF'
table ip {REDIRECT_TABLE} {{
  chain pre {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{guest_if}" ip daddr {L.INET_IP} tcp dport {{ {HTTP_PORT}, {IPERF_PORT} }} redirect to :{REDSOCKS_PORT}
  }}
}}
EOF""")
    return p


def stop_redsocks(lab, p):
    lab.sh(lab.ws, f"nft delete table ip {REDIRECT_TABLE}", check=False)
    lab.stop(p)
