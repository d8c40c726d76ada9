"""Helpers for the API integration tests: test CAs, free ports, generated protos, the
npm-installed Connect clients."""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kibotos_agent import SOURCE_ROOT  # noqa: E402

GET_AGENT = "kibotos.ctrl.v1.AgentService/GetAgent"
NODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node")


def version():
    from kibotos_agent import agent_binary
    out = subprocess.run([agent_binary(), "--version"], capture_output=True, text=True, check=True).stdout
    return out.split()[-1]


def require_get_agent(agent):
    """AgentService is always linked: a GetAgent that answers unimplemented is a bug."""
    assert agent.has_method(GET_AGENT), "AgentService.GetAgent answers unimplemented"


def check_get_agent_json(body):
    assert isinstance(body, dict), body
    assert body["agent"]["version"] == version()
    assert body["agent"]["uptime"].endswith("s")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


class Pki:
    """A CA with a server and a client certificate, made with the openssl CLI."""

    def __init__(self, directory, name):
        self.dir = directory
        self.name = name
        os.makedirs(directory, exist_ok=True)
        self.ca_key, self.ca_cert = self.path("ca.key"), self.path("ca.pem")
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", self.ca_key, "-out", self.ca_cert, "-days", "2", "-subj", "/CN=%s test CA" % name,
                cwd=directory)

    def path(self, f):
        return os.path.join(self.dir, "%s-%s" % (self.name, f))

    def issue(self, cn, server=False):
        """Returns (cert, key) paths for a certificate signed by this CA."""
        key, csr, cert, ext = (self.path(cn + s) for s in (".key", ".csr", ".pem", ".ext"))
        with open(ext, "w") as f:
            if server:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", csr, "-subj", "/CN=" + cn, cwd=self.dir)
        openssl("x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key, "-CAcreateserial",
                "-out", cert, "-days", "2", "-extfile", ext, cwd=self.dir)
        return cert, key


def proto_files():
    return sorted(glob.glob(os.path.join(SOURCE_ROOT, "proto", "kibotos", "ctrl", "v1", "*.proto")))


def descriptor_set(out_dir):
    """A FileDescriptorSet of the ctrl API (with imports) for buf curl and connect-node."""
    out = os.path.join(out_dir, "ctrl.binpb")
    subprocess.run(["protoc", "--proto_path=" + os.path.join(SOURCE_ROOT, "proto"), "--include_imports",
                    "-o", out] + proto_files(), check=True)
    return out


def python_protos(out_dir):
    """Generates the ctrl API's Python modules; returns the agent_pb2 module."""
    subprocess.run(["protoc", "--proto_path=" + os.path.join(SOURCE_ROOT, "proto"), "--python_out=" + out_dir]
                   + proto_files(), check=True)
    sys.path.insert(0, out_dir)
    from kibotos.ctrl.v1 import agent_pb2
    return agent_pb2


def npm_install():
    """Installs the Connect clients from the committed package-lock.json (npm ci)."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("node and npm are needed for the independent Connect clients")
    if not os.path.exists(os.path.join(NODE_DIR, "node_modules", ".package-lock.json")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR, check=True,
                       timeout=600)
    return NODE_DIR


def connect_node(options, timeout=60):
    """Runs node/connect_call.mjs; returns its {"response"|"error": ...} object."""
    out = subprocess.run(["node", os.path.join(NODE_DIR, "connect_call.mjs"), json.dumps(options)],
                         capture_output=True, text=True, timeout=timeout, cwd=NODE_DIR)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def buf_curl(args, timeout=60):
    out = subprocess.run([os.path.join(NODE_DIR, "node_modules", ".bin", "buf"), "curl"] + args,
                         capture_output=True, text=True, timeout=timeout)
    return out
