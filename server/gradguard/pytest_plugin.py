"""``pytest --gradguard``: run the user's own tests under the probe's tracer, in process.

Registered as a ``pytest11`` entry point, so pytest loads this module in every run of every project where
gradguard is installed: it only adds the options and the ``no_gradguard`` marker, and imports neither torch
nor the tracer.  With ``--gradguard`` it loads ``gradguard.pytest_tracing`` (torch, the tracer), which traces
each test's call and reports every hidden write it saw with its lines and a fix.

    pytest --gradguard            # a finding fails the test
    pytest --gradguard=warn       # a finding is a GradGuardWarning; the test keeps its outcome
    pytest --gradguard --gradguard-root src --gradguard-root tests

No sandbox: these are the user's own tests, run as they would run without the flag.
"""

from __future__ import annotations

import copy
import importlib

import pytest

MODES = ("fail", "warn")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("gradguard", "gradguard: hidden autograd mutations")
    group.addoption(
        "--gradguard", action="store", nargs="?", const="fail", default=None, metavar="MODE",
        help="run each test under gradguard's tracer: a write autograd cannot see (a `.data` write to a tensor a "
             "live graph saved, an in-place write torch only reports at backward...) fails the test (MODE fail, "
             "the default) or is reported as a GradGuardWarning (MODE warn)")
    group.addoption(
        "--gradguard-root", action="append", default=[], metavar="DIR",
        help="a folder whose files are your code (a finding is reported at the line in them that writes); may be "
             "repeated; default: pytest's rootdir")


@pytest.hookimpl(tryfirst=True)  # before pytest reads the conftests of the test paths
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """``--gradguard`` takes an optional value, so argparse would read ``pytest --gradguard tests/`` as the
    mode ``tests/``.  Only ``fail`` and ``warn`` are modes: a bare ``--gradguard`` before anything else is
    spelled ``--gradguard=fail`` before pytest parses the line for good."""
    changed = False
    for i, arg in enumerate(args):
        if arg == "--gradguard" and (i + 1 >= len(args) or args[i + 1] not in MODES):
            args[i] = "--gradguard=fail"
            changed = True
    if changed:
        early_config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(early_config.option))


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "no_gradguard: do not trace this test with pytest --gradguard")
    mode = config.getoption("gradguard", None)
    if not mode:
        return
    if mode not in MODES:  # not argparse's choices: see pytest_load_initial_conftests
        raise pytest.UsageError(f"--gradguard={mode}: expected --gradguard, --gradguard=fail or --gradguard=warn")
    try:
        # By name, like `-p gradguard.pytest_tracing`: it imports torch, which a run without --gradguard
        # must never pay for (nor need).
        tracing = importlib.import_module("gradguard.pytest_tracing")
    except ImportError as exc:
        raise pytest.UsageError(f"--gradguard needs torch in this environment ({exc})") from exc
    config.pluginmanager.register(tracing.GradGuardPlugin(config, mode), "gradguard-tracing")
