# pytest only loads conftest.py files up to its rootdir; when it is this folder, the
# shared fixtures in ../conftest.py are not seen, so load them here too.
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kibotos_agent import agent, agent_factory, tmp_state  # noqa: E402,F401
from api_helpers import Pki, free_port  # noqa: E402


@pytest.fixture
def mtls(agent_factory, tmp_state):
    """An agent serving the API on a mutual-TLS port too: (agent, Pki, port, an
    Operator's (cert, key))."""
    pki = Pki(tmp_state + "/pki", "operator")
    cert, key = pki.issue("agent-server", server=True)
    port = free_port()
    a = agent_factory(config={"api": {"tls": {"listen": "127.0.0.1:%d" % port, "cert": cert, "key": key,
                                              "client_ca": pki.ca_cert}}})
    return a, pki, port, pki.issue("operator")
