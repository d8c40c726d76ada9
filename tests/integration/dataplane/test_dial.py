"""Dial-time rules: the Egress host is resolved on every dial and every address is
checked against the special-purpose table before connecting (DNS rebinding)."""
import os
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dp_fixtures as dp  # noqa: E402

dp.labmod.require_root()

PORT = 9000


@pytest.fixture
def env():
    with dp.labmod.Lab() as lab, tempfile.TemporaryDirectory(prefix="kib-dns-") as tmp:
        ws = lab.add_workspace()
        dst = lab.internet_v4(10)
        dp.start_bulk_server(lab, dst, PORT)
        dp.start_dante(lab)
        answer = os.path.join(tmp, "answer")
        with open(answer, "w") as f:
            f.write(lab.socks_v4)
        lab.popen(lab.socks, dp.PYTHON, os.path.join(dp.HERE, "tiny_dns.py"), lab.socks_v4, 5353, answer)
        h = dp.Harness(lab, "--resolver", f"{lab.socks_v4}:5353")
        h.cmd("egress e1 1 0 socks.test:1080")
        h.cmd(f"workspace w0 {ws.path} 0 1 e1={lab.internet_v4_cidr}")
        yield lab, ws, h, dst, answer


def test_hostname_endpoint_is_resolved_at_dial_time(env):
    lab, ws, h, dst, answer = env
    ok, line = dp.wait_for(lambda: (lambda r: r if r[0] else None)(dp.guest(lab, ws, "peer", dst, PORT)),
                           what="first dial through socks.test")
    assert line == f"PEER {lab.socks_inet_v4}"


def test_hostname_resolving_to_a_special_purpose_address_is_refused(env):
    lab, ws, h, dst, answer = env
    with open(answer, "w") as f:
        f.write("127.0.0.1")  # loopback: special purpose, not exempted by the lab config
    ok, line = dp.guest(lab, ws, "expect-reset", dst, PORT)
    assert ok, line
    err = h.egress_status("w0", "e1")["last_error"]
    assert "127.0.0.1" in err, err
    with open(answer, "w") as f:
        f.write(lab.socks_v4)
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok and line == f"PEER {lab.socks_inet_v4}", line
