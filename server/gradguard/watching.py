"""``gradguard.watch()``: the probe's tracer around a training step of the user's own script, in process.

    with gradguard.watch():             # raises HiddenWriteError at the first hidden write
        loss = model(x).sum()
        loss.backward()

    @gradguard.watch(mode="warn")       # a GradGuardWarning instead, once per line
    def train_step(batch): ...

A write that a live graph's saved tensor sees is known when a backward uses it: ``watch`` raises (or warns)
right after that ``backward()`` returns, naming the line that wrote, the line that saved the tensor and the
backward.  Everything else the tracer finds (a write no backward used before the block ended, a gradient hook
that writes its gradient, a graph break...) is reported when the block ends.  An exception of the block itself
(torch's "modified by an inplace operation") is never replaced: the finding that explains it is added to it as
a note (Python 3.11+; an attribute ``gradguard_findings`` on older ones).

Imports torch (through the tracer): ``import gradguard`` loads this module only when ``gradguard.watch`` is
used.  The pytest plugin (``pytest --gradguard``, ``pytest_tracing``) uses the same ``Watcher`` and report.
"""

from __future__ import annotations

import functools
import gc
import linecache
import os
import re
import sys
import sysconfig
import warnings
from importlib import resources
from typing import Any, Callable, Iterable, Sequence

from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from .probe import tracer as _tracer_module
from .probe.exceptions import classify_exception
from .probe.frames import UserCode
from .probe.model import ProbeFinding, Site
from .probe.tracer import Tracer

MODES = ("raise", "warn")


class GradGuardWarning(UserWarning):
    """A hidden autograd mutation, reported by ``watch(mode="warn")`` or ``pytest --gradguard=warn``."""


class HiddenWriteError(RuntimeError):
    """A hidden autograd mutation, raised by ``watch()``.  ``findings``: the probe's findings it reports."""

    def __init__(self, text: str, findings: Sequence[ProbeFinding] = ()):
        super().__init__(text)
        self.findings = list(findings)


# --- the tracer, told as soon as a backward used a written saved tensor ---------------------------------


class _NoCollect:
    @staticmethod
    def collect(*_args, **_kwargs) -> int:
        return 0


class Watcher(Tracer):
    """The probe's ``Tracer``, plus: ``on_realized(findings)`` is called right after a ``backward()`` that used
    a saved tensor some op had written (the moment the write is known to matter); and ``findings()`` skips the
    full garbage collection when no write hit a saved tensor (it only decides whether such a write's graph is
    still alive; it costs ~0.1 s with torch loaded, per test or per step)."""

    def __init__(self, user: UserCode, on_realized: Callable[[list[ProbeFinding]], None] | None = None):
        super().__init__(user)
        self.on_realized = on_realized
        self._told: set[int] = set()

    def _backward(self, roots, *args, **kwargs):
        out = super()._backward(roots, *args, **kwargs)
        if self.on_realized is not None and self.conflicts:
            found = self._realized()
            if found:
                self.on_realized(found)
        return out

    def _realized(self) -> list[ProbeFinding]:
        found = []
        try:
            for conflict in list(self.conflicts.values()):
                if conflict.realized is None or id(conflict) in self._told:
                    continue
                self._told.add(id(conflict))
                finding = self._finding(conflict)
                if finding is not None:
                    found.append(finding)
        except Exception as exc:  # noqa: BLE001 - the tracer changed under us: report at the end only
            self.internal_errors.append(f"watch: {type(exc).__name__}: {exc}")
            self.on_realized = None
        return found

    def findings(self) -> list[ProbeFinding]:
        if self.conflicts or getattr(_tracer_module, "gc", None) is not gc:
            return super().findings()
        _tracer_module.gc = _NoCollect
        try:
            return super().findings()
        finally:
            _tracer_module.gc = gc


def user_code(roots: Sequence[str]) -> UserCode:
    """The probe's ``UserCode`` for ``roots``, also leaving out the running Python's own folders: a project's
    ``.venv`` (its ``bin/pytest``, its ``lib``) sits under the project's root but is never the user's code."""
    user = UserCode(list(roots))
    folders = set()
    for scheme_vars in ({}, {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}):
        paths = sysconfig.get_paths(vars=scheme_vars or None)
        for name in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):
            if paths.get(name):
                folders.add(os.path.join(os.path.realpath(paths[name]), ""))
    # Never a folder that holds a root (a project inside /usr/src with Python's prefix /usr is still the user's).
    user.excluded += tuple(f for f in folders if not any(r.startswith(f) for r in user.roots))
    return user


def collect(tracer: Tracer, user: UserCode, error: BaseException | None) -> list[ProbeFinding]:
    """The tracer's findings after a run, with the one ``error`` (what the run raised) proves, if any: the
    worker's ``_probe`` does the same for a script."""
    found = tracer.findings()
    if error is not None:
        try:
            extra = classify_exception(error, user, tracer)
        except Exception:  # noqa: BLE001 - never hide the user's own error behind ours
            extra = None
        if extra is not None:
            found.append(extra)
    # What torch raised (or would raise) first, then what it never sees, then what no backward used yet.
    order = {"raised": 0, "silent": 1, "graph-break": 2, "starved": 3, "pending": 5}
    found.sort(key=lambda f: (order.get(f.kind, 4), f.site.path, f.site.line, f.site.column))
    return found


def key(finding: ProbeFinding) -> tuple:
    return finding.code, finding.site.path, finding.site.line, finding.site.column


# --- the report -------------------------------------------------------------------------------------------

_RULE_DOC: dict[str, tuple[str, str]] = {}
# Where the page's first "How to fix it" paragraph speaks about the static message rather than the fix.
_FIX = {
    "GG101": "Move `step()` (or the update) after every backward that needs the graph, or compute the forward again "
             "after it (`gradguard rule GG101` lists the usual cases: a GAN, two losses on a shared trunk, a "
             "recurrent state).",
}


def rule_doc(code: str) -> tuple[str, str]:
    """(name, how to fix it) of a rule, from its shipped page (``rule_docs/CODE.md``, no torch, no rule import)."""
    known = _RULE_DOC.get(code)
    if known is None:
        name, fix = "", ""
        try:
            text = (resources.files("gradguard") / "rule_docs" / f"{code}.md").read_text(encoding="utf-8")
        except (OSError, ValueError):
            text = ""
        title = re.match(r"#\s*\S+\s+(\S+)", text)
        if title:
            name = title.group(1)
        section = re.search(r"^## How to fix it\s*\n(.*?)(?=^## |\Z)", text, re.S | re.M)
        if section:
            paragraph = section.group(1).strip().split("\n\n")[0]
            if not paragraph.startswith("```") and not paragraph.rstrip().endswith(":"):
                fix = " ".join(paragraph.split())
        fix = _FIX.get(code, fix)
        known = _RULE_DOC[code] = (name, fix)
    return known


def _where(site: Site, root: str | None) -> str:
    path = site.path
    if root:
        try:
            rel = os.path.relpath(path, root)
        except ValueError:
            rel = path
        if not rel.startswith(".."):
            path = rel
    return f"{path}:{site.line}"


def _source(site: Site) -> str:
    return linecache.getline(site.path, site.line).strip()


def describe(finding: ProbeFinding, root: str | None = None) -> str:
    """One finding in a few lines: what, the line that writes, the line that saved, the backward, the fix."""
    name, fix = rule_doc(finding.code)
    title = f"{finding.code} {name}".strip()
    rows: list[tuple[Site, str]] = [(finding.site, "writes here" if finding.kind in ("raised", "silent", "pending")
                                     else "here")]
    rows += [(site, "called from here") for site in finding.callers]
    # torch's message is the test's own error already: "backward() raises here" is enough.
    rows += [(note.site, note.message.split(": ", 1)[0] if note.message.startswith("backward() raises here:")
              else note.message) for note in finding.notes]
    width = max(len(_where(site, root)) for site, _ in rows)
    lines = [f"gradguard {title} ({finding.kind}) at {_where(finding.site, root)}: {finding.message}"]
    for site, what in rows:
        source = _source(site)
        lines.append(f"    {_where(site, root):<{width}}  {what}" + (f":  {source}" if source else ""))
    if fix:
        lines.append(f"    fix: {fix}")
    lines.append(f"    rule: `gradguard rule {finding.code}`")
    return "\n".join(lines)


def report(findings: Iterable[ProbeFinding], root: str | None = None) -> str:
    findings = list(findings)
    head = f"gradguard: {len(findings)} hidden autograd mutation{'s' if len(findings) != 1 else ''}"
    return "\n".join([head, *(describe(f, root) for f in findings)])


def add_note(error: BaseException, text: str, findings: Sequence[ProbeFinding]) -> None:
    """Add the explanation to the user's own exception without replacing it."""
    try:
        error.gradguard_findings = list(findings)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an exception type with __slots__
        pass
    if hasattr(error, "add_note"):
        try:
            error.add_note(text)
        except Exception:  # noqa: BLE001
            pass


_OWN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")


def hide_own_frames(error: BaseException, user: UserCode) -> None:
    """Drop the tracer's own frames from the end of ``error``'s traceback when nothing of the user's runs below
    them: the error the tracer raises in torch's name (torch's version check, which saved-tensor hooks switch
    off) then ends, like torch's own, at the call into autograd's engine."""
    tb, previous, cut = error.__traceback__, None, None
    while tb is not None:
        code = tb.tb_frame.f_code
        if cut is None and previous is not None and code.co_filename.startswith(_OWN):
            cut = previous
        elif cut is not None and user.is_user(code):
            return  # the user's code (a hook, a custom Function's backward) runs under the tracer's frames
        previous, tb = tb, tb.tb_next
    if cut is not None:
        cut.tb_next = None


def warn(finding: ProbeFinding, root: str | None = None) -> None:
    """A GradGuardWarning attributed to the line that writes."""
    module = os.path.splitext(os.path.basename(finding.site.path))[0]
    warnings.warn_explicit(describe(finding, root), GradGuardWarning, finding.site.path, finding.site.line,
                           module=module)


# --- watch() ----------------------------------------------------------------------------------------------


class watch:
    """The probe's tracer around a block or a function of the user's own code, in process.

    ``mode``: ``"raise"`` (the default) raises ``HiddenWriteError`` at the first hidden write (right after the
    ``backward()`` that used it, or when the block ends); ``"warn"`` issues a ``GradGuardWarning`` instead, once
    per line for the life of this object.  ``roots``: the folders whose files are the user's code (findings are
    reported at the line in them that writes); default: the folder of the file that called ``watch()`` and the
    current directory (installed packages, torch and gradguard are never the user's).

    A ``watch`` object is a context manager and a decorator; each use (each call of a decorated function) runs
    under a fresh tracer.  Nesting a ``watch`` inside another traces the inner block only once (the outer one).
    """

    def __init__(self, mode: str = "raise", *, roots: Sequence[str | os.PathLike] | None = None):
        if mode not in MODES:
            raise ValueError(f"watch(mode={mode!r}): expected one of {', '.join(map(repr, MODES))}")
        self.mode = mode
        if roots is None:
            caller = sys._getframe(1).f_code.co_filename
            roots = [os.getcwd()] if caller.startswith("<") else [os.path.dirname(os.path.abspath(caller)),
                                                                    os.getcwd()]
        self.roots = [os.fspath(r) for r in roots]
        self.root = self.roots[0]
        self.user = user_code(self.roots)
        self._runs: list[Watcher | None] = []
        self._told: set[tuple] = set()

    def __enter__(self) -> "watch":
        if any(isinstance(m, Tracer) for m in _active_modes()):
            self._runs.append(None)  # already traced by an outer watch (or the pytest plugin)
            return self
        tracer = Watcher(self.user, self._on_realized)
        tracer.__enter__()
        self._runs.append(tracer)
        return self

    def __exit__(self, exc_type, error, tb) -> bool:
        tracer = self._runs.pop()
        if tracer is None:
            return False
        tracer.__exit__(exc_type, error, tb)
        if isinstance(error, HiddenWriteError):
            return False
        try:
            found = [f for f in collect(tracer, self.user, error) if key(f) not in self._told]
        except Exception:  # noqa: BLE001 - a tracer bug must never replace the block's own outcome
            if error is not None:
                return False
            raise
        if error is not None:
            if found and not isinstance(error, (KeyboardInterrupt, GeneratorExit)):
                add_note(error, report(found, self.root), found)
                if str(error) in tracer.emulated:
                    hide_own_frames(error, self.user)
            return False
        self._tell(found)
        return False

    def _on_realized(self, found: list[ProbeFinding]) -> None:
        self._tell([f for f in found if key(f) not in self._told])

    def _tell(self, found: list[ProbeFinding]) -> None:
        if not found:
            return
        if self.mode == "warn":
            for finding in found:
                if key(finding) not in self._told:
                    self._told.add(key(finding))
                    warn(finding, self.root)
            return
        raise HiddenWriteError(report(found, self.root), found)

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def watched(*args: Any, **kwargs: Any) -> Any:
            with self:
                return func(*args, **kwargs)

        return watched


def _active_modes() -> list:
    return list(_get_current_dispatch_mode_stack())
