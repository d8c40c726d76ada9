"""Issue 31, first contact: packaging/demo/kibotos-demo runs the main job in a throwaway
lab with the build's binaries (--build $KIBOTOS_BUILD_ROOT). What it prints shows the
guest's traffic at the destination from the Egress's address, the uncovered destination
reached from the guest's own, DNS through the Egress; and nothing of the lab is left
afterwards (namespaces, veth, route, processes, temporary directory, nftables tables in
the host's namespace), whether it ends by itself or by SIGINT in the middle."""
import os
import re
import selectors
import signal
import subprocess
import time

import pytest

import e2e_env as e2e
from kibotos_agent import SOURCE_ROOT

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)

DEMO = os.path.join(SOURCE_ROOT, "packaging", "demo", "kibotos-demo")
IP = e2e.labmod.IP


def demo_args(*extra):
    return ["/usr/bin/python3", DEMO, "--build", e2e.BUILD_ROOT, "--non-interactive", *extra]


def host_nft_tables():
    return subprocess.run(["nft", "list", "tables"], capture_output=True, text=True, check=True).stdout


class Leftovers:
    """What a demo run (process pid) would leave behind, read from its output: the
    names it builds from its pid, its 10.210.X.0/24 and its temporary directory."""

    def __init__(self, pid, output):
        self.pid = pid
        m = re.search(r"(10\.210\.\d+)\.0/24", output)
        self.subnet = m.group(1) + "." if m else None
        m = re.search(r"(/tmp/kibotos-demo-[^/\s]+)", output)
        self.tmp = m.group(1) if m else None

    def found(self):
        out = []
        netns = subprocess.run([IP, "netns", "list"], capture_output=True, text=True).stdout
        out += [f"namespace {line.split()[0]}" for line in netns.splitlines() if line.startswith(f"kdemo{self.pid}-")]
        if subprocess.run([IP, "link", "show", f"kd{self.pid}h"], capture_output=True).returncode == 0:
            out.append(f"link kd{self.pid}h")
        if self.subnet:
            routes = subprocess.run([IP, "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
            out += [f"route {line}" for line in routes.splitlines() if self.subnet in line]
        if self.tmp and os.path.exists(self.tmp):
            out.append(f"directory {self.tmp}")
        marks = [m for m in (self.tmp, f"kdemo{self.pid}-", self.subnet) if m]
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(m in cmdline for m in marks):
                out.append(f"process {entry}: {cmdline[:200]}")
        return out


def read_until(proc, pattern, timeout):
    """Output of proc until a line matches pattern (regex); fails at EOF or timeout."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    text, deadline = "", time.monotonic() + timeout
    while not re.search(pattern, text, re.M):
        left = deadline - time.monotonic()
        assert left > 0, f"no line matching {pattern!r} in {timeout}s:\n{text}"
        if sel.select(left):
            line = proc.stdout.readline()
            assert line, f"the demo ended (exit {proc.wait()}) before {pattern!r}:\n{text}"
            text += line
    return text


@pytest.mark.parametrize("socks", ["danted", "microsocks"])
def test_demo_shows_the_guest_leaving_through_the_egress_and_leaves_nothing_behind(socks):
    tables = host_nft_tables()
    proc = subprocess.Popen(demo_args("--duration", "2", "--socks", socks), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    lab = re.search(r"socks\s+\S+\s+\S+\s+SOCKS5 server \(" + socks + r"\), leaves from (\S+)", out)
    guest = re.search(r"guest\s+\S+\s+(\S+)\s+stands in for a VM", out)
    assert lab and guest, out
    egress_out, guest_addr = lab.group(1), guest.group(1)
    # Each kibotosctl command is printed as typed, then its output.
    for command in ("kibotosctl agent", "kibotosctl egress create --address", "kibotosctl workspace create --netns",
                    "kibotosctl workspace connections ws-", "kibotosctl workspace status ws-"):
        assert re.search(r"^\$ \S*" + re.escape(command), out, re.M), (command, out)
    covered = re.findall(r"^OK   covered   \S+: the destination saw (\S+) ", out, re.M)
    direct = re.findall(r"^OK   uncovered \S+: the destination saw (\S+) ", out, re.M)
    dns = re.findall(r"^OK   dns       \S+ -> \S+; the resolver saw the query from (\S+) ", out, re.M)
    # The tour's round, then at least one more of the 2 s loop.
    assert len(covered) >= 2 and set(covered) == {egress_out}, out
    assert len(direct) >= 2 and set(direct) == {guest_addr}, out
    assert len(dns) >= 2 and set(dns) == {egress_out}, out
    assert "FAIL" not in out, out
    # The held connection is listed, relayed through the Egress.
    assert re.search(r"RELAYING\s+\S+\s+" + re.escape(guest_addr) + r":\d+\s+\S+:80\s+eg-", out), out
    assert re.search(r'^  kibotos_egress_bytes_total\{workspace_id="ws-\w+",egress_id="eg-\w+",'
                     r'direction="from_guest"\} [1-9]', out, re.M), out
    assert "removed: " in out, out
    assert Leftovers(proc.pid, out).found() == []
    assert host_nft_tables() == tables


@pytest.mark.parametrize("when", [r"^== kibotos-agent", r"^OK   covered"], ids=["while_starting", "mid_run"])
def test_sigint_cleans_up_everything(when):
    tables = host_nft_tables()
    proc = subprocess.Popen(demo_args("--duration", "60"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        head = read_until(proc, when, timeout=60)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = head + rest
    assert proc.returncode == 130, out
    assert "interrupted" in out and "removed: " in out, out
    assert Leftovers(proc.pid, out).found() == []
    assert host_nft_tables() == tables


def test_demo_says_it_needs_root():
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *demo_args()],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1, proc
    assert "needs root" in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_a_demo_killed_with_sigkill_is_cleaned_up_by_the_next_one():
    tables = host_nft_tables()
    dead = subprocess.Popen(demo_args("--duration", "60"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        head = read_until(dead, r"^OK   covered", timeout=60)
        dead.kill()  # no cleanup: its agent, servers, namespaces, veth and route stay
        dead.wait(timeout=10)
        rest = dead.stdout.read()
    finally:
        if dead.poll() is None:
            dead.kill()
            dead.wait()
    left = Leftovers(dead.pid, head + rest)
    found = left.found()
    assert any(f.startswith("namespace ") for f in found) and any(f.startswith("process ") for f in found), found
    proc = subprocess.run(demo_args("--duration", "1"), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"removed what demo {dead.pid} left when it died: " in proc.stdout, proc.stdout
    assert left.found() == []
    assert not os.path.exists(f"/run/kibotos-demo/{dead.pid}.json")
    assert host_nft_tables() == tables
