#!/usr/bin/python3
"""kibotos-agent host scale (issue 26): many Workspaces and many held connections on one
agent. Every figure is measured at the counts named, never extrapolated.

    sudo tests/bench/scale.py                          # 2,000 Workspaces, 10,000 connections
    sudo tests/bench/run.py --scale --workspaces 2000  # the same, through run.py
    sudo tests/bench/scale.py --smoke                  # seconds: 40 Workspaces, 200 connections, churn of 20

Workspaces: one agent (in the lab's agent namespace, log level warn) and one Egress (dante in
the lab, an IP literal). Workspaces are attached one after another, each on a fresh
`ip netns add` namespace with lo up, with a PUBLIC_INTERNET policy with one Egress route
and, for every other one, a tcp Resolver through the same Egress. At each checkpoint
(--checkpoints, default 100,250,500,1000,2000):
  - attach latency p50/p99 of the Workspaces attached since the previous checkpoint:
    CreateWorkspace sent until GetWorkspace's network_policy_status shows the policy's
    revision applied without error;
  - fds per Workspace ((/proc/PID/fd now - with none) / N; io_uring direct descriptors
    separately) and RSS per Workspace (KiB, the same way);
  - idle CPU of the agent over --idle-seconds (percent of one core);
  - API latency p50/p99 of GetWorkspace, ListWorkspaces (a page of 100) and
    UpdateNetworkPolicy while another client writes 10 policy updates/s;
  - a policy update of all N Workspaces (4 clients), until every one is enforced: time
    and agent CPU;
  - a restart: SIGKILL, then the agent started again on the same state dir, until
    ListWorkspaces shows all N enforced.
Connections (--connections K): a second agent with one Workspace (the lab's ws namespace)
holds K idle relayed guest connections (bench_client hold, through dante): RSS and kernel
memory per connection, idle CPU with them held, and a policy update with them live (time
until enforced, agent CPU).

Writes results.json, results.md and scale.png into --out (default docs/bench/scale). A
run whose agent dies stops that part, keeps what it measured and says where it died.
"""
import argparse
import concurrent.futures
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "integration"))  # proc_handles, netns_pool

import netns_pool  # noqa: E402
import proc_handles  # noqa: E402
from benchlib import kibotos, measure, peers, run_meta, tools  # noqa: E402
from benchlib import lab as L  # noqa: E402

NS_PREFIX = "kbscl"
SOCKS = f"{L.SOCKS_AGENT_IP}:{peers.SOCKS_PORTS['dante']}"
EXTRA_DEST = f"{L.NO_HOST_IP}/32"  # what a policy update adds or removes
WORKERS = 4


def log(msg):
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


NOTES = (
    "Attach latency: CreateWorkspace sent until GetWorkspace shows the policy's revision applied without "
    "error, one Workspace at a time, polled every 1 ms.",
    "fds and RSS per Workspace: (now - the fresh agent's with no Workspace) / N. From the second checkpoint "
    "on, the process is the one started again at the previous checkpoint's restart (it re-attached those "
    "at start).",
    "Restart: SIGKILL (the tables stay: fail closed), the agent started again on the same state dir; time "
    "from the start until ListWorkspaces shows every Workspace enforced.",
    "The machine is shared: the load average above says how busy it was; figures move with it.",
)


class OutOfTime(Exception):
    pass


class AgentDied(Exception):
    pass


def pct(xs, q):
    """The q-th percentile (nearest rank) of xs."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def lat_summary(xs_s):
    ms = [x * 1000 for x in xs_s]
    return {"n": len(ms), "p50_ms": pct(ms, 50), "p99_ms": pct(ms, 99), "max_ms": max(ms) if ms else None}


def policy(egress_id, i, extra=False):
    dests = [f"{L.INET_IP}/32"] + ([EXTRA_DEST] if extra else [])
    pol = {"mode": "NETWORK_MODE_PUBLIC_INTERNET", "egresses": [{"egressId": egress_id, "destinations": dests}]}
    if i % 2:
        pol["resolvers"] = [{"tcp": {"address": f"{L.INET_IP}:{peers.DNS_PORT}"}, "egressId": egress_id}]
    return pol


def status_ok(ws):
    """Whether a Workspace (JSON) is enforced: its policy's revision applied, no error."""
    st = ws.get("networkPolicyStatus", {}) or {}
    return (not st.get("error")
            and int(st.get("appliedRevision", 0)) == int(ws.get("networkPolicy", {}).get("revision", 0)))


class ScaleAgent(kibotos.Agent):
    """benchlib's Agent with what the scale runs need: calls from several threads,
    restarts on the same state dir, revision bookkeeping per Workspace."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rev = {}      # workspace id -> policy revision as last written
        self.index = {}    # workspace id -> its index (policy shape)
        self.extra = {}    # workspace id -> whether its policy has EXTRA_DEST
        self.lock = threading.Lock()

    def command_id(self):
        with self.lock:
            return super().command_id()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self, what):
        if not self.alive():
            raise AgentDied(f"the agent exited ({self.proc.returncode}) {what}: {self.log_tail(800)}")

    def create(self, path, egress_id, i):
        r = self.call("WorkspaceService", "CreateWorkspace", {
            "commandId": self.command_id(), "netns": path, "networkPolicy": policy(egress_id, i)})
        wid = r["workspace"]["workspaceId"]
        self.rev[wid], self.index[wid], self.extra[wid] = int(r["workspace"]["networkPolicy"]["revision"]), i, False
        return wid

    def get(self, wid):
        return self.call("WorkspaceService", "GetWorkspace", {"workspaceId": wid})["workspace"]

    def toggle(self, wid, egress_id, timeout=10):
        """UpdateNetworkPolicy: EXTRA_DEST added or removed (the nft table rewritten)."""
        extra = not self.extra[wid]
        for attempt in range(2):
            try:
                r = self.call("WorkspaceService", "UpdateNetworkPolicy", {
                    "commandId": self.command_id(), "workspaceId": wid, "expectedRevision": str(self.rev[wid]),
                    "networkPolicy": policy(egress_id, self.index[wid], extra), "drainSeconds": 0}, timeout=timeout)
                break
            except kibotos.ConnectError:
                if attempt:
                    raise
                self.rev[wid] = int(self.get(wid)["networkPolicy"]["revision"])  # aborted: re-read
        self.rev[wid], self.extra[wid] = int(r["workspace"]["networkPolicy"]["revision"]), extra

    def list_all(self, page_size=1000):
        out, token = [], ""
        for _ in range(1000):
            req = {"pageSize": page_size}
            if token:
                req["pageToken"] = token
            r = self.call("WorkspaceService", "ListWorkspaces", req, timeout=60)
            out += r.get("workspaces", [])
            token = r.get("nextPageToken", "")
            if not token:
                return out
        raise RuntimeError("ListWorkspaces: more than 1,000 pages")

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        if self.proc in self.lab.procs:
            self.lab.procs.remove(self.proc)


class Scale:
    def __init__(self, args):
        self.args = args
        self.deadline = time.monotonic() + args.max_minutes * 60
        self.workdir = tempfile.mkdtemp(prefix="kibotos-scale-")
        self.lab = L.Lab()
        self.pool = None
        self.tools = {}
        self.results = {"meta": {}, "workspaces": {"checkpoints": []}, "connections": None, "not_measured": []}

    def check_time(self):
        if time.monotonic() > self.deadline:
            raise OutOfTime()

    # -- setup ---------------------------------------------------------------------------
    def setup(self):
        self.tools = tools.build_tools(self.workdir)
        netns_pool.remove_stale(NS_PREFIX)
        self.pool = netns_pool.NetnsPool(NS_PREFIX)
        log(f"lab {self.lab.tag}: building namespaces")
        self.lab.up()
        http = self.lab.spawn(self.lab.inet, [self.tools["server"], L.INET_IP, str(peers.HTTP_PORT),
                                              str(self.args.max_minutes * 60 + 300)])
        peers.wait_listening(self.lab, self.lab.inet, peers.HTTP_PORT, proc=http)
        self.dante = peers.start_dante(self.lab, self.workdir)

    def agent_with_workspace(self, name):
        """A new agent, an Egress to dante and one Workspace on the lab's ws namespace
        (the guest's connections to inet go through it), applied."""
        agent = self.new_agent(name)
        eid = agent.create_egress(SOCKS)
        agent.egress_id = eid
        agent.create_workspace(eid)
        if not agent.wait_applied(30):
            agent.kill()
            raise RuntimeError(f"the lab's Workspace was not applied: {agent.status()}")
        return agent, eid

    def new_agent(self, name):
        a = ScaleAgent(self.lab, self.args.agent, self.workdir, name, self.args.threads,
                       dataplane={"max_connections": 100000, "max_connections_per_workspace": 100000}
                       if name == "connections" else None)
        a.start(timeout=60)
        return a

    # -- Workspaces ------------------------------------------------------------------------
    def run_workspaces(self):
        res = self.results["workspaces"]
        agent = self.new_agent("workspaces")
        ids = []
        try:
            eid = agent.create_egress(SOCKS)
            time.sleep(1)
            pid = agent.pid
            base = {"fds": proc_handles.open_fds(pid), "slots": proc_handles.ring_slots(pid),
                    "rss_kib": peers.rss_kib(pid)}
            res["base"] = base
            log(f"agent {pid}: {base}")
            for cp in self.args.checkpoints:
                self.check_time()
                cp, capped = self.fit(agent, base, res["checkpoints"], cp)
                if cp <= len(ids):
                    break
                paths = self.pool.add(cp - len(ids))
                seg = []
                for path in paths:
                    self.check_time()
                    t0 = time.monotonic()
                    try:
                        wid = agent.create(path, eid, len(ids))
                    except (OSError, kibotos.ConnectError) as e:
                        agent.check_alive(f"while creating Workspace {len(ids) + 1}")
                        raise RuntimeError(f"CreateWorkspace {len(ids) + 1}: {e}") from e
                    self.wait_enforced(agent, wid, 30)
                    seg.append(time.monotonic() - t0)
                    ids.append(wid)
                    if len(ids) % 100 == 0:
                        log(f"{len(ids)} attached (last {seg[-1] * 1000:.1f} ms)")
                entry = {"workspaces": cp, "attach": lat_summary(seg), "attach_from": cp - len(paths) + 1}
                res["checkpoints"].append(entry)
                res["reached"] = cp
                if capped:
                    entry["capped_by_nofile"] = capped
                self.measure_checkpoint(agent, eid, ids, base, entry)
                log(f"checkpoint {cp}: {json.dumps(entry)}")
                if capped:
                    break
        except OutOfTime:
            raise
        except Exception as e:  # what was measured so far is kept
            if not isinstance(e, AgentDied) and not agent.alive():
                e = AgentDied(f"the agent exited ({agent.proc.returncode}): {agent.log_tail(800)} ({e})")
            if isinstance(e, AgentDied):
                res["agent_died"] = {"after_workspaces": len(ids), "why": str(e)[:1500]}
                why = f"the agent died after {len(ids)} Workspaces: {str(e)[:400]}"
            else:
                res["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
                why = f"error after {len(ids)} Workspaces: {res['error'][:400]}"
            self.results["not_measured"].append(f"Workspaces beyond {res.get('reached', 0)}: {why}")
            log(why)
        finally:
            agent.kill()
            self.pool.remove_all()

    def fit(self, agent, base, done, cp, margin=100):
        """The checkpoint to measure instead of cp when cp Workspaces would not fit in the
        agent's RLIMIT_NOFILE at the fds per Workspace measured so far: the most that fit
        (a multiple of 50), measured whole, and the run ends there. Returns (count, why
        or None)."""
        limit = int(open(f"/proc/{agent.pid}/limits").read().split("Max open files")[1].split()[0])
        if not done:
            return cp, None
        per_ws = max(c["fds_per_ws"] for c in done)
        if base["fds"] + per_ws * cp + margin <= limit:
            return cp, None
        fit = int((limit - margin - base["fds"]) / per_ws) // 50 * 50
        why = (f"{cp} Workspaces at {per_ws:.1f} fds each would not fit in the agent's RLIMIT_NOFILE of {limit}"
               f": measured at {fit} instead")
        log(why)
        self.results["not_measured"].append(f"Workspaces beyond {fit}: {why}")
        return fit, why

    def wait_enforced(self, agent, wid, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                if status_ok(agent.get(wid)):
                    return
            except (OSError, kibotos.ConnectError):
                agent.check_alive(f"while waiting for {wid}")
                raise
            if time.monotonic() > deadline:
                raise RuntimeError(f"{wid} not enforced after {timeout} s: {agent.get(wid).get('networkPolicyStatus')}")
            time.sleep(0.001)

    def wait_all_enforced(self, agent, n, timeout, interval=0.05):
        deadline = time.monotonic() + timeout
        while True:
            try:
                ws = agent.list_all()
                if len(ws) == n and all(status_ok(w) for w in ws):
                    return
            except (OSError, kibotos.ConnectError, ValueError):
                agent.check_alive("while waiting for all Workspaces to be enforced")
            if time.monotonic() > deadline:
                raise RuntimeError(f"not all {n} Workspaces enforced after {timeout} s")
            time.sleep(interval)

    def measure_checkpoint(self, agent, eid, ids, base, entry):
        n, pid = len(ids), agent.pid
        time.sleep(1)
        agent.check_alive("at the checkpoint")
        fds, slots, rss = proc_handles.open_fds(pid), proc_handles.ring_slots(pid), peers.rss_kib(pid)
        entry.update({"fds": fds, "slots": slots, "rss_kib": rss,
                      "fds_per_ws": (fds - base["fds"]) / n, "slots_per_ws": (slots - base["slots"]) / n,
                      "rss_kib_per_ws": (rss - base["rss_kib"]) / n})
        # Idle CPU, all attached.
        c0, t0 = peers.cpu_seconds(pid), time.monotonic()
        time.sleep(self.args.idle_seconds)
        entry["idle_cpu_pct"] = 100 * (peers.cpu_seconds(pid) - c0) / (time.monotonic() - t0)
        agent.check_alive("while idle")
        self.check_time()
        entry["api"] = self.measure_api(agent, eid, ids)
        agent.check_alive("during the API measurement")
        self.check_time()
        # A policy update of every Workspace (4 clients), until all are enforced.
        c0, t0 = peers.cpu_seconds(pid), time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as ex:
            list(ex.map(lambda wid: agent.toggle(wid, eid, timeout=60), ids))
        t_calls = time.monotonic() - t0
        self.wait_all_enforced(agent, n, timeout=300)
        entry["update_all"] = {"s": time.monotonic() - t0, "calls_s": t_calls,
                               "cpu_s": peers.cpu_seconds(pid) - c0}
        self.check_time()
        # Restart: killed, started again on the same state dir.
        agent.kill()
        t0 = time.monotonic()
        agent.start(timeout=120)
        t_api = time.monotonic() - t0
        self.wait_all_enforced(agent, n, timeout=300, interval=0.02)
        entry["restart"] = {"all_enforced_s": time.monotonic() - t0, "api_ready_s": t_api}

    def measure_api(self, agent, eid, ids):
        """Get/List/Update latency while a second client writes 10 policy updates/s (on
        Workspaces of its own)."""
        writers, mine = ids[-10:], ids[:10]
        stop = threading.Event()
        writes = []

        def writer():
            k = 0
            while not stop.is_set() and k < 10 * 300:  # bounded: 300 s at 10/s
                t = time.monotonic()
                try:
                    agent.toggle(writers[k % len(writers)], eid)
                    writes.append(time.monotonic() - t)
                except (OSError, kibotos.ConnectError):
                    if not agent.alive():
                        return
                k += 1
                stop.wait(max(0.0, 0.1 - (time.monotonic() - t)))
        th = threading.Thread(target=writer, daemon=True)
        th.start()
        out = {}
        try:
            time.sleep(0.5)
            for name, n, fn in (
                    ("get", self.args.api_n, lambda k: agent.get(ids[(k * 7919) % len(ids)])),
                    ("list", max(10, self.args.api_n // 4), lambda k: agent.call(
                        "WorkspaceService", "ListWorkspaces", {"pageSize": 100})),
                    ("update", max(10, self.args.api_n // 2), lambda k: agent.toggle(mine[k % len(mine)], eid))):
                xs, t_end = [], time.monotonic() + 60
                for k in range(n):
                    if time.monotonic() > t_end:
                        break
                    t = time.monotonic()
                    fn(k)
                    xs.append(time.monotonic() - t)
                out[name] = lat_summary(xs)
            t = time.monotonic()
            agent.list_all()
            out["list_all_ms"] = (time.monotonic() - t) * 1000
        finally:
            stop.set()
            th.join(30)
        out["background_writes"] = lat_summary(writes)
        return out

    # -- connections ---------------------------------------------------------------------------
    def run_connections(self):
        k = self.args.connections
        agent, eid = self.agent_with_workspace("connections")
        res = {"wanted": k}
        self.results["connections"] = res
        holder = None
        try:
            pid = agent.pid
            time.sleep(1)
            rss0, fds0, slots0 = peers.rss_kib(pid), proc_handles.open_fds(pid), proc_handles.ring_slots(pid)
            m0 = peers.settled_meminfo()
            own0 = peers.own_kernel_kib(pid)
            t0 = time.monotonic()
            holder = self.lab.spawn(self.lab.guest, [self.tools["client"], "hold", L.INET_IP, str(peers.HTTP_PORT),
                                                     str(k), "300"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True)
            line = holder.stdout.readline().split()  # "ready OK ERRORS", bounded by the 300 s
            if len(line) != 3 or line[0] != "ready":
                raise RuntimeError(f"bench_client hold: {line!r}")
            held, errors = int(line[1]), int(line[2])
            res.update({"held": held, "errors": errors, "hold_s": time.monotonic() - t0})
            m1 = peers.settled_meminfo()
            rss1, fds1, slots1 = peers.rss_kib(pid), proc_handles.open_fds(pid), proc_handles.ring_slots(pid)
            own1 = peers.own_kernel_kib(pid)
            res.update({"rss_idle_kib": rss0, "rss_held_kib": rss1, "fds_idle": fds0, "fds_held": fds1,
                        "slots_idle": slots0, "slots_held": slots1})
            if held:
                res["rss_kib_per_conn"] = (rss1 - rss0) / held
                res["agent_plus_slab_kib_per_conn"] = ((rss1 - rss0) + (own1 - own0) + (m1["Slab"] - m0["Slab"])) / held
                res["fds_per_conn"] = (fds1 - fds0) / held
                res["handles_per_conn"] = (fds1 + slots1 - fds0 - slots0) / held
            res["active_reported"] = self.active(agent)
            c0, t0 = peers.cpu_seconds(pid), time.monotonic()
            time.sleep(self.args.idle_seconds)
            res["idle_cpu_pct"] = 100 * (peers.cpu_seconds(pid) - c0) / (time.monotonic() - t0)
            # A policy update with them live: a destination added, theirs still covered.
            c0, t0 = peers.cpu_seconds(pid), time.monotonic()
            agent.update_policy({"mode": "NETWORK_MODE_PUBLIC_INTERNET", "egresses": [
                {"egressId": eid, "destinations": [f"{L.INET_IP}/32", EXTRA_DEST]}]})
            t_call = time.monotonic() - t0
            if not agent.wait_applied(60):
                raise RuntimeError(f"the update was not applied: {agent.status()}")
            res["update_live"] = {"s": time.monotonic() - t0, "call_s": t_call, "cpu_s": peers.cpu_seconds(pid) - c0}
            res["active_after_update"] = self.active(agent)
            holder.stdin.write("close\n")
            holder.stdin.flush()
            holder.stdout.readline()
            holder.wait(60)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc_handles.open_fds(pid) > fds0:
                time.sleep(0.1)
            res["fds_after_close"] = proc_handles.open_fds(pid)
            agent.check_alive("after closing the connections")
            log(f"connections: {json.dumps(res)}")
        except OutOfTime:
            raise
        except Exception as e:  # what was measured so far is kept
            if not agent.alive():
                res["agent_died"] = f"exit {agent.proc.returncode}: {agent.log_tail(800)} ({type(e).__name__}: {e})"
                self.results["not_measured"].append(f"connections: the agent died: {res['agent_died'][:400]}")
            else:
                res["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
                self.results["not_measured"].append(f"connections: error: {res['error'][:400]}")
            log(f"connections: {res.get('agent_died') or res.get('error')}")
        finally:
            if holder is not None:
                self.lab.stop(holder)
            agent.stop()

    # -- churn: another Workspace's data plane while Workspaces come and go -------------
    def run_churn(self):
        """p50/p99 connect + first byte in Workspace A (the lab's, through dante) with no
        churn, then while another client creates and deletes --churn Workspaces in a loop
        (bounded by --churn-seconds): the issue's "a flood of creates/deletes never stalls
        the other Workspaces' data plane"."""
        n = self.args.churn
        agent, eid = self.agent_with_workspace("churn")
        res = {"workspaces": n}
        self.results["churn"] = res
        stop = threading.Event()
        ops = {"create": 0, "delete": 0, "errors": 0}
        paths = []

        def churn(eid):
            ids = []
            while not stop.is_set():
                for k, path in enumerate(paths):
                    if stop.is_set():
                        break
                    try:
                        ids.append(agent.create(path, eid, k))
                        ops["create"] += 1
                    except (OSError, kibotos.ConnectError):
                        ops["errors"] += 1
                while ids:  # a round's deletes finish even when stopped: nothing is left attached
                    try:
                        agent.call("WorkspaceService", "DeleteWorkspace", {"commandId": agent.command_id(),
                                                                           "workspaceId": ids.pop()})
                        ops["delete"] += 1
                    except (OSError, kibotos.ConnectError):
                        ops["errors"] += 1
        th = None
        try:
            paths.extend(self.pool.add(n))
            lat_n = self.args.churn_latency_n
            res["quiet"] = measure.latency(self.lab, self.tools, lat_n, [agent.pid])
            th = threading.Thread(target=churn, args=(eid,), daemon=True)
            t0 = time.monotonic()
            th.start()
            time.sleep(1)  # the churn under way before the first sample
            res["churning"] = measure.latency(self.lab, self.tools, lat_n, [agent.pid])
            left = self.args.churn_seconds - (time.monotonic() - t0)
            if left > 0:
                stop.wait(left)
            stop.set()
            th.join(120)
            res["churn_s"] = time.monotonic() - t0
            res.update(ops)
            res["ops_per_s"] = (ops["create"] + ops["delete"]) / res["churn_s"]
            for q in ("p50_us", "p99_us"):
                if res["quiet"].get(q) and res["churning"].get(q):
                    res[f"ratio_{q[:3]}"] = res["churning"][q] / res["quiet"][q]
            agent.check_alive("after the churn")
            log(f"churn: {json.dumps(res)}")
        except OutOfTime:
            raise
        except Exception as e:  # what was measured so far is kept
            res["error"] = f"{type(e).__name__}: {str(e)[:1500]}"
            self.results["not_measured"].append(f"churn: {res['error'][:400]}")
            log(f"churn: {res['error']}")
        finally:
            stop.set()
            if th is not None:
                th.join(120)
            agent.kill()
            self.pool.remove_all()

    @staticmethod
    def active(agent):
        ws = agent.get(agent.workspace_id)
        return sum(int(e.get("activeConnections", 0)) for e in ws.get("networkPolicyStatus", {}).get("egresses", []))

    # -- the run -------------------------------------------------------------------------------
    def meta(self):
        return {**run_meta.machine(["agent", "uring", "netns", "proto"]),
                "agent": self.args.agent_label or os.path.relpath(self.args.agent, SOURCE_ROOT),
                "agent_build": run_meta.agent_build(self.args.agent),
                "threads": self.args.threads, "checkpoints": self.args.checkpoints,
                "idle_seconds": self.args.idle_seconds, "api_n": self.args.api_n,
                "connections": self.args.connections, "churn": self.args.churn,
                "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[1]}

    def run(self):
        t0 = time.monotonic()
        self.results["meta"] = self.meta()
        self.results["notes"] = list(NOTES)
        self.setup()
        try:
            for name, part, wanted in (("Workspaces", self.run_workspaces, self.args.checkpoints),
                                       ("connections", self.run_connections, self.args.connections),
                                       ("churn", self.run_churn, self.args.churn)):
                if not wanted:
                    continue
                self.check_time()
                try:
                    part()
                except (OutOfTime, KeyboardInterrupt):
                    raise
                except Exception as e:  # e.g. the agent did not start: the other part still runs
                    self.results["not_measured"].append(f"{name}: {type(e).__name__}: {str(e)[:600]}")
                    log(f"{name}: {type(e).__name__}: {e}")
        except OutOfTime:
            self.results["not_measured"].append(f"the run reached its bound of {self.args.max_minutes} minutes")
        self.results["meta"]["load_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
        self.results["meta"]["wall_s"] = time.monotonic() - t0

    def cleanup(self):
        if self.pool:
            self.pool.remove_all()
        self.lab.down()
        if not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


# -- report ------------------------------------------------------------------------------------
def _f(x, fmt="{:.1f}"):
    return "–" if x is None else fmt.format(x)


def markdown_table(results):
    cps = results["workspaces"]["checkpoints"]
    lines = []
    if cps:
        cols = [str(c["workspaces"]) for c in cps]
        lines += ["| Workspaces attached | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cps)]

        def row(label, get):
            vals = []
            for c in cps:
                try:
                    vals.append(get(c))
                except (KeyError, TypeError):
                    vals.append("–")
            lines.append(f"| {label} | " + " | ".join(vals) + " |")
        row("attach p50 / p99, ms (those since the previous column)",
            lambda c: f"{_f(c['attach']['p50_ms'])} / {_f(c['attach']['p99_ms'])}")
        row("agent fds per Workspace", lambda c: _f(c["fds_per_ws"]))
        row("io_uring direct descriptors per Workspace", lambda c: _f(c["slots_per_ws"]))
        row("agent RSS per Workspace, KiB", lambda c: _f(c["rss_kib_per_ws"]))
        row("agent fds / RSS MiB in all", lambda c: f"{c['fds']} / {c['rss_kib'] / 1024:.0f}")
        row("idle CPU, % of a core", lambda c: _f(c["idle_cpu_pct"], "{:.2f}"))
        row("GetWorkspace p50 / p99, ms (10 writes/s beside)",
            lambda c: f"{_f(c['api']['get']['p50_ms'], '{:.2f}')} / {_f(c['api']['get']['p99_ms'], '{:.2f}')}")
        row("ListWorkspaces (100) p50 / p99, ms",
            lambda c: f"{_f(c['api']['list']['p50_ms'], '{:.2f}')} / {_f(c['api']['list']['p99_ms'], '{:.2f}')}")
        row("UpdateNetworkPolicy p50 / p99, ms",
            lambda c: f"{_f(c['api']['update']['p50_ms'])} / {_f(c['api']['update']['p99_ms'])}")
        row("ListWorkspaces, all pages of 1,000, ms", lambda c: _f(c["api"]["list_all_ms"]))
        row("policy update of all, until all enforced, s", lambda c: _f(c["update_all"]["s"], "{:.2f}"))
        row("  agent CPU for it, s", lambda c: _f(c["update_all"]["cpu_s"], "{:.2f}"))
        row("restart (SIGKILL) until all enforced, s", lambda c: _f(c["restart"]["all_enforced_s"], "{:.2f}"))
        row("  until the API answers, s", lambda c: _f(c["restart"]["api_ready_s"], "{:.2f}"))
    died = results["workspaces"].get("agent_died")
    if died:
        lines += ["", f"The agent died after {died['after_workspaces']} Workspaces: `{died['why'][:600]}`"]
    c = results.get("connections")
    if c:
        lines += ["", f"| {c.get('held', 0)} idle relayed connections held through one Workspace | |", "|---|---|"]
        for label, key, fmt in (
                ("connections held / failed", None, None),
                ("agent RSS per connection, KiB", "rss_kib_per_conn", "{:.2f}"),
                ("agent RSS + its page tables and stacks + kernel slab, per connection, KiB",
                 "agent_plus_slab_kib_per_conn", "{:.2f}"),
                ("agent fds per connection", "fds_per_conn", "{:.2f}"),
                ("agent fds + direct descriptors per connection", "handles_per_conn", "{:.2f}"),
                ("idle CPU with them held, % of a core", "idle_cpu_pct", "{:.2f}")):
            if key is None:
                lines.append(f"| {label} | {c.get('held', 0)} / {c.get('errors', '–')} |")
            else:
                lines.append(f"| {label} | {_f(c.get(key), fmt)} |")
        u = c.get("update_live")
        if u:
            lines.append(f"| policy update with them live: until enforced / agent CPU, ms | "
                         f"{u['s'] * 1000:.1f} / {u['cpu_s'] * 1000:.0f} |")
            lines.append(f"| active connections reported before / after it | "
                         f"{c.get('active_reported', '–')} / {c.get('active_after_update', '–')} |")
        if c.get("agent_died"):
            lines.append(f"\nThe agent died: `{c['agent_died'][:600]}`")
    ch = results.get("churn")
    if ch and ch.get("quiet") and ch.get("churning"):
        q, c = ch["quiet"], ch["churning"]
        lines += ["", f"| Workspace A's connect + first byte while {ch['workspaces']} other Workspaces are created "
                  "and deleted in a loop | quiet | churning | ratio |", "|---|---|---|---|"]
        for key, label in (("p50_us", "p50, µs"), ("p99_us", "p99, µs")):
            ratio = ch.get(f"ratio_{key[:3]}")
            lines.append(f"| {label} | {_f(q.get(key), '{:.0f}')} | {_f(c.get(key), '{:.0f}')} | "
                         f"{_f(ratio, '{:.2f}')}x |")
        lines.append(f"| creates + deletes during the churn, per s | | {_f(ch.get('ops_per_s'))} | |")
    return "\n".join(lines)


def meta_lines(results):
    m = results["meta"]
    return "\n".join([
        f"- date: {m['date']}",
        f"- commit: `{m['commit']}`" + (f" (work tree had uncommitted changes in {m.get('dirty_files', '?')} "
                                         "files under agent/, uring/, netns/, proto/)" if m.get("dirty") else ""),
        f"- machine: {m['nproc']} × {m['cpu_model']}, {m['mem_total_gib']:.0f} GiB; kernel {m['kernel']}",
        f"- load average at start / end: {m['load_start']} / {m.get('load_end', '?')}",
        f"- kibotos-agent: `{m['agent']}` ({m['agent_build']}), dataplane threads {m['threads'] or 'one per core'}",
        f"- checkpoints {m['checkpoints']}; idle CPU over {m['idle_seconds']} s; {m['api_n']} Get calls per "
        f"checkpoint; {m['connections']} connections wanted; RLIMIT_NOFILE {m['nofile']}",
        f"- wall time: {m.get('wall_s', 0):.0f} s",
    ])


def chart(out_dir, results):
    """scale.png: one figure, six panels against the Workspace count (gnuplot)."""
    cps = results["workspaces"]["checkpoints"]
    if not cps or not shutil.which("gnuplot"):
        return None
    dat = os.path.join(out_dir, ".scale.dat")

    def g(c, *keys):
        try:
            for k in keys:
                c = c[k]
            return "NaN" if c is None else f"{c}"
        except (KeyError, TypeError):
            return "NaN"
    with open(dat, "w") as f:
        for c in cps:
            f.write(" ".join([str(c["workspaces"]), g(c, "fds_per_ws"), g(c, "rss_kib_per_ws"),
                              g(c, "attach", "p50_ms"), g(c, "attach", "p99_ms"), g(c, "idle_cpu_pct"),
                              g(c, "restart", "all_enforced_s"), g(c, "update_all", "s")]) + "\n")
    panels = [("agent fds per Workspace", "fds", "2"), ("agent RSS per Workspace", "KiB", "3"),
              ("attach latency", "ms", None), ("idle CPU", "% of a core", "6"),
              ("restart until all enforced", "s", "7"), ("policy update of all", "s", "8")]
    script = ["set terminal pngcairo size 1500,820 font ',10'", f"set output '{os.path.join(out_dir, 'scale.png')}'",
              "set multiplot layout 2,3 title 'kibotos-agent host scale (measured at each count)'",
              "set grid", "set key top left", "set xlabel 'Workspaces attached'", "set yrange [0:*]",
              "set logscale x", f"set xrange [{cps[0]['workspaces'] * 0.8}:{cps[-1]['workspaces'] * 1.25}]",
              "set xtics (" + ", ".join(str(c["workspaces"]) for c in cps) + ")"]
    for title, unit, col in panels:
        script += [f"set title '{title}'", f"set ylabel '{unit}'"]
        if col:
            script.append(f"plot '{dat}' using 1:{col} with linespoints pt 7 lw 2 notitle")
        else:
            script.append(f"plot '{dat}' using 1:4 with linespoints pt 7 lw 2 title 'p50', "
                          f"'' using 1:5 with linespoints pt 5 lw 2 title 'p99'")
    script.append("unset multiplot")
    r = subprocess.run(["gnuplot"], input="\n".join(script) + "\n", text=True, capture_output=True, timeout=60)
    os.unlink(dat)
    if r.returncode != 0:
        log(f"gnuplot: {r.stderr[-400:]}")
        return None
    return "scale.png"


def write(out_dir, results):
    os.makedirs(out_dir, exist_ok=True)
    results["chart"] = chart(out_dir, results)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
        f.write("\n")
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("# Host scale (issue 26): Workspaces and connections on one agent\n\n")
        f.write("One run of `tests/bench/scale.py` (see its docstring for what each figure is):\n\n")
        f.write(meta_lines(results) + "\n\n")
        if results.get("chart"):
            f.write(f"![scale]({results['chart']})\n\n")
        f.write(markdown_table(results) + "\n")
        if results["not_measured"]:
            f.write("\nNot measured:\n\n" + "".join(f"- {x}\n" for x in results["not_measured"]))
        if results.get("notes"):
            f.write("\nNotes:\n\n" + "".join(f"- {x}\n" for x in results["notes"]))
        f.write("\nRaw figures: [results.json](results.json).\n")


def default_agent():
    build = os.environ.get("KIBOTOS_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build"))
    return os.path.join(build, "agent", "kibotos-agent")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: --workspaces 40 --checkpoints 10,40 --connections 200 --idle-seconds 2")
    ap.add_argument("--workspaces", type=int, default=2000, help="Workspaces at the end (default %(default)s)")
    ap.add_argument("--checkpoints", help="counts to measure at, ascending (default: 100,250,500,1000,2000 up "
                                          "to --workspaces, and --workspaces)")
    ap.add_argument("--connections", type=int, default=10000,
                    help="idle relayed connections held through one Workspace; 0: none (default %(default)s)")
    ap.add_argument("--no-workspaces", action="store_true", help="only the connections part")
    ap.add_argument("--churn", type=int, default=500, help="Workspaces created and deleted in a loop while "
                    "Workspace A's connect latency is measured (0: no churn part; default %(default)s)")
    ap.add_argument("--churn-seconds", type=float, default=60.0, help="bound on the churn (default %(default)s)")
    ap.add_argument("--churn-latency-n", type=int, default=1000,
                    help="sequential connections per latency sample (default %(default)s)")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--api-n", type=int, default=400, help="GetWorkspace calls per checkpoint (List: 1/4, "
                                                           "Update: 1/2 of it)")
    ap.add_argument("--threads", type=int, default=0, help="dataplane.threads (0: one per core)")
    ap.add_argument("--agent", default=default_agent(), help="kibotos-agent binary (default: %(default)s; "
                                                              "measure a release build)")
    ap.add_argument("--agent-label", help="how results name the binary (e.g. its build dir when --agent is a "
                                          "copy taken so that a rebuild during the run cannot change it)")
    ap.add_argument("--out", help="output dir (default: docs/bench/scale; a temp dir with --smoke)")
    ap.add_argument("--max-minutes", type=float, default=45.0, help="bound on the whole run")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, agent logs)")
    ap.add_argument("--nofile", type=int, help="RLIMIT_NOFILE for everything started (default: as high as "
                                               "allowed); lower it to try the run's fit to the limit")
    args = ap.parse_args(argv)
    if args.smoke:
        args.workspaces, args.connections, args.idle_seconds, args.api_n = 40, 200, 2.0, 40
        args.churn, args.churn_seconds, args.churn_latency_n = 20, 8.0, 200
        args.checkpoints = args.checkpoints or "10,40"
        args.max_minutes = min(args.max_minutes, 10)
    if args.checkpoints:
        cps = sorted({int(x) for x in args.checkpoints.split(",") if x})
    else:
        cps = [c for c in (100, 250, 500, 1000, 2000) if c < args.workspaces] + [args.workspaces]
    args.checkpoints = [] if args.no_workspaces else [c for c in cps if c > 0]
    if args.out is None:
        args.out = (tempfile.mkdtemp(prefix="kibotos-scale-out-") if args.smoke
                    else os.path.join(SOURCE_ROOT, "docs", "bench", "scale"))
    return args


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if os.geteuid() != 0:
        print("scale.py needs root (network namespaces, nftables)", file=sys.stderr)
        return 77
    missing = [t for t in ("ip", "nft", "danted", "cc", "ss") if not shutil.which(t)]
    if missing or not os.access(args.agent, os.X_OK):
        print(f"missing: {missing or args.agent}", file=sys.stderr)
        return 77
    # Each Workspace holds fds, each held connection one (and one in the client, the
    # server and dante): the soft limit to the hard one, or higher where allowed.
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile or 200000,) * 2)
    except (ValueError, OSError):
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if args.connections > nofile - 1000:
        log(f"RLIMIT_NOFILE {nofile}: holding {nofile - 1000} connections, not {args.connections}")
        args.connections = max(0, nofile - 1000)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    s = Scale(args)
    try:
        s.run()
    finally:
        s.cleanup()
    write(args.out, s.results)
    print(markdown_table(s.results))
    for line in s.results["not_measured"]:
        print("- " + line)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
