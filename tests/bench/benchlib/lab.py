"""The lab topology (docs/ARCHITECTURE.md, "Namespaces") in throwaway network namespaces, for the benchmarks.

    guest ─veth─ ws (the Workspace: tproxy / REDIRECT here) ─veth─ socks ─veth─ inet
                                   agent ns ─veth─ socks

Every name carries this process's pid, every address is private and exists only inside
these namespaces, and `down()` removes the namespaces (and so their veths) and ends
every process left inside them, by pid. Nothing is sent outside the lab.
"""
import os
import signal
import subprocess
import time

NET = "10.231"
GUEST_IP = f"{NET}.1.2"       # guest side of guest<->ws
WS_GUEST_IP = f"{NET}.1.1"    # ws side of guest<->ws
WS_UP_IP = f"{NET}.2.1"       # ws side of ws<->socks (the routed path)
SOCKS_WS_IP = f"{NET}.2.2"    # socks side of ws<->socks (what redsocks dials)
AGENT_IP = f"{NET}.3.1"       # agent side of agent<->socks
SOCKS_AGENT_IP = f"{NET}.3.2"  # socks side of agent<->socks (what kibotos dials)
SOCKS_INET_IP = f"{NET}.4.1"  # socks side of socks<->inet
INET_IP = f"{NET}.4.2"        # the destination: iperf3, http, DNS
NO_HOST_IP = f"{NET}.4.53"    # inside the lab, owned by nobody: only an interceptor answers
LAB_CIDR = f"{NET}.0.0/16"
GUEST_CIDR = f"{NET}.1.0/24"


def _run(argv, check=True, timeout=30):
    return subprocess.run(argv, check=check, timeout=timeout, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


class Lab:
    def __init__(self):
        tag = f"kbb{os.getpid()}"
        self.ns = {role: f"{tag}{role}" for role in ("g", "w", "s", "i", "a")}
        self.guest, self.ws, self.socks, self.inet, self.agent = (
            self.ns[r] for r in ("g", "w", "s", "i", "a"))
        self.tag = tag
        self.procs = []
        self.created = []

    # -- topology ---------------------------------------------------------------
    def up(self):
        for ns in self.ns.values():
            _run(["ip", "netns", "add", ns])
            self.created.append(ns)
            self.sh(ns, "ip link set lo up")
            for key, val in (("net.ipv4.ip_local_port_range", "1024 65000"),
                             ("net.ipv4.tcp_tw_reuse", "1"),
                             ("net.core.somaxconn", "65535"),
                             ("net.ipv4.tcp_max_syn_backlog", "65535"),
                             ("net.ipv4.conf.all.rp_filter", "0"),
                             ("net.ipv4.conf.default.rp_filter", "0")):
                self.sh(ns, f"sysctl -qw {key}='{val}'")
        self._veth("g", GUEST_IP, "w", WS_GUEST_IP)
        self._veth("w", WS_UP_IP, "s", SOCKS_WS_IP)
        self._veth("a", AGENT_IP, "s", SOCKS_AGENT_IP)
        self._veth("s", SOCKS_INET_IP, "i", INET_IP)
        for ns in (self.ws, self.socks):
            self.sh(ns, "sysctl -qw net.ipv4.ip_forward=1")
        self.sh(self.guest, f"ip route add default via {WS_GUEST_IP}")
        self.sh(self.ws, f"ip route add default via {SOCKS_WS_IP}")
        self.sh(self.agent, f"ip route add default via {SOCKS_AGENT_IP}")
        self.sh(self.socks, f"ip route add {GUEST_CIDR} via {WS_UP_IP}")
        self.sh(self.inet, f"ip route add default via {SOCKS_INET_IP}")

    def _veth(self, a, a_ip, b, b_ip):
        an, bn = f"{self.tag}{a}{b}", f"{self.tag}{b}{a}"
        _run(["ip", "link", "add", an, "netns", self.ns[a], "type", "veth",
              "peer", "name", bn, "netns", self.ns[b]])
        self.sh(self.ns[a], f"ip addr add {a_ip}/24 dev {an} && ip link set {an} up")
        self.sh(self.ns[b], f"ip addr add {b_ip}/24 dev {bn} && ip link set {bn} up")

    def veth_name(self, a, b):
        return f"{self.tag}{a}{b}"

    # -- commands and processes ---------------------------------------------------
    def sh(self, ns, cmd, check=True, timeout=30):
        return _run(["ip", "netns", "exec", ns, "sh", "-c", cmd], check=check, timeout=timeout)

    def run(self, ns, argv, timeout, check=False, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.run(["ip", "netns", "exec", ns] + list(argv), timeout=timeout,
                              check=check, text=True, **kw)

    def spawn(self, ns, argv, **kw):
        """Starts a long-lived process in `ns`; `ip netns exec` execs it, so the
        Popen pid is the process itself (what /proc/PID/stat is read from)."""
        kw.setdefault("stdout", subprocess.DEVNULL)
        kw.setdefault("stderr", subprocess.DEVNULL)
        p = subprocess.Popen(["ip", "netns", "exec", ns] + list(argv), **kw)
        self.procs.append(p)
        return p

    def stop(self, p, grace=3.0):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if p in self.procs:
            self.procs.remove(p)

    def ns_pids(self, ns):
        r = _run(["ip", "netns", "pids", ns], check=False)
        return [int(x) for x in r.stdout.split()]

    def down(self):
        for p in list(self.procs):
            try:
                self.stop(p)
            except Exception:  # keep cleaning up whatever else is left
                pass
        # Daemons that forked (dante) may leave children: every process still inside
        # one of our namespaces is ours; end each by pid.
        for _ in range(2):
            pids = [pid for ns in self.created for pid in self.ns_pids(ns)]
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not pids:
                break
            time.sleep(0.2)
        for ns in reversed(self.created):
            _run(["ip", "netns", "del", ns], check=False)
        self.created = []
