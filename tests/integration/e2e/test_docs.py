"""Issue 31, docs that do not lie: every fenced block whose info string is exactly
`sh doctest` in README.md and docs/**/*.md runs here. The convention the docs are
written to: the blocks of one file run in file order in ONE bash process with `set -euo
pipefail`, in a fresh lab with a fresh agent, bounded to 90 s. Before the first block
the lab's values are exported: PATH (the build's kibotosctl and kibotos-agent first),
KIBOTOS_SOCKET, SOCKS, SOCKS_AUTH (user alice, password s3cret), SOCKS_TLS and CA,
NETNS, GUEST, DEST (an HTTP server answering the address it sees as its peer) and
RESOLVER (answers www.example.test with DEST's address). A failing file reports the
block that failed (file:line) and what it printed."""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import e2e_env as e2e
from kibotos_agent import SOURCE_ROOT

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "api"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "dns"))
import api_helpers  # noqa: E402
import dns_fixtures as dx  # noqa: E402

BOUND_SECONDS = 90
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
MARK = "@@kibotos-doctest-block@@"  # separates the blocks' output; never shown
DEST_PORT = 80
RESOLVER_NAME = "www.example.test"


# -- finding the blocks -----------------------------------------------------------------
class Block:
    def __init__(self, path, line, text):
        self.path, self.line, self.text = path, line, text

    def where(self):
        return f"{os.path.relpath(self.path, SOURCE_ROOT)}:{self.line}"


def doctest_blocks(path):
    """The `sh doctest` blocks of one Markdown file, in file order; line is the fence's."""
    blocks, lines = [], open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        start, body = i + 1, []
        i += 1
        while i < len(lines):
            close = FENCE.match(lines[i])
            if close and close.group(2).startswith(fence[0]) and len(close.group(2)) >= len(fence) \
                    and not close.group(3).strip():
                break
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if info == "sh doctest":
            blocks.append(Block(path, start, "\n".join(body)))
    return blocks


def doc_files():
    files = [os.path.join(SOURCE_ROOT, "README.md")]
    files += sorted(glob.glob(os.path.join(SOURCE_ROOT, "docs", "**", "*.md"), recursive=True))
    return [os.path.relpath(f, SOURCE_ROOT) for f in files if os.path.exists(f) and doctest_blocks(f)]


def test_block_extraction():
    """The extractor takes exactly the `sh doctest` blocks (not ```sh, not ```sh doctest-x),
    with their lines, also inside a longer fence."""
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        f.write(textwrap.dedent("""\
            # t
            ```sh
            shown only
            ```
            ```sh doctest
            echo one
            ```
            ````markdown
            ```sh doctest
            not a block: inside another fence
            ```
            ````
            ```sh doctest-x
            no
            ```
              ```sh doctest
              echo two
              ```
            """))
    try:
        blocks = doctest_blocks(f.name)
    finally:
        os.unlink(f.name)
    assert [(b.line, b.text) for b in blocks] == [(5, "echo one"), (16, "echo two")]


# -- the lab ----------------------------------------------------------------------------
PEER_HTTP = r"""
import http.server, socketserver, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (self.client_address[0] + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
Server((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
"""


def start_peer_http(lab, addr, port):
    proc = lab.popen(lab.inet, e2e.dp.PYTHON, "-c", PEER_HTTP, addr, port)
    e2e.labmod.wait_for(lambda: lab.tcp_request(lab.inet, addr, port, timeout=0.5, read=False)[0], timeout=10,
                        what="the peer HTTP server")
    return proc


def start_resolver(lab, addr, answer):
    """dnsmasq in inet answering RESOLVER_NAME with `answer` (and nothing else)."""
    lab._ensure_bindable(lab.inet, addr)
    proc = lab.popen(lab.inet, "/usr/sbin/dnsmasq", "-k", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                     "--bind-interfaces", "--port=53", f"--listen-address={addr}", "--pid-file=", "--user=root",
                     "--group=root", f"--host-record={RESOLVER_NAME},{answer}")

    def answers():
        p = lab.run(lab.inet, "dig", f"@{addr}", RESOLVER_NAME, "A", "+short", "+time=1", "+tries=1",
                    check=False, timeout=10)
        return answer in p.stdout
    e2e.labmod.wait_for(answers, timeout=10, what="dnsmasq answering")
    return proc


def lab_variables(lab, agent, tmp):
    """Starts the lab's servers and returns the variables the blocks see."""
    ws = lab.add_workspace()
    dx.start_dante_udp(lab, 1080)  # CONNECT and UDP ASSOCIATE, no auth
    dx.start_dante_udp(lab, 1082, user="alice", password="s3cret")
    ca_key, ca_pem = e2e.dp.make_ca(tmp, "kibotos-doctest-ca")
    key, pem = e2e.dp.make_server_cert(tmp, ca_key, ca_pem, f"IP:{lab.socks_v4}")
    e2e.dp.start_stunnel(lab, tmp, key, pem, 1443, 1080)
    dest = lab.internet_v4(10)
    start_peer_http(lab, dest, DEST_PORT)
    resolver = lab.internet_v4(53)
    start_resolver(lab, resolver, dest)
    build = e2e.BUILD_ROOT
    return {
        "PATH": os.pathsep.join([os.path.join(build, "agent", "ctl"), os.path.join(build, "agent"),
                                 os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")]),
        "KIBOTOS_SOCKET": agent.socket_path,
        "SOCKS": f"{lab.socks_v4}:1080",
        "SOCKS_AUTH": f"{lab.socks_v4}:1082",
        "SOCKS_TLS": f"{lab.socks_v4}:1443",
        "CA": ca_pem,
        "NETNS": ws.path,
        "GUEST": f"{e2e.labmod.IP} netns exec {ws.guest}",
        "DEST": f"{dest}:{DEST_PORT}",
        "RESOLVER": f"{resolver}:53",
    }


# -- running a file -------------------------------------------------------------------------
def script_of(blocks):
    parts = ["set -euo pipefail"]
    for n, b in enumerate(blocks):
        parts.append(f"printf '\\n%s %d\\n' '{MARK}' {n}")
        parts.append(b.text)
    return "\n".join(parts) + "\n"


def split_output(output):
    """The output of each block (index -1: before the first)."""
    per = {}
    current = -1
    for line in output.splitlines():
        if line.startswith(MARK + " "):
            current = int(line.split()[1])
            continue
        per.setdefault(current, []).append(line)
    return {k: "\n".join(v).strip("\n") for k, v in per.items()}


def run_blocks(blocks, variables, cwd):
    """(exit code, timed out, output). The output goes to a file, not a pipe: what the
    blocks leave running in the background must not hold the run open; it is killed
    with the process group when bash ends."""
    # Only the lab's KIBOTOS_* reach the blocks (KIBOTOS_HTTP stays unset).
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIBOTOS_")}
    env.update(variables)
    log_path = os.path.join(cwd, "..", "doctest-output.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["/bin/bash", "-c", script_of(blocks)], cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = False
    try:
        proc.wait(timeout=BOUND_SECONDS)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    with open(log_path, errors="replace") as f:
        return proc.returncode, timed_out, f.read()


def failure_report(blocks, code, timed_out, out):
    per = split_output(out)
    last = max((k for k in per if k >= 0), default=-1)
    if last < 0:
        return f"the blocks did not start (exit {code}):\n{per.get(-1, '')}"
    b = blocks[last]
    how = f"did not finish within {BOUND_SECONDS} s" if timed_out else f"failed (exit {code})"
    return (f"{b.where()}: this block {how}:\n{textwrap.indent(b.text, '    ')}\n"
            f"its output:\n{textwrap.indent(per.get(last, '(none)'), '    ')}")


def test_runner_reports_the_failing_block_and_outlives_no_background_job(tmp_path):
    """Blocks share one bash (variables carry), `set -euo pipefail` stops at the first
    failing command, the report names that block's file:line and shows its output, and
    a job a block leaves in the background neither holds the run open nor survives it."""
    work = tmp_path / "work"
    work.mkdir()
    doc = os.path.join(SOURCE_ROOT, "doc.md")
    blocks = [Block(doc, 3, "X=carried; (sleep 60; echo late) & echo $! > ../bg.pid"),
              Block(doc, 9, 'echo "saw $X"; grep -q never /dev/null; echo after'),
              Block(doc, 14, "echo unreached")]
    start = time.monotonic()
    code, timed_out, out = run_blocks(blocks, {}, str(work))
    assert time.monotonic() - start < 30
    assert code == 1 and not timed_out
    report = failure_report(blocks, code, timed_out, out)
    assert report.startswith("doc.md:9: this block failed (exit 1)"), report
    shown = report.split("its output:", 1)[1]
    assert "saw carried" in shown and "after" not in shown and "unreached" not in out, report
    bg = int((tmp_path / "bg.pid").read_text())
    e2e.labmod.wait_for(lambda: process_gone(bg), timeout=5, what="the background job killed")


def process_gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("doc", doc_files())
def test_doc(doc, lab, agent_factory):
    blocks = doctest_blocks(os.path.join(SOURCE_ROOT, doc))
    tmp = tempfile.mkdtemp(prefix="kib-doctest-")
    try:
        if any(re.search(r"(^|[\s;|&(])buf\s", b.text) for b in blocks):
            put_buf_on_path(tmp)
        agent = agent_factory(config=e2e.agent_config(lab))
        variables = lab_variables(lab, agent, tmp)
        variables["PATH"] = tmp + os.pathsep + variables["PATH"]  # buf, when linked there
        work = os.path.join(tmp, "work")
        os.mkdir(work)
        code, timed_out, out = run_blocks(blocks, variables, work)
        assert code == 0 and not timed_out, failure_report(blocks, code, timed_out, out)
        e2e.assert_clean_exit(agent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def put_buf_on_path(directory):
    """buf from npm (tests/integration/api/node, as the API client tests install it),
    linked into `directory`; skips the file when npm cannot install it."""
    try:
        node_dir = api_helpers.npm_install()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        pytest.skip(f"this file has buf curl blocks and npm could not install buf: {e}")
    buf = os.path.join(node_dir, "node_modules", ".bin", "buf")
    if not os.path.exists(buf):
        pytest.skip(f"this file has buf curl blocks and npm installed no {buf}")
    os.symlink(buf, os.path.join(directory, "buf"))
