"""The packages as an operator uses them: build the .deb, lintian it, `apt-get install`
it, run the installed agent with the installed config and the environment its
systemd unit gives it, drive it with the installed kibotosctl as a non-root member of
group kibotos, upgrade to a newer package keeping the state, purge, and compare the
rpm's file list with the deb's.

Needs root (it installs the package on this machine; every test purges it again,
even on failure). The build runs once: the second package revision and the rpm
reuse the first build's meson build directory.
"""
import grp
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
import e2e_env as e2e  # noqa: E402
import kibotos_agent  # noqa: E402
from test_take_over import (agent_info, count_direct_packets, direct_packets, guest_results,  # noqa: E402
                            start_guest_load, syn_retransmits)

SRC = os.environ.get("KIBOTOS_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PKG = "kibotos-agent"
SOCKET = "/run/kibotos/ctrl.sock"
STATE = "/var/lib/kibotos"
RUNTIME = "/run/kibotos"
CONFIG = "/etc/kibotos/agent.yaml"
UNIT = "/lib/systemd/system/kibotos-agent.service"
CTL = "/usr/bin/kibotosctl"
BUILD_TIMEOUT = 1500  # a full -O2 build of the tree on 2 cores shared with the other tests

if os.geteuid() != 0:
    pytest.skip("needs root: installs the package", allow_module_level=True)
for tool in ("dpkg-buildpackage", "lintian", "apt-get", "rpmbuild", "meson"):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed", allow_module_level=True)


def run(cmd, check=True, timeout=300, **kw):
    # Own process group, so a timeout also stops the build's compilers, not only the
    # script that started them.
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kw) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise AssertionError(f"{cmd} did not finish in {timeout} s")
    r = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} exited {r.returncode}\nstdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    return r


def project_version():
    return run([os.path.join(SRC, "packaging", "project-version.sh"), SRC]).stdout.strip()


def installed_version():
    r = run(["dpkg-query", "-W", "-f=${Status} ${Version}", PKG], check=False)
    parts = r.stdout.split()
    return parts[-1] if r.returncode == 0 and "installed" in parts else None


def purge():
    run(["apt-get", "purge", "-y", PKG], check=False, env=apt_env())


def apt_env():
    return dict(os.environ, DEBIAN_FRONTEND="noninteractive")


def apt_install(deb, downgrade=False):
    run(["apt-get", "install", "-y", "--no-install-recommends"] + (["--allow-downgrades"] if downgrade else []) +
        [os.path.abspath(deb)], env=apt_env(), timeout=600)


@pytest.fixture(scope="module")
def packages():
    """deb revision 1 and 2 and the rpm, from one compile of the tree."""
    # KIBOTOS_PKG_TEST_WORKDIR keeps the build between runs (for developing this test).
    keep = os.environ.get("KIBOTOS_PKG_TEST_WORKDIR")
    work = keep or tempfile.mkdtemp(prefix="kibotos-pkg-test-")
    out = os.path.join(work, "out")
    env = dict(os.environ, KIBOTOS_PKG_WORKDIR=work, KIBOTOS_PKG_OUTDIR=out, KIBOTOS_PKG_JOBS="2")
    # Without debug info: GCC's -g never changes the code it generates, and the packages
    # ship stripped binaries, so what is tested is what ships. This test took 799 s
    # instead of 1,048 on 2 shared cores. Operators' builds keep dpkg's -g (and dbgsym).
    env.update(DEB_CFLAGS_APPEND="-g0", DEB_CXXFLAGS_APPEND="-g0")
    for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "LD_PRELOAD"):
        env.pop(k, None)
    try:
        build = os.path.join(SRC, "packaging", "build-deb.sh")
        deb1 = run([build], env=dict(env, KIBOTOS_PKG_REVISION="1"), timeout=BUILD_TIMEOUT).stdout.split()[-1]
        deb2 = run([build], env=dict(env, KIBOTOS_PKG_REVISION="2"), timeout=300).stdout.split()[-1]
        rpm = run([os.path.join(SRC, "packaging", "build-rpm.sh")], env=env, timeout=300).stdout.split()[-1]
        yield {"deb1": deb1, "deb2": deb2, "rpm": rpm, "version": project_version()}
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def lab():
    with e2e.labmod.Lab() as lab:
        yield lab


@pytest.fixture
def clean_machine():
    """The package is absent before and purged after, even when the test fails."""
    purge()
    try:
        yield
    finally:
        purge()


class Agent:
    """The installed daemon, started the way its unit starts it (no systemd here)."""

    def __init__(self, config):
        os.makedirs(RUNTIME, mode=0o755, exist_ok=True)
        env = dict(os.environ, STATE_DIRECTORY=STATE, RUNTIME_DIRECTORY=RUNTIME)
        for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "NOTIFY_SOCKET"):
            env.pop(k, None)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([agent_path(), "--config", config], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not os.path.exists(SOCKET):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"agent did not create {SOCKET}:\n{self.output()}")
            time.sleep(0.05)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def agent_path():
    """Where the package put the daemon (its meson install_dir decides)."""
    files = run(["dpkg", "-L", PKG]).stdout.split()
    paths = [f for f in files if re.search(r"/s?bin/kibotos-agent$", f)]
    assert len(paths) == 1, files
    return paths[0]


def agent_config(tmpdir):
    """The installed config, plus the one key a test needs: Egresses on 127.0.0.0/8
    (tests send traffic only there, and loopback is special-purpose)."""
    with open(CONFIG) as f:
        text = f.read()
    assert "\negress:\n" in text
    text = text.replace("\negress:\n", "\negress:\n  allowed_special_purpose_cidrs: [127.0.0.0/8]\n", 1)
    path = os.path.join(str(tmpdir), "agent.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


@pytest.fixture
def operator(clean_machine):
    """A throwaway non-root user; `member` is in group kibotos, `outsider` is not.
    Created after the package (which creates the group); removed afterwards."""
    names = []

    def make(groups):
        name = f"kibt{os.getpid() % 100000}{len(names)}"
        run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"] +
            (["--groups", ",".join(groups)] if groups else []) + [name])
        names.append(name)
        return pwd.getpwnam(name)

    try:
        yield make
    finally:
        for n in names:
            run(["userdel", n], check=False)


def ctl(user, *args, check=True):
    """The installed kibotosctl as `user` with the groups it would log in with."""
    groups = [g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem]
    r = subprocess.run([CTL, *args], capture_output=True, text=True, timeout=60, user=user.pw_uid,
                       group=user.pw_gid, extra_groups=groups, env={"PATH": "/usr/bin:/bin"}, cwd="/")
    if check and r.returncode != 0:
        raise AssertionError(f"kibotosctl {args} exited {r.returncode}: {r.stderr}")
    return r


def test_lintian_reports_no_errors(packages):
    r = run(["lintian", "--fail-on", "error", "--tag-display-limit", "0", packages["deb1"]], check=False, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_deb_ships_binaries_unit_config_man_pages_completion_and_dashboard(packages):
    listing = run(["dpkg-deb", "-c", packages["deb1"]]).stdout
    for path in ("./usr/bin/kibotosctl", "/kibotos-agent\n", "./lib/systemd/system/kibotos-agent.service",
                 "./etc/kibotos/agent.yaml", "./usr/share/man/man8/kibotos-agent.8.gz",
                 "./usr/share/man/man1/kibotosctl.1.gz", "./usr/share/bash-completion/completions/kibotosctl",
                 "./usr/share/zsh/vendor-completions/_kibotosctl",
                 "./usr/share/fish/vendor_completions.d/kibotosctl.fish",
                 "./usr/share/kibotos-agent/grafana/kibotos-agent.json"):
        assert path in listing + "\n", path
    conffiles = run(["dpkg-deb", "-I", packages["deb1"], "conffiles"]).stdout.split()
    assert conffiles == ["/etc/kibotos/agent.yaml"]


def test_package_names_carry_the_meson_version(packages):
    v = packages["version"]
    assert os.path.basename(packages["deb1"]).startswith(f"{PKG}_{v}-1_")
    assert os.path.basename(packages["deb2"]).startswith(f"{PKG}_{v}-2_")
    assert os.path.basename(packages["rpm"]).startswith(f"{PKG}-{v}-1.")


def normalized(paths):
    """Files only, no docs (each format adds its own), compression suffix removed."""
    out = set()
    for p in paths:
        p = p.lstrip(".")
        if not p or p.endswith("/") or p.startswith("/usr/share/doc/"):
            continue
        out.add(p[:-3] if p.endswith(".gz") else p)
    return out


def test_rpm_ships_the_same_files_as_the_deb(packages):
    deb_files = [line.split()[5] for line in run(["dpkg-deb", "-c", packages["deb1"]]).stdout.splitlines()
                 if not line.startswith("d")]
    rpm_files = run(["rpm", "-qlp", packages["rpm"]]).stdout.split()
    # The directories the spec owns with %dir (dpkg-deb lists every directory; dropped above).
    rpm_files = [f for f in rpm_files if f not in ("/etc/kibotos", "/usr/share/kibotos-agent",
                                                   "/usr/share/kibotos-agent/grafana")]
    assert normalized(rpm_files) == normalized(deb_files)


def test_installed_agent_serves_a_kibotos_member_and_purge_leaves_nothing(packages, operator, tmpdir):
    apt_install(packages["deb1"])
    assert installed_version() == f"{packages['version']}-1"
    kibotos = grp.getgrnam("kibotos")
    st = os.stat(STATE)
    assert (st.st_mode & 0o777, st.st_uid) == (0o700, 0)
    assert os.stat(CONFIG).st_mode & 0o777 == 0o644
    assert run([agent_path(), "--version"]).stdout.strip().endswith(packages["version"])
    assert run([CTL, "--version"]).stdout.strip() == f"kibotosctl {packages['version']}"
    assert run([agent_path(), "--check-config", "--config", CONFIG]).returncode == 0
    if shutil.which("systemd-analyze"):
        r = run(["systemd-analyze", "verify", UNIT], check=False)
        problems = [l for l in (r.stdout + r.stderr).splitlines() if l.strip() and "man " not in l]
        assert not problems, problems

    member = operator(["kibotos"])
    outsider = operator([])
    agent = Agent(agent_config(tmpdir))
    try:
        st = os.stat(SOCKET)
        assert (st.st_mode & 0o777, st.st_gid) == (0o660, kibotos.gr_gid)

        denied = ctl(outsider, "agent", check=False)
        assert denied.returncode == 24, denied.stderr
        assert denied.stderr.startswith("error: unavailable: ") and "Permission denied" in denied.stderr

        info = json.loads(ctl(member, "agent", "-o", "json").stdout)
        assert info["agent"]["version"] == packages["version"]

        created = json.loads(ctl(member, "egress", "create", "--address", "127.0.0.1:1080", "--label", "pkg=test",
                                 "-o", "json").stdout)["egress"]
        eid = created["egressId"]
        assert created["revision"] == "1"
        got = json.loads(ctl(member, "egress", "get", eid, "-o", "json").stdout)["egress"]
        assert got["spec"]["socks5"]["address"] == "127.0.0.1:1080"
        listed = json.loads(ctl(member, "egress", "list", "--selector", "pkg=test", "-o", "json").stdout)
        assert [e["egressId"] for e in listed["egresses"]] == [eid]
        assert eid in ctl(member, "egress", "list").stdout  # the table
        ctl(member, "egress", "delete", eid)
        gone = ctl(member, "egress", "get", eid, check=False)
        assert gone.returncode == 15 and gone.stderr.startswith("error: not_found: "), gone.stderr
    finally:
        rc = agent.stop()
    assert rc == 0, agent.output()

    run(["apt-get", "purge", "-y", PKG], env=apt_env())
    assert installed_version() is None
    leftovers = [p for p in (CTL, "/usr/sbin/kibotos-agent", "/usr/bin/kibotos-agent", UNIT, "/etc/kibotos", STATE,
                             RUNTIME, "/usr/share/man/man1/kibotosctl.1.gz",
                             "/usr/share/bash-completion/completions/kibotosctl",
                             "/usr/share/zsh/vendor-completions/_kibotosctl",
                             "/usr/share/fish/vendor_completions.d/kibotosctl.fish",
                             "/usr/share/kibotos-agent") if os.path.lexists(p)]
    assert leftovers == []
    # Debian keeps system groups on purge (files elsewhere may carry the GID).
    assert grp.getgrnam("kibotos")


def test_upgrade_keeps_state(packages, clean_machine, tmpdir):
    root = pwd.getpwuid(0)
    apt_install(packages["deb1"])
    agent = Agent(agent_config(tmpdir))
    try:
        eid = json.loads(ctl(root, "egress", "create", "--address", "127.0.0.2:1080", "-o", "json").stdout)[
            "egress"]["egressId"]
    finally:
        assert agent.stop() == 0, agent.output()
    before = sorted(os.listdir(STATE))
    assert before

    apt_install(packages["deb2"])
    assert installed_version() == f"{packages['version']}-2"
    assert sorted(os.listdir(STATE)) == before
    assert os.stat(STATE).st_mode & 0o777 == 0o700
    agent = Agent(agent_config(tmpdir))
    try:
        got = json.loads(ctl(root, "egress", "get", eid, "-o", "json").stdout)["egress"]
        assert got["spec"]["socks5"]["address"] == "127.0.0.2:1080"
    finally:
        assert agent.stop() == 0, agent.output()


def exited(pid):
    """Gone or a zombie (the first agent is this test's child; later ones are not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def serving_pids(text):
    return [int(m) for m in re.findall(r"\(pid (\d+)\) serving on ", text)]


def test_upgrade_and_downgrade_under_guest_load_drop_no_connection(packages, clean_machine, lab, monkeypatch):
    """An upgrade leaves the running agent running (--no-stop-on-upgrade) and its
    postinst reloads the unit, whose ExecReload sends SIGUSR2: the agent starts the
    installed (new) binary with --take-over, which takes the store, the listeners and
    the plain relays over, and the old process exits. Here deb 1 -> 2, then back to 1,
    while a guest streams, idles and opens ~25 connections a second through an Egress.
    No systemd here, so the test sends the signal the reload sends."""
    apt_install(packages["deb1"])
    monkeypatch.setenv("KIBOTOS_AGENT_BIN", agent_path())
    ws = lab.add_workspace()
    e2e.start_destinations(lab)
    e2e.dp.start_dante(lab, 1080)
    agent = kibotos_agent.Agent(config=e2e.agent_config(lab))
    agent.env = {k: v for k, v in agent.env.items() if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "NOTIFY_SOCKET")}
    pids = []
    try:
        agent.start()
        env = type("Env", (), {"lab": lab, "ws": ws, "agent": agent, "socks": f"{lab.socks_v4}:1080"})
        egress, workspace = e2e.attach(env)
        wid = e2e.field(workspace, "workspace_id")
        count_direct_packets(lab, ws, [e2e.covered(lab)])
        retransmits = syn_retransmits(lab, ws)
        started = [agent_info(agent)["processStartTime"]]
        pids = [agent.proc.pid]
        load = start_guest_load(lab, ws, seconds=12)
        for deb, version in ((packages["deb2"], "2"), (packages["deb1"], "1")):
            time.sleep(2.5)
            apt_install(deb, downgrade=True)
            assert installed_version() == f"{packages['version']}-{version}"
            assert os.path.exists(f"/proc/{pids[-1]}")  # the package left it running
            os.kill(pids[-1], signal.SIGUSR2)
            kibotos_agent.wait_for(lambda: len(serving_pids(agent.log())) == len(pids) + 1, timeout=60,
                                   what="the new agent to serve")
            pids.append(serving_pids(agent.log())[-1])
            kibotos_agent.wait_for(lambda: exited(pids[-2]), timeout=30, what="the old agent to exit")
            info = agent_info(agent)
            started.append(info["processStartTime"])
            assert info["version"] == packages["version"]
            assert e2e.field(e2e.get_workspace(agent, wid), "workspace_id") == wid
        assert agent.proc.wait(timeout=10) == 0  # the first agent handed over and drained
        assert started[0] < started[1] < started[2]
        r = guest_results(load, timeout=120)
        print("package upgrade and downgrade under load:", json.dumps(r))
        assert r["up"] == ["OK"] * 4 and r["down"] == ["OK"] * 4, r  # sha256 both ways
        assert r["idle"] == ["timeout"] * 10, r  # none reset, ended or stalled
        assert r["new_failed"] == [] and r["new_ok"] >= 100, r
        assert syn_retransmits(lab, ws) == retransmits
        assert direct_packets(lab, ws) == 0
        log = agent.log()
        assert log.count("handing the API and the store over to a new agent") == 2, log
        assert e2e.peer(lab, ws, e2e.covered(lab)) == lab.socks_inet_v4
        e2e.wait_applied(agent, wid, 1, e2e.field(egress, "egress_id"), 1)
    finally:
        for pid in pids[1:]:
            if not exited(pid):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while not all(exited(p) for p in pids[1:]) and time.monotonic() < deadline:
            time.sleep(0.05)
        agent.cleanup()
