"""The bench's Egress-side CPU per GB counts what the SOCKS server's processes used inside
the measured window only, also when a helper process ends within it (dante's do): its
parent's reaped-children time then carries the helper's whole life. Real processes, no
root needed."""
import os
import subprocess
import sys

import pytest
from kibotos_agent import SOURCE_ROOT  # tests/integration is on sys.path (conftest)

sys.path.insert(0, os.path.join(SOURCE_ROOT, "tests", "bench"))
from benchlib import peers  # noqa: E402

# A parent that forks one helper per line on stdin: the helper burns the given CPU
# seconds, says so, then waits for the next line before it ends; the parent reaps it.
SERVER = r"""
import os, sys, time
def burn(s):
    t = time.process_time()
    while time.process_time() - t < s:
        pass
for line in sys.stdin:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(w)
        burn(float(line))
        print(os.getpid(), flush=True)
        os.read(r, 1)
        os._exit(0)
    os.close(r)
    sys.stdin.readline()
    os.close(w)
    os.waitpid(pid, 0)
    print("reaped", flush=True)
"""


@pytest.fixture
def server():
    p = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    yield p
    p.kill()
    p.wait()


def ask(p, line):
    p.stdin.write(line + "\n")
    p.stdin.flush()
    return p.stdout.readline().strip()


def sample(pids):
    return peers.cpu_seconds_by_pid(pids, reaped_children=True)


def test_a_helper_that_ends_in_the_window_counts_only_its_time_in_it(server):
    helper = int(ask(server, "0.6"))  # 0.6 s burnt before the window
    before = sample([server.pid, helper])
    assert before[helper] >= 0.5
    assert ask(server, "") == "reaped"  # the helper ends and is reaped inside the window
    after = sample([server.pid, helper])
    assert helper not in after
    naive = sum(v - before.get(pid, 0.0) for pid, v in after.items())
    assert naive >= 0.5  # the parent's reaped-children time carries the helper's life
    assert peers.cpu_seconds_used(before, after) < 0.2


def test_a_helper_that_starts_and_ends_in_the_window_counts_whole(server):
    before = sample([server.pid])
    helper = int(ask(server, "0.4"))
    assert ask(server, "") == "reaped"
    after = sample([server.pid, helper])
    assert 0.35 <= peers.cpu_seconds_used(before, after) < 0.8
