"""A parameter frozen by an assignment whose own guard keeps it from ever being unfrozen (rule GG103).  Imports torch.

``if p.requires_grad: p.requires_grad = trainable`` (or ``if not p.requires_grad: continue`` before it) writes only
to parameters that still require grad.  Once the line has written False, a later pass that asks for True skips
exactly the parameters it froze: they silently stay frozen and no backward gives them a gradient again.

While the user's code runs, ``nn.Parameter`` gets a ``requires_grad`` property and a ``requires_grad_`` method that
call torch's own.  The setter (and the method) remembers a freeze (True to False) written by the user's statement
``X.requires_grad = NAME`` (or ``X.requires_grad_(NAME)``) under such a guard (read from the statement's syntax).
The getter, switched on only while such a freeze is remembered, sees the guard read False for a parameter that line
froze, in a call of that line's function whose local ``NAME`` is True: the guard is about to skip the unfreeze.  The
proof is a later ``backward()`` that runs while those parameters still do not require grad: a finding at the guard.
A guard that only skips parameters frozen elsewhere (frozen for good on purpose), a freeze to a constant, and an
unfreeze that went through stay silent.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from .frames import UserCode, frame_site, frame_sites, skip_dynamo
from .model import Note, ProbeFinding, Site
from .merge import FROZE_NOTE, GUARD_SKIPS_OTHERS_NOTE
from .source import expression_at, guarded_flag_write

_Parameter = torch.nn.Parameter
_FLAG = torch._C.TensorBase.__dict__["requires_grad"]
_get = _FLAG.__get__
_set = _FLAG.__set__
_method = torch._C.TensorBase.requires_grad_
_compiling = torch.compiler.is_compiling
_KEPT = 64


@dataclass
class Freeze:
    """Parameters one guarded ``X.requires_grad = NAME`` set to False."""

    site: Site
    code: Any  # the code object of the function the line is in
    guard: Site  # the guard's test
    name: str  # the local whose value the line writes
    params: dict = field(default_factory=dict)  # id -> weak reference
    others: bool = False  # a call asking for True found the guard skipping a parameter frozen elsewhere


@dataclass
class SkippedUnfreeze:
    """A call of the freezing line's function that asked for True while its guard skipped parameters it froze."""

    freeze: Freeze
    callers: tuple
    params: dict = field(default_factory=dict)  # id -> weak reference


class GuardedFreezes:
    """One per tracer.  ``pending``: skipped unfreezes no backward has yet run after."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.freezes: list[Freeze] = []
        self.pending: list[SkippedUnfreeze] = []
        self.found: list[ProbeFinding] = []
        self._guards: dict[tuple, Any] = {}  # (code, line) -> (guard Site, name) or None
        self._installed = False

    def install(self) -> None:
        self._property(watch_reads=False)
        self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            for name in ("requires_grad", "requires_grad_"):
                if name in vars(_Parameter):
                    delattr(_Parameter, name)
            self._installed = False

    def _property(self, watch_reads: bool) -> None:
        freezes = self

        def setter(p, value):
            if _compiling():
                return _set(p, value)
            before = _get(p)
            _set(p, value)
            after = _get(p)
            if before != after:
                try:
                    freezes._on_write(p, after, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                    freezes.errors.append(f"guarded freeze: {type(exc).__name__}: {exc}")
            return None

        def getter(p):
            value = _get(p)
            if not value and not _compiling():
                try:
                    freezes._on_read(p, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001
                    freezes.errors.append(f"guarded freeze: {type(exc).__name__}: {exc}")
            return value

        def requires_grad_(p, requires_grad=True):
            if _compiling():
                return _method(p, requires_grad)
            before = _get(p)
            out = _method(p, requires_grad)
            after = _get(p)
            if before != after:
                try:
                    freezes._on_write(p, after, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001
                    freezes.errors.append(f"guarded freeze: {type(exc).__name__}: {exc}")
            return out

        for function in (getter, setter, requires_grad_):
            skip_dynamo(function)
        requires_grad_.__doc__ = _method.__doc__
        _Parameter.requires_grad = property(getter if watch_reads else _get, setter, None, _FLAG.__doc__)
        _Parameter.requires_grad_ = requires_grad_

    def _guard(self, frame):
        key = (frame.f_code, frame.f_lineno)
        if key not in self._guards:
            self._guards[key] = guarded_flag_write(frame_site(frame), "requires_grad")
        return self._guards[key]

    def _on_write(self, p, value: bool, frame) -> None:
        if value:  # an unfreeze went through: nothing to skip for this parameter any more
            for s in self.pending:
                s.params.pop(id(p), None)
            return
        if not self.user.is_user(frame.f_code):
            return
        found = self._guard(frame)
        if found is None:
            return
        guard, name = found
        site = frame_site(frame)
        freeze = next((f for f in self.freezes if f.site == site), None)
        if freeze is None:
            freeze = Freeze(site, frame.f_code, guard, name)
            self.freezes.append(freeze)
            del self.freezes[:-_KEPT]
            if len(self.freezes) == 1:
                self._property(watch_reads=True)
        freeze.params[id(p)] = weakref.ref(p)

    def _on_read(self, p, frame) -> None:
        for freeze in self.freezes:
            if frame.f_code is not freeze.code or not freeze.guard.line <= frame.f_lineno <= freeze.guard.end_line:
                continue
            if frame.f_locals.get(freeze.name) is not True:
                continue  # this call asks for False too: the guard skips nothing it should write
            ref = freeze.params.get(id(p))
            if ref is None or ref() is not p:
                freeze.others = True  # frozen elsewhere: the guard may be meant to keep it so
                continue
            callers, _ = frame_sites(frame.f_back, self.user, limit=4)
            callers = tuple(callers)
            skipped = next((s for s in self.pending if s.freeze is freeze and s.callers == callers), None)
            if skipped is None:
                skipped = SkippedUnfreeze(freeze, callers)
                self.pending.append(skipped)
                del self.pending[:-_KEPT]
            skipped.params[id(p)] = ref
            return

    def on_backward(self, backward: Site | None) -> None:
        """A backward is about to run: skipped unfreezes whose parameters still do not require grad are proven."""
        for s in list(self.pending):
            frozen = [p for p in (ref() for ref in s.params.values()) if p is not None and not _get(p)]
            self.pending.remove(s)
            if not frozen:
                continue
            f = s.freeze
            if any(x.site == f.guard for x in self.found):
                continue
            wrote = expression_at(f.site) or f"requires_grad = {f.name}"
            call = s.callers[0] if s.callers else None
            where = f" at line {backward.line}" if backward is not None else ""
            by = f"the call on line {call.line}" if call is not None else "a later call"
            notes = [Note(f.site, FROZE_NOTE)]
            if call is not None:
                notes.append(Note(call, f"this call asks for `{f.name}` = True"))
            if backward is not None:
                notes.append(Note(backward, "this backward() gives the still-frozen parameters no gradient"))
            if f.others:
                notes.append(Note(f.guard, GUARD_SKIPS_OTHERS_NOTE))
            self.found.append(ProbeFinding(
                "GG103", "silent", f.guard,
                f"this guard lets `{wrote}` (line {f.site.line}) write only to parameters that still require grad: "
                f"that line froze {len(frozen)} parameter tensor(s), so when {by} asks for `{f.name}` = True the "
                f"guard skips them and they stay frozen: the backward(){where} gives them no gradient; set "
                "requires_grad on every parameter, without the guard",
                notes=tuple(notes), callers=(), backward=backward))

    def findings(self) -> list[ProbeFinding]:
        return list(self.found)

