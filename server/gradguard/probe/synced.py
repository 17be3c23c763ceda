"""A module that was just loaded with another's weights, replaced by that other module itself (rule GG101).
Imports torch.

``target.load_state_dict(online.state_dict())`` copies the weights of a trained module into another one (a target
network, a teacher, a frozen snapshot): the copy stays fixed while the optimizer updates the original.  Replacing the
copy by the original afterwards (``self.target = self.online``) makes the name hold the trained module itself: the
copy is dropped without having computed anything, and every optimizer step now changes what is read through that
name, silently.

The probe wraps ``Module.load_state_dict``: a load by the user's code whose state tensors share memory with a
module's parameters (a ``state_dict()`` of it) is remembered, with a hook that notes any later call of the loaded
module.  When the loaded module is freed before any such call, the statement that dropped it is the user's line that
ran then (a weak reference's callback runs inside it); when what that statement stored in its place is the module
whose weights were loaded, and an optimizer the user made holds its parameters, the next step of that optimizer makes
it a finding at that statement.  Modules freed in a reference cycle (by the garbage collector) are not placed.
"""

from __future__ import annotations

import gc
import sys
import weakref
from dataclasses import dataclass, field

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from .frames import UserCode, frame_site, user_frame
from .kept import Undoing
from .model import Note, ProbeFinding, Site
from .source import attribute_assigned, expression_at

_Module = torch.nn.Module
_Tensor = torch.Tensor
_LOADS = 256  # loaded modules watched at once
_SETATTR = vars(_Module)["__setattr__"].__code__  # torch's own (the tracer wraps it while the user's code runs)


@dataclass
class _Load:
    site: Site
    storages: frozenset  # the data pointers of the loaded state's tensors
    used: bool = False
    handle: object = None


@dataclass
class _Replaced:
    site: Site
    load: Site
    params: dict = field(default_factory=dict)  # id -> weak reference: the parameters of the module stored instead


class SyncedCopies(Undoing):
    """One per tracer: ``install()`` watches ``load_state_dict`` and optimizer steps."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.loads: dict[int, tuple[weakref.ref, _Load]] = {}
        self.replaced: list[_Replaced] = []
        self.found: dict[tuple, ProbeFinding] = {}
        self.optimizer_of = None  # ``ModuleFlags.optimizer_of``
        self.collecting = False  # the garbage collector runs: a module freed now was not dropped by the running line
        self._undo: list = []

    def install(self) -> None:
        original = _Module.load_state_dict
        watcher = self

        def load_state_dict(module, *args, **kwargs):
            out = original(module, *args, **kwargs)
            try:
                state = args[0] if args else kwargs.get("state_dict")
                watcher._on_load(module, state, sys._getframe(1))
            except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                watcher.errors.append(f"synced copies: {type(exc).__name__}: {exc}")
            return out

        load_state_dict.__wrapped__ = original
        _Module.load_state_dict = load_state_dict
        self._undo.append(lambda: setattr(_Module, "load_state_dict", original))
        self._undo.append(register_optimizer_step_pre_hook(self._on_step).remove)

        def collecting(phase, info):
            watcher.collecting = phase == "start"

        gc.callbacks.append(collecting)
        self._undo.append(lambda: gc.callbacks.remove(collecting))

    def uninstall(self) -> None:
        super().uninstall()
        for ref, load in list(self.loads.values()):
            if load.handle is not None:
                load.handle.remove()
        self.loads.clear()

    def _on_load(self, module, state, frame) -> None:
        frame = user_frame(frame, self.user)
        if frame is None or not hasattr(state, "values") or len(self.loads) >= _LOADS:
            return
        storages = frozenset(t.data_ptr() for t in state.values() if isinstance(t, _Tensor) and t.numel())
        if not storages:
            return
        load = _Load(frame_site(frame), storages)
        del frame
        key = id(module)

        def called(*_):
            load.used = True

        load.handle = module.register_forward_pre_hook(called)
        self.loads[key] = (weakref.ref(module, self._dropper(key)), load)

    def _dropper(self, key: int):
        def dropped(ref):
            try:
                entry = self.loads.get(key)
                if entry is None or entry[0] is not ref:
                    return
                del self.loads[key]
                if not entry[1].used and not self.collecting:
                    self._on_drop(entry[1], sys._getframe(1))
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"synced copies: {type(exc).__name__}: {exc}")
        return dropped

    def _on_drop(self, load: _Load, frame) -> None:
        """The loaded module was freed before any call, while ``frame`` ran: what was stored in its place?"""
        stored = None
        if frame is not None and frame.f_code is _SETATTR:
            stored = frame.f_locals.get("value")  # `holder.name = value` on a module
        frame = user_frame(frame, self.user)
        if frame is None:
            return
        site = frame_site(frame)
        if stored is None:
            stored = _stored_attribute(site, frame)
        del frame
        if not isinstance(stored, _Module):
            return
        params = list(stored.parameters())
        if not params or not all(p.data_ptr() in load.storages for p in params if p.numel()):
            return  # not the module whose weights were loaded
        if self.optimizer_of is None or all(self.optimizer_of(p) is False for p in params):
            return  # not a trained module
        self.replaced.append(_Replaced(site, load.site, {id(p): weakref.ref(p) for p in params}))
        del self.replaced[:-16]

    def _on_step(self, optimizer, args, kwargs) -> None:
        try:
            if not self.replaced:
                return
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            for r in list(self.replaced):
                if any(i in held and ref() is not None for i, ref in r.params.items()):
                    self.replaced.remove(r)
                    frame = user_frame(sys._getframe(1), self.user)
                    step = frame_site(frame) if frame is not None else None
                    del frame
                    self._report(r, len(r.params), step)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"synced copies: {type(exc).__name__}: {exc}")

    def _report(self, r: _Replaced, count: int, step: Site | None) -> None:
        key = (r.site.path, r.site.line)
        if key in self.found:
            return
        said = expression_at(Site(r.site.path, r.site.line))
        what = f"`{said}`" if said else "this assignment"
        loaded = expression_at(Site(r.load.path, r.load.line))
        load = f"`{loaded}` on line {r.load.line}" if loaded else f"the load_state_dict on line {r.load.line}"
        at = f" (the step on line {step.line})" if step else ""
        message = (f"{what} drops the module that {load} filled with this module's weights, before that copy computed "
                   f"anything, and stores the module being trained itself in its place ({count} parameter tensor(s) an "
                   f"optimizer holds): every optimizer step{at} now changes what is read through this name, so the "
                   "copy no longer stays fixed. Keep the copy (remove this assignment)")
        notes = [Note(r.load, "the weights are copied here")]
        if step is not None:
            notes.append(Note(step, "an optimizer step that changes the module the name now holds"))
        self.found[key] = ProbeFinding("GG101", "silent", r.site, message, notes=tuple(notes), backward=None)

    def findings(self) -> list[ProbeFinding]:
        return list(self.found.values())


def _stored_attribute(site: Site, frame):
    """For the statement ``name.attr = ...`` at ``site`` (a plain object), what ``name.attr`` holds now."""
    assigned = attribute_assigned(site)
    if assigned is None:
        return None
    attributes = getattr(frame.f_locals.get(assigned[0]), "__dict__", None)
    return attributes.get(assigned[1]) if isinstance(attributes, dict) else None
