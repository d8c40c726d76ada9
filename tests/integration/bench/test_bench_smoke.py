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
