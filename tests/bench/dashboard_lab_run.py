#!/usr/bin/python3
"""The picture of the Grafana dashboard in docs/observability.md (issue 29), from a real
run: the e2e lab (tests/integration/lab.py) with dante, microsocks and dnsmasq, a
release kibotos-agent, and a real Prometheus scraping the agent's /metrics over its
mutual-TLS listener every second while the guests make mixed load (bulk both ways,
short connections, a dead Egress, an Egress server that stops and comes back, an Egress
revision that drains held connections, DNS). Then every panel's queries of
packaging/grafana/kibotos-agent.json are asked of Prometheus (query_range, the same
exprs, Grafana's variables filled in as Grafana would) and drawn with matplotlib in the
dashboard's own layout. Grafana itself is not needed.

    sudo tests/bench/dashboard_lab_run.py                  # -> docs/img/dashboard-lab-run.png
    sudo tests/bench/dashboard_lab_run.py --seconds 60 --out /tmp/d.png

Needs root (namespaces), prometheus and python3-matplotlib; not part of CI. Uses the
build in KIBOTOS_BUILD_ROOT (default build-release/). Traffic stays inside the lab's
namespaces and loopback; every load loop is bounded in count and time; the lab, its
processes (Prometheus too) and the agent are removed on exit, also on failure."""
import argparse
import datetime
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("KIBOTOS_BUILD_ROOT", os.path.join(SOURCE, "build-release"))
for sub in ("integration", "integration/e2e", "integration/api", "integration/dns"):
    sys.path.insert(0, os.path.join(SOURCE, "tests", sub))
import api_helpers  # noqa: E402
import dns_fixtures as dx  # noqa: E402
import e2e_env as e2e  # noqa: E402
import kibotos_agent  # noqa: E402

DASHBOARD = os.path.join(SOURCE, "packaging", "grafana", "kibotos-agent.json")
SCRAPE_S = 1
STEP_S = 2
# Grafana's $__rate_interval: max($__interval + scrape interval, 4 x scrape interval),
# with $__interval the step of the query.
RATE_INTERVAL = f"{max(STEP_S + SCRAPE_S, 4 * SCRAPE_S)}s"
# Connections per Workspace: one guest goes over it once, so that refusals show.
CAP = 60

# One guest's load, bounded by count and time; failures are expected (a dead Egress,
# a server stopped on purpose) and only counted. Prints one JSON line at the end, with
# the most attempts started in one second (a paced loop must not burst).
#   short ADDR PORT RATE SECONDS       PEER connections, RATE a second
#   stream ADDR PORT up|down MIBPS SECONDS   10 s transfers one after the other, paced
#                                      to MIBPS MiB/s (TCP's flow control paces the far end)
#   hold ADDR PORT N SECONDS           N idle connections, held until they end or SECONDS
#   dns ADDR RATE SECONDS              A queries for test.kib over UDP, every 25th malformed
GUEST_LOAD = r"""
import json, socket, struct, sys, time
mode, addr = sys.argv[1], sys.argv[2]
res = {"ok": 0, "failed": 0}
def conn(port, line, timeout=10):
    s = socket.create_connection((addr, port), timeout=timeout)
    s.sendall(line)
    return s
def paced(start, done, rate):
    ahead = done / rate - (time.monotonic() - start)
    if ahead > 0:
        time.sleep(ahead)
def ticks(rate, seconds):
    # Slots missed while an attempt hung are skipped, not made up in a burst.
    at, end = time.monotonic(), time.monotonic() + seconds
    for i in range(int(rate * seconds)):
        now = time.monotonic()
        if now >= end:
            return
        if at > now:
            time.sleep(at - now)
        at = max(at + 1 / rate, time.monotonic())
        per_s[int(time.monotonic())] = per_s.get(int(time.monotonic()), 0) + 1
        yield i
per_s = {}
if mode == "short":
    port, rate, seconds = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
    for i in ticks(rate, seconds):
        try:
            with conn(port, b"PEER\n", timeout=5) as s:
                s.recv(64)
            res["ok"] += 1
        except OSError:
            res["failed"] += 1
elif mode == "stream":
    port, way, mibps, seconds = int(sys.argv[3]), sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
    chunk, end = 256 << 10, time.monotonic() + seconds
    for _ in range(int(seconds)):  # at most one session a second
        left = end - time.monotonic()
        if left < 1:
            break
        total = int(min(10, left) * mibps) << 20
        start, done = time.monotonic(), 0
        try:
            if way == "down":
                with conn(port, f"ZEROS {total}\n".encode()) as s:
                    while done < total:
                        n = len(s.recv(chunk))
                        if not n:
                            break
                        done += n
                        paced(start, done, mibps * (1 << 20))
            else:
                with conn(port, b"UP\n") as s:
                    block = bytes(chunk)
                    while done < total:
                        s.sendall(block)
                        done += chunk
                        paced(start, done, mibps * (1 << 20))
                    s.shutdown(socket.SHUT_WR)
                    s.recv(128)
            res["ok"] += 1
        except OSError:
            res["failed"] += 1
            time.sleep(1)
elif mode == "hold":
    port, n, seconds = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    held = []
    for _ in range(n):
        try:
            held.append(conn(port, b"HOLD\n"))
        except OSError:
            res["failed"] += 1
    end = time.monotonic() + seconds
    for s in held:
        s.settimeout(max(0.1, end - time.monotonic()))
        try:
            s.recv(64)  # HELD
            s.recv(64)  # the end: EOF, a reset, or the timeout
        except OSError:
            pass
        res["ok"] += 1
        s.close()
elif mode == "dns":
    rate, seconds = float(sys.argv[3]), float(sys.argv[4])
    q = b"".join(bytes([len(p)]) + p.encode() for p in "test.kib".split(".")) + b"\0"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    for i in ticks(rate, seconds):
        msg = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + q + struct.pack(">HH", 1, 1)
        s.sendto(msg if i % 25 else b"\x00\x01", (addr, 53))
        try:
            if i % 25:
                s.recv(512)
                res["ok"] += 1
        except OSError:
            res["failed"] += 1
res["most_in_a_second"] = max(per_s.values(), default=0)
print(json.dumps(res), flush=True)
"""


def prometheus_get(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def start_prometheus(lab, work, target, pki, client):
    """Prometheus on 127.0.0.1, scraping the agent's TLS listener every second with a
    client certificate of the Operator CA (as an operator's Prometheus would)."""
    port = api_helpers.free_port()
    config = os.path.join(work, "prometheus.yml")
    with open(config, "w") as f:
        json.dump({"global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
                   "scrape_configs": [{
                       "job_name": "kibotos-agent", "scheme": "https",
                       "tls_config": {"ca_file": pki.ca_cert, "cert_file": client[0], "key_file": client[1]},
                       "static_configs": [{"targets": [target]}]}]}, f)
    lab.popen(None, "/usr/bin/prometheus", f"--config.file={config}", f"--storage.tsdb.path={work}/tsdb",
              f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
              stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w"))
    base = f"http://127.0.0.1:{port}"

    def scraping():
        try:
            up = prometheus_get(base, "/api/v1/query", query='up{job="kibotos-agent"}')["result"]
        except OSError:
            return False
        return up and up[0]["value"][1] == "1"
    kibotos_agent.wait_for(scraping, timeout=30, interval=0.5, what="Prometheus scraping the agent")
    return base


def guest_load(lab, ws, *args):
    return lab.popen(ws.guest, e2e.dp.PYTHON, "-c", GUEST_LOAD, *map(str, args), text=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=150, help="length of the load (default 150)")
    ap.add_argument("--out", default=os.path.join(SOURCE, "docs", "img", "dashboard-lab-run.png"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces, nftables)")
    if importlib.util.find_spec("matplotlib") is None:  # before the run, not after it
        sys.exit("needs matplotlib (apt-get install python3-matplotlib)")

    commit = subprocess.run(["git", "-C", SOURCE, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="kib-dash-") as work, e2e.labmod.Lab() as lab:
        agent = None
        try:
            wa, wb = lab.add_workspace(), lab.add_workspace()
            e2e.start_destinations(lab)
            e2e.dp.start_dante(lab, 1080)
            e2e.dp.start_dante(lab, 1083)  # the next revision of the dante Egress
            socks_b = e2e.dp.start_microsocks(lab, 1081)
            dx.Dnsmasq(lab, [lab.internet_v4(53)])
            dead_dst = lab.internet_v4(40)
            pki = api_helpers.Pki(work, "dash")
            server, client = pki.issue("agent", server=True), pki.issue("prometheus")
            listen = f"127.0.0.1:{api_helpers.free_port()}"
            config = e2e.agent_config(lab)
            config["api"] = {"tls": {"listen": listen, "cert": server[0], "key": server[1],
                                     "client_ca": pki.ca_cert}}
            # A low access-log rate, so that its dropped lines show too.
            config["log"] = {"level": "info", "access": {"path": os.path.join(work, "access.log"),
                                                         "max_lines_per_second": 25}}
            config["dataplane"] = {"egress_probe_interval": "2s", "max_connections_per_workspace": CAP}
            agent = kibotos_agent.Agent(config=config)
            agent.start()
            dante = e2e.create_egress(agent, f"{lab.socks_v4}:1080")
            micro = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1081"), "egress_id")
            dead = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1999"), "egress_id")  # nothing listens
            did = e2e.field(dante, "egress_id")
            pol_a = e2e.policy((did, [e2e.covered(lab) + "/32"]), (dead, [dead_dst + "/32"]))
            pol_a["resolvers"] = [{"tcp": {"address": f"{lab.internet_v4(53)}:53"}, "egressId": did}]
            pol_b = e2e.policy((micro, [e2e.covered(lab) + "/32"]))
            ids = []
            for ws, pol, eid in ((wa, pol_a, did), (wb, pol_b, micro)):
                body = e2e.ok(e2e.create_workspace(agent, ws.path, pol))
                ids.append(e2e.field(body["workspace"], "workspace_id"))
                e2e.wait_applied(agent, ids[-1], 1, eid, 1)
            names = {did: "dante", micro: "microsocks", dead: "dead", ids[0]: "ws A", ids[1]: "ws B"}
            prom = start_prometheus(lab, work, listen, pki, client)

            dst, port, n = e2e.covered(lab), e2e.PORT, args.seconds
            start = time.time()
            loads = [guest_load(lab, wa, "short", dst, port, 30, n), guest_load(lab, wb, "short", dst, port, 5, n),
                     guest_load(lab, wa, "stream", dst, port, "down", 40, n),
                     guest_load(lab, wb, "stream", dst, port, "up", 15, n),
                     guest_load(lab, wa, "dns", lab.internet_v4(99), 10, n)]
            # What happens when, as fractions of the run: a dead Egress dialed, held
            # connections, microsocks stopped and started again, dante's Egress moved to
            # its next revision with 20 s to drain, a guest over its connection cap.
            events = [(0.2, "dead Egress dialed", lambda: loads.append(
                          guest_load(lab, wa, "short", dead_dst, port, 3, 0.27 * n))),
                      (0.4, "30 connections held", lambda: loads.append(
                          guest_load(lab, wa, "hold", dst, port, 30, 0.55 * n))),
                      (0.5, "microsocks stopped", lambda: e2e.labmod._kill(socks_b)),
                      (0.6, "dante Egress revision 2, drain 20 s", lambda: e2e.update_egress(
                          agent, dante, f"{lab.socks_v4}:1083", drain_seconds=20)),
                      (0.7, "microsocks back", lambda: e2e.dp.start_microsocks(lab, 1081)),
                      (0.8, f"ws B holds {CAP + 10} connections (cap {CAP})", lambda: loads.append(
                          guest_load(lab, wb, "hold", dst, port, CAP + 10, 0.1 * n)))]
            marks = []
            for at, what, act in events:
                time.sleep(max(0, start + at * n - time.time()))
                marks.append((time.time(), what))
                act()
                print(f"{time.time() - start:6.1f} s  {what}", flush=True)
            for p in loads:
                out, _ = p.communicate(timeout=n + 60)
                print("guest load", " ".join(p.args[p.args.index(GUEST_LOAD) + 1:]), out.strip())
            time.sleep(3 * SCRAPE_S)  # the last scrapes
            end = time.time()
            series = query_panels(prom, start, end)
        finally:
            if agent is not None:
                agent.cleanup()
    title = (f"kibotos-agent dashboard, lab run {datetime.datetime.utcfromtimestamp(start):%Y-%m-%d %H:%M} UTC, "
             f"commit {commit}: {n} s, Prometheus scrape every {SCRAPE_S} s, step {STEP_S} s, "
             f"$__rate_interval {RATE_INTERVAL}")
    legend = ", ".join(f"{v} = {k}" for k, v in names.items())
    render(series, names, marks, start, end, title, legend, args.out)
    print("wrote", args.out, os.path.getsize(args.out), "bytes")


def grafana_expr(expr):
    """The expr as Grafana sends it with every variable at All (its allValue .*)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: RATE_INTERVAL if m.group(1) == "__rate_interval" else ".*", expr)


def legend_of(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def query_panels(prom, start, end):
    """{panel id: [(legend, [(t, value)]), ...]} for every panel's targets."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    out = {}
    for p in dash["panels"]:
        for t in p.get("targets", []):
            data = prometheus_get(prom, "/api/v1/query_range", query=grafana_expr(t["expr"]), start=start, end=end,
                                  step=STEP_S)
            for r in data["result"]:
                points = [(float(ts), float(v)) for ts, v in r["values"]]
                out.setdefault(p["id"], []).append((legend_of(t.get("legendFormat", ""), r["metric"]), points))
    return out


def unit_scale(unit, peak):
    """(factor, axis label) for a panel's Grafana unit, bytes scaled to their peak."""
    if unit == "Bps":
        for factor, label in ((1 << 20, "MiB/s"), (1 << 10, "KiB/s")):
            if peak >= factor:
                return 1 / factor, label
        return 1, "B/s"
    return {"cps": (1, "connections/s"), "ops": (1, "/s"), "s": (1000, "ms")}.get(unit, (1, ""))


def render(series, names, marks, start, end, title, legend, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.gridspec import GridSpec

    with open(DASHBOARD) as f:
        dash = json.load(f)
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in dash["panels"])
    plt.style.use("dark_background")
    height = rows * 0.3 + 1.2
    fig = plt.figure(figsize=(16, height))
    grid = GridSpec(rows, 24, figure=fig, hspace=1.6, wspace=2.2, left=0.04, right=0.99, top=1 - 1.1 / height,
                    bottom=0.02)
    fig.text(0.5, 1 - 0.12 / height, title, fontsize=10, ha="center", va="top", weight="bold")
    fig.text(0.5, 1 - 0.4 / height, legend, fontsize=7, ha="center", va="top")
    events = "; ".join(f"{at - start:.0f} s {what}" for at, what in marks)
    fig.text(0.5, 1 - 0.62 / height, f"x: seconds since the load started; dotted lines: {events}", fontsize=7,
             ha="center", va="top", color="silver")

    def short(text):
        for k, v in names.items():
            text = text.replace(k, v)
        return text

    for p in dash["panels"]:
        g = p["gridPos"]
        ax = fig.add_subplot(grid[g["y"]:g["y"] + g["h"], g["x"]:g["x"] + g["w"]])
        if p["type"] == "row":
            ax.axis("off")
            ax.text(0, 0.2, p["title"], fontsize=10, weight="bold", transform=ax.transAxes)
            continue
        got = sorted(series.get(p["id"], []))
        unit = p["fieldConfig"]["defaults"].get("unit", "short")
        ax.set_title(p["title"], fontsize=8, loc="left")
        ax.tick_params(labelsize=6)
        if p["type"] == "stat":
            value = got[0][1][-1][1] if got and got[0][1] else float("nan")
            ax.axis("off")
            text = f"{value / 60:.1f} min" if unit == "s" else f"{value:g}"
            color = "tab:red" if p["title"] == "Egresses down" and value >= 1 else "tab:green"
            ax.text(0.5, 0.4, text, fontsize=20, ha="center", va="center", color=color, transform=ax.transAxes)
            continue
        if p["type"] == "state-timeline":
            for i, (name, points) in enumerate(got):
                for (t0, v), (t1, _) in zip(points, points[1:] + [(end, None)]):
                    ax.broken_barh([(t0 - start, t1 - t0)], (i - 0.4, 0.8), color="tab:green" if v else "tab:red")
            ax.set_yticks(range(len(got)), [short(n) for n, _ in got], fontsize=6)
        else:
            # Series with no finite, non-zero point (a quantile of no observation, a
            # cause that never happened) are left out: Grafana draws them, they say
            # nothing in a still picture.
            shown = [(n, pts) for n, pts in got if any(math.isfinite(v) and v for _, v in pts)]
            peak = max((v for _, pts in shown for _, v in pts if math.isfinite(v)), default=0)
            factor, label = unit_scale(unit, peak)
            stacked = p["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
            times = sorted({t for _, pts in shown for t, _ in pts})
            base = {t: 0.0 for t in times}
            for name, points in shown:
                values = dict(points)
                if stacked:  # Grafana stacks a missing point as 0
                    low = [base[t] for t in times]
                    for t in times:
                        base[t] += values.get(t, 0.0) * factor
                    ax.fill_between([t - start for t in times], low, [base[t] for t in times], lw=0.8, alpha=0.6,
                                    label=short(name))
                else:
                    ax.plot([t - start for t, _ in points], [v * factor for _, v in points], lw=0.9,
                            label=short(name))
            ax.set_ylim(bottom=0)
            ax.set_ylabel(label, fontsize=6)
            if shown:
                ax.legend(fontsize=5, loc="upper left", ncol=2, framealpha=0.4)
            else:
                ax.text(0.5, 0.5, "0 throughout" if got else "no data", ha="center", va="center", color="gray",
                        transform=ax.transAxes)
        for at, _ in marks:
            ax.axvline(at - start, color="gray", lw=0.5, ls=":")
        ax.set_xlim(0, end - start)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=80)
    # A palette image: the docs keep it small.
    from PIL import Image
    Image.open(out).convert("RGB").quantize(colors=64).save(out, optimize=True)


if __name__ == "__main__":
    main()
