"""Gradients asked for of a tensor that was written in place (rule GG107).  Imports torch.

An in-place write that autograd records gives the tensor a new history: the gradient a backward
computes "of the tensor" is then the gradient of the values after the write.  Three ways of asking
for it make that a silently different number from the one meant:

- ``t.retain_grad()`` before the write: ``t.grad`` follows the tensor to its newest version;
- a hook registered on ``t`` after the write, or ``t`` passed as ``inputs=`` to ``torch.autograd.grad``
  (or ``backward``) after it, while the values from before the write were also used elsewhere in the
  graph: the gradient asked for leaves those uses out.

The tracer reports each recorded in-place write to a tensor with a history (``on_write``); asking is
seen by wrapping ``Tensor.register_hook`` and by the tracer's backward (``on_backward``), where the
graph the backward runs decides: the changed tensor's newest node must be reached and, for the second
kind, the node from before the write must also be reached through another path.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass

import torch

from .frames import UserCode, frame_site, user_frame
from .graph import walk
from .kept import forgetter
from .model import Note, ProbeFinding, Site
from .source import expression_at

_Tensor = torch.Tensor
_KEPT = 256  # written tensors remembered (the oldest are forgotten first)
_WAITING = 64  # gradients asked for that no backward has computed yet (they hold graph nodes)


@dataclass
class Written:
    """A recorded in-place write to a tensor with a history."""

    site: Site
    op: str
    before: object  # the tensor's grad_fn before the write


@dataclass
class Asking:
    """A gradient asked for of a tensor written in place, waiting for a backward."""

    how: str  # "retain_grad" | "hook" | "inputs"
    tensor: weakref.ref
    writes: list[Written]
    newest: object  # the tensor's grad_fn when the gradient was asked for
    asked: Site | None


class AskedGradients:
    """One per tracer."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.written: dict[int, tuple[weakref.ref, list[Written]]] = {}
        self.waiting: list[Asking] = []
        self.found: dict[tuple, tuple[Asking, Written, Site | None]] = {}
        self._patched = None

    def install(self) -> None:
        original = _Tensor.register_hook
        asked = self

        def register_hook(self, hook):
            try:
                asked._asked(self, "hook", sys._getframe(1))
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                asked.errors.append(f"asked: {type(exc).__name__}: {exc}")
            return original(self, hook)

        register_hook.__wrapped__ = original
        self._patched = original
        _Tensor.register_hook = register_hook

    def uninstall(self) -> None:
        if self._patched is not None:
            _Tensor.register_hook = self._patched
            self._patched = None

    def on_write(self, t, frame, op: str) -> None:
        """``t`` (a tensor with a grad_fn) is written in place with grad mode on, by the user's ``frame``."""
        key = id(t)
        entry = self.written.get(key)
        if entry is None or entry[0]() is not t:
            entry = (weakref.ref(t, forgetter(self.written, key)), [])
            self.written[key] = entry
            if len(self.written) > _KEPT:
                del self.written[next(iter(self.written))]
        writes = entry[1]
        writes.append(Written(frame_site(frame), op, t.grad_fn))
        del writes[:-4]
        if t.retains_grad:
            self._wait(Asking("retain_grad", entry[0], [writes[-1]], None, None))

    def _wait(self, asking: Asking) -> None:
        self.waiting.append(asking)
        del self.waiting[:-_WAITING]

    def _asked(self, t, how: str, caller) -> None:
        entry = self.written.get(id(t))
        if entry is None or entry[0]() is not t:
            return
        frame = user_frame(caller, self.user)
        asked = frame_site(frame) if frame is not None else None
        del frame
        self._wait(Asking(how, entry[0], list(entry[1]), t.grad_fn, asked))

    def on_backward(self, roots, inputs, backward: Site | None) -> None:
        for t in inputs or ():
            if isinstance(t, _Tensor):
                self._asked(t, "inputs", None)
                if self.waiting and self.waiting[-1].how == "inputs":
                    self.waiting[-1].asked = backward
        if not self.waiting:
            return
        for asking in self.waiting:  # held through the walk: an id below is never a freed node's
            t = asking.tensor()
            if asking.how == "retain_grad" and t is not None:
                asking.newest = t.grad_fn
            del t
        befores = {id(w.before) for a in self.waiting for w in a.writes}
        reached: set[int] = set()
        parents: dict[int, list] = {}
        for node, nexts in walk(roots):
            reached.add(id(node))
            for n in nexts:
                if id(n) in befores:
                    parents.setdefault(id(n), []).append(node)
        waiting, self.waiting = self.waiting, []
        for asking in waiting:
            t = asking.tensor()
            if t is None:
                continue
            if id(asking.newest) not in reached:
                self.waiting.append(asking)
                continue
            if asking.how == "retain_grad":
                self._found(asking, asking.writes[0], backward)
                continue
            for i, write in enumerate(asking.writes):
                after = asking.writes[i + 1].before if i + 1 < len(asking.writes) else asking.newest
                if any(p is not after for p in parents.get(id(write.before), ())):
                    self._found(asking, write, backward)

    def _found(self, asking: Asking, write: Written, backward: Site | None) -> None:
        key = (write.site.path, write.site.line, write.site.column)
        self.found.setdefault(key, (asking, write, backward))

    def findings(self) -> list[ProbeFinding]:
        found = []
        for asking, write, backward in self.found.values():
            said = expression_at(write.site)
            what = f"`{said}`" if said else f"in-place `{write.op}`"
            at = f" at line {asking.asked.line}" if asking.asked else ""
            notes = []
            if asking.how == "retain_grad":
                message = (f"{what} changes in place a tensor whose gradient is retained (retain_grad() was called "
                           "before this write): its .grad is then the gradient of the values after the write, not "
                           "of the values retain_grad() was called on")
            else:
                asked = ("a hook registered on it" if asking.how == "hook"
                         else "an input the backward computes gradients for")
                message = (f"{what} changes in place a tensor whose gradient is asked for afterwards ({asked}{at}), "
                           "while the values from before the write are also used elsewhere in the graph: torch "
                           "gives the gradient of the values after the write, which leaves those uses out")
                if asking.asked:
                    notes.append(Note(asking.asked, "the gradient is asked for here"))
            if backward and backward != asking.asked:
                notes.append(Note(backward, "the backward that computes it"))
            found.append(ProbeFinding("GG107", "silent", write.site, message, notes=tuple(notes), op=write.op,
                                      backward=backward))
        return found
