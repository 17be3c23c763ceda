"""Gradients an optimizer applies twice (rule GG101, silent).  Imports torch.

A backward *adds* into each leaf's ``.grad`` (``AccumulateGrad`` adds in place when a gradient is already
there); only ``zero_grad()``, ``p.grad = None`` or a write that resets the tensor clears it.  So when nothing
clears the gradients an optimizer's step just applied, and a later backward adds to them, the next step of
that optimizer applies the sum: the earlier batch's gradient a second time (a GAN's discriminator whose
``zero_grad()`` was left out also keeps what the generator's loss pushed into it).

The probe watches it with torch's own signals, after a first step only (no cost before):

- after each ``optimizer.step()`` (a global step post-hook): for each of its parameters with a gradient, the
  gradient tensor and its version counter;
- a reset: an in-place ``zero_``/``fill_``/``copy_`` (or their ``_foreach`` forms) on that gradient's storage
  by anyone (``zero_grad(set_to_none=False)``, ``p.grad.data.zero_()``); ``p.grad = None`` or a new gradient
  tensor ends the watch (``p.grad`` is then another tensor);
- a backward that bumps the version of a watched gradient (AccumulateGrad's in-place add): that backward added
  to a gradient a step already applied;
- the optimizer's next ``step()`` (a pre-hook): parameters whose gradient is still the watched tensor, never
  reset, and added to by a backward since -- the step applies the old gradient again.

The finding is placed at the line to change: the first of those backwards that runs in the function that calls
the step, before the step's line (``zero_grad()`` belongs before it), else the step itself.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from .frames import UserCode, code_site, frame_site, user_frame
from .kept import Undoing
from .model import Note, ProbeFinding, Site
from .source import expression_at

_aten = torch.ops.aten
# In-place ops that leave nothing of a tensor's earlier values: a gradient written by one is cleared.
RESETS = frozenset({_aten.zero_.default, _aten.fill_.Scalar, _aten.fill_.Tensor, _aten.copy_.default,
                    _aten._foreach_zero_.default, _aten._foreach_copy_.default})
_KEPT = 4096  # watched gradients (the newest kept)
_CHAIN = 8  # user frames kept per backward


@dataclass(eq=False)
class _Watched:
    """One parameter's gradient, as an optimizer's step left it."""

    optimizer: weakref.ref
    param: weakref.ref
    grad: weakref.ref
    version: int
    step: Site | None
    added: list = field(default_factory=list)  # user frames (code, line, lasti) of the backwards that added to it


class StaleGrads(Undoing):
    """One per tracer.  The tracer reports resets (``on_reset``) and backwards (``before_backward`` /
    ``after_backward``); ``install()`` watches optimizer steps."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.watched: dict[int, _Watched] = {}  # storage address of the gradient -> what is known of it
        self.found: dict[tuple, ProbeFinding] = {}
        self._undo: list = []

    def install(self) -> None:
        self._undo.append(register_optimizer_step_pre_hook(self._before_step).remove)
        self._undo.append(register_optimizer_step_post_hook(self._after_step).remove)

    # -- what the tracer reports --

    def on_reset(self, args) -> None:
        """``args`` of a resetting in-place op: the gradients it writes are clear again."""
        first = args[0] if args else None
        for t in first if isinstance(first, (list, tuple)) else (first,):
            if isinstance(t, torch.Tensor):
                self.watched.pop(_address(t), None)

    def before_backward(self) -> list:
        """The watched gradients still in place, with their versions, before a backward runs."""
        live = []
        for key, w in list(self.watched.items()):
            p, g = w.param(), w.grad()
            if p is None or g is None or p.grad is not g:
                del self.watched[key]  # set to None, replaced, or gone: nothing left to apply twice
                continue
            live.append((w, g._version))
        return live

    def after_backward(self, live: list, frame) -> None:
        """The backward called from ``frame`` has run: those of ``live`` it added to."""
        chain = None
        for w, version in live:
            g = w.grad()
            if g is None or g._version <= version:
                continue
            if chain is None:
                chain = _chain(frame, self.user)
            w.added.append(chain)

    # -- optimizer steps --

    def _before_step(self, optimizer, args, kwargs) -> None:
        if not self.watched or all(_no_rate(group) for group in optimizer.param_groups):
            return  # a step with learning rate 0 changes nothing, whatever the gradients hold
        try:
            stale = []
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is None:
                        continue
                    w = self.watched.get(_address(g))
                    if (w is not None and w.added and w.optimizer() is optimizer and w.param() is p
                            and w.grad() is g):
                        stale.append(w)
            if stale:
                self._report(stale, sys._getframe(1))
        except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
            self.errors.append(f"stale grads: {type(exc).__name__}: {exc}")

    def _after_step(self, optimizer, args, kwargs) -> None:
        try:
            frame = user_frame(sys._getframe(1), self.user)
            step = frame_site(frame) if frame is not None else None
            del frame
            ref = weakref.ref(optimizer)
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p.grad
                    if g is not None and not g.is_sparse:
                        self.watched[_address(g)] = _Watched(ref, weakref.ref(p), weakref.ref(g), g._version, step)
            while len(self.watched) > _KEPT:
                del self.watched[next(iter(self.watched))]
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"stale grads: {type(exc).__name__}: {exc}")

    def _report(self, stale: list, frame) -> None:
        frame = user_frame(frame, self.user)
        if frame is None:
            return
        step = frame_site(frame)
        code, line = frame.f_code, frame.f_lineno
        del frame
        backwards = [chain for w in stale for chain in w.added]
        place = None
        for chain in backwards:  # the first backward the step's function ran before the step's line
            entry = next((e for e in chain if e[0] is code), None)
            if entry is not None and entry[1] < line:
                place = code_site(*entry)
                break
        key = (step.path, step.line)
        if key in self.found:
            return
        applied = next((w.step for w in stale if w.step is not None), None)
        said = expression_at(step) or "optimizer.step()"
        before = f" on line {applied.line}" if applied is not None else ""
        what = (f"the {len(stale)} gradient tensor(s) `{said}` applies still hold the gradients an earlier step{before} "
                "already applied: nothing cleared them since (no zero_grad(), no setting .grad to None), and "
                "backward() adds to a gradient that is there, so this step applies the earlier gradients again "
                "(silently)")
        notes = []
        if applied is not None:
            notes.append(Note(applied, "the step that applied those gradients first"))
        if place is not None:
            backward = expression_at(place) or "backward()"
            message = (f"`{backward}` adds to gradients that still hold what an optimizer step already applied: clear "
                       f"them before it (the optimizer's zero_grad()). In detail: {what}")
            notes.append(Note(step, "the step that applies the old gradients again"))
            self.found[key] = ProbeFinding("GG101", "silent", place, message, notes=tuple(notes), backward=place)
        else:
            message = f"{what}; clear them after each step (the optimizer's zero_grad())"
            self.found[key] = ProbeFinding("GG101", "silent", step, message, notes=tuple(notes))

    def findings(self) -> list[ProbeFinding]:
        return list(self.found.values())


def _no_rate(group: dict) -> bool:
    try:
        return float(group.get("lr", 1.0)) == 0.0
    except (TypeError, ValueError, RuntimeError):
        return False


def _address(t) -> int:
    return t.untyped_storage().data_ptr()


def _chain(frame, user: UserCode) -> tuple:
    chain = []
    while frame is not None and len(chain) < _CHAIN:
        if user.is_user(frame.f_code):
            chain.append((frame.f_code, frame.f_lineno, frame.f_lasti))
        frame = frame.f_back
    return tuple(chain)
