"""Cuts that starve trained parameters (rule GG103).  Imports torch.

``.detach()`` or ``.data`` of a tensor that requires grad, called by the user's code with grad mode
on, is a *cut*: the parameters upstream of it (the leaves its graph reaches) get no gradient through
its result.  That is often meant (a target network, a stop-gradient, a frozen encoder), so a cut is
reported only when torch shows the harm:

1. the cut's result flows into a ``backward()``'s roots (every op passes the cut's mark from its
   inputs to its outputs, as ``provenance`` does for values rebuilt from numbers);
2. then a parameter upstream of the cut is *trained* -- an optimizer whose ``step()`` runs holds it,
   or the user's code reads ``.grad`` of it at a line that also reads a gradient that did arrive (a
   hand-written update loop) -- and its ``.grad`` is None there: no backward since the gradients were
   last cleared reached it (the forward used it only before the cut).

Costs nothing before the first cut; the per-op propagation runs only while a cut's result lives.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .frames import UserCode, frame_site, user_frame
from .graph import leaves_of
from .model import Note, ProbeFinding, Site
from .source import attribute_at, expression_at

_Tensor = torch.Tensor
_CUTS = 64  # cut sites remembered


@dataclass(eq=False)  # compared and hashed by identity (marks collect them in dicts)
class Cut:
    site: Site
    upstream: dict[int, weakref.ref] = field(default_factory=dict)  # id -> the leaves upstream of the cut
    fed: Site | None = None  # the backward() whose roots the cut's result reached, since the last cut here
    judged: bool = True


@dataclass
class GradRead:
    """The reads of ``.grad`` at one place of the user's code (a hand-written update loop)."""

    site: Site
    some_arrived: bool = False
    missing: dict[int, weakref.ref] = field(default_factory=dict)


class Cuts:
    """One per tracer.  The tracer reports cuts, ops, backwards; ``install()`` watches optimizer steps,
    ``.data`` and ``.grad``."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.cuts: dict[tuple, Cut] = {}
        self.marked: dict[int, tuple[weakref.ref, tuple[Cut, ...]]] = {}
        self.reads: dict[tuple, GradRead] = {}
        self.found: dict[tuple, ProbeFinding] = {}
        self._undo: list = []

    # -- installation --

    def install(self) -> None:
        handle = register_optimizer_step_pre_hook(self._on_step)
        self._undo.append(handle.remove)
        base = torch._C.TensorBase
        cuts = self

        data = base.data

        def get_data(self):
            out = data.__get__(self)
            if self.requires_grad:
                try:
                    cuts._cut_by(out, self, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                    cuts.errors.append(f"cuts: {type(exc).__name__}: {exc}")
            return out

        grad = base.grad

        def get_grad(self):
            out = grad.__get__(self)
            try:
                cuts._grad_read(self, out, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001
                cuts.errors.append(f"cuts: {type(exc).__name__}: {exc}")
            return out

        for name, getter, original in (("data", get_data, data), ("grad", get_grad, grad)):
            setattr(_Tensor, name, property(getter, original.__set__, original.__delete__, original.__doc__))
            self._undo.append(lambda name=name: delattr(_Tensor, name))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    # -- what the tracer reports --

    def on_detach(self, out, source, frame) -> None:
        """``out = source.detach()`` called by ``frame`` (the caller of the op), grad mode on."""
        self._cut_by(out, source, frame)

    def _cut_by(self, out, source, frame) -> None:
        if not torch.is_grad_enabled() or not self.user.is_user(frame.f_code):
            return
        site = frame_site(frame)
        key = (site.path, site.line, site.column)
        cut = self.cuts.get(key)
        if cut is None:
            if len(self.cuts) >= _CUTS:
                return
            cut = self.cuts[key] = Cut(site)
        for leaf in leaves_of(source):
            if id(leaf) not in cut.upstream:
                cut.upstream[id(leaf)] = weakref.ref(leaf)
        cut.fed, cut.judged = None, False
        self._mark(out, (cut,))

    def on_op(self, args, kwargs, out) -> None:
        """Pass cut marks from an op's inputs to its outputs."""
        found: tuple[Cut, ...] = ()
        marked = self.marked
        for a in (args if not kwargs else (*args, *kwargs.values())):
            if isinstance(a, _Tensor):
                entry = marked.get(id(a))
                if entry is not None and entry[0]() is a:
                    found += entry[1]
            elif a.__class__ is list or a.__class__ is tuple:
                for b in a:
                    entry = marked.get(id(b))
                    if entry is not None and entry[0]() is b:
                        found += entry[1]
        if found:
            self._mark(out, tuple(dict.fromkeys(found)))

    def on_backward(self, roots, backward: Site | None) -> None:
        for root in roots if isinstance(roots, (tuple, list)) else (roots,):
            entry = self.marked.get(id(root))
            if entry is not None and entry[0]() is root:
                for cut in entry[1]:
                    if cut.fed is None:
                        cut.fed = backward

    def _on_step(self, optimizer, args, kwargs) -> None:
        try:
            held = {id(p): p for group in optimizer.param_groups for p in group["params"]}
            frame = user_frame(sys._getframe(1), self.user)
            step = frame_site(frame) if frame is not None else None
            del frame
            for cut in self.cuts.values():
                if cut.judged or cut.fed is None:
                    continue
                trained = [i for i in cut.upstream if i in held]
                if not trained:
                    continue  # not this optimizer's parameters (a GAN's other network, a frozen encoder)
                cut.judged = True
                starved = [held[i] for i in trained if held[i].grad is None]
                if starved:
                    self._report(cut, starved, Note(step, "the optimizer step that trains them") if step else None)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"cuts: {type(exc).__name__}: {exc}")

    def _grad_read(self, t, grad, caller) -> None:
        if not self.cuts or not self.user.is_user(caller.f_code):
            return
        key = (caller.f_code, caller.f_lasti)
        read = self.reads.get(key)
        if read is None:
            read = self.reads[key] = GradRead(frame_site(caller))
        if grad is not None:
            read.some_arrived = True
        else:
            read.missing[id(t)] = weakref.ref(t)
        if read.some_arrived and read.missing:
            self._judge_read(read)

    def _judge_read(self, read: GradRead) -> None:
        """A hand-written update reads gradients here; some arrived, and these did not."""
        for cut in self.cuts.values():
            if cut.fed is None:
                continue
            starved = [r() for i, r in read.missing.items() if i in cut.upstream]
            starved = [p for p in starved if p is not None]
            if starved:
                self._report(cut, starved, Note(read.site, "the update that reads their missing gradient"))
        read.missing.clear()

    # -- marks --

    def _mark(self, out, cuts: tuple[Cut, ...]) -> None:
        for t in (out,) if isinstance(out, _Tensor) else out if isinstance(out, (tuple, list)) else ():
            if isinstance(t, _Tensor):
                key = id(t)
                entry = self.marked.get(key)
                if entry is not None and entry[0]() is t:
                    self.marked[key] = (entry[0], tuple(dict.fromkeys(entry[1] + cuts)))
                else:
                    self.marked[key] = (weakref.ref(t, self._forgetter(key)), cuts)

    def _forgetter(self, key: int):
        def forget(ref):
            entry = self.marked.get(key)
            if entry is not None and entry[0] is ref:
                del self.marked[key]
        return forget

    # -- results --

    def _report(self, cut: Cut, starved: list, related: Note | None) -> None:
        key = (cut.site.path, cut.site.line)
        if key in self.found:
            return
        said = attribute_at(cut.site, "data") or expression_at(cut.site)
        what = f"`{said}`" if said else "this cut"
        shapes = ", ".join(str(list(p.shape)) for p in starved[:4]) + (", …" if len(starved) > 4 else "")
        backward = f" at line {cut.fed.line}" if cut.fed else ""
        message = (f"{what} cuts the graph: {len(starved)} trained parameter tensor(s) the forward used before it "
                   f"({shapes}) get no gradient from the backward(){backward} its result feeds, so they are never "
                   "trained by it")
        notes = [n for n in (related, Note(cut.fed, "the backward() that gives them no gradient") if cut.fed else None)
                 if n is not None]
        self.found[key] = ProbeFinding("GG103", "starved", cut.site, message, notes=tuple(notes), backward=cut.fed)

    def findings(self) -> list[ProbeFinding]:
        """Cuts judged at an optimizer step or at a hand-written update's reads of ``.grad``."""
        return list(self.found.values())
