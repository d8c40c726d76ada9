import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lab import Lab  # noqa: E402


@pytest.fixture
def lab():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, nftables)")
    with Lab() as lab:
        yield lab


@pytest.fixture
def ws(lab):
    """A guest/workspace namespace pair in the lab."""
    return lab.add_workspace()
