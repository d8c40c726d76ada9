"""Issue 29: the Grafana dashboard the packages ship (packaging/grafana/kibotos-agent.json)
asks only for what the agent exports. Every panel query is PromQL that promtool parses,
and every metric family and label it names is on a real agent's /metrics after a guest
connection went through an Egress, a dial failed and a DNS query was counted."""
import json
import os
import re
import subprocess

import pytest

import e2e_env as e2e
from kibotos_agent import SOURCE_ROOT

DASHBOARD = os.path.join(SOURCE_ROOT, "packaging", "grafana", "kibotos-agent.json")
# What Prometheus adds to every series it scrapes.
SCRAPE_LABELS = {"instance", "job"}
# Exported but left off the dashboard, each for a reason.
NOT_SHOWN = {
    "kibotos_egress_dial_failures_total": "the sum of kibotos_egress_dial_failures_by_cause_total, shown by cause",
    "kibotos_egress_dial_refusals_total": "its cause `refused` in kibotos_egress_dial_failures_by_cause_total",
}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}


def dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def panels(dash):
    """Every panel, also those inside collapsed rows."""
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def queries(dash):
    """(panel title, refId, expr) of every panel target."""
    return [(p["title"], t["refId"], t["expr"]) for p in panels(dash) for t in p.get("targets", [])]


def grafana_to_promql(expr):
    """The expr as Prometheus sees it once Grafana fills in its variables."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: "1m" if m.group(1).startswith("__") else ".*", expr)


def names_and_labels(expr):
    """(metric names, label names) an expr uses: label names from its matchers and its
    by/without/on/ignoring lists; metric names are the other identifiers that call
    nothing."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", " ".join(re.findall(r"\{[^}]*\}", expr))))
    for group in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        labels |= {w.strip() for w in group.split(",") if w.strip()}
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    names = {m.group(1) for m in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()", bare)
             if m.group(1).lower() not in PROMQL_WORDS}
    return names, labels


def exported_families(text):
    """{family: (type, set of label names)} of a /metrics scrape, from its samples."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out = {name: (kind, set()) for name, kind in types.items()}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        name = name.split()[0]
        family = name if name in types else re.sub(r"_(bucket|sum|count)$", "", name)
        out[family][1].update(re.findall(r'(\w+)="', rest))
    return out


def family_of(name, families):
    if name in families:
        return name
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    return base if families.get(base, ("",))[0] == "histogram" else None


def test_the_dashboard_imports_anywhere_and_every_panel_query_is_promql_that_promtool_parses(tmp_path):
    dash = dashboard()
    assert 36 <= dash["schemaVersion"] <= 41, dash["schemaVersion"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    # Every query asks the data source the importer picks, never one of this lab's uids.
    for p in panels(dash):
        for obj in [p] + p.get("targets", []):
            if "datasource" in obj:
                assert obj["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
    found = queries(dash)
    assert len(found) >= 20, found
    # promtool has no query parser of its own: each expr becomes a recording rule,
    # which `promtool check rules` parses as PromQL.
    rules = [{"record": f"dashboard:query_{i}", "expr": grafana_to_promql(expr)}
             for i, (_, _, expr) in enumerate(found)]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout, r.stdout


def test_every_metric_and_label_the_dashboard_asks_for_is_on_a_real_agents_metrics(lab, agent_factory, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, nftables)")
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    e2e.dp.start_dante(lab, 1080)
    config = e2e.agent_config(lab)
    config["log"] = {"access": {"path": str(tmp_path / "access.log")}}
    config["dataplane"] = {"egress_probe_interval": "1s"}
    agent = agent_factory(config=config)
    good = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1080"), "egress_id")
    dead = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1999"), "egress_id")  # nothing listens
    dead_dst = lab.internet_v4(40)
    pol = e2e.policy((good, [e2e.covered(lab) + "/32"]), (dead, [dead_dst + "/32"]))
    # No resolver answers: the DNS families only need a Workspace whose policy has one.
    pol["resolvers"] = [{"tcp": {"address": f"{lab.internet_v4(53)}:53"}, "egressId": good}]
    wid = e2e.field(e2e.ok(e2e.create_workspace(agent, ws.path, pol))["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, good, 1)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    ok, line = e2e.dp.guest(lab, ws, "expect-reset", dead_dst, e2e.PORT, timeout=30)
    assert ok, line
    lab.udp_request(ws.guest, lab.internet_v4(99), 53, timeout=0.2)  # a DNS query (not one that parses)

    def scraped():
        text = agent.get("/metrics")[2]
        return text if "kibotos_egress_up{" in text and "kibotos_dns_queries_total{" in text else None
    families = exported_families(e2e.labmod.wait_for(scraped, timeout=10, what="a probe and the DNS families"))

    dash = dashboard()
    used = set()
    for title, ref, expr in queries(dash):
        names, labels = names_and_labels(expr)
        assert names, (title, ref, expr)
        known = {}
        for name in names:
            family = family_of(name, families)
            assert family, f"panel {title!r} ({ref}) asks for {name}, which the agent does not export"
            known[family] = families[family][1]
            used.add(family)
        have = set().union(*known.values()) | SCRAPE_LABELS
        assert labels <= have, f"panel {title!r} ({ref}) names labels {labels - have} that {sorted(known)} lack"
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((\w+)(?:\{[^}]*\})?,\s*(\w+)\)", v["definition"])
        assert m and m.group(1) in families, v["definition"]
        assert m.group(2) in families[m.group(1)][1] | SCRAPE_LABELS, v["definition"]
    # And the other way: a family added to /metrics is shown, or said not to be.
    assert set(families) - used - set(NOT_SHOWN) == set(), "exported, not on the dashboard"
    e2e.assert_clean_exit(agent)
