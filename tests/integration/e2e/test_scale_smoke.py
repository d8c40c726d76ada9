"""Issue 26, the CI scale smoke: one agent with >= 300 Workspaces (each a fresh bare
namespace, half with a resolver) and >= 2,000 held relayed guest connections, more than
5,000 fds in all (read from /proc/PID/fd); at that count it creates, updates and deletes
Workspaces. Every Workspace is enforced (status without error), the agent stays up; killed
(-9) and started again it adopts every namespace without writing a table; and after the
deletes nothing is left in any namespace (no `table inet kibotos`, no agent ip rule).

libnftables 1.0.6 waits for netlink answers with select(): with the agent past 1,024
fds its next nft write aborts the process (`bit out of range 0 - FD_SETSIZE on
fd_set`), so this test fails until no nft write of the agent depends on fd numbers."""
import concurrent.futures
import os
import resource
import signal
import subprocess
import sys
import time
import types

import pytest

import e2e_env as e2e

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import netns_pool  # noqa: E402
import proc_handles  # noqa: E402

if os.geteuid() != 0:
    pytest.skip("needs root (network namespaces, nftables)", allow_module_level=True)

# KIB_SCALE_SMOKE=WORKSPACES,CONNECTIONS,FD_TARGET (development only: e.g. 40,300,800
# runs every step below libnftables' 1,024-fd abort).
_small = [int(x) for x in os.environ.get("KIB_SCALE_SMOKE", "").split(",") if x]
WORKSPACES = _small[0] if _small else 300  # attached before the connections
MORE = 20               # created, then deleted, past FD_TARGET
UPDATED = 30            # scale Workspaces whose policy is updated past FD_TARGET
MIN_CONNECTIONS = _small[1] if _small else 2000
FD_TARGET = _small[2] if _small else 5000  # the agent's fds must exceed this
FD_AIM = FD_TARGET + (50 if _small else 300)  # what the held connections are sized to reach
NOFILE = 65536
HOLD_PORT = 9001
WORKERS = 4             # concurrent API clients for creates and updates

# A destination in inet that answers "HOLD\n" with "HELD\n" and keeps every connection
# open until its client closes it; one thread, epoll.
HOLD_SERVER = r"""
import resource, selectors, socket, sys
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind((sys.argv[1], int(sys.argv[2])))
ls.listen(4096)
ls.setblocking(False)
sel = selectors.DefaultSelector()
sel.register(ls, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        if key.fileobj is ls:
            for _ in range(256):
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    break
                c.setblocking(False)
                sel.register(c, selectors.EVENT_READ)
            continue
        c = key.fileobj
        try:
            data = c.recv(64)
        except OSError:
            data = b""
        if not data:
            sel.unregister(c)
            c.close()
        elif b"\n" in data:
            c.send(b"HELD\n")
"""

# In the guest: N connections to ADDR:PORT, at most 128 handshakes at a time, each
# confirmed end to end ("HOLD" -> "HELD"), within MAX_S seconds; prints
# "HELD <held> <failed>", holds them until a line on stdin, closes them.
HOLD_CLIENT = r"""
import errno, resource, selectors, socket, sys, time
addr, port, n, max_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
sel = selectors.DefaultSelector()
held, failed, started, pending = [], 0, 0, 0
deadline = time.monotonic() + max_s
def fail(s):
    global failed, pending
    sel.unregister(s); s.close(); failed += 1; pending -= 1
while len(held) + failed < n and time.monotonic() < deadline:
    while pending < 128 and started < n:
        started += 1
        s = socket.socket()
        s.setblocking(False)
        if s.connect_ex((addr, port)) not in (0, errno.EINPROGRESS):
            s.close(); failed += 1
            continue
        sel.register(s, selectors.EVENT_WRITE, [b"", False])
        pending += 1
    for key, _ in sel.select(0.1):
        s, st = key.fileobj, key.data
        if not st[1]:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                fail(s); continue
            s.send(b"HOLD\n"); st[1] = True
            sel.modify(s, selectors.EVENT_READ, st)
            continue
        try:
            data = s.recv(16)
        except OSError:
            data = b""
        if not data:
            fail(s); continue
        st[0] += data
        if st[0] == b"HELD\n":
            sel.unregister(s); held.append(s); pending -= 1
        elif len(st[0]) >= 5:
            fail(s)
print("HELD", len(held), failed, flush=True)
sys.stdin.readline()
for s in held:
    s.close()
"""


def start_hold_lab(lab):
    """The destinations, the hold server on the covered one (HOLD_PORT), dante on 1080;
    returns the agent config for thousands of connections."""
    e2e.start_destinations(lab)
    lab.popen(lab.inet, e2e.dp.PYTHON, "-c", HOLD_SERVER, e2e.covered(lab), HOLD_PORT)
    e2e.labmod.wait_for(lambda: lab.tcp_request(lab.inet, e2e.covered(lab), HOLD_PORT, timeout=0.5,
                                                read=False)[0], timeout=10, what="the hold server")
    e2e.dp.start_dante(lab, 1080)
    config = e2e.agent_config(lab)
    config["log"] = {"level": "info"}  # debug: a line per connection, thousands here
    return config


def log(msg):
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@pytest.fixture
def nofile():
    """The test process's RLIMIT_NOFILE raised before anything is started: the agent,
    dante, the servers and the guest's holder inherit it (a multishot accept keeps the
    limit it was armed under, so the agent's must be raised before its listeners)."""
    saved = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (saved[1], saved[1]))
    got = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if got < FD_AIM + 1000:
        pytest.fail(f"RLIMIT_NOFILE hard limit {saved[1]} (and no CAP_SYS_RESOURCE to raise it): the agent "
                    f"cannot reach {FD_TARGET} fds here")
    yield got
    resource.setrlimit(resource.RLIMIT_NOFILE, saved)


@pytest.fixture
def pool():
    netns_pool.remove_stale("kbsc")
    p = netns_pool.NetnsPool("kbsc")
    try:
        yield p
    finally:
        p.remove_all()


def list_all(agent):
    """Every Workspace (ListWorkspaces, pages of 1,000; bounded)."""
    out, token = [], ""
    for _ in range(100):
        req = {"pageSize": 1000}
        if token:
            req["pageToken"] = token
        body = e2e.ok(e2e.call(agent, e2e.WORKSPACE + "ListWorkspaces", req))
        out += e2e.field(body, "workspaces", []) or []
        token = e2e.field(body, "next_page_token", "")
        if not token:
            return out
    raise AssertionError("ListWorkspaces: more than 100 pages")


def not_enforced(workspaces):
    """{workspace_id: why} for each Workspace whose status is not its policy's revision
    without error."""
    bad = {}
    for w in workspaces:
        st = e2e.field(w, "network_policy_status", {}) or {}
        want = e2e.num(e2e.field(w, "network_policy"), "revision")
        if e2e.field(st, "error") or e2e.num(st, "applied_revision") != want:
            bad[e2e.field(w, "workspace_id")] = (want, e2e.num(st, "applied_revision"), e2e.field(st, "error"))
    return bad


def wait_all_enforced(agent, count, timeout):
    def done():
        ws = list_all(agent)
        return len(ws) == count and not not_enforced(ws)
    try:
        e2e.labmod.wait_for(done, timeout=timeout, interval=0.5, what=f"{count} Workspaces enforced")
    except TimeoutError:
        ws = list_all(agent)
        bad = not_enforced(ws)
        raise AssertionError(f"{len(ws)} Workspaces (want {count}), {len(bad)} not enforced, e.g. "
                             f"{list(bad.items())[:5]}; agent alive: {agent.alive()}\n{agent.log()[-3000:]}")


def extra_destination(lab):
    """Not next to covered(lab): nft would merge the two /32s into one /31."""
    return lab.internet_v4(12)


def scale_policy(lab, egress_id, i, extra=False):
    """A PUBLIC_INTERNET policy with one Egress route; a tcp Resolver through the same
    Egress for every other Workspace. extra: one more destination (the update)."""
    dests = [e2e.covered(lab) + "/32"] + ([extra_destination(lab) + "/32"] if extra else [])
    pol = e2e.policy((egress_id, dests))
    if i % 2:
        pol["resolvers"] = [{"tcp": {"address": f"{lab.internet_v4(53)}:53"}, "egressId": egress_id}]
    return pol


def create_many(agent, lab, egress_id, paths, first_index):
    def one(k):
        i, path = k
        body = e2e.ok(e2e.create_workspace(agent, path, scale_policy(lab, egress_id, i)))
        return e2e.field(body["workspace"], "workspace_id")
    try:
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as ex:
            return list(ex.map(one, enumerate(paths, first_index)))
    except (OSError, AssertionError) as e:
        raise AssertionError(f"CreateWorkspace: {type(e).__name__}: {e}; agent alive: {agent.alive()}; "
                             f"its log:\n{agent.log()[-3000:]}") from e


def hold(lab, ws, n, max_s=120):
    p = lab.popen(ws.guest, e2e.dp.PYTHON, "-c", HOLD_CLIENT, e2e.covered(lab), HOLD_PORT, n, max_s,
                  stdin=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    assert line[:1] == ["HELD"], (line, p.poll())
    return p, int(line[1]), int(line[2])


def fds(agent):
    return proc_handles.open_fds(agent.proc.pid)


def list_all_connections(agent, wid, total):
    """Issue 29: the live view pages through every held connection, each once, in
    pages of 1,000; logs the slowest page (the loops walk their lists, unlocked)."""
    seen, token, slowest, deepest = [], "", 0.0, ""
    for _ in range(total // 1000 + 2):
        deepest = token or deepest
        t = time.monotonic()
        body = e2e.ok(e2e.call(agent, e2e.WORKSPACE + "ListConnections",
                               {"workspaceId": wid, "pageSize": 1000, "pageToken": token}))
        slowest = max(slowest, time.monotonic() - t)
        seen += [int(e2e.field(c, "connection_id")) for c in e2e.field(body, "connections", [])]
        token = e2e.field(body, "next_page_token", "")
        if not token:
            break
    assert len(seen) == total and seen == sorted(set(seen)), (len(seen), total)

    def timed(request, n=100):
        ms = []
        for _ in range(n):
            t = time.monotonic()
            e2e.ok(e2e.call(agent, e2e.WORKSPACE + "ListConnections", request))
            ms.append((time.monotonic() - t) * 1000)
        ms.sort()
        return f"median {ms[n // 2]:.1f} ms, p99 {ms[n * 99 // 100]:.1f} ms, max {ms[-1]:.1f} ms"
    # Pages of the default size (100): the first, and the one after the deepest walk.
    last = {"workspaceId": wid, "pageToken": deepest}
    log(f"ListConnections: {total} connections in pages of 1,000, slowest page {slowest * 1000:.0f} ms; "
        f"first page of 100: {timed({'workspaceId': wid})}; the page of 100 after the last token: {timed(last)}")


def test_300_workspaces_and_held_connections_past_5000_fds_then_create_update_delete(lab, agent_factory,
                                                                                     nofile, pool):
    t0 = time.monotonic()
    ws = lab.add_workspace()
    config = start_hold_lab(lab)
    config["dataplane"] = {"max_connections": 20000, "max_connections_per_workspace": 20000}
    agent = agent_factory(config=config)
    pid = agent.proc.pid
    assert int(open(f"/proc/{pid}/limits").read().split("Max open files")[1].split()[0]) >= FD_AIM + 1000

    # The Workspace the guest's connections go through.
    egress, main = e2e.attach(types.SimpleNamespace(lab=lab, ws=ws, agent=agent, socks=f"{lab.socks_v4}:1080"))
    eid, main_id = e2e.field(egress, "egress_id"), e2e.field(main, "workspace_id")
    base_fds = fds(agent)

    # 300 Workspaces, each a fresh namespace.
    paths = pool.add(WORKSPACES)
    log(f"setup {time.monotonic() - t0:.1f} s; agent fds {base_fds}; creating {WORKSPACES} Workspaces")
    t = time.monotonic()
    ids = create_many(agent, lab, eid, paths, 0)
    assert agent.alive(), agent.log()[-4000:]
    wait_all_enforced(agent, WORKSPACES + 1, timeout=120)
    ws_fds = fds(agent)
    log(f"{WORKSPACES} Workspaces enforced in {time.monotonic() - t:.1f} s; agent fds {ws_fds} "
        f"({(ws_fds - base_fds) / WORKSPACES:.1f} per Workspace)")

    # Held connections: at least 2,000, and enough to take the agent past 5,000 fds.
    holders = []
    try:
        want = max(MIN_CONNECTIONS, FD_AIM - ws_fds)
        t = time.monotonic()
        p, held, failed = hold(lab, ws, want)
        holders.append(p)
        assert (held, failed) == (want, 0), f"held {held} of {want}, {failed} failed\n{agent.log()[-3000:]}"
        total = held
        if fds(agent) <= FD_AIM - 100:  # each connection took less than an fd: top up once
            more = FD_AIM - fds(agent)
            p, held, failed = hold(lab, ws, more)
            holders.append(p)
            assert (held, failed) == (more, 0), (held, more, failed)
            total += held
        now = fds(agent)
        log(f"{total} connections held in {time.monotonic() - t:.1f} s; agent fds {now}")
        assert now > FD_TARGET, f"the agent holds {now} fds, not more than {FD_TARGET}"
        st = e2e.egress_status(e2e.policy_status(agent, main_id), eid)
        assert e2e.num(st, "active_connections") == total, st
        list_all_connections(agent, main_id, total)

        # Past 5,000 fds: create, update and delete Workspaces (each an nft write).
        t = time.monotonic()
        more_paths = pool.add(MORE)
        more_ids = create_many(agent, lab, eid, more_paths, WORKSPACES)
        assert fds(agent) > FD_TARGET
        main = e2e.get_workspace(agent, main_id)
        e2e.update_policy(agent, main, e2e.policy((eid, [e2e.covered(lab) + "/32", lab.internet_v4(11) + "/32"])))

        def update(k):
            i, wid = k
            w = e2e.get_workspace(agent, wid)
            e2e.update_policy(agent, w, scale_policy(lab, eid, i, extra=True))
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as ex:
            list(ex.map(update, enumerate(ids[:UPDATED])))
        assert fds(agent) > FD_TARGET
        for wid in more_ids:
            e2e.ok(e2e.delete_workspace(agent, wid))
        assert agent.alive(), agent.log()[-4000:]
        log(f"created {MORE}, updated {UPDATED + 1}, deleted {MORE} past {FD_TARGET} fds in "
            f"{time.monotonic() - t:.1f} s; agent fds {fds(agent)}")
        wait_all_enforced(agent, WORKSPACES + 1, timeout=60)
        for wid, i in ((main_id, 1), *((w, i) for i, w in enumerate(ids[:UPDATED]))):
            w = e2e.get_workspace(agent, wid)
            assert e2e.num(e2e.field(w, "network_policy"), "revision") == 2, w
        # The updates ran on several clients at once (writes of different Workspaces
        # apply in parallel): each namespace's table is its own new policy.
        extra = extra_destination(lab)
        stale = [p for p in paths[:UPDATED]
                 if extra not in netns_pool.run_in(p, "nft list table inet kibotos").stdout]
        assert not stale, stale[:5]
        # The held connections survived all of it, and new ones are still relayed.
        st = e2e.egress_status(e2e.policy_status(agent, main_id), eid)
        assert e2e.num(st, "active_connections") == total, st
        assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
        gone = [p for p in more_paths if netns_pool.leftovers(p)]
        assert not gone, {p: netns_pool.leftovers(p) for p in gone[:5]}
    finally:
        for p in holders:
            if p.poll() is None:
                p.stdin.write("\n")
                p.stdin.flush()
        for p in holders:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    # kill -9 and a start on the same state dir: every namespace is adopted as the
    # killed agent left it (in parallel, before the ordered attach), none has its
    # table written again, and all are enforced.
    agent.stop(signal.SIGKILL)
    t = time.monotonic()
    agent.start(timeout=120)
    wait_all_enforced(agent, WORKSPACES + 1, timeout=120)
    log(f"killed and started again: {WORKSPACES + 1} enforced after {time.monotonic() - t:.1f} s")
    rewritten = [line for line in agent.log().splitlines() if "writing its rules again" in line]
    assert not rewritten, rewritten[:5]
    assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4

    # Everything deleted: nothing left behind in any namespace.
    t = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(WORKERS) as ex:
        list(ex.map(lambda wid: e2e.ok(e2e.delete_workspace(agent, wid)), ids + [main_id]))
    assert list_all(agent) == []
    left = {p: why for p in paths + [ws.path] if (why := netns_pool.leftovers(p))}
    assert not left, dict(list(left.items())[:5])
    log(f"deleted {len(ids) + 1} in {time.monotonic() - t:.1f} s; agent fds {fds(agent)}; "
        f"total {time.monotonic() - t0:.1f} s")
    e2e.assert_clean_exit(agent)

