"""Drives netns-attach-tool, the stand-in for the agent's data plane (see its source)."""
import json
import os
import queue
import subprocess
import threading
import time

BUILD_ROOT = os.environ.get("KIBOTOS_BUILD_ROOT", os.path.join(os.path.dirname(__file__), "../../../build"))
TOOL = os.path.join(BUILD_ROOT, "tests/integration/workspace/netns-attach-tool")

MARK = 0x6B696201
ROUTE_TABLE = 27497


def public_policy(*routes, resolvers=False):
    """routes: (destinations, ports) with ports a list of (first, last)."""
    policy = {"mode": "NETWORK_MODE_PUBLIC_INTERNET", "egresses": []}
    for i, (dests, ports) in enumerate(routes):
        policy["egresses"].append({
            "egressId": f"e{i}",
            "destinations": list(dests),
            "ports": [{"first": a, "last": b} for a, b in ports],
        })
    if resolvers:
        policy["resolvers"] = [{"udp": {"address": "10.0.0.53:53"}}]
    return policy


def isolated_policy(resolvers=False):
    policy = {"mode": "NETWORK_MODE_ISOLATED"}
    if resolvers:
        policy["resolvers"] = [{"udp": {"address": "10.0.0.53:53"}}]
    return policy


def remove_stale(ns_path):
    subprocess.run([TOOL, "--remove-stale", ns_path], check=True, capture_output=True, timeout=30)


def try_adopt(lab, ns_path, policy, note, loops=1):
    """Attachment::adopt with a note as a restarted agent would: (True, AttachTool
    serving the namespace) or (False, why not)."""
    tool = AttachTool(lab, ns_path, policy, loops=loops, adopt=note)
    return (True, tool) if tool.adopted is True else (False, tool.adopted)


class AttachTool:
    def __init__(self, lab, ns_path, policy, loops=1, pause_after_prepare=False, adopt=None):
        flags = ["--pause-after-prepare"] if pause_after_prepare else []
        if adopt:
            flags += ["--adopt", adopt]
        self.proc = lab.popen(None, TOOL, "--loops", loops, *flags, ns_path, json.dumps(policy),
                              stdin=subprocess.PIPE, text=True, bufsize=1)
        self.lines = queue.Queue()
        self.seen = []
        self.ports = None
        threading.Thread(target=self._read, daemon=True).start()
        self.adopted = None
        if adopt:
            got = self.expect("ADOPTED", timeout=15, also="NOT_ADOPTED")
            if got.startswith("NOT_ADOPTED"):
                self.adopted = got.split(" ", 1)[1]
                assert self.proc.wait(timeout=10) == 3
                return
            self.adopted = True
        if pause_after_prepare:
            self.expect("PREPARED", timeout=15)
        else:
            self._ready()

    def _ready(self):
        ready = self.expect("READY", timeout=15)
        self.ports = dict(kv.split("=") for kv in ready.split()[1:])

    def resume(self):
        """After pause_after_prepare: open the listeners and install the full table."""
        self.proc.stdin.write("continue\n")
        self.proc.stdin.flush()
        self._ready()

    def check(self):
        """'ok' or what the kernel no longer enforces."""
        return self.command("check", "CHECK").split(" ", 1)[1]

    def namespace_alive(self):
        return self.command("alive", "ALIVE") == "ALIVE 1"

    def families(self):
        """(enforced families as a list, error text or None)."""
        rest = self.command("families", "FAMILIES")[len("FAMILIES"):].strip()
        names, _, error = rest.partition("ERROR ")
        return names.split(), (error or None)

    def reinstall(self):
        """Attachment::reinstall: the table written and listed (check() then compares
        with that listing), the routing installed."""
        self.command("reinstall", "REINSTALLED")

    def repair(self):
        """One pass of the agent's repair: 'ok' or '<what changed> -> reinstalled|<error>'."""
        return self.command("repair", "REPAIR").split(" ", 1)[1]

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def note(self):
        """What a restarted agent may adopt (the --adopt argument), or None."""
        rest = self.command("note", "NOTE").split(" ", 1)[1]
        return None if rest == "none" else rest

    def expect(self, prefix, timeout=10, also=None):
        """Waits for the next line starting with prefix, or with also when given
        (other lines are kept in seen)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {prefix!r} from the tool; seen {self.seen}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"tool exited ({self.proc.wait()}): {self.proc.stderr.read()}")
            self.seen.append(line)
            if line.startswith(prefix) or (also and line.startswith(also)):
                return line

    def drain(self):
        """Every line printed so far."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return list(self.seen)
            if line is not None:
                self.seen.append(line)

    def command(self, line, expect):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.expect(expect)

    def update(self, policy):
        got = self.command("update " + json.dumps(policy), "UPDATED")
        self.ports = dict(kv.split("=") for kv in got.split()[1:])
        return got

    def detach(self):
        self.command("detach", "DETACHED")
        rc = self.proc.wait(timeout=30)
        # Non-zero also when a sanitizer reported at exit.
        assert rc == 0, f"tool exited {rc}: {self.proc.stderr.read()}"

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=10)
