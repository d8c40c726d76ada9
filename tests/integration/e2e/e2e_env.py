"""The end-to-end setting: the lab (tests/integration/lab.py), the real kibotos-agent
(tests/integration/kibotos_agent.py) dialing from the root namespace, SOCKS peers and
guest clients reused from the data-plane tests (dataplane/dp_fixtures.py), and thin
wrappers around the Egress/Workspace API over the agent's Unix socket (JSON).

Destinations live in the lab's inet namespace: COVERED (10.204.X.10) is routed by the
Workspace's policy through an Egress, UNCOVERED (10.204.X.20) leaves directly. Both
run the data-plane bulk server on PORT (PEER answers the client's address, TICK
streams until the connection breaks)."""
import itertools
import os
import subprocess
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "dataplane"))

import dp_fixtures as dp  # noqa: E402
import lab as labmod  # noqa: E402
from kibotos_agent import BUILD_ROOT, deep_merge  # noqa: E402,F401

PORT = 9000
EGRESS = "kibotos.ctrl.v1.EgressService/"
WORKSPACE = "kibotos.ctrl.v1.WorkspaceService/"
_ids = itertools.count(1)


def agent_config(lab):
    """Exempts the lab's ranges from the special-purpose check (the Egresses live on
    10.202.X.0/28, the destinations on 10.204.X.0/24)."""
    x = lab.x
    return {
        "egress": {"allowed_special_purpose_cidrs": [
            f"10.200.{x}.0/24", f"10.201.{x}.0/24", f"10.202.{x}.0/24", f"10.203.{x}.0/24",
            f"10.204.{x}.0/24", f"fd00:202:{x:x}::/64", f"fd00:204:{x:x}::/64"]},
    }


def make_env(lab, agent_factory, dataplane=None, egress=None):
    """The `env` fixture's lab: a guest/ws pair, the two destinations, dante on port
    1080 and an agent (with `dataplane` and `egress` config keys, if any)."""
    ws = lab.add_workspace()
    start_destinations(lab)
    dp.start_dante(lab, 1080)
    config = agent_config(lab)
    if dataplane:
        config["dataplane"] = dataplane
    config["egress"].update(egress or {})
    agent = agent_factory(config=config)
    return types.SimpleNamespace(lab=lab, ws=ws, agent=agent, socks=f"{lab.socks_v4}:1080")


def covered(lab):
    return lab.internet_v4(10)


def uncovered(lab):
    return lab.internet_v4(20)


def second_socks_out(lab):
    """The address the second SOCKS server (microsocks) leaves from, so the
    destination tells which server carried a connection."""
    return lab.socks_inet_v4.rsplit(".", 1)[0] + ".3"


def start_destinations(lab):
    dp.start_bulk_server(lab, covered(lab), PORT)
    dp.start_bulk_server(lab, uncovered(lab), PORT)


def start_second_socks(lab, port=1081):
    out = second_socks_out(lab)
    lab.run(lab.socks, labmod.IP, "addr", "add", f"{out}/28", "dev", "inet0")
    proc = lab.popen(lab.socks, "/usr/bin/microsocks", "-i", lab.socks_v4, "-p", str(port), "-b", out)
    labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                    timeout=10, what="microsocks listening")
    assert proc.poll() is None
    return proc


# -- API ---------------------------------------------------------------------------
def field(obj, name, default=None):
    """A proto3 JSON field by its proto name or its lowerCamelCase JSON name."""
    if obj is None:
        return default
    if name in obj:
        return obj[name]
    head, *rest = name.split("_")
    camel = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return obj.get(camel, default)


def num(obj, name):
    """A uint64 field (proto3 JSON writes it as a string and omits zero)."""
    return int(field(obj, name, 0) or 0)


def command_id(prefix):
    return f"e2e-{prefix}-{os.getpid()}-{next(_ids)}"


def call(agent, method, request):
    return agent.call(method, request, timeout=20.0)


def ok(result):
    status, body = result
    assert status == 200, (status, body)
    return body


def error_code(result):
    status, body = result
    assert status != 200, body
    return field(body, "code")


def socks_spec(address):
    return {"socks5": {"address": address}}


def create_egress(agent, address):
    body = ok(call(agent, EGRESS + "CreateEgress", {"commandId": command_id("egress"),
                                                     "spec": socks_spec(address)}))
    return body["egress"]


def update_egress(agent, egress, address, drain_seconds=None):
    req = {"commandId": command_id("update-egress"), "egressId": field(egress, "egress_id"),
           "expectedRevision": str(num(egress, "revision")), "spec": socks_spec(address)}
    if drain_seconds is not None:
        req["drainSeconds"] = drain_seconds
    return ok(call(agent, EGRESS + "UpdateEgress", req))["egress"]


def delete_egress(agent, egress_id):
    return call(agent, EGRESS + "DeleteEgress", {"commandId": command_id("delete-egress"), "egressId": egress_id})


def policy(*routes):
    """A PUBLIC_INTERNET policy from (egress_id, [cidrs]) pairs, in order."""
    return {"mode": "NETWORK_MODE_PUBLIC_INTERNET",
            "egresses": [{"egressId": e, "destinations": list(d)} for e, d in routes]}


def create_workspace(agent, netns, network_policy, cid=None):
    return call(agent, WORKSPACE + "CreateWorkspace", {"commandId": cid or command_id("ws"), "netns": netns,
                                                        "networkPolicy": network_policy})


def get_workspace(agent, workspace_id):
    return ok(call(agent, WORKSPACE + "GetWorkspace", {"workspaceId": workspace_id}))["workspace"]


def update_policy(agent, workspace, network_policy, drain_seconds=None):
    req = {"commandId": command_id("policy"), "workspaceId": field(workspace, "workspace_id"),
           "expectedRevision": str(num(field(workspace, "network_policy"), "revision")),
           "networkPolicy": network_policy}
    if drain_seconds is not None:
        req["drainSeconds"] = drain_seconds
    return ok(call(agent, WORKSPACE + "UpdateNetworkPolicy", req))["workspace"]


def delete_workspace(agent, workspace_id):
    return call(agent, WORKSPACE + "DeleteWorkspace", {"commandId": command_id("delete-ws"),
                                                        "workspaceId": workspace_id})


def policy_status(agent, workspace_id):
    return field(get_workspace(agent, workspace_id), "network_policy_status", {}) or {}


def egress_status(status, egress_id):
    for e in field(status, "egresses", []) or []:
        if field(e, "egress_id") == egress_id:
            return e
    return None


def wait_applied(agent, workspace_id, policy_revision, egress_id=None, egress_revision=None, timeout=15):
    """Polls network_policy_status until the data plane enforces the given revisions."""
    def applied():
        st = policy_status(agent, workspace_id)
        if num(st, "applied_revision") != policy_revision or field(st, "error"):
            return None
        if egress_id is not None:
            e = egress_status(st, egress_id)
            if e is None or num(e, "applied_revision") != egress_revision:
                return None
        return st
    return labmod.wait_for(applied, timeout=timeout, what=f"workspace {workspace_id} to apply revision "
                           f"{policy_revision} (egress {egress_id} at {egress_revision})")


# -- guest side ----------------------------------------------------------------------
def peer(lab, ws, addr, port=PORT, timeout=30):
    """The address the destination saw for a new connection from the guest, or None."""
    p = lab.run(ws.guest, dp.PYTHON, os.path.join(os.path.dirname(dp.__file__), "guest_client.py"),
                "peer", addr, port, check=False, timeout=timeout)
    line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    return line.split()[1] if p.returncode == 0 and line.startswith("PEER ") else None


def reachable(lab, ws, addr, timeout=2.0):
    """Whether a TCP connection from the guest to addr:PORT completes in time."""
    return lab.tcp_request(ws.guest, addr, PORT, timeout=timeout, read=False)[0]


def start_ticker(lab, ws, addr, seconds=60):
    return dp.start_ticker(lab, ws, addr, PORT, seconds)


ticker_end = dp.ticker_end


# -- kibotosctl -------------------------------------------------------------------------
def kibotosctl(agent, *args, timeout=30):
    binary = os.path.join(BUILD_ROOT, "agent", "ctl", "kibotosctl")
    return subprocess.run([binary, "--socket", agent.socket_path, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def now():
    return time.monotonic()


def attach(env):
    """An Egress to dante and a Workspace on env.ws routing the covered destination
    through it, applied by the data plane. Returns (egress, workspace)."""
    egress = create_egress(env.agent, env.socks)
    eid = field(egress, "egress_id")
    body = ok(create_workspace(env.agent, env.ws.path, policy((eid, [covered(env.lab) + "/32"]))))
    workspace = body["workspace"]
    wait_applied(env.agent, field(workspace, "workspace_id"), 1, eid, num(egress, "revision"))
    return egress, workspace


def state_diff(before, after):
    """A unified diff of two lab.kernel_state() snapshots ('' when identical)."""
    import difflib
    out = []
    for key in before:
        if before[key] != after.get(key):
            out += difflib.unified_diff(before[key].splitlines(), after.get(key, "").splitlines(),
                                        f"{key} before", f"{key} after", lineterm="")
    return "\n".join(out)


def without_listener_ports(state):
    """A kernel_state() with the agent's listener ports blanked: a restarted agent
    opens new listeners, so the ports are the one thing that may change."""
    import re
    out = dict(state)
    nft = re.sub(r"dport (\{[^}]*\}|\d+)", "dport PORTS", state["nft"])
    out["nft"] = re.sub(r"to :\d+", "to :PORT", nft)
    return out


SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")


def assert_clean_exit(agent, ignore=None):
    """Stops the agent (SIGTERM) if it runs; it must exit 0, and its log (every run
    since the fixture started it) must hold no sanitizer report (but those the
    compiled regex `ignore` matches)."""
    if agent.alive():
        code = agent.stop()
        assert code == 0, f"kibotos-agent exited {code} on SIGTERM:\n{agent.log()[-4000:]}"
    log = agent.log()
    if ignore is not None:
        log = ignore.sub("", log)
    for mark in SANITIZER_MARKS:
        assert mark not in log, f"{mark} in the agent's log:\n{log[log.index(mark) - 2000:][:6000]}"


# n connections one after the other from the guest's src_port to dst:port, whose server
# closes first (start_tcp_server); prints "rsts N", the resets the guest sent.
REUSE_CLIENT = r"""
import socket, sys
dst, port, src_port, n, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def out_rsts():
    lines = [l.split() for l in open("/proc/net/snmp") if l.startswith("Tcp:")]
    return int(lines[1][lines[0].index("OutRsts")])
before = out_rsts()
for i in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", src_port))
    s.settimeout(timeout)
    s.connect((dst, port))
    data = b""
    while chunk := s.recv(4096):  # the server closes first
        data += chunk
    s.close()
    assert data.startswith(b"SERVER "), data
print("rsts", out_rsts() - before)
"""


def reuse_port(lab, ws, dst, port, src_port, n, connect_timeout=10):
    return lab.run(ws.guest, dp.PYTHON, "-c", REUSE_CLIENT, dst, port, src_port, n, connect_timeout, check=False,
                   timeout=60)
