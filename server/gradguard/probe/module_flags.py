"""Assignments to a module's attributes that leave training as it was (rule GG103).  Imports torch.

**``module.requires_grad = False``**: a plain attribute on a module.

``nn.Module`` has no ``requires_grad`` of its own (``requires_grad_()`` is the method that reaches its
parameters), so assigning it stores a Python attribute that nothing in torch reads: the module's parameters keep
requiring grad and go on receiving gradients.  The probe wraps ``Module.__setattr__`` while the user's code runs
and remembers where such a flag was set (by the user's code, to ``False``, on a module that has no ``requires_grad``
of its own: none in its class, none set on it before).  The proof is a later ``backward()`` whose graph reaches one of that module's
parameters, still requiring grad, although the flag said ``False``: a finding at the assignment.

**A parameter (or a submodule) replaced after an optimizer took the old one**: ``q.scale = nn.Parameter(v)``,
``model.fc = nn.Linear(...)``.  The optimizer keeps the old tensors, which the model no longer uses; the new ones
get gradients that no optimizer applies.  Optimizers are known from ``Optimizer.add_param_group`` (their
constructor calls it); the proof is a backward whose graph reaches a new parameter that no live optimizer holds,
while an optimizer still holds the one it replaced: a finding at the assignment.
"""

from __future__ import annotations

import dataclasses
import sys
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from .frames import UserCode, frame_site, frame_sites, user_frame
from .merge import REPLACED_NOTE, REPLACING_CALL_NOTE
from .model import Note, ProbeFinding, Site
from .source import enclosing_function, expression_at

_Module = torch.nn.Module
_Parameter = torch.nn.Parameter
_Optimizer = torch.optim.Optimizer
_compiling = torch.compiler.is_compiling
_WALK = 50_000  # graph nodes looked at per backward while a flag is pending
_KEPT = 64  # flags remembered


@dataclass
class Replaced:
    """A parameter or submodule assigned over one whose parameters an optimizer holds."""

    site: Site
    callers: tuple
    new: list  # weak references to the new parameters
    holder: Any  # a weak reference to an optimizer that holds the old ones
    optimizer_site: Site | None
    kind: str  # the new value's class name
    name: str
    # The new parameters have the old ones' shapes, one for one: their values could be copied into the old tensors
    # (the optimizer kept); otherwise the model's structure changed and only a new optimizer fits it.
    same_shapes: bool = True
    # The line, in the innermost of the user's functions that holds the optimizer in a local variable (or an
    # attribute of an instance one holds), that led to the replacement (the replacement's own line when that
    # function made it).
    holder_site: Site | None = None
    # The lines of the user's functions that called, outwards, the one that made the optimizer (its helper's call).
    optimizer_callers: tuple = ()


@dataclass
class Flag:
    """One ``module.requires_grad = False`` that has not yet been shown to do nothing."""

    site: Site
    module: Any  # a weak reference to the module
    name: str  # its class name


class ModuleFlags:
    """One per tracer.  ``pending``: flags set, no backward has yet reached their module's parameters."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.pending: list[Flag] = []
        self.found: list[ProbeFinding] = []
        self._original = None
        self._add_group = None
        self.optimizers: weakref.WeakKeyDictionary[Any, Site | None] = weakref.WeakKeyDictionary()
        self.made_by: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()  # -> optimizer_callers
        self.replaced: list[Replaced] = []
        # Parameters an optimizer held when their module was given new ones in their place: id -> a weak reference.
        self._replaced_out: dict[int, weakref.ref] = {}

    def install(self) -> None:
        original = self._original = _Module.__setattr__
        flags = self

        def __setattr__(module, name, value):
            if _compiling():
                return original(module, name, value)  # TorchDynamo tracing a forward: torch's own method, untouched
            if name == "requires_grad" and value is False:
                try:
                    flags._on_flag(module)
                except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
                    flags.errors.append(f"module flag: {type(exc).__name__}: {exc}")
            elif flags.optimizers and isinstance(value, (_Parameter, _Module)):
                try:
                    flags._on_replace(module, name, value)
                except Exception as exc:  # noqa: BLE001
                    flags.errors.append(f"module replace: {type(exc).__name__}: {exc}")
            return original(module, name, value)

        __setattr__.__wrapped__ = original
        _Module.__setattr__ = __setattr__
        add_group = self._add_group = _Optimizer.add_param_group

        def add_param_group(optimizer, param_group):
            out = add_group(optimizer, param_group)
            try:
                if optimizer not in flags.optimizers:
                    sites, _ = frame_sites(sys._getframe(1), flags.user, limit=4)
                    flags.optimizers[optimizer] = sites[0] if sites else None
                    flags.made_by[optimizer] = tuple(sites[1:])
            except Exception as exc:  # noqa: BLE001
                flags.errors.append(f"optimizer: {type(exc).__name__}: {exc}")
            return out

        add_param_group.__wrapped__ = add_group
        _Optimizer.add_param_group = add_param_group

    def uninstall(self) -> None:
        if self._original is not None:
            _Module.__setattr__ = self._original
            self._original = None
        if self._add_group is not None:
            _Optimizer.add_param_group = self._add_group
            self._add_group = None

    def optimizer_of(self, p):
        """Where the optimizer that holds ``p`` was made (None when unknown), or False when no optimizer holds it."""
        for o in list(self.optimizers.keys()):
            if any(q is p for group in o.param_groups for q in group["params"]):
                return self.optimizers.get(o)
        return False

    def replaced_out(self, p) -> bool:
        """Whether ``p``, held by an optimizer, was replaced in its module by a new parameter or submodule: it gets no
        gradient from the model's forward any more, whatever cut its values went through."""
        ref = self._replaced_out.get(id(p))
        return ref is not None and ref() is p

    def _holders(self, params: list) -> list:
        ids = {id(p) for p in params}
        return [o for o in list(self.optimizers.keys())
                if any(id(p) in ids for group in o.param_groups for p in group["params"])]

    def _on_replace(self, module, name, value) -> None:
        if isinstance(value, _Parameter):
            old = module.__dict__.get("_parameters", {}).get(name)
            old_params, new_params = ([old], [value]) if old is not None and old is not value else ([], [])
        else:
            old = module.__dict__.get("_modules", {}).get(name)
            if old is None or old is value:
                return
            old_params = list(old.parameters())
            kept = {id(p) for p in old_params}
            new_params = [p for p in value.parameters() if id(p) not in kept]
        if not old_params or not new_params:
            return
        holders = self._holders(old_params)
        if not holders:
            return
        self._replaced_out.update((id(p), weakref.ref(p)) for p in old_params)
        sites, _ = frame_sites(sys._getframe(2), self.user, limit=4)
        if not sites or any(r.site == sites[0] for r in self.replaced):
            return
        same = len(old_params) == len(new_params) and all(o.shape == n.shape for o, n in zip(old_params, new_params))
        holder_site = None
        frame, depth = sys._getframe(2), 0
        while frame is not None and depth < 32:
            if self.user.is_user(frame.f_code) and _holds(list(frame.f_locals.values()), holders[0]):
                holder_site = frame_site(frame)
                break
            frame, depth = frame.f_back, depth + 1
        del frame
        self.replaced.append(Replaced(sites[0], tuple(sites[1:]), [weakref.ref(p) for p in new_params],
                                      weakref.ref(holders[0]), self.optimizers.get(holders[0]),
                                      type(value).__name__, name, same, holder_site,
                                      self.made_by.get(holders[0], ())))
        del self.replaced[:-_KEPT]

    def _on_flag(self, module) -> None:
        if "requires_grad" in vars(module) or any("requires_grad" in vars(cls) for cls in type(module).__mro__):
            return  # the module keeps a requires_grad of its own (a property, an attribute its class sets and reads)
        if not any(True for _ in module.parameters()):
            return
        frame = user_frame(sys._getframe(2), self.user)
        if frame is None:
            return
        site = frame_site(frame)
        del frame
        if any(f.site == site and f.module() is module for f in self.pending):
            return
        self.pending.append(Flag(site, weakref.ref(module), type(module).__name__))
        del self.pending[:-_KEPT]

    def on_backward(self, roots, backward: Site | None) -> None:
        """A backward from ``roots`` is about to run: the parameters its graph reaches, against the flags and the
        replaced parameters."""
        live = [f for f in self.pending if f.module() is not None]
        self.pending = live
        if not live and not self.replaced:
            return
        reached = _leaves(roots)
        if self.replaced and reached:
            self._replaced_reached(reached, backward)
        if not reached:
            return
        for flag in list(live):
            module = flag.module()
            if module is None:
                continue
            trained = [p for p in module.parameters() if p.requires_grad and id(p) in reached]
            if not trained:
                continue
            self.pending.remove(flag)
            said = expression_at(flag.site)
            total = sum(1 for _ in module.parameters())
            where = f" at line {backward.line}" if backward is not None else ""
            notes = (Note(backward, "this backward() still gives the module's parameters gradients"),) \
                if backward is not None else ()
            self.found.append(ProbeFinding(
                "GG103", "silent", flag.site,
                f"`{said or 'requires_grad = False'}` sets a plain attribute on a module (`{flag.name}`): nn.Module has "
                f"no requires_grad of its own, so its parameters still require grad, and the backward(){where} gives "
                f"{len(trained)} of its {total} parameter tensor(s) gradients; freeze them with "
                "requires_grad_(False) on the module (or set requires_grad on each parameter)",
                notes=notes, backward=backward))

    def _replaced_reached(self, reached: set, backward: Site | None) -> None:
        for r in list(self.replaced):
            new = [p for p in (ref() for ref in r.new) if p is not None]
            holder = r.holder()
            if not new or holder is None:
                self.replaced.remove(r)
                continue
            used = [p for p in new if id(p) in reached and p.requires_grad]
            if not used or self._holders(used):
                continue  # not used by this backward, or an optimizer was given the new parameters
            self.replaced.remove(r)
            said = expression_at(r.site)
            made = f" (made on line {r.optimizer_site.line})" if r.optimizer_site is not None else ""
            where = f" at line {backward.line}" if backward is not None else ""
            what = "a parameter" if r.kind == "Parameter" else f"a submodule (`{r.kind}`)"
            notes = []
            if r.optimizer_site is not None:
                notes.append(Note(r.optimizer_site, "the optimizer that holds the replaced parameters is made here"))
            if backward is not None:
                notes.append(Note(backward, "this backward() gives the new parameters gradients no optimizer applies"))
            message = (f"`{said or r.name + ' = ...'}` replaces {what} of a module after an optimizer{made} took its "
                       f"parameters: the optimizer still holds the old tensors, which the model no longer uses, and the "
                       f"backward(){where} gives {len(used)} new parameter tensor(s) gradients that no optimizer "
                       "applies; copy the new values into the existing parameter (with torch.no_grad(): p.copy_(...)), "
                       "or give the optimizer the new parameters")
            later = _later_call(r)
            if later is not None:
                # The replacement runs inside a helper, reached from a function that holds the optimizer: the line to
                # change is there (the optimizer made before the call, or the call that leaves the optimizer out).
                place, call = later
                called = expression_at(call)
                if place != call:
                    message = (f"the optimizer made here takes the model's parameters before `{called or 'the call'}` "
                               f"on line {call.line} replaces {what} of the model (line {r.site.line}): make the "
                               "optimizer after that call. " + message)
                else:
                    message = (f"`{called or 'this call'}` leads to a helper that replaces {what} of the model (line "
                               f"{r.site.line}) while the optimizer this function uses holds the old parameters: give "
                               "the optimizer the new ones here (or make it after the replacement). " + message)
                notes = [Note(r.site, REPLACED_NOTE)] + (
                    [Note(call, REPLACING_CALL_NOTE)] if call != place else []) + [
                    n for n in notes if n.site != place]
                placed = next((i for i, f in enumerate(self.found) if f.site == place and f.notes
                               and f.notes[0].message == REPLACED_NOTE), None)
                if placed is not None:  # another replacement by the same call: one finding at the optimizer
                    first = self.found[placed]
                    self.found[placed] = dataclasses.replace(
                        first, origins=first.origins + tuple(o for o in (r.site, *r.callers) if o not in first.origins),
                        count=first.count + 1)
                    continue
                self.found.append(ProbeFinding("GG103", "silent", place, message, notes=tuple(notes),
                                               callers=(), origins=(r.site, *r.callers), backward=backward))
                continue
            self.found.append(ProbeFinding(
                "GG103", "silent", r.site, message, notes=tuple(notes), callers=r.callers, backward=backward))

    def findings(self) -> list[ProbeFinding]:
        return list(self.found)


def _holds(values: list, optimizer) -> bool:
    """A local variable holds ``optimizer``, or an instance one holds has it as an attribute (``self.opt``), as the
    static analysis finds it at hand (``inference/interpreter.py``, ``_replacement_site``)."""
    for v in values:
        if v is optimizer:
            return True
        own = getattr(v, "__dict__", None)
        if isinstance(own, dict) and any(x is optimizer for x in list(own.values())):
            return True
    return False


def _later_call(r: "Replaced") -> tuple[Site, Site] | None:
    """When the replacement ``r`` changes the model's structure (parameters of other shapes) inside a helper, called
    from a function that holds the optimizer in a local variable (or an instance's attribute): (the line to change, the call there that leads to
    the replacement) -- the optimizer's own line when that function made it before the call (make it after), or its
    line that called the helper that made it (``opt = make_optimizer(model)``, a closure that binds it ``nonlocal``:
    call that after), else the call (the function that uses the optimizer hands the helper the model without it).
    None otherwise."""
    call = r.holder_site
    if r.same_shapes or call is None or call == r.site:
        return None  # new values of the same shapes (copy them into the old parameters), or no helper in between
    for made in (r.optimizer_site, *r.optimizer_callers):
        if made is not None and made.path == call.path and made.line < call.line \
                and enclosing_function(made) == enclosing_function(call):
            return made, call
    return call, call


def _leaves(roots) -> set[int]:
    """The ids of the leaf tensors (``AccumulateGrad`` nodes) a backward from ``roots`` reaches."""
    stack = []
    for root in roots if isinstance(roots, (tuple, list)) else (roots,):
        node = root.grad_fn if isinstance(root, torch.Tensor) else getattr(root, "node", None)
        if node is not None:
            stack.append(node)
    seen: set[int] = set()
    leaves: set[int] = set()
    while stack and len(seen) < _WALK:
        node = stack.pop()
        variable = getattr(node, "variable", None)
        if variable is not None:
            leaves.add(id(variable))
            continue
        key = node._sequence_nr()
        if key in seen:
            continue
        seen.add(key)
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return leaves
