"""Figures -> statistics, ratios, results.json, results.md, gnuplot charts, README.md."""
import json
import os
import statistics
import subprocess

# key: (label, unit, better, family, baseline key on the routed path or None)
METRICS = {
    "tput_1_up": ("iperf3 1 stream, guest→inet", "Gbit/s", "high", "throughput", "tput_1_up"),
    "tput_1_down": ("iperf3 1 stream, inet→guest (-R)", "Gbit/s", "high", "throughput", "tput_1_down"),
    "tput_4_up": ("iperf3 4 streams, guest→inet", "Gbit/s", "high", "throughput", "tput_4_up"),
    "tput_4_down": ("iperf3 4 streams, inet→guest (-R)", "Gbit/s", "high", "throughput", "tput_4_down"),
    "cpu_gb_1_up": ("relay CPU per GB, 1 stream up", "s/GB", "low", "cpu", None),
    "cpu_gb_1_down": ("relay CPU per GB, 1 stream down", "s/GB", "low", "cpu", None),
    "cpu_gb_4_up": ("relay CPU per GB, 4 streams up", "s/GB", "low", "cpu", None),
    "cpu_gb_4_down": ("relay CPU per GB, 4 streams down", "s/GB", "low", "cpu", None),
    "cpu_gb_socks_1_up": ("relay + Egress side (SOCKS server, stunnel) CPU per GB, 1 stream up", "s/GB", "low",
                          "cpu", None),
    "cpu_gb_socks_1_down": ("relay + Egress side (SOCKS server, stunnel) CPU per GB, 1 stream down", "s/GB",
                            "low", "cpu", None),
    "cpu_gb_socks_4_up": ("relay + Egress side (SOCKS server, stunnel) CPU per GB, 4 streams up", "s/GB", "low",
                          "cpu", None),
    "cpu_gb_socks_4_down": ("relay + Egress side (SOCKS server, stunnel) CPU per GB, 4 streams down", "s/GB",
                            "low", "cpu", None),
    "conn_per_s": ("new connections/s (wrk, Connection: close)", "conn/s", "high", "conns", "conn_per_s"),
    "cpu_ms_per_1k_conn": ("relay CPU per 1,000 connections", "ms", "low", "conns", None),
    "socks_ms_per_1k_conn": ("Egress side (SOCKS server, stunnel) CPU per 1,000 connections", "ms", "low",
                             "conns", None),
    "cpu_ms_per_1k_conn_socks": ("relay + Egress side (SOCKS server, stunnel) CPU per 1,000 connections", "ms",
                                 "low", "conns", None),
    "conn_errors": ("wrk socket errors", "count", "low", "conns", None),
    "lat_p50_us": ("connect + first byte p50 (1 by 1)", "µs", "low", "latency", "lat_p50_us"),
    "lat_p99_us": ("connect + first byte p99 (1 by 1)", "µs", "low", "latency", "lat_p99_us"),
    "lat_errors": ("latency client errors", "count", "low", "latency", None),
    "rss_idle_kib": ("relay RSS idle", "KiB", "low", "memory", None),
    "rss_kib_per_conn": ("relay RSS per idle connection", "KiB", "low", "memory", None),
    "sys_kib_per_conn": ("system MemAvailable drop per idle connection", "KiB", "low", "memory",
                         "sys_kib_per_conn"),
    "sys_net_kib_per_conn": ("system MemAvailable drop less the lab's other processes' PSS, per idle "
                             "connection", "KiB", "low", "memory", "sys_net_kib_per_conn"),
    "lab_kib_per_conn": ("relay RSS, page tables and stacks + kernel slab per idle connection", "KiB", "low",
                         "memory", "lab_kib_per_conn"),
    "hold_errors": ("idle connections not established", "count", "low", "memory", None),
    "fd_leak": ("relay fds and direct descriptors left after closing them all", "count", "low", "memory", None),
    "dns_direct_qps": ("DNS qps, guest straight to the resolver", "q/s", "high", "dns", None),
    "dns_direct_p99_us": ("DNS p99, guest straight to the resolver", "µs", "low", "dns", None),
    "dns_udp_qps": ("DNS qps, udp Resolver via UDP ASSOCIATE", "q/s", "high", "dns", "dns_direct_qps"),
    "dns_udp_p99_us": ("DNS p99, udp Resolver via UDP ASSOCIATE", "µs", "low", "dns", "dns_direct_p99_us"),
    "dns_tcp_qps": ("DNS qps, tcp Resolver via CONNECT", "q/s", "high", "dns", "dns_direct_qps"),
    "dns_tcp_p99_us": ("DNS p99, tcp Resolver via CONNECT", "µs", "low", "dns", "dns_direct_p99_us"),
}


def summarize(samples):
    xs = [x for x in samples if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": len(xs),
            "samples": xs}


TLS_KINDS = ("kibotos-tls", "peer-tls")


def _best(modes, names, key, better):
    vals = [modes[m]["metrics"][key]["median"] for m in names if key in modes.get(m, {}).get("metrics", {})]
    return (max(vals) if better == "high" else min(vals)) if vals else None


CPU_PER_GB = ("cpu_gb_1_up", "cpu_gb_1_down", "cpu_gb_4_up", "cpu_gb_4_down")
COPY_RELAY = "redsocks-copy"


def tls_floor(results, key):
    """A TLS relay's floor for a CPU-per-GB figure in this run: a copy relay's (a TLS
    flow cannot splice) plus sealing or opening each byte once (meta.crypto). None when
    either is missing."""
    crypto = results.get("meta", {}).get("crypto")
    copy = results["modes"].get(COPY_RELAY, {}).get("metrics", {}).get(key)
    if not crypto or not copy:
        return None
    return copy["median"] + crypto["s_per_gb"]


def add_ratios(results, peer_modes, tls_peer_modes=()):
    """ratio_routed: median / the routed path's median of the same figure.
    ratio_best_peer: a plain mode's median / the best plain peer's (redsocks copy or
    splice) median; ratio_tls_peer: a TLS mode's median / the best TLS peer's (redsocks +
    stunnel client): each path against what users would run for it. ratio_floor: a TLS
    mode's CPU per GB / this run's floor for it (tls_floor)."""
    modes = results["modes"]
    for key in CPU_PER_GB:
        floor = tls_floor(results, key)
        for mode in modes.values():
            fig = mode.get("metrics", {}).get(key)
            if floor and fig and mode.get("kind") in TLS_KINDS:
                fig["floor"], fig["ratio_floor"] = floor, fig["median"] / floor
    routed = modes.get("routed", {}).get("metrics", {})
    for key, (_, _, better, _, base_key) in METRICS.items():
        best = {"ratio_best_peer": _best(modes, peer_modes, key, better),
                "ratio_tls_peer": _best(modes, tls_peer_modes, key, better)}
        for name, mode in modes.items():
            fig = mode.get("metrics", {}).get(key)
            if not fig:
                continue
            # A ratio to a reference at or below zero (a noisy memory delta) means nothing.
            if name != "routed" and base_key and base_key in routed and routed[base_key]["median"] > 0:
                fig["ratio_routed"] = fig["median"] / routed[base_key]["median"]
            ratio = "ratio_tls_peer" if mode.get("kind") in TLS_KINDS else "ratio_best_peer"
            if name != "routed" and best[ratio] is not None and best[ratio] > 0:
                fig[ratio] = fig["median"] / best[ratio]


def moves_since(previous, results, factor=2.0):
    """Every (mode, figure) whose median moved more than `factor`× either way from the
    previous published run's: [{mode, kind, figure, before, now, commit}]. A peer or the
    routed path moving that far had no code change of ours behind it: a harness fault
    until shown otherwise."""
    moves = []
    for name, mode in results["modes"].items():
        before_mode = previous.get("modes", {}).get(name, {})
        for key, fig in mode.get("metrics", {}).items():
            old = before_mode.get("metrics", {}).get(key, {}).get("median")
            now = fig["median"]
            if not old or not now or old <= 0 or now <= 0:
                continue
            if max(now / old, old / now) > factor:
                moves.append({"mode": name, "kind": mode.get("kind", "?"), "figure": key, "before": old,
                              "now": now, "commit": previous.get("meta", {}).get("commit", "?")[:7]})
    return moves


def _fmt(x):
    if x is None:
        return "–"
    if float(x).is_integer() and abs(x) < 1e7:
        return str(int(x))
    ax = abs(x)
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def markdown_table(results):
    names = list(results["modes"])
    labels = [results["modes"][n]["label"] for n in names]
    lines = ["| figure | unit | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(names)]
    for key, (label, unit, better, _, _) in METRICS.items():
        cells = []
        for n in names:
            m = results["modes"][n]
            fig = m.get("metrics", {}).get(key)
            if not m.get("available"):
                cells.append("n/a")
            elif not fig:
                cells.append("–")
            else:
                c = f"**{_fmt(fig['median'])}** ({_fmt(fig['min'])}–{_fmt(fig['max'])})"
                ratios = []
                if "ratio_routed" in fig:
                    ratios.append(f"{fig['ratio_routed']:.2f}× routed")
                if "ratio_best_peer" in fig:
                    ratios.append(f"{fig['ratio_best_peer']:.2f}× best peer")
                if "ratio_tls_peer" in fig:
                    ratios.append(f"{fig['ratio_tls_peer']:.2f}× TLS peer")
                if "ratio_floor" in fig:
                    ratios.append(f"{fig['ratio_floor']:.2f}× floor")
                if ratios:
                    c += "<br>" + ", ".join(ratios)
                cells.append(c)
        if any(c not in ("n/a", "–") for c in cells):
            arrow = "↑" if better == "high" else "↓"
            lines.append(f"| {label} {arrow} | {unit} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Cells: **median** (min–max) of the runs, and the median as a ratio to the routed "
                 "path and to the best peer (the better redsocks mode; for the TLS modes, the TLS "
                 "peer: redsocks in front of a local stunnel client) in the same run; a TLS mode's "
                 "CPU per GB also as a ratio to its floor: redsocks copy's figure plus the crypto "
                 "(`openssl speed`, see the run's header). "
                 "↑ higher is better, ↓ lower is better. n/a: mode not available (see below).")
    return "\n".join(lines)


def _chart(out_dir, fname, title, ylabel, groups, results, modes):
    """Clustered bars (median) with min–max error bars: one cluster per figure in
    `groups`, one bar per mode."""
    modes = [m for m in modes if any(k in results["modes"][m].get("metrics", {}) for k, _ in groups)]
    groups = [(k, g) for k, g in groups if any(k in results["modes"][m]["metrics"] for m in modes)]
    if not modes:
        return None
    dat = os.path.join(out_dir, fname.replace(".png", ".dat"))
    with open(dat, "w") as f:
        for key, glabel in groups:
            row = [f'"{glabel}"']
            for m in modes:
                fig = results["modes"][m].get("metrics", {}).get(key)
                row += [f"{fig[s]:.6g}" for s in ("median", "min", "max")] if fig else ["?", "?", "?"]
            f.write(" ".join(row) + "\n")
    plots = []
    for i, m in enumerate(modes):
        c = 2 + 3 * i
        using = f"{c}:{c + 1}:{c + 2}" + (":xtic(1)" if i == 0 else "")
        plots.append(f"'{dat}' using {using} title \"{results['modes'][m]['label']}\"")
    script = f"""set terminal pngcairo size 1000,520 font "DejaVu Sans,10"
set output '{os.path.join(out_dir, fname)}'
set title "{title}"
set ylabel "{ylabel}"
set datafile missing "?"
set style data histogram
set style histogram errorbars gap 2 lw 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set grid ytics
set key outside right top vertical
set xtics noenhanced
set key noenhanced
plot {", ".join(plots)}
"""
    r = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True, timeout=60)
    os.unlink(dat)
    if r.returncode != 0:
        raise RuntimeError(f"gnuplot: {r.stderr[-400:]}")
    return fname


def charts(out_dir, results):
    all_modes = list(results["modes"])
    relays = [m for m in all_modes if m != "routed"]
    made = {}
    made["throughput"] = _chart(out_dir, "throughput.png", "Throughput (iperf3), median with min–max",
                                "Gbit/s", [("tput_1_up", "1 stream up"), ("tput_1_down", "1 stream down"),
                                           ("tput_4_up", "4 streams up"), ("tput_4_down", "4 streams down")],
                                results, all_modes)
    made["cpu"] = _chart(out_dir, "cpu_per_gb.png", "Relay CPU seconds per GB moved (lower is better)",
                         "CPU s/GB", [("cpu_gb_1_up", "1 stream up"), ("cpu_gb_1_down", "1 stream down"),
                                      ("cpu_gb_4_up", "4 streams up"), ("cpu_gb_4_down", "4 streams down")],
                         results, relays)
    made["memory"] = _chart(out_dir, "memory_per_conn.png",
                            "Memory per idle relayed connection (lower is better)", "KiB per connection",
                            [("rss_kib_per_conn", "relay RSS"), ("lab_kib_per_conn", "relay RSS + kernel"),
                             ("sys_net_kib_per_conn", "system (MemAvailable, less other processes)")],
                            results, all_modes)
    made["connections"] = _chart(out_dir, "connections.png",
                                 "Connection cost: relay CPU per 1,000 connections (lower is better)",
                                 "CPU ms per 1,000 connections",
                                 [("cpu_ms_per_1k_conn", "relay CPU"),
                                  ("cpu_ms_per_1k_conn_socks", "relay + Egress side CPU")], results, relays)
    made["latency"] = _chart(out_dir, "latency.png", "Connect + first byte, sequential (lower is better)",
                             "µs", [("lat_p50_us", "p50"), ("lat_p99_us", "p99")], results, all_modes)
    return {k: v for k, v in made.items() if v}


def write_json(out_dir, results):
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)
        f.write("\n")


def moves_text(results):
    moves = results.get("moved_since_previous") or []
    if not moves:
        return ""
    lines = ["**Moved more than 2× since the previous published run** (each needs a reason before "
             "its ratios mean anything):", ""]
    lines += [f"- {m['mode']} ({m['kind']}) {m['figure']}: {_fmt(m['before'])} at {m['commit']} → {_fmt(m['now'])}"
              for m in moves]
    if results.get("moves_accepted"):
        lines += ["", f"Published anyway (`--accept-moves`): {results['moves_accepted']}"]
    return "\n".join(lines) + "\n"


def write_markdown(out_dir, results):
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(f"# Benchmark results ({results['meta']['profile']} run)\n\n")
        f.write(meta_lines(results) + "\n\n" + markdown_table(results) + "\n")
        if moves_text(results):
            f.write("\n" + moves_text(results))


def meta_lines(results):
    m = results["meta"]
    return "\n".join([
        f"- date: {m['date']}",
        f"- commit: `{m['commit']}`{' (work tree had uncommitted changes)' if m.get('dirty') else ''}",
        f"- machine: {m['nproc']} × {m['cpu_model']}, {m['mem_total_gib']:.0f} GiB",
        f"- kernel: {m['kernel']}",
        f"- load average at start / end: {m['load_start']} / {m.get('load_end', '?')}",
        f"- profile: {m['profile']} ({m['runs']} runs per figure; iperf3 {m['iperf_seconds']} s; "
        f"wrk {m['wrk_seconds']} s × {m['wrk_conns']} connections; {m.get('lat_series', 1)} × "
        f"{m['lat_n']} sequential connections per run; {m['hold_n']} idle connections held)",
        f"- kibotos-agent: `{m.get('agent')}` ({m.get('agent_build', '?')})",
        f"- SOCKS5 server: {results['socks_server']['chosen']} ({results['socks_server']['why']})",
        *([crypto_line(m["crypto"])] if m.get("crypto") else []),
        f"- wall time: {m.get('wall_s', 0):.0f} s",
    ])


def crypto_line(c):
    return (f"- crypto floor: {c['cipher'].upper()} seals or opens {c['gb_per_s']:.2f} GB/s on one core "
            f"(`openssl speed -evp {c['cipher']} -bytes {c['record_bytes']} -seconds {c['seconds']}`, at the "
            f"start of the run): {c['s_per_gb']:.3f} s of CPU per GB")
