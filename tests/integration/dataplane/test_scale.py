"""Many connections at once through one Egress on this small machine."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dp_fixtures as dp  # noqa: E402

dp.labmod.require_root()

PORT = 9000


@pytest.fixture
def env():
    with dp.labmod.Lab() as lab:
        ws = lab.add_workspace()
        dst = lab.internet_v4(10)
        dp.start_bulk_server(lab, dst, PORT)
        # dante: microsocks accepts too slowly for a burst of 2,000 (its listen
        # backlog overflows and handshakes stall past the timeout).
        dp.start_dante(lab, 1080)
        h = dp.Harness(lab)
        h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
        h.cmd(f"workspace w0 {ws.path} 0 1 e1={lab.internet_v4_cidr}")
        yield lab, ws, h, dst


def test_two_thousand_concurrent_connections_through_one_egress(env):
    lab, ws, h, dst = env
    fds0 = h.open_fds()
    assert h.slots_in_use() == 0
    # Each side of the lab needs fds for 2,000 sockets; ulimit is raised per process.
    p = lab.popen(ws.guest, "sh", "-c",
                  f"ulimit -n 16384 && exec {dp.PYTHON} {dp.HERE}/guest_client.py many {dst} {PORT} 2000 hold",
                  stdin=dp.subprocess.PIPE, stdout=dp.subprocess.PIPE, text=True, bufsize=1)
    line = p.stdout.readline().strip()
    if line != "HELD 2000":
        print(p.stderr.read() if p.poll() is not None else "", h.status("w0"))
    assert line == "HELD 2000"
    st = h.egress_status("w0", "e1")
    assert st["active_connections"] == "2000", st
    assert st["last_error"] == "", st
    # One fd per relayed connection, the guest's: each upstream socket is a direct
    # descriptor in its loop's ring (this kernel has them; the harness says so).
    assert h.slots_in_use() == 2000
    assert h.open_fds() - fds0 < 2100, (fds0, h.open_fds())
    p.stdin.close()
    p.wait(timeout=30)
    dp.wait_for(lambda: h.cmd("counts", expect_ok=False) == "active 0 draining 0", timeout=30,
                what="all closed")
    # Every slot and fd is given back.
    dp.wait_for(lambda: h.slots_in_use() == 0 and h.open_fds() <= fds0, timeout=10,
                what=f"slots and fds back (slots {h.slots_in_use()}, fds {h.open_fds()} vs {fds0})")
