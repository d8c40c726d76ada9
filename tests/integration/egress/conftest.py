# pytest only loads conftest.py files up to its rootdir; when it is this folder, the
# shared fixtures in ../conftest.py are not seen, so load them here too.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kibotos_agent import agent, agent_factory, tmp_state  # noqa: E402,F401
