#!/usr/bin/python3
"""kibotos-agent data-plane benchmarks, in one run, on the lab topology of docs/ARCHITECTURE.md.

    sudo tests/bench/run.py --full     # ~37 min here; writes docs/bench/
    sudo tests/bench/run.py --smoke    # seconds; writes to a temp dir (or --out)
    sudo tests/bench/run.py --baseline-agent OTHER/kibotos-agent --families conns,lat,tput --runs 3
                                       # an A/B: another build beside this one and the peers
    sudo tests/bench/run.py --scale [--workspaces N --connections K]   # tests/bench/scale.py
    tests/bench/run.py --render-only   # re-renders docs/bench/README.md from its results.json

Measures, side by side: the routed path (no proxy), redsocks (REDIRECT; copy and splice
modes), redsocks in front of a local stunnel client (the TLS peer) and kibotos-agent
(SOCKS5 with 1 and 2 data-plane threads, SOCKS5 inside TLS).
See docs/bench/README.md for what each figure means.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "integration"))  # proc_handles

from benchlib import kibotos, measure, peers, readme, report, run_meta, tools  # noqa: E402
from benchlib import lab as L  # noqa: E402

PROFILES = {
    # runs: each figure is the median of this many runs (>= 3 for published figures)
    # 5 for the published run: single hiccups of a shared 2-core machine (p99 latency,
    # machine-wide memory) moved medians of 3 across a target between runs.
    "full": dict(runs=5, iperf_seconds=4, variants=("1_up", "1_down", "4_up", "4_down"),
                 wrk_seconds=3, wrk_conns=32, lat_n=1000, lat_series=3, hold_n=10000, dns_n=5000,
                 dns_window=16, select_seconds=2, select_lat_n=300, max_minutes=40,
                 settle_load=2.0, settle_seconds=180, idle_busy=0.25, idle_seconds=20,
                 lat_warmup=100, tw_below=1000, tw_seconds=70, crypto_seconds=3),
    "smoke": dict(runs=1, iperf_seconds=1, variants=("1_up", "4_down"), wrk_seconds=1,
                  wrk_conns=8, lat_n=100, lat_series=1, hold_n=200, dns_n=200, dns_window=4,
                  select_seconds=1, select_lat_n=30, max_minutes=3, settle_load=1e9,
                  settle_seconds=0, idle_busy=1.0, idle_seconds=0, lat_warmup=10, tw_below=1e9,
                  tw_seconds=0, crypto_seconds=1),
}

MODES = {  # name: (label, kind, data-plane threads)
    "routed": ("routed (no proxy)", "routed", None),
    "redsocks-copy": ("redsocks copy", "peer", None),
    "redsocks-splice": ("redsocks splice", "peer", None),
    # What users build for a SOCKS5-over-TLS server: redsocks (copy) in front of a local
    # stunnel client; its relay CPU and memory are both processes'.
    "redsocks-stunnel": ("redsocks + stunnel client (TLS)", "peer-tls", None),
    "kibotos-1t": ("kibotos SOCKS5, 1 thread", "kibotos", 1),
    "kibotos-2t": ("kibotos SOCKS5, 2 threads", "kibotos", 2),
    "kibotos-tls-1t": ("kibotos SOCKS5+TLS, 1 thread", "kibotos-tls", 1),
    # --baseline-agent: another build of the agent in the same run, for an A/B.
    "kibotos-base-1t": ("kibotos SOCKS5, 1 thread, baseline build", "kibotos", 1),
    "kibotos-base-tls-1t": ("kibotos SOCKS5+TLS, 1 thread, baseline build", "kibotos-tls", 1),
}
BASELINE_MODES = ("kibotos-base-1t", "kibotos-base-tls-1t")
PEER_MODES = ("redsocks-copy", "redsocks-splice")
TLS_PEER_MODES = ("redsocks-stunnel",)


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class OutOfTime(Exception):
    pass


class Bench:
    def __init__(self, args, prof):
        self.args, self.p = args, prof
        self.deadline = time.monotonic() + prof["max_minutes"] * 60
        self.workdir = tempfile.mkdtemp(prefix="kibotos-bench-")
        self.lab = L.Lab()
        self.tools = {}
        self.starts = 0
        self.results = {"meta": {}, "socks_server": {}, "modes": {}, "not_measured": []}

    # -- setup -------------------------------------------------------------------------
    def check_time(self):
        if time.monotonic() > self.deadline:
            raise OutOfTime()

    def select_socks(self):
        """Measures dante and microsocks through the same relay (redsocks copy mode) and
        keeps the faster: higher one-stream throughput, then lower connect latency."""
        cands = {}
        for name in ("dante", "microsocks"):
            rs = peers.start_redsocks(self.lab, self.workdir, peers.SOCKS_PORTS[name], splice=False)
            try:
                pids = peers.socks_server_pids(self.lab, name)
                it = measure.iperf(self.lab, 1, False, self.p["select_seconds"], pids)
                lt = measure.latency(self.lab, self.tools, self.p["select_lat_n"], pids)
                cands[name] = {"gbps": it["gbps"], "server_cpu_s_per_gb": it["cpu_s_per_gb"],
                               "lat_p50_us": lt["p50_us"], "lat_p99_us": lt["p99_us"]}
                log(f"socks candidate {name}: {cands[name]}")
            finally:
                peers.stop_redsocks(self.lab, rs)
        if self.args.socks != "auto":
            chosen, why = self.args.socks, "chosen with --socks"
        else:
            d, m = cands["dante"], cands["microsocks"]
            close = abs(d["gbps"] - m["gbps"]) <= 0.05 * max(d["gbps"], m["gbps"])
            if close:
                chosen = "dante" if d["lat_p50_us"] <= m["lat_p50_us"] else "microsocks"
                why = "throughput within 5%, lower connect+first-byte p50"
            else:
                chosen = "dante" if d["gbps"] > m["gbps"] else "microsocks"
                why = "higher one-stream throughput through the same relay"
        o = cands["microsocks" if chosen == "dante" else "dante"]
        c = cands[chosen]
        why += (f": {c['gbps']:.2f} vs {o['gbps']:.2f} Gbit/s, p50 {c['lat_p50_us']:.0f} vs "
                f"{o['lat_p50_us']:.0f} µs, server CPU {c['server_cpu_s_per_gb']:.2f} vs "
                f"{o['server_cpu_s_per_gb']:.2f} s/GB (measured through redsocks copy mode, "
                f"{self.p['select_seconds']} s, {self.p['select_lat_n']} connections)")
        self.results["socks_server"] = {"chosen": chosen, "why": why, "candidates": cands,
                                        "udp_associate_server": "dante"}
        log(f"SOCKS5 server: {chosen} ({why})")
        return chosen

    # -- modes ---------------------------------------------------------------------------
    def run_mode(self, name, run_index, families):
        """One run of the given families through one mode, set up fresh (the relay's RSS
        is read before anything else). A mode that is not available in the first run is
        skipped in the later ones."""
        label, kind, threads = MODES[name]
        entry = self.results["modes"].setdefault(name, {"label": label, "kind": kind, "available": False,
                                                        "samples": {}, "raw": {}})
        if run_index > 0 and not entry["available"]:
            return
        relay_pids, cleanup, agent = [], None, None
        try:
            if kind == "peer":
                rs = peers.start_redsocks(self.lab, self.workdir, self.socks_port,
                                          splice=(name == "redsocks-splice"))
                relay_pids, cleanup = [rs.pid], (lambda: peers.stop_redsocks(self.lab, rs))
            elif kind == "peer-tls":
                st = peers.start_stunnel_client(self.lab, self.workdir, self.certs)
                rs = peers.start_redsocks(self.lab, self.workdir, peers.STUNNEL_CLIENT_PORT, splice=False,
                                          upstream_ip="127.0.0.1")

                def cleanup():
                    peers.stop_redsocks(self.lab, rs)
                    self.lab.stop(st)
                relay_pids = [rs.pid, st.pid]
            elif kind.startswith("kibotos"):
                agent, why = self.start_kibotos(name, kind, threads, run_index, entry)
                if agent is None:
                    entry["reason"] = why
                    log(f"{name}: not available: {why}")
                    return
                relay_pids, cleanup = [agent.pid], agent.stop
            why = self.not_through(kind)
            if why:
                entry["reason"] = why
                log(f"{name}: not available: {why}")
                return
            entry["available"] = True
            load = " ".join(open("/proc/loadavg").read().split()[:3])
            entry["raw"].setdefault("load_at_start", []).append(load)
            log(f"{name}: run {run_index + 1}/{self.p['runs']}, {','.join(sorted(families))} (load {load})")
            self.measure_all(name, entry, relay_pids, agent, families)
        except OutOfTime:
            entry.setdefault("reason", "the run's time bound was reached")
            raise
        except Exception as e:  # one broken mode must not lose the others' figures
            entry["error"] = f"{type(e).__name__}: {e}"
            log(f"{name}: error: {entry['error']}")
        finally:
            if cleanup:
                cleanup()
        if (name == "kibotos-1t" and entry.get("driver") == "harness" and entry["available"]
                and "dns" in families):
            self.fig, self.raw = entry["samples"], entry["raw"]
            self.measure_dns_harness(run_index)

    def not_through(self, kind):
        """Why connections do not go through this mode's relay (None when they do): the
        server sees a relayed connection come from the SOCKS server, not the guest."""
        want = L.GUEST_IP if kind == "routed" else L.SOCKS_INET_IP
        seen = measure.seen_from(self.lab, self.tools)
        if seen == want and measure.reachable(self.lab, self.tools):
            return None
        return f"connections did not go through it: the server saw them from {seen or 'nowhere'}, expected {want}"

    def start_kibotos(self, name, kind, threads, run_index, entry):
        """The daemon (kibotos-agent) first; when it does not relay (yet) and --driver is
        auto, the same data plane through relay_harness. The first run's choice holds."""
        drivers = [entry["driver"]] if entry.get("driver") else (
            ["agent", "harness"] if self.args.driver == "auto" else [self.args.driver])
        if name in BASELINE_MODES:
            drivers = ["agent"]  # the harness is this tree's, not the baseline's
        reasons = []
        for driver in drivers:
            agent, why = self.start_agent(name, kind, threads, run_index, driver)
            if agent is not None:
                why = self.not_through(kind)
                if why is None:
                    if driver == "harness" and not entry.get("driver"):
                        entry["label"] += " ‡"
                        entry["driver_note"] = "; ".join(reasons)
                    entry["driver"] = driver
                    return agent, None
                why += f"; status: {agent.status()}; log: {agent.log_tail(200) or '(empty)'}"
                agent.stop()
            reasons.append(f"{driver}: {why}")
        return None, "; ".join(reasons)

    def start_agent(self, name, kind, threads, run_index, driver="agent"):
        binary = self.args.harness if driver == "harness" else (
            self.args.baseline_agent if name in BASELINE_MODES else self.args.agent)
        if not binary or not os.access(binary, os.X_OK):
            return None, f"binary not found ({binary})"
        cls = kibotos.Agent if driver == "agent" else kibotos.Harness
        self.starts += 1  # a fresh state dir for each start (a mode starts twice a run)
        agent = cls(self.lab, binary, self.workdir, f"{name}-{run_index}-{driver}-{self.starts}", threads)
        try:
            agent.start()
            if kind == "kibotos-tls":
                eg = agent.create_egress(f"{L.SOCKS_AGENT_IP}:{peers.STUNNEL_PORT}", tls_ca=self.certs["ca"])
            else:
                eg = agent.create_egress(f"{L.SOCKS_AGENT_IP}:{self.socks_port}")
            agent.egress_id = eg
            agent.create_workspace(eg)
            agent.wait_applied()
            return agent, None
        except Exception as e:
            tail = agent.log_tail(300)
            agent.stop()
            return None, f"{type(e).__name__}: {e}" + (f"; agent log: {tail}" if tail else "")

    def measure_all(self, name, entry, relay_pids, agent, fams):
        self.fig, self.raw = entry["samples"], entry["raw"]
        pids = relay_pids or None
        if "mem" in fams:  # first: the relay's RSS is read fresh, before anything else ran
            # Behind TLS, stunnel (in front of the SOCKS server) is one process with 2
            # fds per connection: it caps that mode like the peers.
            two_fd = entry["kind"] in ("peer", "peer-tls", "kibotos-tls")
            n = self.p["hold_n_peers"] if two_fd else self.p["hold_n"]
            entry["hold_n"] = n
            self.measure_memory(relay_pids, n, warm_up=True)
        if "tput" in fams:
            self.settle_for_throughput()
            self.measure_throughput(pids)
        if "conns" in fams:
            self.measure_connections(pids)
        if "lat" in fams:
            self.measure_latency(pids)
        if "dns" in fams and name == "routed":
            self.measure_dns(None, L.INET_IP, "direct", keys=("dns_direct",))
        elif "dns" in fams and name == "kibotos-1t" and entry.get("driver") != "harness":
            self.measure_agent_dns(agent)

    def add(self, key, value):
        self.fig.setdefault(key, []).append(value)

    def measure_memory(self, relay_pids, n, warm_up):
        rss_fresh = sum(peers.rss_kib(pid) for pid in relay_pids) if relay_pids else None
        # One unmeasured hold in each mode's first run: dante forks helper processes as
        # load grows and keeps them, so without it the first relay measured would pay the
        # SOCKS server's growth.
        if warm_up:
            self.check_time()
            measure.hold(self.lab, self.tools, n, relay_pids, max_seconds=90)
        self.check_time()
        r = measure.hold(self.lab, self.tools, n, relay_pids, max_seconds=90, rss_base=rss_fresh)
        self.raw.setdefault("hold", []).append(r)
        for k in ("sys_kib_per_conn", "sys_net_kib_per_conn", "lab_kib_per_conn"):
            self.add(k, r[k])
        self.add("hold_errors", r["errors"])
        if relay_pids:
            for k in ("rss_idle_kib", "rss_kib_per_conn", "fd_leak"):
                self.add(k, r[k])

    def settle_for_throughput(self):
        """Every mode's throughput starts from the same SOCKS server state: restarted, then
        the machine idle. The hold before it leaves dante with the helpers it forked for the
        mode's own count of idle connections (redsocks splice holds a third of the others'),
        and their exits ran into the iperf3 runs."""
        self.check_time()
        self.restart_socks_server()
        waited, busy = measure.wait_idle(self.p["idle_busy"], self.p["idle_seconds"])
        self.raw.setdefault("tput_settle", []).append(
            {"idle_wait_s": round(waited, 1), "busy_before": busy and round(busy, 3)})

    def egress_side(self, pids):
        """The Egress side's processes (SOCKS server, stunnel), counted beside a relay's."""
        return (lambda: self.lab.ns_pids(self.lab.socks)) if pids else None

    def measure_throughput(self, pids):
        p = self.p
        for v in p["variants"]:
            self.check_time()
            streams, direction = v.split("_")
            r = measure.iperf(self.lab, int(streams), direction == "down", p["iperf_seconds"], pids,
                              self.egress_side(pids))
            self.raw.setdefault(f"iperf_{v}", []).append(r)
            self.add(f"tput_{v}", r["gbps"])
            if pids:
                self.add(f"cpu_gb_{v}", r["cpu_s_per_gb"])
                if r["cpu_s_per_gb"] is not None:  # None: nothing received
                    self.add(f"cpu_gb_socks_{v}", r["cpu_s_per_gb"] + r["server_cpu_s_per_gb"])

    def measure_connections(self, pids):
        p = self.p
        self.check_time()
        r = measure.wrk(self.lab, p["wrk_seconds"], p["wrk_conns"], pids, self.egress_side(pids))
        self.raw.setdefault("wrk", []).append(r)
        self.add("conn_per_s", r["conn_per_s"])
        self.add("conn_errors", r["errors"])
        if pids:  # µs/conn == ms/1,000 conns
            self.add("cpu_ms_per_1k_conn", r["cpu_us_per_conn"])
            self.add("socks_ms_per_1k_conn", r["server_cpu_us_per_conn"])
            if r["cpu_us_per_conn"] is not None:
                self.add("cpu_ms_per_1k_conn_socks", r["cpu_us_per_conn"] + r["server_cpu_us_per_conn"])

    def measure_latency(self, pids):
        """lat_series series of lat_n sequential connections, each a sample of the figure
        (a p99 of 1,000 is its 10th-worst connection: one series is noisy), each taken
        once the machine is idle again."""
        p = self.p
        measure.latency(self.lab, self.tools, p["lat_warmup"], None)  # first dials: not measured
        for _ in range(p["lat_series"]):
            self.check_time()
            waited, busy = measure.wait_idle(p["idle_busy"], p["idle_seconds"])
            r = measure.latency(self.lab, self.tools, p["lat_n"], pids)
            r["idle_wait_s"], r["busy_before"] = round(waited, 1), busy and round(busy, 3)
            self.raw.setdefault("latency", []).append(r)
            self.add("lat_p50_us", r["p50_us"])
            self.add("lat_p99_us", r["p99_us"])
            self.add("lat_errors", r["errors"])

    def measure_dns(self, pids, server, how, keys):
        self.check_time()
        r = measure.dns(self.lab, self.tools, server, self.p["dns_n"], self.p["dns_window"], pids)
        self.raw.setdefault(f"dns_{how}", []).append(r)
        for k in keys:
            self.add(f"{k}_qps", r["qps"])
            self.add(f"{k}_p99_us", r["p99_us"])

    def measure_agent_dns(self, agent):
        dante = f"{L.SOCKS_AGENT_IP}:{peers.SOCKS_PORTS['dante']}"
        plain = f"{L.SOCKS_AGENT_IP}:{self.socks_port}"
        for how, transport, addr, udp in (("udp", "udp", dante, True), ("tcp", "tcp", plain, False)):
            try:
                eg = agent.create_egress(addr, udp=udp)
                resolver = {transport: {"address": f"{L.INET_IP}:{peers.DNS_PORT}"}, "egressId": eg}
                agent.update_policy(agent.policy(agent.egress_id, resolver))
                agent.wait_applied()
                # Only an interceptor answers a query to an address nobody owns.
                probe = measure.dns(self.lab, self.tools, L.NO_HOST_IP, 5, 1, None)
                if probe["answered"] != 5:
                    raise RuntimeError(f"no answer through the agent (DNS not implemented, or not "
                                       f"working): {probe['answered']}/5 probe queries answered")
                self.measure_dns([agent.pid], L.NO_HOST_IP, how, keys=(f"dns_{how}",))
            except OutOfTime:
                raise
            except Exception as e:
                self.results["not_measured"].append(
                    f"DNS via a {how} Resolver: not measured: {str(e)[:250]}")

    def measure_dns_harness(self, run_index):
        """DNS through the agent's forwarder driven by dns_harness, when the daemon does
        not relay (yet): one run of each Resolver transport."""
        binary = self.args.dns_harness
        if not os.access(binary, os.X_OK):
            if run_index == 0:
                self.results["not_measured"].append(
                    f"DNS through kibotos: not measured: the daemon does not relay yet and {binary} is not built")
            return
        h = kibotos.DnsHarness(self.lab, binary, self.workdir, f"dns-{run_index}", 1)
        try:
            h.start()
            udp_eg = h.create_egress(f"{L.SOCKS_AGENT_IP}:{peers.SOCKS_PORTS['dante']}")
            tcp_eg = h.create_egress(f"{L.SOCKS_AGENT_IP}:{self.socks_port}")
            for how, eg in (("udp", udp_eg), ("tcp", tcp_eg)):
                h.set_resolver(how, eg)
                probe = measure.dns(self.lab, self.tools, L.NO_HOST_IP, 5, 1, None)
                if probe["answered"] != 5:
                    raise RuntimeError(f"dns_harness, {how} Resolver: {probe['answered']}/5 probe queries answered")
                self.measure_dns([h.pid], L.NO_HOST_IP, f"{how}_harness", keys=(f"dns_{how}",))
            self.results["modes"]["kibotos-1t"]["dns_driver"] = "dns_harness"
        except OutOfTime:
            raise
        except Exception as e:
            self.results["not_measured"].append(f"DNS through kibotos (dns_harness), run {run_index + 1}: "
                                                f"not measured: {type(e).__name__}: {str(e)[:250]}")
        finally:
            h.stop()

    def latency_pass(self, run_index):
        """The latency family of every mode in turn, ahead of the run's other families,
        in a lab reset alike for each pass: the SOCKS server restarted (dante keeps the
        helper processes the previous run's holds made it fork) and the previous run's
        TIME_WAIT sockets gone. Measured among the other families instead, a mode's
        latency depended on its place in the run. The order rotates by one each run."""
        self.check_time()
        self.restart_socks_server()
        waited, left = measure.wait_time_wait(self.lab, self.p["tw_below"], self.p["tw_seconds"])
        self.results["meta"].setdefault("lat_passes", []).append(
            {"run": run_index + 1, "time_wait_wait_s": round(waited, 1), "time_wait_left": left})
        log(f"latency pass {run_index + 1}: waited {waited:.0f} s for TIME_WAIT sockets ({left} left)")
        k = run_index % len(self.args.modes)
        for name in self.args.modes[k:] + self.args.modes[:k]:
            self.check_time()
            self.run_mode(name, run_index, {"lat"})

    def restart_socks_server(self):
        name = self.results["socks_server"]["chosen"]
        peers.stop_socks_server(self.lab, self.socks_procs[name], name)
        start = peers.start_dante if name == "dante" else peers.start_microsocks
        self.socks_procs[name] = start(self.lab, self.workdir)

    # -- the run ----------------------------------------------------------------------
    def meta(self):
        return {**run_meta.machine(["agent", "uring", "netns", "tests/bench"]),
                "profile": self.args.profile, "agent": self.args.agent,
                "agent_build": run_meta.agent_build(self.args.agent),
                **({"baseline_agent": self.args.baseline_agent,
                    "baseline_agent_build": run_meta.agent_build(self.args.baseline_agent)}
                   if self.args.baseline_agent else {}),
                **{k: v for k, v in self.p.items() if k != "variants"},
                "variants": list(self.p["variants"])}

    def wait_for_quiet(self):
        """Starts once the 1-minute load average is below the profile's bound (at most
        settle_seconds): a run started right after another one's 9,500 connections
        (dante reaping hundreds of helpers) began at load 27 and measured routed
        connections/s a quarter low."""
        bound, limit = self.p["settle_load"], self.p["settle_seconds"]
        t0 = time.monotonic()
        while os.getloadavg()[0] > bound and time.monotonic() - t0 < limit:
            time.sleep(5)
        waited = time.monotonic() - t0
        if waited >= 5:
            log(f"waited {waited:.0f} s for the load average to fall below {bound} "
                f"(now {os.getloadavg()[0]:.2f})")

    def run(self):
        self.wait_for_quiet()
        t0 = time.monotonic()
        self.results["meta"] = self.meta()
        # First, on the quiet machine: the TLS modes' crypto floor (docs/bench, Targets).
        self.results["meta"]["crypto"] = measure.crypto_floor(self.p["crypto_seconds"])
        log(f"crypto floor: {self.results['meta']['crypto']}")
        self.tools = tools.build_tools(self.workdir)
        log(f"lab {self.lab.tag}: building namespaces")
        self.lab.up()
        peers.start_destinations(self.lab, self.tools, max_seconds=self.p["max_minutes"] * 60 + 300)
        self.socks_procs = {"dante": peers.start_dante(self.lab, self.workdir),
                            "microsocks": peers.start_microsocks(self.lab, self.workdir)}
        chosen = self.select_socks()
        self.socks_port = peers.SOCKS_PORTS[chosen]
        self.certs = peers.make_certs(self.workdir)
        peers.start_stunnel(self.lab, self.workdir, self.certs, self.socks_port)
        try:
            # Runs are interleaved (run 1 of every mode, then run 2, ...) so that a change
            # in the machine's background load spreads over all modes alike.
            rest = self.args.families - {"lat"}
            for run_index in range(self.p["runs"]):
                if "lat" in self.args.families:
                    self.latency_pass(run_index)
                for name in self.args.modes if rest else ():
                    self.check_time()
                    self.run_mode(name, run_index, rest)
        except OutOfTime:
            log("time bound reached: the remaining figures are not measured")
            self.results["not_measured"].append(
                f"the run reached its time bound of {self.p['max_minutes']} minutes during run "
                f"{run_index + 1} of {self.p['runs']}: some figures have fewer runs (see 'runs' in "
                "results.json)")
        for name in self.args.modes:
            m = self.results["modes"].setdefault(name, {"label": MODES[name][0], "kind": MODES[name][1],
                                                        "available": False, "samples": {},
                                                        "reason": "not run (time bound)"})
            m["metrics"] = {k: s for k, v in m.pop("samples").items() if (s := report.summarize(v))}
            if not m["available"]:
                self.results["not_measured"].append(f"{m['label']}: not available: {m.get('reason', '')[:300]}")
        if "kibotos-1t" not in self.results["modes"] or not self.results["modes"]["kibotos-1t"]["available"]:
            self.results["not_measured"].append(
                "DNS through kibotos (udp Resolver via UDP ASSOCIATE, tcp Resolver): not measured: "
                "kibotos-agent not available")
        self.results["meta"]["load_end"] = " ".join(open("/proc/loadavg").read().split()[:3])
        self.results["meta"]["wall_s"] = time.monotonic() - t0

    def write(self, out):
        """Writes the figures to out; returns the exit code. A run in which a peer or the
        routed path moved more than 2× from the run published in out is not published
        there (it goes to a temp dir) unless --accept-moves gives the reason."""
        os.makedirs(out, exist_ok=True)
        report.add_ratios(self.results, [m for m in PEER_MODES if m in self.results["modes"]],
                          [m for m in TLS_PEER_MODES if m in self.results["modes"]])
        code = 0
        previous = os.path.join(out, "results.json")
        if os.path.exists(previous):
            with open(previous) as f:
                moves = report.moves_since(json.load(f), self.results)
            self.results["moved_since_previous"] = moves
            for m in moves:
                log(f"MOVED > 2x since {m['commit']}: {m['mode']} {m['figure']} {m['before']:.4g} -> {m['now']:.4g}")
            if any(m["kind"] in ("peer", "peer-tls", "routed") for m in moves):
                if self.args.accept_moves:
                    self.results["moves_accepted"] = self.args.accept_moves
                else:
                    out = tempfile.mkdtemp(prefix="kibotos-bench-refused-")
                    log(f"not published: a peer or the routed path moved more than 2x (a harness fault until "
                        f"shown otherwise); written to {out}; --accept-moves REASON publishes it")
                    code = 3
        self.results["charts"] = report.charts(out, self.results)
        report.write_json(out, self.results)
        report.write_markdown(out, self.results)
        readme.write(out, self.results)
        print(report.markdown_table(self.results))
        for line in self.results["not_measured"]:
            print("- " + line)
        log(f"wrote {out}")
        return code

    def cleanup(self):
        self.lab.down()
        if not self.args.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def default_agent():
    build = os.environ.get("KIBOTOS_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build"))
    return os.path.join(build, "agent", "kibotos-agent")


def default_harness():
    build = os.environ.get("KIBOTOS_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build"))
    return os.path.join(build, "tests", "integration", "dataplane", "relay_harness")


def default_dns_harness():
    build = os.environ.get("KIBOTOS_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build"))
    return os.path.join(build, "tests", "integration", "dns", "dns_harness")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--full", dest="profile", action="store_const", const="full",
                   help="the published run: 5 runs per figure, 10,000 idle connections (default)")
    g.add_argument("--smoke", dest="profile", action="store_const", const="smoke",
                   help="seconds: 1 run, small counts; checks the harness works")
    ap.set_defaults(profile="full")
    ap.add_argument("--out", help="output dir (default: docs/bench for --full, a temp dir for --smoke)")
    ap.add_argument("--agent", default=default_agent(), help="kibotos-agent binary (default: %(default)s)")
    ap.add_argument("--harness", default=default_harness(),
                    help="relay_harness binary, the data plane without the daemon (default: %(default)s)")
    ap.add_argument("--dns-harness", default=default_dns_harness(),
                    help="dns_harness binary, the DNS forwarder without the daemon (default: %(default)s)")
    ap.add_argument("--driver", choices=("auto", "agent", "harness"), default="auto",
                    help="what runs kibotos' data plane: the daemon, relay_harness, or the daemon "
                         "and, if it does not relay, relay_harness (default)")
    ap.add_argument("--baseline-agent", help="a second kibotos-agent binary (e.g. main's) measured in the same "
                    "run as the modes kibotos-base-1t and kibotos-base-tls-1t: an A/B beside the peers")
    ap.add_argument("--modes", default=",".join(m for m in MODES if m not in BASELINE_MODES),
                    help="comma-separated subset of: " + ", ".join(MODES))
    ap.add_argument("--families", default="tput,conns,lat,mem,dns",
                    help="comma-separated subset of: tput, conns, lat, mem, dns")
    ap.add_argument("--hold", type=int, help="override the profile's idle connections held")
    ap.add_argument("--socks", choices=("auto", "dante", "microsocks"), default="auto")
    ap.add_argument("--runs", type=int, help="override the profile's runs per figure")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (configs, logs)")
    ap.add_argument("--render-only", action="store_true",
                    help="measure nothing: rewrite README.md in --out (default docs/bench) from the "
                         "results.json there")
    ap.add_argument("--accept-moves", metavar="REASON",
                    help="publish even if a peer or the routed path moved more than 2x since the run "
                         "published in --out (the reason is written beside the figures)")
    args = ap.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    args.families = set(args.families.split(","))
    bad = [m for m in args.modes if m not in MODES]
    if bad:
        ap.error(f"unknown modes: {bad}")
    if args.baseline_agent and not any(m in args.modes for m in BASELINE_MODES):
        args.modes.append("kibotos-base-1t")
    if any(m in args.modes for m in BASELINE_MODES) and not args.baseline_agent:
        ap.error("the baseline modes need --baseline-agent")
    if "routed" not in args.modes:
        args.modes.insert(0, "routed")  # every ratio needs it
    return args


def render_only(out):
    """Re-renders out/README.md from out/results.json (the prose or the renderer changed,
    the figures did not)."""
    with open(os.path.join(out, "results.json")) as f:
        results = json.load(f)
    readme.write(out, results)
    log(f"rendered {os.path.join(out, 'README.md')} from its results.json")
    return 0


def main(argv=None):
    argv = argv if argv is not None else sys.argv[1:]
    if "--scale" in argv:  # the host-scale benchmark (issue 26): tests/bench/scale.py
        import scale
        return scale.main([a for a in argv if a != "--scale"])
    args = parse_args(argv)
    if args.render_only:
        return render_only(args.out or os.path.join(SOURCE_ROOT, "docs", "bench"))
    if os.geteuid() != 0:
        print("run.py needs root (network namespaces, nftables)", file=sys.stderr)
        return 77
    missing = [t for t in ("ip", "nft", "iperf3", "wrk", "redsocks", "danted", "microsocks",
                           "stunnel4", "dnsmasq", "gnuplot", "cc", "openssl", "ss")
               if not shutil.which(t)]
    if missing:
        print(f"missing tools: {missing} (packaging/build-deps.txt)", file=sys.stderr)
        return 77
    prof = dict(PROFILES[args.profile])
    if args.runs:
        prof["runs"] = args.runs
    if args.hold:
        prof["hold_n"] = args.hold
    out = args.out or (os.path.join(SOURCE_ROOT, "docs", "bench") if args.profile == "full"
                       else tempfile.mkdtemp(prefix="kibotos-bench-out-"))
    # N relayed connections need 2N fds in a peer relay, N in kibotos (its upstream
    # sockets are io_uring direct descriptors, not fds), and N in the servers. Raise
    # the soft limit to the hard one; raising the hard one needs CAP_SYS_RESOURCE,
    # which a container may not grant (then N is capped to fit, and the README says so).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (200000, 200000))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    fit = (nofile - 1000) // 500 * 500
    if fit < prof["hold_n"]:
        log(f"RLIMIT_NOFILE hard limit {nofile}: holding {fit} idle connections, not {prof['hold_n']}")
        prof["hold_n_wanted"], prof["hold_n"] = prof["hold_n"], fit
    prof["hold_n_peers"] = min(prof["hold_n"], (nofile - 1000) // 2 // 500 * 500)
    if prof["hold_n_peers"] < prof["hold_n"]:
        log(f"RLIMIT_NOFILE hard limit {nofile}: the peer relays hold {prof['hold_n_peers']}")
    prof["nofile"] = nofile

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_signal)
    bench = Bench(args, prof)
    try:
        bench.run()
    finally:
        bench.cleanup()
    return bench.write(out)


if __name__ == "__main__":
    sys.exit(main())
