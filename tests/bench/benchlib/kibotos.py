"""Drives kibotos-agent for the benchmarks: a temp config, the agent in the lab's agent
namespace, an Egress and a Workspace created over its Unix socket with Connect JSON."""
import http.client
import json
import os
import select
import socket
import subprocess
import time

from . import lab as L
from . import peers


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


class ConnectError(RuntimeError):
    pass


class Agent:
    """One agent process with its own state dir, socket and config."""

    def __init__(self, lab, binary, workdir, name, threads, extra_args=None, dataplane=None):
        self.lab, self.binary, self.threads = lab, binary, threads
        self.dataplane = dataplane or {}  # more dataplane.* settings (A/B experiments)
        self.dir = os.path.join(workdir, name)
        os.makedirs(os.path.join(self.dir, "state"), exist_ok=True)
        self.socket = os.path.join(self.dir, "ctrl.sock")
        self.config = os.path.join(self.dir, "agent.yaml")
        self.log = os.path.join(self.dir, "agent.log")
        self.extra_args = extra_args or []
        self.proc = None
        self.seq = 0

    def start(self, timeout=15.0):
        # workspace_loops = threads: the bench's one Workspace is accepted on every
        # loop, so the "2 threads" figures stay comparable with earlier runs (threads 0,
        # one loop per core: the default, one loop per Workspace). Not written for one
        # thread, where it is the default, so that builds older than the key (a
        # --baseline-agent) read the same config.
        loops = f"  workspace_loops: {self.threads}\n" if self.threads and self.threads > 1 else ""
        with open(self.config, "w") as f:
            f.write(f"""api:
  unix_socket: {self.socket}
state_dir: {self.dir}/state
log:
  level: warn
egress:
  allowed_special_purpose_cidrs: ["{L.LAB_CIDR}"]
dataplane:
  threads: {self.threads}
{loops}  max_connections: 100000
  max_connections_per_workspace: 50000
""" + "".join(f"  {k}: {v}\n" for k, v in self.dataplane.items()))
        argv = [self.binary, "--config", self.config] + self.extra_args
        self.proc = self.lab.spawn(self.lab.agent, argv, stdout=open(self.log, "a"),
                                   stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited with {self.proc.returncode}: {self.log_tail()}")
            if os.path.exists(self.socket):
                try:
                    self.call("AgentService", "GetAgent", {})
                    return
                except (OSError, ConnectError):
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"agent not serving {self.socket} after {timeout}s: {self.log_tail()}")

    def log_tail(self, n=600):
        try:
            with open(self.log) as f:
                return f.read()[-n:].strip()
        except OSError:
            return ""

    @property
    def pid(self):
        return self.proc.pid

    def call(self, service, method, body, timeout=10):
        conn = UnixHTTPConnection(self.socket, timeout)
        try:
            conn.request("POST", f"/kibotos.ctrl.v1.{service}/{method}", json.dumps(body),
                         {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        if r.status != 200:
            raise ConnectError(f"{service}/{method}: HTTP {r.status} {data[:300]!r}")
        return json.loads(data or b"{}")

    def command_id(self):
        self.seq += 1
        return f"bench-{os.getpid()}-{self.seq}"

    def create_egress(self, address, tls_ca=None, udp=False):
        socks5 = {"address": address}
        if tls_ca:
            with open(tls_ca) as f:
                socks5["tls"] = {"serverName": peers.TLS_NAME, "caCert": f.read()}
        spec = {"socks5": socks5, "udpEnabled": udp}
        r = self.call("EgressService", "CreateEgress", {"commandId": self.command_id(), "spec": spec})
        return r["egress"]["egressId"]

    @staticmethod
    def policy(egress_id, resolver=None):
        pol = {"mode": "NETWORK_MODE_PUBLIC_INTERNET",
               "egresses": [{"egressId": egress_id, "destinations": [f"{L.INET_IP}/32"]}]}
        if resolver:
            pol["resolvers"] = [resolver]
        return pol

    def create_workspace(self, egress_id):
        r = self.call("WorkspaceService", "CreateWorkspace", {
            "commandId": self.command_id(), "netns": f"/run/netns/{self.lab.ws}",
            "networkPolicy": self.policy(egress_id)})
        ws = r["workspace"]
        self.workspace_id, self.revision = ws["workspaceId"], int(ws["networkPolicy"]["revision"])
        return self.workspace_id

    def update_policy(self, policy):
        r = self.call("WorkspaceService", "UpdateNetworkPolicy", {
            "commandId": self.command_id(), "workspaceId": self.workspace_id,
            "expectedRevision": str(self.revision), "networkPolicy": policy, "drainSeconds": 0})
        self.revision = int(r["workspace"]["networkPolicy"]["revision"])

    def wait_applied(self, timeout=5.0):
        """Polls network_policy_status.applied_revision up to the current revision."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ws = self.call("WorkspaceService", "GetWorkspace", {"workspaceId": self.workspace_id})
            st = ws["workspace"].get("networkPolicyStatus", {})
            if int(st.get("appliedRevision", 0)) >= self.revision:
                return True
            time.sleep(0.05)
        return False

    def status(self):
        """The workspace's network_policy_status, as the agent reports it (for reasons)."""
        try:
            ws = self.call("WorkspaceService", "GetWorkspace", {"workspaceId": self.workspace_id})
            return json.dumps(ws["workspace"].get("networkPolicyStatus", {}))[:300]
        except (OSError, ConnectError, KeyError, AttributeError) as e:
            return f"unknown ({e})"

    def stop(self):
        """Deletes the workspace (the agent removes what it installed), then stops the
        agent; whatever it left in the ws namespace is flushed so later modes see a
        clean namespace."""
        if self.proc is None:
            return
        try:
            if getattr(self, "workspace_id", None) and self.proc.poll() is None:
                self.call("WorkspaceService", "DeleteWorkspace",
                          {"commandId": self.command_id(), "workspaceId": self.workspace_id})
        except (OSError, ConnectError):
            pass
        self.lab.stop(self.proc, grace=5.0)
        self.proc = None
        self._flush_ws(self.lab)

    @staticmethod
    def _flush_ws(lab):
        lab.sh(lab.ws, "nft flush ruleset", check=False)
        lab.sh(lab.ws, "ip rule flush; ip rule add from all lookup main pref 32766;"
               " ip rule add from all lookup default pref 32767", check=False)


class Harness:
    """The same data plane without the daemon: tests/integration/dataplane/relay_harness
    (the real DataplaneRuntime and netns attachment, commanded line by line on stdin).
    Used when the daemon does not relay yet; it has no DNS resolvers."""

    def __init__(self, lab, binary, workdir, name, threads):
        self.lab, self.binary, self.threads = lab, binary, threads
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.log = os.path.join(self.dir, "harness.log")
        self.proc = None
        self.seq = 0
        self.workspace_id = None
        self.revision = 0

    def argv(self):
        return [self.binary, "--allow", L.LAB_CIDR, "--threads", str(self.threads),
                "--workspace-loops", str(max(1, self.threads)),
                "--max-connections", "100000", "--max-per-workspace", "50000"]

    def start(self, timeout=15.0):
        argv = self.argv()
        self.proc = self.lab.spawn(self.lab.agent, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=open(self.log, "w"), text=True, bufsize=1)
        line = self._readline(timeout)
        if line != "ready":
            raise RuntimeError(f"{os.path.basename(self.binary)}: {line!r} {self.log_tail()}")

    def _readline(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError("relay_harness did not answer")
        return self.proc.stdout.readline().strip()

    def cmd(self, line, timeout=10.0):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        out = self._readline(timeout)
        if out.startswith("error"):
            raise ConnectError(f"relay_harness {line.split()[0]}: {out}")
        return out

    def log_tail(self, n=600):
        return Agent.log_tail(self, n)

    @property
    def pid(self):
        return self.proc.pid

    def create_egress(self, address, tls_ca=None, udp=False):
        self.seq += 1
        eid = f"e{self.seq}"
        opts = f" tls sni={peers.TLS_NAME} ca={tls_ca}" if tls_ca else ""
        self.cmd(f"egress {eid} 1 0 {address}{opts}")
        return eid

    @staticmethod
    def policy(egress_id, resolver=None):
        return Agent.policy(egress_id, resolver)

    def create_workspace(self, egress_id):
        self.workspace_id, self.revision = "ws1", 1
        self.cmd(f"workspace ws1 /run/netns/{self.lab.ws} 0 1 {egress_id}={L.INET_IP}/32")
        return self.workspace_id

    def update_policy(self, policy):
        raise NotImplementedError("the daemon does not relay yet, and relay_harness takes no "
                                  "DNS resolvers")

    def wait_applied(self, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = json.loads(self.cmd(f"status {self.workspace_id}"))
            if int(st.get("applied_revision", 0)) >= self.revision:
                return True
            time.sleep(0.05)
        return False

    def status(self):
        try:
            return self.cmd(f"status {self.workspace_id}")[:300]
        except (OSError, RuntimeError) as e:
            return f"unknown ({e})"

    def stop(self):
        if self.proc is None:
            return
        try:
            if self.workspace_id and self.proc.poll() is None:
                self.cmd(f"delete-workspace {self.workspace_id}")
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            pass
        self.lab.stop(self.proc, grace=5.0)
        self.proc = None
        Agent._flush_ws(self.lab)


class DnsHarness(Harness):
    """The DNS forwarder without the daemon: tests/integration/dns/dns_harness (the real
    netns attachment and DnsService, commanded on stdin). Its Egresses have UDP enabled."""

    def argv(self):
        return [self.binary, "--allow", L.LAB_CIDR]

    def set_resolver(self, transport, egress_id):
        """Points the guest's DNS at the lab resolver through `egress_id` (udp: UDP
        ASSOCIATE; tcp: CONNECT)."""
        self.workspace_id = "ws1"
        self.revision += 1
        self.cmd(f"workspace ws1 /run/netns/{self.lab.ws} {self.revision} "
                 f"{transport}:{L.INET_IP}:{peers.DNS_PORT}@{egress_id}")
