import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch):
    """The CLI's result cache is off in tests, so every run really analyses; tests/test_result_cache.py
    turns it on where it is the subject."""
    monkeypatch.setenv("GRADGUARD_NO_CACHE", "1")
