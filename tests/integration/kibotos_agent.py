"""Run the real kibotos-agent binary in tests.

Reusable by every integration area:

    from kibotos_agent import Agent          # or use the fixtures from conftest.py

    def test_x(agent):                       # a running agent on a temp socket/state dir
        status, body = agent.call("kibotos.ctrl.v1.AgentService/GetAgent", {})

    def test_y(agent_factory):               # agents with config overrides
        a = agent_factory(config={"egress": {"allowed_special_purpose_cidrs": ["10.0.0.0/8"]}})

Agent keeps its socket, state dir, config and log under one temporary directory
(short, so the socket path fits sun_path). Readiness is polled with a bounded deadline.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

SOURCE_ROOT = os.environ.get(
    "KIBOTOS_SOURCE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUILD_ROOT = os.environ.get("KIBOTOS_BUILD_ROOT", os.path.join(SOURCE_ROOT, "build"))


def agent_binary():
    return os.environ.get("KIBOTOS_AGENT_BIN", os.path.join(BUILD_ROOT, "agent", "kibotos-agent"))


def wait_for(predicate, timeout=10.0, interval=0.02, what="condition"):
    """Polls predicate() until it returns a true value; fails after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def deep_merge(base, extra):
    out = dict(base)
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a Unix socket (keep-alive: reuse one object for many calls)."""

    def __init__(self, path, timeout=10.0):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def connect_call(conn, method, body, content_type="application/json", headers=None):
    """One Connect unary call on an open connection: (status, headers dict, raw body)."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    h = {"Content-Type": content_type}
    h.update(headers or {})
    conn.request("POST", "/" + method.lstrip("/"), body=body, headers=h)
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def decode_json(data):
    try:
        return json.loads(data) if data else None
    except ValueError:
        return {"_raw": data.decode(errors="replace")}


def parse_metrics(text):
    """The Prometheus text format's samples (no label value here holds `,` or `"`)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        name, _, labels = key.partition("{")
        pairs = [p.split("=", 1) for p in labels.rstrip("}").split(",") if p]
        out[(name, frozenset((k, v.strip('"')) for k, v in pairs))] = float(value)
    return out


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


class Agent:
    """One kibotos-agent process with its own temporary socket, state dir and log."""

    def __init__(self, workdir=None, config=None, env=None, args=None):
        self.workdir = workdir or tempfile.mkdtemp(prefix="kib-")
        self.socket_path = os.path.join(self.workdir, "ctrl.sock")
        self.state_dir = os.path.join(self.workdir, "state")
        self.config_path = os.path.join(self.workdir, "agent.yaml")
        self.log_path = os.path.join(self.workdir, "agent.log")
        self.config = deep_merge({
            "api": {"unix_socket": self.socket_path},
            "state_dir": self.state_dir,
            "log": {"level": "debug"},
        }, config)
        self.env = dict(os.environ, **(env or {}))
        self.args = list(args or [])
        self.proc = None
        self.handed_over = []  # processes that handed over to a newer one (take_over)
        self._log = None

    # -- lifecycle ---------------------------------------------------------------
    def write_config(self):
        # JSON is YAML: the agent's parser reads it as is.
        with open(self.config_path, "w") as f:
            json.dump(self.config, f, indent=2)

    def start(self, wait=True, timeout=15.0):
        self.write_config()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([agent_binary(), "--config", self.config_path] + self.args,
                                     stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        if wait:
            self.wait_ready(timeout)
        return self

    def take_over(self, timeout=60.0):
        """Starts `kibotos-agent --take-over` on the same config and state dir and waits
        until it serves; it becomes self.proc. Returns the process it took over from,
        which drains and exits by itself (kept in self.handed_over, killed at cleanup)."""
        old = self.proc
        marker = "(taken over)"
        before = self.log().count(marker)
        self.write_config()
        self.proc = subprocess.Popen([agent_binary(), "--config", self.config_path, "--take-over"] + self.args,
                                     stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        self.handed_over.append(old)

        def served():
            if self.proc.poll() is not None:
                raise RuntimeError("kibotos-agent --take-over exited with %s:\n%s" % (self.proc.returncode, self.log()))
            return self.log().count(marker) > before
        wait_for(served, timeout, what="kibotos-agent --take-over to serve")
        return old

    def wait_ready(self, timeout=15.0):
        """Ready = the process is alive and answers an HTTP request on the socket."""
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("kibotos-agent exited with %s during start:\n%s" % (self.proc.returncode, self.log()))
            try:
                conn = UnixHTTPConnection(self.socket_path, timeout=2)
                status, _, _ = connect_call(conn, "kibotos.ctrl.v1.AgentService/ReadinessProbe", {})
                conn.close()
                return status > 0
            except OSError:
                return False
        wait_for(ready, timeout, what="kibotos-agent to answer on " + self.socket_path)

    def stop(self, sig=signal.SIGTERM, timeout=15.0):
        """Sends sig and waits for the exit; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        code = self.proc.returncode
        if self._log:
            self._log.close()
            self._log = None
        return code

    def kill9(self):
        return self.stop(signal.SIGKILL)

    def restart(self, **kw):
        self.stop()
        return self.start(**kw)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def cleanup(self):
        try:
            for p in self.handed_over:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.stop()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- calls -------------------------------------------------------------------
    def connection(self, timeout=10.0):
        return UnixHTTPConnection(self.socket_path, timeout=timeout)

    def call(self, method, request=None, headers=None, timeout=10.0):
        """JSON call: (http_status, decoded JSON body)."""
        conn = self.connection(timeout)
        try:
            status, _, data = connect_call(conn, method, request if request is not None else {}, headers=headers)
        finally:
            conn.close()
        return status, decode_json(data)

    def call_raw(self, method, body, content_type="application/json", headers=None, timeout=10.0):
        """(http_status, headers, raw body) for any content type."""
        conn = self.connection(timeout)
        try:
            return connect_call(conn, method, body, content_type, headers)
        finally:
            conn.close()

    def get(self, path, timeout=10.0):
        """A plain GET (the metrics endpoint): (http_status, headers dict, body text)."""
        conn = self.connection(timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
        finally:
            conn.close()

    def metrics(self):
        """GET /metrics parsed: {(name, frozenset of (label, value)): float}."""
        status, headers, text = self.get("/metrics")
        assert status == 200, (status, text)
        assert headers["content-type"].startswith("text/plain; version=0.0.4"), headers
        return parse_metrics(text)

    def has_method(self, method):
        status, body = self.call(method, {})
        return not (status == 404 and isinstance(body, dict) and body.get("code") == "unimplemented")


# -- pytest fixtures (exposed by tests/integration/conftest.py) --------------------
@pytest.fixture
def tmp_state():
    """A short temporary directory (socket paths must fit in 108 bytes)."""
    d = tempfile.mkdtemp(prefix="kib-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def agent_factory():
    """agent_factory(config=None, env=None, start=True, workdir=None) -> Agent; all stopped at teardown."""
    agents = []

    def make(config=None, env=None, start=True, workdir=None, args=None):
        a = Agent(workdir=workdir, config=config, env=env, args=args)
        agents.append(a)
        if start:
            a.start()
        return a

    yield make
    for a in reversed(agents):
        a.cleanup()


@pytest.fixture
def agent(agent_factory):
    """A running agent with the default test config."""
    return agent_factory()
