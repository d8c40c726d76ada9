"""A guest's TCP connection, intercepted in its Workspace namespace, relayed through
a SOCKS5 Egress (dante, microsocks) end to end: auth, resets, half-close, bulk."""
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import dp_fixtures as dp  # noqa: E402

dp.labmod.require_root()

PORT = 9000


@pytest.fixture
def lab():
    with dp.labmod.Lab() as lab:
        yield lab


def make_env(lab, direct_descriptors):
    """A workspace, the bulk server in inet, and the harness; no Egress yet."""
    ws = lab.add_workspace()
    dst = lab.internet_v4(10)
    dp.start_bulk_server(lab, dst, PORT)
    h = dp.Harness(lab, "--direct-descriptors", str(direct_descriptors).lower())
    return lab, ws, h, dst


def with_dante(env):
    """env, with dante as Egress e1 (no auth) and the workspace attached to it."""
    lab, ws, h, dst = env
    dp.start_dante(lab)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    attach(h, lab, ws)
    return env


@pytest.fixture(params=["direct-descriptors", "plain-fds"])
def env(lab, request):
    """make_env, every test run twice: upstream sockets as io_uring direct descriptors
    (where this kernel has them), and as plain fds (older kernels, or when slots run
    out)."""
    return make_env(lab, request.param == "direct-descriptors")


def attach(h, lab, ws, egress="e1", drain=0, rev=1):
    h.cmd(f"workspace w{ws.index} {ws.path} {drain} {rev} {egress}={lab.internet_v4_cidr}")


@pytest.fixture
def through_dante(env):
    return with_dante(env)


def test_curl_through_dante_reaches_http_server(lab):
    ws = lab.add_workspace()
    dp.start_dante(lab)
    lab.start_http_server(lab.inet, lab.internet_v4(10), 8080, directory=os.path.dirname(__file__))
    h = dp.Harness(lab)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    attach(h, lab, ws)
    rc, body, err = dp.guest_curl(lab, ws, f"http://{lab.internet_v4(10)}:8080/test_relay.py")
    assert rc == 0, err
    assert "curl_through_dante" in body
    st = h.egress_status("w0", "e1")
    assert st["applied_revision"] == "1"


def test_server_sees_the_socks_server_not_the_guest(through_dante):
    lab, ws, h, dst = through_dante
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok, line
    assert line == f"PEER {lab.socks_inet_v4}"


def test_dante_with_user_password(env):
    lab, ws, h, dst = env
    dp.start_dante_with_user(lab, "kibuser", "s3cret", port=1082)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1082 user=kibuser pass=s3cret")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok and line == f"PEER {lab.socks_inet_v4}", line


def test_dante_wrong_password_resets_the_guest(env):
    lab, ws, h, dst = env
    dp.start_dante_with_user(lab, "kibuser", "s3cret", port=1082)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1082 user=kibuser pass=wrong")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "expect-reset", dst, PORT)
    assert ok, line
    assert "auth_failed" in h.egress_status("w0", "e1")["last_error"]


def test_microsocks_no_auth(env):
    lab, ws, h, dst = env
    dp.start_microsocks(lab, 1081)
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1081")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok and line == f"PEER {lab.socks_inet_v4}", line


def test_microsocks_with_user_password(env):
    lab, ws, h, dst = env
    dp.start_microsocks(lab, 1081, user="u1", password="p1")
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1081 user=u1 pass=p1")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "peer", dst, PORT)
    assert ok and line == f"PEER {lab.socks_inet_v4}", line


def test_unreachable_endpoint_resets_the_guest(env):
    lab, ws, h, dst = env
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1999")  # nothing listens there
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "expect-reset", dst, PORT)
    assert ok, line
    assert "connect" in h.egress_status("w0", "e1")["last_error"]


def test_socks_refusal_resets_the_guest_with_its_reason(through_dante):
    lab, ws, h, dst = through_dante
    ok, line = dp.guest(lab, ws, "expect-reset", dst, PORT + 1)  # closed port in inet
    assert ok, line
    err = h.egress_status("w0", "e1")["last_error"]
    assert err.startswith("dial failed: socks5: "), err


def test_half_close_client_shuts_writes_and_still_reads_the_reply(through_dante):
    lab, ws, h, dst = through_dante
    ok, line = dp.guest(lab, ws, "up", dst, PORT, 4)
    assert ok, line


def io_wq_workers(pid):
    """Names of the process's io_uring worker threads (io-wq: operations that cannot
    run inline, each handed to a kernel thread)."""
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except FileNotFoundError:
            continue  # the thread exited meanwhile
        if name.startswith("iou-wrk"):
            names.append(name)
    return names


def test_a_small_request_half_closed_reaches_the_server_without_an_io_wq_worker(through_dante):
    """The guest shuts its writes right after a small request, before the SOCKS
    server's side closed: the FIN must reach the server (it answers only at EOF) and
    the reply come back. On a direct descriptor the FIN goes by shutdown(2) on the
    slot's socket given a plain fd, not by IORING_OP_SHUTDOWN, which always runs in
    an io-wq worker thread (a thread hop per connection that half-closes first)."""
    lab, ws, h, dst = through_dante
    for _ in range(5):
        ok, line = dp.guest(lab, ws, "up", dst, PORT, 0)
        assert ok, line
    assert io_wq_workers(h.proc.pid) == []


def test_with_no_fd_left_a_half_close_still_reaches_the_server(lab):
    """As above, with the harness out of fds: its limit lowered to its lowest free fd
    number, so no new fd can be had (the multishot accept keeps the limit it was
    armed under, so the guest is still accepted). The slot's socket gets no plain
    fd, and the FIN goes by IORING_OP_SHUTDOWN in an io-wq worker instead (direct
    descriptors only: a plain-fd relay cannot even open its upstream socket then)."""
    lab, ws, h, dst = with_dante(make_env(lab, True))
    pid = h.proc.pid
    in_use = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    lowest_free = next(n for n in range(len(in_use) + 1) if n not in in_use)
    subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={lowest_free}:{lowest_free}"], check=True)
    assert io_wq_workers(pid) == []
    ok, line = dp.guest(lab, ws, "up", dst, PORT, 0)
    assert ok, line
    assert io_wq_workers(pid) != [], "the FIN went some other way than the io-wq fallback"


def test_one_gib_each_way_with_checksum(through_dante):
    lab, ws, h, dst = through_dante
    ok, line = dp.guest(lab, ws, "up", dst, PORT, 1024, timeout=180)
    assert ok, line
    ok, line = dp.guest(lab, ws, "down", dst, PORT, 1024, timeout=180)
    assert ok, line
    counts = h.cmd("counts", expect_ok=False)
    dp.wait_for(lambda: h.cmd("counts", expect_ok=False) == "active 0 draining 0", what=f"idle ({counts})")


def test_small_writes_are_not_held_for_the_guests_delayed_ack(through_dante):
    """Two small server writes 2 ms apart, no reply between them: a relay that let
    Nagle hold the second until the guest acknowledges the first (delayed ACK, 40 ms
    on Linux) would show a gap near 40 ms. Relayed, the gap stays near 2 ms."""
    lab, ws, h, dst = through_dante
    ok, line = dp.guest(lab, ws, "pairs", dst, PORT, 40)
    assert ok, line
    _, gap_ms, _, round_ms = line.split()
    assert float(gap_ms) < 20, line
    # A write left corked (MSG_MORE with nothing to follow) would wait for TCP's
    # 200 ms probe: rounds near 400 ms instead of 2-3.
    assert float(round_ms) < 100, line


@pytest.mark.parametrize("coalesce_ms", [200, 0])
def test_a_bulk_flow_coalesces_reads_only_right_after_a_burst(lab, coalesce_ms):
    """dataplane.splice_coalesce_us: once bytes flow by splice, a read that empties the
    source waits that long before the next one. A marker the server sends 5 ms after
    4 MiB arrives only when that wait ends (~195 ms); markers sent 500 ms apart find
    the flow dry-then-waiting for readability, and arrive at once. Off (0), every
    marker arrives at once."""
    ws = lab.add_workspace()
    dst = lab.internet_v4(10)
    dp.start_bulk_server(lab, dst, PORT)
    dp.start_dante(lab)
    h = dp.Harness(lab, "--splice-coalesce-us", str(coalesce_ms * 1000))
    h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
    attach(h, lab, ws)
    ok, line = dp.guest(lab, ws, "late", dst, PORT, 4)
    assert ok, line
    first, *rest = (float(x) for x in line.split()[1:])
    if coalesce_ms:
        assert first > 120, line
    else:
        assert first < 120, line
    assert all(t < 120 for t in rest), line


def test_a_fast_bulk_flow_is_not_held_back_by_its_gathering_waits(lab):
    """dataplane.splice_coalesce_us is the longest a bulk flow waits, not every wait,
    and the sender keeps sending while the relay waits. 512 MiB toward the guest,
    against the same with no waits in the same lab (~0.6 s here): each wait 32 ms
    long took 4.5 s; sized from what the previous wait gathered, 1.6 s (2.7x), the
    sender held to one window a wait by ACKs the kernel delayed (the unread bytes
    would shrink the window it advertises); with SO_RCVLOWAT at the wait's target,
    below which the kernel ACKs at once, ~1.0 s (1.7x)."""
    dst = lab.internet_v4(10)
    dp.start_bulk_server(lab, dst, PORT)
    dp.start_dante(lab)
    took = {}
    for us in ("0", "32000"):
        ws = lab.add_workspace()
        h = dp.Harness(lab, "--splice-coalesce-us", us)
        h.cmd(f"egress e1 1 0 {lab.socks_v4}:1080")
        attach(h, lab, ws)
        runs = []
        for _ in range(3):
            ok, line = dp.guest(lab, ws, "sink", dst, PORT, 512)
            assert ok, line
            runs.append(float(line.split()[2]))
        took[us] = sorted(runs)[1]
    assert took["32000"] < 2.2 * took["0"], took


def test_bytes_queued_behind_a_send_are_never_left_corked(through_dante):
    """The relay sends with MSG_MORE when the source has more queued; the bytes must
    all arrive at once when the source then goes quiet without a FIN (~2 ms here; a
    tail left corked waits for TCP's 200 ms probe)."""
    lab, ws, h, dst = through_dante
    took = []
    for _ in range(5):
        ok, line = dp.guest(lab, ws, "burst", dst, PORT, 200)
        assert ok, line
        took.append(float(line.split()[1]))
    assert sorted(took)[2] < 100, took
