"""Change notifications (netns/change_watch.h): what makes the agent's repair check a
namespace. A change to what the agent installs (its nftables table, policy-routing
rules and table, links, lo) is reported; an idle namespace, a change to what the agent
does not install, and a change in another namespace are not. Root only; each test
creates its namespaces and removes them even on failure. Notifications are queued
before the command that caused them returns, so each poll follows its command at once."""
import os
import subprocess

import pytest

from attach_tool import BUILD_ROOT, MARK, ROUTE_TABLE
from lab import IP

TOOL = os.path.join(BUILD_ROOT, "tests/integration/workspace/netns-change-watch-tool")

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)


class Watch:
    def __init__(self, lab, *names):
        paths = [f"/run/netns/{n}" for n in names]
        self.proc = lab.popen(None, TOOL, *paths, stdin=subprocess.PIPE, text=True, bufsize=1)
        assert self._line() == "READY", self.proc.stderr.read()

    def _line(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"tool exited ({self.proc.wait()}): {self.proc.stderr.read()}")
        return line.rstrip("\n")

    def poll(self, command="poll"):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._line()

    def generation(self):
        """The first namespace's nftables generation, read now."""
        line = self.poll("gen")
        assert line.startswith("GEN "), line
        return int(line.split()[1])


@pytest.fixture
def ns(lab):
    return lab.add_namespace("watched")


@pytest.fixture
def watch(lab, ns):
    w = Watch(lab, ns)
    assert w.poll() == "QUIET"  # opening it reports nothing
    return w


def nft(lab, ns, *args):
    lab.run(ns, "nft", *args)


def ip(lab, ns, *args):
    lab.run(ns, IP, *args)


def test_an_idle_namespace_reports_nothing(lab, ns, watch):
    for _ in range(3):
        assert watch.poll() == "QUIET"
    # Reading its state changes nothing.
    lab.kernel_state(ns)
    assert watch.poll() == "QUIET"


@pytest.mark.parametrize("change", [
    ["add", "table", "inet", "kibotos"],
    ["flush", "ruleset"],
    ["flush", "table", "inet", "kibotos"],
    ["add", "chain", "inet", "kibotos", "other"],
    ["insert", "rule", "inet", "kibotos", "output", "accept"],
    ["delete", "table", "inet", "kibotos"],
], ids=["add table", "flush ruleset", "flush table", "add chain", "insert rule", "delete table"])
def test_a_change_to_the_agents_nftables_table_is_reported_once(lab, ns, watch, change):
    if change[0] != "add" or change[1] != "table":
        nft(lab, ns, "add", "table", "inet", "kibotos")
        nft(lab, ns, "add", "chain", "inet", "kibotos", "output",
            "{ type filter hook output priority 0; }")
        nft(lab, ns, "add", "rule", "inet", "kibotos", "output", "counter")
        assert watch.poll() == "CHANGED 0:nft"
    nft(lab, ns, *change)
    assert watch.poll() == "CHANGED 0:nft"
    assert watch.poll() == "QUIET"  # drained


def test_a_report_names_the_generation_its_transaction_ended_at(lab, ns, watch):
    """What lets the repair skip the check its own write's report asks for: the report
    names the generation the kernel reports right after that write."""
    nft(lab, ns, "add", "table", "inet", "kibotos")
    assert watch.poll("poll-gen") == f"CHANGED 0:nft@{watch.generation()}"
    nft(lab, ns, "add", "chain", "inet", "kibotos", "c")
    first = watch.generation()
    nft(lab, ns, "add", "table", "inet", "guestfw")  # not ours, but it moves the generation
    assert first + 1 == watch.generation()
    assert watch.poll("poll-gen") == f"CHANGED 0:nft@{first + 1}"
    lab.run(ns, "nft", "-f", "-", input="add chain inet kibotos d\nadd chain inet kibotos e\n")  # one transaction
    assert watch.poll("poll-gen") == f"CHANGED 0:nft@{first + 2}"
    assert watch.poll("poll-gen") == "QUIET"


def test_nftables_changes_elsewhere_are_not_reported(lab, ns, watch):
    nft(lab, ns, "add", "table", "inet", "guestfw")
    nft(lab, ns, "add", "chain", "inet", "guestfw", "input", "{ type filter hook input priority 0; }")
    nft(lab, ns, "add", "rule", "inet", "guestfw", "input", "accept")
    nft(lab, ns, "add", "table", "ip", "kibotos")  # same name, another family
    nft(lab, ns, "flush", "table", "inet", "guestfw")
    assert watch.poll() == "QUIET"


@pytest.mark.parametrize("family", ["-4", "-6"])
def test_policy_routing_changes_are_reported(lab, ns, watch, family):
    default = "0.0.0.0/0" if family == "-4" else "::/0"
    ip(lab, ns, family, "rule", "add", "fwmark", hex(MARK), "lookup", ROUTE_TABLE, "priority", 100)
    assert watch.poll() == "CHANGED 0:routing"
    ip(lab, ns, family, "route", "add", "local", default, "dev", "lo", "table", ROUTE_TABLE)
    assert watch.poll() == "CHANGED 0:routing"
    ip(lab, ns, family, "route", "del", "local", default, "dev", "lo", "table", ROUTE_TABLE)
    assert watch.poll() == "CHANGED 0:routing"
    ip(lab, ns, family, "rule", "flush")
    assert watch.poll() == "CHANGED 0:routing"
    assert watch.poll() == "QUIET"


def test_routes_of_other_tables_are_not_reported(lab, ns, watch):
    ip(lab, ns, "-4", "route", "add", "10.99.0.0/16", "dev", "lo")
    ip(lab, ns, "-4", "route", "add", "10.98.0.0/16", "dev", "lo", "table", ROUTE_TABLE + 1)
    ip(lab, ns, "-6", "route", "add", "fd00:99::/64", "dev", "lo")
    assert watch.poll() == "QUIET"


def test_lo_going_down_is_reported(lab, ns, watch):
    # IPv4 drops lo's routes then without a RTM_DELROUTE.
    ip(lab, ns, "link", "set", "lo", "down")
    assert watch.poll() == "CHANGED 0:routing"


def test_an_interface_coming_and_ipv6_turned_off_on_lo_are_reported(lab, ns, watch):
    ip(lab, ns, "link", "add", "kibv0", "type", "veth", "peer", "name", "kibv1")
    assert watch.poll() == "CHANGED 0:routing"
    lab.run(ns, "sysctl", "-qw", "net.ipv6.conf.lo.disable_ipv6=1")  # ::1 goes
    assert watch.poll() == "CHANGED 0:routing"
    ip(lab, ns, "-4", "addr", "add", "10.97.0.1/24", "dev", "kibv0")  # not lo's
    assert watch.poll() == "QUIET"


def test_lost_notifications_count_as_a_change(lab, ns, watch):
    # Far more notifications than the socket queues (routes of another table: each
    # one alone would not count), so some are lost: what was lost may have mattered.
    batch = "".join(f"route add 10.{i // 256}.{i % 256}.0/24 dev lo\n" for i in range(4000))
    lab.run(ns, IP, "-batch", "-", input=batch)
    assert watch.poll() == "CHANGED 0:routing"
    assert watch.poll() == "QUIET"


def test_a_change_is_reported_for_its_namespace_only(lab):
    a, b = lab.add_namespace("wa"), lab.add_namespace("wb")
    w = Watch(lab, a, b)
    assert w.poll() == "QUIET"
    nft(lab, b, "add", "table", "inet", "kibotos")
    assert w.poll() == "CHANGED 1:nft"
    ip(lab, a, "-4", "rule", "add", "fwmark", hex(MARK), "lookup", ROUTE_TABLE, "priority", 100)
    assert w.poll() == "CHANGED 0:routing"
    nft(lab, a, "add", "table", "inet", "kibotos")
    nft(lab, b, "delete", "table", "inet", "kibotos")
    assert w.poll() == "CHANGED 0:nft 1:nft"
    ip(lab, b, "-4", "rule", "add", "fwmark", hex(MARK), "lookup", ROUTE_TABLE, "priority", 100)
    nft(lab, b, "add", "table", "inet", "kibotos")
    assert w.poll() == "CHANGED 1:nft+routing"
    assert w.poll() == "QUIET"
