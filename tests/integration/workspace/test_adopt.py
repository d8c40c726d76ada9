"""Adoption after a restart (issue 26: 2,000 Workspaces enforced again within 2 s): a
namespace nobody touched since the agent's last table write is taken over without
writing its table (the new listeners bind the ports the table points at); one that
changed in any way the note cannot vouch for is refused, so that the agent attaches it
in full. Through the netns library and netns-attach-tool; root only, each test builds
its own lab and removes it even on failure."""
import os
import subprocess

import pytest

from attach_tool import MARK, AttachTool, public_policy, try_adopt
from lab import NftMonitor as Monitor

PORT = 8080

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


@pytest.fixture
def servers(lab):
    s = {"cov4": lab.internet_v4(10), "cov6": lab.internet_v6(0x10), "unc4": lab.internet_v4(20)}
    for addr in s.values():
        lab.start_tcp_server(lab.inet, addr, PORT, addr)
    return s


def covering(servers, resolvers=False):
    return public_policy(([servers["cov4"] + "/32", servers["cov6"] + "/128"], [(PORT, PORT)]), resolvers=resolvers)


def reaches_listener(lab, ws, addr):
    return lab.tcp_request(ws.guest, addr, PORT) == (True, f"ORIGDST {addr} {PORT}")


def killed_with_note(lab, ws, policy):
    """An attached tool killed as an agent is (SIGKILL: its table stays); its note."""
    tool = AttachTool(lab, ws.path, policy)
    note = tool.note()
    assert note is not None
    tool.kill()
    return note


@pytest.mark.parametrize("resolvers", [False, True], ids=["tcp", "tcp+dns"])
def test_an_untouched_namespace_is_adopted_with_no_table_write_and_covered_traffic_reaches_it(
        lab, ws, servers, resolvers):
    policy = covering(servers, resolvers=resolvers)
    note = killed_with_note(lab, ws, policy)
    before = lab.kernel_state(ws.ws)
    monitor = Monitor(lab, ws.ws)
    adopted, tool = try_adopt(lab, ws.path, policy, note)
    assert adopted, tool
    assert monitor.events() == ""  # not one nftables transaction
    assert lab.kernel_state(ws.ws) == before  # the same table, ports included
    assert tool.ports["tcp"] == note.split()[2]
    assert reaches_listener(lab, ws, servers["cov4"])
    assert reaches_listener(lab, ws, servers["cov6"])
    assert lab.tcp_request(ws.guest, servers["unc4"], PORT) == (True, f"SERVER {servers['unc4']}")
    if resolvers:
        answered, text, _ = lab.udp_request(ws.guest, lab.internet_v4(53), 53)
        assert answered and text == f"ORIGDST {lab.internet_v4(53)} 53", text
    assert tool.check() == "ok"
    # The adopted namespace can be adopted again by the next restart.
    assert tool.note() == note


def test_a_namespace_where_nftables_changed_since_is_not_adopted_and_nothing_is_written(lab, ws, servers):
    policy = covering(servers)
    note = killed_with_note(lab, ws, policy)
    # Another table added and removed: our table is intact, but only a listing could
    # tell; the generation moved, so the agent writes its table again.
    lab.run(ws.ws, "nft", "add", "table", "inet", "other")
    lab.run(ws.ws, "nft", "delete", "table", "inet", "other")
    before = lab.kernel_state(ws.ws)
    adopted, why = try_adopt(lab, ws.path, policy, note)
    assert not adopted
    assert "nftables there changed since the agent's last write" in why, why
    assert lab.kernel_state(ws.ws) == before
    ok, text = lab.tcp_request(ws.guest, servers["cov4"], PORT, timeout=1.5)
    assert not ok, f"covered traffic reached {text} with no agent"
    # What the agent then does: a full attach.
    tool = AttachTool(lab, ws.path, policy)
    assert reaches_listener(lab, ws, servers["cov4"])
    assert tool.check() == "ok"


def test_a_table_edited_while_the_agent_was_down_is_not_adopted(lab, ws, servers):
    policy = covering(servers)
    note = killed_with_note(lab, ws, policy)
    lab.run(ws.ws, "nft", "flush", "table", "inet", "kibotos")  # covered traffic would leave directly
    adopted, why = try_adopt(lab, ws.path, policy, note)
    assert not adopted
    assert "changed since" in why, why


def test_a_policy_other_than_the_one_written_is_not_adopted(lab, ws, servers):
    note = killed_with_note(lab, ws, covering(servers))
    other = public_policy(([servers["cov4"] + "/32"], [(PORT, PORT)]))  # cov6 no longer covered
    adopted, why = try_adopt(lab, ws.path, other, note)
    assert not adopted
    assert "not the one this policy needs" in why, why
    # Gaining resolvers needs DNS listeners the table does not point at yet.
    adopted, why = try_adopt(lab, ws.path, covering(servers, resolvers=True), note)
    assert not adopted
    assert "not the one this policy needs" in why, why


def test_another_namespace_at_the_path_is_not_adopted(lab, ws, servers):
    policy = covering(servers)
    note = killed_with_note(lab, ws, policy)
    other = lab.add_workspace()  # a fresh namespace: no table, a cookie of its own
    adopted, why = try_adopt(lab, other.path, policy, note)
    assert not adopted
    assert "another network namespace" in why, why
    assert "kibotos" not in lab.run(other.ws, "nft", "list", "tables").stdout


def test_a_listener_port_taken_meanwhile_is_not_adopted(lab, ws, servers):
    policy = covering(servers)
    note = killed_with_note(lab, ws, policy)
    port = int(note.split()[2])
    squatter = lab.popen(ws.ws, "python3", "-c",
                         "import socket, time\n"
                         "s = socket.socket()\n"
                         f"s.bind(('0.0.0.0', {port}))\n"
                         "s.listen()\n"
                         "print('BOUND', flush=True)\n"
                         "time.sleep(60)\n", text=True)
    assert squatter.stdout.readline().strip() == "BOUND"
    adopted, why = try_adopt(lab, ws.path, policy, note)
    assert not adopted
    assert "Address already in use" in why, why


def test_policy_routing_removed_while_the_agent_was_down_is_put_back_by_the_adoption(lab, ws, servers):
    policy = covering(servers)
    note = killed_with_note(lab, ws, policy)
    installed = lab.kernel_state(ws.ws)
    fwmark = [line for line in installed["rule4"].splitlines() if f"fwmark {MARK:#x}" in line]
    assert len(fwmark) == 1, installed["rule4"]
    lab.run(ws.ws, "ip", "-4", "rule", "del", "priority", fwmark[0].split(":")[0])
    adopted, tool = try_adopt(lab, ws.path, policy, note)
    assert adopted, tool
    assert lab.kernel_state(ws.ws) == installed
    assert reaches_listener(lab, ws, servers["cov4"])


def test_a_bad_note_is_refused_by_the_tool(lab, ws, servers):
    with pytest.raises(subprocess.CalledProcessError):
        subprocess.run([__import__("attach_tool").TOOL, "--adopt", "not a note", ws.path, "{}"], check=True,
                       capture_output=True, timeout=30)
