"""The benchmark harness's smoke profile runs end to end: it builds its lab, measures
the routed path and redsocks, reports kibotos-agent (measured, or why not), writes its
JSON, Markdown, charts and README, and leaves no namespace behind."""
import json
import os
import subprocess
import sys

import pytest
from kibotos_agent import SOURCE_ROOT  # tests/integration is on sys.path (conftest)

RUN = os.path.join(SOURCE_ROOT, "tests", "bench", "run.py")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    out = tmp_path_factory.mktemp("bench")
    p = subprocess.Popen([sys.executable, RUN, "--smoke", "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = p.communicate(timeout=480)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if p.returncode == 77:
        pytest.skip(f"harness skipped: {stderr.strip()[-300:]}")
    assert p.returncode == 0, stderr[-3000:]
    with open(out / "results.json") as f:
        return {"out": out, "pid": p.pid, "results": json.load(f), "stderr": stderr}


def test_routed_path_and_redsocks_are_measured(smoke):
    modes = smoke["results"]["modes"]
    for name in ("routed", "redsocks-copy", "redsocks-splice"):
        m = modes[name]
        assert m["available"], (name, m.get("reason"), smoke["stderr"][-2000:])
        assert "error" not in m, (name, m.get("error"))
        assert m["metrics"]["tput_1_up"]["median"] > 0
        assert m["metrics"]["conn_per_s"]["median"] > 0
        assert m["metrics"]["lat_p99_us"]["median"] > 0
        assert m["metrics"]["hold_errors"]["max"] == 0
    for name in ("redsocks-copy", "redsocks-splice"):
        assert modes[name]["metrics"]["cpu_gb_1_up"]["median"] >= 0
        assert modes[name]["metrics"]["fd_leak"]["max"] == 0
    assert "cpu_gb_socks_1_up" not in modes["routed"]["metrics"]


def test_the_egress_sides_cpu_is_counted_on_top_of_the_relays(smoke):
    """dante copies every byte through user space (~0.6-1.3 s/GB here): a figure far
    below that lost its processes' time (a helper that ended mid-run)."""
    modes = smoke["results"]["modes"]
    for name in ("redsocks-splice", "kibotos-1t"):
        m = modes[name]
        if not m["available"]:
            continue
        for run in m["raw"]["iperf_1_up"]:
            assert run["server_cpu_s_per_gb"] > 0.1, (name, run)
        assert m["metrics"]["cpu_gb_socks_1_up"]["median"] > m["metrics"]["cpu_gb_1_up"]["median"]


def test_the_egress_sides_cpu_per_connection_is_counted_beside_the_relays(smoke):
    """Every connection costs the SOCKS server an accept, a greeting and a CONNECT: an
    Egress side that shows no CPU for thousands of them lost its processes' time."""
    modes = smoke["results"]["modes"]
    for name in ("redsocks-copy", "kibotos-1t"):
        m = modes[name]
        if not m["available"]:
            continue
        for run in m["raw"]["wrk"]:
            assert run["server_cpu_us_per_conn"] > 0, (name, run)
        figs = m["metrics"]
        assert figs["cpu_ms_per_1k_conn_socks"]["median"] > figs["cpu_ms_per_1k_conn"]["median"]
        assert figs["socks_ms_per_1k_conn"]["median"] > 0
    assert "socks_ms_per_1k_conn" not in modes["routed"]["metrics"]


def test_the_crypto_floor_is_measured_and_tls_cpu_is_held_to_it(smoke):
    """openssl speed in the same run: a TLS relay's CPU per GB against redsocks copy's
    plus the crypto, and the README's header says what the crypto costs."""
    results = smoke["results"]
    crypto = results["meta"]["crypto"]
    assert crypto["cipher"] == "aes-256-gcm" and crypto["gb_per_s"] > 0.1
    assert crypto["s_per_gb"] == pytest.approx(1 / crypto["gb_per_s"])
    copy = results["modes"]["redsocks-copy"]["metrics"]["cpu_gb_1_up"]["median"]
    for name in ("kibotos-tls-1t", "redsocks-stunnel"):
        m = results["modes"][name]
        if not m["available"]:
            continue
        fig = m["metrics"]["cpu_gb_1_up"]
        assert fig["floor"] == pytest.approx(copy + crypto["s_per_gb"])
        assert fig["ratio_floor"] == pytest.approx(fig["median"] / fig["floor"])
    assert "ratio_floor" not in results["modes"]["redsocks-copy"]["metrics"]["cpu_gb_1_up"]
    readme = (smoke["out"] / "README.md").read_text()
    assert f"- crypto floor: AES-256-GCM seals or opens {crypto['gb_per_s']:.2f} GB/s" in readme


def test_every_kibotos_mode_is_measured_or_says_why(smoke):
    modes = smoke["results"]["modes"]
    for name in ("kibotos-1t", "kibotos-2t", "kibotos-tls-1t"):
        m = modes[name]
        assert m["available"] or m.get("reason"), name


def test_outputs_are_written(smoke):
    out = smoke["out"]
    for f in ("results.json", "results.md", "README.md", "throughput.png", "cpu_per_gb.png",
              "memory_per_conn.png"):
        assert (out / f).stat().st_size > 0, f
    readme = (out / "README.md").read_text()
    assert smoke["results"]["meta"]["commit"] in readme
    assert "![throughput](throughput.png)" in readme


def test_the_tls_peer_chain_is_measured_as_one_relay(smoke):
    """redsocks in front of a local stunnel client: the connections reach the SOCKS
    server through both, and the relay's CPU and memory are both processes'."""
    m = smoke["results"]["modes"]["redsocks-stunnel"]
    assert m["available"], (m.get("reason"), m.get("error"), smoke["stderr"][-2000:])
    assert "error" not in m, m.get("error")
    assert m["metrics"]["tput_1_up"]["median"] > 0
    assert m["metrics"]["hold_errors"]["max"] == 0 and m["metrics"]["fd_leak"]["max"] == 0
    # Two processes' RSS: more than redsocks copy's alone in the same run.
    assert m["metrics"]["rss_idle_kib"]["median"] > smoke["results"]["modes"]["redsocks-copy"]["metrics"][
        "rss_idle_kib"]["median"]


def test_tls_modes_are_compared_with_the_tls_peer(smoke):
    modes = smoke["results"]["modes"]
    peer = modes["redsocks-stunnel"]["metrics"]["tput_1_up"]
    assert peer["ratio_tls_peer"] == pytest.approx(1.0) and "ratio_best_peer" not in peer
    tls = modes["kibotos-tls-1t"]
    if tls["available"]:
        fig = tls["metrics"]["tput_1_up"]
        assert fig["ratio_tls_peer"] == pytest.approx(fig["median"] / peer["median"])
        assert "ratio_best_peer" not in fig


def test_ratios_are_against_the_routed_path_and_the_best_peer(smoke):
    modes = smoke["results"]["modes"]
    fig = modes["redsocks-splice"]["metrics"]["tput_1_up"]
    routed = modes["routed"]["metrics"]["tput_1_up"]["median"]
    assert fig["ratio_routed"] == pytest.approx(fig["median"] / routed)
    best = max(modes[m]["metrics"]["tput_1_up"]["median"] for m in ("redsocks-copy", "redsocks-splice"))
    assert fig["ratio_best_peer"] == pytest.approx(fig["median"] / best)


def test_the_lab_is_removed(smoke):
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"kbb{smoke['pid']}" not in names


def test_a_figure_that_moved_more_than_2x_since_the_published_run_is_flagged():
    sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "bench"))
    from benchlib import report

    def run(commit, **medians):
        return {"meta": {"commit": commit}, "modes": {
            name: {"kind": kind, "metrics": {"tput_1_up": {"median": v}}}
            for name, (kind, v) in medians.items()}}
    before = run("e7d173a0", **{"redsocks-copy": ("peer", 7.0), "kibotos-1t": ("kibotos", 7.5),
                                "routed": ("routed", 20.0)})
    now = run("abcdef01", **{"redsocks-copy": ("peer", 0.7), "kibotos-1t": ("kibotos", 4.0),
                             "routed": ("routed", 41.0)})
    moves = report.moves_since(before, now)
    assert [(m["mode"], m["kind"], m["before"], m["now"], m["commit"]) for m in moves] == [
        ("redsocks-copy", "peer", 7.0, 0.7, "e7d173a"), ("routed", "routed", 20.0, 41.0, "e7d173a")]
    now["moved_since_previous"] = moves
    text = report.moves_text(now)
    assert "redsocks-copy (peer) tput_1_up" in text and "kibotos-1t" not in text, text
    assert report.moves_since(before, before) == []


def _benchlib():
    sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "bench"))
    from benchlib import readme
    return readme


def _published():
    with open(os.path.join(SOURCE_ROOT, "docs", "bench", "results.json")) as f:
        return json.load(f)


def test_the_published_readme_is_what_the_generator_renders_from_its_results():
    """docs/bench/README.md is generated: a hand edit, or prose changed without
    `run.py --render-only`, fails here."""
    readme = _benchlib()
    with open(os.path.join(SOURCE_ROOT, "docs", "bench", "README.md")) as f:
        assert f.read() == readme.render(_published())


def test_render_only_rewrites_the_readme_from_results_json_and_measures_nothing(tmp_path):
    readme = _benchlib()
    results = _published()
    (tmp_path / "results.json").write_text(json.dumps(results))
    for _ in range(2):  # the same bytes each time
        p = subprocess.run([sys.executable, RUN, "--render-only", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert (tmp_path / "README.md").read_text() == readme.render(results)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["README.md", "results.json"]


def test_the_readme_includes_the_prose_verbatim_and_a_notice_only_with_its_run():
    readme = _benchlib()
    results = _published()
    text = readme.render(results)
    for name in ("intro.md", "harness.md", "targets.md", "decisions.md", "methods.md"):
        assert readme.prose(name) in text, name
    (commit, notice), = readme.NOTICES.items()
    results["meta"]["commit"] = commit
    assert readme.prose(notice) in readme.render(results)
    results["meta"]["commit"] = "0" * 40
    other = readme.render(results)
    assert readme.prose(notice) not in other and "## The latest run" in other


def test_the_tls_targets_are_held_to_their_bounds_and_to_the_plain_path():
    readme = _benchlib()

    def fig(v):
        return {"median": v}
    results = {"meta": {"crypto": {"s_per_gb": 0.25}}, "modes": {
        "redsocks-copy": {"available": True, "metrics": {"cpu_gb_1_up": fig(0.5), "cpu_gb_1_down": fig(0.3)}},
        "kibotos-1t": {"available": True, "metrics": {"conn_per_s": fig(2000.0), "cpu_ms_per_1k_conn": fig(100.0)}},
        "kibotos-tls-1t": {"available": True, "metrics": {
            "cpu_gb_1_up": fig(0.5), "cpu_gb_1_down": fig(0.7), "conn_per_s": fig(1200.0),
            "cpu_ms_per_1k_conn": fig(250.0), "rss_kib_per_conn": fig(3.5)}}}}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in readme.tls_targets_section(results).splitlines()
            if line.startswith("| relay") or line.startswith("| connections")}
    assert rows["relay CPU per GB ≤ 0.6 s/GB (1 stream up)"].endswith("| yes |")
    assert rows["relay CPU per GB ≤ 0.6 s/GB (1 stream down)"].endswith("| **no** |")
    assert rows["relay CPU per GB ≤ 0.6 s/GB (4 streams up)"].endswith("| not measured | – |")
    # The floor: redsocks copy's figure plus the crypto (0.75 up, 0.55 down).
    assert "0.67× (0.500 against 0.750)" in rows["relay CPU per GB ≤ 1.2× the floor (1 stream up)"]
    assert rows["relay CPU per GB ≤ 1.2× the floor (1 stream up)"].endswith("| yes |")
    assert "1.27× (0.700 against 0.550)" in rows["relay CPU per GB ≤ 1.2× the floor (1 stream down)"]
    assert rows["relay CPU per GB ≤ 1.2× the floor (1 stream down)"].endswith("| **no** |")
    del results["meta"]["crypto"]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in readme.tls_targets_section(results).splitlines()
            if line.startswith("| relay") or line.startswith("| connections")}
    assert "no floor" in rows["relay CPU per GB ≤ 1.2× the floor (1 stream up)"]
    assert "0.60× (1200 against 2000)" in rows["connections/s ≥ 0.5× the plain path's"]
    assert rows["connections/s ≥ 0.5× the plain path's"].endswith("| yes |")
    assert "2.50× (250 against 100)" in rows["relay CPU per connection ≤ 2× the plain path's"]
    assert rows["relay CPU per connection ≤ 2× the plain path's"].endswith("| **no** |")
    assert rows["relay RSS per idle connection ≤ 4 KiB"].endswith("| yes |")
