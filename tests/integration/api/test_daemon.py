"""kibotos-agent as a process: flags, config check, sockets, signals, systemd."""
import grp
import json
import os
import signal
import socket
import stat
import subprocess

from kibotos_agent import Agent, agent_binary, wait_for


def run_agent(*args, env=None):
    return subprocess.run([agent_binary()] + list(args), capture_output=True, text=True, timeout=30,
                          env=dict(os.environ, **(env or {})))


def test_version_prints_the_name_and_version():
    out = run_agent("--version")
    assert out.returncode == 0
    assert out.stdout.startswith("kibotos-agent ")
    assert len(out.stdout.split()) == 2


def test_help_lists_the_flags():
    out = run_agent("--help")
    assert out.returncode == 0
    for flag in ("--config", "--check-config", "--print-config", "--version"):
        assert flag in out.stdout


def test_unknown_flag_is_refused():
    out = run_agent("--frobnicate")
    assert out.returncode != 0
    assert "--frobnicate" in out.stderr


def test_check_config_accepts_a_good_file(tmp_state):
    path = os.path.join(tmp_state, "ok.yaml")
    with open(path, "w") as f:
        f.write("log:\n  level: debug\n  format: json\ncommands:\n  retention: 48h\n")
    out = run_agent("--check-config", "--config", path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "config OK"


def test_check_config_without_a_file_checks_the_defaults():
    out = run_agent("--check-config")
    assert out.returncode == 0
    assert out.stdout.strip() == "config OK"


def test_check_config_names_the_bad_key(tmp_state):
    path = os.path.join(tmp_state, "bad.yaml")
    with open(path, "w") as f:
        f.write("api:\n  unix_socket_mode: rw-rw----\n")
    out = run_agent("--check-config", "--config", path)
    assert out.returncode == 1
    assert "api.unix_socket_mode: expected an octal mode like 0660" in out.stderr


def test_check_config_refuses_a_bad_cidr(tmp_state):
    path = os.path.join(tmp_state, "bad.yaml")
    with open(path, "w") as f:
        f.write("egress:\n  allowed_special_purpose_cidrs: ['10.0.0.0/8', '10.1.2.3/8']\n")
    out = run_agent("--check-config", "--config", path)
    assert out.returncode == 1
    assert "egress.allowed_special_purpose_cidrs[1]" in out.stderr


def _check(tmp_state, text):
    path = os.path.join(tmp_state, "host.yaml")
    with open(path, "w") as f:
        f.write(text)
    return run_agent("--check-config", "--config", path), path


def test_check_config_checks_what_the_start_needs_from_the_host(tmp_state):
    # Each of these passes the file's own checks and would fail the start.
    out, path = _check(tmp_state, "api:\n  unix_socket_group: kibotos-no-such-group\n")
    assert out.returncode == 1
    assert out.stderr.strip() == path + ": api.unix_socket_group: no group named kibotos-no-such-group"
    missing = os.path.join(tmp_state, "absent")
    out, _ = _check(tmp_state, "api:\n  tls:\n    listen: 127.0.0.1:7443\n"
                    f"    cert: {missing}/s.crt\n    key: {missing}/s.key\n    client_ca: {missing}/ca.crt\n")
    assert out.returncode == 1
    assert missing + "/s.crt" in out.stderr, out.stderr
    out, _ = _check(tmp_state, f"log:\n  access:\n    path: {missing}/access.log\n")
    assert out.returncode == 1
    assert f"log.access.path {missing}/access.log: its folder {missing}: No such file or directory" in out.stderr, out.stderr
    # The same host items, when present, pass: a group that exists, a writable folder.
    out, _ = _check(tmp_state, f"api:\n  unix_socket_group: root\nlog:\n  access:\n    path: {tmp_state}/a.log\n")
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(os.path.join(tmp_state, "a.log")), "the check creates nothing"


def test_print_config_shows_every_key_with_the_value_in_force(tmp_state):
    out, path = _check(tmp_state, "dataplane:\n  threads: 3\ndns:\n  query_timeout: 1500ms\n")
    shown = run_agent("--print-config", "--config", path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "dataplane.threads: 3" in lines and "dns.query_timeout: 1500ms" in lines
    defaults = run_agent("--print-config").stdout.splitlines()
    assert "dataplane.threads: 0" in defaults
    # The same keys either way, one line each.
    assert [l.split(":")[0] for l in lines] == [l.split(":")[0] for l in defaults]
    assert len(lines) >= 35
    # A config that --check-config refuses prints nothing but the error.
    bad, bad_path = _check(tmp_state, "api:\n  unix_socket_group: kibotos-no-such-group\n")
    refused = run_agent("--print-config", "--config", bad_path)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "no group named kibotos-no-such-group" in refused.stderr


def test_an_unknown_key_stops_the_start(tmp_state):
    a = Agent(workdir=tmp_state, config={"api": {"unix_sockett": "/tmp/x"}})
    a.write_config()
    out = run_agent("--config", a.config_path)
    assert out.returncode == 1
    assert "api.unix_sockett: unknown key" in out.stderr


def test_sigterm_stops_cleanly_with_exit_0_and_removes_the_socket(agent):
    assert os.path.exists(agent.socket_path)
    assert agent.stop(signal.SIGTERM) == 0
    assert not os.path.exists(agent.socket_path)


def test_sigint_stops_cleanly(agent):
    assert agent.stop(signal.SIGINT) == 0


def test_sigterm_with_open_connections_still_exits_0(agent):
    conns = [agent.connection() for _ in range(5)]
    for c in conns:
        c.connect()
    assert agent.stop(signal.SIGTERM, timeout=10) == 0
    for c in conns:
        c.close()


def test_a_second_agent_on_the_same_socket_refuses_to_start(agent, agent_factory):
    second = agent_factory(start=False, config={"api": {"unix_socket": agent.socket_path}})
    second.start(wait=False)
    code = second.proc.wait(15)
    assert code != 0
    assert "already serving " + agent.socket_path in second.log()
    # The first one is untouched and still answers.
    assert os.path.exists(agent.socket_path)
    status, _ = agent.call("kibotos.ctrl.v1.Nope/Nope", {})
    assert status == 404


def test_a_second_agent_on_the_same_state_dir_refuses_to_start(agent, agent_factory):
    second = agent_factory(start=False, config={"state_dir": agent.state_dir})
    second.start(wait=False)
    assert second.proc.wait(15) != 0
    assert agent.state_dir in second.log()
    assert not os.path.exists(second.socket_path)
    assert agent.call("kibotos.ctrl.v1.Nope/Nope", {})[0] == 404


def test_a_stale_socket_file_from_a_crash_is_replaced(agent):
    agent.kill9()
    assert os.path.exists(agent.socket_path)  # left behind by the crash
    agent.start()
    status, body = agent.call("kibotos.ctrl.v1.Nope/Nope", {})
    assert status == 404 and body["code"] == "unimplemented"


def test_a_stale_socket_nobody_listens_on_is_replaced(agent_factory, tmp_state):
    path = os.path.join(tmp_state, "ctrl.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # the file stays, nothing listens
    a = agent_factory(workdir=tmp_state)
    status, _ = a.call("kibotos.ctrl.v1.Nope/Nope", {})
    assert status == 404


def test_a_regular_file_at_the_socket_path_is_not_removed(agent_factory, tmp_state):
    path = os.path.join(tmp_state, "ctrl.sock")
    with open(path, "w") as f:
        f.write("precious")
    a = agent_factory(workdir=tmp_state, start=False)
    a.start(wait=False)
    assert a.proc.wait(15) != 0
    assert "is not a socket" in a.log()
    assert open(path).read() == "precious"


def test_the_socket_gets_the_configured_mode_and_group(agent_factory):
    group = grp.getgrgid(os.getgid()).gr_name
    a = agent_factory(config={"api": {"unix_socket_mode": "0600", "unix_socket_group": group}})
    st = os.stat(a.socket_path)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert st.st_gid == os.getgid()


def test_the_default_socket_mode_is_0660(agent):
    assert stat.S_IMODE(os.stat(agent.socket_path).st_mode) == 0o660


def test_the_socket_parent_directory_is_created(agent_factory, tmp_state):
    path = os.path.join(tmp_state, "run", "kibotos", "ctrl.sock")
    a = agent_factory(start=False, config={"api": {"unix_socket": path}})
    a.socket_path = path
    a.start()
    assert stat.S_ISSOCK(os.stat(path).st_mode)


def test_an_unknown_socket_group_stops_the_start(agent_factory):
    a = agent_factory(start=False, config={"api": {"unix_socket_group": "no-such-group-kib"}})
    a.start(wait=False)
    assert a.proc.wait(15) == 1
    assert "no-such-group-kib" in a.log()


def test_systemd_directories_are_the_defaults(agent_factory, tmp_state):
    runtime_dir = os.path.join(tmp_state, "rt")
    state_dir = os.path.join(tmp_state, "st")
    os.makedirs(runtime_dir)
    a = agent_factory(start=False, env={"RUNTIME_DIRECTORY": runtime_dir, "STATE_DIRECTORY": state_dir})
    del a.config["api"]["unix_socket"]
    del a.config["state_dir"]
    a.socket_path = os.path.join(runtime_dir, "ctrl.sock")
    a.start()
    assert stat.S_ISSOCK(os.stat(a.socket_path).st_mode)
    assert os.path.isdir(state_dir)


def test_the_config_file_wins_over_systemd_directories(agent_factory, tmp_state):
    runtime_dir = os.path.join(tmp_state, "rt")
    os.makedirs(runtime_dir)
    a = agent_factory(env={"RUNTIME_DIRECTORY": runtime_dir})
    assert os.path.exists(a.socket_path)
    assert not os.path.exists(os.path.join(runtime_dir, "ctrl.sock"))


def test_json_logs_are_one_object_per_line(agent_factory):
    a = agent_factory(config={"log": {"format": "json", "level": "info"}})
    a.call("kibotos.ctrl.v1.Nope/Nope", {})
    assert a.stop() == 0
    lines = [l for l in a.log().splitlines() if l.strip()]
    assert len(lines) >= 2
    for line in lines:
        obj = json.loads(line)
        assert {"time", "level", "msg"} <= obj.keys()


def test_readiness_and_reload_are_sent_to_notify_socket(agent_factory, tmp_state):
    path = os.path.join(tmp_state, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(15)
    try:
        a = agent_factory(env={"NOTIFY_SOCKET": path})
        assert "READY=1" in sock.recv(4096).decode()
        a.signal(signal.SIGHUP)
        assert "RELOADING=1" in sock.recv(4096).decode()
        assert "READY=1" in sock.recv(4096).decode()
        assert a.stop() == 0
        assert "STOPPING=1" in sock.recv(4096).decode()
    finally:
        sock.close()


def test_the_open_file_limit_is_raised_to_the_hard_limit(agent):
    with open("/proc/%d/limits" % agent.proc.pid) as f:
        row = next(l for l in f if l.startswith("Max open files"))
    soft, hard = row.split()[3:5]
    assert soft == hard


# A binary GetEgressRequest whose egress_id (field 1) is C0 AD, which is not UTF-8.
NOT_UTF8_GET_EGRESS = b"\x0a\x02\xc0\xad"


def test_protobuf_log_lines_go_through_log_format_and_are_rate_limited(agent_factory):
    """Issue 33 (6): libprotobuf wrote "[libprotobuf ERROR …]" itself, one per bad request."""
    a = agent_factory(config={"log": {"format": "json", "level": "info"}})
    for _ in range(30):
        status, _, _ = a.call_raw("kibotos.ctrl.v1.EgressService/GetEgress", NOT_UTF8_GET_EGRESS,
                                  content_type="application/proto")
        assert status == 400
    assert a.stop() == 0
    log = a.log()
    assert "[libprotobuf" not in log
    lines = [json.loads(l) for l in log.splitlines() if l.strip()]
    protobuf = [l for l in lines if l["msg"].startswith("protobuf: ")]
    assert 1 <= len(protobuf) <= 10, protobuf
    assert all(l["level"] in ("warn", "warning") and "invalid UTF-8" in l["msg"] for l in protobuf), protobuf


def test_log_level_off_silences_protobuf_too(agent_factory):
    a = agent_factory(config={"log": {"level": "off"}})
    status, _, _ = a.call_raw("kibotos.ctrl.v1.EgressService/GetEgress", NOT_UTF8_GET_EGRESS,
                              content_type="application/proto")
    assert status == 400
    assert a.stop() == 0
    assert "libprotobuf" not in a.log() and "protobuf" not in a.log()
