import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest

pytest.register_assert_rewrite("programs")  # its assert_fix_proven shows the values it compared


@pytest.fixture(autouse=True)
def _no_result_cache(monkeypatch):
    """The CLI's result cache is off in tests, so every run really analyses; tests/test_result_cache.py
    turns it on where it is the subject."""
    monkeypatch.setenv("GRADGUARD_NO_CACHE", "1")


class _Crashes(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        if record.exc_info:
            self.records.append(record)


@pytest.fixture(autouse=True)
def _fix_builders_do_not_crash(request):
    """A fix builder that raises anything but CannotFix loses its fix without a word to the user (the fix layer
    logs it at debug level and moves on), so a test in which one does fails here, naming the exception.  A test
    that crashes a builder on purpose says so with ``@pytest.mark.fix_builder_crashes``."""
    if request.node.get_closest_marker("fix_builder_crashes"):
        yield
        return
    crashes = _Crashes()
    loggers = [logging.getLogger(name) for name in ("gradguard.autofix.build", "gradguard.fixes", "gradguard.probed_fixes")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(crashes)
        logger.setLevel(logging.DEBUG)
    yield
    for logger, level in zip(loggers, levels):
        logger.removeHandler(crashes)
        logger.setLevel(level)
    if crashes.records:
        record = crashes.records[0]
        pytest.fail(f"{len(crashes.records)} fix builder(s) raised: {record.getMessage()}: "
                    f"{record.exc_info[0].__name__}: {record.exc_info[1]}", pytrace=False)
