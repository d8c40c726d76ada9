# Fixtures shared by every integration area: see kibotos_agent.py.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kibotos_agent import agent, agent_factory, tmp_state  # noqa: E402,F401
