"""A guest's connection through one Egress, end to end through the real agent: the
API (JSON over the Unix socket) and kibotosctl create the Egress and the Workspace;
the guest's covered traffic reaches its server through dante, uncovered traffic
leaves directly, and network_policy_status shows what the data plane enforces."""
import json
import os
import types

import pytest

import e2e_env as e2e
from kibotos_agent import metric

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


def start_logged_http_server(lab, addr, port, log_path):
    """python3 -m http.server in inet; its access log (client address first) goes to
    log_path."""
    log = open(log_path, "wb")
    proc = lab.popen(lab.inet, e2e.dp.PYTHON, "-m", "http.server", "--bind", addr, "--directory", e2e.HERE,
                     port, stdout=log, stderr=log)
    log.close()
    e2e.labmod.wait_for(lambda: lab.tcp_request(lab.inet, addr, port, timeout=0.5, read=False)[0], timeout=10,
                        what="http server")
    return proc


def access_log_line(log_path, path):
    with open(log_path, errors="replace") as f:
        for line in f:
            if f"GET {path} " in line:
                return line
    return None


def test_a_guest_connection_goes_through_its_egress_end_to_end(env, tmp_path):
    lab, ws, agent = env.lab, env.ws, env.agent
    log_path = str(tmp_path / "http.log")
    start_logged_http_server(lab, e2e.covered(lab), 8080, log_path)

    egress = e2e.create_egress(agent, env.socks)
    eid = e2e.field(egress, "egress_id")
    assert e2e.num(egress, "revision") == 1
    status, body = e2e.create_workspace(agent, ws.path, e2e.policy((eid, [e2e.covered(lab) + "/32"])))
    assert status == 200, body
    workspace = body["workspace"]
    wid = e2e.field(workspace, "workspace_id")
    assert e2e.field(workspace, "netns") == ws.path
    assert e2e.num(e2e.field(workspace, "network_policy"), "revision") == 1
    e2e.wait_applied(agent, wid, 1, eid, 1)

    # Covered: curl from the guest reaches the server, which sees dante's address.
    rc, out, err = e2e.dp.guest_curl(lab, ws, f"http://{e2e.covered(lab)}:8080/e2e_env.py")
    assert rc == 0, err
    assert "end-to-end setting" in out
    line = e2e.labmod.wait_for(lambda: access_log_line(log_path, "/e2e_env.py"), timeout=5, what="access log")
    assert line.split()[0] == lab.socks_inet_v4, line
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4

    # Uncovered: leaves directly, so the server sees the guest itself.
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4

    # Status: the applied revisions and this Egress's live connection count.
    ticker = e2e.start_ticker(lab, ws, e2e.covered(lab))
    try:
        st = e2e.labmod.wait_for(
            lambda: (lambda s: s if e2e.num(e2e.egress_status(s, eid), "active_connections") >= 1 else None)(
                e2e.policy_status(agent, wid)), timeout=10, what="an active connection in status")
        assert e2e.num(st, "applied_revision") == 1
        es = e2e.egress_status(st, eid)
        assert e2e.num(es, "applied_revision") == 1
        assert e2e.num(es, "active_connections") == 1, es
        assert e2e.num(es, "draining_connections") == 0, es
        assert not e2e.field(st, "error"), st
    finally:
        ticker.kill()
        ticker.wait(timeout=10)
    e2e.labmod.wait_for(lambda: e2e.num(e2e.egress_status(e2e.policy_status(agent, wid), eid),
                                        "active_connections") == 0,
                        timeout=10, what="the closed connection to leave the count")


def write_policy_yaml(path, egress_id, cidr):
    with open(path, "w") as f:
        f.write("# NetworkPolicy for kibotosctl workspace create --policy\n"
                "mode: NETWORK_MODE_PUBLIC_INTERNET\n"
                "egresses:\n"
                f"  - egress_id: {egress_id}\n"
                "    destinations:\n"
                f"      - {cidr}\n")


def ctl_json(agent, *args):
    p = e2e.kibotosctl(agent, "-o", "json", *args)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return json.loads(p.stdout)


def unwrap(body, key):
    """kibotosctl prints the response (e.g. {"egress": {...}}) or the resource itself."""
    return body.get(key, body) if isinstance(body, dict) else body


def test_kibotosctl_creates_and_shows_an_egress_and_a_workspace(env, tmp_path):
    lab, ws, agent = env.lab, env.ws, env.agent
    egress = unwrap(ctl_json(agent, "egress", "create", "--address", env.socks), "egress")
    eid = e2e.field(egress, "egress_id")
    assert eid and e2e.num(egress, "revision") == 1

    policy_file = str(tmp_path / "policy.yaml")
    write_policy_yaml(policy_file, eid, e2e.covered(lab) + "/32")
    workspace = unwrap(ctl_json(agent, "workspace", "create", "--netns", ws.path, "--policy", policy_file),
                       "workspace")
    wid = e2e.field(workspace, "workspace_id")
    assert e2e.field(workspace, "netns") == ws.path
    routes = e2e.field(e2e.field(workspace, "network_policy"), "egresses")
    assert [e2e.field(r, "egress_id") for r in routes] == [eid]
    assert e2e.field(routes[0], "destinations") == [e2e.covered(lab) + "/32"]

    def applied():
        st = unwrap(ctl_json(agent, "workspace", "status", wid), "network_policy_status")
        es = e2e.egress_status(st, eid)
        return st if e2e.num(st, "applied_revision") == 1 and es and e2e.num(es, "applied_revision") == 1 else None
    e2e.labmod.wait_for(applied, timeout=15, what="kibotosctl workspace status to show revision 1")
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4

    got = unwrap(ctl_json(agent, "workspace", "get", wid), "workspace")
    assert e2e.field(got, "workspace_id") == wid
    assert e2e.num(e2e.field(got, "network_policy_status"), "applied_revision") == 1

    # The table view of status is readable text naming the Egress.
    p = e2e.kibotosctl(agent, "workspace", "status", wid)
    assert p.returncode == 0, p.stderr
    assert eid in p.stdout


def test_create_workspace_with_a_missing_or_already_attached_netns_is_failed_precondition(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    egress = e2e.create_egress(agent, env.socks)
    pol = e2e.policy((e2e.field(egress, "egress_id"), [e2e.covered(lab) + "/32"]))
    missing = f"/run/netns/kib{os.getpid()}-e2e-missing"
    assert not os.path.exists(missing)
    assert e2e.error_code(e2e.create_workspace(agent, missing, pol)) == "failed_precondition"
    e2e.ok(e2e.create_workspace(agent, ws.path, pol))
    status, body = e2e.create_workspace(agent, ws.path, pol)
    assert (status, e2e.field(body, "code")) == (400, "failed_precondition"), body
    # The same namespace by another path is the same namespace.
    sleeper = lab.popen(ws.ws, "sleep", "60")
    alias = f"/proc/{sleeper.pid}/ns/net"
    e2e.labmod.wait_for(lambda: os.path.exists(alias) and os.stat(alias).st_ino == os.stat(ws.path).st_ino,
                        timeout=10, what="the sleeper to enter the namespace")
    assert e2e.error_code(e2e.create_workspace(agent, alias, pol)) == "failed_precondition"
    # A path that is not a network namespace.
    assert e2e.error_code(e2e.create_workspace(agent, "/etc/hostname", pol)) == "failed_precondition"
    listed = e2e.ok(e2e.call(agent, e2e.WORKSPACE + "ListWorkspaces", {}))
    assert len(e2e.field(listed, "workspaces", [])) == 1


def test_two_workspaces_with_different_policies_do_not_see_each_others_traffic(env):
    lab, agent = env.lab, env.agent
    ws0 = env.ws
    ws1 = lab.add_workspace()
    e2e.start_second_socks(lab, 1081)
    e0 = e2e.field(e2e.create_egress(agent, env.socks), "egress_id")
    e1 = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1081"), "egress_id")
    a, b = e2e.covered(lab), e2e.uncovered(lab)
    w0 = e2e.field(e2e.ok(e2e.create_workspace(agent, ws0.path, e2e.policy((e0, [a + "/32"]))))["workspace"],
                   "workspace_id")
    w1 = e2e.field(e2e.ok(e2e.create_workspace(agent, ws1.path, e2e.policy((e1, [b + "/32"]))))["workspace"],
                   "workspace_id")
    e2e.wait_applied(agent, w0, 1, e0, 1)
    e2e.wait_applied(agent, w1, 1, e1, 1)

    # Each guest: its own covered destination through its own Egress, the other's
    # covered destination directly.
    assert e2e.peer(lab, ws0, a) == lab.socks_inet_v4
    assert e2e.peer(lab, ws0, b) == ws0.guest_v4
    assert e2e.peer(lab, ws1, b) == e2e.second_socks_out(lab)
    assert e2e.peer(lab, ws1, a) == ws1.guest_v4

    # A connection held in ws0 is counted in ws0's status only.
    ticker = e2e.start_ticker(lab, ws0, a)
    try:
        e2e.labmod.wait_for(lambda: e2e.num(e2e.egress_status(e2e.policy_status(agent, w0), e0),
                                            "active_connections") == 1, timeout=10, what="ws0's connection")
        st1 = e2e.policy_status(agent, w1)
        assert e2e.egress_status(st1, e0) is None, st1
        assert e2e.num(e2e.egress_status(st1, e1), "active_connections") == 0, st1
    finally:
        ticker.kill()
        ticker.wait(timeout=10)


def test_get_agent_counts_the_workspaces_egresses_and_relayed_connections(attached):
    lab, ws, agent = attached.lab, attached.ws, attached.agent

    def counts():
        a = e2e.ok(e2e.call(agent, "kibotos.ctrl.v1.AgentService/GetAgent", {}))["agent"]
        return (e2e.num(a, "workspace_count"), e2e.num(a, "egress_count"), e2e.num(a, "active_connections"))

    assert counts() == (1, 1, 0)
    ticker = e2e.start_ticker(lab, ws, e2e.covered(lab))
    try:
        e2e.labmod.wait_for(lambda: counts() == (1, 1, 1), timeout=10, what="GetAgent to count the connection")
    finally:
        ticker.kill()
        ticker.wait(timeout=10)
    e2e.labmod.wait_for(lambda: counts() == (1, 1, 0), timeout=10, what="GetAgent to drop the closed connection")


def test_update_network_policy_applies_to_new_connections_at_once(attached):
    lab, ws, agent = attached.lab, attached.ws, attached.agent
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4
    # Cover the whole lab internet: the formerly uncovered destination now goes
    # through the Egress too.
    workspace = e2e.update_policy(agent, attached.workspace,
                                  e2e.policy((attached.egress_id, [lab.internet_v4_cidr])), drain_seconds=0)
    assert e2e.num(e2e.field(workspace, "network_policy"), "revision") == 2
    e2e.wait_applied(agent, attached.workspace_id, 2, attached.egress_id, 1)
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == lab.socks_inet_v4
    # ISOLATED: nothing leaves, covered or not.
    workspace = e2e.update_policy(agent, workspace, {"mode": "NETWORK_MODE_ISOLATED"}, drain_seconds=0)
    assert e2e.num(e2e.field(workspace, "network_policy"), "revision") == 3
    e2e.labmod.wait_for(lambda: e2e.num(e2e.policy_status(agent, attached.workspace_id), "applied_revision") == 3,
                        timeout=15, what="revision 3 applied")
    assert not e2e.reachable(lab, ws, e2e.covered(lab))
    assert not e2e.reachable(lab, ws, e2e.uncovered(lab))


def start_dual_stack_dante(lab, port):
    """dante listening on both of up0's addresses and leaving through both of inet0's
    (v4 and v6): the data-plane helper's config widened to the interfaces."""
    conf = e2e.dp.dante_conf(lab, port, internal="up0")
    with open(conf) as f:
        text = f.read()
    text = text.replace(f"external: {lab.socks_inet_v4}", "external: inet0")
    text += ("client pass { from: ::/0 to: ::/0 }\n"
             "socks pass { from: 0.0.0.0/0 to: ::/0 command: connect }\n"
             "socks pass { from: ::/0 to: 0.0.0.0/0 command: connect }\n"
             "socks pass { from: ::/0 to: ::/0 command: connect }\n")
    with open(conf, "w") as f:
        f.write(text)
    proc = lab.popen(lab.socks, "/usr/sbin/danted", "-f", conf, "-N", "1")
    e2e.labmod.wait_for(lambda: lab.tcp_request(lab.socks, lab.socks_v4, port, timeout=0.5, read=False)[0],
                        timeout=10, what="dual-stack dante listening")
    return proc


@pytest.mark.parametrize("egress_family", ["v4", "v6"])
def test_an_ipv6_guest_connection_goes_through_its_egress(env, egress_family):
    lab, ws, agent = env.lab, env.ws, env.agent
    dst = lab.internet_v6(10)
    lab._ensure_bindable(lab.inet, dst)
    e2e.dp.start_bulk_server(lab, dst, e2e.PORT)
    start_dual_stack_dante(lab, 1083)
    socks = f"{lab.socks_v4}:1083" if egress_family == "v4" else f"[{lab.socks_v6}]:1083"
    egress = e2e.create_egress(agent, socks)
    eid = e2e.field(egress, "egress_id")
    wid = e2e.field(e2e.ok(e2e.create_workspace(agent, ws.path, e2e.policy((eid, [lab.internet_v6_cidr]))))
                    ["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, eid, 1)
    assert e2e.peer(lab, ws, dst) == lab.socks_inet_v6, e2e.policy_status(agent, wid)
    # v4 is not covered by this policy: it leaves directly.
    assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4


def test_only_the_policy_ports_are_covered(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    e2e.dp.start_bulk_server(lab, e2e.covered(lab), e2e.PORT + 1)
    eid = e2e.field(e2e.create_egress(agent, env.socks), "egress_id")
    pol = e2e.policy((eid, [e2e.covered(lab) + "/32"]))
    pol["egresses"][0]["ports"] = [{"first": e2e.PORT, "last": e2e.PORT}]
    wid = e2e.field(e2e.ok(e2e.create_workspace(agent, ws.path, pol))["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, eid, 1)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    assert e2e.peer(lab, ws, e2e.covered(lab), port=e2e.PORT + 1) == ws.guest_v4


def test_the_per_workspace_connection_cap_resets_connections_beyond_it(lab, agent_factory):
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    e2e.dp.start_dante(lab, 1080)
    agent = agent_factory(config=e2e.deep_merge(e2e.agent_config(lab),
                                                {"dataplane": {"max_connections_per_workspace": 2}}))
    env = types.SimpleNamespace(lab=lab, ws=ws, agent=agent, socks=f"{lab.socks_v4}:1080")
    egress, workspace = e2e.attach(env)
    eid, wid = e2e.field(egress, "egress_id"), e2e.field(workspace, "workspace_id")
    tickers = [e2e.start_ticker(lab, ws, e2e.covered(lab)) for _ in range(2)]
    try:
        e2e.labmod.wait_for(lambda: e2e.num(e2e.egress_status(e2e.policy_status(agent, wid), eid),
                                            "active_connections") == 2, timeout=10, what="two connections")
        assert e2e.peer(lab, ws, e2e.covered(lab)) is None
        assert e2e.peer(lab, ws, e2e.uncovered(lab)) == ws.guest_v4
    finally:
        for t in tickers:
            t.kill()
            t.wait(timeout=10)
    e2e.labmod.wait_for(lambda: e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4, timeout=10,
                        what="room under the cap again")
    e2e.assert_clean_exit(agent)


def test_a_refused_dial_resets_the_guest_and_shows_in_status(env):
    lab, ws, agent = env.lab, env.ws, env.agent
    eid = e2e.field(e2e.create_egress(agent, f"{lab.socks_v4}:1999"), "egress_id")  # nothing listens
    wid = e2e.field(e2e.ok(e2e.create_workspace(agent, ws.path, e2e.policy((eid, [e2e.covered(lab) + "/32"]))))
                    ["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, eid, 1)
    ok, line = e2e.dp.guest(lab, ws, "expect-reset", e2e.covered(lab), e2e.PORT, timeout=60)
    assert ok, line
    e2e.labmod.wait_for(lambda: e2e.field(e2e.egress_status(e2e.policy_status(agent, wid), eid), "last_error"),
                        timeout=10, what="the dial error in status")
    samples = agent.metrics()
    labels = {"workspace_id": wid, "egress_id": eid}
    assert metric(samples, "kibotos_egress_dial_failures_total", **labels) == 1, samples
    assert metric(samples, "kibotos_egress_dial_refusals_total", **labels) == 0, samples  # refused by the port


def test_a_dial_to_a_special_purpose_address_is_refused_and_shows_in_status_and_metrics(lab, agent_factory, tmp_path):
    # The endpoint's name resolves to the lab's SOCKS server when created, then to
    # loopback: special purpose and not exempted, so the dial is refused.
    answer = tmp_path / "answer"
    answer.write_text(lab.socks_v4)
    lab.popen(lab.socks, e2e.dp.PYTHON, os.path.join(e2e.dp.HERE, "tiny_dns.py"), lab.socks_v4, "5353", str(answer))
    env = e2e.make_env(lab, agent_factory, egress={"resolvers": [f"{lab.socks_v4}:5353"]})
    ws, agent = env.ws, env.agent
    eid = e2e.field(e2e.create_egress(agent, "socks.test:1080"), "egress_id")
    wid = e2e.field(e2e.ok(e2e.create_workspace(agent, ws.path, e2e.policy((eid, [e2e.covered(lab) + "/32"]))))
                    ["workspace"], "workspace_id")
    e2e.wait_applied(agent, wid, 1, eid, 1)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
    answer.write_text("127.0.0.1")
    ok, line = e2e.dp.guest(lab, ws, "expect-reset", e2e.covered(lab), e2e.PORT, timeout=60)
    assert ok, line
    err = e2e.labmod.wait_for(lambda: e2e.field(e2e.egress_status(e2e.policy_status(agent, wid), eid), "last_error"),
                              timeout=10, what="the refusal in status")
    assert "127.0.0.1" in err, err
    samples = agent.metrics()
    labels = {"workspace_id": wid, "egress_id": eid}
    assert metric(samples, "kibotos_egress_dial_refusals_total", **labels) == 1, samples
    assert metric(samples, "kibotos_egress_dial_failures_total", **labels) == 1, samples
    e2e.assert_clean_exit(agent)


def test_concurrent_create_workspace_on_one_netns_attaches_it_once(env):
    import concurrent.futures
    lab, ws, agent = env.lab, env.ws, env.agent
    eid = e2e.field(e2e.create_egress(agent, env.socks), "egress_id")
    pol = e2e.policy((eid, [e2e.covered(lab) + "/32"]))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: e2e.create_workspace(agent, ws.path, pol), range(4)))
    codes = sorted("ok" if s == 200 else e2e.field(b, "code") for s, b in results)
    assert codes == ["failed_precondition"] * 3 + ["ok"], results
    wid = next(e2e.field(b["workspace"], "workspace_id") for s, b in results if s == 200)
    e2e.wait_applied(agent, wid, 1, eid, 1)
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4


def test_a_guest_reconnecting_from_the_same_port_is_not_answered_by_the_old_connection(attached):
    # The agent passes the server's FIN on first, so the guest side of a finished
    # connection sits in TIME_WAIT inside the guest's namespace. A new SYN from the
    # same port must reach the listener (tproxy reopens TIME_WAIT), not the old
    # socket: that one would answer with an ACK, the guest would reset and retry the
    # SYN after a timeout (16 ms seen under load).
    lab, ws = attached.lab, attached.ws
    lab.start_tcp_server(lab.inet, e2e.covered(lab), 9100, "reuse")
    p = e2e.reuse_port(lab, ws, e2e.covered(lab), 9100, 40123, 5)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["rsts", "0"], p.stdout
    assert e2e.peer(lab, attached.ws, e2e.covered(lab)) == lab.socks_inet_v4


def guest_socket_congestion_control(lab, ws, dst):
    """The congestion control `ss -i` shows for the agent's socket of a relayed guest
    connection to dst:PORT (its local end, in the workspace namespace)."""
    out = lab.run(ws.ws, "ss", "-Htin", "state", "established", "src", f"{dst}:{e2e.PORT}").stdout
    algos = {"cubic", "reno", "bbr", "dctcp", "htcp", "vegas", "westwood"}
    words = [w for w in out.split() if w in algos]
    assert len(words) == 1, out
    return words[0]


@pytest.mark.parametrize("configured,expected", [(None, "cubic"), ("reno", "reno")], ids=["default", "reno"])
def test_the_guest_facing_sockets_use_the_configured_congestion_control(lab, agent_factory, configured, expected):
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    e2e.dp.start_dante(lab, 1080)
    config = e2e.agent_config(lab)
    if configured:
        config["dataplane"] = {"guest_congestion_control": configured}
    # The lab namespace's own default, so the check below cannot pass by accident.
    lab.run(ws.ws, "sysctl", "-qw", "net.ipv4.tcp_congestion_control=bbr", check=False)
    env = types.SimpleNamespace(lab=lab, ws=ws, agent=agent_factory(config=config), socks=f"{lab.socks_v4}:1080")
    e2e.attach(env)
    ticker = e2e.start_ticker(lab, ws, e2e.covered(lab), seconds=10)
    try:
        assert guest_socket_congestion_control(lab, ws, e2e.covered(lab)) == expected
    finally:
        ticker.kill()
        ticker.wait()


def test_a_congestion_control_the_kernel_lacks_stops_the_start_naming_the_key(lab, agent_factory):
    a = agent_factory(config={"dataplane": {"guest_congestion_control": "nosuchcc"}}, start=False)
    with pytest.raises(RuntimeError) as e:
        a.start(timeout=15)
    assert "dataplane.guest_congestion_control" in str(e.value), str(e.value)
