"""docs/bench/README.md: the prose of tests/bench/benchlib/prose/ around the run's header,
charts, table, target tables and notes, which are rendered from results.json."""
import os

from . import report

PROSE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prose")

# A published run whose figures a notice corrects, by its commit: the notice goes with
# that run's table and no other (a new run replaces both).
NOTICES = {"e7d173a24c545c6da5a7b8348de7e1477c51993c": "notice-redsocks-splice-off.md"}

# (target, figure, bound, comparison): the ratio to the best peer in the same run.
TARGETS = [
    ("relay CPU per GB ≤ 0.5× the best peer (1 stream up)", "cpu_gb_1_up", 0.5, "le"),
    ("relay CPU per GB ≤ 0.5× the best peer (1 stream down)", "cpu_gb_1_down", 0.5, "le"),
    ("relay CPU per GB ≤ 0.5× the best peer (4 streams up)", "cpu_gb_4_up", 0.5, "le"),
    ("relay CPU per GB ≤ 0.5× the best peer (4 streams down)", "cpu_gb_4_down", 0.5, "le"),
    ("relay CPU per connection ≤ 0.5× the best peer", "cpu_ms_per_1k_conn", 0.5, "le"),
    ("throughput ≥ 1.0× the best peer (1 stream up)", "tput_1_up", 1.0, "ge"),
    ("throughput ≥ 1.0× the best peer (1 stream down)", "tput_1_down", 1.0, "ge"),
    ("throughput ≥ 1.0× the best peer (4 streams up)", "tput_4_up", 1.0, "ge"),
    ("throughput ≥ 1.0× the best peer (4 streams down)", "tput_4_down", 1.0, "ge"),
    ("connections/s ≥ 1.0× the best peer", "conn_per_s", 1.0, "ge"),
    ("p99 connect+first byte ≤ the best peer", "lat_p99_us", 1.0, "le"),
    ("relay RSS per idle connection ≤ the best peer", "rss_kib_per_conn", 1.0, "le"),
    ("system memory (MemAvailable, less the lab's other processes) per idle connection ≤ the best peer",
     "sys_net_kib_per_conn", 1.0, "le"),
    ("system memory (relay RSS + kernel) per idle connection ≤ the best peer", "lab_kib_per_conn", 1.0, "le"),
]

# (target, figure, bound, unit): the plain path's figure against ipt2socks' from an
# independent lab (ipt2socks is not in Debian, so not in the harness).
IPT2SOCKS_TARGETS = [
    ("relay CPU per connection ≤ 0.5× ipt2socks' 188 µs", "cpu_ms_per_1k_conn", 94.0, "µs"),
    ("relay RSS per idle connection ≤ ipt2socks' 0.21 KiB", "rss_kib_per_conn", 0.21, "KiB"),
]

# (target, figure, bound, against): the TLS path's figure against an absolute bound
# (against None), this run's floor for it ("floor": report.tls_floor) or the plain
# path's figure in the same run ("le", "ge").
TLS_TARGETS = [
    ("relay CPU per GB ≤ 0.6 s/GB (1 stream up)", "cpu_gb_1_up", 0.6, None),
    ("relay CPU per GB ≤ 0.6 s/GB (1 stream down)", "cpu_gb_1_down", 0.6, None),
    ("relay CPU per GB ≤ 0.6 s/GB (4 streams up)", "cpu_gb_4_up", 0.6, None),
    ("relay CPU per GB ≤ 0.6 s/GB (4 streams down)", "cpu_gb_4_down", 0.6, None),
    ("relay CPU per GB ≤ 1.2× the floor (1 stream up)", "cpu_gb_1_up", 1.2, "floor"),
    ("relay CPU per GB ≤ 1.2× the floor (1 stream down)", "cpu_gb_1_down", 1.2, "floor"),
    ("relay CPU per GB ≤ 1.2× the floor (4 streams up)", "cpu_gb_4_up", 1.2, "floor"),
    ("relay CPU per GB ≤ 1.2× the floor (4 streams down)", "cpu_gb_4_down", 1.2, "floor"),
    ("connections/s ≥ 0.5× the plain path's", "conn_per_s", 0.5, "ge"),
    ("relay CPU per connection ≤ 2× the plain path's", "cpu_ms_per_1k_conn", 2.0, "le"),
    ("relay RSS per idle connection ≤ 4 KiB", "rss_kib_per_conn", 4.0, None),
]


def prose(name):
    with open(os.path.join(PROSE, name)) as f:
        return f.read().rstrip("\n") + "\n"


def _met(ok):
    return "yes" if ok else "**no**"


def _unavailable(mode, label):
    return (f"Not assessed: {label} was not available in this run "
            f"({mode.get('reason', 'not run')[:200]}).")


def targets_section(results):
    k = results["modes"].get("kibotos-1t", {})
    lines = ["### The plain path (kibotos SOCKS5, 1 thread, against the best redsocks mode)", ""]
    if not k.get("available"):
        lines.append(_unavailable(k, "kibotos-agent"))
        return "\n".join(lines)
    lines += ["| target | measured | met |", "|---|---|---|"]
    for text, key, bound, cmp in TARGETS:
        fig = k["metrics"].get(key)
        if not fig:
            lines.append(f"| {text} | not measured | – |")
            continue
        if "ratio_best_peer" not in fig:
            lines.append(f"| {text} | {report._fmt(fig['median'])}; no ratio: the best peer's figure is "
                         "at or below zero (noise) | – |")
            continue
        r = fig["ratio_best_peer"]
        lines.append(f"| {text} | {r:.2f}× ({report._fmt(fig['median'])}) | "
                     f"{_met(r <= bound if cmp == 'le' else r >= bound)} |")
    for text, key, bound, unit in IPT2SOCKS_TARGETS:
        fig = k["metrics"].get(key)
        if fig:
            lines.append(f"| {text} | {report._fmt(fig['median'])} {unit} | {_met(fig['median'] <= bound)} |")
    held = k["metrics"].get("hold_errors")
    leak = k["metrics"].get("fd_leak")
    n = results["meta"]["hold_n"]
    if held is not None:
        lines.append(f"| {n} concurrent relayed connections, no error, no fd leak | errors max "
                     f"{held['max']:.0f}, fd leak max {leak['max'] if leak else '?'} | "
                     f"{_met(held['max'] == 0 and leak and leak['max'] == 0)} |")
    return "\n".join(lines)


def tls_targets_section(results):
    t = results["modes"].get("kibotos-tls-1t", {})
    plain = results["modes"].get("kibotos-1t", {}).get("metrics", {})
    lines = ["### The TLS path (kibotos SOCKS5+TLS, 1 thread)", ""]
    if not t.get("available"):
        lines.append(_unavailable(t, "kibotos SOCKS5+TLS"))
        return "\n".join(lines)
    lines += ["| target | measured | met |", "|---|---|---|"]
    for text, key, bound, against in TLS_TARGETS:
        fig = t["metrics"].get(key)
        if not fig:
            lines.append(f"| {text} | not measured | – |")
        elif against is None:
            lines.append(f"| {text} | {report._fmt(fig['median'])} | {_met(fig['median'] <= bound)} |")
        elif against == "floor":
            floor = report.tls_floor(results, key)
            if floor is None:
                lines.append(f"| {text} | {report._fmt(fig['median'])}; no floor: redsocks copy or the "
                             "crypto figure is missing | – |")
                continue
            r = fig["median"] / floor
            lines.append(f"| {text} | {r:.2f}× ({report._fmt(fig['median'])} against "
                         f"{report._fmt(floor)}) | {_met(r <= bound)} |")
        elif key in plain and plain[key]["median"] > 0:
            r = fig["median"] / plain[key]["median"]
            ok = r <= bound if against == "le" else r >= bound
            lines.append(f"| {text} | {r:.2f}× ({report._fmt(fig['median'])} against "
                         f"{report._fmt(plain[key]['median'])}) | {_met(ok)} |")
        else:
            lines.append(f"| {text} | {report._fmt(fig['median'])}; the plain path's figure is missing | – |")
    return "\n".join(lines)


def notes_section(results):
    """What only this run's figures say: its limits, its drivers, 2 threads against 1."""
    m = results["meta"]
    lines = []
    if m.get("hold_n_wanted"):
        lines.append(
            f"- Idle connections held: {m['hold_n']}, not {m['hold_n_wanted']}: this machine's "
            f"RLIMIT_NOFILE hard limit is {m['nofile']} and the run lacks CAP_SYS_RESOURCE to raise it.")
    if m.get("hold_n_peers", m["hold_n"]) < m["hold_n"]:
        lines.append(
            f"- The peer relays and kibotos behind TLS held {m['hold_n_peers']} idle connections, "
            f"kibotos plain SOCKS5 {m['hold_n']}: under an RLIMIT_NOFILE hard limit of {m['nofile']}, "
            "about (limit − 1,000) / 2 connections fit in a process that needs 2 fds per connection; "
            "the TLS modes are capped by stunnel, one such process in front of the SOCKS server.")
    for name, v in results["modes"].items():
        short = [h for h in v.get("raw", {}).get("hold", []) if h.get("errors")]
        if not short:
            continue
        held = sorted(h["held"] for h in short)
        why = ""
        if name == "redsocks-splice":
            why = (f" Its splice mode keeps two pipes per idle connection, 6 fds in all: "
                   f"{held[-1]:,} × 6 = {held[-1] * 6:,} of the {m['nofile']} allowed.")
        lines.append(
            f"- {v['label']} established {held[0]:,}"
            + (f" to {held[-1]:,}" if held[-1] != held[0] else "")
            + f" of the {short[0]['n']:,} idle connections in {len(short)} of its runs; the "
            f"others failed (\"idle connections not established\").{why} Its per-connection "
            "memory figures divide by the connections it held.")
    harnessed = [v for v in results["modes"].values() if v.get("driver") == "harness"]
    if harnessed:
        lines.append(
            "- ‡ " + ", ".join(v["label"] for v in harnessed) + ": measured through "
            "`tests/integration/dataplane/relay_harness`, the agent's real data plane "
            "(DataplaneRuntime, netns attachment, io_uring loops) commanded on stdin, without "
            "the daemon, because the daemon did not relay in this run ("
            + harnessed[0].get("driver_note", "")[:300] + "). The relay process measured is "
            "relay_harness; DNS resolvers cannot be set through it.")
    if results["modes"].get("kibotos-1t", {}).get("dns_driver") == "dns_harness":
        lines.append("- kibotos' DNS figures were measured through `tests/integration/dns/dns_harness` "
                     "(the agent's DnsService and netns attachment, commanded on stdin, without the "
                     "daemon); the udp Resolver goes through dante (UDP ASSOCIATE; microsocks has "
                     "none), the tcp Resolver through the chosen SOCKS5 server.")
    t1 = results["modes"].get("kibotos-1t", {}).get("metrics", {})
    t2 = results["modes"].get("kibotos-2t", {}).get("metrics", {})
    pairs = [(k, lbl) for k, lbl in (("tput_1_up", "1-stream throughput"), ("tput_4_down", "4-stream throughput"),
                                     ("conn_per_s", "connections/s"), ("cpu_gb_1_up", "CPU per GB"),
                                     ("cpu_ms_per_1k_conn", "CPU per connection"))
             if k in t1 and k in t2 and t1[k]["median"]]
    if pairs:
        lines.append("- dataplane.threads 2 against 1: "
                     + ", ".join(f"{lbl} {t2[k]['median'] / t1[k]['median']:.2f}×" for k, lbl in pairs) + ".")
    routed = results["modes"].get("routed", {}).get("metrics", {})
    if "lat_p50_us" in routed:
        lines.append(f"- Latency client floor (the routed path: client, two forwarding hops, server): "
                     f"p50 {routed['lat_p50_us']['median']:.0f} µs, p99 {routed['lat_p99_us']['median']:.0f} µs.")
    if not lines:
        return ""
    return "\n".join(["### Notes on this run", ""] + lines) + "\n"


def latest_run(results):
    """The run's header, charts, table, what it measured and its notes."""
    m = results["meta"]
    parts = ["## The latest run", "",
             f"One run of `tests/bench/run.py --{m['profile']}` on this machine, at this commit:", "",
             report.meta_lines(results), ""]
    charts = results.get("charts", {})
    for fam in ("throughput", "cpu", "memory", "connections", "latency"):
        if fam in charts:
            parts.append(f"![{fam}]({charts[fam]})\n")
    parts += [report.markdown_table(results), ""]
    if report.moves_text(results):
        parts += [report.moves_text(results)]
    parts += ["Raw samples and per-run details: [results.json](results.json).", ""]
    measured = [v["label"] for v in results["modes"].values() if v.get("available")]
    parts += ["Measured: " + (", ".join(measured) or "nothing") + ".", ""]
    if results["not_measured"]:
        parts += ["Not measured:", ""] + [f"- {x}" for x in results["not_measured"]] + [""]
    errors = [f"- {v['label']}: {v['error']}" for v in results["modes"].values() if v.get("error")]
    if errors:
        parts += ["Errors during the run:", ""] + errors + [""]
    notes = notes_section(results)
    if notes:
        parts.append(notes)
    return "\n".join(parts)


def render(results):
    """The README's text: the same results give the same bytes."""
    parts = [prose("intro.md")]
    notice = NOTICES.get(results["meta"].get("commit"))
    if notice:
        parts.append(prose(notice))
    parts += [prose("harness.md"), latest_run(results), prose("targets.md"),
              targets_section(results) + "\n", tls_targets_section(results) + "\n",
              prose("decisions.md"), prose("methods.md")]
    return "\n".join(parts)


def write(out_dir, results):
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(render(results))
