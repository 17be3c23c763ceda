"""An optimizer left holding the originals of parameters that were copied (rule GG103).  Imports torch.

``copy.deepcopy(model)`` gives the copy new parameters; an optimizer made over the original's parameters still holds
the originals.  Code that trains the copy with that optimizer backpropagates into the copy and steps the originals:
the copy never learns.  The probe records each ``nn.Parameter`` deep copy (its original, the user's line that asked
for it) and, at each optimizer step, reports a step whose parameters all lack a gradient while copies of them,
made by the user's deepcopy, have one and no optimizer the user made holds those copies (a copy trained by an
optimizer of its own is the right way; one whose step is still to come is not this).

Serialising an optimizer object on its own (``torch.save(optimizer, f)``, apart from its module) breaks the same
link: loading gives it copies of the parameters, not the module's.  A step whose parameters all lack a gradient,
after such a save, looks (once) for parameters held by no optimizer the user made that have a gradient and equal a
held one (same shape and values: the copy of the same tensor); it is placed at that ``torch.save`` call.  The finding is placed where the copy is handed on (the first statement of
the copying function that reads the name the copy was bound to: it pairs the copy with the old optimizer), else at
the copy.
"""

from __future__ import annotations

import gc
import sys
import weakref

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .frames import UserCode, frame_site, user_frame
from .kept import Undoing
from .model import Note, ProbeFinding, Site
from .source import expression_at, first_reader_of_binding

_Parameter = torch.nn.Parameter
_Optimizer = torch.optim.Optimizer
_COPIES = 100_000  # parameter copies remembered (oldest dropped)


class CopiedParameters(Undoing):
    """One per tracer: ``install()`` watches parameter deep copies and optimizer steps."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        # id(original) -> [(weak copy, the user's site of the deepcopy)]
        self.copies: dict[int, list[tuple[weakref.ref, Site]]] = {}
        self.found: dict[tuple, ProbeFinding] = {}
        self._undo: list = []
        # Where the optimizer that holds a parameter was made, or False when none the user made holds it
        # (``ModuleFlags.optimizer_of``).
        self.optimizer_of = None
        self.saved_apart: list[Site] = []  # the user's torch.save calls of an optimizer object on its own
        self._searched = False

    def install(self) -> None:
        original = vars(_Parameter)["__deepcopy__"]
        watcher = self

        def __deepcopy__(param, memo):
            fresh = id(param) not in memo
            out = original(param, memo)
            if fresh:
                try:
                    watcher._on_copy(param, out, sys._getframe(1))
                except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                    watcher.errors.append(f"copies: {type(exc).__name__}: {exc}")
            return out

        __deepcopy__.__wrapped__ = original
        _Parameter.__deepcopy__ = __deepcopy__
        self._undo.append(lambda: setattr(_Parameter, "__deepcopy__", original))
        self._undo.append(register_optimizer_step_pre_hook(self._on_step).remove)
        save = torch.save

        def watched_save(obj, *args, **kwargs):
            if isinstance(obj, _Optimizer):
                try:
                    frame = user_frame(sys._getframe(1), watcher.user)
                    if frame is not None and len(watcher.saved_apart) < 64:
                        watcher.saved_apart.append(frame_site(frame))
                    del frame
                except Exception as exc:  # noqa: BLE001
                    watcher.errors.append(f"copies: {type(exc).__name__}: {exc}")
            return save(obj, *args, **kwargs)

        watched_save.__wrapped__ = save
        torch.save = watched_save
        self._undo.append(lambda: setattr(torch, "save", save))

    def _on_copy(self, param, out, frame) -> None:
        caller = user_frame(frame, self.user)
        if caller is None:
            return
        site = frame_site(caller)
        del caller
        if sum(len(v) for v in self.copies.values()) >= _COPIES:
            return
        self.copies.setdefault(id(param), []).append((weakref.ref(out), site))

    def _on_step(self, optimizer, args, kwargs) -> None:
        try:
            if not self.copies and not self.saved_apart:
                return
            held = [p for group in optimizer.param_groups for p in group["params"]]
            if not held or any(p.grad is not None for p in held):
                return
            trained: list[tuple[object, Site]] = []
            for p in held:
                for ref, site in self.copies.get(id(p), ()):
                    copy = ref()
                    if copy is not None and copy is not p and copy.grad is not None and (
                            self.optimizer_of is None or self.optimizer_of(copy) is False):
                        trained.append((copy, site))
            frame = user_frame(sys._getframe(1), self.user)
            step = frame_site(frame) if frame is not None else None
            del frame
            if trained:
                self._report(trained, len(held), step)
            elif self.saved_apart and not self._searched:
                self._searched = True  # one search of the live parameters per run
                twins = self._twins(held)
                if twins:
                    self._report_saved(twins, len(held), step)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"copies: {type(exc).__name__}: {exc}")

    def _report(self, trained: list, held: int, step: Site | None) -> None:
        made = trained[0][1]
        handed = first_reader_of_binding(made)
        place = handed or made
        key = (place.path, place.line)
        if key in self.found:
            return
        copied = expression_at(made)
        said = expression_at(Site(place.path, place.line)) if handed else None
        at = f" on line {step.line}" if step else ""
        copy = f"`{copied}` on line {made.line}" if copied else f"the deep copy on line {made.line}"
        lead = (f"`{said}` hands on the copy made by {copy}" if said else f"{copy} copies the parameters")
        message = (f"{lead}, while the optimizer stepped{at} still holds the original parameters ({held} tensor(s)): "
                   f"a backward gave {len(trained)} parameter(s) of the copy a gradient, and the step finds none on "
                   "the tensors it updates, so the copy is never trained. Give the copy an optimizer over its own "
                   "parameters")
        notes = [Note(made, "the parameters are copied here")] if handed else []
        if step is not None:
            notes.append(Note(step, "the optimizer step that holds the original parameters"))
        self.found[key] = ProbeFinding("GG103", "starved", place, message, notes=tuple(notes), backward=None)

    def _twins(self, held: list) -> list:
        """Parameters that have a gradient, that no optimizer the user made holds, and that equal one of ``held``."""
        shapes = {}
        for p in held:
            shapes.setdefault((tuple(p.shape), p.dtype), []).append(p)
        ids = {id(p) for p in held}
        out = []
        for obj in gc.get_objects():
            # type(), not isinstance(): a dead weakref.proxy among gc's objects raises on any other look at it
            if not issubclass(type(obj), _Parameter) or id(obj) in ids or obj.grad is None:
                continue
            same = shapes.get((tuple(obj.shape), obj.dtype))
            if not same or (self.optimizer_of is not None and self.optimizer_of(obj) is not False):
                continue
            with torch.no_grad():
                if any(torch.equal(obj, p) for p in same):
                    out.append(obj)
        return out

    def _report_saved(self, twins: list, held: int, step: Site | None) -> None:
        place = self.saved_apart[-1]
        key = (place.path, place.line)
        if key in self.found:
            return
        said = expression_at(place)
        at = f" on line {step.line}" if step else ""
        message = (f"`{said or 'torch.save'}` serialises an optimizer object apart from its module, so loading gives "
                   f"it copies of the parameters, not the module's: the optimizer stepped{at} holds {held} tensor(s) "
                   f"with no gradient, while {len(twins)} parameter(s) equal to them, held by no optimizer, got one "
                   "from the backward; the module is never trained. Serialise the module and its optimizer together "
                   "(one object), or build the optimizer again over the loaded module's parameters")
        notes = (Note(step, "the optimizer step that finds no gradient"),) if step is not None else ()
        self.found[key] = ProbeFinding("GG103", "starved", place, message, notes=notes, backward=None)

    def findings(self) -> list[ProbeFinding]:
        return list(self.found.values())
