"""The lab topology (docs/ARCHITECTURE.md, "Namespaces") in throwaway network namespaces, for integration tests.

    guest<i> --veth-- ws<i> (the Workspace; tproxy here) --veth-- inet
    root namespace (the agent) --veth-- socks --veth-- inet

Uncovered traffic from a guest is routed ws<i> -> inet directly. `inet` holds the
"internet" addresses (10.204.X.0/24, fd00:204:X::/64 on its lo) where tests start
servers. Every address is private and exists only inside this lab; X is unique per
running lab. Namespaces are named kib<pid>x<X>-<role>.

Use as a context manager; everything (processes, namespaces, the root veth) is also
removed at interpreter exit if a test dies first:

    with Lab() as lab:
        ws = lab.add_workspace()
        lab.start_tcp_server(lab.inet, lab.internet_v4(10), 8080, "hello")
        ok, data = lab.tcp_request(ws.guest, lab.internet_v4(10), 8080)
"""
import atexit
import fcntl
import os
import signal
import socket
import subprocess
import time

IP = "/usr/sbin/ip" if os.path.exists("/usr/sbin/ip") else "ip"
PYTHON = "/usr/bin/python3"


def require_root():
    """Skips the calling pytest module unless running as root."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


def wait_for(predicate, timeout=5.0, interval=0.02, what="condition"):
    """Polls predicate() until it returns a truthy value; raises after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def _run(args, check=True, timeout=30, input=None):
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, input=input)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


class NftMonitor:
    """`nft monitor` in a namespace: every nftables change there while it runs."""

    def __init__(self, lab, ns):
        self.proc = lab.popen(ns, "nft", "monitor", text=True)
        time.sleep(0.3)  # subscribed before the caller acts

    def events(self):
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return out.strip()


class Workspace:
    """One guest namespace behind one workspace namespace."""

    def __init__(self, lab, index):
        self.index = index
        self.guest = lab._ns_name(f"guest{index}")
        self.ws = lab._ns_name(f"ws{index}")
        self.path = f"/run/netns/{self.ws}"
        x = lab.x
        self.guest_v4 = f"10.200.{x}.{16 * index + 2}"
        self.ws_v4 = f"10.200.{x}.{16 * index + 1}"
        self.guest_v6 = f"fd00:200:{x:x}:{index:x}::2"
        self.ws_v6 = f"fd00:200:{x:x}:{index:x}::1"
        self.uplink_v4 = f"10.201.{x}.{16 * index + 1}"
        self.inet_side_v4 = f"10.201.{x}.{16 * index + 2}"
        self.uplink_v6 = f"fd00:201:{x:x}:{index:x}::1"
        self.inet_side_v6 = f"fd00:201:{x:x}:{index:x}::2"


class Lab:
    def __init__(self):
        self.pid = os.getpid()
        self.x = None
        self.namespaces = []
        self.root_links = []
        self.root_routes = []  # (family, cidr) of the unreachable routes added to the root namespace
        self.processes = []
        self.workspaces = []
        self._closed = False

    # -- naming and addresses -------------------------------------------------------
    def _ns_name(self, role):
        return f"kib{self.pid}x{self.x}-{role}"

    def internet_v4(self, host):
        """An address of the lab's 'internet' (on inet's lo), host in 1..254."""
        return f"10.204.{self.x}.{host}"

    def internet_v6(self, host):
        return f"fd00:204:{self.x:x}::{host:x}"

    @property
    def internet_v4_cidr(self):
        return f"10.204.{self.x}.0/24"

    @property
    def internet_v6_cidr(self):
        return f"fd00:204:{self.x:x}::/64"

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self):
        atexit.register(self.close)
        _exit_cleanly_on_sigterm()
        try:
            # Labs started at the same moment by other test processes must not pick
            # the same X before either has claimed it with its root-side address.
            with open("/run/kibotos-lab.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                self._choose_x()
                self._build_core()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _choose_x(self):
        # The root namespace is shared by every running lab: pick an X whose root-side
        # subnet nobody uses.
        used = _run([IP, "-4", "-o", "addr", "show"]).stdout
        start = self.pid % 250
        for k in range(250):
            x = (start + k) % 250 + 1
            if f" 10.202.{x}." not in used:
                self.x = x
                return
        raise RuntimeError("no free lab subnet")

    def close(self):
        if self._closed:
            return
        self._closed = True
        for proc in reversed(self.processes):
            _kill(proc)
        for link in self.root_links:
            _run([IP, "link", "del", link], check=False)
        for family, cidr in self.root_routes:
            _run([IP, family, "route", "del", "unreachable", cidr], check=False)
        for ns in reversed(self.namespaces):
            _run([IP, "netns", "del", ns], check=False)

    # -- building --------------------------------------------------------------------
    def add_namespace(self, role):
        name = self._ns_name(role)
        _run([IP, "netns", "add", name])
        self.namespaces.append(name)
        # No duplicate address detection: addresses are usable at once.
        self._sysctl(name, "net.ipv6.conf.all.accept_dad", 0)
        self._sysctl(name, "net.ipv6.conf.default.accept_dad", 0)
        self.run(name, IP, "link", "set", "lo", "up")
        return name

    def settle(self, ns):
        """Waits until every veth in ns has carrier and its IPv6 link-local address, so
        the kernel adds no more routes on its own afterwards."""
        def settled():
            links = self.run(ns, IP, "-o", "link", "show").stdout.splitlines()
            addrs = self.run(ns, IP, "-6", "-o", "addr", "show", "scope", "link").stdout
            for line in links:
                dev = line.split(":")[1].strip().split("@")[0]
                if dev == "lo":
                    continue
                if "LOWER_UP" not in line or f" {dev} " not in addrs:
                    return False
            return "tentative" not in addrs
        wait_for(settled, timeout=10, what=f"links of {ns} to settle")

    def _veth(self, ns_a, name_a, ns_b, name_b):
        """A veth pair created directly inside its namespaces (ns None = root)."""
        args = [IP, "link", "add", name_a]
        if ns_a:
            args += ["netns", ns_a]
        args += ["type", "veth", "peer", "name", name_b]
        if ns_b:
            args += ["netns", ns_b]
        _run(args)
        for ns, name in ((ns_a, name_a), (ns_b, name_b)):
            self._ip(ns, "link", "set", name, "up")

    def _ip(self, ns, *args):
        if ns:
            return self.run(ns, IP, *args)
        return _run([IP, *args])

    def _addr(self, ns, dev, addr, plen):
        extra = ["nodad"] if ":" in addr else []
        self._ip(ns, "addr", "add", f"{addr}/{plen}", "dev", dev, *extra)

    def _sysctl(self, ns, key, value):
        self.run(ns, "sysctl", "-q", "-w", f"{key}={value}")

    def _lab_ranges(self):
        """Every range this lab's addresses come from (10.20N.X.0/24, fd00:20N:X::/48)."""
        x = self.x
        return ([f"10.20{n}.{x}.0/24" for n in range(5)] + [f"fd00:20{n}:{x:x}::/48" for n in range(5)])

    def _build_core(self):
        x = self.x
        # The agent dials from the root namespace: first make the lab's ranges
        # unreachable there (the root veth's /28 and /64 are more specific), so that a
        # missing route fails instead of leaving the machine.
        for cidr in self._lab_ranges():
            family = "-6" if ":" in cidr else "-4"
            _run([IP, family, "route", "replace", "unreachable", cidr])
            self.root_routes.append((family, cidr))
        self.inet = self.add_namespace("inet")
        self.socks = self.add_namespace("socks")
        # root <-> socks: the agent dials its Egresses from the root namespace.
        self.root_link = f"k{self.pid}x{x}"[:15]
        self._veth(None, self.root_link, self.socks, "up0")
        self.root_links.append(self.root_link)
        self.root_v4, self.socks_v4 = f"10.202.{x}.1", f"10.202.{x}.2"
        self.root_v6, self.socks_v6 = f"fd00:202:{x:x}::1", f"fd00:202:{x:x}::2"
        self._addr(None, self.root_link, self.root_v4, 28)
        self._addr(None, self.root_link, self.root_v6, 64)
        self._addr(self.socks, "up0", self.socks_v4, 28)
        self._addr(self.socks, "up0", self.socks_v6, 64)
        # socks <-> inet
        self._veth(self.socks, "inet0", self.inet, "socks0")
        self.socks_inet_v4, self.inet_socks_v4 = f"10.203.{x}.1", f"10.203.{x}.2"
        self.socks_inet_v6, self.inet_socks_v6 = f"fd00:203:{x:x}::1", f"fd00:203:{x:x}::2"
        self._addr(self.socks, "inet0", self.socks_inet_v4, 28)
        self._addr(self.socks, "inet0", self.socks_inet_v6, 64)
        self._addr(self.inet, "socks0", self.inet_socks_v4, 28)
        self._addr(self.inet, "socks0", self.inet_socks_v6, 64)
        self._ip(self.socks, "route", "add", "default", "via", self.inet_socks_v4)
        self._ip(self.socks, "-6", "route", "add", "default", "via", self.inet_socks_v6)
        self._ip(self.inet, "route", "add", f"10.202.{x}.0/28", "via", self.socks_inet_v4)
        self._ip(self.inet, "-6", "route", "add", f"fd00:202:{x:x}::/64", "via", self.socks_inet_v6)
        for ns in (self.socks, self.inet):
            self._sysctl(ns, "net.ipv4.ip_forward", 1)
            self._sysctl(ns, "net.ipv6.conf.all.forwarding", 1)
        # The 'internet': addresses on inet's lo (host routes, reachable via inet).
        # An IPv4 prefix on lo makes every address in it local (like 127.0.0.0/8);
        # IPv6 addresses are added one by one when a server binds them.
        self._ip(self.inet, "addr", "add", f"10.204.{x}.1/24", "dev", "lo")
        for ns in (self.socks, self.inet):
            self.settle(ns)

    def add_workspace(self):
        """A new guest<i> --veth-- ws<i> --veth-- inet chain; returns a Workspace."""
        i = len(self.workspaces)
        w = Workspace(self, i)
        self.add_namespace(f"guest{i}")
        self.add_namespace(f"ws{i}")
        self._veth(w.guest, "eth0", w.ws, "guest0")
        self._addr(w.guest, "eth0", w.guest_v4, 28)
        self._addr(w.guest, "eth0", w.guest_v6, 64)
        self._addr(w.ws, "guest0", w.ws_v4, 28)
        self._addr(w.ws, "guest0", w.ws_v6, 64)
        self._ip(w.guest, "route", "add", "default", "via", w.ws_v4)
        self._ip(w.guest, "-6", "route", "add", "default", "via", w.ws_v6)
        self._veth(w.ws, "inet0", self.inet, f"ws{i}")
        self._addr(w.ws, "inet0", w.uplink_v4, 28)
        self._addr(w.ws, "inet0", w.uplink_v6, 64)
        self._addr(self.inet, f"ws{i}", w.inet_side_v4, 28)
        self._addr(self.inet, f"ws{i}", w.inet_side_v6, 64)
        self._ip(w.ws, "route", "add", "default", "via", w.inet_side_v4)
        self._ip(w.ws, "-6", "route", "add", "default", "via", w.inet_side_v6)
        self._ip(self.inet, "route", "add", f"10.200.{self.x}.{16 * i}/28", "via", w.uplink_v4)
        self._ip(self.inet, "-6", "route", "add", f"fd00:200:{self.x:x}:{i:x}::/64", "via", w.uplink_v6)
        self._sysctl(w.ws, "net.ipv4.ip_forward", 1)
        self._sysctl(w.ws, "net.ipv6.conf.all.forwarding", 1)
        for ns in (w.guest, w.ws, self.inet):
            self.settle(ns)
        self.workspaces.append(w)
        return w

    # -- running things --------------------------------------------------------------
    def run(self, ns, *cmd, check=True, timeout=30, input=None):
        """Runs a command inside namespace ns and returns the CompletedProcess."""
        return _run([IP, "netns", "exec", ns, *map(str, cmd)], check=check, timeout=timeout, input=input)

    def popen(self, ns, *cmd, **kwargs):
        """Starts a background process (in ns, or the root namespace when ns is None);
        it is killed at cleanup."""
        args = [*map(str, cmd)]
        if ns:
            args = [IP, "netns", "exec", ns, *args]
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        proc = subprocess.Popen(args, start_new_session=True, **kwargs)
        self.processes.append(proc)
        return proc

    def _ensure_bindable(self, ns, addr):
        if ns == self.inet and addr.startswith(f"fd00:204:{self.x:x}::"):
            self._ip(ns, "-6", "addr", "replace", f"{addr}/128", "dev", "lo", "nodad")

    def start_tcp_server(self, ns, addr, port, banner):
        """A TCP server in ns answering every connection with "SERVER <banner>\\n"."""
        self._ensure_bindable(ns, addr)
        family = "socket.AF_INET6" if ":" in addr else "socket.AF_INET"
        code = (
            "import socket\n"
            f"s = socket.socket({family}, socket.SOCK_STREAM)\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(({addr!r}, {port})); s.listen(128)\n"
            "while True:\n"
            "    c, _ = s.accept()\n"
            f"    c.sendall(b'SERVER {banner}\\n'); c.close()\n"
        )
        proc = self.popen(ns, PYTHON, "-c", code)
        wait_for(lambda: self.tcp_request(ns, addr, port, timeout=0.5)[0], timeout=10,
                 what=f"tcp server {addr}:{port}")
        return proc

    def start_http_server(self, ns, addr, port, directory="/tmp"):
        """python3 -m http.server bound to addr:port inside ns."""
        self._ensure_bindable(ns, addr)
        proc = self.popen(ns, PYTHON, "-m", "http.server", "--bind", addr, "--directory", directory, port)
        wait_for(lambda: self.tcp_request(ns, addr, port, timeout=0.5, read=False)[0], timeout=10,
                 what=f"http server {addr}:{port}")
        return proc

    def tcp_request(self, ns, addr, port, timeout=2.0, read=True):
        """Connects from ns to addr:port and reads the first line.
        Returns (connected, line or error text)."""
        family = "socket.AF_INET6" if ":" in addr else "socket.AF_INET"
        code = (
            "import socket, sys\n"
            f"s = socket.socket({family}, socket.SOCK_STREAM)\n"
            f"s.settimeout({timeout})\n"
            "try:\n"
            f"    s.connect(({addr!r}, {port}))\n"
            f"    data = s.makefile().readline() if {read} else 'connected'\n"
            "except OSError as e:\n"
            "    print('ERROR', type(e).__name__, e); sys.exit(1)\n"
            "print(data.strip())\n"
        )
        proc = self.run(ns, PYTHON, "-c", code, check=False, timeout=timeout + 10)
        return proc.returncode == 0, proc.stdout.strip()

    def udp_request(self, ns, addr, port, payload=b"q", timeout=2.0):
        """Sends one datagram from ns and waits for one answer.
        Returns (answered, text of the answer, address it came from)."""
        family = "socket.AF_INET6" if ":" in addr else "socket.AF_INET"
        code = (
            "import socket, sys\n"
            f"s = socket.socket({family}, socket.SOCK_DGRAM)\n"
            f"s.settimeout({timeout})\n"
            f"s.sendto({payload!r}, ({addr!r}, {port}))\n"
            "try:\n"
            "    data, src = s.recvfrom(4096)\n"
            "except OSError as e:\n"
            "    print('ERROR', type(e).__name__, e); sys.exit(1)\n"
            "print(data.decode().strip() + '|' + src[0] + '|' + str(src[1]))\n"
        )
        proc = self.run(ns, PYTHON, "-c", code, check=False, timeout=timeout + 10)
        if proc.returncode != 0:
            return False, proc.stdout.strip(), None
        text, src_addr, src_port = proc.stdout.strip().rsplit("|", 2)
        return True, text, (src_addr, int(src_port))

    def kernel_state(self, ns):
        """What the agent may change in ns: nftables, rules, routes (v4 and v6)."""
        return {
            "nft": self.run(ns, "nft", "list", "ruleset").stdout,
            "rule4": self.run(ns, IP, "-4", "rule").stdout,
            "rule6": self.run(ns, IP, "-6", "rule").stdout,
            "route4": self.run(ns, IP, "-4", "route", "show", "table", "all").stdout,
            "route6": self.run(ns, IP, "-6", "route", "show", "table", "all").stdout,
        }


def _exit_cleanly_on_sigterm():
    """meson test stops a test that ran out of time with SIGTERM, which by default ends
    Python without running atexit: turn it into SystemExit so the lab is removed."""
    import threading

    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def _raise(signum, frame):
            raise SystemExit(128 + signum)
        signal.signal(signal.SIGTERM, _raise)


def _kill(proc):
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
