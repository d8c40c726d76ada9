"""Issue 26, "no fd-number ceiling anywhere in the process" and "no library may end
or abort the process": a process that holds thousands of fds, or none to spare,
still creates, updates, checks and removes a Workspace's nftables table (libnftables
runs in the nftables helper process, netns/nft_helper.h). Driven through
netns-attach-tool, which links the same netns library as the agent. Root only."""
import os
import signal

import pytest

from attach_tool import AttachTool, public_policy
from lab import wait_for

PORT = 8080

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


def policy(lab, host):
    return public_policy(([lab.internet_v4(host) + "/32"], [(PORT, PORT)]))


def intercepted(lab, ws, host):
    """Whether a guest connection to inet host `host` reaches the tool's listener."""
    return lab.tcp_request(ws.guest, lab.internet_v4(host), PORT) == (True, f"ORIGDST {lab.internet_v4(host)} {PORT}")


def table_present(lab, ns):
    return "table inet kibotos" in lab.run(ns, "nft", "list", "tables").stdout


def test_nft_writes_work_with_more_than_5000_fds_open(lab):
    """Before the helper, libnftables' select() aborted the process here
    ("bit out of range 0 - FD_SETSIZE on fd_set")."""
    first = lab.add_workspace()
    tool = AttachTool(lab, first.path, policy(lab, 10))
    highest = int(tool.command("hold-fds 5200", "HOLDING").split()[1])
    assert highest > 5000, "the tool must hold fds numbered above 5,000"
    # Update, check, a second namespace attached and detached, all with the fds held.
    tool.update(policy(lab, 11))
    assert tool.check() == "ok"
    assert intercepted(lab, first, 11)
    second = lab.add_workspace()
    other = AttachTool(lab, second.path, policy(lab, 12))
    assert intercepted(lab, second, 12)
    other.detach()
    assert not table_present(lab, second.ws)
    tool.detach()
    assert not table_present(lab, first.ws)


def test_nft_writes_work_with_no_fd_left_in_the_process(lab):
    """Before the helper, libnftables called exit() when it could not open its netlink
    socket (EMFILE: "Unable to initialize Netlink socket")."""
    ws = lab.add_workspace()
    tool = AttachTool(lab, ws.path, policy(lab, 10))
    assert int(tool.command("exhaust-fds", "EXHAUSTED").split()[1]) > 0
    tool.update(policy(lab, 11))
    assert tool.proc.poll() is None
    assert lab.internet_v4(11) in lab.run(ws.ws, "nft", "list", "table", "inet", "kibotos").stdout
    # The tool itself has no fd to accept with (nor a netlink socket to check the
    # routing with) until it lets some go.
    tool.command("release-fds", "RELEASED")
    assert tool.check() == "ok"
    assert intercepted(lab, ws, 11)
    tool.detach()
    assert not table_present(lab, ws.ws)


def test_a_helper_that_ended_is_replaced_and_the_write_still_applies(lab):
    ws = lab.add_workspace()
    tool = AttachTool(lab, ws.path, policy(lab, 10))
    pid = int(tool.command("nft-helper", "NFT_HELPER").split()[1])
    assert pid > 0
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not os.path.exists(f"/proc/{pid}/cmdline") or
             open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=5, what="the helper to die")
    tool.update(policy(lab, 11))
    assert intercepted(lab, ws, 11)
    new_pid = int(tool.command("nft-helper", "NFT_HELPER").split()[1])
    assert new_pid > 0 and new_pid != pid
    # The replaced helper was reaped, not left a zombie.
    assert not os.path.exists(f"/proc/{pid}")
    tool.detach()


def test_the_helper_holds_only_its_own_few_fds_and_ends_with_the_process(lab):
    ws = lab.add_workspace()
    tool = AttachTool(lab, ws.path, policy(lab, 10))
    tool.command("hold-fds 2000", "HOLDING")
    tool.update(policy(lab, 11))
    pid = int(tool.command("nft-helper", "NFT_HELPER").split()[1])
    fds = os.listdir(f"/proc/{pid}/fd")
    assert len(fds) <= 8, f"helper fds: {fds}"
    # Back in its own namespace between requests: it keeps no guest namespace alive.
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    tool.kill()
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
             open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=5, what="the helper to end")
