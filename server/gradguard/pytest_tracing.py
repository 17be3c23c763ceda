"""The tracing half of ``pytest --gradguard``: ``pytest_plugin`` registers ``GradGuardPlugin`` only when the flag
is given, since this module imports torch.

Each test's call (the test function, not its fixtures' setup and teardown) runs under a fresh ``Watcher``, the
probe's tracer.  When it returns:

- a test that passed but hid a mutation (a ``.data`` write a backward then silently read, an in-place write to
  a tensor a live graph saved, a hook that writes its gradient...) fails with the report (``--gradguard``), or
  passes with a ``GradGuardWarning`` per finding, attributed to the line that writes (``--gradguard=warn``);
- a test that raised keeps its own error (torch's "modified by an inplace operation" stays the failure); the
  report, which names the line that wrote (torch's message does not), is added to it;
- a finding torch itself raised for, in a test that caught the error and passed (``pytest.raises``), is torch's
  own check doing its job: it is not reported again.

Every finding names the writing line, the saving line, the backward and a fix (the rule page's "How to fix it").
"""

from __future__ import annotations

import os
import sys

import pytest

from .probe import tracer as probe_tracer
from .probe.frames import UserCode
from .probe.model import ProbeFinding
from .watching import Watcher, add_note, collect, hide_own_frames, report, user_code, warn

FINDINGS = pytest.StashKey[list]()


class _Current:
    """The running session's user code, for the ``inplace=True`` module patch: it is installed once per process
    (pytester runs several sessions in one), and each session has its own roots."""

    user: UserCode | None = None

    def is_user(self, code) -> bool:
        user = self.user
        return user is not None and user.is_user(code)


_CURRENT = _Current()
_PATCHED = False


class GradGuardPlugin:
    def __init__(self, config: pytest.Config, mode: str):
        global _PATCHED
        self.mode = mode
        self.root = str(config.rootpath)
        where = config.invocation_params.dir
        roots = [str((where / r).resolve()) for r in config.getoption("gradguard_root") or ()] or [self.root]
        self.roots = roots
        self.user = user_code(roots)
        self.traced = 0
        self.flagged: list[tuple[str, list[ProbeFinding]]] = []
        self.internal_errors: list[str] = []
        _CURRENT.user = self.user
        if not _PATCHED:  # where each inplace=True module was made: a note on GG005 findings
            probe_tracer.watch_inplace_modules(_CURRENT)
            _PATCHED = True

    def pytest_unconfigure(self) -> None:
        if _CURRENT.user is self.user:
            _CURRENT.user = None

    def pytest_report_header(self) -> str:
        roots = ", ".join(self.roots)
        return f"gradguard: each test runs under the probe's tracer ({self.mode} on a finding); your code: {roots}"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        if item.get_closest_marker("no_gradguard") is not None:
            return (yield)
        tracer = Watcher(self.user)
        try:
            tracer.__enter__()
        except Exception as exc:  # noqa: BLE001 - the test runs as it would without the plugin
            self.internal_errors.append(f"{item.nodeid}: not traced: {type(exc).__name__}: {exc}")
            return (yield)
        self.traced += 1
        try:
            result = yield
        except BaseException as error:
            tracer.__exit__(type(error), error, error.__traceback__)
            self._after(item, tracer, error)
            raise
        tracer.__exit__(None, None, None)
        self._after(item, tracer, None)
        return result

    def _after(self, item: pytest.Item, tracer: Watcher, error: BaseException | None) -> None:
        try:
            self._report(item, tracer, error)
        except Warning:  # -W error::gradguard.GradGuardWarning: the warning is the test's failure
            raise
        except Exception as exc:  # noqa: BLE001 - a tracer bug must never change the test's own outcome
            self.internal_errors.append(f"{item.nodeid}: report: {type(exc).__name__}: {exc}")

    def _report(self, item: pytest.Item, tracer: Watcher, error: BaseException | None) -> None:
        if isinstance(error, (pytest.skip.Exception, pytest.xfail.Exception, pytest.exit.Exception,
                              KeyboardInterrupt)):
            return
        found = collect(tracer, self.user, error)
        if tracer.internal_errors:
            self.internal_errors += [f"{item.nodeid}: {e}" for e in tracer.internal_errors[:2]]
        if error is None:
            # torch raised for it, and the test caught that error: torch's own check did its job.
            found = [f for f in found if f.kind != "raised"]
        if not found:
            return
        self.flagged.append((item.nodeid, found))
        if error is not None:
            add_note(error, report(found, self.root), found)
            if str(error) in tracer.emulated:
                hide_own_frames(error, self.user)
            if sys.version_info < (3, 11):
                item.stash[FINDINGS] = found  # no exception notes: the report becomes a section
        elif self.mode == "warn":
            for finding in found:
                warn(finding, self.root)
        else:
            item.stash[FINDINGS] = found

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        rep = yield
        found = item.stash.get(FINDINGS, None) if call.when == "call" else None
        if found:
            text = report(found, self.root)
            if rep.passed:
                rep.outcome = "failed"
                rep.longrepr = text
            else:
                rep.sections.append(("gradguard", text))
        return rep

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        tr.write_sep("-", "gradguard")
        count = sum(len(found) for _, found in self.flagged)
        if not count:
            tr.write_line(f"no hidden autograd mutation in {self.traced} traced test{'s' if self.traced != 1 else ''}")
        else:
            what = "failed their tests" if self.mode == "fail" else "were reported as warnings"
            tr.write_line(f"{count} hidden autograd mutation{'s' if count != 1 else ''} in {len(self.flagged)} of "
                          f"{self.traced} traced tests ({what}):")
            for nodeid, found in self.flagged:
                for f in found:
                    site = os.path.relpath(f.site.path, self.root) if f.site.path.startswith(self.root) else f.site.path
                    tr.write_line(f"  {nodeid}: {f.code} ({f.kind}) at {site}:{f.site.line}")
        if self.internal_errors:
            tr.write_line(f"the tracer hit {len(self.internal_errors)} internal error(s) (findings may be missing); "
                          f"first: {self.internal_errors[0]}")

