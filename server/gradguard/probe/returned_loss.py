"""A training step that computes a loss and returns nothing (rule GG103).  Imports torch.

Lightning-style trainers (``knowledge.names.RETURNED_LOSS_METHOD``) backpropagate and step only on the loss the
user's ``training_step`` returns; falling off the end of the method returns None, and the batch trains nothing
while the logged loss looks normal.  The probe wraps that method of every module class the user's code defines
and reports a call that:

- ends without a ``return`` statement (an explicit ``return``/``return None`` skips a batch on purpose),
- holds, at its end, a local scalar tensor with a graph (``requires_grad`` and a ``grad_fn``): the loss,
- ran no backward itself (manual optimisation backpropagates inside the method), on a module whose
  ``automatic_optimization`` is not False.

The local variables are read from the method's own frame at its return, through a profile function that is set
only while the method runs.
"""

from __future__ import annotations

import functools
import sys

import torch

from ..knowledge.names import AUTOMATIC_OPTIMIZATION_FLAG, RETURNED_LOSS_METHOD
from .frames import UserCode, frame_site
from .merge import RETURNED_LOSS_NOTE
from .model import Note, ProbeFinding, Site
from .source import is_return, last_binding

_Module = torch.nn.Module
_Tensor = torch.Tensor


class ReturnedLoss:
    """One per tracer.  ``install()`` wraps the method in module classes defined while it is installed; the tracer
    calls ``on_backward()`` for every backward."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.backwards = 0
        self.found: dict[tuple, ProbeFinding] = {}
        self._had_own = False
        self._previous = None

    def install(self) -> None:
        self._had_own = "__init_subclass__" in vars(_Module)
        self._previous = vars(_Module).get("__init_subclass__")
        watcher = self

        def __init_subclass__(cls, **kwargs):
            super(_Module, cls).__init_subclass__(**kwargs)
            try:
                watcher._wrap(cls)
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                watcher.errors.append(f"returned loss: {type(exc).__name__}: {exc}")

        _Module.__init_subclass__ = classmethod(__init_subclass__)

    def uninstall(self) -> None:
        if self._had_own:
            _Module.__init_subclass__ = self._previous
        elif "__init_subclass__" in vars(_Module):
            del _Module.__init_subclass__

    def on_backward(self) -> None:
        self.backwards += 1

    def _wrap(self, cls) -> None:
        method = vars(cls).get(RETURNED_LOSS_METHOD)
        code = getattr(method, "__code__", None)
        if code is None or not self.user.is_user(code):
            return
        watcher = self

        @functools.wraps(method)
        def training_step(module, *args, **kwargs):
            before = watcher.backwards
            seen: list = []

            def profile(frame, event, arg):
                if event == "return" and frame.f_code is code and not seen:
                    seen.append((frame_site(frame), [(name, value) for name, value in frame.f_locals.items()
                                                     if isinstance(value, _Tensor)]))
                return profile

            outer = sys.getprofile()
            sys.setprofile(profile)
            try:
                out = method(module, *args, **kwargs)
            finally:
                sys.setprofile(outer)
            try:
                if out is None and seen and watcher.backwards == before:
                    watcher._judge(module, seen[0][0], seen[0][1])
            except Exception as exc:  # noqa: BLE001
                watcher.errors.append(f"returned loss: {type(exc).__name__}: {exc}")
            return out

        setattr(cls, RETURNED_LOSS_METHOD, training_step)

    def _judge(self, module, end: Site, tensors: list) -> None:
        if getattr(module, AUTOMATIC_OPTIMIZATION_FLAG, True) is False or not torch.is_grad_enabled():
            return
        losses = [name for name, t in tensors if t.requires_grad and t.grad_fn is not None and t.numel() == 1]
        if not losses or is_return(end):
            return
        key = (end.path, end.line)
        if key in self.found:
            return
        name = losses[-1]
        cls = type(module).__name__
        message = (f"`{cls}.{RETURNED_LOSS_METHOD}` computes `{name}` (a scalar with a graph) and ends here without "
                   f"returning it: a trainer with automatic optimisation (Lightning) runs backward() and the "
                   f"optimizer step only on the loss `{RETURNED_LOSS_METHOD}` returns, and skips the batch on None, "
                   f"so nothing trains (no backward ran in the call). Return `{name}` here")
        bound = last_binding(end, name)
        notes = (Note(bound, RETURNED_LOSS_NOTE),) if bound is not None else ()
        self.found[key] = ProbeFinding("GG103", "starved", end, message, notes=notes)

    def findings(self) -> list[ProbeFinding]:
        return list(self.found.values())

