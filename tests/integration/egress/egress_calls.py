"""EgressService over Connect JSON for the integration tests: thin wrappers around
Agent.call, and the test config (endpoints in TEST-NET-3, exempted; no traffic is
ever sent to them)."""
import itertools
import os

SERVICE = "kibotos.ctrl.v1.EgressService/"
CONFIG = {"egress": {"allowed_special_purpose_cidrs": ["203.0.113.0/24"]}}
_ids = itertools.count(1)


def command_id(prefix="cmd"):
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


def spec(address="203.0.113.5:1080", username="", password="", udp=False):
    s = {"socks5": {"address": address}}
    if username:
        s["socks5"]["username"] = username
    if password:
        s["socks5"]["password"] = password
    if udp:
        s["udpEnabled"] = True
    return s


def call(agent, method, request, timeout=10.0):
    """(http_status, body) of one EgressService call."""
    return agent.call(SERVICE + method, request, timeout=timeout)


def create(agent, s, cid=None, **extra):
    req = {"commandId": cid or command_id("create"), "spec": s}
    req.update(extra)
    return call(agent, "CreateEgress", req)


def get(agent, egress_id):
    return call(agent, "GetEgress", {"egressId": egress_id})


def update(agent, egress_id, expected, s, cid=None, drain=None):
    req = {"commandId": cid or command_id("update"), "egressId": egress_id,
           "expectedRevision": str(expected), "spec": s}
    if drain is not None:
        req["drainSeconds"] = drain
    return call(agent, "UpdateEgress", req)


def revision(egress):
    # proto3 JSON writes uint64 as a string, and omits zero values.
    return int(egress.get("revision", "0"))
