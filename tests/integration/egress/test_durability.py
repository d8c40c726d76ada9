"""A write that answered OK survives kill -9, and command IDs survive restarts."""
import random
import threading
import time

import pytest

from egress_calls import CONFIG, command_id, create, get, revision, spec, update


@pytest.fixture
def egress_agent(agent_factory):
    return agent_factory(config=CONFIG)


def test_retry_after_restart_with_a_stale_expected_revision_returns_the_same_success(egress_agent):
    a = egress_agent
    status, body = create(a, spec())
    assert status == 200, body
    eid = body["egress"]["egressId"]
    cid = command_id("update-retry")
    status, first = update(a, eid, 1, spec("203.0.113.6:1080"), cid=cid, drain=30)
    assert status == 200, first
    assert revision(first["egress"]) == 2
    a.kill9()
    a.start()
    status, again = update(a, eid, 1, spec("203.0.113.6:1080"), cid=cid, drain=30)  # 1 is stale now
    assert status == 200, again
    assert again == first
    status, now = get(a, eid)
    assert revision(now["egress"]) == 2
    # The same ID with a different request is invalid_argument, also after the restart.
    status, body = update(a, eid, 2, spec("203.0.113.7:1080"), cid=cid)
    assert (status, body["code"]) == (400, "invalid_argument")


def test_every_acknowledged_write_survives_kill_9(egress_agent):
    """Writes run in a loop while the agent is killed with SIGKILL at random moments.
    After each restart: every acknowledged create exists, every acknowledged update
    is there (or a later one), and a retry of each unanswered command with its command
    ID settles it exactly once."""
    a = egress_agent
    rng = random.Random(1202)
    created = {}        # command id -> egress id (acknowledged creates)
    acked_rev = {}      # egress id -> (revision, address) of the last acknowledged update
    unanswered = []     # (kind, request args) whose outcome is unknown
    create_commands = set()

    def one_write(stop):
        if not created or rng.random() < 0.4:
            cid = command_id("create")
            create_commands.add(cid)
            try:
                status, body = create(a, spec(), cid=cid)
            except Exception:  # OSError, or http.client's errors for a cut response
                unanswered.append(("create", cid))
                stop.set()  # the agent is gone: this one is in doubt, stop writing
                return
            if status != 200:
                unanswered.append(("create", cid))
                return
            created[cid] = body["egress"]["egressId"]
        else:
            eid = rng.choice(sorted(created.values()))
            status, body = get(a, eid)
            if status != 200:
                return
            rev = revision(body["egress"])
            addr = "203.0.113.%d:%d" % (rng.randrange(1, 250), rng.randrange(1, 65535))
            cid = command_id("update")
            try:
                status, body = update(a, eid, rev, spec(addr), cid=cid, drain=0)
            except Exception:
                unanswered.append(("update", (cid, eid, rev, addr)))
                stop.set()
                return
            if status == 200:
                acked_rev[eid] = (revision(body["egress"]), addr)

    deadline = time.monotonic() + 120
    for cycle in range(6):
        assert time.monotonic() < deadline
        stop = threading.Event()

        def writer():
            n = 0
            while not stop.is_set() and n < 400:
                n += 1
                try:
                    one_write(stop)
                except OSError:
                    pass
                except Exception:  # a connection cut mid-response (http.client errors)
                    pass

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(rng.uniform(0.05, 0.6))
        a.kill9()
        stop.set()
        t.join(30)
        assert not t.is_alive()
        a.start()

        for cid, eid in created.items():
            status, body = get(a, eid)
            assert status == 200, (cid, eid, body)
        for eid, (rev, addr) in acked_rev.items():
            status, body = get(a, eid)
            assert status == 200
            cur = revision(body["egress"])
            assert cur >= rev
            if cur == rev:
                assert body["egress"]["spec"]["socks5"]["address"] == addr

    print("acknowledged creates %d, updates %d, unanswered %d" % (len(created), len(acked_rev), len(unanswered)))
    assert len(created) >= 10  # the loop did real work between the kills
    # Settle every unanswered command by retrying it with its command ID.
    for kind, args in unanswered:
        if kind == "create":
            status, body = create(a, spec(), cid=args)
            assert status == 200, body
            created[args] = body["egress"]["egressId"]
        else:
            cid, eid, rev, addr = args
            status, body = update(a, eid, rev, spec(addr), cid=cid, drain=0)
            assert status in (200, 409), body  # its first outcome: done, or lost a CAS race
    # Each create command made exactly one Egress: none lost, none doubled.
    status, body = a.call("kibotos.ctrl.v1.EgressService/ListEgresses", {"pageSize": 1000})
    assert status == 200
    ids = [e["egressId"] for e in body.get("egresses", [])]
    assert len(ids) == len(set(ids))
    assert sorted(ids) == sorted(set(created.values()))
    assert len(create_commands) == len(created)


# ---------------------------------------------------------------------------------------
# kill -9 at scale: concurrent Egress and Workspace writers, the agent killed at random
# moments, every acknowledged write and its command-ID replay checked after each restart.

import os  # noqa: E402
import subprocess  # noqa: E402

WORKSPACE = "kibotos.ctrl.v1.WorkspaceService/"
EGRESS = "kibotos.ctrl.v1.EgressService/"
KILL9_WRITERS = 4
KILL9_NETNS_PER_WRITER = 2


@pytest.fixture
def kill9_netns():
    """Throwaway network namespaces (paths /run/netns/NAME), deleted at teardown even
    when the test fails."""
    if os.geteuid() != 0:
        pytest.skip("needs root (ip netns add)")
    names = []
    try:
        for i in range(KILL9_WRITERS * KILL9_NETNS_PER_WRITER):
            name = "k9-%d-%d" % (os.getpid(), i)
            subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
            names.append(name)
        yield ["/run/netns/" + n for n in names]
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], timeout=10, check=False)


def _policy(isolated):
    return {"mode": "NETWORK_MODE_ISOLATED"} if isolated else {"mode": "NETWORK_MODE_PUBLIC_INTERNET"}


def _policy_revision(ws):
    return int(ws.get("networkPolicy", {}).get("revision", "0"))


class _Writer:
    """One writer thread's objects: it alone writes them, so its model is exact (the
    agent still sees 4 writers' commands concurrently)."""

    def __init__(self, idx, netns, seed):
        self.idx = idx
        self.rng = random.Random(seed)
        self.netns = list(netns)
        self.egresses = {}      # egress id -> (revision, address), acknowledged state
        self.workspaces = {}    # workspace id -> (netns, policy revision, isolated)
        self.deleted = {}       # id -> Get method, for deletes acknowledged this cycle
        self.deleted_older = {}
        self.acked = []         # (method, request, status, body) since the last restart
        self.older = []         # acknowledged commands of earlier cycles
        self.unanswered = None  # (method, request) in flight when the agent died
        self.writes = 0

    def send(self, agent, method, req):
        """(status, body), or None when the call got no answer (agent killed)."""
        try:
            status, body = agent.call(method, req, timeout=10)
        except Exception:  # OSError, or http.client's errors for a cut response
            self.unanswered = (method, req)
            return None
        if status == 200:
            self.acked.append((method, req, status, body))
            self.writes += 1
        return status, body

    def apply(self, method, req, body):
        """Moves the model by one acknowledged (or settled) write."""
        name = method.rsplit("/", 1)[1]
        if name == "CreateEgress":
            e = body["egress"]
            self.egresses[e["egressId"]] = (revision(e), req["spec"]["socks5"]["address"])
        elif name == "UpdateEgress":
            e = body["egress"]
            self.egresses[e["egressId"]] = (revision(e), req["spec"]["socks5"]["address"])
        elif name == "DeleteEgress":
            self.egresses.pop(req["egressId"], None)
            self.deleted[req["egressId"]] = (EGRESS + "GetEgress", {"egressId": req["egressId"]})
        elif name == "CreateWorkspace":
            w = body["workspace"]
            self.workspaces[w["workspaceId"]] = (req["netns"], _policy_revision(w),
                                                 req["networkPolicy"]["mode"] == "NETWORK_MODE_ISOLATED")
        elif name == "UpdateNetworkPolicy":
            w = body["workspace"]
            self.workspaces[w["workspaceId"]] = (w["netns"], _policy_revision(w),
                                                 req["networkPolicy"]["mode"] == "NETWORK_MODE_ISOLATED")
        elif name == "DeleteWorkspace":
            self.workspaces.pop(req["workspaceId"], None)
            self.deleted[req["workspaceId"]] = (WORKSPACE + "GetWorkspace", {"workspaceId": req["workspaceId"]})

    def one_write(self, agent):
        r = self.rng.random()
        free = [n for n in self.netns if n not in {w[0] for w in self.workspaces.values()}]
        if r < 0.25 or not self.egresses:
            method = EGRESS + "CreateEgress"
            req = {"commandId": command_id("k9-ce"), "spec": spec(self._addr())}
        elif r < 0.5:
            eid = self.rng.choice(sorted(self.egresses))
            method = EGRESS + "UpdateEgress"
            req = {"commandId": command_id("k9-ue"), "egressId": eid,
                   "expectedRevision": str(self.egresses[eid][0]), "spec": spec(self._addr()),
                   "drainSeconds": 0}
        elif r < 0.6:
            method = EGRESS + "DeleteEgress"
            req = {"commandId": command_id("k9-de"), "egressId": self.rng.choice(sorted(self.egresses))}
        elif r < 0.75 and free:
            method = WORKSPACE + "CreateWorkspace"
            req = {"commandId": command_id("k9-cw"), "netns": self.rng.choice(free),
                   "networkPolicy": _policy(self.rng.random() < 0.5)}
        elif r < 0.92 and self.workspaces:
            wid = self.rng.choice(sorted(self.workspaces))
            _, rev, isolated = self.workspaces[wid]
            method = WORKSPACE + "UpdateNetworkPolicy"
            req = {"commandId": command_id("k9-up"), "workspaceId": wid, "expectedRevision": str(rev),
                   "networkPolicy": _policy(not isolated), "drainSeconds": 0}
        elif self.workspaces:
            method = WORKSPACE + "DeleteWorkspace"
            req = {"commandId": command_id("k9-dw"), "workspaceId": self.rng.choice(sorted(self.workspaces))}
        else:
            return True
        got = self.send(agent, method, req)
        if got is None:
            return False
        status, body = got
        # Alone on its objects, a writer's CAS and deletes never race: only a
        # workspace create on a namespace still being released may be refused.
        if status == 200:
            self.apply(method, req, body)
        else:
            assert method.endswith("CreateWorkspace"), (method, req, status, body)
        return True

    def _addr(self):
        return "203.0.113.%d:%d" % (self.rng.randrange(1, 250), self.rng.randrange(1, 65535))


def _stored_part(answer):
    """A write's answer without what is live by design: a Workspace write's response
    carries its network_policy_status as the runtime reports it now, not as stored
    (workspace_service.h, with_status), so a replay compares the rest."""
    status, body = answer
    if isinstance(body, dict) and isinstance(body.get("workspace"), dict):
        body = dict(body, workspace={k: v for k, v in body["workspace"].items() if k != "networkPolicyStatus"})
    return status, body


def _check_workspace_applied(agent, wid, stats, timeout=10.0):
    """No half-applied Workspace: the status reports the stored policy revision as
    applied, or an error saying why not. Returns the Workspace."""
    deadline = time.monotonic() + timeout
    first = 1
    while True:
        status, body = agent.call(WORKSPACE + "GetWorkspace", {"workspaceId": wid})
        assert status == 200, (wid, status, body)
        w = body["workspace"]
        st = w.get("networkPolicyStatus", {}) or {}
        if int(st.get("appliedRevision", "0")) == _policy_revision(w) or st.get("error"):
            return w, st
        stats["waited"] += first
        first = 0
        if time.monotonic() > deadline:
            raise AssertionError("half-applied Workspace %s: policy revision %d, status %r"
                                 % (wid, _policy_revision(w), st))
        time.sleep(0.05)


def _list_all(agent, method, key):
    """Every page of a List call (1,000 a page; a long run stores thousands)."""
    out, token = [], ""
    for _ in range(1000):
        status, body = agent.call(method, {"pageSize": 1000, "pageToken": token} if token else {"pageSize": 1000})
        assert status == 200, body
        out += body.get(key, [])
        token = body.get("nextPageToken", "")
        if not token:
            return out
    raise AssertionError(method + ": more than 1,000 pages")


def test_kill_9_at_scale_concurrent_writes(kill9_netns, agent_factory):
    """Concurrent writers (4 threads, each owning its Egresses, Workspaces and two
    throwaway namespaces) create, update under expected_revision and delete Egresses,
    and create, re-police and delete Workspaces, while the agent is killed with SIGKILL
    at random moments. After each restart: every acknowledged write is there (creates
    exist unless an acknowledged delete followed, updates at their revision -- exactly,
    as only their writer writes them -- deletes gone), a replay of every command acknowledged in the cycle (and a sample of
    older ones) with its command ID returns the same answer, the command in flight at
    the kill settles by its replay (stored answer or applied once, then stable), and no
    Workspace is half-applied.

    Cycles: KIBOTOS_KILL9_CYCLES (default 50, the CI run); seed: KIBOTOS_KILL9_SEED
    (default random, printed); KIBOTOS_KILL9_MAX_SECONDS, when set, ends the run after
    the cycle that crosses it (the cycles done are printed). Bench-style run of 1,000
    cycles:

      KIBOTOS_KILL9_CYCLES=1000 KIBOTOS_BUILD_ROOT=build-release \\
        /usr/bin/python3 -m pytest -q -s -p no:cacheprovider \\
        tests/integration/egress/test_durability.py -k kill_9_at_scale

    (from the source root, as root; 1.3 to 2.5 s a cycle under the ASan build-test on
    2 shared cores, so 20 to 40 min there). The last line printed holds cycles, acknowledged writes, lost,
    replay mismatches, half-applied and wall time.
    """
    cycles = int(os.environ.get("KIBOTOS_KILL9_CYCLES", "50"))
    seed = int(os.environ.get("KIBOTOS_KILL9_SEED", str(random.SystemRandom().randrange(1 << 30))))
    print("kill -9 at scale: seed %d (KIBOTOS_KILL9_SEED=%d), cycles %d" % (seed, seed, cycles))
    rng = random.Random(seed)
    a = agent_factory(config=CONFIG)
    writers = [_Writer(i, kill9_netns[i * KILL9_NETNS_PER_WRITER:(i + 1) * KILL9_NETNS_PER_WRITER],
                       rng.randrange(1 << 30)) for i in range(KILL9_WRITERS)]
    stats = {"replays": 0, "settled": 0, "mismatch": 0, "lost": 0, "half": 0, "waited": 0}
    started = time.monotonic()
    budget = float(os.environ.get("KIBOTOS_KILL9_MAX_SECONDS", "0"))
    done = 0
    try:
        for cycle in range(cycles):
            if budget and time.monotonic() - started > budget:
                break
            done += 1
            stop = threading.Event()
            errors = []

            def run(w):
                try:
                    for _ in range(500):
                        if stop.is_set() or not w.one_write(a):
                            return
                except Exception as e:  # an assertion in a writer fails the test below
                    errors.append(e)

            threads = [threading.Thread(target=run, args=(w,)) for w in writers]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.02, 0.5))
            a.kill9()
            stop.set()
            for t in threads:
                t.join(30)
                assert not t.is_alive()
            assert not errors, errors
            a.start()
            for w in writers:
                _check_writer(a, w, rng, stats)
        wall = time.monotonic() - started
        acked = sum(w.writes for w in writers)
        print("kill -9 at scale: cycles %d, acknowledged writes %d, replays %d, settled in-flight %d, "
              "lost %d, replay mismatches %d, half-applied %d (re-applies waited for %d), wall %.1f s"
              % (done, acked, stats["replays"], stats["settled"], stats["lost"], stats["mismatch"],
                 stats["half"], stats["waited"], wall))
        assert acked >= done  # the writers did real work between the kills
        # Nothing more, nothing less: the lists hold exactly the model's live objects.
        assert sorted(e["egressId"] for e in _list_all(a, EGRESS + "ListEgresses", "egresses")) == \
            sorted(e for w in writers for e in w.egresses)
        assert sorted(x["workspaceId"] for x in _list_all(a, WORKSPACE + "ListWorkspaces", "workspaces")) == \
            sorted(x for w in writers for x in w.workspaces)
    except BaseException:
        print("kill -9 at scale FAILED: seed %d (rerun with KIBOTOS_KILL9_SEED=%d)" % (seed, seed))
        raise


def _check_writer(a, w, rng, stats):
    # The command in flight at the kill: its replay returns the stored answer or applies
    # it now (once), and a second replay gives the same answer.
    if w.unanswered is not None:
        method, req = w.unanswered
        w.unanswered = None
        status, body = a.call(method, req)
        if not (status == 200 or method.endswith("CreateWorkspace")):
            raise AssertionError("in-flight %s %r settled as %s %r" % (method, req, status, body))
        again = a.call(method, req)
        assert _stored_part(again) == _stored_part((status, body)), (method, req, (status, body), again)
        stats["settled"] += 1
        if status == 200:
            w.acked.append((method, req, status, body))
            w.writes += 1
            w.apply(method, req, body)
    # Every acknowledged command of this cycle, and a sample of older ones, replays
    # to the same answer.
    sample = rng.sample(w.older, min(5, len(w.older)))
    for method, req, status, body in w.acked + sample:
        got = a.call(method, req)
        stats["replays"] += 1
        if _stored_part(got) != _stored_part((status, body)):
            stats["mismatch"] += 1
            raise AssertionError("replay of %s %r: first %r, now %r" % (method, req, (status, body), got))
    w.older.extend(w.acked)
    w.acked = []
    # Acknowledged state survived.
    for eid, (rev, addr) in w.egresses.items():
        status, body = get(a, eid)
        if status != 200:
            stats["lost"] += 1
            raise AssertionError("lost Egress %s: %s %r" % (eid, status, body))
        cur = revision(body["egress"])
        assert cur == rev, (eid, cur, rev)  # alone on it, no later revision can exist
        assert body["egress"]["spec"]["socks5"]["address"] == addr
    for wid, (netns, rev, isolated) in w.workspaces.items():
        try:
            ws, st = _check_workspace_applied(a, wid, stats)
        except AssertionError:
            stats["half"] += 1
            raise
        assert ws["netns"] == netns
        if _policy_revision(ws) != rev:
            stats["lost"] += 1
            raise AssertionError("Workspace %s policy revision %d, acknowledged %d" % (wid, _policy_revision(ws), rev))
        assert (ws["networkPolicy"].get("mode") == "NETWORK_MODE_ISOLATED") == isolated
    # Acknowledged deletes (this cycle's, and a sample of older ones) stay gone.
    older = rng.sample(sorted(w.deleted_older), min(5, len(w.deleted_older)))
    for gone in list(w.deleted) + older:
        method, req = w.deleted.get(gone) or w.deleted_older[gone]
        status, body = a.call(method, req)
        if status != 404:
            stats["lost"] += 1
            raise AssertionError("acknowledged delete of %s undone: %s %r" % (gone, status, body))
    w.deleted_older.update(w.deleted)
    w.deleted = {}
