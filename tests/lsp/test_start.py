"""What the server imports at start (the first diagnostics need none of the fix layer, libcst or workspace mode's
closed files: ``gradguard.lsp.on_demand`` loads them on first use), and that the server is what the modules
loaded on demand, the probe and workspace mode take it as (each declares the ``Protocol`` it needs)."""

from __future__ import annotations

import subprocess
import sys
import typing

from gradguard.lsp.actions import ActionServer
from gradguard.lsp.probe_support import ProbeServer
from gradguard.lsp.server import GradguardServer
from gradguard.lsp.workspace import WorkspaceServer

NOT_AT_START = ("libcst", "jedi", "torch", "gradguard.lsp.actions", "gradguard.lsp.hover", "gradguard.lsp.fixes",
                "gradguard.autofix.writer", "gradguard.autofix.plan", "gradguard.lsp.closed_files", "gradguard.batch",
                "gradguard.result_cache", "gradguard.files", "pathspec", "multiprocessing", "importlib.metadata")


def test_the_server_starts_without_the_fix_layer_or_closed_files():
    script = ("import sys, gradguard.cli, gradguard.lsp.main as m; m.build(); "
              f"print(sorted(n for n in sys.modules if n.startswith({NOT_AT_START!r})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


# The analysis: what the first diagnostics run, and what ``gradguard lsp`` imports only after the server has put its
# cache of generated code in place (``lsp/generated_code.py``), so that the analysis's dataclasses come compiled.
ANALYSIS = ("gradguard.config", "gradguard.rules", "gradguard.engine", "gradguard.api", "gradguard.inference",
            "gradguard.fixes", "gradguard.knowledge")


def test_the_command_line_leaves_the_analysis_to_the_command_that_runs_it():
    script = ("import sys, gradguard.cli as cli; cli.build_parser().parse_args(['lsp']); "
              f"print(sorted(n for n in sys.modules if n.startswith({ANALYSIS!r})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def _members(protocol: type) -> set[str]:
    names = set(typing.get_type_hints(protocol, localns=vars(sys.modules[protocol.__module__])))
    names |= {n for n, v in vars(protocol).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


def test_the_server_has_what_each_protocol_asks_for():
    server = GradguardServer()
    try:
        for protocol in (ActionServer, ProbeServer, WorkspaceServer):
            missing = [n for n in _members(protocol) if not hasattr(GradguardServer, n) and n not in vars(server)]
            assert sorted(missing) == [], protocol.__name__
    finally:
        server.shutdown_work()
