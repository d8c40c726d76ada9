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
