"""Workspace attach (issue 4, items 3, 5, 6): the kernel side, through the netns library
and netns-attach-tool standing in for the agent. Root only; each test builds its own
lab (the topology of docs/ARCHITECTURE.md) and removes it even on failure."""
import os
import re
import subprocess

import pytest

from attach_tool import MARK, ROUTE_TABLE, AttachTool, isolated_policy, public_policy, remove_stale
from lab import wait_for

PORT = 8080
OTHER_PORT = 9090

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


@pytest.fixture
def servers(lab):
    """TCP servers in the inet namespace: covered and uncovered addresses, v4 and v6."""
    s = {
        "cov4": lab.internet_v4(10),
        "unc4": lab.internet_v4(20),
        "cov6": lab.internet_v6(0x10),
        "unc6": lab.internet_v6(0x20),
    }
    for addr in s.values():
        lab.start_tcp_server(lab.inet, addr, PORT, addr)
    lab.start_tcp_server(lab.inet, s["cov4"], OTHER_PORT, s["cov4"])
    return s


def covering(servers, resolvers=False):
    """Covers cov4/cov6 on port 8080 only."""
    return public_policy(([servers["cov4"] + "/32", servers["cov6"] + "/128"], [(PORT, PORT)]),
                         resolvers=resolvers)


def reaches_listener(result, addr, port):
    return result == (True, f"ORIGDST {addr} {port}")


def reaches_server(result, addr):
    return result == (True, f"SERVER {addr}")


def test_attach_installs_the_table_the_fwmark_rules_and_the_local_routes(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers))
    nft = lab.run(ws.ws, "nft", "list", "table", "inet", "kibotos").stdout
    assert f"tproxy ip to :{tool.ports['tcp']}" in nft
    assert f"tproxy ip6 to :{tool.ports['tcp']}" in nft
    for family in ("-4", "-6"):
        rules = lab.run(ws.ws, "ip", family, "rule").stdout
        assert re.search(rf"fwmark {MARK:#x} lookup {ROUTE_TABLE}", rules), rules
        routes = lab.run(ws.ws, "ip", family, "route", "show", "table", str(ROUTE_TABLE)).stdout
        assert re.match(r"local default dev lo", routes), routes


def test_covered_tcp_from_the_guest_reaches_the_listener_with_its_original_destination(lab, ws, servers):
    AttachTool(lab, ws.path, covering(servers))
    assert reaches_listener(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"], PORT)
    assert reaches_listener(lab.tcp_request(ws.guest, servers["cov6"], PORT), servers["cov6"], PORT)


def test_covered_tcp_generated_inside_the_workspace_namespace_reaches_the_listener(lab, ws, servers):
    AttachTool(lab, ws.path, covering(servers))
    assert reaches_listener(lab.tcp_request(ws.ws, servers["cov4"], PORT), servers["cov4"], PORT)
    assert reaches_listener(lab.tcp_request(ws.ws, servers["cov6"], PORT), servers["cov6"], PORT)


def test_uncovered_tcp_reaches_its_server_directly(lab, ws, servers):
    AttachTool(lab, ws.path, covering(servers))
    assert reaches_server(lab.tcp_request(ws.guest, servers["unc4"], PORT), servers["unc4"])
    assert reaches_server(lab.tcp_request(ws.guest, servers["unc6"], PORT), servers["unc6"])
    assert reaches_server(lab.tcp_request(ws.ws, servers["unc4"], PORT), servers["unc4"])


def test_a_covered_address_on_a_port_outside_the_ranges_is_uncovered(lab, ws, servers):
    AttachTool(lab, ws.path, covering(servers))
    assert reaches_server(lab.tcp_request(ws.guest, servers["cov4"], OTHER_PORT), servers["cov4"])


def test_an_entry_without_ports_covers_every_port(lab, ws, servers):
    AttachTool(lab, ws.path, public_policy(([lab.internet_v4_cidr], [])))
    assert reaches_listener(lab.tcp_request(ws.guest, servers["cov4"], OTHER_PORT), servers["cov4"], OTHER_PORT)
    assert reaches_listener(lab.tcp_request(ws.guest, servers["unc4"], PORT), servers["unc4"], PORT)
    # Only the IPv4 range is covered.
    assert reaches_server(lab.tcp_request(ws.guest, servers["unc6"], PORT), servers["unc6"])


def test_other_ip_traffic_to_a_covered_destination_is_rejected(lab, ws, servers):
    echo = ("import socket\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            f"s.bind(({servers['cov4']!r}, {PORT}))\n"
            "while True:\n"
            "    d, a = s.recvfrom(100); s.sendto(b'ECHO', a)\n")
    lab.popen(lab.inet, "/usr/bin/python3", "-c", echo)
    wait_for(lambda: lab.udp_request(ws.guest, servers["cov4"], PORT, timeout=0.5)[0], timeout=10,
             what="udp echo server")
    AttachTool(lab, ws.path, covering(servers))
    answered, text, _ = lab.udp_request(ws.guest, servers["cov4"], PORT, timeout=1)
    assert not answered, text


def test_dns_to_any_address_is_intercepted_on_udp_and_tcp_when_resolvers_are_set(lab, ws, servers):
    AttachTool(lab, ws.path, covering(servers, resolvers=True))
    # Addresses inside the lab where nothing listens on port 53.
    for addr in (lab.internet_v4(53), lab.internet_v6(0x53), ws.ws_v4):
        answered, text, src = lab.udp_request(ws.guest, addr, 53)
        assert answered and text == f"ORIGDST {addr} 53", text
        # The answer comes from the address and port the guest asked.
        assert src == (addr, 53)
        assert reaches_listener(lab.tcp_request(ws.guest, addr, 53), addr, 53)
    answered, text, _ = lab.udp_request(ws.ws, lab.internet_v4(53), 53)
    assert answered and text == f"ORIGDST {lab.internet_v4(53)} 53"


def test_dns_is_not_intercepted_without_resolvers(lab, ws, servers):
    lab.start_tcp_server(lab.inet, lab.internet_v4(53), 53, "dns")
    AttachTool(lab, ws.path, covering(servers, resolvers=False))
    assert reaches_server(lab.tcp_request(ws.guest, lab.internet_v4(53), 53), "dns")


def test_fail_closed_covered_traffic_is_dropped_after_the_agent_is_killed(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers, resolvers=True))
    assert reaches_listener(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"], PORT)
    tool.kill()  # SIGKILL: nothing is cleaned up
    for addr in (servers["cov4"], servers["cov6"]):
        ok, text = lab.tcp_request(ws.guest, addr, PORT, timeout=1.5)
        assert not ok, f"covered {addr} reachable with the agent dead: {text}"
    ok, text = lab.tcp_request(ws.ws, servers["cov4"], PORT, timeout=1.5)
    assert not ok, text
    answered, text, _ = lab.udp_request(ws.guest, lab.internet_v4(53), 53, timeout=1)
    assert not answered, text
    assert reaches_server(lab.tcp_request(ws.guest, servers["unc4"], PORT), servers["unc4"])
    assert reaches_server(lab.tcp_request(ws.guest, servers["unc6"], PORT), servers["unc6"])


def test_fail_closed_while_a_namespace_is_being_set_up(lab, ws, servers):
    """Before the listeners exist the table already drops covered traffic."""
    tool = AttachTool(lab, ws.path, covering(servers, resolvers=True), pause_after_prepare=True)
    ok, text = lab.tcp_request(ws.guest, servers["cov4"], PORT, timeout=1.5)
    assert not ok, text
    ok, text = lab.tcp_request(ws.ws, servers["cov6"], PORT, timeout=1.5)
    assert not ok, text
    answered, text, _ = lab.udp_request(ws.guest, lab.internet_v4(53), 53, timeout=1)
    assert not answered, text
    assert reaches_server(lab.tcp_request(ws.guest, servers["unc4"], PORT), servers["unc4"])
    tool.resume()
    assert reaches_listener(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"], PORT)


def test_the_listeners_are_reachable_only_through_tproxy(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers, resolvers=True))
    for port in (tool.ports["tcp"], tool.ports["dns_tcp"]):
        ok, text = lab.tcp_request(ws.guest, ws.ws_v4, port, timeout=1)
        assert not ok, text
    answered, text, _ = lab.udp_request(ws.guest, ws.ws_v4, tool.ports["dns_udp"], timeout=1)
    assert not answered, text


def test_a_deleted_namespace_is_reported_not_alive(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers))
    assert tool.namespace_alive()
    lab.run(ws.guest, "true")
    lab._ip(None, "netns", "del", ws.ws)
    assert not tool.namespace_alive()
    assert "is gone" in tool.check()


def test_reattach_after_a_crash_replaces_the_stale_table_and_rules(lab, ws, servers):
    AttachTool(lab, ws.path, covering(servers)).kill()
    tool = AttachTool(lab, ws.path, covering(servers))
    assert reaches_listener(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"], PORT)
    assert lab.run(ws.ws, "nft", "list", "tables").stdout.count("inet kibotos") == 1
    for family in ("-4", "-6"):
        rules = lab.run(ws.ws, "ip", family, "rule").stdout
        assert rules.count(f"fwmark {MARK:#x}") == 1, rules
    assert f"tproxy ip to :{tool.ports['tcp']}" in lab.run(ws.ws, "nft", "list", "ruleset").stdout


def test_detach_leaves_the_namespace_exactly_as_before(lab, ws, servers):
    before = lab.kernel_state(ws.ws)
    tool = AttachTool(lab, ws.path, covering(servers, resolvers=True))
    assert lab.kernel_state(ws.ws) != before
    tool.detach()
    assert lab.kernel_state(ws.ws) == before
    assert reaches_server(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"])


def test_remove_stale_clears_what_a_crashed_agent_left(lab, ws, servers):
    before = lab.kernel_state(ws.ws)
    AttachTool(lab, ws.path, covering(servers, resolvers=True)).kill()
    assert lab.kernel_state(ws.ws) != before
    remove_stale(ws.path)
    assert lab.kernel_state(ws.ws) == before
    remove_stale(ws.path)  # idempotent
    assert reaches_server(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"])


def test_check_reports_what_the_kernel_no_longer_enforces(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers))
    assert tool.check() == "ok"
    lab.run(ws.ws, "nft", "delete", "table", "inet", "kibotos")
    assert "table missing" in tool.check()
    tool.update(covering(servers))  # writes the table again, without listing it
    assert tool.check() == "ok"  # nothing committed there since
    # Another transaction in the namespace after an unlisted write: the table cannot
    # be told apart from what was written, so it is reported and written again,
    # listed this time.
    lab.run(ws.ws, "nft", "add", "table", "inet", "someone_else")
    assert "not listed" in tool.check()
    tool.reinstall()
    assert tool.check() == "ok"
    # Others' transactions now leave the check ok (the listing tells the table is ours)...
    lab.run(ws.ws, "nft", "add", "chain", "inet", "someone_else", "c")
    assert tool.check() == "ok"
    # ...and a table still there but emptied, or with a rule of someone else's in it,
    # is found.
    lab.run(ws.ws, "nft", "flush", "chain", "inet", "kibotos", "prerouting")
    assert "table changed" in tool.check()
    tool.reinstall()
    assert tool.check() == "ok"
    lab.run(ws.ws, "nft", "insert", "rule", "inet", "kibotos", "output", "accept")
    assert "table changed" in tool.check()
    tool.reinstall()
    assert tool.check() == "ok"
    assert tool.check() == "ok"  # the listing compared with is stable
    lab.run(ws.ws, "nft", "delete", "table", "inet", "someone_else")
    lab.run(ws.ws, "ip", "-6", "rule", "del", "fwmark", hex(MARK), "lookup", str(ROUTE_TABLE))
    assert "fwmark rule missing (ipv6)" in tool.check()
    lab.run(ws.ws, "ip", "-6", "rule", "add", "fwmark", hex(MARK), "lookup", str(ROUTE_TABLE), "priority", "100")
    lab.run(ws.ws, "ip", "route", "del", "local", "default", "dev", "lo", "table", str(ROUTE_TABLE))
    assert "local route missing (ipv4)" in tool.check()


def test_update_swaps_the_policy(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers))
    tool.update(public_policy(([servers["unc4"] + "/32"], [(PORT, PORT)])))
    assert reaches_listener(lab.tcp_request(ws.guest, servers["unc4"], PORT), servers["unc4"], PORT)
    assert reaches_server(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"])


HOLDING_CLIENT = """
import socket, sys
s = socket.create_connection(({addr!r}, {port}), timeout=5)
print(s.makefile().readline().strip(), flush=True)
sys.stdin.readline()
s.sendall(b"ping")
try:
    print(s.recv(100).decode().strip(), flush=True)
except OSError as e:
    print("ERROR", e, flush=True)
"""


def test_connections_intercepted_before_an_update_stay_with_the_agent(lab, ws, servers):
    """A policy update no longer covering a destination must not send the open
    connections to it around the agent: they stay with it (it drains them)."""
    tool = AttachTool(lab, ws.path, covering(servers))
    clients = []
    for ns in (ws.guest, ws.ws):
        c = lab.popen(ns, "/usr/bin/python3", "-c", HOLDING_CLIENT.format(addr=servers["cov4"], port=PORT),
                      stdin=subprocess.PIPE, text=True)
        assert c.stdout.readline().strip() == f"ORIGDST {servers['cov4']} {PORT}"
        clients.append(c)
    tool.update(public_policy(([servers["unc4"] + "/32"], [])))
    assert reaches_server(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"])
    assert reaches_server(lab.tcp_request(ws.ws, servers["cov4"], PORT), servers["cov4"])
    for c in clients:
        out, _ = c.communicate("go\n", timeout=15)
        assert out.strip() == "ECHO ping", out


def test_policy_updates_never_let_covered_traffic_leave(lab, ws, servers):
    """Covered traffic keeps hitting the listener while the table is replaced again and again."""
    tool = AttachTool(lab, ws.path, covering(servers))
    client = lab.popen(ws.guest, "/usr/bin/python3", "-c", (
        "import socket, time\n"
        "leaks = hits = 0\n"
        "end = time.monotonic() + 4\n"
        "while time.monotonic() < end and hits + leaks < 5000:\n"
        "    s = socket.create_connection(({!r}, {}), timeout=2)\n"
        "    line = s.makefile().readline(); s.close()\n"
        "    leaks += line.startswith('SERVER'); hits += line.startswith('ORIGDST')\n"
        "print(hits, leaks)\n").format(servers["cov4"], PORT), text=True)
    other = public_policy(([servers["cov4"] + "/32", servers["cov6"] + "/128"], [(PORT, PORT)]),
                          ([servers["unc6"] + "/128"], [(1, 100)]))
    for i in range(20):
        tool.update(other if i % 2 else covering(servers))
    out, err = client.communicate(timeout=30)
    hits, leaks = map(int, out.split())
    assert hits > 0 and leaks == 0, (out, err)


def test_two_workspaces_with_different_policies_do_not_see_each_others_traffic(lab, servers):
    a, b = lab.add_workspace(), lab.add_workspace()
    tool_a = AttachTool(lab, a.path, public_policy(([servers["cov4"] + "/32"], [])))
    tool_b = AttachTool(lab, b.path, public_policy(([servers["unc4"] + "/32"], [])))
    assert reaches_listener(lab.tcp_request(a.guest, servers["cov4"], PORT), servers["cov4"], PORT)
    assert reaches_server(lab.tcp_request(a.guest, servers["unc4"], PORT), servers["unc4"])
    assert reaches_listener(lab.tcp_request(b.guest, servers["unc4"], PORT), servers["unc4"], PORT)
    assert reaches_server(lab.tcp_request(b.guest, servers["cov4"], PORT), servers["cov4"])
    seen_a = [l for l in tool_a.drain() if l.startswith("ACCEPT")]
    seen_b = [l for l in tool_b.drain() if l.startswith("ACCEPT")]
    assert len(seen_a) == 1 and a.guest_v4 in seen_a[0], seen_a
    assert len(seen_b) == 1 and b.guest_v4 in seen_b[0], seen_b


def test_isolated_lets_nothing_leave(lab, ws, servers):
    AttachTool(lab, ws.path, isolated_policy())
    for addr in servers.values():
        ok, text = lab.tcp_request(ws.guest, addr, PORT, timeout=1)
        assert not ok, f"guest reached {addr}: {text}"
    ok, text = lab.tcp_request(ws.ws, servers["unc4"], PORT, timeout=1)
    assert not ok, text
    answered, text, _ = lab.udp_request(ws.guest, lab.internet_v4(53), 53, timeout=1)
    assert not answered, text


def test_isolated_with_resolvers_still_answers_dns(lab, ws, servers):
    AttachTool(lab, ws.path, isolated_policy(resolvers=True))
    answered, text, _ = lab.udp_request(ws.guest, lab.internet_v4(53), 53)
    assert answered and text == f"ORIGDST {lab.internet_v4(53)} 53", text
    ok, text = lab.tcp_request(ws.guest, servers["unc4"], PORT, timeout=1)
    assert not ok, text


def test_several_loops_share_one_port_per_listener_kind(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers, resolvers=True), loops=3)
    listening = lab.run(ws.ws, "ss", "-Htln", f"sport = :{tool.ports['tcp']}").stdout.splitlines()
    assert len(listening) == 6, listening  # 3 v4 + 3 v6
    for _ in range(6):
        assert reaches_listener(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"], PORT)
    # DNS is served by one loop: one listener per family and protocol, whatever the loops.
    assert len(dns_sockets(lab, ws, tool.ports)) == 4


def dns_sockets(lab, ws, ports):
    """Listening TCP and bound UDP sockets on the DNS listener ports in the namespace."""
    found = []
    for proto, port in (("-Htln", ports["dns_tcp"]), ("-Huln", ports["dns_udp"])):
        if port != "0":
            found += lab.run(ws.ws, "ss", proto, f"sport = :{port}").stdout.splitlines()
    return found


def test_a_policy_without_resolvers_opens_no_dns_listener(lab, ws, servers):
    tool = AttachTool(lab, ws.path, covering(servers, resolvers=False))
    assert tool.ports["dns_udp"] == "0" and tool.ports["dns_tcp"] == "0", tool.ports
    # Only the TCP relay listeners (v4 + v6) are in the namespace.
    assert len(lab.run(ws.ws, "ss", "-Hltn").stdout.splitlines()) == 2
    assert lab.run(ws.ws, "ss", "-Hlun").stdout.strip() == ""
    # A whole word: a listener's ephemeral port may begin with 53.
    assert not re.search(r"dport 53\b", lab.run(ws.ws, "nft", "list", "table", "inet", "kibotos").stdout)


def test_an_update_that_adds_resolvers_opens_dns_listeners_and_one_that_removes_them_closes_them(lab, ws, servers):
    lab.start_tcp_server(lab.inet, lab.internet_v4(53), 53, "dns")
    tool = AttachTool(lab, ws.path, covering(servers, resolvers=False))
    tool.update(covering(servers, resolvers=True))
    assert tool.ports["dns_udp"] != "0" and tool.ports["dns_tcp"] != "0", tool.ports
    assert len(dns_sockets(lab, ws, tool.ports)) == 4  # udp + tcp, v4 + v6
    addr = lab.internet_v4(53)
    answered, text, _ = lab.udp_request(ws.guest, addr, 53)
    assert answered and text == f"ORIGDST {addr} 53", text
    assert reaches_listener(lab.tcp_request(ws.guest, addr, 53), addr, 53)
    old_ports = dict(tool.ports)
    tool.update(covering(servers, resolvers=False))
    assert tool.ports["dns_udp"] == "0" and tool.ports["dns_tcp"] == "0", tool.ports
    assert dns_sockets(lab, ws, old_ports) == []
    assert reaches_server(lab.tcp_request(ws.guest, addr, 53), "dns")
    # Covered TCP is still relayed throughout.
    assert reaches_listener(lab.tcp_request(ws.guest, servers["cov4"], PORT), servers["cov4"], PORT)
    assert tool.check() == "ok"
