"""Cuts that starve trained parameters (rule GG103).  Imports torch.

``.detach()`` or ``.data`` of a tensor that requires grad, or ``nn.Parameter(t)`` of a tensor with a history (torch
makes a new leaf on ``t``'s data and keeps none of it), called by the user's code with grad mode on, is a *cut*: the parameters upstream of it (the leaves its graph reaches) get no gradient through
its result.  That is often meant (a target network, a stop-gradient, a frozen encoder), so a cut is
reported only when torch shows the harm:

1. the cut's result flows into a ``backward()``'s roots (every op passes the cut's mark from its
   inputs to its outputs, as ``provenance`` does for values rebuilt from numbers);
2. then a parameter upstream of the cut is *trained* -- an optimizer whose ``step()`` runs holds it,
   or the user's code reads ``.grad`` of it at a line that also reads a gradient that did arrive (a
   hand-written update loop) -- and its ``.grad`` is None there: no backward since the gradients were
   last cleared reached it (the forward used it only before the cut).

A *copy* is the other way to leave the graph (rule GG109): an op run with grad mode off on a leaf that
requires grad, whose result has the leaf's shape -- ``w = w - lr * w.grad``, ``self.w = self.w.clamp(...)``
under ``torch.no_grad()`` -- is a new tensor that does not require grad, standing where the parameter
stood.  It is marked as a cut is, and judged the same way; besides, a read of ``.grad`` on the copy itself
that finds nothing (the update loop now reads the copy) is the harm, and a backward that raises because
its roots, which went through the copy, do not require grad names the copy's line.

Costs nothing before the first cut; the per-op propagation runs only while a cut's result lives.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .frames import UserCode, frame_site, user_frame
from .kept import Undoing, forgetter
from .merge import GRAD_OFF_NOTE
from .graph import leaves_of
from .model import Note, ProbeFinding, Site
from .source import attribute_at, expression_at

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
# nn.Parameter(t) of a tensor with a history (Parameter.__new__ -> Tensor._make_subclass: a leaf on t's data)
_NEW_LEAF = " makes a new leaf on the data of a tensor with a history, keeps none of that history, and so"
_CUTS = 64  # cut sites remembered
_MADE = 4096  # no-grad values and stored tensors remembered (the newest)
_SUMS = (torch.ops.aten.add, torch.ops.aten.sub, torch.ops.aten.rsub)  # how a loss term joins the loss


@dataclass(eq=False)  # compared and hashed by identity (marks collect them in dicts)
class Cut:
    site: Site
    upstream: dict[int, weakref.ref] = field(default_factory=dict)  # id -> the leaves upstream of the cut
    fed: Site | None = None  # the backward() whose roots the cut's result reached, since the last cut here
    judged: bool = True
    copy: bool = False  # made under no_grad from a leaf (GG109), not by .detach()/.data (GG103)
    shape: tuple = ()  # a copy's shape (the leaf's): the leaf may be gone when the copy is judged
    # Where a scalar computed only from the cut's result was added to a scalar that requires grad (a loss
    # term summed into the loss): that term is dead, whatever else the backward trains.
    dead: Site | None = None
    # For a value computed with grad mode off from one that requires grad (the line in the function that switched it
    # off): the line of that switch.  Such a cut is judged only as a dead loss term.
    nograd: Site | None = None
    # An in-place write, grad mode on, of values with a history into part of a tensor computed from this cut (the
    # rest of it keeps the cut values): the first such write.
    partial: Site | None = None
    # Not a cut: a value mixing two versions of one set of parameters (``Tracer._mixing``): the optimizer step between.
    mix: Site | None = None
    # Said before "cuts the graph" when the cut is not a plain `.detach()`/`.data` (`nn.Parameter(t)`).
    how: str = ""
    # Loss terms that require grad, computed from this cut's result and summed into a loss: (where the sum is, the ids
    # of the leaves the term's graph reaches).  A term that reaches none of the trained parameters upstream of the cut
    # trains nothing the optimizer updates (its only path to them was through the cut).
    terms: list = field(default_factory=list)
    # Not a cut of a graph: a read, with grad mode on, of a tensor into which values computed with grad mode off from
    # parameters were written (a rollout buffer filled while acting): the line of that write.  Judged only as a dead
    # loss term, against ``sources`` (the parameters those values were computed from).
    stored: Site | None = None
    sources: dict[int, weakref.ref] = field(default_factory=dict)


@dataclass
class GradRead:
    """The reads of ``.grad`` at one place of the user's code (a hand-written update loop)."""

    site: Site
    some_arrived: bool = False
    missing: dict[int, weakref.ref] = field(default_factory=dict)


class Cuts(Undoing):
    """One per tracer.  The tracer reports cuts, ops, backwards; ``install()`` watches optimizer steps,
    ``.data`` and ``.grad``."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.cuts: dict[tuple, Cut] = {}
        self.marked: dict[int, tuple[weakref.ref, tuple[Cut, ...]]] = {}
        self.reads: dict[tuple, GradRead] = {}
        self.found: dict[tuple, ProbeFinding] = {}
        self.raising: tuple[Site | None, tuple[Cut, ...]] = (None, ())
        self.mixed: list[tuple[Cut, Site | None]] = []  # mixed values in the roots of the backward running now  # the latest backward and the copies it ran through
        self._undo: list = []
        self.on_data = None  # told of each `.data` of a tensor that requires grad (out, the user's frame)
        # Where the optimizer that holds a parameter was made (None when no optimizer the user made holds it): a
        # parameter an optimizer holds is one the user means to train, even before any step runs.
        self.optimizer_of = None
        # Whether a parameter was replaced in its module after an optimizer took it (``ModuleFlags.replaced_out``): it
        # starves because the model no longer uses it, which the replacement's own finding says; no cut is to blame.
        self.replaced_out = None
        # The optimizer whose zero_grad() ran last, until a backward or a step: the parameters the next backward is for.
        self.zeroed: weakref.ref | None = None
        # Values computed with grad mode off (the user's switch) from parameters: id -> (a weak reference, the ids of
        # those parameters); tensors written with such values: id -> (a weak reference, the parameters, the write).
        self.made: dict[int, tuple] = {}
        self.stored: dict[int, tuple] = {}
        self.params: dict[int, weakref.ref] = {}  # the parameters named in ``made`` and ``stored``
        # Dead loss terms of the running backward judged once it ends: (cut, the backward, grads before it).
        self.dead_now: list = []
        # Parameters an optimizer step found with a gradient, at any step of the run: trained by some backward.
        self.stepped: dict[int, weakref.ref] = {}
        # Cuts (not copies) that starved parameters at a step, judged at the end of the run (``findings``): (cut, the starved
        # parameters, the step's note, the harm).  A parameter a step of the run found with a gradient, before or
        # after, is trained by another backward (an actor-critic's two losses, each cutting the other's network).
        self.starved_at_step: list = []

    # -- installation --

    def install(self) -> None:
        handle = register_optimizer_step_pre_hook(self._on_step)
        self._undo.append(handle.remove)
        zero_grad = torch.optim.Optimizer.zero_grad
        cuts_ = self

        def watched_zero_grad(optimizer, *args, **kwargs):
            try:
                cuts_.zeroed = weakref.ref(optimizer)
            except TypeError:
                pass
            return zero_grad(optimizer, *args, **kwargs)

        watched_zero_grad.__wrapped__ = zero_grad
        torch.optim.Optimizer.zero_grad = watched_zero_grad
        self._undo.append(lambda: setattr(torch.optim.Optimizer, "zero_grad", zero_grad))
        base = torch._C.TensorBase
        cuts = self

        data = base.data

        def get_data(self):
            out = data.__get__(self)
            if self.requires_grad:
                try:
                    cuts._cut_by(out, self, sys._getframe(1))
                    if cuts.on_data is not None and torch.is_grad_enabled():
                        frame = sys._getframe(1)
                        if cuts.user.is_user(frame.f_code):  # the user's own `.data`, not a library's
                            cuts.on_data(out, frame)  # `h.data.numpy()` reads values out of the graph
                        del frame
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

        made = vars(_Parameter)["__new__"]
        make = made.__func__ if isinstance(made, staticmethod) else made

        def new_parameter(cls, data=None, requires_grad=True):
            out = make(cls, data, requires_grad)
            if isinstance(data, _Tensor) and data.grad_fn is not None:
                # A new leaf on the data of a tensor with a history: the history is not kept (a cut, as .detach())
                try:
                    cuts._cut_by(out, data, sys._getframe(1), _NEW_LEAF)
                except Exception as exc:  # noqa: BLE001
                    cuts.errors.append(f"cuts: {type(exc).__name__}: {exc}")
            return out

        new_parameter.__wrapped__ = make
        _Parameter.__new__ = staticmethod(new_parameter)
        self._undo.append(lambda: setattr(_Parameter, "__new__", made))

    # -- what the tracer reports --

    def on_detach(self, out, source, frame) -> None:
        """``out = source.detach()`` called by ``frame`` (the caller of the op), grad mode on."""
        self._cut_by(out, source, frame)

    def _cut_by(self, out, source, frame, how: str = "") -> None:
        if not torch.is_grad_enabled() or not self.user.is_user(frame.f_code):
            return
        site = frame_site(frame)
        key = (site.path, site.line, site.column)
        cut = self.cuts.get(key)
        if cut is None:
            if len(self.cuts) >= _CUTS:
                return
            cut = self.cuts[key] = Cut(site, how=how)
        for leaf in leaves_of(source):
            if id(leaf) not in cut.upstream:
                cut.upstream[id(leaf)] = weakref.ref(leaf)
        cut.fed, cut.judged, cut.terms = None, False, []
        self._mark(out, (cut,))

    def on_nograd(self, out, site: Site, switch: Site) -> None:
        """``out`` was computed with grad mode off (switched off by the user on line ``switch``) from a tensor that
        requires grad and has a graph, at ``site`` (the line, in the function that switched it off, that led to it):
        a cut whose result, summed alone into a loss, is a dead term."""
        key = ("nograd", site.path, site.line)
        cut = self.cuts.get(key)
        if cut is None:
            if len(self.cuts) >= _CUTS:
                return
            cut = self.cuts[key] = Cut(site, nograd=switch)
        cut.fed = None
        self._mark(out, (cut,))

    @staticmethod
    def is_copy(leaf, out) -> bool:
        """``out``, made with grad mode off from ``leaf`` (a leaf that requires grad), can take the leaf's place
        (``w = w - lr * w.grad``): it has the leaf's shape.  Features of a frozen encoder do not."""
        return isinstance(out, _Tensor) and not out.requires_grad and out.shape == leaf.shape

    def on_copy(self, leaf, out, frame) -> None:
        """``out`` is a copy of ``leaf`` (``is_copy``) made by the user's ``frame``."""
        site = frame_site(frame)
        key = ("copy", site.path, site.line)  # one per line: `w / w.norm()` copies twice
        cut = self.cuts.get(key)
        if cut is None:
            if len(self.cuts) >= _CUTS:
                return
            cut = self.cuts[key] = Cut(site, copy=True, shape=tuple(leaf.shape))
        if id(leaf) not in cut.upstream:
            cut.upstream[id(leaf)] = weakref.ref(leaf)
        cut.fed, cut.judged = None, False
        self._mark(out, (cut,))

    def on_op(self, args, kwargs, out, func=None) -> None:
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
            if func is not None and getattr(func, "overloadpacket", None) in _SUMS:
                self._dead_term(args, out)
                self._live_term(args, out)

    def _dead_term(self, args, out) -> None:
        """``loss + term`` (both scalars; ``loss`` requires grad) where ``term`` is marked and does not require grad:
        the term was computed only from cut results, so it adds nothing to any gradient (a dead loss term).  An
        element-wise sum of tensors (a straight-through estimator ``x + (q - x).detach()``) is no loss term."""
        # (Below autograd, the op's output has no autograd metadata yet: ask its operands.)
        if not (isinstance(out, _Tensor) and out.dim() == 0
                and any(isinstance(b, _Tensor) and b.requires_grad and b.dim() == 0 for b in args[:2])):
            return
        for a in args[:2]:
            if not isinstance(a, _Tensor) or a.requires_grad or a.dim() != 0:
                continue
            entry = self.marked.get(id(a))
            if entry is None or entry[0]() is not a:
                continue
            frame = user_frame(sys._getframe(3), self.user)
            if frame is None:
                return
            site = frame_site(frame)
            del frame
            for cut in entry[1]:
                if not cut.copy and cut.mix is None and cut.dead is None:
                    cut.dead = site

    def _live_term(self, args, out) -> None:
        """``loss + term`` (scalars) where ``term`` requires grad and is marked: remember, on its cuts, which leaves the
        term's graph reaches (judged when a backward of the loss runs, against the optimizer it is for)."""
        if not (isinstance(out, _Tensor) and out.dim() == 0):
            return
        frame = None
        for a in args[:2]:
            if not isinstance(a, _Tensor) or not a.requires_grad or a.dim() != 0 or a.grad_fn is None:
                continue
            entry = self.marked.get(id(a))
            if entry is None or entry[0]() is not a:
                continue
            cuts = [cut for cut in entry[1] if not cut.copy and cut.mix is None and cut.nograd is None
                    and cut.stored is None and len(cut.terms) < 8]
            if not cuts:
                continue
            if frame is None:
                frame = user_frame(sys._getframe(3), self.user)
                if frame is None:
                    return
            site = frame_site(frame)
            reached = frozenset(id(leaf) for leaf in leaves_of(a))
            for cut in cuts:
                cut.terms.append((site, reached))
        del frame

    def _judge_terms(self, cut: Cut, backward: Site | None) -> None:
        """The backward of a loss with terms computed from ``cut`` runs after ``zero_grad()`` of an optimizer: a term
        whose graph reaches none of that optimizer's parameters, while some of them are upstream of the cut, gets
        them no gradient (its only path to them went through the cut)."""
        optimizer = self.zeroed() if self.zeroed is not None else None
        if optimizer is None or not cut.terms:
            return
        held = {id(p): p for group in optimizer.param_groups for p in group["params"]}
        starved = [held[i] for i in cut.upstream if i in held]
        if not starved:
            return  # the cut keeps another network out of this step (a GAN's discriminator loss): meant
        dead = [site for site, reached in cut.terms if not any(i in held for i in reached)]
        if not dead:
            return
        key = (cut.site.path, cut.site.line)
        if key in self.found:
            return
        said = attribute_at(cut.site, "data") or attribute_at(cut.site, "detach") or expression_at(cut.site)
        what = (f"`{said}`" if said else "this cut") + cut.how
        summed = expression_at(dead[0])
        where = f"`{summed}` on line {dead[0].line}" if summed else f"line {dead[0].line}"
        at = f" at line {backward.line}" if backward else ""
        message = (f"{what} cuts the graph, and the loss term computed from its result (summed into the loss at "
                   f"{where}) reaches none of the {len(held)} parameter tensor(s) of the optimizer cleared for this "
                   f"backward(){at}, though {len(starved)} of them ({_shapes(starved)}) are upstream of the cut: "
                   "that term trains nothing the optimizer updates. Keep the history here if the term is meant to "
                   "train them")
        notes = [Note(dead[0], "the term is summed into the loss here")]
        if backward:
            notes.append(Note(backward, "the backward() whose term gives them no gradient"))
        cut.judged = True
        self.found[key] = ProbeFinding("GG103", "starved", cut.site, message, notes=tuple(notes), backward=backward)

    def on_backward(self, roots, backward: Site | None) -> None:
        copies: tuple[Cut, ...] = ()
        dead: list[Cut] = []
        for root in roots if isinstance(roots, (tuple, list)) else (roots,):
            entry = self.marked.get(id(root))
            if entry is not None and entry[0]() is root:
                for cut in entry[1]:
                    if cut.fed is None:
                        cut.fed = backward
                    if cut.mix is not None:
                        self.mixed.append((cut, backward))
                    elif cut.copy:
                        copies += (cut,)
                    elif cut.dead is not None:
                        dead.append(cut)
                    elif cut.partial is not None:
                        self._report_partial(cut, backward)
                    elif cut.terms:
                        self._judge_terms(cut, backward)
        if dead:
            self._dead_terms(dead, backward)
        self.zeroed = None
        self.raising = (backward, copies)

    def _dead_terms(self, dead: list[Cut], backward: Site | None) -> None:
        """Dead loss terms in this backward's roots.  A term that also read a stored no-grad value (``Cut.stored``)
        is judged once the backward has ended (``after_backward``): the parameters those values came from, left
        without a gradient, say which of the term's inputs stood where a value with a graph was needed."""
        with_stored = {(c.dead.path, c.dead.line) for c in dead if c.stored is not None}
        for cut in dead:
            if (cut.dead.path, cut.dead.line) not in with_stored:
                self._report_dead(cut, backward)
            elif cut.stored is None:
                self.dead_now.append((cut, backward, None))
            else:
                before = {}
                for i, ref in cut.sources.items():
                    p = ref()
                    if p is not None:
                        g = p.grad
                        before[i] = None if g is None else (g, g._version)
                self.dead_now.append((cut, backward, before))

    def _report_dead(self, cut: Cut, backward: Site | None) -> None:
        key = (cut.site.path, cut.site.line)
        if key in self.found:
            return
        said = attribute_at(cut.site, "data") or attribute_at(cut.site, "detach") or expression_at(cut.site)
        what = f"`{said}`" if said else "this cut"
        summed = expression_at(cut.dead)
        where = f"`{summed}` on line {cut.dead.line}" if summed else f"line {cut.dead.line}"
        at = f" at line {backward.line}" if backward else ""
        if cut.nograd is not None:
            switched = "here" if cut.nograd == cut.site else f"on line {cut.nograd.line}"
            what = (f"{what if said else 'this line'} runs with grad mode off (switched off {switched}) on a value that "
                    "requires grad, which")
        message = (f"{what} cuts the graph, and the loss term computed only from its result is added to the loss at "
                   f"{where}: that term has no gradient, so the backward(){at} trains nothing through it (it only "
                   "shifts the loss value)")
        notes = [Note(cut.dead, "the dead term is added to the loss here")]
        if backward:
            notes.append(Note(backward, "the backward() that gets no gradient from that term"))
        if cut.nograd is not None and cut.nograd != cut.site:
            notes.append(Note(cut.nograd, GRAD_OFF_NOTE))
        self.found[key] = ProbeFinding("GG103", "starved", cut.site, message, notes=tuple(notes), backward=backward)

    def after_backward(self, raised: bool) -> None:
        """The backward the latest ``on_backward`` saw has ended: a mixed value in its loss is a finding when it ran
        through (when torch raised, the older graph's saved tensors were the problem, and that finding says so)."""
        mixed, self.mixed = self.mixed, []
        if not raised:
            for cut, backward in mixed:
                self._report_mix(cut, backward)
        dead, self.dead_now = self.dead_now, []
        if dead:
            self._judge_stored(dead, raised)

    def _judge_stored(self, dead: list, raised: bool) -> None:
        """Dead terms that read stored no-grad values: where the parameters those values were computed from are held
        by an optimizer and got no gradient from the backward, the stored values are the input to change (the other
        inputs' cuts, a stop-gradient of an advantage, shape the gradient on purpose); else the cuts are reported as
        any dead term is."""
        groups: dict[tuple, list] = {}
        for entry in dead:
            groups.setdefault((entry[0].dead.path, entry[0].dead.line), []).append(entry)
        for group in groups.values():
            chosen = []
            for cut, backward, before in group:
                if cut.stored is None or raised:
                    continue
                starved = [p for p in (self.params.get(i, lambda: None)() for i in before or ()) if p is not None
                           and p.requires_grad and self._untouched(p, before[id(p)]) and self.optimizer_of is not None
                           and self.optimizer_of(p) is not False]
                if starved:
                    chosen.append((cut, backward, starved))
            if chosen:
                for cut, backward, starved in chosen:
                    self._report_stored(cut, backward, starved)
            else:
                for cut, backward, _ in group:
                    if cut.stored is None:
                        self._report_dead(cut, backward)
            for cut, _, _ in group:
                cut.dead = None  # judged: a later loss is judged on its own terms

    @staticmethod
    def _untouched(p, before) -> bool:
        """The backward gave ``p`` no gradient: none now, or the same tensor at the same version as before it."""
        g = p.grad
        return g is None or (before is not None and before[0] is g and g._version == before[1])

    def _report_stored(self, cut: Cut, backward: Site | None, starved: list) -> None:
        key = (cut.site.path, cut.site.line)
        if key in self.found:
            return
        said = expression_at(cut.site)
        what = f"`{said}`" if said else "this line"
        wrote = expression_at(cut.stored)
        store = f"`{wrote}` on line {cut.stored.line}" if wrote else f"line {cut.stored.line}"
        summed = expression_at(cut.dead)
        where = f"`{summed}` on line {cut.dead.line}" if summed else f"line {cut.dead.line}"
        at = f" at line {backward.line}" if backward else ""
        message = (f"{what} reads values that {store} stored after computing them with grad mode off from "
                   f"parameters: they have no graph, and the loss term built from them (added to the loss at {where}) "
                   f"has no gradient, so {len(starved)} parameter tensor(s) they were computed from ({_shapes(starved)}), "
                   f"held by an optimizer, get no gradient from the backward(){at}. Compute these values again with "
                   "grad mode on where the loss is built, instead of reading the stored copy")
        notes = [Note(cut.stored, "the values computed with grad mode off are stored here"),
                 Note(cut.dead, "the dead term is added to the loss here")]
        if backward:
            notes.append(Note(backward, "the backward() that gives those parameters no gradient"))
        self.found[key] = ProbeFinding("GG103", "starved", cut.site, message, notes=tuple(notes), backward=backward)

    # -- values computed with grad mode off, stored, read back --

    def on_made(self, args, out) -> None:
        """An op that writes nothing ran with grad mode off under the user's switch: an output computed from
        parameters (leaves that require grad), or from such outputs, is remembered with those parameters."""
        sources: set[int] = set()
        made, params = self.made, self.params
        for a in args:
            for t in (a,) if isinstance(a, _Tensor) else a if a.__class__ is list or a.__class__ is tuple else ():
                if not isinstance(t, _Tensor):
                    continue
                if t.requires_grad:
                    try:
                        leafy = t.grad_fn is None  # a leaf (a view made under no_grad has none either: its base's)
                    except RuntimeError:  # a view made under no_grad whose base was written: torch refuses
                        continue
                    if leafy:
                        leaf = t if t._base is None else t._base
                        sources.add(id(leaf))
                        if id(leaf) not in params:
                            params[id(leaf)] = weakref.ref(leaf)
                else:
                    entry = made.get(id(t))
                    if entry is not None and entry[0]() is t:
                        sources.update(entry[1])
        if sources:
            frozen = frozenset(sources)
            for t in (out,) if isinstance(out, _Tensor) else out if isinstance(out, (tuple, list)) else ():
                if isinstance(t, _Tensor) and not t.requires_grad:
                    self._remember(made, t, (frozen,))

    def on_store(self, written: list, args, frame) -> None:
        """An in-place op wrote ``written`` (the user's ``frame``): when one of its other operands is a value
        ``on_made`` remembered, the written tensors (and the tensors they are views of) now hold it."""
        sources: set[int] = set()
        ids = {id(t) for t in written}
        for a in args:
            for t in (a,) if isinstance(a, _Tensor) else a if a.__class__ is list or a.__class__ is tuple else ():
                if isinstance(t, _Tensor) and id(t) not in ids:
                    entry = self.made.get(id(t))
                    if entry is not None and entry[0]() is t:
                        sources.update(entry[1])
        if not sources:
            return
        site = frame_site(frame)
        for t in written:
            for held in (t, t._base):
                # (a parameter written from another network's parameters is a target or EMA copy: meant)
                if isinstance(held, _Tensor) and not held.requires_grad and not isinstance(held, _Parameter):
                    entry = self.stored.get(id(held))
                    old = entry[1] if entry is not None and entry[0]() is held else frozenset()
                    self._remember(self.stored, held, (old | sources, site))

    def on_read(self, args, out, frame_of) -> None:
        """An op, grad mode on, read a tensor ``on_store`` saw written with no-grad values: its result is marked with
        a ``Cut`` at the user's line that read it (``frame_of()``).  An op on ``on_made`` values and on nothing that
        requires grad passes their parameters on."""
        found = None
        stored, made = self.stored, self.made
        sources: set[int] | None = set() if made else None
        for a in args:
            for t in (a,) if isinstance(a, _Tensor) else a if a.__class__ is list or a.__class__ is tuple else ():
                if isinstance(t, _Tensor):
                    if found is None:
                        entry = stored.get(id(t))
                        if entry is not None and entry[0]() is t:
                            found = entry
                    if sources is not None:
                        if t.requires_grad:
                            sources = None  # autograd gives the result a graph
                        else:
                            entry = made.get(id(t))
                            if entry is not None and entry[0]() is t:
                                sources.update(entry[1])
        if sources:  # an op on a no-grad value alone (`v.squeeze()`) makes another one
            frozen = frozenset(sources)
            for t in (out,) if isinstance(out, _Tensor) else out if isinstance(out, (tuple, list)) else ():
                if isinstance(t, _Tensor):
                    self._remember(made, t, (frozen,))
        if found is None:
            return
        frame = frame_of()
        if frame is None:
            return
        site = frame_site(frame)
        del frame
        key = ("stored", site.path, site.line)
        cut = self.cuts.get(key)
        if cut is None:
            if len(self.cuts) >= _CUTS:
                return
            cut = self.cuts[key] = Cut(site, stored=found[2])
        cut.stored = found[2]
        for i in found[1]:
            ref = self.params.get(i)
            if ref is not None and i not in cut.sources:
                cut.sources[i] = ref
        cut.fed = None
        self._mark(out, (cut,))

    def _remember(self, table: dict, t, value: tuple) -> None:
        key = id(t)
        entry = table.get(key)
        if entry is not None and entry[0]() is t:
            table[key] = (entry[0], *value)
            return
        table[key] = (weakref.ref(t, forgetter(table, key)), *value)
        if len(table) > _MADE:
            del table[next(iter(table))]

    def on_mix(self, out, site: Site, step: Site) -> None:
        """``out``, computed at ``site``, combines values from before and after the optimizer step at ``step`` of the
        same parameters (``Tracer._mixing``)."""
        key = ("mix", site.path, site.line)
        cut = self.cuts.get(key)
        if cut is None:
            if len(self.cuts) >= _CUTS:
                return
            cut = self.cuts[key] = Cut(site, mix=step)
        self._mark(out, (cut,))

    def _report_mix(self, cut: Cut, backward: Site | None) -> None:
        key = (cut.site.path, cut.site.line)
        if key in self.found:
            return
        said = expression_at(Site(cut.site.path, cut.site.line))
        what = f"`{said}`" if said else "this line"
        step = expression_at(cut.mix)
        stepped = f"`{step}` on line {cut.mix.line}" if step else f"the optimizer step on line {cut.mix.line}"
        at = f" at line {backward.line}" if backward else ""
        message = (f"{what} combines a value computed before {stepped}, whose graph holds the parameters as they were "
                   "before that step updated them in place, with one computed after it from the updated parameters: "
                   f"the result mixes two versions of the same parameters, and the loss of the backward(){at} is built "
                   "from it (silently). Compute both before the step, or both after it")
        notes = [Note(cut.mix, "the optimizer step between the two values")]
        if backward:
            notes.append(Note(backward, "the backward() whose loss is built from the mixed value"))
        self.found[key] = ProbeFinding("GG101", "silent", cut.site, message, notes=tuple(notes), backward=backward)

    def on_partial_write(self, cut: Cut, site: Site) -> None:
        """The user's ``site`` wrote values with a history into part of a tensor computed from ``cut``."""
        if cut.partial is None:
            cut.partial = site

    def _report_partial(self, cut: Cut, backward: Site | None) -> None:
        key = (cut.site.path, cut.site.line)
        if key in self.found:
            return
        said = attribute_at(cut.site, "data") or attribute_at(cut.site, "detach") or expression_at(cut.site)
        what = f"`{said}`" if said else "this cut"
        written = expression_at(cut.partial)
        write = f"`{written}` on line {cut.partial.line}" if written else f"the write on line {cut.partial.line}"
        at = f" at line {backward.line}" if backward else ""
        message = (f"{what} cuts the graph of a tensor with a history; {write} then writes values with a history "
                   "into part of a tensor made from it, so only that part is differentiable: the other elements, "
                   f"computed by the graph before the cut, reach the backward(){at} with no path back to what "
                   "computed them. Keep the history here (no .data or .detach() on this line)")
        notes = [Note(cut.partial, "the write that gives only part of the tensor a history")]
        if backward:
            notes.append(Note(backward, "the backward() that gets no gradient through the cut elements"))
        self.found[key] = ProbeFinding("GG102", "silent", cut.site, message, notes=tuple(notes), backward=backward)

    def copy_behind_raise(self, backward: Site) -> Cut | None:
        """The copy the roots of the backward() at ``backward`` went through, when that backward raised
        because its roots do not require grad (the copy was all that stood for the parameter)."""
        site, copies = self.raising
        if site is None or copies == () or (site.path, site.line) != (backward.path, backward.line):
            return None
        return copies[0]

    def _on_step(self, optimizer, args, kwargs) -> None:
        try:
            held = {id(p): p for group in optimizer.param_groups for p in group["params"]}
            for i, p in held.items():
                if p.grad is not None and i not in self.stepped:
                    self.stepped[i] = weakref.ref(p)
            if not self.cuts:
                return
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
                starved = [held[i] for i in trained if held[i].grad is None and not self._replaced(held[i])]
                note = Note(step, "the optimizer step that trains them") if step else None
                harm = f"the optimizer step{_at(step)} finds no gradient on the parameter it trains"
                if starved and cut.copy:  # (a copy stands where the parameter stood, however it was trained before)
                    self._report(cut, starved, note, harm)
                elif starved:
                    self.starved_at_step.append((cut, starved, note, harm))
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
            if not t.requires_grad:
                self._copy_read(t, read)
            elif not read.some_arrived and self.optimizer_of is not None:
                self._judge_held(t, read)
        if read.some_arrived and read.missing:
            self._judge_read(read)

    def _pending(self, cut: Cut) -> bool:
        """Whether a step found ``cut`` starving parameters: judged at the end of the run, with that step's note."""
        return any(entry[0] is cut for entry in self.starved_at_step)

    def _replaced(self, p) -> bool:
        return self.replaced_out is not None and self.replaced_out(p)

    def _judge_held(self, t, read: GradRead) -> None:
        """The user's code reads ``.grad`` of a parameter an optimizer holds and finds none: a cut whose result fed
        a backward starved it (no step needs to run: the optimizer says it is meant to be trained)."""
        made = self.optimizer_of(t)
        if made is False or self._replaced(t):
            return
        for cut in self.cuts.values():
            if cut.fed is not None and id(t) in cut.upstream and not self._pending(cut):
                note = Note(read.site, "reads the missing gradient of a parameter an optimizer holds" +
                            (f" (the optimizer made on line {made.line})" if made is not None else ""))
                self._report(cut, [t], note, f"the `.grad` read{_at(read.site)} finds none")
                return

    def _judge_read(self, read: GradRead) -> None:
        """A hand-written update reads gradients here; some arrived, and these did not."""
        for cut in self.cuts.values():
            if cut.fed is None or self._pending(cut):
                continue
            starved = [r() for i, r in read.missing.items() if i in cut.upstream]
            starved = [p for p in starved if p is not None and not self._replaced(p)]
            if starved:
                self._report(cut, starved, Note(read.site, "the update that reads their missing gradient"),
                             f"the update{_at(read.site)} finds no gradient on the parameter")
        read.missing.clear()

    def _copy_read(self, t, read: GradRead) -> None:
        """The user's code reads ``.grad`` of a copy a backward ran through: the copy never gets one."""
        entry = self.marked.get(id(t))
        if entry is None or entry[0]() is not t:
            return
        for cut in entry[1]:
            if cut.copy and cut.fed is not None:
                self._report(cut, [t], Note(read.site, "reads `.grad` of the copy, which never gets one"),
                             f"the `.grad` read{_at(read.site)} finds none: the name no longer holds a trained tensor")

    def cut_of(self, t) -> Cut | None:
        """The `.detach()`/`.data` cut (not a copy, not a no_grad result) whose result ``t`` was computed from, if any."""
        entry = self.marked.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return next((cut for cut in entry[1] if not cut.copy and cut.nograd is None and cut.mix is None
                     and cut.stored is None), None)

    # -- marks --

    def _mark(self, out, cuts: tuple[Cut, ...]) -> None:
        for t in (out,) if isinstance(out, _Tensor) else out if isinstance(out, (tuple, list)) else ():
            if isinstance(t, _Tensor):
                key = id(t)
                entry = self.marked.get(key)
                if entry is not None and entry[0]() is t:
                    self.marked[key] = (entry[0], tuple(dict.fromkeys(entry[1] + cuts)))
                else:
                    self.marked[key] = (weakref.ref(t, forgetter(self.marked, key)), cuts)

    # -- results --

    def _report(self, cut: Cut, starved: list, related: Note | None, harm: str) -> None:
        key = (cut.site.path, cut.site.line)
        if key in self.found:
            return
        if cut.copy:
            self.found[key] = copy_finding(cut, starved, related, harm)
            return
        said = attribute_at(cut.site, "data") or expression_at(cut.site)
        what = (f"`{said}`" if said else "this cut") + cut.how
        shapes = _shapes(starved)
        backward = f" at line {cut.fed.line}" if cut.fed else ""
        message = (f"{what} cuts the graph: {len(starved)} trained parameter tensor(s) the forward used before it "
                   f"({shapes}) get no gradient from the backward(){backward} its result feeds, so they are never "
                   "trained by it")
        notes = [n for n in (related, Note(cut.fed, "the backward() that gives them no gradient") if cut.fed else None)
                 if n is not None]
        self.found[key] = ProbeFinding("GG103", "starved", cut.site, message, notes=tuple(notes), backward=cut.fed)

    def findings(self) -> list[ProbeFinding]:
        """Cuts judged at an optimizer step or at a hand-written update's reads of ``.grad``."""
        pending, self.starved_at_step = self.starved_at_step, []
        for cut, starved, note, harm in pending:
            never = [p for p in starved if self.stepped.get(id(p), lambda: None)() is not p]
            if never:
                self._report(cut, never, note, harm)
        return list(self.found.values())


def _at(site: Site | None) -> str:
    return f" at line {site.line}" if site else ""


def _shapes(tensors: list) -> str:
    return ", ".join(str(list(t.shape)) for t in tensors[:4]) + (", …" if len(tensors) > 4 else "")


def _copy_said(cut: Cut) -> str:
    """The statement that made the copy (``w = w - lr * w.grad``), not one op of it."""
    said = expression_at(Site(cut.site.path, cut.site.line))
    return f"`{said}`" if said else "this line"


def copy_finding(cut: Cut, starved: list, related: Note | None, harm: str) -> ProbeFinding:
    """GG109: a copy made under no_grad stood for a trained parameter in a backward, and ``harm`` followed."""
    message = (f"{_copy_said(cut)} runs under no_grad on a parameter that requires grad ({_shapes(starved)}) and "
               f"makes a new tensor that does not: the backward(){_at(cut.fed)} runs through that copy, and {harm}")
    notes = [n for n in (related, Note(cut.fed, "the backward() that runs through the copy") if cut.fed else None)
             if n is not None]
    return ProbeFinding("GG109", "starved", cut.site, message, notes=tuple(notes), backward=cut.fed)


def copy_raise_finding(cut: Cut, backward: Site, torch_message: str) -> ProbeFinding:
    """GG109, loud: the backward's roots went through the copy, and nothing else required grad."""
    first = torch_message.split("\n", 1)[0]
    message = (f"{_copy_said(cut)} runs under no_grad on a leaf tensor that requires grad ({list(cut.shape)}) and makes a "
               f"new tensor that does not: the backward() at line {backward.line} runs through that copy with "
               f"nothing else requiring grad, and raises: {first}")
    return ProbeFinding("GG109", "raised", cut.site, message, torch_message=torch_message,
                        notes=(Note(backward, f"backward() raises here: {first}"),), backward=backward)
